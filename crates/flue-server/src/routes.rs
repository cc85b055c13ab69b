//! The route handlers: parse and check a request completely (nothing is stored for a refused
//! request), call the [`DurableRuntime`](crate::DurableRuntime), render the protocol's response.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, OriginalUri, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use flue_core::{ConversationKey, submission::SendCondition};
use serde_json::{Value, json};

use crate::backend::{Attachment, Delivered, Delivery};
use crate::chunks::action_json;
use crate::error::ApiError;
use crate::live;
use crate::project::Conversation;
use crate::render::{render_page, with_live_resets};
use crate::state::{AppState, BudgetHold};
use crate::wire::{AbortResponse, AdmissionResponse, DeleteResponse, Offset, PromptBody};

/// Longest base64 image data accepted (14 MiB of characters).
const MAX_ATTACHMENT_CHARS: usize = 14 * 1024 * 1024;

/// Most images one message may carry (each is stored with the message and served by id).
const MAX_ATTACHMENTS: usize = 16;

/// The prefix of the idempotency keys of schedule ticks, which HTTP clients may not use.
const SCHEDULE_KEY_PREFIX: &str = "schedule:";

/// Longest `idempotencyKey`, in characters (the official client's limit).
const MAX_IDEMPOTENCY_KEY_CHARS: usize = 256;

/// The fields of a message body: a user message's, a signal's, and the reserved siblings
/// either may carry. Anything else is refused, naming the field.
const USER_FIELDS: &[&str] = &[
    "kind",
    "body",
    "attachments",
    "result",
    "model",
    "thinking",
    "role",
    "skill",
    "args",
];
const SIGNAL_FIELDS: &[&str] = &[
    "kind",
    "type",
    "body",
    "attributes",
    "tagName",
    "model",
    "thinking",
    "role",
];
const SIBLING_FIELDS: &[&str] = &[
    "uid",
    "idempotencyKey",
    "initialData",
    "budget",
    "memorySubject",
];

pub(crate) const NEXT_OFFSET: &str = "stream-next-offset";
pub(crate) const UP_TO_DATE: &str = "stream-up-to-date";

type Shared = State<Arc<AppState>>;

