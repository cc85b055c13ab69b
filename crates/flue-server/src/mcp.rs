//! The agents as an MCP server: each agent a tool (`message`, optional `conversation_id`),
//! each call a durable submission admitted through the same path as `POST /agents/<agent>/<id>`
//! ([`DurableRuntime`]'s dispatch). While it works the caller gets progress notifications
//! (when its request carried a progress token) and, at the level it set, log messages; a
//! cancellation aborts the conversation's work; a pause (an `always_ask` tool, a custom tool)
//! becomes an elicitation when the client declared that capability and a tool error naming the
//! pending actions otherwise. The reply comes back as text and as structured content
//! (`reply`, `conversation_id`).
//!
//! [`McpAgents::serve_stream`] serves one client over a byte stream (stdio), and stops reading
//! while [`MAX_QUEUED_WRITES`] of its messages wait to be written (a client that does not read
//! cannot make it buffer without end); [`McpAgents::http_router`] is the streamable HTTP
//! endpoint at `/mcp`, to be served by [`serve`](crate::serve) behind the same
//! [`RequestGuard`](crate::RequestGuard) and token as the HTTP protocol, with its sessions
//! bounded in number and idle time ([`McpSessionLimits`], `sessions`). `docs/mcp.md` describes
//! both.

mod sessions;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::extract::Request;
use axum::http::header;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use flue_core::{
    ActionDecision, ConversationKey, Outcome, record::ActionKind, submission::SendCondition,
};
use flue_core::{Event, Settlement, record::PendingAction};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequestParams,
    ElicitationAction, ElicitationSchema, Implementation, JsonObject, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ProgressToken, ProtocolVersion,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{ElicitationMode, RequestContext, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, Peer, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

pub use sessions::McpSessionLimits;

use crate::backend::{BackendError, Delivered, Delivery};
use crate::durable::DurableRuntime;
use crate::error::ApiError;
use crate::router::{bearer, constant_time_eq};

/// The path of the streamable HTTP endpoint.
pub const MCP_PATH: &str = "/mcp";

/// Messages to a stdio client that may wait to be written before the server stops reading
/// from it: a client that does not read what it is sent is not read from either, so its
/// requests cannot pile up answers in memory.
pub const MAX_QUEUED_WRITES: usize = 32;

/// The largest request body read to see whether a request without a session opens one (rmcp's
/// own limit on a request body).
const MAX_PEEKED_BODY: usize = 4 * 1024 * 1024;

/// The agents of a [`DurableRuntime`] as MCP tools. Cheap to clone; one per client session
/// (the log level a client sets is its own).
#[derive(Clone)]
pub struct McpAgents {
    runtime: DurableRuntime,
    /// The calls running in this process, by conversation (shared by every session).
    calls: Arc<Mutex<HashMap<String, Vec<Running>>>>,
    /// The least severe log level the client asked for (`logging/setLevel`); none: no logs.
    #[expect(
        deprecated,
        reason = "MCP logging is deprecated by a future revision, not 2025-11-25"
    )]
    level: Arc<Mutex<Option<rmcp::model::LoggingLevel>>>,
}

impl std::fmt::Debug for McpAgents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpAgents").finish_non_exhaustive()
    }
}

/// Why serving a client over a byte stream stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpServeError {
    /// The client never completed the `initialize` handshake (or the stream broke during it).
    #[error("the MCP client did not complete the initialize handshake: {0}")]
    Handshake(String),
    /// The session's task failed.
    #[error("the MCP session ended abnormally: {0}")]
    Session(String),
}

impl McpAgents {
    /// The agents `runtime` serves, as tools.
    pub fn new(runtime: DurableRuntime) -> Self {
        Self {
            runtime,
            calls: Arc::default(),
            level: Arc::new(Mutex::new(None)),
        }
    }

