//! Connecting to an MCP server, listing its tools and adapting them into tool definitions.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use flue_core::{
    FlueError, Result, Tool, ToolContext, ToolDefinition, ToolError, ToolMeta,
    error::McpErrorReason, tool::Effects, tool::InterruptBehavior, tool::Ownership,
    tool::ToolSource,
};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientRequest,
    ListToolsRequest, PaginatedRequestParams, ServerResult,
};
use rmcp::service::{ClientInitializeError, PeerRequestOptions, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{Peer, RoleClient, ServiceError, ServiceExt};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::handler::Handler;
use super::live::{McpTools, ToolListChanges};
use super::naming::adapted_name;
use super::oauth::{Authorizer, OAuthHttpClient};
use super::options::{McpEndpoint, McpServerOptions, McpTransport};
use super::render::{EMPTY_RESULT, render_result};
use super::sampling::RunningCalls;
use super::sse::{SseTransport, error_chain};
use super::stdio::{self, StderrTail};

/// How long [`McpServerConnection::close`] waits for the server to shut down cleanly (a stdio
/// server gets its stdin closed, then `SIGTERM`, then `SIGKILL`).
const CLOSE_GRACE: Duration = Duration::from_secs(10);

/// Pages of `tools/list` followed before giving up on a server that never stops paginating.
const MAX_PAGES: usize = 1000;

/// How long an error about a dead stdio server waits for the end of its stderr.
const STDERR_SETTLE: Duration = Duration::from_secs(2);

/// How long after a `tools/call` answer a streamable-HTTP server's change notification may
/// still be on its way (it travels on another stream than the answer).
const CHANGE_NOTICE_GRACE: Duration = Duration::from_millis(150);

/// Cap on the `invalid output` problems reported for one result.
const MAX_REPORTED_PROBLEMS: usize = 8;

/// A connected MCP server: its tools, ready for an agent, and the connection behind them.
///
/// The tools are a live list: when the server sends `notifications/tools/list_changed`, the
/// list is fetched again (`tools/list`) the next time the agent loop refreshes its tool
/// sources, before a model turn. Give an agent [`McpServerConnection::tool_source`] to follow
/// such changes; [`McpServerConnection::tools`] is the list as it stands.
///
/// Tools keep working as long as the connection is open; after [`McpServerConnection::close`]
/// (or dropping the connection, which closes it in the background) their calls fail with a
/// `mcp_server_closed` tool error.
pub struct McpServerConnection {
    name: String,
    tools: Arc<McpTools>,
    service: RunningService<RoleClient, Handler>,
}

/// Connects to the MCP server `name` and adapts every tool it lists.
///
/// Each tool becomes a [`ToolDefinition`] named `mcp__<server>__<tool>` (see the crate docs for
/// the naming rules) with ownership [`Ownership::Mcp`], `read_only` and `destructive` taken
/// from the server's `readOnlyHint` and `destructiveHint` (with the MCP defaults: not
/// read-only, destructive unless read-only or said otherwise). Its description names the
/// server and the original tool. A call sends `tools/call` with the per-request timeout and
/// renders the result for the model; a result flagged `isError` becomes an `mcp_tool_error`
/// tool error, and structured content that does not match the tool's declared output schema an
/// `invalid_output` one. Transport failures during a call (timeout, the server going away, a
/// malformed answer) are tool errors too, so the operation and the session go on.
///
/// Fails with [`FlueError::Mcp`] naming the server when it cannot be started or reached, does
/// not complete the handshake within the timeout, or lists tools that cannot be adapted (two
/// tools with the same adapted name, a pagination cursor seen twice, an invalid schema). Error
/// messages never contain header or environment values. (A list fetched again after a change
/// notification leaves such tools out with a warning instead.)
pub async fn connect_mcp_server(
    name: &str,
    options: McpServerOptions,
) -> Result<McpServerConnection> {
    crate::install_crypto_provider();
    let mut context = ErrorContext {
        server: name.to_owned(),
        secrets: options.secret_values(),
        stderr: None,
        authorizer: None,
    };
    let running = RunningCalls::default();
    let changes = Arc::new(ToolListChanges::default());
    let handler = Handler::new(name, &options, running.clone(), Arc::clone(&changes));
    let service = start(name, handler, &options, &mut context).await?;
    // Over streamable HTTP a server may announce a change on its standalone stream, which
    // is not ordered with the answer of the call that made the change.
    let unordered = matches!(
        &options.endpoint,
        McpEndpoint::Http(http) if http.transport == McpTransport::StreamableHttp
    );
    let announces_changes = service
        .peer_info()
        .and_then(|info| info.capabilities.tools.as_ref()?.list_changed)
        == Some(true);
    let client = Arc::new(Client {
        running,
        context,
        peer: service.peer().clone(),
        timeout: options.timeout,
        reset_timeout_on_progress: options.reset_timeout_on_progress,
        asks: options.elicitor.is_some(),
        last_answer: (unordered && announces_changes).then(Mutex::default),
    });
    // A change announced while the first list is fetched is reflected in it, or in the next.
    let seen = changes.count();
    let tools = list_tools(&client).await.and_then(|listed| {
        let (tools, problems) = adapt_tools(&client, listed);
        problems.into_iter().next().map_or(Ok(tools), Err)
    });
    match tools {
        Ok(tools) => Ok(McpServerConnection {
            name: name.to_owned(),
            tools: Arc::new(McpTools::new(name, client, changes, (seen, tools))),
            service,
        }),
        Err(err) => {
            let mut service = service;
            let _ = service.close_with_timeout(CLOSE_GRACE).await;
            Err(err)
        }
    }
}

impl McpServerConnection {
    /// The server name given to [`connect_mcp_server`].
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The server's tools as last listed, in the order it listed them.
    pub fn tools(&self) -> Vec<ToolDefinition> {
        self.tools.tools()
    }

    /// The server's tools as a [`ToolSource`] for an agent
    /// ([`AgentConfig::with_tool_source`](flue_core::AgentConfig::with_tool_source)): listed
    /// again before the model's next turn whenever the server announced that they changed.
    pub fn tool_source(&self) -> Arc<dyn ToolSource> {
        Arc::clone(&self.tools) as Arc<dyn ToolSource>
    }

    /// Closes the connection and waits (up to ten seconds) for it to shut down; a stdio server
    /// is stopped. Calls to this server's tools fail from now on.
    pub async fn close(mut self) -> Result<()> {
        match self.service.close_with_timeout(CLOSE_GRACE).await {
            Ok(_) => Ok(()),
            Err(err) => Err(FlueError::Mcp {
                server: self.name.clone(),
                reason: McpErrorReason::Closed,
                message: format!("closing the connection failed: {err}"),
                source: Some(Box::new(err)),
            }),
        }
    }
}

impl fmt::Debug for McpServerConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpServerConnection")
            .field("name", &self.name)
            .field("tools", &self.tools.tools())
            .finish_non_exhaustive()
    }
}

