//! The OpenAI Responses API over its streaming wire format, in stateless mode.
//!
//! Request: `POST {base_url}/responses` with `stream: true` and `store: false`, the system
//! prompt as `instructions`, the conversation as `input` items (user messages with
//! `input_text` and `input_image` parts, assistant text as assistant messages, tool calls as
//! `function_call` items and their answers as `function_call_output` items paired by
//! `call_id`), tools as `function` tools, the output limit as `max_output_tokens`, and on
//! reasoning models `reasoning: {effort, summary: "auto"}` with
//! `include: ["reasoning.encrypted_content"]`. Nothing is kept on OpenAI's side, so the
//! reasoning items of earlier turns go back in `input` unchanged (id, summary, encrypted
//! content), each before the items that followed it, as OpenAI requires for tool loops of
//! reasoning models.
//!
//! Response: semantic events, each a `data:` JSON object with a `type`:
//! `response.output_item.added`/`done` open and close output items (reasoning, messages,
//! function calls; the `done` item is authoritative), `response.output_text.delta`,
//! `response.refusal.delta`, `response.function_call_arguments.delta`/`done` and
//! `response.reasoning_summary_text.delta` carry their parts (and the raw
//! `response.reasoning_text.delta`/`done` of servers of open-weight models, whose reasoning
//! items go back whole, raw text included), and one terminal event ends the turn:
//! `response.completed` (with usage), `response.incomplete` (with its reason) or
//! `response.failed` (with its error). An `error` event reports a failure mid-stream.

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Value, json};

use flue_core::{
    AssistantContent, AssistantMessage, FlueError, Result, StopReason, ThinkingLevel, ToolCall,
    Usage,
    model::{ModelRequest, ModelTurn, TurnSink},
};

use crate::convert::{self, Item};
use crate::http::{self, Auth, Endpoint, EventReader, Failure};
use crate::provider_config::{ProviderConfig, Thinking};
use crate::remote::{RemoteProvider, WireCodec};

/// A provider speaking the OpenAI Responses API (`POST {base_url}/responses`), statelessly.
///
/// ```
/// use flue_core::ModelProvider;
/// use flue_providers::{ApiKey, OpenAiResponsesProvider, ProviderConfig, WireApi};
/// let config = ProviderConfig::new("oai", WireApi::OpenAiResponses, "https://api.openai.com/v1")
///     .with_api_key(ApiKey::new("sk-..."));
/// let provider = OpenAiResponsesProvider::new(config).unwrap();
/// assert_eq!(provider.id(), "oai");
/// ```
pub type OpenAiResponsesProvider = RemoteProvider<ResponsesWire>;

/// The OpenAI Responses wire API (the codec of [`OpenAiResponsesProvider`]).
#[derive(Debug)]
pub struct ResponsesWire;

impl OpenAiResponsesProvider {
    /// A provider from `config` (whose `api` is not checked). Fails on a malformed base URL or
    /// header.
    pub fn new(config: ProviderConfig) -> Result<Self> {
        let endpoint = Endpoint::new(&config, "/responses", Auth::Bearer, &[])?;
        Ok(Self::from_parts(config, endpoint))
    }

