//! The session store a conversation's harness writes through: every append carries the fence.
//!
//! The runtime builds each conversation's harness on a [`FencedSessions`] instead of the raw
//! store, so the agent loop, compaction and tasks keep calling [`SessionStore::append`] as
//! always while every write is checked against the owner's fence in the store's transaction,
//! tagged with the running submission, and — for the append that carries the submission's
//! message — marks its input applied atomically.

use std::sync::{Arc, Mutex, PoisonError};

use flue_protocol::record::{Record, StoredRecord};

use crate::error::Result;
use crate::store::{
    DynAuditStore, DynConversationStore, DynSessionStore, Fence, FencedAppend, HeadWatch,
    SessionKey, SessionLog, SessionStore, SessionSummary,
};

/// The submission an attempt is running, as the fenced store needs it.
#[derive(Debug, Default)]
struct Current {
    submission_id: Option<String>,
    /// True until the append that carries the submission's `User` record commits.
    input_pending: bool,
}

/// A [`SessionStore`] view of a conversation store under one owner's fence.
pub(crate) struct FencedSessions {
    store: Arc<dyn DynConversationStore>,
    fence: Fence,
    root_session: String,
    current: Mutex<Current>,
}

impl FencedSessions {
    pub(crate) fn new(
        store: Arc<dyn DynConversationStore>,
        fence: Fence,
        root_session: &str,
    ) -> Self {
        Self {
            store,
            fence,
            root_session: root_session.to_owned(),
            current: Mutex::new(Current::default()),
        }
    }

    /// Tags the following appends with `submission_id`; with `input_pending`, the first root
    /// session append holding a `User` record marks the submission's input applied.
    pub(crate) fn begin_submission(&self, submission_id: &str, input_pending: bool) {
        *self.current() = Current {
            submission_id: Some(submission_id.to_owned()),
            input_pending,
        };
    }

    /// Stops tagging appends.
    pub(crate) fn end_submission(&self) {
        *self.current() = Current::default();
    }

    fn current(&self) -> std::sync::MutexGuard<'_, Current> {
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl SessionStore for FencedSessions {
    async fn create(&self, key: &SessionKey) -> Result<()> {
        self.store.create(key).await
    }

    async fn load(&self, key: &SessionKey, from: u64) -> Result<Option<SessionLog>> {
        self.store.load(key, from).await
    }

    async fn append(
        &self,
        key: &SessionKey,
        expected_version: u64,
        records: &[StoredRecord],
    ) -> Result<u64> {
        let (submission_id, applies_input) = {
            let current = self.current();
            let applies = current.input_pending
                && key.session == self.root_session
                && records
                    .iter()
                    .any(|stored| matches!(stored.record, Record::User(_)));
            (current.submission_id.clone(), applies)
        };
        let version = self
            .store
            .append_fenced(FencedAppend {
                fence: &self.fence,
                submission_id: submission_id.as_deref(),
                applies_input,
                resumes_waiting: false,
                session: key,
                expected_version,
                records,
            })
            .await?;
        if applies_input {
            self.current().input_pending = false;
        }
        Ok(version)
    }

    async fn delete(&self, key: &SessionKey) -> Result<()> {
        self.store.delete(key).await
    }

    fn watch_appends(&self, _key: &SessionKey) -> Option<HeadWatch> {
        // Every session of the conversation writes to its one stream.
        Some(self.store.watch_head(&self.fence.key))
    }

    async fn list(&self, instance_id: &str) -> Result<Vec<SessionSummary>> {
        self.store.list(instance_id).await
    }

    async fn instance_ids(&self) -> Result<Vec<String>> {
        self.store.instance_ids().await
    }

    fn audit_store(self: Arc<Self>) -> Option<Arc<dyn DynAuditStore>> {
        let store: Arc<dyn DynSessionStore> = Arc::clone(&self.store) as Arc<dyn DynSessionStore>;
        store.audit_store()
    }

    fn note_store(self: Arc<Self>) -> Option<Arc<dyn crate::store::DynNoteStore>> {
        let store: Arc<dyn DynSessionStore> = Arc::clone(&self.store) as Arc<dyn DynSessionStore>;
        store.note_store()
    }

    fn eval_run_store(self: Arc<Self>) -> Option<Arc<dyn crate::store::DynEvalRunStore>> {
        let store: Arc<dyn DynSessionStore> = Arc::clone(&self.store) as Arc<dyn DynSessionStore>;
        store.eval_run_store()
    }
}