/// What an error about one server needs: its name, values to hide, its stderr, and why
/// authorization failed.
#[derive(Clone)]
struct ErrorContext {
    server: String,
    secrets: Vec<String>,
    stderr: Option<StderrTail>,
    authorizer: Option<Arc<Authorizer>>,
}

impl ErrorContext {
    /// Lets a dead stdio server's last stderr output arrive before an error quotes it.
    async fn settle(&self) {
        if let Some(stderr) = &self.stderr {
            stderr.settle(STDERR_SETTLE).await;
        }
    }

    /// A failed request, classified, after a dead server's stderr has settled.
    async fn request_error(&self, err: &ServiceError, what: &str) -> FlueError {
        if matches!(
            err,
            ServiceError::TransportClosed | ServiceError::TransportSend(_)
        ) {
            self.settle().await;
        }
        self.service_error(err, what)
    }

    /// An error about this server, with secrets redacted and, when the server may have died,
    /// the end of its stderr.
    fn error(&self, reason: McpErrorReason, message: String) -> FlueError {
        let mut message = message;
        let mut reason = reason;
        if let Some(failure) = self.authorizer.as_ref().and_then(|auth| auth.failure()) {
            reason = McpErrorReason::AuthRequired;
            message = failure;
        }
        let died = matches!(reason, McpErrorReason::StartFailed | McpErrorReason::Closed);
        if let Some(stderr) = self.stderr.as_ref().filter(|_| died) {
            let text = stderr.text();
            if !text.is_empty() {
                message.push_str("; its stderr ends with:\n");
                message.push_str(&text);
            }
        }
        for secret in &self.secrets {
            message = message.replace(secret.as_str(), flue_core::Redactor::REPLACEMENT);
        }
        // Beyond exact copies: the values upper-cased, encoded or cut (long enough ones only).
        if let Ok(redactor) = flue_core::Redactor::new(&self.secrets) {
            message = redactor.redact(&message).into_owned();
        }
        FlueError::Mcp {
            server: self.server.clone(),
            reason,
            message,
            source: None,
        }
    }

