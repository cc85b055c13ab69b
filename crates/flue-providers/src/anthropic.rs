//! Anthropic Messages over its streaming wire format.
//!
//! Request: `POST {base_url}/v1/messages` with `x-api-key` and `anthropic-version`, the system
//! prompt as a cached text block, alternating user/assistant messages (tool results are user
//! blocks answering the `tool_use` blocks of the assistant message before them), images as
//! base64 blocks, and `thinking` from the thinking level: a token budget for older models, an
//! adaptive effort for newer ones. Thinking blocks and their signatures go back to the model
//! that produced them. Response: `message_start` (input and cache usage),
//! `content_block_start/delta/stop` (text, thinking, signature and tool-input JSON deltas),
//! `message_delta` (stop reason, output usage), `message_stop`; `ping` and `error` may come at
//! any point.

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Value, json};

use flue_core::{
    AssistantContent, AssistantMessage, FlueError, Result, StopReason, ThinkingLevel, ToolCall,
    Usage,
    model::{ModelInfo, ModelRequest, ModelTurn, TurnSink},
};

use crate::convert::{self, Item};
use crate::http::{self, Auth, Endpoint, EventReader, Failure};
use crate::provider_config::{ProviderConfig, Thinking};
use crate::remote::{RemoteProvider, WireCodec};

/// The API version sent in `anthropic-version`.
const API_VERSION: &str = "2023-06-01";
/// Output tokens always left for the answer when thinking has a budget.
const MIN_ANSWER_TOKENS: u64 = 1024;
/// The smallest thinking budget the API accepts.
const MIN_THINKING_BUDGET: u64 = 1024;

/// A provider speaking Anthropic Messages: Anthropic itself, or a compatible endpoint.
///
/// ```
/// use flue_core::ModelProvider;
/// use flue_providers::{AnthropicProvider, ApiKey, ProviderConfig};
/// let config = ProviderConfig::builtin("anthropic").unwrap().with_api_key(ApiKey::new("sk-ant-..."));
/// let provider = AnthropicProvider::new(config).unwrap();
/// assert_eq!(provider.model_info("claude-haiku-4-5").context_window, 200_000);
/// assert!(provider.knows_model("claude-haiku-4-5-20251001"));
/// ```
pub type AnthropicProvider = RemoteProvider<AnthropicMessagesWire>;

/// The Anthropic Messages wire API (the codec of [`AnthropicProvider`]).
#[derive(Debug)]
pub struct AnthropicMessagesWire;

impl AnthropicProvider {
    /// A provider from `config` (whose `api` is not checked). Fails on a malformed base URL or
    /// header. A base URL ending in `/v1` is accepted as well as the bare host.
    pub fn new(config: ProviderConfig) -> Result<Self> {
        let path = if config.base_url.trim_end_matches('/').ends_with("/v1") {
            "/messages"
        } else {
            "/v1/messages"
        };
        let endpoint = Endpoint::new(
            &config,
            path,
            Auth::XApiKey,
            &[("anthropic-version", API_VERSION)],
        )?;
        Ok(Self::from_parts(config, endpoint))
    }

