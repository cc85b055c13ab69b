//! SQLite session store: the durable, embedded default (`.flue/flue.db`).
//!
//! Two tables: `sessions` holds one row per session with its version (record count) and
//! timestamps, and `records` holds one row per record, keyed by session and index, with the
//! [`StoredRecord`] as JSON. An append runs in a `BEGIN IMMEDIATE` transaction that reads the
//! version, inserts only the new rows and bumps the version, so its cost does not grow with the
//! conversation and two writers (even in two processes) never interleave: the loser waits for the
//! file lock, then sees the new version and fails with [`FlueError::VersionConflict`].
//!
//! The schema is versioned with `PRAGMA user_version`: [`MIGRATIONS`] are applied in order, in
//! one transaction, when a store is opened.
//!
//! rusqlite is blocking. Each call here is a handful of statements that take microseconds to a
//! millisecond, less than handing the work to a blocking thread would cost, so the methods do it
//! inline inside their async blocks, holding the connection's mutex only for that synchronous
//! stretch (never across `.await`). The exception is lock contention with another process, which
//! can stall the calling thread for up to [`BUSY_TIMEOUT`].
//!
//! The audit log and trash ([`AuditStore`](flue_core::store::AuditStore), migration v2) are implemented
//! in `sqlite/audit.rs`; conversations, their streams and submissions
//! ([`ConversationStore`](flue_core::store::ConversationStore), migration v3) in
//! `sqlite/conversation.rs`; memory notes ([`NoteStore`](flue_core::store::NoteStore), migration
//! v7, searched with FTS5) in `sqlite/notes.rs`; conversation listings (summaries kept by
//! each write, migration v8) in `sqlite/listing.rs`; eval runs
//! ([`EvalRunStore`](flue_core::store::EvalRunStore), a table created on first use) in
//! `sqlite/evals.rs`.
//! A file store keeps a second connection for reads (session loads and lists, streams,
//! submissions), so readers (an HTTP server's) never queue behind this process's writers.
//!
//! The conversation store's writes go through group commit (`sqlite/writer.rs`): a writer
//! thread runs every pending write in one transaction, each in its own savepoint, and syncs the
//! file once per batch, so many conversations share one fsync while each write keeps its own
//! checks and errors. The remaining writes (plain session appends, audit) take the connection's
//! mutex for a transaction of their own, as described above.

mod audit;
mod conversation;
mod evals;
mod listing;
mod notes;
mod tokens;
mod writer;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rusqlite::config::DbConfig;
use rusqlite::types::Type;
use rusqlite::{Connection, OptionalExtension, Row, Transaction, TransactionBehavior, params};

use flue_core::store::rules::{self, check_version, managed_conversation};
use flue_core::store::{
    DynAuditStore, HeadWatchers, LocalOwners, SessionKey, SessionLog, SessionStore, SessionSummary,
};
use flue_core::{FlueError, Result, StoredRecord, util::now_ms};
use writer::Writer;

pub use tokens::McpTokenTable;

/// Sessions in a SQLite file.
///
/// Several stores, in one process or many, may open the same file: appends are serialised by
/// SQLite's write lock and checked against the session version, so a racing writer gets
/// [`FlueError::VersionConflict`] and writes nothing.
pub struct SqliteStore {
    /// The write connection, shared with [`Writer`]'s thread.
    connection: Arc<Mutex<Connection>>,
    /// Group commit for the conversation store's writes (`sqlite/writer.rs`).
    writer: Writer,
    /// A second connection for stream and submission reads (file stores only).
    read_connection: Option<Mutex<Connection>>,
    path: Option<PathBuf>,
    heads: HeadWatchers,
    local_owners: LocalOwners,
}

/// Group commits of a [`SqliteStore`]'s conversation writes (see
/// [`flue_core::store::rules::Commit`]). Plain session appends and audit writes, which commit
/// on their own and always sync, are not counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommitStats {
    /// Commits that synced the WAL before answering (one fsync each, when they wrote).
    pub synced: u64,
    /// Commits that wrote without syncing; the next synced commit makes them durable.
    pub unsynced: u64,
    /// The length of the WAL file (`<database>-wal`) right after the last synced commit: the
    /// bytes up to there are on the disk, and what a power loss leaves is at least that
    /// (0 before the first synced commit, and for an in-memory store).
    pub synced_journal_len: u64,
}