    /// A failed request, classified.
    fn service_error(&self, err: &ServiceError, what: &str) -> FlueError {
        let (reason, message) = match err {
            ServiceError::Timeout { timeout } => (
                McpErrorReason::Timeout,
                format!(
                    "{what} got no answer within {} s; the server may be overloaded, or raise the timeout",
                    timeout.as_secs_f32()
                ),
            ),
            ServiceError::TransportClosed | ServiceError::Cancelled { .. } => (
                McpErrorReason::Closed,
                format!(
                    "the connection closed during {what}: the server exited or hung up; a new run reconnects"
                ),
            ),
            ServiceError::TransportSend(err) => (
                McpErrorReason::Closed,
                format!("cannot send {what}: {}", error_chain(err.error.as_ref())),
            ),
            ServiceError::McpError(data) => (
                McpErrorReason::ServerError,
                format!("{what} failed with error {}: {}", data.code.0, data.message),
            ),
            ServiceError::UnexpectedResponse => (
                McpErrorReason::MalformedResponse,
                format!("the answer to {what} is not a valid MCP result"),
            ),
            other => (
                McpErrorReason::ServerError,
                format!("{what} failed: {other}"),
            ),
        };
        self.error(reason, message)
    }
}

/// What every tool of one server shares: the peer to send requests through and the settings.
pub(super) struct Client {
    /// The calls in flight, to which sampling requests are attributed.
    running: RunningCalls,
    context: ErrorContext,
    peer: Peer<RoleClient>,
    timeout: Duration,
    reset_timeout_on_progress: bool,
    /// When the last `tools/call` answer arrived, kept for a server whose change notifications
    /// may trail that answer (see [`Client::change_notice_due`]); `None` for other servers.
    last_answer: Option<Mutex<Option<Instant>>>,
    /// The server may ask questions (an elicitor answers them): requests keep their own idle
    /// clock, which stands still while a question waits.
    asks: bool,
}

impl Client {
    /// How long to wait before trusting that every change a call announced has been noted:
    /// zero unless the server says it sends `notifications/tools/list_changed` and may send
    /// them on a stream other than the call's (streamable HTTP), and a call answered less than
    /// [`CHANGE_NOTICE_GRACE`] ago.
    pub(super) fn change_notice_due(&self) -> Duration {
        let Some(last_answer) = &self.last_answer else {
            return Duration::ZERO;
        };
        let answered = *last_answer.lock().unwrap_or_else(PoisonError::into_inner);
        answered.map_or(Duration::ZERO, |answered| {
            CHANGE_NOTICE_GRACE.saturating_sub(answered.elapsed())
        })
    }

    /// Notes that a `tools/call` was answered (for [`Client::change_notice_due`]).
    fn note_answer(&self) {
        if let Some(last_answer) = &self.last_answer {
            *last_answer.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
        }
    }