    /// Serves one client over `reader` and `writer` (a process's stdin and stdout) until it
    /// closes the stream or `stop` fires. A call still running then is aborted.
    pub async fn serve_stream<R, W>(
        self,
        reader: R,
        writer: W,
        stop: CancellationToken,
    ) -> Result<(), McpServeError>
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        let transport =
            Backpressured::new(AsyncRwTransport::<RoleServer, R, W>::new(reader, writer));
        let running = tokio::select! {
            running = self.serve(transport) => {
                running.map_err(|err| McpServeError::Handshake(err.to_string()))?
            }
            () = stop.cancelled() => return Ok(()),
        };
        let token = running.cancellation_token();
        let waiting = tokio::spawn(running.waiting());
        tokio::select! {
            joined = waiting => {
                let _quit = joined.map_err(|err| McpServeError::Session(err.to_string()))?;
            }
            () = stop.cancelled() => token.cancel(),
        }
        Ok(())
    }

    /// The streamable HTTP endpoint at [`MCP_PATH`] (sessions, SSE responses and the
    /// standalone SSE stream), refusing requests without `token` when one is given, with at
    /// most `limits.max_sessions` sessions (a new one closes the session idle the longest, or
    /// is answered 503 when every session is busy) and each idle one closed after
    /// `limits.idle_timeout`. Serve it with [`serve`](crate::serve) and a
    /// [`RequestGuard`](crate::RequestGuard): the guard's host and origin checks are this
    /// endpoint's DNS-rebinding protection. `stop` ends every session. Call it within a tokio
    /// runtime (it starts the sweep of idle sessions).
    pub fn http_router(
        self,
        token: Option<String>,
        limits: McpSessionLimits,
        stop: CancellationToken,
    ) -> Router {
        // Hosts and origins are the guard's (the same rules as the HTTP protocol's), so the
        // library's own checks stay off.
        let config = StreamableHttpServerConfig::default()
            .disable_allowed_hosts()
            .disable_allowed_origins()
            .with_cancellation_token(stop.clone());
        let sessions = Arc::new(sessions::BoundedSessions::new(limits));
        tokio::spawn(sessions::BoundedSessions::sweep_until(
            Arc::downgrade(&sessions),
            stop,
        ));
        let service =
            StreamableHttpService::new(move || Ok(self.session()), Arc::clone(&sessions), config);
        let token: Option<Arc<str>> = token.map(Arc::from);
        Router::new()
            .route_service(MCP_PATH, service)
            .layer(middleware::from_fn(move |request: Request, next: Next| {
                let sessions = Arc::clone(&sessions);
                async move { admit(&sessions, request, next).await }
            }))
            .layer(middleware::from_fn(move |request: Request, next: Next| {
                let token = token.clone();
                async move { authenticate(token.as_deref(), request, next).await }
            }))
    }

    /// A handler for a new client session: the same runtime, its own log level.
    fn session(&self) -> Self {
        Self {
            runtime: self.runtime.clone(),
            calls: Arc::clone(&self.calls),
            level: Arc::new(Mutex::new(None)),
        }
    }

    /// Registers a call on `key` once the calls on it that were cancelled already have
    /// aborted their work: an abort reaches the whole conversation, so a message sent right
    /// after a cancellation must be admitted after it, not swept away with it.
    async fn register(&self, key: &ConversationKey, ct: &CancellationToken) -> CallGuard {
        let instance = key.instance_id();
        let aborting: Vec<CancellationToken> = lock(&self.calls)
            .get(&instance)
            .map(|calls| {
                calls
                    .iter()
                    .filter(|call| call.ct.is_cancelled())
                    .map(|call| call.done.clone())
                    .collect()
            })
            .unwrap_or_default();
        for done in aborting {
            done.cancelled().await;
        }
        let done = CancellationToken::new();
        lock(&self.calls)
            .entry(instance.clone())
            .or_default()
            .push(Running {
                ct: ct.clone(),
                done: done.clone(),
            });
        CallGuard {
            calls: Arc::clone(&self.calls),
            instance,
            done,
        }
    }

    fn tool_of(info: &flue_core::AgentInfo) -> Tool {
        let description = match &info.description {
            Some(description) if !description.trim().is_empty() => description.clone(),
            _ => format!(
                "Send a message to the agent `{}` and get its reply.",
                info.name
            ),
        };
        let output = info
            .result
            .as_ref()
            .map_or_else(output_schema, result_output_schema);
        Tool::new(info.name.clone(), description, object(input_schema()))
            .with_raw_output_schema(Arc::new(object(output)))
    }

    /// Runs one call: admit, follow, answer pauses, return the settlement.
    async fn call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let agent = request.name.to_string();
        if !self.runtime.has_agent(&agent) {
            let known: Vec<String> = self
                .runtime
                .agents()
                .into_iter()
                .map(|info| info.name)
                .collect();
            return Err(McpError::invalid_params(
                format!(
                    "unknown tool `{agent}`: the tools are the agents served ({})",
                    known.join(", ")
                ),
                None,
            ));
        }
        let input = CallInput::parse(request.arguments.as_ref())?;
        let id = input
            .conversation_id
            .unwrap_or_else(|| format!("mcp-{}", flue_core::util::new_ulid().to_lowercase()));
        let key = ConversationKey::new(agent, id);
        let progress_token = context.meta.get_progress_token().or_else(|| {
            request
                .meta
                .as_ref()
                .and_then(rmcp::model::RequestMetaObject::get_progress_token)
        });
        let _registered = self.register(&key, &context.ct).await;
        if context.ct.is_cancelled() {
            return Ok(CallToolResult::error(vec![ContentBlock::text(
                "cancelled before the message was admitted",
            )]));
        }
        // Subscribed before the admission, so that no event of the submission is missed.
        let mut events = self.runtime.runtime().subscribe();
        let delivery = Delivery {
            message: Delivered::User {
                text: input.message,
                images: Vec::new(),
            },
            condition: SendCondition::default(),
            idempotency_key: None,
            trace_parent: None,
            budget: None,
            memory_subject: None,
            result: None,
            initial_data: None,
            options: flue_core::MessageOptions::default(),
        };
        let submission_id = match self.runtime.dispatch(&key, delivery).await {
            Ok(admitted) => admitted.submission_id,
            Err(err) => return Ok(not_admitted(&key, &err)),
        };
        let mut reporter = Reporter {
            peer: context.peer.clone(),
            token: progress_token,
            level: Arc::clone(&self.level),
            key: key.clone(),
            n: 0,
        };
        loop {
            let waited = {
                let wait = self.runtime.runtime().wait_idle(&submission_id);
                tokio::pin!(wait);
                loop {
                    tokio::select! {
                        biased;
                        () = context.ct.cancelled() => {
                            let result = self.aborted(&key).await;
                            // Over HTTP a client's next call may arrive before its cancellation
                            // and be aborted with it; this log tells it when the abort is done.
                            reporter.note("the work was aborted after the client's cancellation").await;
                            return Ok(result);
                        }
                        info = &mut wait => {
                            // The events of a settled attempt were sent before it settled and
                            // may still be queued here: report them before answering.
                            loop {
                                match events.try_recv() {
                                    Ok(event) if event.submission_id.as_deref() == Some(&submission_id) => {
                                        reporter.event(&event.event).await;
                                    }
                                    Ok(_) | Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) => {}
                                    Err(_) => break,
                                }
                            }
                            break info;
                        }
                        event = events.recv() => match event {
                            Ok(event) if event.submission_id.as_deref() == Some(&submission_id) => {
                                reporter.event(&event.event).await;
                            }
                            Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                            // The runtime stopped: the wait ends with its error.
                            Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                                break (&mut wait).await;
                            }
                        },
                    }
                }
            };
            let info = waited.map_err(|err| internal(&err.to_string()))?;
            if let Some(settlement) = &info.settlement {
                let schema = self
                    .runtime
                    .agents()
                    .into_iter()
                    .find(|info| info.name == key.agent)
                    .and_then(|info| info.result);
                return Ok(settled(&key, settlement, schema.as_ref()));
            }
            match self.decide(&key, &context).await {
                Decided::Yes => {}
                Decided::No(result) => return Ok(result),
            }
        }
    }

    /// Aborts the conversation's work after a cancellation.
    async fn aborted(&self, key: &ConversationKey) -> CallToolResult {
        if let Err(err) = self.runtime.abort(key).await {
            tracing::warn!(target: "flue::mcp", conversation = %key, error = %err, "abort after a cancellation");
        }
        CallToolResult::error(vec![ContentBlock::text(format!(
            "cancelled: the work of agent `{}` in conversation `{}` was aborted",
            key.agent, key.id
        ))])
    }

    /// Answers the first pending action of a paused conversation through an elicitation, or
    /// explains the pause when the client cannot be asked.
    async fn decide(&self, key: &ConversationKey, context: &RequestContext<RoleServer>) -> Decided {
        let actions = match self.runtime.actions(key).await {
            Ok(actions) => actions,
            Err(err) => return Decided::No(error_result(key, &err.to_string())),
        };
        let pending: Vec<PendingAction> = actions
            .into_iter()
            .filter(|info| info.decision.is_none())
            .map(|info| info.action)
            .filter(|action| {
                matches!(
                    action.kind,
                    ActionKind::Confirmation | ActionKind::CustomTool
                )
            })
            .collect();
        let Some(action) = pending.first() else {
            return Decided::No(error_result(
                key,
                "the agent paused, but on nothing an MCP client can decide",
            ));
        };
        let can_ask = context
            .peer
            .supported_elicitation_modes()
            .contains(&ElicitationMode::Form);
        if !can_ask {
            return Decided::No(paused(
                key,
                &pending,
                "this client cannot be asked (it did not declare the elicitation capability)",
            ));
        }
        let params = elicitation(key, action);
        let answer = tokio::select! {
            biased;
            () = context.ct.cancelled() => return Decided::No(self.aborted(key).await),
            answer = context.peer.create_elicitation(params) => answer,
        };
        let answer = match answer {
            Ok(answer) => answer,
            Err(err) => {
                return Decided::No(paused(
                    key,
                    &pending,
                    &format!("asking the client failed ({err})"),
                ));
            }
        };
        let decision = match answer.action {
            ElicitationAction::Accept => decision_of(action, answer.content.as_ref()),
            ElicitationAction::Decline => ActionDecision::Deny {
                message: Some("the user declined it".to_owned()),
            },
            _ => {
                return Decided::No(paused(key, &pending, "the question was dismissed"));
            }
        };
        match self.runtime.resolve(key, &action.action_id, decision).await {
            // Decided by someone else meanwhile: the wait goes on all the same.
            Ok(_) | Err(BackendError::ActionAlreadyResolved(_)) => Decided::Yes,
            Err(err) => Decided::No(error_result(key, &err.to_string())),
        }
    }
}

