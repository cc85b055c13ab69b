//! The MCP sessions of the streamable HTTP endpoint, bounded in number and in idle time.
//!
//! rmcp's [`LocalSessionManager`] keeps every session until it has had no message for its
//! keep-alive (5 minutes): a flood of `initialize` requests holds one session each (about 55 KiB
//! apiece) for that long. [`BoundedSessions`] wraps it and keeps, per session, how many of its
//! streams are open (a request being answered, the standalone `GET` stream) and when it was
//! last used. A session with nothing open is idle; an idle one is closed once it has been idle
//! for [`McpSessionLimits::idle_timeout`] (by a sweep that [`BoundedSessions::sweep_until`]
//! runs), and a new session beyond [`McpSessionLimits::max_sessions`] closes the one idle the
//! longest, or is refused when every session is busy. A busy session is never closed for
//! idleness, however long its call takes: rmcp's own keep-alive is off.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::Stream;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::WorkerTransport;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError, LocalSessionWorker,
};
use rmcp::transport::streamable_http_server::session::{
    ServerSseMessage, SessionId, SessionManager,
};
use tokio_util::sync::CancellationToken;

/// How many MCP sessions the streamable HTTP endpoint keeps, and for how long an idle one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct McpSessionLimits {
    /// Most sessions at once. At the limit, a new session closes the one idle the longest; with
    /// none idle (each has a request or a stream open), it is refused with 503.
    pub max_sessions: usize,
    /// How long a session with nothing open is kept after its last use.
    pub idle_timeout: Duration,
}

impl Default for McpSessionLimits {
    /// 256 sessions, 5 minutes idle.
    fn default() -> Self {
        Self {
            max_sessions: 256,
            idle_timeout: Duration::from_secs(300),
        }
    }
}

/// Why a session could not be opened or used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SessionsError {
    /// Every session is busy and there are as many as allowed.
    #[error("{}", full_message(*max))]
    Full {
        /// The limit.
        max: usize,
    },
    /// rmcp's own session error.
    #[error(transparent)]
    Local(#[from] LocalSessionManagerError),
}

/// The message of a refused session: what happened and what to do.
pub(crate) fn full_message(max: usize) -> String {
    format!(
        "the server holds its most MCP sessions ({max}) and every one is busy: end a session \
         you no longer use (DELETE /mcp with its Mcp-Session-Id) or retry later (flue mcp serve \
         --max-sessions sets the limit)"
    )
}

/// rmcp's local sessions, bounded (see the module docs).
pub(crate) struct BoundedSessions {
    local: LocalSessionManager,
    limits: McpSessionLimits,
    table: Arc<Mutex<HashMap<SessionId, Activity>>>,
}

/// What is known of one session's use.
#[derive(Debug)]
struct Activity {
    /// Its streams open now.
    open: usize,
    /// When it was last used (a request, a stream closing).
    last_used: Instant,
}

impl BoundedSessions {
    pub(crate) fn new(limits: McpSessionLimits) -> Self {
        let mut local = LocalSessionManager::default();
        // Idle sessions are closed here, by open streams rather than by messages: rmcp's timer
        // would also end a session whose call runs quietly for longer than it.
        local.session_config.keep_alive = None;
        Self {
            local,
            limits: McpSessionLimits {
                max_sessions: limits.max_sessions.max(1),
                idle_timeout: limits.idle_timeout,
            },
            table: Arc::default(),
        }
    }

    /// Whether a new session would be admitted now (there is room, or an idle session to
    /// close for it).
    pub(crate) fn has_room(&self) -> bool {
        let table = lock(&self.table);
        table.len() < self.limits.max_sessions || table.values().any(|activity| activity.open == 0)
    }

    /// The limit on sessions.
    pub(crate) fn max_sessions(&self) -> usize {
        self.limits.max_sessions
    }