    /// Sends `request` and waits for its answer, the timeout or `cancel`.
    async fn request(
        &self,
        request: ClientRequest,
        what: &str,
        cancel: &CancellationToken,
    ) -> Result<ServerResult> {
        let mut request_options = PeerRequestOptions::with_timeout(self.timeout);
        if self.reset_timeout_on_progress {
            request_options = request_options.reset_timeout_on_progress();
        }
        if self.asks {
            // Our own clock below: a person answering a question takes longer than a request.
            request_options = PeerRequestOptions::no_options();
        }
        let idle = async {
            if self.asks {
                self.running.idle_for(self.timeout).await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        let handle = match self
            .peer
            .send_request_with_option(request, request_options)
            .await
        {
            Ok(handle) => handle,
            Err(err) => return Err(self.context.request_error(&err, what).await),
        };
        let id = handle.id.clone();
        tokio::select! {
            biased;
            () = cancel.cancelled() => {
                let reason = Some("the operation was aborted".to_owned());
                let notice = self.peer.notify_cancelled(CancelledNotificationParam::new(Some(id), reason));
                let _ = tokio::time::timeout(Duration::from_secs(1), notice).await;
                Err(FlueError::Aborted)
            }
            () = idle => {
                let reason = Some("the request timed out".to_owned());
                let notice = self.peer.notify_cancelled(CancelledNotificationParam::new(Some(id), reason));
                let _ = tokio::time::timeout(Duration::from_secs(1), notice).await;
                let err = rmcp::service::ServiceError::Timeout { timeout: self.timeout };
                Err(self.context.request_error(&err, what).await)
            }
            answer = handle.await_response() => match answer {
                Ok(answer) => Ok(answer),
                Err(err) => Err(self.context.request_error(&err, what).await),
            },
        }
    }
}

/// The least time the connection and handshake get, whatever the per-request timeout: the
/// default request timeout, as a Python server importing its SDK on a busy machine can take
/// more than half a minute to answer `initialize`.
const MIN_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(60);

/// Opens the transport of `options` and runs the MCP handshake; a stdio server's stderr tail
/// joins `context` for later errors.
async fn start(
    name: &str,
    info: Handler,
    options: &McpServerOptions,
    context: &mut ErrorContext,
) -> Result<RunningService<RoleClient, Handler>> {
    // Starting a server (a Python or `npx` process, a cold hosted endpoint) can take longer
    // than a short per-request timeout meant for tool calls.
    let timeout = options.timeout.max(MIN_HANDSHAKE_TIMEOUT);
    let service = match &options.endpoint {
        McpEndpoint::Http(http) => {
            let headers = header_map(&http.headers, context)?;
            match http.transport {
                McpTransport::StreamableHttp => {
                    let config = StreamableHttpClientTransportConfig::with_uri(http.url.as_str())
                        .custom_headers(
                            headers
                                .iter()
                                .map(|(name, value)| (name.clone(), value.clone()))
                                .collect(),
                        );
                    if headers.contains_key(reqwest::header::AUTHORIZATION) {
                        let transport = StreamableHttpClientTransport::from_config(config);
                        handshake(info, transport, timeout, &http.url, context).await?
                    } else {
                        let authorizer = Authorizer::new(
                            name,
                            &http.url,
                            options.oauth.clone(),
                            &reqwest::Client::new(),
                        )
                        .await
                        .map_err(|message| context.error(McpErrorReason::StartFailed, message))?;
                        context.authorizer = Some(Arc::clone(&authorizer));
                        let client = OAuthHttpClient { authorizer };
                        let transport = StreamableHttpClientTransport::with_client(client, config);
                        handshake(info, transport, timeout, &http.url, context).await?
                    }
                }
                McpTransport::Sse => {
                    let transport = SseTransport::connect(&http.url, headers, timeout)
                        .await
                        .map_err(|err| {
                            let reason = if err.malformed {
                                McpErrorReason::MalformedResponse
                            } else {
                                McpErrorReason::StartFailed
                            };
                            context.error(reason, format!("cannot connect to {}: {err}", http.url))
                        })?;
                    handshake(info, transport, timeout, &http.url, context).await?
                }
            }
        }
        McpEndpoint::Stdio(command) => {
            let (transport, stderr) = stdio::spawn(command).map_err(|err| {
                let message = match command.cwd.as_deref().filter(|cwd| !cwd.is_dir()) {
                    // The kernel reports a missing working directory like a missing program.
                    Some(cwd) => format!(
                        "cannot start `{}` in {}: that working directory is not a directory \
                         ({err}); fix the server's `cwd` (relative to the workspace root) or \
                         create the directory",
                        command.command,
                        cwd.display()
                    ),
                    None => format!(
                        "cannot start `{}`: {err}; check the command and that it is installed",
                        command.command
                    ),
                };
                let mut error = context.error(McpErrorReason::StartFailed, message);
                if let FlueError::Mcp { source, .. } = &mut error {
                    *source = Some(Box::new(err));
                }
                error
            })?;
            context.stderr = Some(stderr);
            let target = format!("`{}`", command.command);
            handshake(info, transport, timeout, &target, context).await?
        }
    };
    Ok(service)
}

/// Runs the MCP handshake over `transport` to `target` (a url or a command), within `timeout`.
async fn handshake<T, E, A>(
    info: Handler,
    transport: T,
    timeout: Duration,
    target: &str,
    context: &ErrorContext,
) -> Result<RunningService<RoleClient, Handler>>
where
    T: rmcp::transport::IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    let started = tokio::time::timeout(timeout, info.serve(transport)).await;
    let err = match started {
        Ok(Ok(service)) => return Ok(service),
        Ok(Err(err)) => err,
        Err(_) => {
            return Err(context.error(
                McpErrorReason::Timeout,
                format!(
                    "the MCP handshake did not finish within {} s; check that this is an MCP server",
                    timeout.as_secs_f32()
                ),
            ));
        }
    };
    if let ClientInitializeError::ConnectionClosed(_) = &err {
        context.settle().await;
    }
    let (reason, message) = match &err {
        ClientInitializeError::ConnectionClosed(_) => (
            McpErrorReason::StartFailed,
            "the server closed the connection during the MCP handshake".to_owned(),
        ),
        ClientInitializeError::TransportError { error, .. } => (
            McpErrorReason::StartFailed,
            format!(
                "cannot reach {target}: {}",
                error_chain(error.error.as_ref())
            ),
        ),
        ClientInitializeError::JsonRpcError(data) => (
            McpErrorReason::StartFailed,
            format!(
                "the server refused the MCP handshake with error {}: {}",
                data.code.0, data.message
            ),
        ),
        ClientInitializeError::ExpectedInitResponse(_)
        | ClientInitializeError::ExpectedInitResult(_)
        | ClientInitializeError::ConflictInitResponseId(..) => (
            McpErrorReason::MalformedResponse,
            "the server's answer to `initialize` is not a valid MCP result".to_owned(),
        ),
        other => (
            McpErrorReason::StartFailed,
            format!("the MCP handshake failed: {other}"),
        ),
    };
    Err(context.error(reason, message))
}

/// Every tool the server lists, following pagination.
pub(super) async fn list_tools(client: &Client) -> Result<Vec<rmcp::model::Tool>> {
    let never = CancellationToken::new();
    let mut tools = Vec::new();
    let mut seen_cursors = HashSet::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let params = PaginatedRequestParams::default().with_cursor(cursor.clone());
        let request = ClientRequest::ListToolsRequest(ListToolsRequest::with_param(params));
        let ServerResult::ListToolsResult(page) =
            client.request(request, "tools/list", &never).await?
        else {
            return Err(client.context.error(
                McpErrorReason::MalformedResponse,
                "the answer to tools/list is not a tool list".to_owned(),
            ));
        };
        tools.extend(page.tools);
        match page.next_cursor {
            None => return Ok(tools),
            Some(next) => {
                if !seen_cursors.insert(next.clone()) {
                    return Err(client.context.error(
                        McpErrorReason::InvalidTools,
                        format!(
                            "tools/list repeated the pagination cursor {next:?}, so the listing would never end; fix the server's pagination"
                        ),
                    ));
                }
                cursor = Some(next);
            }
        }
    }
    Err(client.context.error(
        McpErrorReason::InvalidTools,
        format!("tools/list did not end after {MAX_PAGES} pages"),
    ))
}

