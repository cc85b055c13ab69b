//! Google Gemini's own API (the Generative Language API) over its streaming wire format.
//!
//! Request: `POST {base_url}/models/{model}:streamGenerateContent?alt=sse` with the key in
//! `x-goog-api-key`: the system prompt as `systemInstruction`, the conversation as `contents`
//! (`user` and `model` turns of parts: text, `inlineData` images, `functionCall` with its id,
//! and the `functionResponse` answering it by name and id), tools as `functionDeclarations`
//! whose schema goes as `parametersJsonSchema` (plain JSON Schema), and `generationConfig` with
//! `maxOutputTokens` and a `thinkingConfig` from the thinking level (a token budget on Gemini
//! 2.5, a level on Gemini 3) asking for thought summaries.
//!
//! Response: `data:` chunks, each a whole `GenerateContentResponse`: the parts of the first
//! candidate (text, thought text marked `thought`, whole `functionCall`s), each possibly
//! carrying a `thoughtSignature`; cumulative `usageMetadata`; a `finishReason` on the last
//! chunk; `promptFeedback.blockReason` instead of candidates when the prompt was blocked.
//!
//! Thought signatures go back on the same parts in every later request to the model that
//! wrote them, as Gemini requires for function calling with Gemini 3. A signature is stored
//! where it came: on a thought, in its thinking part; on a function call or text, as provider
//! data `{"thoughtSignature"}` just before that part; on an empty text part (Gemini's way of
//! signing the end of a streamed answer), as that whole part.

#[cfg(test)]
mod tests;

use serde::Deserialize;
use serde_json::{Value, json};

use flue_core::{
    AssistantContent, AssistantMessage, FlueError, Result, StopReason, ThinkingLevel, ToolCall,
    ToolResult, Usage,
    model::{ModelInfo, ModelRequest, ModelTurn, TurnSink},
};

use crate::convert::{self, Item};
use crate::http::{self, Auth, Endpoint, EventReader, Failure};
use crate::provider_config::{ProviderConfig, Thinking};
use crate::remote::{RemoteProvider, WireCodec};

/// What Gemini 3 accepts in place of a thought signature on a function call it did not write
/// (history from another model), per Google's thought-signature documentation.
const FOREIGN_CALL_SIGNATURE: &str = "skip_thought_signature_validator";
/// Output tokens always left for the answer when thinking has a budget.
const MIN_ANSWER_TOKENS: u64 = 1024;

/// A provider speaking Google's Gemini API (`generativelanguage.googleapis.com`).
///
/// ```
/// use flue_core::ModelProvider;
/// use flue_providers::{ApiKey, GoogleProvider, ProviderConfig};
/// let config = ProviderConfig::builtin("google").unwrap().with_api_key(ApiKey::new("AIza..."));
/// let provider = GoogleProvider::new(config).unwrap();
/// assert_eq!(provider.model_info("gemini-2.5-flash").context_window, 1_048_576);
/// ```
pub type GoogleProvider = RemoteProvider<GeminiWire>;

/// The Gemini API (the codec of [`GoogleProvider`]).
#[derive(Debug)]
pub struct GeminiWire;

impl GoogleProvider {
    /// A provider from `config` (whose `api` is not checked). Fails on a malformed base URL or
    /// header.
    pub fn new(config: ProviderConfig) -> Result<Self> {
        let endpoint = Endpoint::new(&config, "/models", Auth::GoogApiKey, &[])?;
        Ok(Self::from_parts(config, endpoint))
    }

