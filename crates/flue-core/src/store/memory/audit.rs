//! [`AuditStore`] for [`MemoryStore`]: the audit log and trash in memory, behind their own lock.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::error::Result;
use crate::store::MemoryStore;
use crate::store::audit::{AuditEntry, AuditStore, TrashEntry, TrashedFile};
use crate::util::BoxFuture;

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
    fn append_audit<'a>(&'a self, entry: &'a AuditEntry) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.audit.state().entries.push(entry.clone());
            Ok(())
        })
    }

    fn list_audit<'a>(&'a self, instance_id: &'a str) -> BoxFuture<'a, Result<Vec<AuditEntry>>> {
        Box::pin(async move {
            Ok(self
                .audit
                .state()
                .entries
                .iter()
                .filter(|entry| entry.instance_id == instance_id)
                .cloned()
                .collect())
        })
    }

    fn put_trash<'a>(
        &'a self,
        entry: &'a TrashEntry,
        content: &'a [u8],
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let mut state = self.audit.state();
            state
                .blobs
                .entry(entry.sha256.clone())
                .or_insert_with(|| content.to_vec());
            state.trash.push(entry.clone());
            Ok(())
        })
    }

    fn get_trash<'a>(
        &'a self,
        instance_id: &'a str,
        trash_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<TrashedFile>>> {
        Box::pin(async move {
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
        })
    }

    fn list_all_audit(&self) -> BoxFuture<'_, Result<Vec<AuditEntry>>> {
        Box::pin(async move { Ok(self.audit.state().entries.clone()) })
    }

    fn list_all_trash(&self) -> BoxFuture<'_, Result<Vec<TrashEntry>>> {
        Box::pin(async move {
            let mut all = self.audit.state().trash.clone();
            all.sort_by(|a, b| (a.trashed_at, &a.id).cmp(&(b.trashed_at, &b.id)));
            Ok(all)
        })
    }

    fn list_trash<'a>(&'a self, instance_id: &'a str) -> BoxFuture<'a, Result<Vec<TrashEntry>>> {
        Box::pin(async move {
            Ok(self
                .audit
                .state()
                .trash
                .iter()
                .filter(|entry| entry.instance_id == instance_id)
                .cloned()
                .collect())
        })
    }
}