/// The listed tools as tool definitions, and one error for each tool left out: one whose
/// adapted name an earlier tool already has, or whose definition is invalid. Connecting fails
/// on the first error; a refreshed list leaves such tools out with a warning.
pub(super) fn adapt_tools(
    client: &Arc<Client>,
    listed: Vec<rmcp::model::Tool>,
) -> (Vec<ToolDefinition>, Vec<FlueError>) {
    let server = client.context.server.as_str();
    let mut originals: BTreeMap<String, String> = BTreeMap::new();
    let mut tools = Vec::with_capacity(listed.len());
    let mut problems = Vec::new();
    for tool in listed {
        let original = tool.name.to_string();
        let name = adapted_name(server, &original);
        if let Some(first) = originals.get(&name) {
            problems.push(client.context.error(
                McpErrorReason::InvalidTools,
                format!(
                    "tools `{first}` and `{original}` both become `{name}`; rename one of them on the server"
                ),
            ));
            continue;
        }
        originals.insert(name.clone(), original.clone());
        match adapt_tool(client, &tool, &name, &original) {
            Ok(definition) => tools.push(definition),
            Err(err) => problems.push(err),
        }
    }
    (tools, problems)
}

/// One listed tool as the tool definition `name`.
fn adapt_tool(
    client: &Arc<Client>,
    tool: &rmcp::model::Tool,
    name: &str,
    original: &str,
) -> Result<ToolDefinition> {
    let server = client.context.server.as_str();
    let invalid = |message: String| {
        client.context.error(
            McpErrorReason::InvalidTools,
            format!("tool `{original}`: {message}"),
        )
    };
    let output_validator = match &tool.output_schema {
        Some(schema) => Some(
            jsonschema::validator_for(&Value::Object((**schema).clone()))
                .map_err(|err| invalid(format!("invalid output schema: {err}")))?,
        ),
        None => None,
    };
    let annotations = tool.annotations.as_ref();
    let read_only = annotations
        .and_then(|hints| hints.read_only_hint)
        .unwrap_or(false);
    let destructive = !read_only
        && annotations
            .and_then(|hints| hints.destructive_hint)
            .unwrap_or(true);
    // The MCP defaults: a tool is open-world (reaches outside services) unless it says not.
    let open_world = annotations
        .and_then(|hints| hints.open_world_hint)
        .unwrap_or(true);
    let meta = ToolMeta {
        ownership: Ownership::Mcp,
        read_only,
        destructive,
        effects: if open_world {
            Effects::NETWORK
        } else {
            Effects::NONE
        },
        interrupt: InterruptBehavior::Cancel,
        ..ToolMeta::default()
    };
    let description = describe(server, tool);
    let input_schema = normalize_input_schema(&tool.input_schema);
    let implementation = McpTool {
        client: Arc::clone(client),
        original: original.to_owned(),
        output_validator,
    };
    let definition = ToolDefinition::new(name, description, input_schema, Arc::new(implementation))
        .map_err(|err| match err {
            FlueError::InvalidTool { message, .. } => invalid(message),
            other => invalid(other.to_string()),
        })?
        .with_meta(meta);
    Ok(definition)
}