    /// The JSON body of one turn.
    fn body(&self, request: &ModelRequest<'_>) -> Result<Vec<u8>> {
        let (info, _) = self.config.lookup_model(request.model);
        let items = convert::items(request.messages, info.image_input);
        let prompt_tokens = convert::estimate_tokens(request, &items);
        let max_tokens = convert::clamp_output(request.max_output_tokens, &info, prompt_tokens);
        let thinking = self.thinking(request.model, &info, request.thinking, max_tokens);
        let keep_thinking_of = thinking.as_ref().map(|_| request.model);

        let mut messages = Messages::default();
        for item in &items {
            match item {
                Item::Text(text) if text.trim().is_empty() => {}
                Item::Text(text) => messages.push("user", json!({"type": "text", "text": text})),
                Item::Image(image) => messages.push(
                    "user",
                    json!({
                        "type": "image",
                        "source": {"type": "base64", "media_type": image.mime_type, "data": image.data},
                    }),
                ),
                Item::Assistant(message) => {
                    let own = message.model.provider == self.config.id;
                    let keep = Keep {
                        thinking: own
                            && keep_thinking_of.is_some_and(|model| message.model.id == model),
                        server_blocks: own,
                    };
                    for block in assistant_blocks(message, keep) {
                        messages.push("assistant", block);
                    }
                }
                Item::ToolResult(result) => {
                    let content = if result.content.is_empty() {
                        "(no output)"
                    } else {
                        result.content.as_str()
                    };
                    let mut block = json!({
                        "type": "tool_result",
                        "tool_use_id": tool_id(&result.call_id),
                        "content": content,
                    });
                    if result.is_error {
                        block["is_error"] = json!(true);
                    }
                    messages.push("user", block);
                }
            }
        }
        let messages = messages.finish();

        let mut body = json!({
            "model": request.model,
            "max_tokens": max_tokens,
            "messages": messages,
            "stream": true,
        });
        if !request.system.is_empty() {
            body["system"] = json!([{
                "type": "text",
                "text": request.system,
                "cache_control": {"type": "ephemeral"},
            }]);
        }
        if !request.tools.is_empty() {
            let tools: Vec<Value> = request
                .tools
                .iter()
                .map(|tool| {
                    json!({
                        "name": tool.name,
                        "description": tool.description,
                        "input_schema": tool.input_schema,
                    })
                })
                .collect();
            body["tools"] = Value::Array(tools);
        }
        if let Some((thinking, output_config)) = thinking {
            body["thinking"] = thinking;
            if let Some(output_config) = output_config {
                body["output_config"] = output_config;
            }
        }
        serde_json::to_vec(&body).map_err(|err| FlueError::Provider {
            provider: self.config.id.clone(),
            message: format!("cannot encode the request: {err}"),
            status: None,
            retryable: false,
            retry_after_ms: None,
            source: Some(Box::new(err)),
        })
    }

    /// `thinking` (and `output_config`) for `level`, when the model reasons and the level is
    /// not `off`.
    fn thinking(
        &self,
        model: &str,
        info: &ModelInfo,
        level: ThinkingLevel,
        max_tokens: u64,
    ) -> Option<(Value, Option<Value>)> {
        if !info.reasoning || level == ThinkingLevel::Off {
            return None;
        }
        let style = self.config.thinking_of(model).unwrap_or(Thinking::Budget);
        match style {
            Thinking::Budget => {
                let budget = match level {
                    ThinkingLevel::Off | ThinkingLevel::Minimal => 1024,
                    ThinkingLevel::Low => 2048,
                    ThinkingLevel::Medium => 8192,
                    ThinkingLevel::High => 16_384,
                    ThinkingLevel::Xhigh => 32_768,
                };
                let budget = budget.min(max_tokens.saturating_sub(MIN_ANSWER_TOKENS));
                (budget >= MIN_THINKING_BUDGET)
                    .then(|| (json!({"type": "enabled", "budget_tokens": budget}), None))
            }
            Thinking::Adaptive { xhigh } => {
                let effort = match level {
                    ThinkingLevel::Off | ThinkingLevel::Minimal | ThinkingLevel::Low => "low",
                    ThinkingLevel::Medium => "medium",
                    ThinkingLevel::Xhigh if xhigh => "xhigh",
                    ThinkingLevel::High | ThinkingLevel::Xhigh => "high",
                };
                Some((
                    json!({"type": "adaptive", "display": "summarized"}),
                    Some(json!({"effort": effort})),
                ))
            }
            Thinking::None
            | Thinking::Effort { .. }
            | Thinking::GeminiBudget { .. }
            | Thinking::GeminiLevel => None,
        }
    }
}

impl WireCodec for AnthropicMessagesWire {
    type Assembler = Assembler;

    fn body(provider: &AnthropicProvider, request: &ModelRequest<'_>) -> Result<Vec<u8>> {
        provider.body(request)
    }
}

/// Messages under construction: consecutive blocks of one role form one message.
#[derive(Debug, Default)]
struct Messages {
    messages: Vec<(&'static str, Vec<Value>)>,
}

impl Messages {
    fn push(&mut self, role: &'static str, block: Value) {
        match self.messages.last_mut() {
            Some((last_role, blocks)) if *last_role == role => blocks.push(block),
            _ => self.messages.push((role, vec![block])),
        }
    }