impl ServerHandler for McpAgents {
    fn get_info(&self) -> ServerConfig {
        #[expect(
            deprecated,
            reason = "MCP logging is deprecated by a future revision, not 2025-11-25"
        )]
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_logging()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("flue", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Each tool is an agent: send it a `message`. A result names its \
                 `conversation_id`; pass it back to continue that conversation.",
            )
    }

    /// The revisions with an `initialize` handshake (2026-07-28 forbids the server-to-client
    /// requests an elicitation is).
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(
            self.runtime.agents().iter().map(Self::tool_of).collect(),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.runtime
            .agents()
            .iter()
            .find(|info| info.name == name)
            .map(Self::tool_of)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.call(request, context)
            .await
            .map(CallToolResponse::from)
    }

    #[expect(
        deprecated,
        reason = "MCP logging is deprecated by a future revision, not 2025-11-25"
    )]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        *self.level.lock().unwrap_or_else(PoisonError::into_inner) = Some(request.level);
        Ok(())
    }
}

/// A call's arguments.
struct CallInput {
    message: String,
    conversation_id: Option<String>,
}

impl CallInput {
    fn parse(arguments: Option<&JsonObject>) -> Result<Self, McpError> {
        let empty = JsonObject::new();
        let arguments = arguments.unwrap_or(&empty);
        if let Some(unknown) = arguments
            .keys()
            .find(|key| !matches!(key.as_str(), "message" | "conversation_id"))
        {
            return Err(McpError::invalid_params(
                format!(
                    "unknown argument `{unknown}`: the arguments are `message` and `conversation_id`"
                ),
                None,
            ));
        }
        let message = match arguments.get("message") {
            Some(Value::String(message)) if !message.trim().is_empty() => message.clone(),
            Some(Value::String(_)) => {
                return Err(McpError::invalid_params(
                    "`message` is empty: write the message to the agent",
                    None,
                ));
            }
            _ => {
                return Err(McpError::invalid_params(
                    "`message` (a string, the message to the agent) is required",
                    None,
                ));
            }
        };
        let conversation_id = match arguments.get("conversation_id") {
            None | Some(Value::Null) => None,
            Some(Value::String(id)) => {
                flue_core::submission::check_conversation_id(id).map_err(|err| {
                    McpError::invalid_params(format!("`conversation_id`: {err}"), None)
                })?;
                Some(id.clone())
            }
            Some(_) => {
                return Err(McpError::invalid_params(
                    "`conversation_id` must be a string (an id a result returned, or one of your own)",
                    None,
                ));
            }
        };
        Ok(Self {
            message,
            conversation_id,
        })
    }
}

