//! OpenAI Chat Completions over its streaming wire format, for OpenAI and compatible servers.
//!
//! Request: `POST {base_url}/chat/completions` with `stream: true` and
//! `stream_options.include_usage`, the system prompt as the first message, tools as
//! `function` tools, the output limit as `max_completion_tokens` (or `max_tokens` for servers
//! that want it), `reasoning_effort` from the thinking level on reasoning models, and images
//! as data URLs. Response: `data:` chunks carrying content, reasoning and tool-call deltas
//! (a call's `arguments` arrive in fragments, keyed by `index`), a `finish_reason`, a final
//! usage chunk, then `data: [DONE]`.

mod prefix;
#[cfg(test)]
mod prefix_tests;
#[cfg(test)]
mod tests;

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::{Value, json};

use flue_core::{
    AssistantContent, AssistantMessage, FlueError, Result, StopReason, ThinkingLevel, ToolCall,
    Usage,
    model::{ModelInfo, ModelRequest, ModelTurn, TurnSink},
};

use crate::convert;
use crate::http::{self, Auth, Endpoint, EventReader, Failure};
use crate::provider_config::{MaxTokensField, ProviderConfig, ReasoningParam, Thinking};
use crate::remote::{RemoteProvider, WireCodec};

use prefix::{Context, MAX_BYTES, MAX_ENTRIES, Prefix};

/// A provider speaking OpenAI Chat Completions: OpenAI itself, or any compatible server
/// (OpenRouter, Groq, DeepSeek, Together, Mistral, xAI, Ollama, vLLM, ...).
///
/// ```
/// use flue_core::ModelProvider;
/// use flue_providers::{ApiKey, OpenAiProvider, ProviderConfig};
/// let config = ProviderConfig::builtin("openai").unwrap().with_api_key(ApiKey::new("sk-..."));
/// let provider = OpenAiProvider::new(config).unwrap();
/// assert_eq!(provider.id(), "openai");
/// assert!(provider.model_info("gpt-4.1").image_input);
/// ```
pub type OpenAiProvider = RemoteProvider<ChatCompletionsWire>;

/// The OpenAI Chat Completions wire API (the codec of [`OpenAiProvider`]).
#[derive(Debug)]
pub struct ChatCompletionsWire;

impl OpenAiProvider {
    /// A provider from `config` (whose `api` is not checked). Fails on a malformed base URL or
    /// header.
    pub fn new(config: ProviderConfig) -> Result<Self> {
        let endpoint = Endpoint::new(&config, "/chat/completions", Auth::Bearer, &[])?;
        Ok(Self::from_parts(config, endpoint))
    }

    /// The JSON body of one turn: the conversation's messages go on from the prefix kept
    /// from its previous turn when there is one (the `prefix` module).
    fn body(&self, request: &ModelRequest<'_>) -> Result<Vec<u8>> {
        let (info, _) = self.config.lookup_model(request.model);
        let kept = self
            .kept
            .take(|prefix: &Prefix| prefix.continued_by(request));
        let mut prefix = match kept {
            Some(prefix) => prefix,
            None => Prefix::new(request).map_err(|err| self.encode_error(err))?,
        };
        let context = Context {
            provider: &self.config.id,
            reasoning_content_back: self.config.openai_compat.reasoning_content_back,
            image_input: info.image_input,
        };
        for record in request.messages.get(prefix.len()..).unwrap_or_default() {
            prefix
                .push(record, &context)
                .map_err(|err| self.encode_error(err))?;
        }
        let prompt_tokens =
            u64::try_from((convert::request_bytes(request) + prefix.item_bytes()) / 4)
                .unwrap_or(u64::MAX);
        let body = self.envelope(request, &info, prompt_tokens);
        let bytes = write_body(&body, &prefix).map_err(|err| self.encode_error(err))?;
        let weight = prefix.weight();
        self.kept.put(prefix, weight, MAX_ENTRIES, MAX_BYTES);
        Ok(bytes)
    }

