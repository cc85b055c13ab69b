//! Going back in a conversation over HTTP: `POST /agents/<agent>/<id>/fork` (a new
//! conversation from an earlier turn) and `POST /agents/<agent>/<id>/rewind` (the workspace's
//! files as they were before a turn, or a rewind undone). Both read and write the store only,
//! so any node of a shared store serves them, before or after any restart.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use flue_core::{
    FlueError, LocalSandbox, fork::fork_conversation, rewind::RewindTarget,
    rewind::RewindWorkspace, rewind::rewind, submission::check_conversation_id,
};
use serde_json::{Map, Value, json};

use crate::error::ApiError;
use crate::routes::{conversation_key, json_no_store, read_body};
use crate::state::AppState;

type Shared = State<Arc<AppState>>;

/// `POST /agents/<agent>/<id>/fork` with `{"at": N, "id"?: "new-id"}`: 201 with the new
/// conversation's `agent`, `id` and what was copied.
pub(crate) async fn fork(
    State(state): Shared,
    Path((agent, id)): Path<(String, String)>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let key = conversation_key(&state, agent, id)?;
    let body = read_body(&state, body)?;
    let object = json_object(&headers, &body, &["at", "id"])?;
    let at = object
        .get("at")
        .and_then(Value::as_u64)
        .ok_or_else(|| ApiError::invalid_request("`at` must be a turn number (1 or more)."))?;
    let new_id = match object.get("id") {
        None | Some(Value::Null) => flue_core::util::new_ulid(),
        Some(Value::String(new_id)) => {
            check_conversation_id(new_id)
                .map_err(|err| ApiError::invalid_request(format!("`id`: {err}")))?;
            new_id.clone()
        }
        Some(_) => return Err(ApiError::invalid_request("`id` must be a string.")),
    };
    let target = flue_core::ConversationKey::new(key.agent.clone(), new_id.clone());
    let store = state.runtime.runtime().store();
    if state
        .runtime
        .runtime()
        .conversation(&target)
        .await
        .map_err(api)?
        .is_some()
    {
        return Err(exists(&target.to_string()));
    }
    let report = fork_conversation(&**store, &key.instance_id(), at, &target.instance_id())
        .await
        .map_err(|err| match err {
            FlueError::SessionNotFound { .. } => ApiError::stream_not_found(&key.to_string()),
            FlueError::SessionAlreadyExists { .. } => exists(&target.to_string()),
            FlueError::InvalidRequest { message } => ApiError::invalid_request(message),
            other => api(other),
        })?;
    tracing::info!(
        target: "flue_server::fork",
        conversation = %key.to_string(),
        fork = %target.to_string(),
        at,
        "forked"
    );
    let body = json!({
        "agent": key.agent,
        "id": new_id,
        "from": {"agent": key.agent, "id": key.id},
        "at": report.at,
        "turns": report.turns,
        "records": report.records,
        "tasks": report.tasks,
    });
    let mut response = (StatusCode::CREATED, Json(body)).into_response();
    json_no_store(response.headers_mut());
    Ok(response)
}