/// A call running on a conversation: its cancellation, and when it is over.
struct Running {
    ct: CancellationToken,
    done: CancellationToken,
}

/// Removes a call from the running ones when it ends (its abort, if any, requested).
struct CallGuard {
    calls: Arc<Mutex<HashMap<String, Vec<Running>>>>,
    instance: String,
    done: CancellationToken,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.done.cancel();
        let mut calls = lock(&self.calls);
        if let Some(running) = calls.get_mut(&self.instance) {
            running.retain(|call| !call.done.is_cancelled());
            if running.is_empty() {
                calls.remove(&self.instance);
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether a pause was decided.
enum Decided {
    /// A decision was stored: wait again.
    Yes,
    /// Nothing was decided: return this.
    No(CallToolResult),
}

/// Sends progress notifications and log messages about one call.
struct Reporter {
    peer: Peer<RoleServer>,
    token: Option<ProgressToken>,
    #[expect(
        deprecated,
        reason = "MCP logging is deprecated by a future revision, not 2025-11-25"
    )]
    level: Arc<Mutex<Option<rmcp::model::LoggingLevel>>>,
    key: ConversationKey,
    n: u32,
}

impl Reporter {
    async fn event(&mut self, event: &Event) {
        let message = match event {
            Event::SubmissionRunning { .. } => "working".to_owned(),
            Event::ToolStart { name, .. } => format!("running the tool `{name}`"),
            Event::TurnEnd { .. } => "a model turn finished".to_owned(),
            Event::TaskStart { .. } => "a subagent task started".to_owned(),
            Event::CompactionStart { .. } => "compacting the conversation".to_owned(),
            Event::ProviderRetry { .. } => "the model provider is retrying".to_owned(),
            _ => return,
        };
        if let Some(token) = &self.token {
            self.n += 1;
            let params = ProgressNotificationParam::new(token.clone(), f64::from(self.n))
                .with_message(message.clone());
            // A client that went away gets nothing more; the call itself notices.
            let _ = self.peer.notify_progress(params).await;
        }
        #[expect(
            deprecated,
            reason = "MCP logging is deprecated by a future revision, not 2025-11-25"
        )]
        let level = match event {
            Event::ProviderRetry { .. } => rmcp::model::LoggingLevel::Warning,
            _ => rmcp::model::LoggingLevel::Info,
        };
        self.log(level, &message).await;
    }

    /// Logs `message` at info level (no progress: the call is over).
    #[expect(
        deprecated,
        reason = "MCP logging is deprecated by a future revision, not 2025-11-25"
    )]
    async fn note(&self, message: &str) {
        self.log(rmcp::model::LoggingLevel::Info, message).await;
    }

    #[expect(
        deprecated,
        reason = "MCP logging is deprecated by a future revision, not 2025-11-25"
    )]
    async fn log(&self, level: rmcp::model::LoggingLevel, message: &str) {
        use rmcp::model::LoggingMessageNotificationParam;
        let Some(wanted) = *self.level.lock().unwrap_or_else(PoisonError::into_inner) else {
            return;
        };
        if severity(level) < severity(wanted) {
            return;
        }
        let data = json!({
            "agent": self.key.agent,
            "conversation_id": self.key.id,
            "message": message,
        });
        let mut params = LoggingMessageNotificationParam::new(level, data);
        params.logger = Some("flue".to_owned());
        let _ = self.peer.notify_logging_message(params).await;
    }
}