    /// The body of one turn but its messages (`null` where they go).
    fn envelope(&self, request: &ModelRequest<'_>, info: &ModelInfo, prompt_tokens: u64) -> Value {
        let compat = self.config.openai_compat;
        let mut body = json!({
            "model": request.model,
            "messages": Value::Null,
            "stream": true,
        });
        if !compat.no_stream_options {
            body["stream_options"] = json!({"include_usage": true});
        }
        let max_tokens = convert::clamp_output(request.max_output_tokens, info, prompt_tokens);
        let field = match compat.max_tokens_field {
            MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
            MaxTokensField::MaxTokens => "max_tokens",
        };
        body[field] = json!(max_tokens);
        if !request.tools.is_empty() {
            let tools: Vec<Value> = request
                .tools
                .iter()
                .map(|tool| {
                    json!({
                        "type": "function",
                        "function": {
                            "name": tool.name,
                            "description": tool.description,
                            "parameters": tool.input_schema,
                        },
                    })
                })
                .collect();
            body["tools"] = Value::Array(tools);
        }
        if let Some(effort) = self.effort(request.model, info, request.thinking) {
            match compat.reasoning {
                ReasoningParam::Effort => body["reasoning_effort"] = json!(effort),
                ReasoningParam::OpenRouter => body["reasoning"] = json!({"effort": effort}),
                ReasoningParam::Unsupported => {}
            }
        }
        body
    }

    fn encode_error(&self, err: serde_json::Error) -> FlueError {
        FlueError::Provider {
            provider: self.config.id.clone(),
            message: format!("cannot encode the request: {err}"),
            status: None,
            retryable: false,
            retry_after_ms: None,
            source: Some(Box::new(err)),
        }
    }

    /// The `reasoning_effort` for `level`, when the model reasons.
    fn effort(&self, model: &str, info: &ModelInfo, level: ThinkingLevel) -> Option<&'static str> {
        if !info.reasoning {
            return None;
        }
        let style = self.config.thinking_of(model).unwrap_or(Thinking::Effort {
            none: false,
            minimal: false,
            xhigh: false,
        });
        let Thinking::Effort {
            none,
            minimal,
            xhigh,
        } = style
        else {
            return None;
        };
        match level {
            ThinkingLevel::Off => none.then_some("none"),
            ThinkingLevel::Minimal => Some(if minimal { "minimal" } else { "low" }),
            ThinkingLevel::Low => Some("low"),
            ThinkingLevel::Medium => Some("medium"),
            ThinkingLevel::High => Some("high"),
            ThinkingLevel::Xhigh => Some(if xhigh { "xhigh" } else { "high" }),
        }
    }
}

impl WireCodec for ChatCompletionsWire {
    type Assembler = Assembler;

    fn body(provider: &OpenAiProvider, request: &ModelRequest<'_>) -> Result<Vec<u8>> {
        provider.body(request)
    }
}

/// The body `envelope` with `prefix`'s messages in its `messages`, written as
/// `serde_json::to_vec` writes the whole value (keys in the map's own order).
fn write_body(envelope: &Value, prefix: &Prefix) -> serde_json::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(prefix.weight() + 4096);
    out.push(b'{');
    if let Value::Object(fields) = envelope {
        for (idx, (key, value)) in fields.iter().enumerate() {
            if idx > 0 {
                out.push(b',');
            }
            serde_json::to_writer(&mut out, key)?;
            out.push(b':');
            if key == "messages" {
                prefix.write_messages(&mut out)?;
            } else {
                serde_json::to_writer(&mut out, value)?;
            }
        }
    }
    out.push(b'}');
    Ok(out)
}

/// User parts as one user message: a string when all parts are text.
fn user_message(parts: Vec<Value>) -> Value {
    let all_text = parts.iter().all(|part| part["type"] == "text");
    let content = if all_text {
        let texts: Vec<&str> = parts
            .iter()
            .filter_map(|part| part["text"].as_str())
            .collect();
        Value::String(texts.join("\n\n"))
    } else {
        Value::Array(parts)
    };
    json!({"role": "user", "content": content})
}

/// The key of a stored tool call's `extra_content` (Gemini's OpenAI-compatible endpoint puts
/// its thought signature there: `{"google": {"thought_signature"}}`).
const EXTRA_CONTENT: &str = "extra_content";

/// Which reasoning of an assistant turn goes back with it.
#[derive(Clone, Copy, Debug)]
struct ReasoningBack {
    /// The thinking, as the `reasoning_content` of a turn with tool calls (DeepSeek).
    content: bool,
    /// The `reasoning_details` (OpenRouter) and tool calls' `extra_content` (Gemini) the
    /// server streamed, unchanged: the turn goes back to the provider and model that wrote it.
    details: bool,
}