/// `POST /agents/<agent>/<id>/rewind` with `{"to": N}` or `{"undo": "<rewind id>"}`, and
/// `"dryRun": true` to only list: 200 with the plan; 409 `rewind_conflict` (the plan in
/// `meta`) when a file was changed outside the agent since; 409 `session_busy` while the
/// conversation has unsettled work.
pub(crate) async fn rewind_files(
    State(state): Shared,
    Path((agent, id)): Path<(String, String)>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let key = conversation_key(&state, agent, id)?;
    let body = read_body(&state, body)?;
    let object = json_object(&headers, &body, &["to", "undo", "dryRun"])?;
    let target = match (object.get("to"), object.get("undo")) {
        (Some(to), None) => RewindTarget::Turn {
            turn: to.as_u64().ok_or_else(|| {
                ApiError::invalid_request("`to` must be a turn number (1 or more).")
            })?,
        },
        (None, Some(Value::String(undo))) if !undo.is_empty() => {
            RewindTarget::Undo { id: undo.clone() }
        }
        _ => {
            return Err(ApiError::invalid_request(
                "Pass `to` (a turn number) or `undo` (a rewind id), not both.",
            ));
        }
    };
    let dry_run = match object.get("dryRun") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(flag)) => *flag,
        Some(_) => return Err(ApiError::invalid_request("`dryRun` must be a boolean.")),
    };
    let Some(root) = state.config.workspace_root.clone() else {
        return Err(ApiError::other(
            StatusCode::NOT_IMPLEMENTED,
            "rewind_unavailable",
            "This server has no workspace to rewind.",
        )
        .with_details("Serve a workspace (`flue serve` in its root) to rewind its files."));
    };
    let runtime = state.runtime.runtime();
    if !dry_run
        && let Some(info) = runtime.conversation(&key).await.map_err(api)?
        && info.unsettled > 0
    {
        return Err(ApiError::other(
            StatusCode::CONFLICT,
            "session_busy",
            "The conversation has unsettled work.",
        )
        .with_details("Rewind once its submissions have settled (or abort them)."));
    }
    let store = runtime.store();
    let Some(audit) = Arc::clone(store).audit_store() else {
        return Err(ApiError::other(
            StatusCode::NOT_IMPLEMENTED,
            "rewind_unavailable",
            "This server's store keeps no audit log.",
        ));
    };
    let sandbox = LocalSandbox::new(&root).map_err(api)?;
    let workspace = RewindWorkspace {
        sandbox: &sandbox,
        sessions: &**store,
        audit: &*audit,
        agent: &key.agent,
    };
    let plan = rewind(&workspace, &key.instance_id(), target, dry_run)
        .await
        .map_err(|err| match err {
            FlueError::SessionNotFound { .. } => ApiError::stream_not_found(&key.to_string()),
            FlueError::InvalidRequest { message } => ApiError::invalid_request(message),
            other => api(other),
        })?;
    let plan_json = serde_json::to_value(&plan).unwrap_or_default();
    if plan.conflicts().next().is_some() {
        let paths: Vec<&str> = plan.conflicts().map(|file| file.path.as_str()).collect();
        return Err(ApiError::other(
            StatusCode::CONFLICT,
            "rewind_conflict",
            "Files were changed outside the agent since; nothing was rewound.",
        )
        .with_details(format!("In conflict: {}.", paths.join(", ")))
        .with_meta(json!({ "plan": plan_json })));
    }
    tracing::info!(
        target: "flue_server::rewind",
        conversation = %key.to_string(),
        rewind = %plan.id,
        applied = plan.applied,
        files = plan.files.len(),
        "rewound"
    );
    let mut response = Json(plan_json).into_response();
    json_no_store(response.headers_mut());
    Ok(response)
}

/// A runtime error as the protocol's envelope.
fn api(err: FlueError) -> ApiError {
    ApiError::from(crate::durable::backend_error(err))
}

/// 409 `conversation_exists`.
fn exists(conversation: &str) -> ApiError {
    ApiError::other(
        StatusCode::CONFLICT,
        "conversation_exists",
        "The conversation already exists.",
    )
    .with_details(format!(
        "{conversation} already exists; pass another `id`, or none for a new one."
    ))
}

/// A JSON object body (`application/json`) holding only `fields`.
pub(crate) fn json_object(
    headers: &HeaderMap,
    body: &[u8],
    fields: &[&str],
) -> Result<Map<String, Value>, ApiError> {
    let json_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"));
    if !json_type {
        return Err(ApiError::unsupported_media_type());
    }
    let value: Value = serde_json::from_slice(body)
        .map_err(|err| ApiError::invalid_json(format!("The body does not parse: {err}.")))?;
    let Value::Object(object) = value else {
        return Err(ApiError::invalid_request("The body must be a JSON object."));
    };
    if let Some(field) = object.keys().find(|name| !fields.contains(&name.as_str())) {
        return Err(ApiError::invalid_request(format!(
            "Unknown field `{field}`; the fields are {}.",
            fields.join(", ")
        )));
    }
    Ok(object)
}
