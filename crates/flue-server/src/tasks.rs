//! A conversation's background tasks over HTTP: `GET /agents/{agent}/{id}/tasks` lists the
//! tasks it started without waiting (the `task` tool's `background`), `POST
//! .../tasks/{task}/cancel` cancels one; its `task_result` message then reports `aborted`.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use flue_core::FlueError;
use serde_json::{Value, json};

use crate::durable::backend_error;
use crate::error::ApiError;
use crate::routes::conversation_key;
use crate::state::AppState;

type Shared = State<Arc<AppState>>;

/// `GET /agents/<agent>/<id>/tasks`: `{"tasks": [...]}`, oldest first.
pub(crate) async fn list(
    State(state): Shared,
    Path((agent, id)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let key = conversation_key(&state, agent, id)?;
    let tasks = state
        .runtime
        .runtime()
        .background_tasks(&key)
        .await
        .map_err(|err| ApiError::from(backend_error(err)))?;
    Ok(Json(json!({ "tasks": tasks })))
}

/// `POST /agents/<agent>/<id>/tasks/<task>/cancel`: `{"cancelled": bool}` (`false` when it
/// had settled); 404 `task_not_found` for a task this conversation did not start.
pub(crate) async fn cancel(
    State(state): Shared,
    Path((agent, id, task)): Path<(String, String, String)>,
) -> Result<Json<Value>, ApiError> {
    let key = conversation_key(&state, agent, id)?;
    let runtime = state.runtime.runtime();
    match runtime.cancel_background_task(&key, &task).await {
        Ok(cancelled) => {
            tracing::info!(
                target: "flue_server::tasks",
                conversation = %key.to_string(),
                task,
                cancelled,
                "cancel"
            );
            Ok(Json(json!({ "cancelled": cancelled })))
        }
        Err(FlueError::SubmissionNotFound { .. }) => Err(ApiError::other(
            StatusCode::NOT_FOUND,
            "task_not_found",
            &format!("{task} is not a background task of this conversation"),
        )),
        Err(err) => Err(ApiError::from(backend_error(err))),
    }
}
