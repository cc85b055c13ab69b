//! Protocol errors: the `{error:{type,message,details}}` envelope with Flue's type codes and
//! statuses. Every refusal of the router is one [`ApiError`], rendered in one place
//! ([`ApiError::into_response`]).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::backend::BackendError;
use crate::wire::{ErrorBody, ErrorEnvelope};

/// A refused request.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
    details: String,
    meta: Option<Value>,
    allow: Option<&'static str>,
    body: bool,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            kind,
            message: message.into(),
            details: String::new(),
            meta: None,
            allow: None,
            body: true,
        }
    }

    /// `invalid_request` (400): `details` names the field and the fix.
    pub fn invalid_request(details: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "The request is invalid.",
        )
        .with_details(details)
    }

    /// `invalid_json` (400) with the parser's report.
    pub fn invalid_json(report: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_json",
            "The request body is not valid JSON.",
        )
        .with_details(report)
    }

    /// `unsupported_media_type` (415).
    pub fn unsupported_media_type() -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "The request body must be JSON.",
        )
        .with_details("Send the body with `Content-Type: application/json`.")
    }

    /// `payload_too_large` (413).
    pub fn payload_too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            "The request body is too large.",
        )
        .with_details(format!(
            "The server accepts request bodies of at most {limit} bytes."
        ))
    }

    /// `method_not_allowed` (405) with `Allow`.
    pub fn method_not_allowed(allow: &'static str) -> Self {
        let mut err = Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "The method is not allowed on this route.",
        )
        .with_details(format!("This route accepts: {allow}."));
        err.allow = Some(allow);
        err
    }

    /// `route_not_found` (404).
    pub fn route_not_found() -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "route_not_found",
            "No route matches the request.",
        )
    }

    /// `agent_not_found` (404): the URL names no served agent.
    pub fn agent_not_found(agent: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "agent_not_found",
            format!("Agent {agent:?} was not found."),
        )
        .with_details("GET /_flue/agents lists the agents this server serves.")
    }

    /// `stream_not_found` (404).
    pub fn stream_not_found(conversation: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "stream_not_found",
            format!("Event stream {conversation:?} was not found."),
        )
        .with_details("Streams are created when their agent instance receives its first prompt.")
    }

    /// `submission_not_found` (404).
    pub fn submission_not_found(submission: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "submission_not_found",
            format!("Submission {submission:?} was not found in this conversation."),
        )
    }

    /// `attachment_not_found` (404).
    pub fn attachment_not_found(id: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "attachment_not_found",
            format!("Attachment {id:?} was not found."),
        )
    }

    /// `unauthorized` (401): a missing or wrong bearer token.
    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "A valid bearer token is required.",
        )
        .with_details("Send `Authorization: Bearer <token>` with the server's token.")
    }

    /// A `Host` the server is not bound for (a DNS-rebinding page names its own host).
    pub fn host_not_allowed(host: &str) -> Self {
        Self::new(
            StatusCode::MISDIRECTED_REQUEST,
            "host_not_allowed",
            format!("This server does not serve the host {host:?}."),
        )
        .with_details(
            "It answers loopback names (localhost, 127.0.0.1, [::1]) with its port; to reach it \
             by another name, start it with `--allowed-host <name[:port]>`.",
        )
    }

    /// An `Origin` that is neither the server's own nor listed.
    pub fn origin_not_allowed(origin: &str) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "origin_not_allowed",
            format!("Requests from the origin {origin:?} are not allowed."),
        )
        .with_details(
            "Pages of other sites cannot call this server; to let one, start `flue serve` with \
             `--cors-origin <scheme://host[:port]>`.",
        )
    }

    /// `read_only` (403): a state-changing request from the console's page on a server
    /// without a token, where the console only reads.
    pub fn read_only() -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "read_only",
            "The console of a server without a token is read-only.",
        )
        .with_details(
            "Start `flue serve --console` with `--token <token>` (or FLUE_TOKEN) and enter the \
             token in the console to send, approve, fork, rewind or abort.",
        )
    }

    /// A state-changing request a page could send cross-site without asking first.
    pub fn simple_request() -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "State-changing requests must carry a JSON body or no body at all.",
        )
        .with_details(
            "Send the body with `Content-Type: application/json`, or send no body and no \
             Content-Type (form and text/plain posts are refused: any web page can send them).",
        )
    }

    /// A request target over the limit.
    pub fn uri_too_long(limit: usize) -> Self {
        Self::new(
            StatusCode::URI_TOO_LONG,
            "uri_too_long",
            "The request target is too long.",
        )
        .with_details(format!(
            "The server accepts paths with query strings of at most {limit} bytes."
        ))
    }

    /// The bodies of requests in flight hold the whole budget for longer than a request may
    /// wait.
    pub fn busy(budget: usize) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_busy",
            "The server is busy reading other request bodies.",
        )
        .with_details(format!(
            "Request bodies in flight may hold at most {budget} bytes together; retry shortly."
        ))
    }

    /// `request_timeout` (408).
    pub fn request_timeout() -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            "The request took too long.",
        )
        .with_details(
            "The server bounds the time to answer a request; retry, or read the outcome from \
             the conversation stream.",
        )
    }

    /// `runtime_unavailable` (503), with `Retry-After: 1`.
    pub fn unavailable(details: impl Into<String>) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "runtime_unavailable",
            "The runtime is not accepting work.",
        )
        .with_details(details)
    }

    /// `internal_error` (500): nothing of the cause reaches the wire.
    pub fn internal() -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            "An internal error occurred.",
        )
    }

    /// The envelope for an error status produced outside the route handlers (an extractor's
    /// rejection, a layer): the status's own type code, `details` from the plain-text reason.
    pub(crate) fn for_status(status: StatusCode, reason: String) -> Self {
        let err = match status {
            StatusCode::BAD_REQUEST => return Self::invalid_request(reason),
            StatusCode::NOT_FOUND => Self::route_not_found(),
            StatusCode::REQUEST_TIMEOUT => Self::request_timeout(),
            StatusCode::PAYLOAD_TOO_LARGE => Self::new(
                status,
                "payload_too_large",
                "The request body is too large.",
            ),
            StatusCode::UNSUPPORTED_MEDIA_TYPE => Self::unsupported_media_type(),
            StatusCode::UNAUTHORIZED => Self::unauthorized(),
            status if status.is_server_error() => Self::new(
                status,
                if status == StatusCode::SERVICE_UNAVAILABLE {
                    "runtime_unavailable"
                } else {
                    "internal_error"
                },
                "An internal error occurred.",
            ),
            status => Self::new(status, "invalid_request", "The request is invalid."),
        };
        if reason.is_empty() || status.is_server_error() {
            err
        } else {
            err.with_details(reason)
        }
    }

    /// An error of this protocol's extensions (fork, rewind, memory): `status`, `kind` and
    /// `message`, with `details` and `meta` set by the caller.
    pub(crate) fn other(status: StatusCode, kind: &'static str, message: &str) -> Self {
        Self::new(status, kind, message)
    }

    /// Sets `meta` (a JSON value beside `details` in the envelope).
    #[must_use]
    pub(crate) fn with_meta(mut self, meta: Value) -> Self {
        self.meta = Some(meta);
        self
    }

    /// Sets `details`.
    #[must_use]
    pub fn with_details(mut self, details: impl Into<String>) -> Self {
        self.details = details.into();
        self
    }

    /// Renders status and headers only (HEAD).
    #[must_use]
    pub fn without_body(mut self) -> Self {
        self.body = false;
        self
    }

    /// The type code.
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// The HTTP status.
    pub(crate) fn status(&self) -> StatusCode {
        self.status
    }

    /// The `{error:{type,message,details}}` envelope as JSON bytes.
    pub(crate) fn envelope_bytes(&self) -> Vec<u8> {
        let envelope = ErrorEnvelope {
            error: ErrorBody {
                kind: self.kind.to_owned(),
                message: self.message.clone(),
                details: self.details.clone(),
                meta: self.meta.clone(),
            },
        };
        serde_json::to_vec(&envelope).unwrap_or_default()
    }
}