    /// The wire messages: starting with a user message, the last user block marked as a cache
    /// breakpoint.
    fn finish(mut self) -> Vec<Value> {
        if self
            .messages
            .first()
            .is_none_or(|(role, _)| *role != "user")
        {
            self.messages.insert(
                0,
                (
                    "user",
                    vec![json!({"type": "text", "text": "(the conversation continues)"})],
                ),
            );
        }
        if let Some(("user", blocks)) = self
            .messages
            .last_mut()
            .map(|(role, blocks)| (*role, blocks))
            && let Some(Value::Object(block)) = blocks.last_mut()
        {
            block.insert("cache_control".to_owned(), json!({"type": "ephemeral"}));
        }
        self.messages
            .into_iter()
            .map(|(role, content)| json!({"role": role, "content": content}))
            .collect()
    }
}

/// Which blocks of an earlier assistant turn go back besides its text and tool calls.
#[derive(Clone, Copy, Debug)]
struct Keep {
    /// Thinking: only to the model that wrote it (its signature is checked), thinking on.
    thinking: bool,
    /// Server tool blocks (`server_tool_use`, `web_search_tool_result`, ...): to the provider
    /// that ran them, as they came.
    server_blocks: bool,
}

/// The blocks of an assistant turn, in order, with what `keep` allows.
#[allow(
    clippy::match_same_arms,
    reason = "the known kinds are named; the wildcard covers kinds added to the enum later"
)]
fn assistant_blocks(message: &AssistantMessage, keep: Keep) -> Vec<Value> {
    message
        .content
        .iter()
        .filter_map(|part| match part {
            AssistantContent::Thinking {
                text,
                signature: Some(signature),
                ..
            } if keep.thinking => Some(json!({
                "type": "thinking",
                "thinking": text,
                "signature": signature,
            })),
            // Redacted thinking goes back verbatim, in its place among the thinking blocks.
            AssistantContent::RedactedThinking { data } if keep.thinking => Some(json!({
                "type": "redacted_thinking",
                "data": data,
            })),
            AssistantContent::Text { text } if text.is_empty() => None,
            AssistantContent::Text { text } => Some(json!({"type": "text", "text": text})),
            AssistantContent::ToolCall(call) => Some(json!({
                "type": "tool_use",
                "id": tool_id(&call.id),
                "name": call.name,
                // Unparsable arguments (kept as a string) go back as an empty object; the
                // tool result tells the model what was wrong.
                "input": if call.input.is_object() { call.input.clone() } else { json!({}) },
            })),
            AssistantContent::ProviderData { data } if keep.server_blocks => Some(data.clone()),
            // The enum is non-exhaustive: a part kind added later is not sent.
            _ => None,
        })
        .collect()
}

/// A call id as Anthropic accepts it (`[a-zA-Z0-9_-]+`); ids from other providers are mapped
/// the same way for the call and its result.
fn tool_id(id: &str) -> String {
    let mapped: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if mapped.is_empty() {
        "call".to_owned()
    } else {
        mapped
    }
}

/// A stop reason as Anthropic spells it.
fn stop_reason(reason: Option<&str>) -> StopReason {
    match reason {
        None | Some("end_turn" | "stop_sequence") => StopReason::EndTurn,
        Some("tool_use") => StopReason::ToolUse,
        Some("max_tokens") => StopReason::MaxTokens,
        Some("refusal") => StopReason::Refusal,
        Some("pause_turn") => StopReason::PauseTurn,
        Some("model_context_window_exceeded") => StopReason::ContextWindowExceeded,
        Some(other) => StopReason::Other(other.to_owned()),
    }
}

/// What a refusal's `stop_details` say: the explanation, or at least the category.
fn refusal_text(details: StopDetails) -> Option<String> {
    let explanation = details.explanation.filter(|text| !text.trim().is_empty());
    match (explanation, details.category) {
        (Some(text), Some(category)) => Some(format!("{text} (category: {category})")),
        (Some(text), None) => Some(text),
        (None, Some(category)) => Some(format!("refused (category: {category})")),
        (None, None) => None,
    }
}

/// One stream event (the `type` inside each `data:` frame).
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum StreamEvent {
    MessageStart {
        message: StartMessage,
    },
    ContentBlockStart {
        index: u64,
        /// Read as a [`BlockStart`]; kept whole for the block kinds flue does not interpret.
        content_block: Value,
    },
    ContentBlockDelta {
        index: u64,
        delta: BlockDelta,
    },
    ContentBlockStop {},
    MessageDelta {
        #[serde(default)]
        delta: MessageDeltaBody,
        #[serde(default)]
        usage: Option<WireUsage>,
    },
    MessageStop {},
    Ping {},
    Error {
        error: Value,
    },
    #[serde(other)]
    Other,
}

