//! The console's Evals tab reads: `GET /_flue/dev/evals` lists the store's eval runs (each
//! with its counts, not its results) and `GET /_flue/dev/evals/{id}` answers one run whole, as
//! `flue eval` stored it. The page computes pass rates, figures and a diff from the run (the
//! run's shape is flue-eval's, which this crate does not depend on).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use flue_core::store::{DynEvalRunStore, EvalRunRecord};
use serde_json::{Value, json};

use super::{DevConsole, LOG_TARGET};

fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"error": {"type": kind, "message": message}})),
    )
        .into_response()
}

fn store_failed(err: &flue_core::FlueError) -> Response {
    tracing::warn!(target: LOG_TARGET, error = %err, "cannot read eval runs");
    error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal_error",
        "the eval runs cannot be read; see the terminal",
    )
}

fn runs_of(state: &DevConsole) -> Option<Arc<dyn DynEvalRunStore>> {
    Arc::clone(state.store()).eval_run_store()
}

/// A run's line of the list: its id, times and counts.
fn line(record: &EvalRunRecord) -> Option<Value> {
    let run: Value = serde_json::from_str(&record.run).ok()?;
    let results = run.get("results").and_then(Value::as_array);
    let passed = results.map_or(0, |results| {
        results
            .iter()
            .filter(|result| result.get("passed") == Some(&Value::Bool(true)))
            .count()
    });
    Some(json!({
        "id": record.id,
        "startedAt": run.get("startedAt"),
        "finishedAt": run.get("finishedAt"),
        "updatedAt": record.updated_at,
        "cases": run.get("cases").and_then(Value::as_array).map_or(0, Vec::len),
        "repeat": run.get("repeat"),
        "threshold": run.get("threshold"),
        "baseline": run.get("baseline"),
        "runs": results.map_or(0, Vec::len),
        "passed": passed,
    }))
}

/// `GET /_flue/dev/evals`: every run, newest first.
pub(super) async fn list(State(state): State<Arc<DevConsole>>) -> Response {
    let Some(runs) = runs_of(&state) else {
        return axum::Json(json!({"runs": []})).into_response();
    };
    match runs.eval_runs().await {
        Ok(records) => {
            let lines: Vec<Value> = records.iter().rev().filter_map(line).collect();
            axum::Json(json!({ "runs": lines })).into_response()
        }
        Err(err) => store_failed(&err),
    }
}

/// `GET /_flue/dev/evals/{id}`: the run as stored.
pub(super) async fn show(State(state): State<Arc<DevConsole>>, Path(id): Path<String>) -> Response {
    let not_found = || {
        error(
            StatusCode::NOT_FOUND,
            "eval_run_not_found",
            &format!("no eval run {id:?}"),
        )
    };
    let Some(runs) = runs_of(&state) else {
        return not_found();
    };
    match runs.eval_run(&id).await {
        Ok(Some(record)) => match serde_json::from_str::<Value>(&record.run) {
            Ok(run) => {
                axum::Json(json!({"run": run, "updatedAt": record.updated_at})).into_response()
            }
            Err(err) => store_failed(&flue_core::FlueError::config(format!(
                "eval run {id} is not JSON: {err}"
            ))),
        },
        Ok(None) => not_found(),
        Err(err) => store_failed(&err),
    }
}
