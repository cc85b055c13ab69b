//! The client side of a connection: what flue announces in the handshake, how it answers the
//! requests a server sends back (elicitation, sampling) and which notifications it notes (a
//! changed tool list).
#![allow(
    deprecated,
    reason = "rmcp marks sampling deprecated for a future MCP draft; it is part of the 2025-11-25 spec flue speaks"
)]

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult,
    ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationCapability,
    FormElicitationCapability, Implementation, MetaObject, ProgressNotificationParam,
    ProtocolVersion, Role, SamplingCapability, SamplingMessage,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ClientHandler, ErrorData, RoleClient};
use serde_json::Value;

use super::elicitation::{ElicitationAnswer, ElicitationRequest, McpElicitor};
use super::live::ToolListChanges;
use super::options::McpServerOptions;
use super::sampling::{McpSampler, RunningCalls, SamplingRequest, content_text};

/// Answers a server's requests for one connection.
pub(crate) struct Handler {
    info: ClientConfig,
    server: String,
    elicitor: Option<Arc<dyn McpElicitor>>,
    elicitation_timeout: Duration,
    sampler: Option<Arc<dyn McpSampler>>,
    running: RunningCalls,
    tool_list_changes: Arc<ToolListChanges>,
    /// Progress notifications restart the running calls' timeouts.
    reset_timeout_on_progress: bool,
}

impl Handler {
    /// The handler for server `server`; elicitation and sampling are announced only when
    /// someone answers them.
    pub(crate) fn new(
        server: &str,
        options: &McpServerOptions,
        running: RunningCalls,
        tool_list_changes: Arc<ToolListChanges>,
    ) -> Self {
        let elicitor = options.elicitor.clone();
        let sampler = options.sampler.clone();
        let mut capabilities = ClientCapabilities::default();
        if sampler.is_some() {
            capabilities.sampling = Some(SamplingCapability::default());
        }
        if elicitor.is_some() {
            let mut elicitation = ElicitationCapability::new();
            elicitation.form = Some(FormElicitationCapability::new());
            capabilities.elicitation = Some(elicitation);
        }
        let info = ClientConfig::new(
            capabilities,
            Implementation::new("flue", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE);
        Self {
            info,
            server: server.to_owned(),
            elicitor,
            elicitation_timeout: options.elicitation_timeout,
            sampler,
            running,
            tool_list_changes,
            reset_timeout_on_progress: options.reset_timeout_on_progress,
        }
    }
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        tracing::debug!(target: "flue::mcp", server = %self.server, "the tool list changed");
        self.tool_list_changes.note();
    }

    async fn on_progress(
        &self,
        _params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if self.reset_timeout_on_progress {
            self.running.touch();
        }
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        {
            let Some(sampler) = &self.sampler else {
                return Err(ErrorData::invalid_request(
                    "sampling is not enabled for this server: set `sampling: true` in its mcp settings",
                    None,
                ));
            };
            let messages = params
                .messages
                .iter()
                .map(|message| {
                    let json = serde_json::to_value(message).unwrap_or(Value::Null);
                    let is_user = json.get("role").and_then(Value::as_str) != Some("assistant");
                    (
                        is_user,
                        content_text(json.get("content").unwrap_or(&Value::Null)),
                    )
                })
                .collect();
            let request = SamplingRequest {
                server: self.server.clone(),
                system_prompt: params.system_prompt.clone(),
                messages,
                max_tokens: params.max_tokens,
                caller: self.running.newest(),
            };
            let response = sampler
                .sample(&request)
                .await
                .map_err(|message| ErrorData::internal_error(message, None))?;
            let stop_reason = if response.hit_max_tokens {
                CreateMessageResult::STOP_REASON_END_MAX_TOKEN
            } else {
                CreateMessageResult::STOP_REASON_END_TURN
            };
            Ok(CreateMessageResult::new(
                SamplingMessage::new(Role::Assistant, response.text),
                response.model,
            )
            .with_stop_reason(stop_reason))
        }
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        {
            let decline = |reason: String| {
                let mut meta = serde_json::Map::new();
                meta.insert("reason".to_owned(), Value::String(reason));
                ElicitResult::new(ElicitationAction::Decline).with_meta(MetaObject(meta))
            };
            let Some(elicitor) = &self.elicitor else {
                return Ok(decline("this client has no one to ask".to_owned()));
            };
            let (message, schema) = match request {
                ElicitRequestParams::FormElicitationParams {
                    message,
                    requested_schema,
                    ..
                } => (
                    message,
                    serde_json::to_value(&requested_schema).unwrap_or(Value::Null),
                ),
                _ => {
                    return Ok(decline("flue answers form elicitation only".to_owned()));
                }
            };
            let mut request = ElicitationRequest::new(&self.server, message, schema);
            request.caller = self.running.newest();
            request.timeout = self.elicitation_timeout;
            // The calls' own timeouts stand still while a person is asked.
            let _asking = self.running.question();
            Ok(match elicitor.elicit(&request).await {
                ElicitationAnswer::Accept(values) => {
                    ElicitResult::new(ElicitationAction::Accept).with_content(Value::Object(values))
                }
                ElicitationAnswer::Decline { reason } => decline(reason),
                ElicitationAnswer::Cancel => ElicitResult::new(ElicitationAction::Cancel),
            })
        }
    }
}