impl From<BackendError> for ApiError {
    fn from(err: BackendError) -> Self {
        match err {
            BackendError::UnknownAgent(agent) => Self::agent_not_found(&agent),
            BackendError::StreamNotFound(id) => Self::stream_not_found(&id),
            BackendError::InstanceNotFound(id) => Self::new(
                StatusCode::NOT_FOUND,
                "agent_instance_not_found",
                format!("Agent instance {id:?} was not found."),
            )
            .with_details(
                "The uid condition names no live incarnation of this conversation; send without \
                 `uid` to deliver unconditionally.",
            ),
            BackendError::InstanceExists { id, uid } => {
                let mut err = Self::new(
                    StatusCode::CONFLICT,
                    "agent_instance_exists",
                    format!("Agent instance {id:?} already exists."),
                )
                .with_details(format!(
                    "The instance exists with uid {uid:?}; pass it as `uid` to continue it."
                ));
                err.meta = Some(serde_json::json!({ "uid": uid }));
                err
            }
            BackendError::OffsetBeyondHead { offset, head } => {
                let mut err = Self::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "conversation_stream_store_failure",
                    "The conversation stream read was rejected.",
                )
                .with_details(format!(
                    "Offset {offset} is past the stream's head {head}; read from an offset a \
                     response returned."
                ));
                err.meta = Some(serde_json::json!({
                    "operation": "read",
                    "reason": "offset_beyond_head",
                }));
                err
            }
            BackendError::InvalidRequest(details) => Self::invalid_request(details),
            BackendError::ActionNotFound {
                conversation,
                action_id,
            } => Self::new(
                StatusCode::NOT_FOUND,
                "action_not_found",
                format!("Action {action_id:?} was not found in {conversation:?}."),
            )
            .with_details(format!(
                "List the conversation's actions with GET /agents/{conversation}/actions."
            )),
            BackendError::ActionAlreadyResolved(action_id) => Self::new(
                StatusCode::CONFLICT,
                "action_already_resolved",
                format!("Action {action_id:?} was already resolved."),
            )
            .with_details("The first decision wins; read the actions to see it."),
            BackendError::ActionsPending(actions) => {
                let mut err = Self::new(
                    StatusCode::CONFLICT,
                    "actions_pending",
                    "The conversation waits for decisions on tool calls.",
                )
                .with_details(format!(
                    "Resolve {} with POST .../actions/<action> before sending a new message.",
                    actions.join(", ")
                ));
                err.meta = Some(serde_json::json!({ "actions": actions }));
                err
            }
            BackendError::SubmissionConflict { key, submission_id } => {
                let mut err = Self::new(
                    StatusCode::CONFLICT,
                    "submission_conflict",
                    format!(
                        "The idempotency key {key:?} was already used for submission \
                         {submission_id:?} with another message."
                    ),
                )
                .with_details(
                    "A key names one delivery: retry with the same message to get its receipt, \
                     or use a fresh key to send another message.",
                );
                err.meta = Some(serde_json::json!({ "submissionId": submission_id }));
                err
            }
            BackendError::ConversationBusy {
                conversation,
                unsettled,
            } => {
                let mut err = Self::new(
                    StatusCode::CONFLICT,
                    "session_busy",
                    format!(
                        "Conversation {conversation:?} has {unsettled} submission(s) queued, \
                         running or waiting for a decision."
                    ),
                )
                .with_details(format!(
                    "Nothing was deleted. Wait for them to settle, or abort them with POST \
                     /agents/{conversation}/abort, then delete again."
                ));
                err.meta = Some(serde_json::json!({ "unsettled": unsettled }));
                err
            }
            BackendError::ShuttingDown => {
                Self::unavailable("The server is shutting down; retry against another instance.")
            }
            BackendError::Internal(err) => {
                tracing::error!(error = %err, kind = err.kind(), "internal error");
                Self::internal()
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = if self.body {
            (self.status, self.envelope_bytes()).into_response()
        } else {
            self.status.into_response()
        };
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(allow) = self.allow {
            headers.insert(header::ALLOW, HeaderValue::from_static(allow));
        }
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}
