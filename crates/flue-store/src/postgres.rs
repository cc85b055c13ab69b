//! The Postgres store: sessions, the audit log and trash, and durable submissions in one
//! database that many `flue serve` processes share.
//!
//! [`PostgresStore`] implements [`SessionStore`], [`AuditStore`] and [`ConversationStore`] with
//! the same tables and semantics as the SQLite store (prefixed `flue_`, so the database may hold
//! other things). Three kinds of connection:
//!
//! - a **pool** (deadpool over tokio-postgres) for every read and write; each write is one
//!   `READ COMMITTED` transaction that locks the conversation row (`SELECT ... FOR UPDATE`)
//!   before anything else, so writes of one conversation are serialised across nodes and the
//!   fencing check (owner and epoch) sees the latest committed owner;
//! - one **listener** connection per store, outside the pool, that `LISTEN`s on
//!   [`NOTIFY_CHANNEL`]: every write that moves a conversation's stream head sends
//!   `pg_notify` in its transaction (delivered at commit), so head watchers in every process
//!   wake at once (`watch_head`), which is what live SSE streams and settlement waits follow;
//! - one **owner** connection per [`OwnerRegistration`], holding a session advisory lock: an
//!   owner is alive while that lock is held, so when a process dies (even by SIGKILL) its
//!   connection closes, Postgres drops the lock, and other nodes may take its conversations
//!   over without waiting for the lease. A node that hangs with its connection open loses its
//!   conversations when their lease (on the database clock, `now()`) runs out.
//!
//! Migrations run at open under a transaction-scoped advisory lock (so nodes starting together
//! apply them once) and are recorded in `flue_schema_migrations`; a database migrated by a
//! newer flue is refused with a message saying so. Eval runs (`postgres/evals.rs`) are kept in
//! a table created on first use, outside the numbered migrations.

mod audit;
mod conversation;
mod evals;
mod heads;
mod listing;
mod notes;
mod tls;

use tls::TlsSettings;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{GenericClient, Manager, ManagerConfig, Pool, RecyclingMethod};
use flue_core::store::rules::{self, check_version, managed_conversation};
use flue_core::store::{
    DynAuditStore, HeadWatchers, SessionKey, SessionLog, SessionStore, SessionSummary,
};
use flue_core::{FlueError, Result, StoredRecord, util::now_ms};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;
use tokio_util::sync::CancellationToken;

/// The channel every head notification goes to; the payload is `<head> <instance id>`.
pub const NOTIFY_CHANNEL: &str = "flue_heads";

/// The first key of the advisory locks this store takes (`'flue'` in ASCII).
const LOCK_NAMESPACE: i32 = 0x666c_7565;
/// The second key of the advisory lock that serialises migrations.
const MIGRATION_LOCK: i32 = 0;

