//! Stores, for their implementers: the traits, their data, the rules every backend follows,
//! and the in-memory store.
//!
//! Session stores keep durable, append-only session logs with optimistic concurrency. A
//! session's version is the number of records it holds. [`SessionStore::append`] carries the
//! version the writer last saw; if another writer got there first the append fails with
//! [`FlueError::VersionConflict`] and writes nothing. Appends insert only the new records, so
//! their cost does not grow with the conversation. [`ConversationStore`] adds durable
//! submissions, streams and ownership; [`AuditStore`] the file tools' audit log and trash;
//! [`NoteStore`] the memory notes of agents with `memory:`; [`EvalRunStore`] the runs of
//! `flue eval`.
//!
//! A backend implements the native traits ([`SessionStore`], [`ConversationStore`],
//! [`AuditStore`], with `async fn`s) and decides what [`rules`] decides by asking it, so that
//! every backend admits, fences and settles alike. The runtime holds stores as
//! `Arc<dyn DynSessionStore>` (and [`DynConversationStore`], [`DynAuditStore`]): boxed
//! companions implemented for every implementation of the native traits. [`MemoryStore`] lives
//! here; the durable stores (SQLite, Postgres) in the flue-store crate.
//!
//! [`FlueError::VersionConflict`]: crate::error::FlueError::VersionConflict

mod audit;
mod conversation;
mod evals;
pub mod listing;
mod memory;
mod notes;
pub mod rules;
pub mod txn;

use std::sync::Arc;

use flue_protocol::record::StoredRecord;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::util::BoxFuture;

pub use audit::{
    AUDIT_DIFF_LIMIT, AuditEntry, AuditStore, DynAuditStore, TrashEntry, TrashReason, TrashedFile,
};
pub use conversation::{
    AbortReport, Acquire, Admission, Claim, ConversationStore, DynConversationStore, Fence,
    FencedAppend, HeadWatch, HeadWatchers, LocalOwners, OwnerRegistration, SubmissionStatus,
};
pub use evals::{DynEvalRunStore, EvalRunRecord, EvalRunStore};
pub use memory::MemoryStore;
pub use notes::{
    DynNoteStore, MAX_SEARCH_TERMS, Note, NoteLimits, NoteStore, check_subject, search_terms,
};

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
///
/// Implement this trait (with `async fn`s); the runtime holds stores as
/// `Arc<dyn DynSessionStore>`, which every implementation is through a blanket impl.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a session store",
    label = "implement `flue_core::SessionStore` for this type"
)]
pub trait SessionStore: Send + Sync {
    /// Creates an empty session at version 0; [`FlueError::SessionAlreadyExists`] if present.
    ///
    /// [`FlueError::SessionAlreadyExists`]: crate::error::FlueError::SessionAlreadyExists
    fn create(&self, key: &SessionKey) -> impl Future<Output = Result<()>> + Send;

    /// Loads the records with index `from` and later, or `None` when the session does not exist.
    fn load(
        &self,
        key: &SessionKey,
        from: u64,
    ) -> impl Future<Output = Result<Option<SessionLog>>> + Send;

    /// Appends `records` if the session is at `expected_version`; returns the new version.
    ///
    /// Fails with [`FlueError::SessionNotFound`] when the session is missing and with
    /// [`FlueError::VersionConflict`] when it moved on; in both cases nothing is written.
    ///
    /// [`FlueError::SessionNotFound`]: crate::error::FlueError::SessionNotFound
    /// [`FlueError::VersionConflict`]: crate::error::FlueError::VersionConflict
    fn append(
        &self,
        key: &SessionKey,
        expected_version: u64,
        records: &[StoredRecord],
    ) -> impl Future<Output = Result<u64>> + Send;

    /// Creates every session of `sessions` holding its records, all or none (what a fork
    /// writes): when one already exists, [`FlueError::SessionAlreadyExists`] and nothing is
    /// written; the refusals of [`SessionStore::append`] apply to each.
    ///
    /// The default creates and appends one session after another, so a crash between them
    /// leaves some; the durable stores and the memory store override it with one transaction.
    ///
    /// [`FlueError::SessionAlreadyExists`]: crate::error::FlueError::SessionAlreadyExists
    fn create_sessions(
        &self,
        sessions: &[(SessionKey, Vec<StoredRecord>)],
    ) -> impl Future<Output = Result<()>> + Send {
        async move {
            for (key, records) in sessions {
                self.create(key).await?;
                if !records.is_empty() {
                    self.append(key, 0, records).await?;
                }
            }
            Ok(())
        }
    }

    /// Deletes a session and its records; a missing session is not an error.
    fn delete(&self, key: &SessionKey) -> impl Future<Output = Result<()>> + Send;

