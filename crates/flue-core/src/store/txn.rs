//! Store operations written once: each reads, decides with [`rules`] and writes
//! over a small transaction trait that the memory, SQLite and Postgres backends implement, so
//! the steps run in the same order in every store. A backend opens the transaction (and locks
//! the conversation), hands it here, and commits what comes back.
//!
//! The memory store and SQLite's writer thread never wait inside a transaction; they run an
//! operation with [`run_ready`]. Postgres awaits it.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use flue_protocol::{BatchBody, Offset, Settlement, SubmissionState};

use crate::error::{FlueError, Result};
use crate::store::AbortReport;
use crate::store::rules;

/// The reads and writes of an abort request
/// ([`ConversationStore::request_abort`](crate::store::ConversationStore::request_abort)),
/// inside one transaction on one conversation that the backend holds locked.
pub trait AbortTransaction {
    /// The conversation's unsettled submissions (id, state, attempts), in admission order;
    /// empty when the conversation does not exist.
    fn unsettled(&mut self) -> impl Future<Output = Result<Vec<(String, SubmissionState, u32)>>>;

    /// Marks every unsettled submission `abort_requested`.
    fn mark_abort_requested(&mut self) -> impl Future<Output = Result<()>>;

    /// Appends `body` to the conversation's stream, not tied to a submission; the new head.
    fn push_batch(&mut self, body: &BatchBody) -> impl Future<Output = Result<Offset>>;

    /// Settles a submission; the new head, or `None` when it was settled already.
    fn settle(&mut self, settlement: &Settlement) -> impl Future<Output = Result<Option<Offset>>>;
}

/// An abort request: reads the unsettled submissions, plans with [`rules::plan_abort`], marks
/// them, records the request as one batch, then settles the ones not running. Returns the
/// report and the new head, `None` when there was nothing to abort and nothing was written.
///
/// # Errors
///
/// The backend's errors; the caller rolls the transaction back.
pub async fn request_abort(
    tx: &mut impl AbortTransaction,
) -> Result<(AbortReport, Option<Offset>)> {
    let unsettled = tx.unsettled().await?;
    let Some(plan) = rules::plan_abort(unsettled) else {
        return Ok((AbortReport::default(), None));
    };
    tx.mark_abort_requested().await?;
    let mut head = tx.push_batch(&plan.requested_batch()).await?;
    for settlement in &plan.settlements {
        head = tx.settle(settlement).await?.unwrap_or(head);
    }
    Ok((plan.report(), Some(head)))
}

/// Runs `operation` to its end at once, for a backend whose transaction never waits (the
/// memory store under its lock, SQLite on its writer thread).
///
/// # Errors
///
/// [`FlueError::Store`] if the operation waited: a backend bug, reported rather than blocked
/// on.
pub fn run_ready<F: Future>(operation: F) -> Result<F::Output> {
    let mut operation = pin!(operation);
    let mut context = Context::from_waker(Waker::noop());
    match operation.as_mut().poll(&mut context) {
        Poll::Ready(output) => Ok(output),
        Poll::Pending => Err(FlueError::Store {
            message: "a store transaction that never waits waited".to_owned(),
            source: None,
        }),
    }
}

#[cfg(test)]
mod tests;
