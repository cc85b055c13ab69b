//! [`EvalRunStore`] for [`SqliteStore`]: table `eval_runs`, one row per run with its JSON.
//! The table is created on first use (not by a numbered migration), so that it stays out of
//! the schema's version sequence; every statement here runs on the write connection, after
//! `CREATE TABLE IF NOT EXISTS`.

use rusqlite::{Connection, OptionalExtension, params};

use flue_core::store::{EvalRunRecord, EvalRunStore};
use flue_core::{Result, util::now_ms};

use super::{SqliteStore, get_u64, sql_int, store_error};

const CREATE: &str = "CREATE TABLE IF NOT EXISTS eval_runs (
    id TEXT PRIMARY KEY,
    run TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) WITHOUT ROWID";

fn ensure_table(connection: &Connection) -> Result<()> {
    connection
        .execute_batch(CREATE)
        .map_err(store_error("cannot create the eval_runs table"))
}

fn record_of(row: &rusqlite::Row<'_>) -> rusqlite::Result<EvalRunRecord> {
    Ok(EvalRunRecord {
        id: row.get(0)?,
        run: row.get(1)?,
        created_at: get_u64(row, 2)?,
        updated_at: get_u64(row, 3)?,
    })
}

impl EvalRunStore for SqliteStore {
    async fn put_eval_run(&self, id: &str, run: &str) -> Result<()> {
        let now = sql_int(now_ms())?;
        let connection = self.connection();
        ensure_table(&connection)?;
        connection
            .prepare_cached(
                "INSERT INTO eval_runs (id, run, created_at, updated_at) VALUES (?1, ?2, ?3, ?3)
                 ON CONFLICT (id) DO UPDATE SET run = excluded.run, updated_at = excluded.updated_at",
            )
            .and_then(|mut upsert| upsert.execute(params![id, run, now]))
            .map_err(store_error("cannot store the eval run"))?;
        Ok(())
    }

    async fn eval_run(&self, id: &str) -> Result<Option<EvalRunRecord>> {
        let connection = self.connection();
        ensure_table(&connection)?;
        connection
            .prepare_cached("SELECT id, run, created_at, updated_at FROM eval_runs WHERE id = ?1")
            .and_then(|mut select| select.query_row(params![id], record_of).optional())
            .map_err(store_error("cannot read the eval run"))
    }

    async fn eval_runs(&self) -> Result<Vec<EvalRunRecord>> {
        let connection = self.connection();
        ensure_table(&connection)?;
        connection
            .prepare_cached("SELECT id, run, created_at, updated_at FROM eval_runs ORDER BY id")
            .and_then(|mut select| select.query_map([], record_of)?.collect())
            .map_err(store_error("cannot read the eval runs"))
    }
}