    /// Lists the sessions of an agent instance, by name.
    fn list(&self, instance_id: &str) -> impl Future<Output = Result<Vec<SessionSummary>>> + Send;

    /// Every instance id with at least one session, sorted (what `flue session list` walks;
    /// includes instances written without the submission runtime).
    fn instance_ids(&self) -> impl Future<Output = Result<Vec<String>>> + Send;

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
    fn audit_store(self: Arc<Self>) -> Option<Arc<dyn DynAuditStore>> {
        None
    }

    /// This store's memory notes, when it keeps them (agents with `memory:` need it).
    fn note_store(self: Arc<Self>) -> Option<Arc<dyn DynNoteStore>> {
        None
    }

    /// This store's eval runs, when it keeps them (`flue eval` needs it).
    fn eval_run_store(self: Arc<Self>) -> Option<Arc<dyn DynEvalRunStore>> {
        None
    }
}

/// [`SessionStore`] with boxed futures, so that it can be used as `Arc<dyn DynSessionStore>`.
///
/// Implemented for every [`SessionStore`]; implement that trait, not this one. Each method
/// means what the [`SessionStore`] method of the same name means.
pub trait DynSessionStore: Send + Sync {
    /// See [`SessionStore::create`].
    fn create<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, Result<()>>;

    /// See [`SessionStore::load`].
    fn load<'a>(
        &'a self,
        key: &'a SessionKey,
        from: u64,
    ) -> BoxFuture<'a, Result<Option<SessionLog>>>;

    /// See [`SessionStore::append`].
    fn append<'a>(
        &'a self,
        key: &'a SessionKey,
        expected_version: u64,
        records: &'a [StoredRecord],
    ) -> BoxFuture<'a, Result<u64>>;

    /// See [`SessionStore::create_sessions`].
    fn create_sessions<'a>(
        &'a self,
        sessions: &'a [(SessionKey, Vec<StoredRecord>)],
    ) -> BoxFuture<'a, Result<()>>;

    /// See [`SessionStore::delete`].
    fn delete<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, Result<()>>;

    /// See [`SessionStore::list`].
    fn list<'a>(&'a self, instance_id: &'a str) -> BoxFuture<'a, Result<Vec<SessionSummary>>>;

    /// See [`SessionStore::instance_ids`].
    fn instance_ids(&self) -> BoxFuture<'_, Result<Vec<String>>>;

    /// See [`SessionStore::watch_appends`].
    fn watch_appends(&self, key: &SessionKey) -> Option<HeadWatch>;

    /// See [`SessionStore::audit_store`].
    fn audit_store(self: Arc<Self>) -> Option<Arc<dyn DynAuditStore>>;

    /// See [`SessionStore::note_store`].
    fn note_store(self: Arc<Self>) -> Option<Arc<dyn DynNoteStore>>;

    /// See [`SessionStore::eval_run_store`].
    fn eval_run_store(self: Arc<Self>) -> Option<Arc<dyn DynEvalRunStore>>;
}

impl<T: SessionStore> DynSessionStore for T {
    fn create<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, Result<()>> {
        Box::pin(SessionStore::create(self, key))
    }

    fn load<'a>(
        &'a self,
        key: &'a SessionKey,
        from: u64,
    ) -> BoxFuture<'a, Result<Option<SessionLog>>> {
        Box::pin(SessionStore::load(self, key, from))
    }

    fn append<'a>(
        &'a self,
        key: &'a SessionKey,
        expected_version: u64,
        records: &'a [StoredRecord],
    ) -> BoxFuture<'a, Result<u64>> {
        Box::pin(SessionStore::append(self, key, expected_version, records))
    }

    fn create_sessions<'a>(
        &'a self,
        sessions: &'a [(SessionKey, Vec<StoredRecord>)],
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(SessionStore::create_sessions(self, sessions))
    }

    fn delete<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, Result<()>> {
        Box::pin(SessionStore::delete(self, key))
    }

    fn list<'a>(&'a self, instance_id: &'a str) -> BoxFuture<'a, Result<Vec<SessionSummary>>> {
        Box::pin(SessionStore::list(self, instance_id))
    }

    fn instance_ids(&self) -> BoxFuture<'_, Result<Vec<String>>> {
        Box::pin(SessionStore::instance_ids(self))
    }

    fn watch_appends(&self, key: &SessionKey) -> Option<HeadWatch> {
        SessionStore::watch_appends(self, key)
    }

    fn audit_store(self: Arc<Self>) -> Option<Arc<dyn DynAuditStore>> {
        SessionStore::audit_store(self)
    }

    fn note_store(self: Arc<Self>) -> Option<Arc<dyn DynNoteStore>> {
        SessionStore::note_store(self)
    }

    fn eval_run_store(self: Arc<Self>) -> Option<Arc<dyn DynEvalRunStore>> {
        SessionStore::eval_run_store(self)
    }
}
