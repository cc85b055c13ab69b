//! The session logs a runtime keeps in memory between the messages of its conversations, so
//! that continuing a conversation reads only what was appended since, not its whole log.
//!
//! The submission runtime builds a fresh harness each time it takes a conversation (one per
//! message when a client waits for each reply), and opening a session used to load and decode
//! every record the session ever stored: a cost that grew with the conversation. A harness
//! built with a [`LogCache`] hands a session's in-memory log to the cache when its last handle
//! goes away and takes it back (moved, not copied) when the session is opened again; the store
//! is then asked only for the records after the cached version.
//!
//! Session logs are append-only and a version is a record count, so the cached records are a
//! prefix of the stored log for as long as the session lives: whatever another process
//! appended meanwhile arrives as the tail. A session deleted and created again is told apart
//! by its creation time and its version (a tail that does not continue the cached version
//! means the cached copy is discarded and the whole log is read). The cache is bounded by a
//! number of sessions and of records, the least recently returned going first.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use crate::record::Record;
use crate::steps::LogIndex;
use crate::store::SessionKey;

/// How many sessions a runtime keeps in memory at most.
pub(crate) const MAX_CACHED_SESSIONS: usize = 1_024;
/// How many records (of all cached sessions together) a runtime keeps in memory at most.
pub(crate) const MAX_CACHED_RECORDS: usize = 200_000;

/// A session's log as the last harness that had it open left it.
#[derive(Debug, Default)]
pub(crate) struct CachedLog {
    /// Its version: the number of records.
    pub(crate) version: u64,
    /// When the session was created (ms since the epoch), to tell a recreated one apart.
    pub(crate) created_at: u64,
    /// Every record, in order.
    pub(crate) records: Vec<Record>,
    /// The index of `records`.
    pub(crate) index: LogIndex,
}

/// Session logs kept between harnesses (see the module documentation).
#[derive(Debug)]
pub(crate) struct LogCache {
    max_sessions: usize,
    max_records: usize,
    entries: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    logs: HashMap<SessionKey, Entry>,
    /// Records held by all entries.
    records: usize,
    /// Bumped by every `put`: an entry's `stamp` says how recently it was returned.
    clock: u64,
}

#[derive(Debug)]
struct Entry {
    log: CachedLog,
    stamp: u64,
}

impl LogCache {
    /// A cache of at most `max_sessions` sessions and `max_records` records.
    pub(crate) fn new(max_sessions: usize, max_records: usize) -> Self {
        Self {
            max_sessions,
            max_records,
            entries: Mutex::new(Entries::default()),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the cached log of `key` out of the cache (the caller owns it now).
    pub(crate) fn take(&self, key: &SessionKey) -> Option<CachedLog> {
        let mut entries = self.entries();
        let entry = entries.logs.remove(key)?;
        entries.records -= entry.log.records.len();
        Some(entry.log)
    }

    /// Keeps `log` as the log of `key`, evicting the least recently returned logs beyond the
    /// bounds. A log larger than the whole record budget is not kept.
    pub(crate) fn put(&self, key: SessionKey, log: CachedLog) {
        if log.records.len() > self.max_records || self.max_sessions == 0 {
            self.forget(&key);
            return;
        }
        let mut entries = self.entries();
        entries.clock += 1;
        let stamp = entries.clock;
        entries.records += log.records.len();
        if let Some(old) = entries.logs.insert(key, Entry { log, stamp }) {
            entries.records -= old.log.records.len();
        }
        while entries.logs.len() > self.max_sessions || entries.records > self.max_records {
            let Some(oldest) = entries
                .logs
                .iter()
                .min_by_key(|(_, entry)| entry.stamp)
                .map(|(key, _)| key.clone())
            else {
                break;
            };
            if let Some(evicted) = entries.logs.remove(&oldest) {
                entries.records -= evicted.log.records.len();
            }
        }
    }

    /// Drops the cached log of `key` (a deleted session).
    pub(crate) fn forget(&self, key: &SessionKey) {
        let mut entries = self.entries();
        if let Some(entry) = entries.logs.remove(key) {
            entries.records -= entry.log.records.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::UserMessage;

    fn log(n: usize) -> CachedLog {
        CachedLog {
            version: n as u64,
            created_at: 1,
            records: (0..n)
                .map(|idx| Record::User(UserMessage::text(format!("m{idx}"))))
                .collect(),
            index: LogIndex::default(),
        }
    }

    fn key(name: &str) -> SessionKey {
        SessionKey::new("agent:id", name)
    }

    #[test]
    fn a_taken_log_is_gone_until_returned() {
        let cache = LogCache::new(4, 100);
        cache.put(key("a"), log(3));
        assert_eq!(cache.take(&key("a")).map(|log| log.version), Some(3));
        assert!(cache.take(&key("a")).is_none());
    }

    #[test]
    fn the_least_recently_returned_logs_go_first() {
        let cache = LogCache::new(2, 10);
        cache.put(key("a"), log(4));
        cache.put(key("b"), log(4));
        cache.put(key("c"), log(1));
        // Three sessions over a bound of two: `a` goes.
        assert!(cache.take(&key("a")).is_none());
        cache.put(key("b"), log(4));
        cache.put(key("d"), log(6));
        // Three sessions and 4 + 1 + 6 records: the oldest, `c`, goes; `b` (returned again) stays.
        assert!(cache.take(&key("c")).is_none());
        assert_eq!(cache.take(&key("d")).map(|log| log.version), Some(6));
        assert_eq!(cache.take(&key("b")).map(|log| log.version), Some(4));
        assert_eq!(cache.entries().records, 0);
    }

    #[test]
    fn a_log_over_the_whole_budget_is_not_kept() {
        let cache = LogCache::new(2, 10);
        cache.put(key("a"), log(2));
        cache.put(key("a"), log(11));
        assert!(cache.take(&key("a")).is_none());
        assert_eq!(cache.entries().records, 0);
    }
}