/// `MCP tool "x" from server "s". Title: T. <description>`
fn describe(server: &str, tool: &rmcp::model::Tool) -> String {
    let mut parts = vec![format!(
        "MCP tool \"{}\" from server \"{server}\".",
        tool.name
    )];
    let title = tool.title.as_deref().or_else(|| {
        tool.annotations
            .as_ref()
            .and_then(|hints| hints.title.as_deref())
    });
    if let Some(title) = title.filter(|title| *title != tool.name) {
        parts.push(format!("Title: {title}."));
    }
    if let Some(description) = tool.description.as_deref().filter(|text| !text.is_empty()) {
        parts.push(description.to_owned());
    }
    parts.join(" ")
}

/// The input schema with `type: object` and `properties` filled in when a server leaves them
/// out (some do for tools without arguments).
fn normalize_input_schema(schema: &Map<String, Value>) -> Value {
    let mut schema = schema.clone();
    if !schema.contains_key("type") {
        schema.insert("type".to_owned(), Value::String("object".to_owned()));
    }
    schema
        .entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    Value::Object(schema)
}

/// Header names and values for the HTTP transports; a bad one is an error naming the header
/// (never the value).
fn header_map(headers: &BTreeMap<String, String>, context: &ErrorContext) -> Result<HeaderMap> {
    let mut map = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        let header_name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            context.error(
                McpErrorReason::StartFailed,
                format!("invalid header name `{name}`"),
            )
        })?;
        let mut header_value = HeaderValue::from_str(value).map_err(|_| {
            context.error(
                McpErrorReason::StartFailed,
                format!("the value of header `{name}` is not a valid header value (control characters or non-ASCII)"),
            )
        })?;
        header_value.set_sensitive(true);
        map.insert(header_name, header_value);
    }
    Ok(map)
}

