//! The vocabulary of one model operation: its options, its response and what its body gets.
//!
//! Sits below every module that runs operations (the agent loop, tasks, compaction, sessions)
//! and above the wire types, so each of them can name these without importing another.

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::config::ThinkingLevel;
use crate::error::FlueError;
use crate::event::{ErrorInfo, Outcome};
use crate::model::TurnSink;
use crate::record::{Image, ModelRef, PendingAction, Usage};
use crate::redact::Redactor;
use crate::tool::ToolDefinition;

/// Options of a model operation (`prompt`). Builder-lite: start from `default()`.
#[derive(Clone, Debug, Default)]
pub struct PromptOptions {
    /// Model specifier override for this operation.
    pub model: Option<String>,
    /// Reasoning effort override for this operation.
    pub thinking: Option<ThinkingLevel>,
    /// Extra tools for this operation.
    pub tools: Vec<ToolDefinition>,
    /// JSON Schema of a structured result: the operation then returns validated `data`.
    pub result: Option<Value>,
    /// Images attached to the user message.
    pub images: Vec<Image>,
    /// An outside cancellation signal, merged with the handle's own.
    pub cancel: Option<CancellationToken>,
    /// Role for this operation (instead of the session's default role).
    pub role: Option<String>,
}

impl PromptOptions {
    /// Sets the model override.
    #[must_use]
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Sets the thinking level override.
    #[must_use]
    pub fn with_thinking(mut self, thinking: ThinkingLevel) -> Self {
        self.thinking = Some(thinking);
        self
    }

    /// Adds a tool for this operation.
    #[must_use]
    pub fn with_tool(mut self, tool: ToolDefinition) -> Self {
        self.tools.push(tool);
        self
    }

    /// Requires a structured result matching `schema`.
    #[must_use]
    pub fn with_result(mut self, schema: Value) -> Self {
        self.result = Some(schema);
        self
    }

    /// Attaches an image.
    #[must_use]
    pub fn with_image(mut self, image: Image) -> Self {
        self.images.push(image);
        self
    }

    /// Merges an outside cancellation signal.
    #[must_use]
    pub fn with_cancel(mut self, cancel: CancellationToken) -> Self {
        self.cancel = Some(cancel);
        self
    }

    /// Runs this operation in `role`: a persona overlay for this call only.
    #[must_use]
    pub fn with_role(mut self, role: impl Into<String>) -> Self {
        self.role = Some(role.into());
        self
    }
}

/// What a model operation returns.
#[derive(Clone, Debug, PartialEq)]
pub struct PromptResponse {
    /// The final assistant text.
    pub text: String,
    /// Validated structured data, when a result schema was given.
    pub data: Option<Value>,
    /// Usage summed over every model turn of the operation.
    pub usage: Usage,
    /// The model of the operation's primary turns.
    pub model: ModelRef,
    /// Tool calls waiting for a decision: non-empty when the operation paused (its outcome is
    /// `requires_action`). Resolve them with
    /// [`Session::resolve`](crate::Session::resolve) to go on.
    pub pending_actions: Vec<PendingAction>,
}

impl PromptResponse {
    /// Whether the operation paused on pending actions.
    pub fn requires_action(&self) -> bool {
        !self.pending_actions.is_empty()
    }
}

/// How the value of a finished operation reads as an [`Outcome`] (completed unless it says
/// otherwise, as a paused prompt does).
pub(crate) trait OperationOutput {
    fn outcome(&self) -> Outcome {
        Outcome::Completed
    }
}

impl OperationOutput for PromptResponse {
    fn outcome(&self) -> Outcome {
        if self.requires_action() {
            Outcome::RequiresAction
        } else {
            Outcome::Completed
        }
    }
}

impl OperationOutput for () {}

impl OperationOutput for crate::sandbox::ShellResult {}

/// The wire shape of `err` with known secret values redacted from its message.
pub(crate) fn redacted_info(redactor: &Redactor, err: &FlueError) -> ErrorInfo {
    let mut info = err.to_info();
    redactor.redact_in_place(&mut info.message);
    info
}

/// What every operation body receives.
pub(crate) struct OperationContext {
    pub(crate) cancel: CancellationToken,
    pub(crate) sink: TurnSink,
}