/// Pages the WAL may hold before a commit checkpoints it into the database (SQLite's default
/// is 1000). A process that opens the store first (every `flue run`) reads and checksums every
/// page still in the WAL to rebuild its index, about 4 µs a page: a quarter of the default
/// bounds that to about 1 ms, for one checkpoint (two fsyncs) every 256 pages written.
const AUTOCHECKPOINT_PAGES: i64 = 256;

/// The largest WAL file kept between checkpoints: twice what the automatic checkpoint lets it
/// reach (pages of 4 KiB), so that in ordinary use the file is reused, never truncated and
/// grown again, while one very large transaction does not leave it large for good.
const JOURNAL_SIZE_LIMIT: i64 = 2 * AUTOCHECKPOINT_PAGES * 4096;

/// How long a statement waits for another connection's lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Schema migrations; after applying `MIGRATIONS[..n]` the database's `user_version` is `n`.
/// Append new entries; never edit a released one.
const MIGRATIONS: &[&str] = &[
    // v1: sessions and their records.
    "CREATE TABLE sessions (
        instance_id TEXT NOT NULL,
        session TEXT NOT NULL,
        version INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (instance_id, session)
    ) WITHOUT ROWID;
    CREATE TABLE records (
        instance_id TEXT NOT NULL,
        session TEXT NOT NULL,
        idx INTEGER NOT NULL,
        record TEXT NOT NULL,
        PRIMARY KEY (instance_id, session, idx),
        FOREIGN KEY (instance_id, session) REFERENCES sessions (instance_id, session)
            ON DELETE CASCADE
    ) WITHOUT ROWID;",
    // v2: the file tools' audit log and trash (content stored once per sha256).
    "CREATE TABLE audit (
        seq INTEGER PRIMARY KEY,
        instance_id TEXT NOT NULL,
        at INTEGER NOT NULL,
        entry TEXT NOT NULL
    );
    CREATE INDEX audit_by_instance ON audit (instance_id, seq);
    CREATE TABLE trash_blobs (
        sha256 TEXT PRIMARY KEY,
        content BLOB NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE trash (
        instance_id TEXT NOT NULL,
        id TEXT NOT NULL,
        trashed_at INTEGER NOT NULL,
        sha256 TEXT NOT NULL REFERENCES trash_blobs (sha256),
        entry TEXT NOT NULL,
        PRIMARY KEY (instance_id, id)
    ) WITHOUT ROWID;",
    // v3: conversations (stream head, owner, fencing epoch), their streams, submissions.
    "CREATE TABLE conversations (
        instance_id TEXT PRIMARY KEY,
        agent TEXT NOT NULL,
        id TEXT NOT NULL,
        uid TEXT NOT NULL,
        head INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        owner TEXT,
        epoch INTEGER NOT NULL,
        lease_until INTEGER NOT NULL,
        next_position INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX conversations_by_id ON conversations (id);
    CREATE TABLE stream (
        instance_id TEXT NOT NULL REFERENCES conversations (instance_id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        at INTEGER NOT NULL,
        submission_id TEXT,
        session TEXT,
        first_idx INTEGER,
        n_records INTEGER,
        body TEXT,
        PRIMARY KEY (instance_id, seq)
    ) WITHOUT ROWID;
    CREATE TABLE submissions (
        submission_id TEXT PRIMARY KEY,
        instance_id TEXT NOT NULL REFERENCES conversations (instance_id) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        state TEXT NOT NULL,
        message TEXT NOT NULL,
        accepted_at INTEGER NOT NULL,
        attempts INTEGER NOT NULL,
        first_started_at INTEGER,
        input_applied INTEGER NOT NULL,
        abort_requested INTEGER NOT NULL,
        idempotency_key TEXT,
        settlement TEXT,
        durability TEXT,
        admitted_offset INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX submissions_unsettled ON submissions (instance_id, position)
        WHERE state != 'settled';
    CREATE UNIQUE INDEX submissions_by_key ON submissions (instance_id, idempotency_key)
        WHERE idempotency_key IS NOT NULL;",
    // v4: submissions paused on pending actions remember since when (`waiting` state).
    "ALTER TABLE submissions ADD COLUMN waiting_since INTEGER;",
    // v5: the caller's W3C `traceparent` a submission was admitted with (older rows: none).
    "ALTER TABLE submissions ADD COLUMN trace_parent TEXT;",
    // v6: a submission's message in a row of its own, written once, so that the updates of
    // the submission's state do not rewrite a large message each time; the submission row
    // keeps an empty `message` then. Older rows keep their message where it is.
    "CREATE TABLE submission_messages (
        submission_id TEXT PRIMARY KEY
            REFERENCES submissions (submission_id) ON DELETE CASCADE,
        message TEXT NOT NULL
    );",
    // v7: memory across conversations: notes per agent and subject, their FTS5 index (the
    // note's text and its id), and each conversation's subject.
    "CREATE TABLE memory_notes (
        id TEXT PRIMARY KEY,
        agent TEXT NOT NULL,
        subject TEXT NOT NULL,
        text TEXT NOT NULL,
        created_at INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX memory_notes_by_subject ON memory_notes (agent, subject, created_at);
    CREATE INDEX memory_notes_by_subject_only ON memory_notes (subject);
    CREATE VIRTUAL TABLE memory_notes_fts USING fts5 (text, note_id UNINDEXED);
    CREATE TABLE memory_subjects (
        instance_id TEXT PRIMARY KEY,
        subject TEXT NOT NULL,
        bound_at INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX memory_subjects_by_subject ON memory_subjects (subject);",
    // v8: each conversation's last write and summary, for listings a page at a time, and
    // its search index (sqlite/listing.rs); the summaries are computed from the rows.
    listing::MIGRATION,
];

impl SqliteStore {
    /// Opens (or creates) the database at `path`, creating missing parent directories, and
    /// brings its schema up to date.
    ///
    /// Fails with [`FlueError::Store`] when the file cannot be opened or migrated, or when it was
    /// written by a newer flue-core with a schema this version does not know.
    pub fn open(path: &Path) -> Result<Self> {
        if let Some(parent) = path
            .parent()
            .filter(|parent| !parent.as_os_str().is_empty())
        {
            std::fs::create_dir_all(parent).map_err(|err| {
                FlueError::store(format!("cannot create directory {}", parent.display()), err)
            })?;
        }
        let connection = open_file(path).map_err(|err| opening_failed(path, err))?;
        let read_connection = Connection::open(path)
            .and_then(|read| read.busy_timeout(BUSY_TIMEOUT).map(|()| read))
            .and_then(|read| keep_journal_on_close(&read).map(|()| read))
            .map_err(|err| opening_failed(path, FlueError::store("cannot open the file", err)))?;
        let connection = Arc::new(Mutex::new(connection));
        let mut journal = path.as_os_str().to_owned();
        journal.push("-wal");
        Ok(Self {
            writer: Writer::start(Arc::clone(&connection), Some(journal.into()))?,
            connection,
            read_connection: Some(Mutex::new(read_connection)),
            path: Some(path.to_owned()),
            heads: HeadWatchers::default(),
            local_owners: LocalOwners::default(),
        })
    }

    /// Opens a private in-memory database, gone when the store is dropped. For tests.
    pub fn open_in_memory() -> Result<Self> {
        let mut connection =
            Connection::open_in_memory().map_err(store_error("cannot open in-memory database"))?;
        prepare(&mut connection)?;
        let connection = Arc::new(Mutex::new(connection));
        Ok(Self {
            writer: Writer::start(Arc::clone(&connection), None)?,
            connection,
            read_connection: None,
            path: None,
            heads: HeadWatchers::default(),
            local_owners: LocalOwners::default(),
        })
    }

    /// The database file, or `None` for an in-memory store.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// How many group commits of conversation writes this store value made, by whether they
    /// synced the file; for tests and benchmarks of the commit schedule.
    pub fn commit_stats(&self) -> CommitStats {
        let (synced, unsynced, synced_journal_len) = self.writer.counts();
        CommitStats {
            synced,
            unsynced,
            synced_journal_len,
        }
    }

    fn connection(&self) -> MutexGuard<'_, Connection> {
        // A panic while the lock was held unwound through any open rusqlite transaction, whose
        // drop rolled it back, so the connection is still usable.
        self.connection
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The connection for stream and submission reads: the second one of a file store.
    fn reader(&self) -> MutexGuard<'_, Connection> {
        self.read_connection
            .as_ref()
            .unwrap_or(&self.connection)
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl SessionStore for SqliteStore {
    fn audit_store(self: Arc<Self>) -> Option<Arc<dyn DynAuditStore>> {
        Some(self)
    }

    fn note_store(self: Arc<Self>) -> Option<Arc<dyn flue_core::store::DynNoteStore>> {
        Some(self)
    }

    fn eval_run_store(self: Arc<Self>) -> Option<Arc<dyn flue_core::store::DynEvalRunStore>> {
        Some(self)
    }

    async fn create(&self, key: &SessionKey) -> Result<()> {
        let connection = self.connection();
        let now = sql_int(now_ms())?;
        let inserted = connection
            .prepare_cached(
                "INSERT INTO sessions (instance_id, session, version, created_at, updated_at)
                 VALUES (?1, ?2, 0, ?3, ?3) ON CONFLICT DO NOTHING",
            )
            .and_then(|mut insert| insert.execute(params![key.instance_id, key.session, now]))
            .map_err(store_error("cannot create session"))?;
        if inserted == 0 {
            return Err(FlueError::SessionAlreadyExists {
                session: key.session.clone(),
            });
        }
        Ok(())
    }

    async fn load(&self, key: &SessionKey, from: u64) -> Result<Option<SessionLog>> {
        // The read connection: a load never waits for a write batch's fsync. Every
        // acknowledged write is committed, so its snapshot holds them all.
        let mut connection = self.reader();
        // One read transaction, so the version and the records come from the same snapshot.
        let transaction = connection
            .transaction()
            .map_err(store_error("cannot begin load transaction"))?;
        let header = transaction
            .prepare_cached(
                "SELECT version, created_at, updated_at FROM sessions
                 WHERE instance_id = ?1 AND session = ?2",
            )
            .and_then(|mut select| {
                select
                    .query_row(params![key.instance_id, key.session], |row| {
                        Ok((get_u64(row, 0)?, get_u64(row, 1)?, get_u64(row, 2)?))
                    })
                    .optional()
            })
            .map_err(store_error("cannot read session"))?;
        let Some((version, created_at, updated_at)) = header else {
            return Ok(None);
        };
        let records = read_records(&transaction, key, from)?;
        transaction
            .commit()
            .map_err(store_error("cannot end load transaction"))?;
        Ok(Some(SessionLog {
            version,
            records,
            created_at,
            updated_at,
        }))
    }

    async fn append(
        &self,
        key: &SessionKey,
        expected_version: u64,
        records: &[StoredRecord],
    ) -> Result<u64> {
        // Serialise before taking any lock: a failure here writes nothing and blocks no one.
        let rows = rules::records_json(records)?;
        let mut connection = self.connection();
        let transaction = connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(store_error("cannot begin append transaction"))?;
        if conversation::is_managed(&transaction, &key.instance_id)? {
            return Err(managed_conversation(&key.instance_id));
        }
        let new_version = insert_records(&transaction, key, expected_version, &rows)?;
        transaction
            .commit()
            .map_err(store_error("cannot commit append"))?;
        Ok(new_version)
    }

    async fn create_sessions(&self, sessions: &[(SessionKey, Vec<StoredRecord>)]) -> Result<()> {
        // Serialise before taking any lock, as `append` does.
        let rows = sessions
            .iter()
            .map(|(key, records)| Ok((key, rules::records_json(records)?)))
            .collect::<Result<Vec<_>>>()?;
        let now = sql_int(now_ms())?;
        let mut connection = self.connection();
        // One transaction: every session with its records, or (returning early drops the
        // transaction, which rolls it back) none.
        let transaction = connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(store_error("cannot begin create transaction"))?;
        for (key, rows) in &rows {
            if conversation::is_managed(&transaction, &key.instance_id)? {
                return Err(managed_conversation(&key.instance_id));
            }
            let inserted = transaction
                .prepare_cached(
                    "INSERT INTO sessions (instance_id, session, version, created_at, updated_at)
                     VALUES (?1, ?2, 0, ?3, ?3) ON CONFLICT DO NOTHING",
                )
                .and_then(|mut insert| insert.execute(params![key.instance_id, key.session, now]))
                .map_err(store_error("cannot create session"))?;
            if inserted == 0 {
                return Err(FlueError::SessionAlreadyExists {
                    session: key.session.clone(),
                });
            }
            insert_records(&transaction, key, 0, rows)?;
        }
        transaction
            .commit()
            .map_err(store_error("cannot commit the new sessions"))?;
        Ok(())
    }

    async fn delete(&self, key: &SessionKey) -> Result<()> {
        let mut connection = self.connection();
        let transaction = connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(store_error("cannot begin delete transaction"))?;
        conversation::check_delete(&transaction, &key.instance_id)?;
        // The records go with the session through `ON DELETE CASCADE`.
        transaction
            .prepare_cached("DELETE FROM sessions WHERE instance_id = ?1 AND session = ?2")
            .and_then(|mut delete| delete.execute(params![key.instance_id, key.session]))
            .map_err(store_error("cannot delete session"))?;
        transaction
            .commit()
            .map_err(store_error("cannot commit delete"))?;
        Ok(())
    }

    async fn list(&self, instance_id: &str) -> Result<Vec<SessionSummary>> {
        // SQLite's default BINARY collation orders UTF-8 text bytewise, as `str`'s `Ord` does.
        self.reader()
            .prepare_cached(
                "SELECT session, version, created_at, updated_at FROM sessions
                 WHERE instance_id = ?1 ORDER BY session",
            )
            .and_then(|mut select| {
                select
                    .query_map(params![instance_id], |row| {
                        Ok(SessionSummary {
                            session: row.get(0)?,
                            version: get_u64(row, 1)?,
                            created_at: get_u64(row, 2)?,
                            updated_at: get_u64(row, 3)?,
                        })
                    })?
                    .collect()
            })
            .map_err(store_error("cannot list sessions"))
    }

    async fn instance_ids(&self) -> Result<Vec<String>> {
        self.reader()
            .prepare_cached("SELECT DISTINCT instance_id FROM sessions ORDER BY instance_id")
            .and_then(|mut select| select.query_map([], |row| row.get(0))?.collect())
            .map_err(store_error("cannot list sessions"))
    }
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Settings every connection needs, then the schema migrations.
/// Opens the database file and sets it up; errors name the step, not the file.
fn open_file(path: &Path) -> Result<Connection> {
    let mut connection = Connection::open(path).map_err(store_error("cannot open the file"))?;
    connection
        .busy_timeout(BUSY_TIMEOUT)
        .map_err(store_error("cannot set the busy timeout"))?;
    // Returns the resulting mode; a filesystem without WAL support keeps the rollback
    // journal, which is slower but just as correct.
    connection
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get::<_, String>(0))
        .map_err(store_error("cannot set the journal mode"))?;
    // FULL syncs the WAL on every commit: an acknowledged append survives power loss, not
    // only a process crash. The conversation writes that need no sync of their own lower it
    // for their batch (`sqlite/writer.rs`, the commit schedule in the store rules).
    connection
        .pragma_update(None, "synchronous", "FULL")
        .map_err(store_error("cannot set the synchronous mode"))?;
    // The WAL stays between runs: created once, reused after each checkpoint instead of
    // truncated, and bounded.
    connection
        .pragma_update(None, "journal_size_limit", JOURNAL_SIZE_LIMIT)
        .map_err(store_error("cannot set the journal size limit"))?;
    connection
        .pragma_update(None, "wal_autocheckpoint", AUTOCHECKPOINT_PAGES)
        .map_err(store_error("cannot set the checkpoint interval"))?;
    keep_journal_on_close(&connection).map_err(store_error("cannot keep the journal on close"))?;
    prepare(&mut connection)?;
    Ok(connection)
}

/// Leaves the WAL as it is when the connection closes. By default the last connection to
/// close checkpoints the WAL into the database and deletes it (three fsyncs), and the next
/// process creates it again (two more). Committed transactions are as durable in the WAL as
/// in the database file; SQLite's automatic checkpoint (every 256 pages) moves them over,
/// and the next process to open the file reads the WAL it finds.
fn keep_journal_on_close(connection: &Connection) -> rusqlite::Result<()> {
    connection
        .set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
        .map(|_| ())
}

/// `err`, from opening the store at `path`, as one message naming the file, the cause and
/// what to do about it (SQLite's own words say only which step failed).
fn opening_failed(path: &Path, err: FlueError) -> FlueError {
    let FlueError::Store { message, source } = err else {
        return err;
    };
    let shown = path.display();
    let sqlite = source
        .as_deref()
        .and_then(|source| source.downcast_ref::<rusqlite::Error>());
    let cause = sqlite.map(|err| format!(": {err}")).unwrap_or_default();
    let code = sqlite.and_then(rusqlite::Error::sqlite_error_code);
    let move_aside = format!(
        "move it aside (`mv {shown} {shown}.damaged`) and run again to start an empty store"
    );
    let fix = match code {
        Some(rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt) => {
            format!("the file is damaged or is not a flue store: {move_aside}")
        }
        Some(
            rusqlite::ErrorCode::CannotOpen
            | rusqlite::ErrorCode::PermissionDenied
            | rusqlite::ErrorCode::ReadOnly,
        ) => "check that this user can read and write the file and its folder (and that the \
              folder is on a writable disk)"
            .to_owned(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => {
            "another process holds the store locked: let it finish or stop it, then run again"
                .to_owned()
        }
        Some(rusqlite::ErrorCode::DiskFull) => "the disk is full: free some space".to_owned(),
        _ if sqlite.is_none() => format!("upgrade flue to read it, or {move_aside}"),
        _ => format!("if the file is damaged, {move_aside}"),
    };
    // The cause is in the message, so every frontend shows it once, whether it prints the
    // source chain or not.
    FlueError::Store {
        message: format!("cannot open the conversation store {shown}: {message}{cause}; {fix}"),
        source: None,
    }
}

fn prepare(connection: &mut Connection) -> Result<()> {
    connection
        .pragma_update(None, "foreign_keys", true)
        .map_err(store_error("cannot enable foreign keys"))?;
    migrate(connection)
}

/// Applies the migrations the database lacks, in one write transaction.
fn migrate(connection: &mut Connection) -> Result<()> {
    let latest = MIGRATIONS.len();
    if schema_version(connection)? == latest {
        return Ok(());
    }
    // Another process may be migrating the same file: the write lock serialises us, and the
    // version is read again under it.
    let transaction = connection
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(store_error("cannot begin migration transaction"))?;
    let current = schema_version(&transaction)?;
    if current > latest {
        return Err(FlueError::Store {
            message: format!(
                "database schema version {current} is newer than this flue-core supports ({latest})"
            ),
            source: None,
        });
    }
    for migration in MIGRATIONS.iter().skip(current) {
        transaction
            .execute_batch(migration)
            .map_err(store_error("cannot migrate schema"))?;
    }
    let latest_param = i64::try_from(latest)
        .map_err(|err| FlueError::store("schema version out of range", err))?;
    transaction
        .pragma_update(None, "user_version", latest_param)
        .map_err(store_error("cannot record schema version"))?;
    transaction
        .commit()
        .map_err(store_error("cannot commit schema migration"))
}

fn schema_version(connection: &Connection) -> Result<usize> {
    let version = connection
        .pragma_query_value(None, "user_version", |row| row.get::<_, i64>(0))
        .map_err(store_error("cannot read schema version"))?;
    usize::try_from(version).map_err(|err| FlueError::store("negative schema version", err))
}

/// Checks the session version and inserts `rows` (serialised records) after it, inside the
/// caller's write transaction; returns the new version.
fn insert_records(
    transaction: &Transaction<'_>,
    key: &SessionKey,
    expected_version: u64,
    rows: &[String],
) -> Result<u64> {
    let actual = transaction
        .prepare_cached("SELECT version FROM sessions WHERE instance_id = ?1 AND session = ?2")
        .and_then(|mut select| {
            select
                .query_row(params![key.instance_id, key.session], |row| get_u64(row, 0))
                .optional()
        })
        .map_err(store_error("cannot read session version"))?;
    // Returning early drops the transaction, which rolls it back.
    let actual = check_version(key, expected_version, actual)?;
    if rows.is_empty() {
        return Ok(actual);
    }
    let mut new_version = expected_version;
    {
        let mut insert = transaction
            .prepare_cached(
                "INSERT INTO records (instance_id, session, idx, record)
                 VALUES (?1, ?2, ?3, ?4)",
            )
            .map_err(store_error("cannot prepare record insert"))?;
        for row in rows {
            insert
                .execute(params![
                    key.instance_id,
                    key.session,
                    sql_int(new_version)?,
                    row
                ])
                .map_err(store_error("cannot insert record"))?;
            new_version += 1;
        }
    }
    let version = sql_int(new_version)?;
    let now = sql_int(now_ms())?;
    transaction
        .prepare_cached(
            "UPDATE sessions SET version = ?3, updated_at = ?4
             WHERE instance_id = ?1 AND session = ?2",
        )
        .and_then(|mut update| update.execute(params![key.instance_id, key.session, version, now]))
        .map_err(store_error("cannot update session version"))?;
    Ok(new_version)
}

/// Reads the records of `key` with index `from` and later, in order.
fn read_records(connection: &Connection, key: &SessionKey, from: u64) -> Result<Vec<StoredRecord>> {
    read_record_range(connection, key, from, u64::MAX)
}

/// Reads the records of `key` with index in `from..until`, in order.
fn read_record_range(
    connection: &Connection,
    key: &SessionKey,
    from: u64,
    until: u64,
) -> Result<Vec<StoredRecord>> {
    let from = i64::try_from(from).unwrap_or(i64::MAX);
    let until = i64::try_from(until).unwrap_or(i64::MAX);
    let mut select = connection
        .prepare_cached(
            "SELECT idx, record FROM records
             WHERE instance_id = ?1 AND session = ?2 AND idx >= ?3 AND idx < ?4 ORDER BY idx",
        )
        .map_err(store_error("cannot prepare record query"))?;
    let mut rows = select
        .query(params![key.instance_id, key.session, from, until])
        .map_err(store_error("cannot read records"))?;
    let mut records = Vec::new();
    while let Some(row) = rows.next().map_err(store_error("cannot read records"))? {
        let index = get_u64(row, 0).map_err(store_error("cannot read record index"))?;
        let text = row
            .get_ref(1)
            .map_err(store_error("cannot read record"))?
            .as_str()
            .map_err(|err| {
                rules::corrupt_record(key, index, format!("record is not text: {err}"))
            })?;
        records.push(rules::parse_record(key, index, text)?);
    }
    Ok(records)
}

/// Wraps a rusqlite error as [`FlueError::Store`], keeping it only as the `source()`.
fn store_error(message: &'static str) -> impl FnOnce(rusqlite::Error) -> FlueError {
    move |err| FlueError::store(message, err)
}

/// A counter or timestamp as a SQLite integer (which is signed).
fn sql_int(value: u64) -> Result<i64> {
    i64::try_from(value).map_err(|err| FlueError::store("integer too large for sqlite", err))
}

/// Reads a non-negative integer column; rusqlite reads `u64` only with a feature we don't enable.
fn get_u64(row: &Row<'_>, idx: usize) -> rusqlite::Result<u64> {
    let value = row.get::<_, i64>(idx)?;
    u64::try_from(value)
        .map_err(|err| rusqlite::Error::FromSqlConversionFailure(idx, Type::Integer, Box::new(err)))
}
