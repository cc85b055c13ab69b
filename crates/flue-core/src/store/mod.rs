//! Session stores: durable, append-only session logs with optimistic concurrency.
//!
//! A session's version is the number of records it holds. [`SessionStore::append`] carries the
//! version the writer last saw; if another writer got there first the append fails with
//! [`FlueError::VersionConflict`] and writes nothing. Appends insert only the new records, so
//! their cost does not grow with the conversation.

mod audit;
pub(crate) mod conversation;
mod memory;
mod sqlite;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::record::StoredRecord;
use crate::util::BoxFuture;

pub use audit::{AUDIT_DIFF_LIMIT, AuditEntry, AuditStore, TrashEntry, TrashReason, TrashedFile};
pub use conversation::{
    AbortReport, Acquire, Admission, Claim, ConversationStore, Fence, FencedAppend, HeadWatch,
    OwnerRegistration,
};
pub use memory::MemoryStore;
pub use sqlite::SqliteStore;

/// Identifies one session: an agent instance id and a session name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SessionKey {
    /// Agent instance id (the CLI's `--id`).
    pub instance_id: String,
    /// Session name within the instance.
    pub session: String,
}

impl SessionKey {
    /// A key.
    pub fn new(instance_id: impl Into<String>, session: impl Into<String>) -> Self {
        Self {
            instance_id: instance_id.into(),
            session: session.into(),
        }
    }
}

/// A loaded session log, or the tail of one.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionLog {
    /// The session's version: the number of records it holds.
    pub version: u64,
    /// Records from the requested index to the end, in order.
    pub records: Vec<StoredRecord>,
    /// Creation time, ms since the epoch.
    pub created_at: u64,
    /// Time of the last append, ms since the epoch.
    pub updated_at: u64,
}

/// One session of a listing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionSummary {
    /// Session name.
    pub session: String,
    /// Version (record count).
    pub version: u64,
    /// Creation time, ms since the epoch.
    pub created_at: u64,
    /// Time of the last append, ms since the epoch.
    pub updated_at: u64,
}

/// Durable storage of session logs.
///
/// Called by the harness: `create` when a session is created, `load` when it is opened and at
/// the start of each operation (from the last version it saw, to pick up other writers),
/// `append` after each step of an operation, `delete` and `list` on request.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a session store",
    label = "implement `flue_core::SessionStore` for this type"
)]
pub trait SessionStore: Send + Sync {
    /// Creates an empty session at version 0; [`FlueError::SessionAlreadyExists`] if present.
    ///
    /// [`FlueError::SessionAlreadyExists`]: crate::FlueError::SessionAlreadyExists
    fn create<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, Result<()>>;

    /// Loads the records with index `from` and later, or `None` when the session does not exist.
    fn load<'a>(
        &'a self,
        key: &'a SessionKey,
        from: u64,
    ) -> BoxFuture<'a, Result<Option<SessionLog>>>;

    /// Appends `records` if the session is at `expected_version`; returns the new version.
    ///
    /// Fails with [`FlueError::SessionNotFound`] when the session is missing and with
    /// [`FlueError::VersionConflict`] when it moved on; in both cases nothing is written.
    ///
    /// [`FlueError::SessionNotFound`]: crate::FlueError::SessionNotFound
    /// [`FlueError::VersionConflict`]: crate::FlueError::VersionConflict
    fn append<'a>(
        &'a self,
        key: &'a SessionKey,
        expected_version: u64,
        records: &'a [StoredRecord],
    ) -> BoxFuture<'a, Result<u64>>;

    /// Deletes a session and its records; a missing session is not an error.
    fn delete<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, Result<()>>;

    /// Lists the sessions of an agent instance, by name.
    fn list<'a>(&'a self, instance_id: &'a str) -> BoxFuture<'a, Result<Vec<SessionSummary>>>;

    /// Every instance id with at least one session, sorted (what `flue session list` walks;
    /// includes instances written without the submission runtime).
    fn instance_ids(&self) -> BoxFuture<'_, Result<Vec<String>>>;

    /// A wake-up when the session `key` may have grown, when the store can give one (a
    /// conversation store's head watch, which on Postgres also carries other processes'
    /// writes). `None` (the default): readers poll. Live actions wait on it.
    fn watch_appends(&self, key: &SessionKey) -> Option<HeadWatch> {
        let _ = key;
        None
    }

    /// This store's audit log and trash, when it keeps them.
    ///
    /// Called once by `HarnessBuilder::build`, which hands the result to the file tools. The
    /// default, `None`, makes the harness keep them in memory (lost with the process) unless
    /// `HarnessBuilder::with_audit_store` sets one.
    fn audit_store(self: Arc<Self>) -> Option<Arc<dyn AuditStore>> {
        None
    }
}
