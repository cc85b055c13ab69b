//! [`EvalRunStore`] for [`PostgresStore`]: table `flue_eval_runs`, one row per run with its
//! JSON. The table is created on first use (not by a numbered migration, so that it stays out
//! of the schema's version sequence), under the migration lock so that two nodes never race
//! to create it.

use flue_core::store::{EvalRunRecord, EvalRunStore};
use flue_core::{Result, util::now_ms};
use tokio_postgres::Row;

use super::{
    LOCK_NAMESPACE, MIGRATION_LOCK, PostgresStore, execute, int, pg_error, query_all, query_opt,
    uint,
};

const CREATE: &str = "CREATE TABLE IF NOT EXISTS flue_eval_runs (
    id TEXT PRIMARY KEY,
    run TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
)";

fn record_of(row: &Row) -> EvalRunRecord {
    EvalRunRecord {
        id: row.get(0),
        run: row.get(1),
        created_at: uint(row.get(2)),
        updated_at: uint(row.get(3)),
    }
}

impl PostgresStore {
    /// Creates `flue_eval_runs` if it is missing (a short transaction; eval runs are stored
    /// once per finished case, so it is not worth remembering).
    async fn ensure_eval_runs(&self) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(pg_error("cannot begin the eval_runs transaction"))?;
        execute(
            &tx,
            "SELECT pg_advisory_xact_lock($1, $2)",
            &[&LOCK_NAMESPACE, &MIGRATION_LOCK],
            "cannot lock the schema",
        )
        .await?;
        execute(&tx, CREATE, &[], "cannot create flue_eval_runs").await?;
        tx.commit()
            .await
            .map_err(pg_error("cannot create flue_eval_runs"))
    }
}

impl EvalRunStore for PostgresStore {
    async fn put_eval_run(&self, id: &str, run: &str) -> Result<()> {
        self.ensure_eval_runs().await?;
        let client = self.client().await?;
        let now = int(now_ms());
        execute(
            &client,
            "INSERT INTO flue_eval_runs (id, run, created_at, updated_at) VALUES ($1, $2, $3, $3)
             ON CONFLICT (id) DO UPDATE SET run = EXCLUDED.run, updated_at = EXCLUDED.updated_at",
            &[&id, &run, &now],
            "cannot store the eval run",
        )
        .await?;
        Ok(())
    }

    async fn eval_run(&self, id: &str) -> Result<Option<EvalRunRecord>> {
        self.ensure_eval_runs().await?;
        let client = self.client().await?;
        let row = query_opt(
            &client,
            "SELECT id, run, created_at, updated_at FROM flue_eval_runs WHERE id = $1",
            &[&id],
            "cannot read the eval run",
        )
        .await?;
        Ok(row.as_ref().map(record_of))
    }

    async fn eval_runs(&self) -> Result<Vec<EvalRunRecord>> {
        self.ensure_eval_runs().await?;
        let client = self.client().await?;
        let rows = query_all(
            &client,
            "SELECT id, run, created_at, updated_at FROM flue_eval_runs ORDER BY id",
            &[],
            "cannot read the eval runs",
        )
        .await?;
        Ok(rows.iter().map(record_of).collect())
    }
}
