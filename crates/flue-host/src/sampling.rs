//! MCP sampling with the agent's own model: a server with `sampling: true` asks, and the
//! agent's provider answers one turn without tools. The request is subject to the agent's
//! permission rules under the name `mcp__<server>__sampling` (default `always_allow`: enabling
//! sampling is the consent); `always_ask` needs the harness's approver. The tokens are added to
//! the operation whose tool call caused the request and to the set's sampling usage
//! ([`AgentHarness::mcp_sampling_usage`](crate::AgentHarness::mcp_sampling_usage)).

use std::sync::{Arc, Mutex, PoisonError};

use flue_connectors::{McpSampler, McpSamplingApprover, SamplingRequest, SamplingResponse};
use flue_core::{
    AssistantContent, AssistantMessage, BoxFuture, CancellationToken, ModelRef, Permission,
    ProviderRegistry, Record, Redactor, StopReason, ThinkingLevel, Usage, UserMessage,
    model::{ModelRequest, TurnSink},
    permission::PermissionRule,
    permission::decide_permission,
    record::SampledMessage,
    record::SamplingExchange,
    spans::traced_turn,
};

/// Answers sampling requests with one model.
pub(crate) struct ModelSampler {
    pub(crate) providers: ProviderRegistry,
    /// `provider/model`.
    pub(crate) model: String,
    /// The workspace's secrets, redacted from the reply a telemetry subscriber may record.
    pub(crate) redactor: Redactor,
    pub(crate) usage: Arc<Mutex<Usage>>,
    /// The agent's permission rules.
    pub(crate) permissions: Vec<PermissionRule>,
    /// Who approves requests under `always_ask`.
    pub(crate) approver: Option<Arc<dyn McpSamplingApprover>>,
}

/// The permission name of server `server`'s sampling requests.
pub(crate) fn sampling_permission_name(server: &str) -> String {
    format!("mcp__{server}__sampling")
}

impl McpSampler for ModelSampler {
    fn sample<'a>(
        &'a self,
        request: &'a SamplingRequest,
    ) -> BoxFuture<'a, Result<SamplingResponse, String>> {
        Box::pin(async move {
            let outcome = self.run(request).await;
            if let Some(caller) = &request.caller {
                let mut exchange = SamplingExchange::new(
                    caller.call_id.clone(),
                    request.server.clone(),
                    self.model.clone(),
                );
                exchange.system.clone_from(&request.system_prompt);
                exchange.messages = request
                    .messages
                    .iter()
                    .map(|(is_user, text)| SampledMessage {
                        role: if *is_user { "user" } else { "assistant" }.to_owned(),
                        text: text.clone(),
                    })
                    .collect();
                exchange.max_tokens = request.max_tokens;
                match &outcome {
                    Ok((response, usage)) => {
                        exchange.response = Some(response.text.clone());
                        exchange.usage = *usage;
                        *caller.usage.lock().unwrap_or_else(PoisonError::into_inner) += *usage;
                    }
                    Err(error) => exchange.error = Some(error.clone()),
                }
                caller
                    .sampling
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(exchange);
            }
            outcome.map(|(response, _)| response)
        })
    }
}

impl ModelSampler {
    /// Checks the permission and runs the model: the answer and its usage.
    async fn run(&self, request: &SamplingRequest) -> Result<(SamplingResponse, Usage), String> {
        {
            self.check_permission(request).await?;
            let (provider, spec) = self
                .providers
                .resolve(&self.model)
                .map_err(|err| format!("the agent's model cannot sample: {err}"))?;
            let model_ref = ModelRef {
                provider: spec.provider.clone(),
                id: spec.model.clone(),
            };
            let messages: Vec<Record> = request
                .messages
                .iter()
                .map(|(is_user, text)| {
                    if *is_user {
                        Record::User(UserMessage::text(text.clone()))
                    } else {
                        Record::Assistant(AssistantMessage {
                            content: vec![AssistantContent::Text { text: text.clone() }],
                            model: model_ref.clone(),
                            usage: Usage::default(),
                            stop_reason: StopReason::EndTurn,
                            interrupted: false,
                        })
                    }
                })
                .collect();
            let request = ModelRequest {
                model: &spec.model,
                system: request.system_prompt.as_deref().unwrap_or_default(),
                messages: &messages,
                tools: &[],
                thinking: ThinkingLevel::Off,
                max_output_tokens: u64::from(request.max_tokens.max(1)),
            };
            let turn = traced_turn(
                provider.as_ref(),
                &spec,
                request,
                &TurnSink::default(),
                &CancellationToken::new(),
                &self.redactor,
            )
            .await
            .map_err(|err| format!("sampling with {} failed: {err}", self.model))?;
            let usage = turn.usage;
            *self.usage.lock().unwrap_or_else(PoisonError::into_inner) += usage;
            let text: Vec<&str> = turn
                .content
                .iter()
                .filter_map(|content| match content {
                    AssistantContent::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect();
            let response = SamplingResponse::new(text.join(""), self.model.clone());
            let response = if turn.stop_reason == StopReason::MaxTokens {
                response.with_hit_max_tokens()
            } else {
                response
            };
            Ok((response, usage))
        }
    }

    /// Refuses `request` unless the agent's rules allow it or the approver says yes.
    async fn check_permission(&self, request: &SamplingRequest) -> Result<(), String> {
        let name = sampling_permission_name(&request.server);
        match decide_permission(&self.permissions, &name, Permission::AlwaysAllow) {
            Permission::AlwaysAllow => Ok(()),
            Permission::AlwaysAsk => match &self.approver {
                Some(approver) => approver.approve(request).await,
                None => Err(format!(
                    "sampling by mcp server `{}` needs approval (`{name}` is always_ask) and \
                     no one here can approve it; set `{name}: always_allow` in the agent's \
                     permissions to let it run",
                    request.server
                )),
            },
        }
    }
}
