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
//! number of sessions, of records and of bytes (the records' size as stored, so that a few
//! conversations with large messages do not keep their logs in memory once settled), the least
//! recently returned going first.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use flue_protocol::record::Record;

use crate::steps::LogIndex;
use crate::store::SessionKey;

/// How many sessions a runtime keeps in memory at most.
pub(crate) const MAX_CACHED_SESSIONS: usize = 1_024;
/// How many records (of all cached sessions together) a runtime keeps in memory at most.
pub(crate) const MAX_CACHED_RECORDS: usize = 200_000;
/// How many bytes of records (their size as stored, of all cached sessions together) a runtime
/// keeps in memory at most.
pub(crate) const MAX_CACHED_BYTES: usize = 64 * 1024 * 1024;

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
    max_bytes: usize,
    entries: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    logs: HashMap<SessionKey, Entry>,
    /// Records held by all entries.
    records: usize,
    /// Bytes of the records held by all entries ([`LogIndex::bytes`]).
    bytes: usize,
    /// Bumped by every `put`: an entry's `stamp` says how recently it was returned.
    clock: u64,
}

#[derive(Debug)]
struct Entry {
    log: CachedLog,
    stamp: u64,
}

impl LogCache {
    /// A cache of at most `max_sessions` sessions, `max_records` records and `max_bytes`
    /// bytes of records.
    pub(crate) fn new(max_sessions: usize, max_records: usize, max_bytes: usize) -> Self {
        Self {
            max_sessions,
            max_records,
            max_bytes,
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
        entries.bytes -= entry.log.index.bytes();
        Some(entry.log)
    }

    /// Keeps `log` as the log of `key`, evicting the least recently returned logs beyond the
    /// bounds. A log larger than the whole record or byte budget is not kept.
    pub(crate) fn put(&self, key: SessionKey, log: CachedLog) {
        if log.records.len() > self.max_records
            || log.index.bytes() > self.max_bytes
            || self.max_sessions == 0
        {
            self.forget(&key);
            return;
        }
        let mut entries = self.entries();
        entries.clock += 1;
        let stamp = entries.clock;
        entries.records += log.records.len();
        entries.bytes += log.index.bytes();
        if let Some(old) = entries.logs.insert(key, Entry { log, stamp }) {
            entries.records -= old.log.records.len();
            entries.bytes -= old.log.index.bytes();
        }
        while entries.logs.len() > self.max_sessions
            || entries.records > self.max_records
            || entries.bytes > self.max_bytes
        {
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
                entries.bytes -= evicted.log.index.bytes();
            }
        }
    }

    /// Drops the cached log of `key` (a deleted session).
    pub(crate) fn forget(&self, key: &SessionKey) {
        let mut entries = self.entries();
        if let Some(entry) = entries.logs.remove(key) {
            entries.records -= entry.log.records.len();
            entries.bytes -= entry.log.index.bytes();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flue_protocol::record::UserMessage;

    fn log(n: usize) -> CachedLog {
        sized_log(n, 2)
    }

    /// `n` records of `text_bytes` bytes of text each, indexed.
    fn sized_log(n: usize, text_bytes: usize) -> CachedLog {
        let records: Vec<Record> = (0..n)
            .map(|_| Record::User(UserMessage::text("m".repeat(text_bytes))))
            .collect();
        CachedLog {
            version: n as u64,
            created_at: 1,
            index: LogIndex::of(&records),
            records,
        }
    }

    fn key(name: &str) -> SessionKey {
        SessionKey::new("agent:id", name)
    }

    #[test]
    fn a_taken_log_is_gone_until_returned() {
        let cache = LogCache::new(4, 100, usize::MAX);
        cache.put(key("a"), log(3));
        assert_eq!(cache.take(&key("a")).map(|log| log.version), Some(3));
        assert!(cache.take(&key("a")).is_none());
    }

    #[test]
    fn the_least_recently_returned_logs_go_first() {
        let cache = LogCache::new(2, 10, usize::MAX);
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
        let cache = LogCache::new(2, 10, usize::MAX);
        cache.put(key("a"), log(2));
        cache.put(key("a"), log(11));
        assert!(cache.take(&key("a")).is_none());
        assert_eq!(cache.entries().records, 0);
    }

    #[test]
    fn logs_of_large_records_are_bounded_by_their_bytes() {
        let record_bytes = LogIndex::of(&sized_log(1, 1000).records).bytes();
        assert!(record_bytes > 1000, "{record_bytes}");
        // Room for three such records; the record and session bounds are far away.
        let cache = LogCache::new(100, 1000, 3 * record_bytes);
        cache.put(key("a"), sized_log(2, 1000));
        cache.put(key("b"), sized_log(1, 1000));
        assert_eq!(cache.entries().bytes, 3 * record_bytes);
        // A fourth record goes over: the least recently returned log, `a`, goes.
        cache.put(key("c"), sized_log(1, 1000));
        assert!(cache.take(&key("a")).is_none());
        assert_eq!(cache.entries().bytes, 2 * record_bytes);
        // A log over the whole byte budget is not kept, and takes its older copy with it.
        cache.put(key("b"), sized_log(4, 1000));
        assert!(cache.take(&key("b")).is_none());
        assert_eq!(cache.take(&key("c")).map(|log| log.version), Some(1));
        assert_eq!(cache.entries().bytes, 0);
    }
}