/// An assistant turn on the wire, with the reasoning `back` says; refusals are not sent.
/// `None` for an empty turn.
fn assistant_message(message: &AssistantMessage, back: ReasoningBack) -> Option<Value> {
    let text = message.text();
    let mut calls: Vec<Value> = Vec::new();
    let mut details: Vec<Value> = Vec::new();
    // A call's `extra_content` is stored just before it.
    let mut extra_content: Option<&Value> = None;
    for part in &message.content {
        match part {
            AssistantContent::ToolCall(call) => {
                let mut wire = json!({
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": convert::arguments_text(call)},
                });
                if let Some(extra) = extra_content.take() {
                    wire["extra_content"] = extra.clone();
                }
                calls.push(wire);
            }
            AssistantContent::ProviderData { data } if back.details => {
                match data.get(EXTRA_CONTENT) {
                    Some(extra) => extra_content = Some(extra),
                    None => details.push(data.clone()),
                }
            }
            _ => {}
        }
    }
    if text.is_empty() && calls.is_empty() {
        return None;
    }
    let mut wire = json!({
        "role": "assistant",
        "content": if text.is_empty() { Value::Null } else { Value::String(text) },
    });
    if !details.is_empty() {
        wire["reasoning_details"] = Value::Array(details);
    }
    if !calls.is_empty() {
        wire["tool_calls"] = Value::Array(calls);
        if back.content {
            let reasoning: String = message
                .content
                .iter()
                .filter_map(|part| match part {
                    AssistantContent::Thinking { text, .. } => Some(text.as_str()),
                    _ => None,
                })
                .collect();
            if !reasoning.is_empty() {
                wire["reasoning_content"] = Value::String(reasoning);
            }
        }
    }
    Some(wire)
}

/// A `finish_reason` as OpenAI and compatible servers spell it.
fn finish_reason(reason: Option<&str>) -> StopReason {
    match reason {
        None | Some("stop" | "end_turn" | "eos") => StopReason::EndTurn,
        Some("tool_calls" | "function_call" | "tool_use") => StopReason::ToolUse,
        Some("length" | "max_tokens") => StopReason::MaxTokens,
        Some("content_filter") => StopReason::ContentFilter,
        Some("model_context_window_exceeded") => StopReason::ContextWindowExceeded,
        Some(other) => StopReason::Other(other.to_owned()),
    }
}

/// One `data:` chunk.
#[derive(Debug, Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Option<Vec<Choice>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct Choice {
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct Delta {
    /// A string, or (Mistral's reasoning models) a list of typed parts.
    #[serde(default)]
    content: Option<DeltaContent>,
    /// OpenAI: the model's refusal, streamed instead of `content`.
    #[serde(default)]
    refusal: Option<String>,
    /// DeepSeek and others.
    #[serde(default)]
    reasoning_content: Option<String>,
    /// OpenRouter.
    #[serde(default)]
    reasoning: Option<String>,
    /// OpenRouter: the reasoning as typed entries (`reasoning.text` with its signature,
    /// `reasoning.summary`, `reasoning.encrypted`), each streamed in pieces sharing an `index`.
    #[serde(default)]
    reasoning_details: Option<Vec<Value>>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum DeltaContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

/// One typed part of a list `content`: `text`, or `thinking` whose `thinking` is a list of
/// text parts (Mistral) or a string.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ContentPart {
    Text {
        #[serde(default)]
        text: String,
    },
    Thinking {
        #[serde(default)]
        thinking: Value,
    },
    #[serde(other)]
    Other,
}

impl ContentPart {
    /// The part as (thinking, text).
    fn texts(self) -> (String, String) {
        match self {
            Self::Text { text } => (String::new(), text),
            Self::Thinking { thinking } => (nested_text(&thinking), String::new()),
            Self::Other => (String::new(), String::new()),
        }
    }
}

/// The text of a string, or of a list of `{type: "text", text}` parts.
fn nested_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