    /// The JSON body of one turn.
    pub(crate) fn body(&self, request: &ModelRequest<'_>) -> Result<Vec<u8>> {
        let (info, _) = self.config.lookup_model(request.model);
        let items = convert::items(request.messages, info.image_input);
        // Reasoning items go back only to the model that wrote them, and only when it reasons.
        let keeps_reasoning = |message: &AssistantMessage| {
            info.reasoning
                && message.model.provider == self.config.id
                && message.model.id == request.model
        };
        let input = input_items(&items, keeps_reasoning);
        let mut body = json!({
            "model": request.model,
            "input": input,
            "stream": true,
            "store": false,
        });
        if !request.system.is_empty() {
            body["instructions"] = json!(request.system);
        }
        let prompt_tokens = convert::estimate_tokens(request, &items);
        body["max_output_tokens"] = json!(convert::clamp_output(
            request.max_output_tokens,
            &info,
            prompt_tokens
        ));
        if !request.tools.is_empty() {
            let tools: Vec<Value> = request
                .tools
                .iter()
                .map(|tool| {
                    // `strict` defaults to true on this API, which only accepts schemas of
                    // its strict subset; tool schemas here are ordinary JSON Schema.
                    json!({
                        "type": "function",
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.input_schema,
                        "strict": false,
                    })
                })
                .collect();
            body["tools"] = Value::Array(tools);
        }
        if info.reasoning {
            // Stateless reasoning: the encrypted reasoning comes back so it can be sent again.
            body["include"] = json!(["reasoning.encrypted_content"]);
            let mut reasoning = json!({"summary": "auto"});
            if let Some(effort) = self.effort(request.model, request.thinking) {
                reasoning["effort"] = json!(effort);
            }
            body["reasoning"] = reasoning;
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

    /// The reasoning effort for `level` (the model reasons).
    fn effort(&self, model: &str, level: ThinkingLevel) -> Option<&'static str> {
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

impl WireCodec for ResponsesWire {
    type Assembler = Assembler;

    fn body(provider: &OpenAiResponsesProvider, request: &ModelRequest<'_>) -> Result<Vec<u8>> {
        provider.body(request)
    }
}

/// The conversation as `input` items; `keeps_reasoning` says which assistant turns send
/// their reasoning items back.
fn input_items(
    items: &[Item<'_>],
    keeps_reasoning: impl Fn(&AssistantMessage) -> bool,
) -> Vec<Value> {
    let mut input = Vec::with_capacity(items.len());
    let mut user_parts: Vec<Value> = Vec::new();
    for item in items {
        match item {
            Item::Text(text) => user_parts.push(json!({"type": "input_text", "text": text})),
            Item::Image(image) => user_parts.push(json!({
                "type": "input_image",
                "image_url": format!("data:{};base64,{}", image.mime_type, image.data),
                "detail": "auto",
            })),
            Item::Assistant(message) => {
                flush_user(&mut input, &mut user_parts);
                assistant_items(message, keeps_reasoning(message), &mut input);
            }
            Item::ToolResult(result) => {
                flush_user(&mut input, &mut user_parts);
                input.push(json!({
                    "type": "function_call_output",
                    "call_id": result.call_id,
                    "output": result.content,
                }));
            }
        }
    }
    flush_user(&mut input, &mut user_parts);
    input
}

/// Appends the pending user parts as one user message.
fn flush_user(input: &mut Vec<Value>, parts: &mut Vec<Value>) {
    if parts.is_empty() {
        return;
    }
    input.push(json!({
        "type": "message",
        "role": "user",
        "content": Value::Array(std::mem::take(parts)),
    }));
}

/// An assistant turn as items, in the order the model produced them: reasoning items as they
/// came when `keep_reasoning` (only those this API made, which carry an id), text as assistant
/// messages, tool calls as `function_call` items.
#[allow(
    clippy::match_same_arms,
    reason = "the known kinds are named; the wildcard covers kinds added to the enum later"
)]
fn assistant_items(message: &AssistantMessage, keep_reasoning: bool, input: &mut Vec<Value>) {
    for part in &message.content {
        match part {
            AssistantContent::Thinking {
                text,
                signature,
                id: Some(id),
            } if keep_reasoning => {
                // The summary goes back as the text it was stored as: one part (several parts
                // were joined into it); the encrypted content carries the reasoning itself.
                let summary: Vec<Value> = if text.is_empty() {
                    Vec::new()
                } else {
                    vec![json!({"type": "summary_text", "text": text})]
                };
                let mut item = json!({"type": "reasoning", "id": id, "summary": summary});
                if let Some(encrypted) = signature {
                    item["encrypted_content"] = json!(encrypted);
                }
                input.push(item);
            }
            // Reasoning of another model or provider, or of a turn that kept no item id:
            // nothing this model could verify.
            AssistantContent::Thinking { .. } => {}
            AssistantContent::Text { text } | AssistantContent::Refusal { text }
                if !text.is_empty() =>
            {
                input.push(json!({
                    "type": "message",
                    "role": "assistant",
                    "content": text,
                }));
            }
            AssistantContent::ToolCall(call) => input.push(json!({
                "type": "function_call",
                "call_id": call.id,
                "name": call.name,
                "arguments": convert::arguments_text(call),
            })),
            // A reasoning item with raw reasoning, kept whole.
            AssistantContent::ProviderData { data }
                if keep_reasoning && data["type"] == "reasoning" =>
            {
                input.push(data.clone());
            }
            // Anthropic's redacted thinking means nothing here.
            AssistantContent::RedactedThinking { .. } => {}
            // The enum is non-exhaustive: a part kind added later is not sent.
            _ => {}
        }
    }
}

/// Joins the summary parts of one reasoning item in its stored text.
const SUMMARY_SEPARATOR: &str = "\n\n";

/// One event of the stream; the fields each type uses.
#[derive(Debug, Deserialize)]
struct Event {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    output_index: Option<u64>,
    #[serde(default)]
    summary_index: Option<u64>,
    #[serde(default)]
    delta: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
    /// `response.reasoning_text.done`: the whole raw reasoning of the part.
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    item: Option<WireItem>,
    #[serde(default)]
    response: Option<WireResponse>,
    /// `error` events: the documented shape puts `code` and `message` at the top level; some
    /// servers nest them in `error`.
    #[serde(default)]
    code: Option<Value>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    error: Option<Value>,
}

/// An output item, as `output_item.added` / `done` carry it.
#[derive(Debug, Default, Deserialize)]
struct WireItem {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    id: Option<String>,
    /// function_call
    #[serde(default)]
    call_id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
    /// reasoning
    #[serde(default)]
    encrypted_content: Option<String>,
    #[serde(default)]
    summary: Option<Vec<WirePart>>,
    /// message
    #[serde(default)]
    content: Option<Vec<WirePart>>,
}

/// A part of a message or of a reasoning summary.
#[derive(Debug, Deserialize)]
struct WirePart {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
}

/// The response object of the terminal events.
#[derive(Debug, Default, Deserialize)]
struct WireResponse {
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    incomplete_details: Option<IncompleteDetails>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct IncompleteDetails {
    #[serde(default)]
    reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: u64,
    /// Includes reasoning tokens, as billed.
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    input_tokens_details: Option<InputDetails>,
}

#[derive(Debug, Deserialize)]
struct InputDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
    /// Tokens written to the prompt cache (Amazon Bedrock's and GitHub Copilot's Responses
    /// endpoints), counted inside `input_tokens` like the cached ones.
    #[serde(default)]
    cache_write_tokens: Option<u64>,
}

/// An output item being assembled.
#[derive(Debug)]
enum Output {
    Reasoning {
        id: Option<String>,
        /// Summary parts by `summary_index`.
        summary: BTreeMap<u64, String>,
        /// The raw reasoning (`reasoning_text` parts), which servers of open-weight models
        /// stream where OpenAI streams only summaries.
        raw: String,
        encrypted: Option<String>,
    },
    Message {
        text: String,
        refusal: String,
    },
    Call {
        call_id: String,
        name: String,
        arguments: String,
    },
    /// An item of a kind this crate does not run (hosted tools and the like).
    Other,
}

impl Output {
    fn opened(item: &WireItem) -> Self {
        match item.kind.as_str() {
            "reasoning" => Self::Reasoning {
                id: item.id.clone(),
                summary: BTreeMap::new(),
                raw: String::new(),
                encrypted: item.encrypted_content.clone(),
            },
            "message" => Self::Message {
                text: String::new(),
                refusal: String::new(),
            },
            "function_call" => Self::Call {
                call_id: item.call_id.clone().unwrap_or_default(),
                name: item.name.clone().unwrap_or_default(),
                arguments: item.arguments.clone().unwrap_or_default(),
            },
            _ => Self::Other,
        }
    }

    /// Takes what the finished item says over what the deltas built. Returns the text and the
    /// thinking the finished item holds that no delta showed (servers that send whole items).
    fn close(&mut self, item: WireItem) -> (String, String) {
        let mut unseen = (String::new(), String::new());
        match self {
            Self::Reasoning {
                id,
                summary,
                raw,
                encrypted,
            } => {
                if item.id.is_some() {
                    *id = item.id;
                }
                let done_raw: String = item
                    .content
                    .iter()
                    .flatten()
                    .filter(|part| part.kind == "reasoning_text")
                    .filter_map(|part| part.text.as_deref())
                    .collect();
                if !done_raw.is_empty() {
                    unseen.1 = rest_of(&done_raw, raw);
                    *raw = done_raw;
                }
                // The finished item's encrypted content is the one to send back.
                if item.encrypted_content.is_some() {
                    *encrypted = item.encrypted_content;
                }
                if let Some(parts) = item.summary {
                    let parts: BTreeMap<u64, String> = parts
                        .into_iter()
                        .filter_map(|part| part.text)
                        .enumerate()
                        .map(|(idx, text)| (u64::try_from(idx).unwrap_or(u64::MAX), text))
                        .collect();
                    if !parts.is_empty() {
                        let join = |parts: &BTreeMap<u64, String>| {
                            parts
                                .values()
                                .cloned()
                                .collect::<Vec<_>>()
                                .join(SUMMARY_SEPARATOR)
                        };
                        unseen.1.push_str(&rest_of(&join(&parts), &join(summary)));
                        *summary = parts;
                    }
                }
            }
            Self::Message { text, refusal } => {
                let mut done_text = String::new();
                let mut done_refusal = String::new();
                for part in item.content.into_iter().flatten() {
                    match part.kind.as_str() {
                        "output_text" => done_text.push_str(part.text.as_deref().unwrap_or("")),
                        "refusal" => done_refusal.push_str(part.refusal.as_deref().unwrap_or("")),
                        _ => {}
                    }
                }
                if !done_text.is_empty() {
                    unseen.0 = rest_of(&done_text, text);
                    *text = done_text;
                }
                if !done_refusal.is_empty() {
                    *refusal = done_refusal;
                }
            }
            Self::Call {
                call_id,
                name,
                arguments,
            } => {
                if let Some(id) = item.call_id.filter(|id| !id.is_empty()) {
                    *call_id = id;
                }
                if let Some(done_name) = item.name.filter(|name| !name.is_empty()) {
                    *name = done_name;
                }
                if let Some(done) = item.arguments {
                    *arguments = done;
                }
            }
            Self::Other => {}
        }
        unseen
    }
}

/// A message item opened by its first delta (a server that skipped `output_item.added`).
fn empty_message() -> Output {
    Output::Message {
        text: String::new(),
        refusal: String::new(),
    }
}

/// What `done` holds beyond `shown`, when it continues it (else nothing: what was shown
/// stays as it was).
fn rest_of(done: &str, shown: &str) -> String {
    done.strip_prefix(shown).unwrap_or_default().to_owned()
}

/// How the turn ended.
#[derive(Debug)]
enum End {
    Completed,
    Incomplete(Option<String>),
}

/// A turn being assembled from events.
#[derive(Debug, Default)]
pub(crate) struct Assembler {
    /// Output items by `output_index`.
    outputs: BTreeMap<u64, Output>,
    end: Option<End>,
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
        while let Some(frame) = reader.next().await? {
            let data = frame.data.trim();
            if data.is_empty() || data == "[DONE]" {
                continue;
            }
            let event: Event =
                serde_json::from_str(data).map_err(|err| http::malformed("event", data, &err))?;
            self.event(event, data, sink)?;
            reader.check_turn_size(self.turn_bytes)?;
            if self.end.is_some() {
                return Ok(());
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
        let mut has_calls = false;
        let mut has_refusal = false;
        for output in self.outputs.into_values() {
            match output {
                Output::Reasoning {
                    id,
                    summary,
                    raw,
                    encrypted,
                } => {
                    let text = summary
                        .into_values()
                        .collect::<Vec<_>>()
                        .join(SUMMARY_SEPARATOR);
                    if !raw.is_empty() {
                        content.extend(raw_reasoning(id, &text, raw, encrypted));
                    } else if id.is_some() || encrypted.is_some() || !text.is_empty() {
                        content.push(AssistantContent::Thinking {
                            text,
                            signature: encrypted,
                            id,
                        });
                    }
                }
                Output::Message { text, refusal } => {
                    if !text.is_empty() {
                        content.push(AssistantContent::Text { text });
                    }
                    if !refusal.is_empty() {
                        has_refusal = true;
                        content.push(AssistantContent::Refusal { text: refusal });
                    }
                }
                Output::Call {
                    call_id,
                    name,
                    arguments,
                } => {
                    has_calls = true;
                    let idx = content.len();
                    content.push(AssistantContent::ToolCall(ToolCall {
                        id: if call_id.is_empty() {
                            format!("call_{idx}")
                        } else {
                            call_id
                        },
                        name,
                        input: convert::parse_arguments(arguments),
                    }));
                }
                Output::Other => {}
            }
        }
        let stop_reason = match self.end {
            Some(End::Incomplete(reason)) => match reason.as_deref() {
                Some("max_output_tokens") => StopReason::MaxTokens,
                Some("content_filter") => StopReason::ContentFilter,
                Some(other) => StopReason::Other(other.to_owned()),
                None => StopReason::Other("incomplete".to_owned()),
            },
            _ if has_calls => StopReason::ToolUse,
            _ if has_refusal => StopReason::Refusal,
            _ => StopReason::EndTurn,
        };
        ModelTurn {
            content,
            usage: self.usage,
            stop_reason,
        }
    }
}

impl Assembler {
    fn event(
        &mut self,
        event: Event,
        data: &str,
        sink: &TurnSink,
    ) -> std::result::Result<(), Failure> {
        let index = event.output_index.unwrap_or(0);
        match event.kind.as_str() {
            "response.output_item.added" => {
                if let Some(item) = &event.item {
                    self.outputs.insert(index, Output::opened(item));
                }
            }
            "response.output_item.done" => {
                if let Some(item) = event.item {
                    let (text, thinking) = self
                        .outputs
                        .entry(index)
                        .or_insert_with(|| Output::opened(&item))
                        .close(item);
                    if !thinking.is_empty() {
                        sink.thinking_delta(&thinking);
                        self.emitted = true;
                    }
                    if !text.is_empty() {
                        sink.text_delta(&text);
                        self.emitted = true;
                    }
                    self.turn_bytes = self
                        .turn_bytes
                        .saturating_add(text.len())
                        .saturating_add(thinking.len());
                }
            }
            "response.output_text.delta" => {
                let delta = event.delta.unwrap_or_default();
                if let Output::Message { text, .. } =
                    self.outputs.entry(index).or_insert_with(empty_message)
                    && !delta.is_empty()
                {
                    text.push_str(&delta);
                    sink.text_delta(&delta);
                    self.turn_bytes = self.turn_bytes.saturating_add(delta.len());
                    self.emitted = true;
                }
            }
            "response.refusal.delta" => {
                let delta = event.delta.unwrap_or_default();
                if let Output::Message { refusal, .. } =
                    self.outputs.entry(index).or_insert_with(empty_message)
                {
                    self.turn_bytes = self.turn_bytes.saturating_add(delta.len());
                    refusal.push_str(&delta);
                }
            }
            "response.function_call_arguments.delta" => {
                let delta = event.delta.unwrap_or_default();
                if let Some(Output::Call { arguments, .. }) = self.outputs.get_mut(&index) {
                    self.turn_bytes = self.turn_bytes.saturating_add(delta.len());
                    arguments.push_str(&delta);
                }
            }
            "response.function_call_arguments.done" => {
                if let (Some(Output::Call { arguments, .. }), Some(done)) =
                    (self.outputs.get_mut(&index), event.arguments)
                {
                    *arguments = done;
                }
            }
            "response.reasoning_text.delta" => {
                let delta = event.delta.unwrap_or_default();
                if let Some(Output::Reasoning { raw, .. }) = self.outputs.get_mut(&index)
                    && !delta.is_empty()
                {
                    raw.push_str(&delta);
                    sink.thinking_delta(&delta);
                    self.turn_bytes = self.turn_bytes.saturating_add(delta.len());
                    self.emitted = true;
                }
            }
            "response.reasoning_text.done" => {
                if let (Some(Output::Reasoning { raw, .. }), Some(done)) =
                    (self.outputs.get_mut(&index), event.text)
                {
                    let unseen = rest_of(&done, raw);
                    if !unseen.is_empty() {
                        sink.thinking_delta(&unseen);
                        self.emitted = true;
                    }
                    self.turn_bytes = self.turn_bytes.saturating_add(unseen.len());
                    *raw = done;
                }
            }
            "response.reasoning_summary_text.delta" => {
                let delta = event.delta.unwrap_or_default();
                if let Some(Output::Reasoning { summary, .. }) = self.outputs.get_mut(&index)
                    && !delta.is_empty()
                {
                    let part_index = event.summary_index.unwrap_or(0);
                    // A new summary part starts a paragraph of its own, on screen as stored.
                    if !summary.contains_key(&part_index) && !summary.is_empty() {
                        sink.thinking_delta(SUMMARY_SEPARATOR);
                    }
                    summary.entry(part_index).or_default().push_str(&delta);
                    sink.thinking_delta(&delta);
                    self.turn_bytes = self.turn_bytes.saturating_add(delta.len());
                    self.emitted = true;
                }
            }
            "response.completed" => {
                self.take_usage(event.response.as_ref());
                self.end = Some(End::Completed);
            }
            "response.incomplete" => {
                self.take_usage(event.response.as_ref());
                let reason = event
                    .response
                    .and_then(|response| response.incomplete_details)
                    .and_then(|details| details.reason);
                self.end = Some(End::Incomplete(reason));
            }
            "response.failed" => {
                self.take_usage(event.response.as_ref());
                let error = event
                    .response
                    .and_then(|response| response.error)
                    .unwrap_or(Value::Null);
                return Err(reported(&error, data));
            }
            "error" => {
                let error = match event.error {
                    Some(error) if error.is_object() => error,
                    _ => json!({"code": event.code, "message": event.message}),
                };
                return Err(reported(&error, data));
            }
            // `response.created`, `in_progress`, content part and `done` events of text,
            // keep-alives, hosted tools, events added later: nothing to keep.
            _ => {}
        }
        Ok(())
    }

    fn take_usage(&mut self, response: Option<&WireResponse>) {
        let Some(usage) = response.and_then(|response| response.usage.as_ref()) else {
            return;
        };
        let details = usage.input_tokens_details.as_ref();
        let cached = details
            .and_then(|details| details.cached_tokens)
            .unwrap_or(0);
        let written = details
            .and_then(|details| details.cache_write_tokens)
            .unwrap_or(0);
        self.usage = Usage {
            input_tokens: usage
                .input_tokens
                .saturating_sub(cached)
                .saturating_sub(written),
            output_tokens: usage.output_tokens,
            cache_read_tokens: cached,
            cache_write_tokens: written,
            cost_usd: None,
        };
    }
}

/// A reasoning item with raw reasoning text: the text shown and stored as thinking (its summary
/// first, when it had one), and the item itself (id, summary, `reasoning_text` content,
/// encrypted content) kept to go back in `input` as it came, since a summary-only thinking
/// part could not say which of the two its text was.
fn raw_reasoning(
    id: Option<String>,
    summary: &str,
    raw: String,
    encrypted: Option<String>,
) -> [AssistantContent; 2] {
    let mut item = json!({
        "type": "reasoning",
        "summary": if summary.is_empty() {
            json!([])
        } else {
            json!([{"type": "summary_text", "text": summary}])
        },
        "content": [{"type": "reasoning_text", "text": raw}],
    });
    if let Some(id) = id {
        item["id"] = json!(id);
    }
    if let Some(encrypted) = encrypted {
        item["encrypted_content"] = json!(encrypted);
    }
    let text = if summary.is_empty() {
        raw
    } else {
        format!("{summary}{SUMMARY_SEPARATOR}{raw}")
    };
    [
        AssistantContent::Thinking {
            text,
            signature: None,
            id: None,
        },
        AssistantContent::ProviderData { data: item },
    ]
}

/// An error object of an `error` event or a failed response.
fn reported(error: &Value, data: &str) -> Failure {
    let error = if error.is_null() {
        &json!({"message": "the response failed without an error message"})
    } else {
        error
    };
    http::reported_json(None, error, data)
}