    /// The JSON body of one turn.
    fn body(&self, request: &ModelRequest<'_>) -> Result<Vec<u8>> {
        let (info, _) = self.config.lookup_model(request.model);
        let items = convert::items(request.messages, info.image_input);
        let mut contents = Contents::default();
        for item in &items {
            match item {
                Item::Text(text) if text.trim().is_empty() => {}
                Item::Text(text) => contents.push("user", json!({"text": text})),
                Item::Image(image) => contents.push(
                    "user",
                    json!({"inlineData": {"mimeType": image.mime_type, "data": image.data}}),
                ),
                Item::Assistant(message) => {
                    let keep = message.model.provider == self.config.id
                        && message.model.id == request.model;
                    let foreign_calls = !keep && request.model.starts_with("gemini-3");
                    for part in model_parts(message, keep, foreign_calls) {
                        contents.push("model", part);
                    }
                }
                Item::ToolResult(result) => contents.push("user", function_response(result)),
            }
        }
        let prompt_tokens = convert::estimate_tokens(request, &items);
        let max_tokens = convert::clamp_output(request.max_output_tokens, &info, prompt_tokens);
        let mut generation = json!({"maxOutputTokens": max_tokens});
        if let Some(thinking) = self.thinking(request.model, &info, request.thinking, max_tokens) {
            generation["thinkingConfig"] = thinking;
        }
        let mut body = json!({
            "contents": contents.finish(),
            "generationConfig": generation,
        });
        if !request.system.is_empty() {
            body["systemInstruction"] = json!({"parts": [{"text": request.system}]});
        }
        if !request.tools.is_empty() {
            let declarations: Vec<Value> = request
                .tools
                .iter()
                .map(|tool| {
                    json!({
                        "name": tool.name,
                        "description": tool.description,
                        "parametersJsonSchema": tool.input_schema,
                    })
                })
                .collect();
            body["tools"] = json!([{"functionDeclarations": declarations}]);
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

    /// The `thinkingConfig` for `level`, when the model reasons.
    fn thinking(
        &self,
        model: &str,
        info: &ModelInfo,
        level: ThinkingLevel,
        max_tokens: u64,
    ) -> Option<Value> {
        if !info.reasoning {
            return None;
        }
        let style = self.config.thinking_of(model);
        if level == ThinkingLevel::Off {
            // Models that cannot stop thinking think at their default, unseen.
            return match style {
                Some(Thinking::GeminiBudget {
                    can_disable: true, ..
                }) => Some(json!({"thinkingBudget": 0})),
                _ => None,
            };
        }
        let mut config = json!({"includeThoughts": true});
        match style {
            Some(Thinking::GeminiBudget { max, .. }) => {
                let budget = match level {
                    ThinkingLevel::Off | ThinkingLevel::Minimal => 1024,
                    ThinkingLevel::Low => 2048,
                    ThinkingLevel::Medium => 8192,
                    ThinkingLevel::High => 16_384,
                    ThinkingLevel::Xhigh => 32_768,
                };
                let budget = budget
                    .min(max)
                    .min(max_tokens.saturating_sub(MIN_ANSWER_TOKENS))
                    .max(128);
                config["thinkingBudget"] = json!(budget);
            }
            Some(Thinking::GeminiLevel) => {
                let level = match level {
                    ThinkingLevel::Off | ThinkingLevel::Minimal | ThinkingLevel::Low => "low",
                    ThinkingLevel::Medium | ThinkingLevel::High | ThinkingLevel::Xhigh => "high",
                };
                config["thinkingLevel"] = json!(level);
            }
            // A model described in flue.toml: its own default budget.
            _ => {}
        }
        Some(config)
    }
}

impl WireCodec for GeminiWire {
    type Assembler = Assembler;

    fn body(provider: &GoogleProvider, request: &ModelRequest<'_>) -> Result<Vec<u8>> {
        provider.body(request)
    }

    fn turn_url(provider: &GoogleProvider, model: &str) -> Result<Option<reqwest::Url>> {
        provider
            .endpoint
            .url_with(&format!("{model}:streamGenerateContent"), "alt=sse")
            .map(Some)
    }
}

/// Contents under construction: consecutive parts of one role form one content.
#[derive(Debug, Default)]
struct Contents {
    contents: Vec<(&'static str, Vec<Value>)>,
}

impl Contents {
    fn push(&mut self, role: &'static str, part: Value) {
        match self.contents.last_mut() {
            Some((last_role, parts)) if *last_role == role => parts.push(part),
            _ => self.contents.push((role, vec![part])),
        }
    }

    fn finish(self) -> Vec<Value> {
        self.contents
            .into_iter()
            .map(|(role, parts)| json!({"role": role, "parts": parts}))
            .collect()
    }
}

/// The parts of an assistant turn. With `keep` (the turn goes back to the model that wrote
/// it) thoughts with their signatures and every stored signature go back on their parts;
/// otherwise only text and calls, and with `foreign_calls` (a Gemini 3 model reading another
/// model's turn) the first call of the turn carries the signature Gemini 3 accepts instead.
#[allow(
    clippy::match_same_arms,
    reason = "the known kinds are named; the wildcard covers kinds added to the enum later"
)]
fn model_parts(message: &AssistantMessage, keep: bool, foreign_calls: bool) -> Vec<Value> {
    let mut parts = Vec::new();
    let mut signature: Option<String> = None;
    let mut signed_foreign_call = false;
    for part in &message.content {
        let mut wire = match part {
            AssistantContent::Thinking {
                text,
                signature: Some(thought_signature),
                ..
            } if keep => {
                json!({"text": text, "thought": true, "thoughtSignature": thought_signature})
            }
            AssistantContent::Thinking { .. } => continue,
            AssistantContent::ProviderData { data } if keep => {
                if data.get("text").is_some() {
                    parts.push(data.clone());
                } else if let Some(found) = data.get("thoughtSignature").and_then(Value::as_str) {
                    signature = Some(found.to_owned());
                }
                continue;
            }
            AssistantContent::Text { text } if text.is_empty() => continue,
            AssistantContent::Text { text } => json!({"text": text}),
            AssistantContent::ToolCall(call) => {
                let mut wire = json!({"functionCall": {
                    "name": call.name,
                    // Unparsable arguments (kept as a string) go back as an empty object;
                    // the tool result tells the model what was wrong.
                    "args": if call.input.is_object() { call.input.clone() } else { json!({}) },
                    "id": call.id,
                }});
                if foreign_calls && !signed_foreign_call {
                    signed_foreign_call = true;
                    wire["thoughtSignature"] = json!(FOREIGN_CALL_SIGNATURE);
                }
                wire
            }
            // Refusals and other providers' parts mean nothing here; the enum is
            // non-exhaustive: a part kind added later is not sent.
            _ => continue,
        };
        if let Some(found) = signature.take() {
            wire["thoughtSignature"] = json!(found);
        }
        parts.push(wire);
    }
    parts
}

/// A tool result as Gemini reads it: the call's name and id, the text under `output` (or
/// `error` for a failed call), as Google documents for `functionResponse`.
fn function_response(result: &ToolResult) -> Value {
    let key = if result.is_error { "error" } else { "output" };
    json!({"functionResponse": {
        "name": result.tool_name,
        "id": result.call_id,
        "response": {key: result.content},
    }})
}

/// A `finishReason` as flue reads it: the safety family is the provider's content filter.
fn finish_reason(reason: &str) -> StopReason {
    match reason {
        "STOP" => StopReason::EndTurn,
        "MAX_TOKENS" => StopReason::MaxTokens,
        "SAFETY"
        | "RECITATION"
        | "BLOCKLIST"
        | "PROHIBITED_CONTENT"
        | "SPII"
        | "IMAGE_SAFETY"
        | "IMAGE_PROHIBITED_CONTENT"
        | "IMAGE_RECITATION" => StopReason::ContentFilter,
        other => StopReason::Other(other.to_owned()),
    }
}

/// One `data:` chunk.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Chunk {
    #[serde(default)]
    candidates: Vec<Candidate>,
    #[serde(default)]
    usage_metadata: Option<WireUsage>,
    #[serde(default)]
    prompt_feedback: Option<PromptFeedback>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Candidate {
    #[serde(default)]
    content: Option<WireContent>,
    #[serde(default)]
    finish_reason: Option<String>,
    #[serde(default)]
    index: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct WireContent {
    #[serde(default)]
    parts: Vec<WirePart>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WirePart {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    thought: bool,
    #[serde(default)]
    thought_signature: Option<String>,
    #[serde(default)]
    function_call: Option<FunctionCall>,
}

#[derive(Debug, Deserialize)]
struct FunctionCall {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    args: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PromptFeedback {
    #[serde(default)]
    block_reason: Option<String>,
    #[serde(default)]
    block_reason_message: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireUsage {
    #[serde(default)]
    prompt_token_count: u64,
    #[serde(default)]
    candidates_token_count: u64,
    #[serde(default)]
    thoughts_token_count: u64,
    #[serde(default)]
    cached_content_token_count: u64,
}

impl WireUsage {
    /// Usage as billed: the prompt count includes the cached tokens, counted apart; thoughts
    /// are billed as output beside the candidates.
    fn billed(&self) -> Usage {
        let cached = self.cached_content_token_count.min(self.prompt_token_count);
        Usage {
            input_tokens: self.prompt_token_count - cached,
            output_tokens: self
                .candidates_token_count
                .saturating_add(self.thoughts_token_count),
            cache_read_tokens: cached,
            cache_write_tokens: 0,
            cost_usd: None,
        }
    }
}

/// A turn being assembled from chunks: the parts so far, and the text or thought being
/// streamed (one part arrives in pieces over several chunks).
#[derive(Debug, Default)]
pub(crate) struct Assembler {
    content: Vec<AssistantContent>,
    text: String,
    thought: String,
    finish_reason: Option<String>,
    usage: Usage,
    emitted: bool,
    /// Bytes of text, thinking and call arguments gathered so far.
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
            let chunk: Chunk =
                serde_json::from_str(data).map_err(|err| http::malformed("chunk", data, &err))?;
            if let Some(error) = &chunk.error {
                return Err(http::reported_json(None, error, data));
            }
            if let Some(usage) = &chunk.usage_metadata {
                self.usage = usage.billed();
            }
            if let Some(reason) = chunk
                .prompt_feedback
                .as_ref()
                .and_then(|feedback| feedback.block_reason.as_deref())
                && chunk.candidates.is_empty()
            {
                return Err(blocked_prompt(reason, chunk.prompt_feedback.as_ref()));
            }
            // Only the first candidate is asked for.
            for candidate in chunk.candidates {
                if candidate.index.unwrap_or(0) != 0 {
                    continue;
                }
                for part in candidate
                    .content
                    .into_iter()
                    .flat_map(|content| content.parts)
                {
                    self.part(part, sink);
                }
                if candidate.finish_reason.is_some() {
                    self.finish_reason = candidate.finish_reason;
                }
            }
            reader.check_turn_size(self.turn_bytes)?;
        }
        match self.finish_reason.as_deref() {
            None => Err(http::truncated()),
            Some("STOP") if self.is_empty() => Err(Failure::transient(
                "gemini ended its turn (finishReason STOP) without any text or function call",
            )),
            Some(_) => Ok(()),
        }
    }

    fn emitted(&self) -> bool {
        self.emitted
    }

    fn usage(&self) -> Usage {
        self.usage
    }

    fn finish(mut self) -> ModelTurn {
        self.close_thought(None);
        self.close_text(None);
        let reason = self
            .finish_reason
            .as_deref()
            .map_or(StopReason::EndTurn, finish_reason);
        let mut content = self.content;
        let stop_reason = convert::settle_calls(&mut content, reason);
        ModelTurn {
            content,
            usage: self.usage,
            stop_reason,
        }
    }
}

impl Assembler {
    fn part(&mut self, part: WirePart, sink: &TurnSink) {
        let signature = part
            .thought_signature
            .filter(|signature| !signature.is_empty());
        if let Some(call) = part.function_call {
            self.close_thought(None);
            self.close_text(None);
            if let Some(signature) = signature {
                self.content.push(signature_of_next(&signature));
            }
            let input = call.args.unwrap_or_else(|| json!({}));
            self.turn_bytes = self.turn_bytes.saturating_add(input.to_string().len());
            let n_calls = self
                .content
                .iter()
                .filter(|part| matches!(part, AssistantContent::ToolCall(_)))
                .count();
            self.content.push(AssistantContent::ToolCall(ToolCall {
                id: call
                    .id
                    .filter(|id| !id.is_empty())
                    .unwrap_or_else(|| format!("call_{n_calls}")),
                name: call.name,
                input,
            }));
            return;
        }
        let text = part.text.unwrap_or_default();
        self.turn_bytes = self.turn_bytes.saturating_add(text.len());
        if !text.is_empty() {
            if part.thought {
                sink.thinking_delta(&text);
            } else {
                sink.text_delta(&text);
            }
            self.emitted = true;
        }
        if part.thought {
            self.close_text(None);
            self.thought.push_str(&text);
            if signature.is_some() {
                self.close_thought(signature);
            }
            return;
        }
        self.close_thought(None);
        match signature {
            // A signed empty part (the end of a streamed answer): kept as the part it is.
            Some(signature) if text.is_empty() => {
                self.close_text(None);
                self.content.push(AssistantContent::ProviderData {
                    data: json!({"text": "", "thoughtSignature": signature}),
                });
            }
            signature => {
                self.text.push_str(&text);
                if signature.is_some() {
                    self.close_text(signature);
                }
            }
        }
    }

    /// Ends the thought being streamed, with the signature that closed it.
    fn close_thought(&mut self, signature: Option<String>) {
        if self.thought.is_empty() && signature.is_none() {
            return;
        }
        self.content.push(AssistantContent::Thinking {
            text: std::mem::take(&mut self.thought),
            signature,
            id: None,
        });
    }

    /// Ends the text being streamed, after the signature that closed it.
    fn close_text(&mut self, signature: Option<String>) {
        if self.text.is_empty() {
            return;
        }
        if let Some(signature) = signature {
            self.content.push(signature_of_next(&signature));
        }
        self.content.push(AssistantContent::Text {
            text: std::mem::take(&mut self.text),
        });
    }

    /// Whether no answer arrived: no text and no call (thoughts and signatures alone answer
    /// nothing).
    fn is_empty(&self) -> bool {
        self.text.is_empty()
            && !self.content.iter().any(|part| {
                matches!(
                    part,
                    AssistantContent::Text { .. } | AssistantContent::ToolCall(_)
                )
            })
    }
}

/// The stored signature of the part after it.
fn signature_of_next(signature: &str) -> AssistantContent {
    AssistantContent::ProviderData {
        data: json!({"thoughtSignature": signature}),
    }
}

/// A prompt Gemini refused to answer at all (`promptFeedback.blockReason`).
fn blocked_prompt(reason: &str, feedback: Option<&PromptFeedback>) -> Failure {
    let detail = feedback
        .and_then(|feedback| feedback.block_reason_message.as_deref())
        .map(|message| format!(": {message}"))
        .unwrap_or_default();
    Failure::fatal(format!(
        "gemini blocked the prompt (promptFeedback.blockReason {reason}){detail}; nothing was \
         answered, rephrase the message or remove what the safety filters object to"
    ))
}