/// Schema migrations, applied in order; `flue_schema_migrations` records each one applied.
/// Append new entries; never edit a released one.
const MIGRATIONS: &[(&str, &str)] = &[
    (
        "sessions, audit, trash, conversations, stream, submissions, owner keys",
        "CREATE TABLE flue_sessions (
        instance_id TEXT NOT NULL,
        session TEXT NOT NULL,
        version BIGINT NOT NULL,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        PRIMARY KEY (instance_id, session)
    );
    CREATE TABLE flue_records (
        instance_id TEXT NOT NULL,
        session TEXT NOT NULL,
        idx BIGINT NOT NULL,
        record TEXT NOT NULL,
        PRIMARY KEY (instance_id, session, idx),
        FOREIGN KEY (instance_id, session) REFERENCES flue_sessions (instance_id, session)
            ON DELETE CASCADE
    );
    CREATE TABLE flue_audit (
        seq BIGSERIAL PRIMARY KEY,
        instance_id TEXT NOT NULL,
        at BIGINT NOT NULL,
        entry TEXT NOT NULL
    );
    CREATE INDEX flue_audit_by_instance ON flue_audit (instance_id, seq);
    CREATE TABLE flue_trash_blobs (
        sha256 TEXT PRIMARY KEY,
        content BYTEA NOT NULL
    );
    CREATE TABLE flue_trash (
        instance_id TEXT NOT NULL,
        id TEXT NOT NULL,
        trashed_at BIGINT NOT NULL,
        sha256 TEXT NOT NULL REFERENCES flue_trash_blobs (sha256),
        entry TEXT NOT NULL,
        PRIMARY KEY (instance_id, id)
    );
    CREATE TABLE flue_conversations (
        instance_id TEXT PRIMARY KEY,
        agent TEXT NOT NULL,
        id TEXT NOT NULL,
        uid TEXT NOT NULL,
        head BIGINT NOT NULL,
        created_at BIGINT NOT NULL,
        owner TEXT,
        epoch BIGINT NOT NULL,
        lease_until TIMESTAMPTZ NOT NULL DEFAULT '-infinity',
        next_position BIGINT NOT NULL
    );
    CREATE INDEX flue_conversations_by_id ON flue_conversations (id);
    CREATE TABLE flue_stream (
        instance_id TEXT NOT NULL REFERENCES flue_conversations (instance_id) ON DELETE CASCADE,
        seq BIGINT NOT NULL,
        at BIGINT NOT NULL,
        submission_id TEXT,
        session TEXT,
        first_idx BIGINT,
        n_records BIGINT,
        body TEXT,
        PRIMARY KEY (instance_id, seq)
    );
    CREATE TABLE flue_submissions (
        submission_id TEXT PRIMARY KEY,
        instance_id TEXT NOT NULL REFERENCES flue_conversations (instance_id) ON DELETE CASCADE,
        position BIGINT NOT NULL,
        state TEXT NOT NULL,
        message TEXT NOT NULL,
        accepted_at BIGINT NOT NULL,
        attempts BIGINT NOT NULL,
        first_started_at BIGINT,
        input_applied BOOLEAN NOT NULL,
        abort_requested BOOLEAN NOT NULL,
        idempotency_key TEXT,
        settlement TEXT,
        durability TEXT,
        admitted_offset BIGINT NOT NULL,
        waiting_since BIGINT
    );
    CREATE INDEX flue_submissions_unsettled ON flue_submissions (instance_id, position)
        WHERE state <> 'settled';
    CREATE UNIQUE INDEX flue_submissions_by_key ON flue_submissions (instance_id, idempotency_key)
        WHERE idempotency_key IS NOT NULL;
    CREATE SEQUENCE flue_owner_keys AS integer CYCLE;",
    ),
    (
        "submissions: the caller's trace parent",
        "ALTER TABLE flue_submissions ADD COLUMN trace_parent TEXT;",
    ),
    (
        "memory notes (full-text searched) and each conversation's memory subject",
        "CREATE TABLE flue_memory_notes (
        id TEXT PRIMARY KEY,
        agent TEXT NOT NULL,
        subject TEXT NOT NULL,
        text TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        search TSVECTOR GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED
    );
    CREATE INDEX flue_memory_notes_by_subject ON flue_memory_notes (agent, subject, created_at);
    CREATE INDEX flue_memory_notes_by_subject_only ON flue_memory_notes (subject);
    CREATE INDEX flue_memory_notes_search ON flue_memory_notes USING GIN (search);
    CREATE TABLE flue_memory_subjects (
        instance_id TEXT PRIMARY KEY,
        subject TEXT NOT NULL,
        bound_at BIGINT NOT NULL
    );
    CREATE INDEX flue_memory_subjects_by_subject ON flue_memory_subjects (subject);",
    ),
    (
        "conversations: last activity, summary and search text for listings (computed)",
        listing::MIGRATION,
    ),
];

/// Settings of a [`PostgresStore`].
#[derive(Clone, Debug)]
pub struct PostgresOptions {
    /// Connections in the pool (default 16).
    pub pool_size: usize,
    /// How long a caller waits for a pooled connection before failing (default 10 s).
    pub acquire_timeout: Duration,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self {
            pool_size: 16,
            acquire_timeout: Duration::from_secs(10),
        }
    }
}