/// A log level's rank, debug lowest.
#[expect(
    deprecated,
    reason = "MCP logging is deprecated by a future revision, not 2025-11-25"
)]
fn severity(level: rmcp::model::LoggingLevel) -> u8 {
    use rmcp::model::LoggingLevel;
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// The result of a settled submission.
fn settled(
    key: &ConversationKey,
    settlement: &Settlement,
    schema: Option<&Value>,
) -> CallToolResult {
    match settlement.outcome {
        // An agent declaring `result:`: the validated data is the structured content (wrapped
        // in `result` when its schema is not an object's), and its JSON the text content.
        Outcome::Completed if settlement.data.is_some() => {
            let data = settlement.data.clone().unwrap_or_default();
            let text = serde_json::to_string(&data).unwrap_or_default();
            let structured = result_structured(schema, data, &key.id);
            let mut result = CallToolResult::success(vec![
                ContentBlock::text(text),
                ContentBlock::text(continue_note(key)),
            ]);
            result.structured_content = Some(structured);
            result
        }
        Outcome::Completed => {
            let reply = settlement.text.clone().unwrap_or_default();
            let mut result = CallToolResult::success(vec![
                ContentBlock::text(reply.clone()),
                ContentBlock::text(continue_note(key)),
            ]);
            result.structured_content = Some(json!({
                "reply": reply,
                "conversation_id": key.id,
            }));
            result
        }
        _ => {
            let why = settlement.error.as_ref().map_or_else(
                || format!("{:?}", settlement.outcome).to_lowercase(),
                |error| format!("{}: {}", error.kind, error.message),
            );
            error_result(key, &why)
        }
    }
}

/// How to continue the conversation, for the model reading the result.
fn continue_note(key: &ConversationKey) -> String {
    format!(
        "conversation_id: {} (pass it with the next message to continue this conversation)",
        key.id
    )
}

/// A tool error about the conversation.
fn error_result(key: &ConversationKey, why: &str) -> CallToolResult {
    CallToolResult::error(vec![
        ContentBlock::text(format!("agent `{}` failed: {why}", key.agent)),
        ContentBlock::text(continue_note(key)),
    ])
}

/// The tool error of a message the runtime did not admit.
fn not_admitted(key: &ConversationKey, err: &BackendError) -> CallToolResult {
    let why = match err {
        BackendError::ActionsPending(actions) => format!(
            "conversation `{}` waits for decisions on {}; decide them first (`flue run {} --id {} \
             --confirm ACTION` or `--deny`, `--confirm ACTION --result JSON`), or use \
             another conversation_id",
            key.id,
            actions.join(", "),
            key.agent,
            key.id
        ),
        BackendError::Internal(err) => format!("{}: {err}", err.kind()),
        other => other.to_string(),
    };
    CallToolResult::error(vec![ContentBlock::text(format!(
        "the message was not admitted to agent `{}`: {why}",
        key.agent
    ))])
}

/// The tool error of a pause nobody here can decide.
fn paused(key: &ConversationKey, pending: &[PendingAction], why: &str) -> CallToolResult {
    let list: Vec<String> = pending
        .iter()
        .map(|action| {
            let what = match action.kind {
                ActionKind::CustomTool => "waits for the result of the custom tool",
                _ => "waits for confirmation to run",
            };
            format!(
                "- {}: {what} `{}` with {} ({})",
                action.action_id, action.tool_name, action.input, action.reason
            )
        })
        .collect();
    CallToolResult::error(vec![
        ContentBlock::text(format!(
            "agent `{agent}` paused in conversation `{id}` and {why}:\n{list}\nthe conversation \
             stays paused: decide with `flue run {agent} --id {id} --confirm ACTION` (or \
             `--deny MESSAGE`), or `flue run {agent} --id {id} --confirm ACTION --result \
             JSON` for a custom tool; the agent then goes on by itself",
            agent = key.agent,
            id = key.id,
            list = list.join("\n"),
        )),
        ContentBlock::text(continue_note(key)),
    ])
}

/// The question for one pending action.
fn elicitation(key: &ConversationKey, action: &PendingAction) -> ElicitRequestParams {
    let (message, schema) = match action.kind {
        ActionKind::CustomTool => (
            format!(
                "Agent `{}` (conversation `{}`) calls the tool `{}` with {} ({}); its result \
                 comes from you.",
                key.agent, key.id, action.tool_name, action.input, action.reason
            ),
            json!({
                "type": "object",
                "properties": {
                    "result": {
                        "type": "string",
                        "title": "Result",
                        "description": "The tool's result for the agent (JSON, or plain text)"
                    }
                },
                "required": ["result"]
            }),
        ),
        _ => (
            format!(
                "Agent `{}` (conversation `{}`) wants to run the tool `{}` with {} ({}). \
                 Accept to allow it, decline to deny it.",
                key.agent, key.id, action.tool_name, action.input, action.reason
            ),
            json!({
                "type": "object",
                "properties": {
                    "allow": {
                        "type": "boolean",
                        "title": "Allow",
                        "description": "Run the tool call",
                        "default": true
                    },
                    "always": {
                        "type": "boolean",
                        "title": "Always in this conversation",
                        "description": "Also run this tool's later calls in this conversation without asking",
                        "default": false
                    }
                }
            }),
        ),
    };
    // The schemas above are fixed and valid; an empty form is the fallback all the same.
    let requested_schema = serde_json::from_value::<ElicitationSchema>(schema)
        .unwrap_or_else(|_| ElicitationSchema::builder().build_unchecked());
    ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema,
    }
}

