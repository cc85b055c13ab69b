//! Call handles: the awaitable, abortable result of a session operation.
//!
//! An operation runs as its own tokio task. Its [`CallHandle`] resolves to the operation's
//! result, aborts it with [`CallHandle::abort`], and hands out its [`Event`] stream once.

use std::future::{Future, IntoFuture};
use std::pin::Pin;

use flue_protocol::event::Event;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::{FlueError, Result};

/// The stream of events of one operation; ends when the operation ends.
pub type EventStream = mpsc::UnboundedReceiver<Event>;

/// A running operation.
///
/// Await it (`handle.await`) for the result; call [`CallHandle::abort`] to cancel it. Aborting
/// cancels the model stream, running tools and child tasks, leaves the session consistent,
/// and makes the handle resolve to [`FlueError::Aborted`]. Dropping the handle does not abort
/// the operation.
#[derive(Debug)]
#[must_use = "an operation runs to completion even if its handle is dropped; await it or abort it"]
pub struct CallHandle<T> {
    state: HandleState<T>,
    cancel: CancellationToken,
    events: Option<EventStream>,
}

#[derive(Debug)]
enum HandleState<T> {
    Running(JoinHandle<Result<T>>),
    Failed(FlueError),
}

impl<T: Send + 'static> CallHandle<T> {
    /// Spawns `operation` on the current tokio runtime.
    pub(crate) fn spawn<F>(operation: F, cancel: CancellationToken, events: EventStream) -> Self
    where
        F: Future<Output = Result<T>> + Send + 'static,
    {
        Self {
            state: HandleState::Running(tokio::spawn(operation)),
            cancel,
            events: Some(events),
        }
    }

    /// A handle that resolves at once to `error` (e.g. SessionBusy).
    pub(crate) fn failed(error: FlueError) -> Self {
        Self {
            state: HandleState::Failed(error),
            cancel: CancellationToken::new(),
            events: None,
        }
    }
}

impl<T> CallHandle<T> {
    /// Aborts the operation. Idempotent; a finished operation is unaffected.
    pub fn abort(&self) {
        self.cancel.cancel();
    }

    /// The token that aborts this operation, e.g. to wire up Ctrl-C.
    pub fn cancel_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// Takes the operation's event stream. Returns `None` on the second call, or when the
    /// operation failed before starting.
    pub fn take_events(&mut self) -> Option<EventStream> {
        self.events.take()
    }
}

impl<T: Send + 'static> IntoFuture for CallHandle<T> {
    type Output = Result<T>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<T>> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        // Dropping an untaken event stream here lets the operation's sends fail silently
        // instead of buffering events nobody will read.
        drop(self.events);
        match self.state {
            HandleState::Failed(error) => Box::pin(async move { Err(error) }),
            HandleState::Running(join) => Box::pin(async move {
                match join.await {
                    Ok(result) => result,
                    Err(join_error) => Err(FlueError::RuntimeStopped {
                        message: if join_error.is_panic() {
                            "the operation panicked; the session log is unchanged past its last \
                             completed step"
                                .to_owned()
                        } else {
                            "the operation was cancelled by runtime shutdown".to_owned()
                        },
                    }),
                }
            }),
        }
    }
}