/// Sessions, the audit log, the trash and durable submissions in a Postgres database.
///
/// Open one per process with [`PostgresStore::connect`]; many processes may share the database
/// (see the module docs for how they coordinate).
pub struct PostgresStore {
    pool: Pool,
    config: tokio_postgres::Config,
    heads: Arc<HeadWatchers>,
    /// Owners whose registration this process dropped (dead, even before the database saw
    /// their connection close).
    released_owners: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    /// Stops the listener task when the store is dropped.
    stop: CancellationToken,
    /// Where the database is, without the password (for messages).
    shown: String,
    /// TLS for every connection (`sslmode`, `sslrootcert`).
    tls: tls::RustlsConnect,
    tls_settings: TlsSettings,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("database", &self.shown)
            .finish_non_exhaustive()
    }
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://user:password@host:port/db`), applies the
    /// migrations it lacks and starts listening for head notifications. Must run inside a
    /// tokio runtime.
    ///
    /// Fails with [`FlueError::Store`] when the URL is malformed, the server cannot be reached,
    /// or the database was migrated by a newer flue. Messages never contain the password.
    pub async fn connect(url: &str, options: PostgresOptions) -> Result<Self> {
        let (url, tls_settings) = TlsSettings::split(url).map_err(|message| FlueError::Store {
            message: format!("Postgres URL: {message}"),
            source: None,
        })?;
        let mut config = tokio_postgres::Config::from_str(&url).map_err(|err| FlueError::Store {
            // The parser's message may quote the URL; give only its kind.
            message: format!(
                "malformed Postgres URL ({}); expected postgres://user:password@host:port/database",
                redact_url_error(&err)
            ),
            source: None,
        })?;
        config.ssl_mode(tls_settings.mode.negotiation());
        let shown = describe(&config);
        let tls = tls_settings.connector()?;
        let manager = Manager::from_config(
            config.clone(),
            tls.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.pool_size.max(1))
            .wait_timeout(Some(options.acquire_timeout))
            .create_timeout(Some(options.acquire_timeout))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(|err| FlueError::store(format!("cannot set up the pool for {shown}"), err))?;
        let store = Self {
            pool,
            config,
            heads: Arc::new(HeadWatchers::default()),
            released_owners: Arc::default(),
            stop: CancellationToken::new(),
            shown,
            tls,
            tls_settings,
        };
        store.migrate().await?;
        heads::listen(
            store.config.clone(),
            store.tls.clone(),
            store.tls_settings.clone(),
            Arc::clone(&store.heads),
            store.stop.clone(),
            store.shown.clone(),
        )
        .await?;
        Ok(store)
    }

    /// The database this store uses, as `user@host:port/database` (no password).
    pub fn database(&self) -> &str {
        &self.shown
    }

    /// The schema version the database is at (the number of migrations applied).
    pub async fn schema_version(&self) -> Result<u32> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "SELECT COALESCE(MAX(version), 0)::INT FROM flue_schema_migrations",
                &[],
            )
            .await
            .map_err(pg_error("cannot read the schema version"))?;
        Ok(u32::try_from(row.get::<_, i32>(0)).unwrap_or(0))
    }

    /// The schema version this build knows.
    pub fn supported_schema_version() -> u32 {
        u32::try_from(MIGRATIONS.len()).unwrap_or(u32::MAX)
    }

    async fn client(&self) -> Result<deadpool_postgres::Object> {
        self.pool.get().await.map_err(|err| {
            match &err {
                // The driver's error itself, without the pool's wrapping words.
                deadpool_postgres::PoolError::Backend(inner) => tls::connect_failure(
                    "cannot connect to",
                    &self.shown,
                    &self.tls_settings,
                    inner,
                ),
                other => tls::connect_failure(
                    "cannot get a connection to",
                    &self.shown,
                    &self.tls_settings,
                    other,
                ),
            }
        })
    }

    async fn migrate(&self) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(pg_error("cannot begin the migration transaction"))?;
        // Nodes starting together: one migrates, the others wait here and then find it done.
        tx.execute(
            "SELECT pg_advisory_xact_lock($1, $2)",
            &[&LOCK_NAMESPACE, &MIGRATION_LOCK],
        )
        .await
        .map_err(pg_error("cannot lock the schema for migration"))?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS flue_schema_migrations (
                version INT PRIMARY KEY,
                description TEXT NOT NULL,
                applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
            )",
        )
        .await
        .map_err(pg_error("cannot create flue_schema_migrations"))?;
        let current: i32 = tx
            .query_one(
                "SELECT COALESCE(MAX(version), 0)::INT FROM flue_schema_migrations",
                &[],
            )
            .await
            .map_err(pg_error("cannot read the schema version"))?
            .get(0);
        let latest = i32::try_from(MIGRATIONS.len()).unwrap_or(i32::MAX);
        if current > latest {
            return Err(FlueError::Store {
                message: format!(
                    "the Postgres database {} is at schema version {current}, newer than this \
                     flue supports ({latest}); upgrade flue on this node (every node sharing a \
                     database must run a version that knows its schema)",
                    self.shown
                ),
                source: None,
            });
        }
        for (idx, (description, sql)) in MIGRATIONS.iter().enumerate() {
            let version = i32::try_from(idx + 1).unwrap_or(i32::MAX);
            if version <= current {
                continue;
            }
            tx.batch_execute(sql)
                .await
                .map_err(pg_error("cannot migrate the schema"))?;
            tx.execute(
                "INSERT INTO flue_schema_migrations (version, description) VALUES ($1, $2)",
                &[&version, description],
            )
            .await
            .map_err(pg_error("cannot record the migration"))?;
        }
        tx.commit()
            .await
            .map_err(pg_error("cannot commit the schema migration"))
    }
}