/// The decision an accepted answer stands for.
fn decision_of(action: &PendingAction, content: Option<&Value>) -> ActionDecision {
    match action.kind {
        ActionKind::CustomTool => {
            let given = content
                .and_then(|content| content.get("result"))
                .cloned()
                .unwrap_or(Value::Null);
            let value = match given {
                Value::String(text) => serde_json::from_str(&text).unwrap_or(Value::String(text)),
                other => other,
            };
            ActionDecision::Result {
                value,
                is_error: false,
            }
        }
        _ => {
            let allow = content
                .and_then(|content| content.get("allow"))
                .and_then(Value::as_bool)
                .unwrap_or(true);
            let always = content
                .and_then(|content| content.get("always"))
                .and_then(Value::as_bool)
                .unwrap_or(false);
            if allow && always {
                ActionDecision::AllowAlways
            } else if allow {
                ActionDecision::Allow
            } else {
                ActionDecision::Deny {
                    message: Some("the user did not allow it".to_owned()),
                }
            }
        }
    }
}

fn internal(message: &str) -> McpError {
    McpError::internal_error(message.to_owned(), None)
}

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

fn input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "message": {
                "type": "string",
                "description": "The message to the agent."
            },
            "conversation_id": {
                "type": "string",
                "description": "Continue this conversation: an id an earlier result returned, \
                                or one of your own (1 to 128 printable characters without \
                                spaces or slashes). Omitted: a new conversation."
            }
        },
        "required": ["message"],
        "additionalProperties": false
    })
}