#[derive(Debug, Deserialize)]
struct ToolCallDelta {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    id: Option<String>,
    /// Gemini's OpenAI-compatible endpoint: `{"google": {"thought_signature"}}`, to send back
    /// with the call.
    #[serde(default)]
    extra_content: Option<Value>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Debug, Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Debug, Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    total_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
    #[serde(default)]
    completion_tokens_details: Option<CompletionDetails>,
    /// DeepSeek's own name for cached prompt tokens.
    #[serde(default)]
    prompt_cache_hit_tokens: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
    /// OpenRouter: tokens written to the provider's prompt cache, inside `prompt_tokens`.
    #[serde(default)]
    cache_write_tokens: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct CompletionDetails {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

impl WireUsage {
    /// Usage as billed. Prompt tokens include the cached ones (OpenAI, DeepSeek, xAI) and
    /// those written to the cache (OpenRouter), which are counted apart. Completion tokens include reasoning for OpenAI and DeepSeek; xAI
    /// reports reasoning beside them (its `total_tokens` is prompt + completion + reasoning),
    /// and bills it as output, so it is added.
    fn billed(&self) -> Usage {
        let cached = self
            .prompt_tokens_details
            .as_ref()
            .and_then(|details| details.cached_tokens)
            .or(self.prompt_cache_hit_tokens)
            .unwrap_or(0)
            .min(self.prompt_tokens);
        let written = self
            .prompt_tokens_details
            .as_ref()
            .and_then(|details| details.cache_write_tokens)
            .unwrap_or(0)
            .min(self.prompt_tokens - cached);
        let reasoning = self
            .completion_tokens_details
            .as_ref()
            .and_then(|details| details.reasoning_tokens)
            .unwrap_or(0);
        let reasoning_apart = reasoning > 0
            && self.total_tokens
                == Some(
                    self.prompt_tokens
                        .saturating_add(self.completion_tokens)
                        .saturating_add(reasoning),
                );
        let output = if reasoning_apart {
            self.completion_tokens.saturating_add(reasoning)
        } else {
            self.completion_tokens
        };
        Usage {
            input_tokens: self.prompt_tokens - cached - written,
            output_tokens: output,
            cache_read_tokens: cached,
            cache_write_tokens: written,
            cost_usd: None,
        }
    }
}

/// A tool call being assembled from fragments.
#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
    extra_content: Option<Value>,
}

/// A turn being assembled from chunks.
#[derive(Debug, Default)]
pub(crate) struct Assembler {
    text: String,
    thinking: String,
    refusal: String,
    /// OpenRouter's `reasoning_details` entries, merged by `index`.
    details: Vec<Value>,
    calls: Vec<PartialCall>,
    /// Wire `index` -> position in `calls`.
    by_index: HashMap<u64, usize>,
    finish_reason: Option<String>,
    usage: Usage,
    emitted: bool,
    /// Bytes of text, thinking and tool-call arguments gathered so far.
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
            if data == "[DONE]" {
                return Ok(());
            }
            if data.is_empty() {
                continue;
            }
            let chunk: Chunk =
                serde_json::from_str(data).map_err(|err| http::malformed("chunk", data, &err))?;
            if let Some(error) = &chunk.error {
                return Err(http::reported_json(None, error, data));
            }
            if let Some(usage) = chunk.usage {
                self.usage = usage.billed();
            }
            for choice in chunk.choices.into_iter().flatten() {
                if let Some(delta) = choice.delta {
                    self.delta(delta, sink);
                    reader.check_turn_size(self.turn_bytes)?;
                }
                if let Some(reason) = choice.finish_reason {
                    self.finish_reason = Some(reason);
                }
            }
        }
        // Some servers end without `[DONE]`; a finish reason shows the turn is whole.
        if self.finish_reason.is_some() {
            return Ok(());
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
        let mut content: Vec<AssistantContent> = self
            .details
            .into_iter()
            .map(|data| AssistantContent::ProviderData { data })
            .collect();
        if !self.thinking.is_empty() {
            content.push(AssistantContent::Thinking {
                text: self.thinking,
                signature: None,
                id: None,
            });
        }
        if !self.text.is_empty() {
            content.push(AssistantContent::Text { text: self.text });
        }
        if !self.refusal.is_empty() {
            content.push(AssistantContent::Refusal {
                text: self.refusal.clone(),
            });
        }
        for (call_idx, call) in self.calls.into_iter().enumerate() {
            let id = if call.id.is_empty() {
                format!("call_{call_idx}")
            } else {
                call.id
            };
            if let Some(extra) = call.extra_content {
                content.push(AssistantContent::ProviderData {
                    data: json!({EXTRA_CONTENT: extra}),
                });
            }
            content.push(AssistantContent::ToolCall(ToolCall {
                id,
                name: call.name,
                input: convert::parse_arguments(call.arguments),
            }));
        }
        let stop_reason = if self.refusal.is_empty() {
            finish_reason(self.finish_reason.as_deref())
        } else {
            // OpenAI ends a refusal with `stop`; the refusal is what the turn is.
            StopReason::Refusal
        };
        let stop_reason = convert::settle_calls(&mut content, stop_reason);
        ModelTurn {
            content,
            usage: self.usage,
            stop_reason,
        }
    }
}

