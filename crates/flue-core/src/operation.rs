//! The vocabulary of one model operation: its options (the [`CallOptions`] that `prompt`,
//! `skill` and `task` share, and what each adds), its response and what its body gets.
//!
//! Sits below every module that runs operations (the agent loop, tasks, compaction, sessions)
//! and above the wire types, so each of them can name these without importing another.

use std::collections::BTreeMap;

use flue_protocol::ThinkingLevel;
use flue_protocol::event::{ErrorInfo, Outcome};
use flue_protocol::record::{Image, ModelRef, PendingAction, Usage, UserContent, UserMessage};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::Span;

use crate::error::{FlueError, Result};
use crate::model::TurnSink;
use crate::redact::Redactor;
use crate::spans;
use crate::tool::ToolDefinition;

/// Options of a model call, shared by `prompt`, `skill` and `task`. Builder-lite: start from
/// `default()`.
///
/// The three calls take the same options and differ only in what `Extra` adds:
/// [`PromptOptions`] adds nothing, [`SkillOptions`] the skill's arguments ([`SkillExtra`]) and
/// [`TaskOptions`] the subagent and working directory ([`TaskExtra`]). An option every call
/// takes is a field and a setter here, once.
///
/// ```
/// use flue_core::{PromptOptions, SkillOptions, TaskOptions, ThinkingLevel};
/// use serde_json::json;
///
/// let prompt = PromptOptions::default()
///     .with_model("anthropic/claude-sonnet-4-6")
///     .with_thinking(ThinkingLevel::High);
/// let skill = SkillOptions::default()
///     .with_arg("file", json!("src/lib.rs"))
///     .with_role("reviewer");
/// let task = TaskOptions::default().with_agent("security").with_role("reviewer");
/// assert_eq!(prompt.thinking, Some(ThinkingLevel::High));
/// assert_eq!(skill.role, task.role);
/// assert_eq!(task.extra.agent.as_deref(), Some("security"));
/// ```
#[derive(Clone, Debug, Default)]
pub struct CallOptions<Extra = ()> {
    /// Model specifier override for this call (precedence: the call's, the role's, the
    /// agent's).
    pub model: Option<String>,
    /// Reasoning effort override for this call (same precedence as `model`).
    pub thinking: Option<ThinkingLevel>,
    /// Extra tools for this call.
    pub tools: Vec<ToolDefinition>,
    /// JSON Schema of a structured result: the call then returns validated `data`.
    pub result: Option<Value>,
    /// Images attached to the call's user message (a task's first message).
    pub images: Vec<Image>,
    /// An outside cancellation signal, merged with the handle's own.
    pub cancel: Option<CancellationToken>,
    /// Role for this call, instead of the default role (the session's; a task's subagent's).
    pub role: Option<String>,
    /// What this kind of call adds: nothing for `prompt`, [`SkillExtra`] for `skill`,
    /// [`TaskExtra`] for `task`.
    pub extra: Extra,
}

/// Options of `session.prompt`: the shared [`CallOptions`] alone.
pub type PromptOptions = CallOptions;

/// Options of `session.skill`: the shared [`CallOptions`] and the skill's arguments.
pub type SkillOptions = CallOptions<SkillExtra>;

/// Options of `session.task`: the shared [`CallOptions`], the subagent and the working
/// directory.
pub type TaskOptions = CallOptions<TaskExtra>;

/// What `session.skill` adds to the shared [`CallOptions`].
#[derive(Clone, Debug, Default)]
pub struct SkillExtra {
    /// Arguments included with the skill instruction, by name.
    pub args: BTreeMap<String, Value>,
}

/// What `session.task` adds to the shared [`CallOptions`].
#[derive(Clone, Debug, Default)]
pub struct TaskExtra {
    /// Named subagent profile to run the task as (one the agent declares).
    pub agent: Option<String>,
    /// Working directory of the task inside the sandbox; a relative one resolves against the
    /// parent's (default: the parent's).
    pub cwd: Option<String>,
}