/// The output schema of an agent declaring `result:`: the schema itself when it describes an
/// object (MCP's structured content is an object), else an object holding it as `result`;
/// either way with `conversation_id` beside the data, unless the schema names that property
/// itself (then the data's own value is kept).
fn result_output_schema(schema: &Value) -> Value {
    let mut output = if is_object_schema(schema) {
        schema.clone()
    } else {
        json!({
            "type": "object",
            "properties": {"result": schema},
            "required": ["result"]
        })
    };
    if !declares_conversation_id(schema)
        && let Value::Object(fields) = &mut output
    {
        let properties = fields.entry("properties").or_insert_with(|| json!({}));
        if let Value::Object(properties) = properties {
            properties.insert("conversation_id".to_owned(), conversation_id_schema());
        }
        let required = fields.entry("required").or_insert_with(|| json!([]));
        if let Value::Array(required) = required {
            required.push(json!("conversation_id"));
        }
    }
    output
}

/// The structured content of a result: the data (wrapped in `result` when its schema is not an
/// object's) with `conversation_id`, as [`result_output_schema`] declares it.
fn result_structured(schema: Option<&Value>, data: Value, conversation_id: &str) -> Value {
    let object_schema = schema.is_some_and(is_object_schema);
    let mut structured = if object_schema {
        data
    } else {
        json!({ "result": data })
    };
    if !schema.is_some_and(declares_conversation_id)
        && let Value::Object(fields) = &mut structured
    {
        fields.insert("conversation_id".to_owned(), json!(conversation_id));
    }
    structured
}