impl SessionStore for PostgresStore {
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
        let client = self.client().await?;
        let now = int(now_ms());
        let inserted = client
            .execute(
                "INSERT INTO flue_sessions (instance_id, session, version, created_at, updated_at)
                 VALUES ($1, $2, 0, $3, $3) ON CONFLICT DO NOTHING",
                &[&key.instance_id, &key.session, &now],
            )
            .await
            .map_err(pg_error("cannot create session"))?;
        if inserted == 0 {
            return Err(FlueError::SessionAlreadyExists {
                session: key.session.clone(),
            });
        }
        Ok(())
    }

    async fn load(&self, key: &SessionKey, from: u64) -> Result<Option<SessionLog>> {
        let mut client = self.client().await?;
        // One snapshot for the version and the records.
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(pg_error("cannot begin load transaction"))?;
        let header = query_opt(
            &tx,
            "SELECT version, created_at, updated_at FROM flue_sessions
             WHERE instance_id = $1 AND session = $2",
            &[&key.instance_id, &key.session],
            "cannot read session",
        )
        .await?;
        let Some(header) = header else {
            return Ok(None);
        };
        let records = read_record_range(&tx, key, from, u64::MAX).await?;
        tx.commit()
            .await
            .map_err(pg_error("cannot end load transaction"))?;
        Ok(Some(SessionLog {
            version: uint(header.get(0)),
            records,
            created_at: uint(header.get(1)),
            updated_at: uint(header.get(2)),
        }))
    }

    async fn append(
        &self,
        key: &SessionKey,
        expected_version: u64,
        records: &[StoredRecord],
    ) -> Result<u64> {
        let rows = rules::records_json(records)?;
        let mut client = self.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(pg_error("cannot begin append transaction"))?;
        let managed = query_opt(
            &tx,
            "SELECT 1 FROM flue_conversations WHERE instance_id = $1",
            &[&key.instance_id],
            "cannot read conversation",
        )
        .await?;
        if managed.is_some() {
            return Err(managed_conversation(&key.instance_id));
        }
        let version = insert_records(&tx, key, expected_version, &rows).await?;
        tx.commit()
            .await
            .map_err(pg_error("cannot commit append"))?;
        Ok(version)
    }

    async fn create_sessions(&self, sessions: &[(SessionKey, Vec<StoredRecord>)]) -> Result<()> {
        let rows = sessions
            .iter()
            .map(|(key, records)| Ok((key, rules::records_json(records)?)))
            .collect::<Result<Vec<_>>>()?;
        let now = int(now_ms());
        let mut client = self.client().await?;
        // One transaction: every session with its records, or (dropping it rolls back) none.
        let tx = client
            .transaction()
            .await
            .map_err(pg_error("cannot begin create transaction"))?;
        for (key, rows) in &rows {
            let managed = query_opt(
                &tx,
                "SELECT 1 FROM flue_conversations WHERE instance_id = $1",
                &[&key.instance_id],
                "cannot read conversation",
            )
            .await?;
            if managed.is_some() {
                return Err(managed_conversation(&key.instance_id));
            }
            let inserted = execute(
                &tx,
                "INSERT INTO flue_sessions (instance_id, session, version, created_at, updated_at)
                 VALUES ($1, $2, 0, $3, $3) ON CONFLICT DO NOTHING",
                &[&key.instance_id, &key.session, &now],
                "cannot create session",
            )
            .await?;
            if inserted == 0 {
                return Err(FlueError::SessionAlreadyExists {
                    session: key.session.clone(),
                });
            }
            insert_records(&tx, key, 0, rows).await?;
        }
        tx.commit()
            .await
            .map_err(pg_error("cannot commit the new sessions"))?;
        Ok(())
    }

    async fn delete(&self, key: &SessionKey) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(pg_error("cannot begin delete transaction"))?;
        conversation::check_delete(&tx, &key.instance_id).await?;
        execute(
            &tx,
            "DELETE FROM flue_sessions WHERE instance_id = $1 AND session = $2",
            &[&key.instance_id, &key.session],
            "cannot delete session",
        )
        .await?;
        tx.commit()
            .await
            .map_err(pg_error("cannot commit delete"))?;
        Ok(())
    }

    async fn list(&self, instance_id: &str) -> Result<Vec<SessionSummary>> {
        let client = self.client().await?;
        // `COLLATE "C"` orders bytewise, as `str`'s `Ord` does.
        let rows = client
            .query(
                "SELECT session, version, created_at, updated_at FROM flue_sessions
                 WHERE instance_id = $1 ORDER BY session COLLATE \"C\"",
                &[&instance_id],
            )
            .await
            .map_err(pg_error("cannot list sessions"))?;
        Ok(rows
            .iter()
            .map(|row| SessionSummary {
                session: row.get(0),
                version: uint(row.get(1)),
                created_at: uint(row.get(2)),
                updated_at: uint(row.get(3)),
            })
            .collect())
    }

    async fn instance_ids(&self) -> Result<Vec<String>> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT DISTINCT instance_id COLLATE \"C\" AS id FROM flue_sessions ORDER BY id",
                &[],
            )
            .await
            .map_err(pg_error("cannot list sessions"))?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }
}

