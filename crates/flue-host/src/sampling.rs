//! MCP sampling with the agent's own model: a server with `sampling: true` asks, and the
//! agent's provider answers one turn without tools. The tokens are added to the harness's
//! sampling usage ([`AgentHarness::mcp_sampling_usage`](crate::AgentHarness::mcp_sampling_usage)).

use std::sync::{Arc, Mutex, PoisonError};

use flue_connectors::{McpSampler, SamplingRequest, SamplingResponse};
use flue_core::{
    AssistantContent, AssistantMessage, BoxFuture, ModelRef, ModelRequest, ProviderRegistry,
    Record, StopReason, ThinkingLevel, TurnSink, Usage, UserMessage,
};

/// Answers sampling requests with one model.
pub(crate) struct ModelSampler {
    pub(crate) providers: ProviderRegistry,
    /// `provider/model`.
    pub(crate) model: String,
    pub(crate) usage: Arc<Mutex<Usage>>,
}

impl McpSampler for ModelSampler {
    fn sample<'a>(
        &'a self,
        request: &'a SamplingRequest,
    ) -> BoxFuture<'a, Result<SamplingResponse, String>> {
        Box::pin(async move {
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
                        })
                    }
                })
                .collect();
            let turn = provider
                .stream_turn(
                    ModelRequest {
                        model: &spec.model,
                        system: request.system_prompt.as_deref().unwrap_or_default(),
                        messages: &messages,
                        tools: &[],
                        thinking: ThinkingLevel::Off,
                        max_output_tokens: u64::from(request.max_tokens.max(1)),
                    },
                    &TurnSink::default(),
                )
                .await
                .map_err(|err| format!("sampling with {} failed: {err}", self.model))?;
            *self.usage.lock().unwrap_or_else(PoisonError::into_inner) += turn.usage;
            let text: Vec<&str> = turn
                .content
                .iter()
                .filter_map(|content| match content {
                    AssistantContent::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect();
            let response = SamplingResponse::new(text.join(""), self.model.clone());
            Ok(if turn.stop_reason == StopReason::MaxTokens {
                response.with_hit_max_tokens()
            } else {
                response
            })
        })
    }
}