impl Assembler {
    fn delta(&mut self, delta: Delta, sink: &TurnSink) {
        for reasoning in [delta.reasoning_content, delta.reasoning] {
            self.add_thinking(reasoning.as_deref().unwrap_or_default(), sink);
        }
        match delta.content {
            Some(DeltaContent::Text(text)) => self.add_text(&text, sink),
            Some(DeltaContent::Parts(parts)) => {
                for part in parts {
                    let (thinking, text) = part.texts();
                    self.add_thinking(&thinking, sink);
                    self.add_text(&text, sink);
                }
            }
            None => {}
        }
        if let Some(refusal) = delta.refusal.filter(|text| !text.is_empty()) {
            // Not model text: it is shown as the refusal it is once the turn ends.
            self.turn_bytes = self.turn_bytes.saturating_add(refusal.len());
            self.refusal.push_str(&refusal);
        }
        for call in delta.tool_calls.into_iter().flatten() {
            self.tool_call_delta(call);
        }
        for detail in delta.reasoning_details.into_iter().flatten() {
            self.reasoning_detail(detail);
        }
    }

    /// Adds a piece of a `reasoning_details` entry: a piece with the `index` and `type` of an
    /// entry continues it (its `text` and `summary` appended, other fields set), as OpenRouter
    /// streams them; any other piece starts an entry.
    fn reasoning_detail(&mut self, detail: Value) {
        let Value::Object(piece) = detail else {
            return;
        };
        self.turn_bytes = self
            .turn_bytes
            .saturating_add(piece.values().filter_map(Value::as_str).map(str::len).sum());
        let same_entry = |entry: &&mut Value| {
            piece.get("index").is_some_and(|index| !index.is_null())
                && entry.get("index") == piece.get("index")
                && entry.get("type") == piece.get("type")
        };
        let Some(Value::Object(entry)) = self.details.iter_mut().rev().find(same_entry) else {
            self.details.push(Value::Object(piece));
            return;
        };
        for (field, value) in piece {
            match (field.as_str(), entry.get_mut(&field), &value) {
                ("text" | "summary", Some(Value::String(text)), Value::String(more)) => {
                    text.push_str(more);
                }
                (_, _, Value::Null) => {}
                _ => {
                    entry.insert(field, value);
                }
            }
        }
    }

    fn add_thinking(&mut self, reasoning: &str, sink: &TurnSink) {
        if reasoning.is_empty() {
            return;
        }
        sink.thinking_delta(reasoning);
        self.turn_bytes = self.turn_bytes.saturating_add(reasoning.len());
        self.thinking.push_str(reasoning);
        self.emitted = true;
    }

    fn add_text(&mut self, text: &str, sink: &TurnSink) {
        if text.is_empty() {
            return;
        }
        sink.text_delta(text);
        self.turn_bytes = self.turn_bytes.saturating_add(text.len());
        self.text.push_str(text);
        self.emitted = true;
    }

    /// Adds a fragment to its call: the same `index` continues a call unless it brings a
    /// different id (servers that send whole calls, all at index 0).
    fn tool_call_delta(&mut self, delta: ToolCallDelta) {
        let new_id = delta.id.filter(|id| !id.is_empty());
        let index = delta.index.unwrap_or_else(|| {
            // No index: a new id starts a call, anything else continues the last one.
            let last = self.calls.len().saturating_sub(1);
            match &new_id {
                Some(id) if self.calls.get(last).is_none_or(|call| &call.id != id) => {
                    u64::try_from(self.calls.len()).unwrap_or(u64::MAX)
                }
                _ => u64::try_from(last).unwrap_or(u64::MAX),
            }
        });
        let existing = self.by_index.get(&index).copied().filter(|&position| {
            match (&new_id, self.calls.get(position)) {
                (Some(id), Some(call)) => call.id.is_empty() || &call.id == id,
                _ => true,
            }
        });
        let position = existing.unwrap_or_else(|| {
            self.calls.push(PartialCall::default());
            let position = self.calls.len() - 1;
            self.by_index.insert(index, position);
            position
        });
        let Some(call) = self.calls.get_mut(position) else {
            return;
        };
        if let Some(id) = new_id {
            call.id = id;
        }
        if let Some(extra) = delta.extra_content.filter(|extra| !extra.is_null()) {
            call.extra_content = Some(extra);
        }
        if let Some(function) = delta.function {
            if let Some(name) = function.name.filter(|name| !name.is_empty()) {
                call.name = name;
            }
            if let Some(arguments) = function.arguments {
                self.turn_bytes = self.turn_bytes.saturating_add(arguments.len());
                call.arguments.push_str(&arguments);
            }
        }
    }
}