/// `user@host:port/database` of a connection config: never the password.
fn describe(config: &tokio_postgres::Config) -> String {
    let host = config
        .get_hosts()
        .first()
        .map(|host| match host {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".to_owned());
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!(
        "{}@{host}:{port}/{}",
        config.get_user().unwrap_or("postgres"),
        config.get_dbname().unwrap_or("postgres")
    )
}

/// The kind of a URL parse error, without any part of the URL.
fn redact_url_error(err: &tokio_postgres::Error) -> &'static str {
    let text = err.to_string();
    if text.contains("invalid connection string") || text.contains("unexpected") {
        "not a connection string"
    } else {
        "invalid value"
    }
}

/// Wraps a driver error as [`FlueError::Store`], keeping the database's own message (never
/// the password: the driver's errors do not carry the connection string).
pub(crate) fn pg_error(message: &'static str) -> impl FnOnce(tokio_postgres::Error) -> FlueError {
    move |err| {
        let detail = err
            .as_db_error()
            .map(|db| format!("{message}: {} ({})", db.message(), db.code().code()))
            .unwrap_or_else(|| format!("{message}: {err}"));
        FlueError::store(detail, err)
    }
}

/// One row or none, through the connection's statement cache.
pub(crate) async fn query_opt<C: GenericClient + Sync>(
    client: &C,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
    what: &'static str,
) -> Result<Option<Row>> {
    let statement = client.prepare_cached(sql).await.map_err(pg_error(what))?;
    client
        .query_opt(&statement, params)
        .await
        .map_err(pg_error(what))
}

/// Every row, through the connection's statement cache.
pub(crate) async fn query_all<C: GenericClient + Sync>(
    client: &C,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
    what: &'static str,
) -> Result<Vec<Row>> {
    let statement = client.prepare_cached(sql).await.map_err(pg_error(what))?;
    client
        .query(&statement, params)
        .await
        .map_err(pg_error(what))
}

/// Exactly one row, through the connection's statement cache.
pub(crate) async fn query_one<C: GenericClient + Sync>(
    client: &C,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
    what: &'static str,
) -> Result<Row> {
    let statement = client.prepare_cached(sql).await.map_err(pg_error(what))?;
    client
        .query_one(&statement, params)
        .await
        .map_err(pg_error(what))
}

/// A statement's changed-row count, through the connection's statement cache.
pub(crate) async fn execute<C: GenericClient + Sync>(
    client: &C,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
    what: &'static str,
) -> Result<u64> {
    let statement = client.prepare_cached(sql).await.map_err(pg_error(what))?;
    client
        .execute(&statement, params)
        .await
        .map_err(pg_error(what))
}

/// Checks the session version (locking the session row) and inserts `rows` after it, inside
/// the caller's transaction; returns the new version.
pub(crate) async fn insert_records<C: GenericClient + Sync>(
    tx: &C,
    key: &SessionKey,
    expected_version: u64,
    rows: &[String],
) -> Result<u64> {
    let actual = query_opt(
        tx,
        "SELECT version FROM flue_sessions WHERE instance_id = $1 AND session = $2 FOR UPDATE",
        &[&key.instance_id, &key.session],
        "cannot read session version",
    )
    .await?
    .map(|row| uint(row.get(0)));
    let actual = check_version(key, expected_version, actual)?;
    if rows.is_empty() {
        return Ok(actual);
    }
    let indexes: Vec<i64> = (0..rows.len() as u64)
        .map(|offset| int(expected_version + offset))
        .collect();
    execute(
        tx,
        "INSERT INTO flue_records (instance_id, session, idx, record)
         SELECT $1, $2, idx, record FROM UNNEST($3::BIGINT[], $4::TEXT[]) AS r (idx, record)",
        &[&key.instance_id, &key.session, &indexes, &rows],
        "cannot insert records",
    )
    .await?;
    let new_version = expected_version + rows.len() as u64;
    execute(
        tx,
        "UPDATE flue_sessions SET version = $3, updated_at = $4
         WHERE instance_id = $1 AND session = $2",
        &[
            &key.instance_id,
            &key.session,
            &int(new_version),
            &int(now_ms()),
        ],
        "cannot update session version",
    )
    .await?;
    Ok(new_version)
}

/// Reads the records of `key` with index in `from..until`, in order.
pub(crate) async fn read_record_range<C: GenericClient + Sync>(
    client: &C,
    key: &SessionKey,
    from: u64,
    until: u64,
) -> Result<Vec<StoredRecord>> {
    let rows = query_all(
        client,
        "SELECT idx, record FROM flue_records
         WHERE instance_id = $1 AND session = $2 AND idx >= $3 AND idx < $4 ORDER BY idx",
        &[&key.instance_id, &key.session, &int(from), &int(until)],
        "cannot read records",
    )
    .await?;
    let mut records = Vec::with_capacity(rows.len());
    for row in rows {
        records.push(rules::parse_record(key, uint(row.get(0)), row.get(1))?);
    }
    Ok(records)
}

/// A counter or timestamp as a Postgres `BIGINT`; none of ours comes near `i64::MAX`.
pub(crate) fn int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A stored `BIGINT` counter or timestamp (never negative) as `u64`.
pub(crate) fn uint(value: i64) -> u64 {
    u64::try_from(value).unwrap_or_default()
}

#[cfg(test)]
mod tests;