impl<Extra> CallOptions<Extra> {
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

    /// Adds a tool for this call.
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

    /// Runs this call in `role`: a persona overlay for this call only.
    #[must_use]
    pub fn with_role(mut self, role: impl Into<String>) -> Self {
        self.role = Some(role.into());
        self
    }

    /// Splits into the options every model call hands to the agent loop and what this kind
    /// of call adds.
    pub(crate) fn split(self) -> (PromptOptions, Extra) {
        let shared = CallOptions {
            model: self.model,
            thinking: self.thinking,
            tools: self.tools,
            result: self.result,
            images: self.images,
            cancel: self.cancel,
            role: self.role,
            extra: (),
        };
        (shared, self.extra)
    }
}

impl SkillOptions {
    /// Adds an argument.
    #[must_use]
    pub fn with_arg(mut self, name: impl Into<String>, value: Value) -> Self {
        self.extra.args.insert(name.into(), value);
        self
    }
}

impl TaskOptions {
    /// Runs the task as the subagent `agent`.
    #[must_use]
    pub fn with_agent(mut self, agent: impl Into<String>) -> Self {
        self.extra.agent = Some(agent.into());
        self
    }

    /// Sets the task's working directory.
    #[must_use]
    pub fn with_cwd(mut self, cwd: impl Into<String>) -> Self {
        self.extra.cwd = Some(cwd.into());
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
    /// [`Session::resolve`](crate::session::Session::resolve) to go on.
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

/// How a finished operation ends, as its end event and its span report it: its outcome, its
/// usage (for a failure, `failed_usage`: what it spent before failing), and its redacted error
/// when it failed. Records the outcome and usage on `span`.
pub(crate) fn settle<T: OperationOutput>(
    result: &Result<(T, Usage)>,
    failed_usage: Usage,
    redactor: &Redactor,
    span: &Span,
) -> (Outcome, Usage, Option<ErrorInfo>) {
    let (outcome, usage, error) = match result {
        Ok((value, usage)) => (value.outcome(), *usage, None),
        Err(FlueError::Aborted) => (Outcome::Aborted, failed_usage, None),
        Err(err) => (
            Outcome::Failed,
            failed_usage,
            Some(redacted_info(redactor, err)),
        ),
    };
    spans::record_usage(span, &usage);
    spans::record_outcome(span, outcome, error.as_ref().map(|info| info.kind.as_str()));
    (outcome, usage, error)
}

/// The user message of a model call: `text`, then the call's images.
pub(crate) fn user_message(text: String, images: &[Image]) -> UserMessage {
    let mut content = vec![UserContent::Text { text }];
    content.extend(images.iter().cloned().map(UserContent::Image));
    UserMessage { content }
}

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
    /// What a failing operation spent before it failed (its model turns, failed turns
    /// included, and tasks): set by the body, reported by [`settle`].
    pub(crate) failed_usage: std::sync::Arc<std::sync::Mutex<Usage>>,
    /// The budgets a dispatch gave its submission, over the agent's (`None`: the agent's).
    pub(crate) budget: Option<flue_protocol::Budget>,
    /// What the operation's prompt hooks spent judging (counted in its usage and budgets).
    pub(crate) hook_usage: std::sync::Arc<std::sync::Mutex<Usage>>,
    /// The model specifier the operation calls, which prompt hooks use unless they name one.
    pub(crate) model: Option<String>,
}

impl OperationContext {
    /// A context for an operation on `sink`, cancelled by `cancel`.
    pub(crate) fn new(cancel: CancellationToken, sink: TurnSink) -> Self {
        Self {
            cancel,
            sink,
            failed_usage: std::sync::Arc::default(),
            budget: None,
            hook_usage: std::sync::Arc::default(),
            model: None,
        }
    }
}
