//! In-memory session store: for tests and short-lived embedders; nothing survives the process.
//!
//! All sessions live in one `BTreeMap` behind a `std::sync::Mutex`. Every method takes the lock,
//! does its work without awaiting, and releases it, so the lock is never held across `.await`
//! and each method is atomic with respect to the others. The audit log and trash
//! ([`AuditStore`](crate::store::AuditStore)) sit behind a lock of their own, in `memory/audit.rs`;
//! memory notes ([`NoteStore`](crate::store::NoteStore)) behind theirs, in `memory/notes.rs`;
//! eval runs ([`EvalRunStore`](crate::store::EvalRunStore)) in `memory/evals.rs`.

mod audit;
mod conversation;
mod evals;
mod notes;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use flue_protocol::record::StoredRecord;

use crate::error::{FlueError, Result};
use crate::store::rules::{check_version, managed_conversation};
use crate::store::{
    DynAuditStore, HeadWatchers, LocalOwners, SessionKey, SessionLog, SessionStore, SessionSummary,
};
use crate::util::now_ms;

/// Sessions kept in memory, lost when the value is dropped.
///
/// Use it in tests and for throwaway harnesses; flue-store's `SqliteStore` is the durable
/// default.
#[derive(Debug, Default)]
pub struct MemoryStore {
    sessions: Mutex<BTreeMap<SessionKey, MemorySession>>,
    audit: audit::MemoryAudit,
    notes: notes::MemoryNotes,
    eval_runs: evals::MemoryEvalRuns,
    /// Locked before `sessions` when both are needed.
    conversations: Mutex<conversation::MemoryConversations>,
    heads: HeadWatchers,
    local_owners: LocalOwners,
}

#[derive(Debug)]
struct MemorySession {
    records: Vec<StoredRecord>,
    created_at: u64,
    updated_at: u64,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn sessions(&self) -> MutexGuard<'_, BTreeMap<SessionKey, MemorySession>> {
        // Every critical section below either completes its update or changes nothing before a
        // possible panic (allocation failure aside), so the map is consistent even when another
        // thread panicked while holding the lock.
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn conversations(&self) -> MutexGuard<'_, conversation::MemoryConversations> {
        // As for `sessions`: every critical section leaves the maps consistent.
        self.conversations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Appends `records` to the session `key` if it is at `expected_version`.
fn append_records(
    sessions: &mut BTreeMap<SessionKey, MemorySession>,
    key: &SessionKey,
    expected_version: u64,
    records: &[StoredRecord],
) -> Result<u64> {
    let session = sessions.get_mut(key);
    let actual = check_version(
        key,
        expected_version,
        session.as_ref().map(|session| session.version()),
    )?;
    let Some(session) = session.filter(|_| !records.is_empty()) else {
        return Ok(actual);
    };
    session.records.extend_from_slice(records);
    session.updated_at = now_ms();
    Ok(session.version())
}

impl SessionStore for MemoryStore {
    fn audit_store(self: Arc<Self>) -> Option<Arc<dyn DynAuditStore>> {
        Some(self)
    }

    fn note_store(self: Arc<Self>) -> Option<Arc<dyn crate::store::DynNoteStore>> {
        Some(self)
    }

    fn eval_run_store(self: Arc<Self>) -> Option<Arc<dyn crate::store::DynEvalRunStore>> {
        Some(self)
    }

    async fn create(&self, key: &SessionKey) -> Result<()> {
        let mut sessions = self.sessions();
        if sessions.contains_key(key) {
            return Err(FlueError::SessionAlreadyExists {
                session: key.session.clone(),
            });
        }
        let now = now_ms();
        sessions.insert(
            key.clone(),
            MemorySession {
                records: Vec::new(),
                created_at: now,
                updated_at: now,
            },
        );
        Ok(())
    }

    async fn load(&self, key: &SessionKey, from: u64) -> Result<Option<SessionLog>> {
        let sessions = self.sessions();
        let Some(session) = sessions.get(key) else {
            return Ok(None);
        };
        let start = usize::try_from(from)
            .unwrap_or(usize::MAX)
            .min(session.records.len());
        Ok(Some(SessionLog {
            version: session.version(),
            records: session.records[start..].to_vec(),
            created_at: session.created_at,
            updated_at: session.updated_at,
        }))
    }

    async fn append(
        &self,
        key: &SessionKey,
        expected_version: u64,
        records: &[StoredRecord],
    ) -> Result<u64> {
        if self.is_managed(&key.instance_id) {
            return Err(managed_conversation(&key.instance_id));
        }
        append_records(&mut self.sessions(), key, expected_version, records)
    }

    async fn create_sessions(&self, new: &[(SessionKey, Vec<StoredRecord>)]) -> Result<()> {
        // As `append` does: the conversations lock is taken (and released) before the
        // sessions lock, never inside it.
        if let Some((key, _)) = new
            .iter()
            .find(|(key, _)| self.is_managed(&key.instance_id))
        {
            return Err(managed_conversation(&key.instance_id));
        }
        let mut sessions = self.sessions();
        for (key, _) in new {
            if sessions.contains_key(key) {
                return Err(FlueError::SessionAlreadyExists {
                    session: key.session.clone(),
                });
            }
        }
        let now = now_ms();
        for (key, records) in new {
            sessions.insert(
                key.clone(),
                MemorySession {
                    records: records.clone(),
                    created_at: now,
                    updated_at: now,
                },
            );
        }
        Ok(())
    }

    async fn delete(&self, key: &SessionKey) -> Result<()> {
        let all = self.conversations();
        Self::check_session_delete(&all, &key.instance_id)?;
        self.sessions().remove(key);
        Ok(())
    }

    async fn instance_ids(&self) -> Result<Vec<String>> {
        // Keys order by instance id first, so equal ids are adjacent.
        let mut ids: Vec<String> = self
            .sessions()
            .keys()
            .map(|key| key.instance_id.clone())
            .collect();
        ids.dedup();
        Ok(ids)
    }

    async fn list(&self, instance_id: &str) -> Result<Vec<SessionSummary>> {
        // Keys order by instance id, then session name, so the result is already sorted.
        let summaries = self
            .sessions()
            .iter()
            .filter(|(key, _)| key.instance_id == instance_id)
            .map(|(key, session)| SessionSummary {
                session: key.session.clone(),
                version: session.version(),
                created_at: session.created_at,
                updated_at: session.updated_at,
            })
            .collect();
        Ok(summaries)
    }
}

impl MemorySession {
    fn version(&self) -> u64 {
        // A Vec never holds more than isize::MAX elements, which fits in u64.
        self.records.len() as u64
    }
}
