//! [`AuditStore`] for [`MemoryStore`]: the audit log and trash in memory, behind their own lock.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::error::Result;
use crate::store::MemoryStore;
use crate::store::audit::{AuditEntry, AuditStore, TrashEntry, TrashedFile};

/// The audit log and trash of a [`MemoryStore`].
#[derive(Debug, Default)]
pub(super) struct MemoryAudit {
    state: Mutex<AuditState>,
}

#[derive(Debug, Default)]
struct AuditState {
    entries: Vec<AuditEntry>,
    trash: Vec<TrashEntry>,
    /// Trashed content by sha256.
    blobs: HashMap<String, Vec<u8>>,
}

impl MemoryAudit {
    fn state(&self) -> MutexGuard<'_, AuditState> {
        // Each critical section below pushes or reads whole values, so a poisoned lock still
        // guards consistent data.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl AuditStore for MemoryStore {
    async fn append_audit(&self, entry: &AuditEntry) -> Result<()> {
        self.audit.state().entries.push(entry.clone());
        Ok(())
    }

    async fn list_audit(&self, instance_id: &str) -> Result<Vec<AuditEntry>> {
        Ok(self
            .audit
            .state()
            .entries
            .iter()
            .filter(|entry| entry.instance_id == instance_id)
            .cloned()
            .collect())
    }

    async fn put_trash(&self, entry: &TrashEntry, content: &[u8]) -> Result<()> {
        let mut state = self.audit.state();
        state
            .blobs
            .entry(entry.sha256.clone())
            .or_insert_with(|| content.to_vec());
        state.trash.push(entry.clone());
        Ok(())
    }

    async fn get_trash(&self, instance_id: &str, trash_id: &str) -> Result<Option<TrashedFile>> {
        let state = self.audit.state();
        let found = state
            .trash
            .iter()
            .find(|entry| entry.instance_id == instance_id && entry.id == trash_id)
            .and_then(|entry| {
                state.blobs.get(&entry.sha256).map(|content| TrashedFile {
                    entry: entry.clone(),
                    content: content.clone(),
                })
            });
        Ok(found)
    }

    async fn list_all_audit(&self) -> Result<Vec<AuditEntry>> {
        Ok(self.audit.state().entries.clone())
    }

    async fn list_all_trash(&self) -> Result<Vec<TrashEntry>> {
        let mut all = self.audit.state().trash.clone();
        all.sort_by(|a, b| (a.trashed_at, &a.id).cmp(&(b.trashed_at, &b.id)));
        Ok(all)
    }

    async fn list_trash(&self, instance_id: &str) -> Result<Vec<TrashEntry>> {
        Ok(self
            .audit
            .state()
            .trash
            .iter()
            .filter(|entry| entry.instance_id == instance_id)
            .cloned()
            .collect())
    }
}