    /// Closes the sessions idle for longer than the limit, every so often, until `stop` fires
    /// or the sessions are dropped.
    pub(crate) async fn sweep_until(sessions: Weak<Self>, stop: CancellationToken) {
        let Some(period) = sessions.upgrade().map(|sessions| {
            (sessions.limits.idle_timeout / 4)
                .clamp(Duration::from_millis(100), Duration::from_secs(30))
        }) else {
            return;
        };
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(period) => {}
            }
            let Some(sessions) = sessions.upgrade() else {
                return;
            };
            for id in sessions.expired() {
                let _ = sessions.local.close_session(&id).await;
            }
        }
    }

    /// Takes the sessions idle for longer than the limit out of the table.
    fn expired(&self) -> Vec<SessionId> {
        let mut table = lock(&self.table);
        let idle = self.limits.idle_timeout;
        let expired: Vec<SessionId> = table
            .iter()
            .filter(|(_, activity)| activity.open == 0 && activity.last_used.elapsed() >= idle)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &expired {
            table.remove(id);
        }
        expired
    }

    /// Notes a use of session `id`.
    fn touch(&self, id: &SessionId) {
        if let Some(activity) = lock(&self.table).get_mut(id) {
            activity.last_used = Instant::now();
        }
    }

    /// `stream`, counted as open on session `id` until it is dropped.
    fn tracked<S>(&self, id: &SessionId, stream: S) -> Tracked<S> {
        if let Some(activity) = lock(&self.table).get_mut(id) {
            activity.open += 1;
            activity.last_used = Instant::now();
        }
        Tracked {
            stream: Box::pin(stream),
            _open: Open {
                table: Arc::clone(&self.table),
                id: id.clone(),
            },
        }
    }
}

impl SessionManager for BoundedSessions {
    type Error = SessionsError;
    type Transport = WorkerTransport<LocalSessionWorker>;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let (id, transport) = self.local.create_session().await?;
        // Checked and inserted under one lock, so concurrent requests cannot overshoot.
        let admitted = {
            let mut table = lock(&self.table);
            let evicted = if table.len() < self.limits.max_sessions {
                Ok(None)
            } else {
                table
                    .iter()
                    .filter(|(_, activity)| activity.open == 0)
                    .min_by_key(|(_, activity)| activity.last_used)
                    .map(|(id, _)| id.clone())
                    .map(Some)
                    .ok_or(SessionsError::Full {
                        max: self.limits.max_sessions,
                    })
            };
            if let Ok(evicted) = &evicted {
                if let Some(evicted) = evicted {
                    table.remove(evicted);
                }
                // Busy until its `initialize` is answered: never closed in between.
                table.insert(
                    id.clone(),
                    Activity {
                        open: 1,
                        last_used: Instant::now(),
                    },
                );
            }
            evicted
        };
        match admitted {
            Ok(evicted) => {
                if let Some(evicted) = evicted {
                    tracing::info!(session = %evicted, "closed the MCP session idle the longest to make room for a new one");
                    let _ = self.local.close_session(&evicted).await;
                }
                Ok((id, transport))
            }
            Err(full) => {
                let _ = self.local.close_session(&id).await;
                Err(full)
            }
        }
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        let initialized = self.local.initialize_session(id, message).await;
        if let Some(activity) = lock(&self.table).get_mut(id) {
            activity.open = activity.open.saturating_sub(1);
            activity.last_used = Instant::now();
        }
        Ok(initialized?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(lock(&self.table).contains_key(id) && self.local.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        lock(&self.table).remove(id);
        Ok(self.local.close_session(id).await?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let stream = self.local.create_stream(id, message).await?;
        Ok(self.tracked(id, stream))
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.touch(id);
        Ok(self.local.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let stream = self.local.create_standalone_stream(id).await?;
        Ok(self.tracked(id, stream))
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let stream = self.local.resume(id, last_event_id).await?;
        Ok(self.tracked(id, stream))
    }
}

/// A stream of a session, counted as open while it lives.
struct Tracked<S> {
    stream: Pin<Box<S>>,
    _open: Open,
}

impl<S: Stream> Stream for Tracked<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.stream.as_mut().poll_next(cx)
    }
}

/// One open stream of session `id`; dropping it closes it (and counts as a use).
struct Open {
    table: Arc<Mutex<HashMap<SessionId, Activity>>>,
    id: SessionId,
}

impl Drop for Open {
    fn drop(&mut self) {
        if let Some(activity) = lock(&self.table).get_mut(&self.id) {
            activity.open = activity.open.saturating_sub(1);
            activity.last_used = Instant::now();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