/// One adapted tool: calls `original` on the server.
struct McpTool {
    client: Arc<Client>,
    original: String,
    output_validator: Option<jsonschema::Validator>,
}

impl Tool for McpTool {
    fn run<'a>(
        &'a self,
        input: Value,
        ctx: &'a ToolContext,
    ) -> flue_core::BoxFuture<'a, std::result::Result<Value, ToolError>> {
        Box::pin(async move {
            let arguments = match input {
                Value::Object(arguments) => Some(arguments),
                Value::Null => None,
                _ => return Err(ToolError::invalid_input("the input must be a JSON object")),
            };
            let mut params = CallToolRequestParams::new(self.original.clone());
            params.arguments = arguments;
            let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
            let what = format!("tools/call `{}`", self.original);
            let running = self.client.running.start(ctx);
            let answer = self.client.request(request, &what, &ctx.cancel).await;
            drop(running);
            self.client.note_answer();
            let answer = answer?;
            let result = match answer {
                ServerResult::CallToolResult(result) => result,
                ServerResult::EmptyResult(_) => return Ok(Value::String(EMPTY_RESULT.to_owned())),
                _ => {
                    let err = self.client.context.error(
                        McpErrorReason::MalformedResponse,
                        format!("the answer to {what} is not a valid tool result"),
                    );
                    return Err(err.into());
                }
            };
            let json = serde_json::to_value(&result).unwrap_or(Value::Null);
            let text = render_result(&json);
            if result.is_error == Some(true) {
                return Err(ToolError::new("mcp_tool_error", text));
            }
            if let Some(validator) = &self.output_validator {
                self.check_output(validator, result.structured_content.as_ref())?;
            }
            Ok(Value::String(text))
        })
    }
}

impl McpTool {
    /// Structured content must be present and match the declared output schema.
    fn check_output(
        &self,
        validator: &jsonschema::Validator,
        structured: Option<&Value>,
    ) -> std::result::Result<(), ToolError> {
        let Some(structured) = structured else {
            return Err(ToolError::new(
                "invalid_output",
                format!(
                    "MCP tool `{}` declares an output schema but returned no structured content",
                    self.original
                ),
            ));
        };
        let problems: Vec<String> = validator
            .iter_errors(structured)
            .take(MAX_REPORTED_PROBLEMS)
            .map(|err| {
                let path = err.instance_path().to_string();
                if path.is_empty() {
                    err.to_string()
                } else {
                    format!("{path}: {err}")
                }
            })
            .collect();
        if problems.is_empty() {
            return Ok(());
        }
        Err(ToolError::new(
            "invalid_output",
            format!(
                "MCP tool `{}` returned structured content that does not match its output schema: {}",
                self.original,
                problems.join("; ")
            ),
        ))
    }
}