/// `GET /_flue/health`.
pub(crate) async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /_flue/agents`.
pub(crate) async fn agents(State(state): Shared) -> Json<Value> {
    Json(json!({"agents": state.runtime.agents()}))
}

/// `POST /agents/<agent>/<id>`: admits one message.
pub(crate) async fn send(
    State(state): Shared,
    Path((agent, id)): Path<(String, String)>,
    Query(query): Query<Vec<(String, String)>>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    hold: Option<Extension<BudgetHold>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let key = conversation_key(&state, agent, id)?;
    if query.iter().any(|(name, _)| name == "wait") {
        return Err(ApiError::invalid_request(
            "There is no synchronous wait mode: drop `?wait` and read the outcome from the \
             conversation stream.",
        ));
    }
    let body = read_body(&state, body)?;
    let delivery = parse_delivery(&headers, &body)?;
    // The message lives on in the delivery: the body's bytes need not be held while it is
    // admitted.
    drop(body);
    if let Some(subject) = &delivery.memory_subject {
        // The message's choices are checked first: a refused message binds nothing either.
        state
            .runtime
            .runtime()
            .check_options(&key.agent, &delivery.options)
            .await
            .map_err(|err| ApiError::invalid_request(err.to_string()))?;
        crate::notes::bind(&state, &key, subject).await?;
    }
    let admitted = state.runtime.dispatch(&key, delivery).await?;
    // A large message keeps its share of the in-flight budget while it runs.
    if let Some(permit) = hold.and_then(|Extension(hold)| hold.take())
        && !admitted.deduplicated
    {
        let runtime = state.runtime.runtime().clone();
        let submission = admitted.submission_id.clone();
        tokio::spawn(async move {
            let _ = runtime.wait_idle_lifecycle(&submission).await;
            drop(permit);
        });
    }
    let stream_url = stream_url(&headers, uri.path());
    let offset = admitted.offset.to_string();
    tracing::info!(
        target: "flue_server::admission",
        conversation = %key.to_string(),
        submission = %admitted.submission_id,
        deduplicated = admitted.deduplicated,
        "admitted"
    );
    let response = AdmissionResponse {
        stream_url: stream_url.clone(),
        offset: offset.clone(),
        submission_id: admitted.submission_id,
        uid: admitted.uid,
        deduplicated: admitted.deduplicated.then_some(true),
    };
    let mut response = (StatusCode::ACCEPTED, Json(response)).into_response();
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(&stream_url) {
        headers.insert(header::LOCATION, value);
    }
    insert(headers, NEXT_OFFSET, &offset);
    Ok(response)
}

/// `GET /agents/<agent>/<id>`: a snapshot or updates.
pub(crate) async fn read(
    State(state): Shared,
    Path((agent, id)): Path<(String, String)>,
    Query(query): Query<Vec<(String, String)>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let key = conversation_key(&state, agent, id)?;
    let params = ReadParams::parse(&query)?;
    match params.view {
        View::History => {
            if params.offset.is_some() || params.live.is_some() || params.tail {
                return Err(ApiError::invalid_request(
                    "view=history takes no `offset`, `tail` or `live`; use view=updates.",
                ));
            }
            snapshot(&state, &key).await
        }
        View::Updates => {
            if params.tail {
                return Err(ApiError::invalid_request(
                    "`tail` is not supported: a stream suffix cannot be projected safely; \
                     read from an offset.",
                ));
            }
            let Some(offset) = params.offset else {
                return Err(ApiError::invalid_request(
                    "view=updates needs `offset` exactly once: -1 or an offset a response \
                     returned.",
                ));
            };
            let from_origin = offset.1;
            let mut offset = offset.0;
            match params.live {
                None => updates(&state, &key, offset, from_origin, false).await,
                Some(Live::LongPoll) => updates(&state, &key, offset, from_origin, true).await,
                Some(Live::Sse) => {
                    // A reconnecting EventSource names where it stopped.
                    if let Some(last) = headers
                        .get("last-event-id")
                        .and_then(|value| value.to_str().ok())
                        .and_then(Offset::parse)
                    {
                        offset = last;
                    }
                    live::sse(state, key, offset, from_origin).await
                }
            }
        }
    }
}

/// `HEAD /agents/<agent>/<id>`.
pub(crate) async fn head(
    State(state): Shared,
    Path((agent, id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let key = conversation_key(&state, agent, id).map_err(ApiError::without_body)?;
    let head = state
        .runtime
        .head(&key)
        .await
        .map_err(|err| ApiError::from(err).without_body())?;
    let mut response = StatusCode::OK.into_response();
    let headers = response.headers_mut();
    json_no_store(headers);
    insert(headers, NEXT_OFFSET, &head.to_string());
    insert(headers, UP_TO_DATE, "true");
    Ok(response)
}

/// `POST /agents/<agent>/<id>/abort`.
pub(crate) async fn abort(
    State(state): Shared,
    Path((agent, id)): Path<(String, String)>,
) -> Result<Json<AbortResponse>, ApiError> {
    let key = conversation_key(&state, agent, id)?;
    let aborted = state.runtime.abort(&key).await?;
    tracing::info!(
        target: "flue_server::abort",
        conversation = %key.to_string(),
        aborted,
        "abort"
    );
    Ok(Json(AbortResponse { aborted }))
}

/// `POST /agents/<agent>/<id>/tasks/<task>/abort`: aborts one running task (a task session
/// of the conversation, at any depth) without aborting the submission; its `task` call answers
/// `task_aborted` and the parent goes on. `{"aborted": false}` when it is not running here.
pub(crate) async fn abort_task(
    State(state): Shared,
    Path((agent, id, task)): Path<(String, String, String)>,
) -> Result<Json<AbortResponse>, ApiError> {
    let key = conversation_key(&state, agent, id)?;
    if flue_core::util::task_session_parent(&task).is_none() {
        return Err(ApiError::invalid_request(
            "The task segment must name a task session (`task:<parent>:<uuid>`).",
        ));
    }
    let aborted = state.runtime.abort_task(&key, &task)?;
    tracing::info!(
        target: "flue_server::abort",
        conversation = %key.to_string(),
        task = %task,
        aborted,
        "abort task"
    );
    Ok(Json(AbortResponse { aborted }))
}

/// `DELETE /agents/<agent>/<id>`: deletes the conversation with its task sessions; 409
/// `session_busy` while a submission is queued, running or waiting (nothing is deleted).
pub(crate) async fn delete(
    State(state): Shared,
    Path((agent, id)): Path<(String, String)>,
) -> Result<Json<DeleteResponse>, ApiError> {
    let key = conversation_key(&state, agent, id)?;
    let deleted = state.runtime.delete(&key).await?;
    tracing::info!(
        target: "flue_server::delete",
        conversation = %key.to_string(),
        deleted,
        "delete"
    );
    Ok(Json(DeleteResponse { deleted }))
}

/// `GET /agents/<agent>/<id>/submissions/<submission>`: where one submission is.
pub(crate) async fn submission(
    State(state): Shared,
    Path((agent, id, submission)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let key = conversation_key(&state, agent, id)?;
    match state.runtime.submission(&key, &submission).await? {
        Some(status) => {
            let mut response = Json(status).into_response();
            json_no_store(response.headers_mut());
            Ok(response)
        }
        None => Err(ApiError::submission_not_found(&submission)),
    }
}

/// `GET /agents/<agent>/<id>/actions`: the tool calls that waited for a decision, pending
/// and decided, in order.
pub(crate) async fn actions(
    State(state): Shared,
    Path((agent, id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let key = conversation_key(&state, agent, id)?;
    let actions: Vec<Value> = state
        .runtime
        .actions(&key)
        .await?
        .iter()
        .map(action_json)
        .collect();
    let mut response = Json(json!({ "actions": actions })).into_response();
    json_no_store(response.headers_mut());
    Ok(response)
}

/// `GET /agents/<agent>/<id>/rules`: the conversation's standing approvals ("always"
/// answers) with their status on this server.
pub(crate) async fn rules(
    State(state): Shared,
    Path((agent, id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let key = conversation_key(&state, agent, id)?;
    let rules: Vec<Value> = state
        .runtime
        .rules(&key)
        .await?
        .iter()
        .map(rule_json)
        .collect();
    let mut response = Json(json!({ "rules": rules })).into_response();
    json_no_store(response.headers_mut());
    Ok(response)
}

/// `DELETE /agents/<agent>/<id>/rules/<rule>`: revokes one standing approval.
pub(crate) async fn revoke_rule(
    State(state): Shared,
    Path((agent, id, rule)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let key = conversation_key(&state, agent, id)?;
    let revoked = state.runtime.revoke_rule(&key, &rule).await?;
    let mut response = Json(rule_json(&revoked)).into_response();
    json_no_store(response.headers_mut());
    Ok(response)
}

/// One standing approval on the wire (camelCase, like actions).
fn rule_json(rule: &flue_core::standing::RuleInfo) -> Value {
    json!({
        "ruleId": rule.rule_id,
        "toolName": rule.tool_name,
        "actionId": rule.action_id,
        "status": rule.status,
    })
}

/// `GET /agents/<agent>/<id>/state`: the conversation's state document as stored, with its
/// version (0 and `{}` while nothing wrote it).
pub(crate) async fn conversation_state(
    State(state): Shared,
    Path((agent, id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let key = conversation_key(&state, agent, id)?;
    let body = match state.runtime.state(&key).await? {
        Some(change) => json!({
            "state": change.value,
            "version": change.version,
            "source": change.source,
        }),
        None => json!({ "state": {}, "version": 0 }),
    };
    let mut response = Json(body).into_response();
    json_no_store(response.headers_mut());
    Ok(response)
}

/// The request body, or the error for the reason axum refused it: 413 over the body limit,
/// 400 otherwise.
pub(crate) fn read_body(
    state: &AppState,
    body: Result<Bytes, BytesRejection>,
) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::payload_too_large(state.config.body_limit)
        } else {
            ApiError::invalid_request(rejection.body_text())
        }
    })
}

/// `POST /agents/<agent>/<id>/actions/<action>`: decides one pending action.
pub(crate) async fn resolve(
    State(state): Shared,
    Path((agent, id, action)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let key = conversation_key(&state, agent, id)?;
    let body = read_body(&state, body)?;
    let decision = parse_decision(&headers, &body)?;
    let resolved = state.runtime.resolve(&key, &action, decision).await?;
    tracing::info!(
        target: "flue_server::action",
        conversation = %key.to_string(),
        action = %action,
        "resolved"
    );
    let offset = resolved.offset.to_string();
    let mut response = (
        StatusCode::ACCEPTED,
        Json(json!({"offset": offset, "submissionId": resolved.submission_id})),
    )
        .into_response();
    insert(response.headers_mut(), NEXT_OFFSET, &offset);
    Ok(response)
}

/// `POST /agents/<agent>/<id>/interrupt`: answers every pending action as interrupted and,
/// with a body `{"message": "..."}`, sends that message next. An empty body interrupts only.
pub(crate) async fn interrupt(
    State(state): Shared,
    Path((agent, id)): Path<(String, String)>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let key = conversation_key(&state, agent, id)?;
    let body = read_body(&state, body)?;
    let message = parse_interrupt(&headers, &body)?;
    let done = state.runtime.interrupt(&key, message).await?;
    tracing::info!(
        target: "flue_server::action",
        conversation = %key.to_string(),
        interrupted = done.interrupted.len(),
        "interrupted"
    );
    let mut response = Json(json!({
        "interrupted": done.interrupted,
        "settledSubmissionId": done.settled,
        "submissionId": done.submission_id,
    }))
    .into_response();
    json_no_store(response.headers_mut());
    Ok(response)
}

/// The body of an interrupt: empty, `{}` or `{"message": "..."}`.
fn parse_interrupt(headers: &HeaderMap, body: &[u8]) -> Result<Option<String>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
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
    let shape = "The body must be empty, {} or {\"message\": \"...\"} with a non-empty message.";
    let Some(object) = value.as_object() else {
        return Err(ApiError::invalid_request(shape));
    };
    if object.keys().any(|name| name != "message") {
        return Err(ApiError::invalid_request(shape));
    }
    match object.get("message") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) if !text.trim().is_empty() => Ok(Some(text.clone())),
        Some(_) => Err(ApiError::invalid_request(shape)),
    }
}

/// The body of a decision: `{"decision": "allow"}`, `{"decision": "allow_always"}` (allow, and
/// this tool's later calls in the conversation too), `{"decision": "deny", "message"?}`,
/// `{"decision": "result", "value", "isError"?}`, and for an MCP server's question
/// `{"decision": "accept", "content": {...}}`, `{"decision": "decline", "message"?}` or
/// `{"decision": "cancel"}`.
fn parse_decision(headers: &HeaderMap, body: &[u8]) -> Result<flue_core::ActionDecision, ApiError> {
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
    let shape = "The body must be {\"decision\": \"allow\"}, {\"decision\": \"allow_always\"}, \
                 {\"decision\": \"deny\", \
                 \"message\": \"...\"} or {\"decision\": \"result\", \"value\": ...}; an MCP \
                 server's question takes {\"decision\": \"accept\", \"content\": {...}}, \
                 {\"decision\": \"decline\"} or {\"decision\": \"cancel\"}.";
    let Some(object) = value.as_object() else {
        return Err(ApiError::invalid_request(shape));
    };
    let message = match object.get("message") {
        None | Some(Value::Null) => None,
        Some(Value::String(message)) => Some(message.clone()),
        Some(_) => return Err(ApiError::invalid_request("`message` must be a string.")),
    };
    match object.get("decision").and_then(Value::as_str) {
        Some("allow") => Ok(flue_core::ActionDecision::Allow),
        Some("allow_always") => Ok(flue_core::ActionDecision::AllowAlways),
        Some("deny") => Ok(flue_core::ActionDecision::Deny { message }),
        Some("result") => {
            let Some(result) = object.get("value") else {
                return Err(ApiError::invalid_request(
                    "A `result` decision needs `value`: the custom tool's output.",
                ));
            };
            let is_error = match object.get("isError") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(is_error)) => *is_error,
                Some(_) => return Err(ApiError::invalid_request("`isError` must be a boolean.")),
            };
            Ok(flue_core::ActionDecision::Result {
                value: result.clone(),
                is_error,
            })
        }
        Some("accept") => match object.get("content") {
            Some(content @ Value::Object(_)) => Ok(flue_core::ActionDecision::Accept {
                content: content.clone(),
            }),
            None | Some(Value::Null) => {
                Ok(flue_core::ActionDecision::Accept { content: json!({}) })
            }
            Some(_) => Err(ApiError::invalid_request(
                "`content` must be a JSON object of the requested fields.",
            )),
        },
        Some("decline") => Ok(flue_core::ActionDecision::Decline { message }),
        Some("cancel") => Ok(flue_core::ActionDecision::Cancel),
        _ => Err(ApiError::invalid_request(shape)),
    }
}

/// `GET /agents/<agent>/<id>/attachments/<attachment>`: the bytes of one image of a message
/// admitted to this conversation (the `id` of its `file` part).
pub(crate) async fn attachment(
    State(state): Shared,
    Path((agent, id, attachment)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let key = conversation_key(&state, agent, id)?;
    state.runtime.head(&key).await?;
    let Some(stored) = state.runtime.attachment(&key, &attachment).await? else {
        return Err(ApiError::attachment_not_found(&attachment));
    };
    let mut response = (StatusCode::OK, stored.bytes).into_response();
    let headers = response.headers_mut();
    // The MIME type is the uploader's: `sandbox` keeps a direct navigation from running it.
    let content_type = HeaderValue::from_str(&stored.mime_type)
        .unwrap_or(HeaderValue::from_static("application/octet-stream"));
    headers.insert(header::CONTENT_TYPE, content_type);
    headers.insert(
        header::CONTENT_DISPOSITION,
        HeaderValue::from_static("inline"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, max-age=31536000, immutable"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("sandbox"),
    );
    Ok(response)
}

/// The snapshot response.
async fn snapshot(state: &AppState, key: &ConversationKey) -> Result<Response, ApiError> {
    let mut conversation = Conversation::default();
    let mut after = Offset::START;
    let incarnation = loop {
        let page = state.runtime.read(key, after, usize::MAX).await?;
        for batch in &page.batches {
            for chunk in &batch.chunks {
                conversation.apply(chunk);
            }
            after = batch.offset;
        }
        if after >= page.head || page.batches.is_empty() {
            break page.incarnation;
        }
    };
    let offset = after.to_string();
    let snapshot = conversation.snapshot(&key.to_string(), offset.clone(), &incarnation);
    let mut response = Json(snapshot).into_response();
    let headers = response.headers_mut();
    json_no_store(headers);
    insert(headers, NEXT_OFFSET, &offset);
    insert(headers, UP_TO_DATE, "true");
    Ok(response)
}

/// A plain or long-poll updates response.
async fn updates(
    state: &AppState,
    key: &ConversationKey,
    offset: Offset,
    from_origin: bool,
    long_poll: bool,
) -> Result<Response, ApiError> {
    let mut page = state
        .runtime
        .read(key, offset, state.config.page_size)
        .await?;
    if long_poll && page.batches.is_empty() {
        let wait = state.runtime.changed(key, offset);
        if tokio::time::timeout(state.config.long_poll_timeout, wait)
            .await
            .is_ok()
        {
            page = state
                .runtime
                .read(key, offset, state.config.page_size)
                .await?;
        }
    }
    let page = with_live_resets(&state.runtime, key, page).await?;
    let (body, next) = render_page(&key.to_string(), &page, offset, from_origin);
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    json_no_store(headers);
    insert(headers, NEXT_OFFSET, &next.to_string());
    if next >= page.head {
        insert(headers, UP_TO_DATE, "true");
    }
    Ok(response)
}

/// The key, after checking the agent and the id.
pub(crate) fn conversation_key(
    state: &AppState,
    agent: String,
    id: String,
) -> Result<ConversationKey, ApiError> {
    if !state.runtime.has_agent(&agent) {
        return Err(ApiError::agent_not_found(&agent));
    }
    if id.trim().is_empty() {
        return Err(ApiError::invalid_request(
            "The conversation id segment is empty.",
        ));
    }
    if id.len() > 256 || id.chars().any(char::is_control) {
        return Err(ApiError::invalid_request(
            "The conversation id must be at most 256 characters without control characters.",
        ));
    }
    Ok(ConversationKey::new(agent, id))
}

#[derive(Clone, Copy, PartialEq)]
enum View {
    History,
    Updates,
}

#[derive(Clone, Copy, PartialEq)]
enum Live {
    LongPoll,
    Sse,
}

/// The query of a conversation read.
struct ReadParams {
    view: View,
    /// The offset and whether it was the origin sentinel `-1`.
    offset: Option<(Offset, bool)>,
    live: Option<Live>,
    tail: bool,
}

impl ReadParams {
    fn parse(query: &[(String, String)]) -> Result<Self, ApiError> {
        let values = |name: &str| {
            query
                .iter()
                .filter(|(key, _)| key == name)
                .map(|(_, value)| value.as_str())
                .collect::<Vec<_>>()
        };
        let view = match values("view").as_slice() {
            [] | ["history"] => View::History,
            ["updates"] => View::Updates,
            [other] => {
                return Err(ApiError::invalid_request(format!(
                    "view={other:?} is not a view: use `history` or `updates`."
                )));
            }
            _ => return Err(ApiError::invalid_request("`view` is given more than once.")),
        };
        let offset = match values("offset").as_slice() {
            [] => None,
            [text] => match Offset::parse(text) {
                Some(offset) => Some((offset, *text == "-1")),
                None => {
                    return Err(ApiError::invalid_request(format!(
                        "offset={text:?} is malformed: use -1 or an offset a response returned \
                         (like 0000000000000000_0000000000000003)."
                    )));
                }
            },
            _ => {
                return Err(ApiError::invalid_request(
                    "`offset` is given more than once.",
                ));
            }
        };
        let live = match values("live").as_slice() {
            [] => None,
            ["long-poll"] => Some(Live::LongPoll),
            ["sse"] => Some(Live::Sse),
            [other] => {
                return Err(ApiError::invalid_request(format!(
                    "live={other:?} is not a live mode: use `long-poll` or `sse`."
                )));
            }
            _ => return Err(ApiError::invalid_request("`live` is given more than once.")),
        };
        let tail = !values("tail").is_empty();
        Ok(Self {
            view,
            offset,
            live,
            tail,
        })
    }
}

/// Checks the content type, parses and validates the body: everything before admission.
fn parse_delivery(headers: &HeaderMap, body: &[u8]) -> Result<Delivery, ApiError> {
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
    let Some(object) = value.as_object() else {
        return Err(ApiError::invalid_request(
            "The body must be a message object like {\"kind\":\"user\",\"body\":\"...\"}.",
        ));
    };
    check_fields(object)?;
    let mut prompt: PromptBody = serde_json::from_value(value)
        .map_err(|err| ApiError::invalid_request(format!("The body is not a message: {err}.")))?;
    // `initialData` seeds the conversation's state: a JSON object within the state's limit.
    let initial_data = match prompt.initial_data.take() {
        None | Some(Value::Null) => None,
        Some(data) => {
            flue_core::tool::check_state(&data).map_err(|err| {
                ApiError::invalid_request(format!(
                    "`initialData` cannot be the conversation's state: {err}."
                ))
            })?;
            Some(data)
        }
    };
    let idempotency_key = match &prompt.idempotency_key {
        None => None,
        Some(Value::String(key))
            if !key.is_empty() && key.chars().count() <= MAX_IDEMPOTENCY_KEY_CHARS =>
        {
            if let Some(hidden) = key.chars().find(|&c| hides_in_text(c)) {
                return Err(ApiError::invalid_request(format!(
                    "`idempotencyKey` holds the character U+{:04X}: control characters, line \
                     breaks and invisible formatting characters (bidirectional overrides, \
                     zero-width spaces) are refused, since a key is shown in logs and \
                     consoles. Use visible characters.",
                    u32::from(hidden)
                )));
            }
            Some(key.clone())
        }
        Some(_) => {
            return Err(ApiError::invalid_request(format!(
                "`idempotencyKey` must be a string of 1 to {MAX_IDEMPOTENCY_KEY_CHARS} \
                 characters."
            )));
        }
    };
    // A client holding such a key would claim a schedule's tick before it fires (and the tick
    // would get the client's receipt, not a run of its own).
    if idempotency_key
        .as_deref()
        .is_some_and(|key| key.starts_with(SCHEDULE_KEY_PREFIX))
    {
        return Err(ApiError::invalid_request(format!(
            "`idempotencyKey` must not start with `{SCHEDULE_KEY_PREFIX}`: those keys belong to \
             the ticks of schedules. Choose another key."
        )));
    }
    let memory_subject = match prompt.memory_subject.take() {
        None | Some(Value::Null) => None,
        Some(Value::String(subject)) => Some(subject),
        Some(_) => {
            return Err(ApiError::invalid_request(
                "`memorySubject` must be a string (a user id).",
            ));
        }
    };
    let condition = match &prompt.uid {
        None => SendCondition::Any,
        Some(Value::Null) => SendCondition::Create,
        Some(Value::String(_)) if initial_data.is_some() => {
            return Err(ApiError::invalid_request(
                "`initialData` with a string `uid` is a contradiction: the condition forbids \
                 creating the conversation, so the data could never apply. Send `uid: null` \
                 (create only) or leave `uid` out.",
            ));
        }
        Some(Value::String(uid)) if !uid.is_empty() => SendCondition::Uid(uid.clone()),
        Some(_) => {
            return Err(ApiError::invalid_request(
                "`uid` must be a non-empty string or null.",
            ));
        }
    };
    // The text moves out of the parsed body: a large message is not copied here.
    let text = |field: &str, value: Option<Value>| match value {
        Some(Value::String(text)) => Ok(text),
        _ => Err(ApiError::invalid_request(format!(
            "`{field}` must be a string."
        ))),
    };
    let message = match prompt.kind.as_str() {
        "user" => Delivered::User {
            text: text("body", prompt.body.take())?,
            images: parse_attachments(prompt.attachments.take().unwrap_or_default())?,
        },
        "signal" => {
            let signal_type = text("type", prompt.signal_type.take())?;
            if signal_type.is_empty() {
                return Err(ApiError::invalid_request(
                    "A signal's `type` must be non-empty.",
                ));
            }
            let attributes = match &prompt.attributes {
                None => Vec::new(),
                Some(Value::Object(map)) => map
                    .iter()
                    .map(|(name, value)| match value {
                        Value::String(value) => Ok((name.clone(), value.clone())),
                        _ => Err(ApiError::invalid_request(format!(
                            "Signal attribute {name:?} must be a string."
                        ))),
                    })
                    .collect::<Result<_, _>>()?,
                Some(_) => {
                    return Err(ApiError::invalid_request(
                        "A signal's `attributes` must be an object of strings.",
                    ));
                }
            };
            let tag_name = match &prompt.tag_name {
                None => None,
                Some(Value::String(tag)) if valid_tag(tag) => Some(tag.clone()),
                Some(_) => {
                    return Err(ApiError::invalid_request(
                        "`tagName` must be a valid XML tag name (^[A-Za-z_][A-Za-z0-9_.-]*$).",
                    ));
                }
            };
            Delivered::Signal {
                signal_type,
                body: text("body", prompt.body.take())?,
                attributes,
                tag_name,
            }
        }
        other => {
            return Err(ApiError::invalid_request(format!(
                "kind={other:?} is not a message kind: use `user` or `signal`."
            )));
        }
    };
    let budget = prompt.budget.as_ref().map(parse_budget).transpose()?;
    let result = match prompt.result.take() {
        None | Some(Value::Null) => None,
        Some(schema) => {
            if let Err(problem) = flue_core::tool::check_schema(&schema) {
                return Err(ApiError::invalid_request(format!(
                    "`result` must be a JSON Schema of the structured result: {problem}."
                )));
            }
            Some(schema)
        }
    };
    let options = parse_options(&mut prompt)?;
    Ok(Delivery {
        message,
        condition,
        idempotency_key,
        budget,
        result,
        initial_data,
        options,
        trace_parent: headers
            .get("traceparent")
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned),
        memory_subject,
    })
}

/// What a message chooses for its own run (flue's addition): `model`, `thinking`, `role`,
/// and, for a user message, `skill` with its `args`. Each is refused by name when it has the
/// wrong shape; whether the agent has it is checked at dispatch.
fn parse_options(prompt: &mut PromptBody) -> Result<flue_core::MessageOptions, ApiError> {
    fn name(field: &str, value: Option<Value>, what: &str) -> Result<Option<String>, ApiError> {
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) if !text.trim().is_empty() => Ok(Some(text)),
            Some(_) => Err(ApiError::invalid_request(format!(
                "`{field}` must be {what} (a non-empty string), or left out."
            ))),
        }
    }
    let mut options = flue_core::MessageOptions::default();
    options.model = name(
        "model",
        prompt.model.take(),
        "a model specifier `<provider>/<model>`",
    )?;
    options.role = name("role", prompt.role.take(), "the name of a workspace role")?;
    options.skill = name(
        "skill",
        prompt.skill.take(),
        "the name of one of the agent's skills",
    )?;
    options.thinking = match prompt.thinking.take() {
        None | Some(Value::Null) => None,
        Some(Value::String(level)) if level.parse::<flue_core::ThinkingLevel>().is_ok() => {
            level.parse().ok()
        }
        Some(_) => {
            let levels: Vec<&str> = flue_core::ThinkingLevel::ALL
                .iter()
                .map(|level| level.as_str())
                .collect();
            return Err(ApiError::invalid_request(format!(
                "`thinking` must be one of {}.",
                levels.join(", ")
            )));
        }
    };
    match prompt.args.take() {
        None | Some(Value::Null) => {}
        Some(Value::Object(args)) if options.skill.is_some() => {
            options.args = args.into_iter().collect();
        }
        Some(Value::Object(_)) => {
            return Err(ApiError::invalid_request(
                "`args` are a skill's arguments: name the skill in `skill`, or drop `args`.",
            ));
        }
        Some(_) => {
            return Err(ApiError::invalid_request(
                "`args` must be an object of the skill's arguments by name.",
            ));
        }
    }
    Ok(options)
}

/// A message's `budget`: `{maxCostUsd?, maxTurns?, conversation?: {maxCostUsd?, maxTurns?}}`,
/// each limit over the agent's (flue's addition; the error names the field).
fn parse_budget(value: &Value) -> Result<flue_core::Budget, ApiError> {
    fn limits<'v>(
        value: &'v Value,
        place: &str,
        nested: bool,
    ) -> Result<(flue_core::BudgetLimits, Option<&'v Value>), ApiError> {
        let Value::Object(map) = value else {
            return Err(ApiError::invalid_request(format!(
                "`{place}` must be an object with maxCostUsd and maxTurns{}.",
                if nested { "" } else { " (and conversation)" }
            )));
        };
        let mut limits = flue_core::BudgetLimits::default();
        let mut conversation = None;
        for (key, field) in map {
            match key.as_str() {
                "maxCostUsd" => match field.as_f64() {
                    Some(cost) if cost.is_finite() && cost > 0.0 => {
                        limits.max_cost_usd = Some(cost);
                    }
                    _ => {
                        return Err(ApiError::invalid_request(format!(
                            "`{place}.maxCostUsd` must be a positive number of US dollars."
                        )));
                    }
                },
                "maxTurns" => match field.as_u64().map(u32::try_from) {
                    Some(Ok(turns)) if turns > 0 => limits.max_turns = Some(turns),
                    _ => {
                        return Err(ApiError::invalid_request(format!(
                            "`{place}.maxTurns` must be a whole number of at least 1."
                        )));
                    }
                },
                "conversation" if !nested => conversation = Some(field),
                other => {
                    return Err(ApiError::invalid_request(format!(
                        "`{place}` has no field {other:?}: use maxCostUsd, maxTurns{}.",
                        if nested { "" } else { " or conversation" }
                    )));
                }
            }
        }
        Ok((limits, conversation))
    }
    let (submission, conversation) = limits(value, "budget", false)?;
    let conversation = match conversation {
        Some(value) => limits(value, "budget.conversation", true)?.0,
        None => flue_core::BudgetLimits::default(),
    };
    Ok(flue_core::Budget {
        max_cost_usd: submission.max_cost_usd,
        max_turns: submission.max_turns,
        conversation,
    })
}

/// Refuses a field the message's kind does not have (a known kind; an unknown one is refused
/// by name afterwards), naming it and the fields there are.
fn check_fields(object: &serde_json::Map<String, Value>) -> Result<(), ApiError> {
    let (what, fields) = match object.get("kind").and_then(Value::as_str) {
        Some("user") => ("a user message", USER_FIELDS),
        Some("signal") => ("a signal", SIGNAL_FIELDS),
        _ => return Ok(()),
    };
    let Some(unknown) = object
        .keys()
        .find(|name| !fields.contains(&name.as_str()) && !SIBLING_FIELDS.contains(&name.as_str()))
    else {
        return Ok(());
    };
    Err(ApiError::invalid_request(format!(
        "Unknown field `{unknown}` in the message body: {what} takes {}, beside `uid` and \
         `idempotencyKey`. Remove the field (nothing is ignored silently).",
        fields
            .iter()
            .map(|field| format!("`{field}`"))
            .collect::<Vec<_>>()
            .join(", ")
    )))
}

fn parse_attachments(values: Vec<Value>) -> Result<Vec<Attachment>, ApiError> {
    if values.len() > MAX_ATTACHMENTS {
        return Err(ApiError::invalid_request(format!(
            "A message carries at most {MAX_ATTACHMENTS} attachments; this one has {}.",
            values.len()
        )));
    }
    values
        .into_iter()
        .enumerate()
        .map(|(idx, mut value)| {
            let (mime_type, filename) = check_attachment(idx, &value)?;
            // The base64 text moves out of the parsed body instead of being copied.
            let data = match value.get_mut("data") {
                Some(Value::String(data)) => std::mem::take(data),
                _ => String::new(),
            };
            Ok(Attachment {
                data,
                mime_type,
                filename,
            })
        })
        .collect()
}

/// Checks attachment `idx` of a message; its MIME type and file name.
fn check_attachment(idx: usize, value: &Value) -> Result<(String, Option<String>), ApiError> {
    let field = |name: &str| value.get(name).and_then(Value::as_str);
    if field("type") != Some("image") {
        return Err(ApiError::invalid_request(format!(
            "attachments[{idx}].type must be \"image\" (only images are accepted)."
        )));
    }
    let (Some(data), Some(mime_type)) = (field("data"), field("mimeType")) else {
        return Err(ApiError::invalid_request(format!(
            "attachments[{idx}] needs string `data` (base64) and `mimeType`."
        )));
    };
    if data.len() > MAX_ATTACHMENT_CHARS {
        return Err(ApiError::invalid_request(format!(
            "attachments[{idx}].data is longer than {MAX_ATTACHMENT_CHARS} characters."
        )));
    }
    let base64 = crate::chunks::decode_image(data).is_some();
    let mime_ok = mime_type.starts_with("image/")
        && HeaderValue::from_str(mime_type).is_ok()
        && mime_type.len() <= 255;
    if !base64 || !mime_ok {
        return Err(ApiError::invalid_request(format!(
            "attachments[{idx}] must be padded standard base64 `data` with an image/* \
             `mimeType`."
        )));
    }
    Ok((mime_type.to_owned(), field("filename").map(str::to_owned)))
}

/// Whether `c` does not show as itself in text: a control character, a line or paragraph
/// separator (any whitespace but the space), or an invisible formatting character.
fn hides_in_text(c: char) -> bool {
    c.is_control() || (c.is_whitespace() && c != ' ') || flue_core::util::is_invisible_char(c)
}

fn valid_tag(tag: &str) -> bool {
    let mut bytes = tag.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// The request URL without its query: `http://<host><path>`.
fn stream_url(headers: &HeaderMap, path: &str) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("localhost");
    let scheme = headers
        .get("x-forwarded-proto")
        .and_then(|value| value.to_str().ok())
        .filter(|proto| *proto == "https")
        .unwrap_or("http");
    format!("{scheme}://{host}{path}")
}

pub(crate) fn insert(headers: &mut HeaderMap, name: &'static str, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        headers.insert(name, value);
    }
}

pub(crate) fn json_no_store(headers: &mut HeaderMap) {
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}
