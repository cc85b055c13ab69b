//! Eval runs kept by a store ([`EvalRunStore`]): one record per run of `flue eval`, the run and
//! its case results as JSON the store does not read, rewritten whole after every finished case.

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::util::BoxFuture;

/// One stored eval run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EvalRunRecord {
    /// The run's id (a ULID, so runs sort by start).
    pub id: String,
    /// The run and its case results, as JSON (flue-eval's `EvalRun`).
    pub run: String,
    /// When it was first stored, ms since the epoch.
    pub created_at: u64,
    /// When it was last stored, ms since the epoch.
    pub updated_at: u64,
}

/// Durable storage of eval runs, shared by every process of the store.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an eval run store",
    label = "implement `flue_core::store::EvalRunStore` for this type"
)]
pub trait EvalRunStore: Send + Sync {
    /// Stores run `id` as `run`, replacing what was stored under that id (its creation time
    /// is kept).
    fn put_eval_run(&self, id: &str, run: &str) -> impl Future<Output = Result<()>> + Send;

    /// The run `id`, if stored.
    fn eval_run(&self, id: &str) -> impl Future<Output = Result<Option<EvalRunRecord>>> + Send;

    /// Every run, by id (oldest first).
    fn eval_runs(&self) -> impl Future<Output = Result<Vec<EvalRunRecord>>> + Send;
}

/// [`EvalRunStore`] with boxed futures, so that it can be used as `Arc<dyn DynEvalRunStore>`.
///
/// Implemented for every [`EvalRunStore`]; implement that trait, not this one.
pub trait DynEvalRunStore: Send + Sync {
    /// See [`EvalRunStore::put_eval_run`].
    fn put_eval_run<'a>(&'a self, id: &'a str, run: &'a str) -> BoxFuture<'a, Result<()>>;
    /// See [`EvalRunStore::eval_run`].
    fn eval_run<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<EvalRunRecord>>>;
    /// See [`EvalRunStore::eval_runs`].
    fn eval_runs(&self) -> BoxFuture<'_, Result<Vec<EvalRunRecord>>>;
}

impl<T: EvalRunStore> DynEvalRunStore for T {
    fn put_eval_run<'a>(&'a self, id: &'a str, run: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(EvalRunStore::put_eval_run(self, id, run))
    }

    fn eval_run<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<EvalRunRecord>>> {
        Box::pin(EvalRunStore::eval_run(self, id))
    }

    fn eval_runs(&self) -> BoxFuture<'_, Result<Vec<EvalRunRecord>>> {
        Box::pin(EvalRunStore::eval_runs(self))
    }
}
