//! Sampling: an MCP server asks the client's model for a completion. Off unless a server is
//! given an [`McpSampler`]; flue-host's runs it with the agent's own model.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;

use flue_core::{BoxFuture, ToolContext};
use serde_json::Value;

/// One completion a server asks for, as text.
#[derive(Clone, Debug)]
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
    /// The tool call of this server that was running when the request came (the latest one
    /// when several run at once): the sampler adds its usage to
    /// [`ToolContext::usage`], so the operation counts it, and names its session. `None`
    /// when the server asked between calls.
    pub caller: Option<ToolContext>,
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

/// Who approves a sampling request whose permission (`mcp__<server>__sampling`) is
/// `always_ask`: a person at a terminal, `--yes`, or an application. Called while the tool call
/// that caused the request waits; nothing reaches the model before it says yes.
pub trait McpSamplingApprover: Send + Sync + 'static {
    /// `Ok(())` lets the request run; `Err(reason)` refuses it, and the server gets `reason`.
    fn approve<'a>(&'a self, request: &'a SamplingRequest) -> BoxFuture<'a, Result<(), String>>;
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

/// The tool calls running on one connection, newest last: a server's sampling request is
/// attributed to the newest (MCP does not say which call a server-initiated request serves
/// on every transport).
///
/// It also keeps the calls' idle clock: the number of the server's questions waiting for a
/// person, and a tick that moves whenever one starts or ends (or progress arrives, when the
/// server's settings say so), which restarts the calls' timeouts.
#[derive(Clone)]
pub(crate) struct RunningCalls {
    calls: Arc<Mutex<Vec<(u64, ToolContext)>>>,
    next_id: Arc<Mutex<u64>>,
    questions: Arc<AtomicUsize>,
    activity: Arc<watch::Sender<u64>>,
}

impl Default for RunningCalls {
    fn default() -> Self {
        Self {
            calls: Arc::default(),
            next_id: Arc::default(),
            questions: Arc::default(),
            activity: Arc::new(watch::channel(0).0),
        }
    }
}

/// A question of the server waiting for an answer; the calls' clocks stand still until it
/// drops.
pub(crate) struct Asking {
    calls: RunningCalls,
}

impl Drop for Asking {
    fn drop(&mut self) {
        self.calls.questions.fetch_sub(1, Ordering::AcqRel);
        self.calls.touch();
    }
}

/// Removes its call from [`RunningCalls`] when dropped (the call ended or was abandoned).
pub(crate) struct RunningCall {
    calls: RunningCalls,
    id: u64,
}

impl RunningCalls {
    /// Registers a call with `ctx` until the guard drops.
    pub(crate) fn start(&self, ctx: &ToolContext) -> RunningCall {
        let id = {
            let mut next_id = self.next_id.lock().unwrap_or_else(PoisonError::into_inner);
            *next_id += 1;
            *next_id
        };
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((id, ctx.clone()));
        RunningCall {
            calls: self.clone(),
            id,
        }
    }

    /// Marks a question waiting until the guard drops.
    pub(crate) fn question(&self) -> Asking {
        self.questions.fetch_add(1, Ordering::AcqRel);
        self.touch();
        Asking {
            calls: self.clone(),
        }
    }

    /// Restarts the running calls' timeouts.
    pub(crate) fn touch(&self) {
        self.activity.send_modify(|tick| *tick += 1);
    }

    /// Returns when `timeout` passed without activity and with no question waiting.
    pub(crate) async fn idle_for(&self, timeout: std::time::Duration) {
        let mut activity = self.activity.subscribe();
        loop {
            if self.questions.load(Ordering::Acquire) > 0 {
                if activity.changed().await.is_err() {
                    return std::future::pending().await;
                }
                continue;
            }
            tokio::select! {
                () = tokio::time::sleep(timeout) => return,
                changed = activity.changed() => {
                    if changed.is_err() {
                        return std::future::pending().await;
                    }
                }
            }
        }
    }

    /// The newest running call's context.
    pub(crate) fn newest(&self) -> Option<ToolContext> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .last()
            .map(|(_, ctx)| ctx.clone())
    }
}

impl Drop for RunningCall {
    fn drop(&mut self) {
        self.calls
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|(id, _)| *id != self.id);
    }
}
