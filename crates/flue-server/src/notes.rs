//! Memory notes over HTTP: a message's `memorySubject` binds its conversation to a subject
//! (once); `GET` and `DELETE /_flue/memory/{agent}/{subject}` list and erase an agent's notes
//! about a subject (`*` for every agent), `DELETE .../{note}` one note. For the application's
//! retention and erasure requests; every node of a shared store sees the same notes.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use flue_core::store::{DynNoteStore, check_subject};
use flue_core::{ConversationKey, FlueError};
use serde_json::json;

use crate::error::ApiError;
use crate::state::AppState;

type Shared = State<Arc<AppState>>;

/// The agent segment that means every agent.
const EVERY_AGENT: &str = "*";

/// The runtime's note store, or 501 `memory_unavailable`.
fn notes(state: &AppState) -> Result<Arc<dyn DynNoteStore>, ApiError> {
    Arc::clone(state.runtime.runtime().store())
        .note_store()
        .ok_or_else(|| {
            ApiError::other(
                StatusCode::NOT_IMPLEMENTED,
                "memory_unavailable",
                "This server's store keeps no memory notes.",
            )
        })
}

fn store_failed(err: &FlueError) -> ApiError {
    tracing::error!(target: "flue_server::memory", error = %err, "memory store failed");
    ApiError::internal()
}

/// Binds conversation `key` to memory subject `subject` before its message is admitted: 400
/// for a bad subject, 409 `memory_subject_conflict` when it is bound to another one.
pub(crate) async fn bind(
    state: &AppState,
    key: &ConversationKey,
    subject: &str,
) -> Result<(), ApiError> {
    check_subject(subject)
        .map_err(|err| ApiError::invalid_request(format!("`memorySubject`: {err}")))?;
    match notes(state)?
        .bind_subject(&key.instance_id(), subject)
        .await
    {
        Ok(()) => Ok(()),
        Err(FlueError::MemorySubjectConflict { .. }) => Err(ApiError::other(
            StatusCode::CONFLICT,
            "memory_subject_conflict",
            "The conversation uses the memory of another subject.",
        )
        .with_details(
            "A conversation's `memorySubject` is set once: send the same one (or none), or \
             start another conversation.",
        )),
        Err(err) => Err(store_failed(&err)),
    }
}

/// The agent of a path: `None` for `*` (every agent).
fn agent_of(agent: &str) -> Option<&str> {
    (agent != EVERY_AGENT).then_some(agent)
}

fn no_store(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// `GET /_flue/memory/{agent}/{subject}`: `{notes: [{id, agent, subject, text, created_at}]}`,
/// oldest first.
pub(crate) async fn list(
    State(state): Shared,
    Path((agent, subject)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let found = notes(&state)?
        .list_notes(agent_of(&agent), Some(&subject))
        .await
        .map_err(|err| store_failed(&err))?;
    Ok(no_store(Json(json!({ "notes": found })).into_response()))
}

/// `DELETE /_flue/memory/{agent}/{subject}`: erases the notes (with `*`, every agent's and the
/// subject's bindings to conversations); `{deleted: n}`.
pub(crate) async fn erase(
    State(state): Shared,
    Path((agent, subject)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let deleted = notes(&state)?
        .erase_notes(agent_of(&agent), &subject)
        .await
        .map_err(|err| store_failed(&err))?;
    tracing::info!(target: "flue_server::memory", agent, deleted, "memory erased");
    Ok(no_store(
        Json(json!({ "deleted": deleted })).into_response(),
    ))
}

/// `DELETE /_flue/memory/{agent}/{subject}/{note}`: `{deleted: 1}`, or 404 `note_not_found`.
pub(crate) async fn delete(
    State(state): Shared,
    Path((agent, subject, note)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let Some(agent) = agent_of(&agent) else {
        return Err(ApiError::invalid_request(
            "Name the note's agent: `*` erases a subject, not one note.",
        ));
    };
    let deleted = notes(&state)?
        .delete_note(agent, &subject, &note)
        .await
        .map_err(|err| store_failed(&err))?;
    if !deleted {
        return Err(
            ApiError::other(StatusCode::NOT_FOUND, "note_not_found", "No such note.").with_details(
                format!("Agent {agent:?} has no note {note:?} about that subject."),
            ),
        );
    }
    Ok(no_store(Json(json!({ "deleted": 1 })).into_response()))
}