#[derive(Debug, Deserialize)]
struct StartMessage {
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockStart {
    Text {
        #[serde(default)]
        text: String,
    },
    Thinking {
        #[serde(default)]
        thinking: String,
        #[serde(default)]
        signature: Option<String>,
    },
    RedactedThinking {
        #[serde(default)]
        data: String,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Value,
    },
    #[serde(other)]
    Other,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockDelta {
    TextDelta {
        text: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    ThinkingDelta {
        thinking: String,
    },
    SignatureDelta {
        signature: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Debug, Default, Deserialize)]
struct MessageDeltaBody {
    #[serde(default)]
    stop_reason: Option<String>,
    /// With `refusal`: `{type, category, explanation}`.
    #[serde(default)]
    stop_details: Option<StopDetails>,
}

#[derive(Debug, Default, Deserialize)]
struct StopDetails {
    #[serde(default)]
    category: Option<String>,
    #[serde(default)]
    explanation: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
}

/// A content block being assembled.
#[derive(Debug)]
enum Block {
    Text(String),
    Thinking {
        text: String,
        signature: String,
    },
    /// Encrypted thinking, kept verbatim to go back with the turn.
    RedactedThinking(String),
    ToolUse {
        id: String,
        name: String,
        start_input: Value,
        json: String,
    },
    /// A block of a kind flue does not interpret (server tool use and results, ...), kept as
    /// it came to go back with the turn; the input JSON of a server tool use streams in
    /// `json`.
    Server {
        block: Value,
        json: String,
    },
}

/// A turn being assembled from events.
#[derive(Debug, Default)]
pub(crate) struct Assembler {
    blocks: BTreeMap<u64, Block>,
    usage: Usage,
    stop_reason: Option<String>,
    stop_details: Option<StopDetails>,
    emitted: bool,
    /// Bytes of text, thinking and tool input gathered so far (a block start counts whole).
    turn_bytes: usize,
}

impl http::Assembler for Assembler {
    async fn read(
        &mut self,
        reader: &mut EventReader,
        sink: &TurnSink,
    ) -> std::result::Result<(), Failure> {
        while let Some(event) = reader.next().await? {
            let data = event.data.trim();
            if data.is_empty() {
                continue;
            }
            let event: StreamEvent =
                serde_json::from_str(data).map_err(|err| http::malformed("event", data, &err))?;
            match event {
                StreamEvent::MessageStart { message } => {
                    if let Some(usage) = message.usage {
                        self.add_usage(&usage);
                    }
                }
                StreamEvent::ContentBlockStart {
                    index,
                    content_block,
                } => {
                    self.turn_bytes = self.turn_bytes.saturating_add(data.len());
                    let start = serde_json::from_value(content_block.clone())
                        .map_err(|err| http::malformed("content block", data, &err))?;
                    let block = match start {
                        BlockStart::Text { text } => {
                            self.show_text(&text, sink);
                            Block::Text(text)
                        }
                        BlockStart::Thinking {
                            thinking,
                            signature,
                        } => {
                            self.show_thinking(&thinking, sink);
                            Block::Thinking {
                                text: thinking,
                                signature: signature.unwrap_or_default(),
                            }
                        }
                        BlockStart::RedactedThinking { data } => Block::RedactedThinking(data),
                        BlockStart::ToolUse { id, name, input } => Block::ToolUse {
                            id,
                            name,
                            start_input: input,
                            json: String::new(),
                        },
                        BlockStart::Other => Block::Server {
                            block: content_block,
                            json: String::new(),
                        },
                    };
                    self.blocks.insert(index, block);
                    reader.check_turn_size(self.turn_bytes)?;
                }
                StreamEvent::ContentBlockDelta { index, delta } => {
                    self.delta(index, delta, sink);
                    reader.check_turn_size(self.turn_bytes)?;
                }
                StreamEvent::MessageDelta { delta, usage } => {
                    if delta.stop_reason.is_some() {
                        self.stop_reason = delta.stop_reason;
                    }
                    if delta.stop_details.is_some() {
                        self.stop_details = delta.stop_details;
                    }
                    if let Some(usage) = usage {
                        self.add_usage(&usage);
                    }
                }
                StreamEvent::MessageStop {} => return Ok(()),
                StreamEvent::Error { error } => {
                    return Err(http::reported_json(None, &error, data));
                }
                StreamEvent::ContentBlockStop {} | StreamEvent::Ping {} | StreamEvent::Other => {}
            }
        }
        Err(http::truncated())
    }

    fn emitted(&self) -> bool {
        self.emitted
    }

    fn usage(&self) -> Usage {
        self.usage
    }

    fn finish(self) -> ModelTurn {
        let mut content = Vec::new();
        for block in self.blocks.into_values() {
            match block {
                Block::Text(text) if text.is_empty() => {}
                Block::Text(text) => content.push(AssistantContent::Text { text }),
                Block::Thinking { text, signature } => content.push(AssistantContent::Thinking {
                    text,
                    signature: (!signature.is_empty()).then_some(signature),
                    id: None,
                }),
                Block::RedactedThinking(data) => {
                    content.push(AssistantContent::RedactedThinking { data });
                }
                Block::ToolUse {
                    id,
                    name,
                    start_input,
                    json,
                } => {
                    let input = if json.trim().is_empty() && start_input.is_object() {
                        start_input
                    } else {
                        convert::parse_arguments(json)
                    };
                    content.push(AssistantContent::ToolCall(ToolCall { id, name, input }));
                }
                Block::Server { mut block, json } => {
                    if let Value::Object(fields) = &mut block
                        && !json.trim().is_empty()
                    {
                        fields.insert("input".to_owned(), convert::parse_arguments(json));
                    }
                    content.push(AssistantContent::ProviderData { data: block });
                }
            }
        }
        let stop_reason = stop_reason(self.stop_reason.as_deref());
        if stop_reason == StopReason::Refusal
            && let Some(text) = self.stop_details.and_then(refusal_text)
        {
            content.push(AssistantContent::Refusal { text });
        }
        let stop_reason = convert::settle_calls(&mut content, stop_reason);
        ModelTurn {
            content,
            usage: self.usage,
            stop_reason,
        }
    }
}

impl Assembler {
    fn delta(&mut self, index: u64, delta: BlockDelta, sink: &TurnSink) {
        let Some(block) = self.blocks.get_mut(&index) else {
            return;
        };
        let n_bytes = match &delta {
            BlockDelta::TextDelta { text } => text.len(),
            BlockDelta::ThinkingDelta { thinking } => thinking.len(),
            BlockDelta::SignatureDelta { signature } => signature.len(),
            BlockDelta::InputJsonDelta { partial_json } => partial_json.len(),
            BlockDelta::Other => 0,
        };
        self.turn_bytes = self.turn_bytes.saturating_add(n_bytes);
        match (block, delta) {
            (Block::Text(text), BlockDelta::TextDelta { text: more }) => {
                sink.text_delta(&more);
                self.emitted |= !more.is_empty();
                text.push_str(&more);
            }
            (Block::Thinking { text, .. }, BlockDelta::ThinkingDelta { thinking }) => {
                sink.thinking_delta(&thinking);
                self.emitted |= !thinking.is_empty();
                text.push_str(&thinking);
            }
            (Block::Thinking { signature, .. }, BlockDelta::SignatureDelta { signature: more }) => {
                signature.push_str(&more);
            }
            (
                Block::ToolUse { json, .. } | Block::Server { json, .. },
                BlockDelta::InputJsonDelta { partial_json },
            ) => {
                json.push_str(&partial_json);
            }
            // A delta that does not fit its block (or an unknown kind) carries nothing we keep.
            _ => {}
        }
    }

    fn show_text(&mut self, text: &str, sink: &TurnSink) {
        if !text.is_empty() {
            sink.text_delta(text);
            self.emitted = true;
        }
    }

    fn show_thinking(&mut self, text: &str, sink: &TurnSink) {
        if !text.is_empty() {
            sink.thinking_delta(text);
            self.emitted = true;
        }
    }

    /// Usage fields are cumulative; the latest report of each wins.
    fn add_usage(&mut self, usage: &WireUsage) {
        if let Some(tokens) = usage.input_tokens {
            self.usage.input_tokens = tokens;
        }
        if let Some(tokens) = usage.output_tokens {
            self.usage.output_tokens = tokens;
        }
        if let Some(tokens) = usage.cache_creation_input_tokens {
            self.usage.cache_write_tokens = tokens;
        }
        if let Some(tokens) = usage.cache_read_input_tokens {
            self.usage.cache_read_tokens = tokens;
        }
    }
}