/// Whether an object result schema has a `conversation_id` property of its own.
fn declares_conversation_id(schema: &Value) -> bool {
    is_object_schema(schema)
        && schema
            .get("properties")
            .is_some_and(|properties| properties.get("conversation_id").is_some())
}

fn conversation_id_schema() -> Value {
    json!({
        "type": "string",
        "description": "The conversation; pass it back to continue it."
    })
}

/// Whether an agent's result schema is served as the output schema as is (it describes an
/// object), so that its data is the structured content as is; else both are wrapped in
/// `result` (see [`result_output_schema`]).
fn is_object_schema(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("object")
}

fn output_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "reply": {"type": "string", "description": "The agent's final answer."},
            "conversation_id": conversation_id_schema()
        },
        "required": ["reply", "conversation_id"]
    })
}

/// Answers 503 to a request that would open a session (an `initialize` without a session id)
/// when the sessions are all taken and busy, with a JSON-RPC error saying so; the session
/// manager refuses it anyway, but only with rmcp's bare 500.
async fn admit(sessions: &sessions::BoundedSessions, request: Request, next: Next) -> Response {
    let opens = request.method() == axum::http::Method::POST
        && !request.headers().contains_key("mcp-session-id");
    if !opens || sessions.has_room() {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_PEEKED_BODY).await else {
        return (
            axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            "Payload Too Large: the request body is over 4 MiB",
        )
            .into_response();
    };
    #[derive(serde::Deserialize)]
    struct Peeked {
        method: Option<String>,
        id: Option<Value>,
    }
    let peeked = serde_json::from_slice::<Peeked>(&bytes).ok();
    let Some(Peeked {
        method: Some(method),
        id,
    }) = peeked.filter(|peeked| peeked.method.as_deref() == Some("initialize"))
    else {
        return next
            .run(Request::from_parts(parts, axum::body::Body::from(bytes)))
            .await;
    };
    tracing::warn!(method, "refused a new MCP session: every session is busy");
    let error = json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": -32000, "message": sessions::full_message(sessions.max_sessions())}
    });
    (
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        [
            (header::RETRY_AFTER, "5"),
            (header::CONTENT_TYPE, "application/json"),
        ],
        error.to_string(),
    )
        .into_response()
}

/// An rmcp transport that stops reading while [`MAX_QUEUED_WRITES`] messages wait to be
/// written: rmcp reads the next message as soon as it can and writes each answer from a task
/// of its own, so over a pipe nobody reads, answers would pile up without end.
struct Backpressured<T> {
    inner: T,
    queue: Arc<WriteQueue>,
}

/// The messages waiting to be written.
#[derive(Default)]
struct WriteQueue {
    waiting: AtomicUsize,
    /// Wakes a reader when a message has been written (or dropped).
    written: Notify,
}

/// One message waiting to be written; counted until dropped.
struct Queued(Arc<WriteQueue>);

impl Drop for Queued {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::SeqCst);
        self.0.written.notify_waiters();
    }
}

impl<T> Backpressured<T> {
    fn new(inner: T) -> Self {
        Self {
            inner,
            queue: Arc::default(),
        }
    }
}

impl<T: Transport<RoleServer>> Transport<RoleServer> for Backpressured<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.queue.waiting.fetch_add(1, Ordering::SeqCst);
        let queued = Queued(Arc::clone(&self.queue));
        let sending = self.inner.send(item);
        async move {
            let _queued = queued;
            sending.await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            let written = self.queue.written.notified();
            tokio::pin!(written);
            // Registered before the check, so a write finishing in between is not missed.
            written.as_mut().enable();
            if self.queue.waiting.load(Ordering::SeqCst) < MAX_QUEUED_WRITES {
                break;
            }
            written.await;
        }
        self.inner.receive().await
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// Refuses requests without the bearer token, when one is set.
async fn authenticate(token: Option<&str>, request: Request, next: Next) -> Response {
    if let Some(token) = token {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(bearer);
        if !given.is_some_and(|given| constant_time_eq(given.as_bytes(), token.as_bytes())) {
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests;
