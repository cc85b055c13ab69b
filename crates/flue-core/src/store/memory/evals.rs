//! [`EvalRunStore`] for [`MemoryStore`]: runs in a map behind a lock of their own.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use crate::error::Result;
use crate::store::MemoryStore;
use crate::store::evals::{EvalRunRecord, EvalRunStore};
use crate::util::now_ms;

/// Eval runs by id.
#[derive(Debug, Default)]
pub(super) struct MemoryEvalRuns {
    runs: Mutex<BTreeMap<String, EvalRunRecord>>,
}

impl EvalRunStore for MemoryStore {
    async fn put_eval_run(&self, id: &str, run: &str) -> Result<()> {
        // Every critical section replaces one entry whole.
        let mut runs = self
            .eval_runs
            .runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let now = now_ms();
        let created_at = runs.get(id).map_or(now, |stored| stored.created_at);
        runs.insert(
            id.to_owned(),
            EvalRunRecord {
                id: id.to_owned(),
                run: run.to_owned(),
                created_at,
                updated_at: now,
            },
        );
        Ok(())
    }

    async fn eval_run(&self, id: &str) -> Result<Option<EvalRunRecord>> {
        let runs = self
            .eval_runs
            .runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Ok(runs.get(id).cloned())
    }

    async fn eval_runs(&self) -> Result<Vec<EvalRunRecord>> {
        let runs = self
            .eval_runs
            .runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Ok(runs.values().cloned().collect())
    }
}
