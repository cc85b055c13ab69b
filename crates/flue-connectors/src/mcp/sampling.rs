//! Sampling: an MCP server asks the client's model for a completion. Off unless a server is
//! given an [`McpSampler`]; flue-host's runs it with the agent's own model.

use flue_core::BoxFuture;
use serde_json::Value;

/// One completion a server asks for, as text.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct SamplingRequest {
    /// The server that asks.
    pub server: String,
    /// The server's system prompt, if any.
    pub system_prompt: Option<String>,
    /// The conversation, oldest first: `(is_user, text)`; images and audio become placeholders.
    pub messages: Vec<(bool, String)>,
    /// The most tokens the answer may have.
    pub max_tokens: u32,
}

/// The completion.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct SamplingResponse {
    /// The model's text.
    pub text: String,
    /// The model that answered (`provider/model`).
    pub model: String,
    /// Whether the answer stopped at the token limit.
    pub hit_max_tokens: bool,
}

impl SamplingResponse {
    /// A finished answer of `model`.
    pub fn new(text: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            model: model.into(),
            hit_max_tokens: false,
        }
    }

    /// Marks the answer as cut at the token limit.
    #[must_use]
    pub fn with_hit_max_tokens(mut self) -> Self {
        self.hit_max_tokens = true;
        self
    }
}

/// Who answers a server's sampling requests; called once per request while the tool call
/// that caused it waits. An error is sent to the server as a JSON-RPC error.
pub trait McpSampler: Send + Sync + 'static {
    /// Completes `request`.
    fn sample<'a>(
        &'a self,
        request: &'a SamplingRequest,
    ) -> BoxFuture<'a, Result<SamplingResponse, String>>;
}

/// The text of one sampling message's content (a block or a list of blocks).
pub(crate) fn content_text(content: &Value) -> String {
    let blocks: Vec<&Value> = match content {
        Value::Array(blocks) => blocks.iter().collect(),
        block => vec![block],
    };
    blocks
        .iter()
        .map(|block| match block.get("type").and_then(Value::as_str) {
            Some("text") => block
                .get("text")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            Some(kind) => format!("[{kind} content]"),
            None => String::new(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}
