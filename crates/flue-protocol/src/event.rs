//! Events: the typed stream every operation emits while it runs.
//!
//! Wire format, like [`crate::record`]: it imports only the record types, tags every variant
//! with `type` in snake_case and never renames a field. The CLI, the HTTP server and tracing are
//! all renderers over this stream.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::record::{ActionDecision, HookRecord, ModelRef, PendingAction, StopReason, Usage};

/// One thing that happened during an operation. Grows over time: match with a wildcard.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Event {
    /// The operation started.
    OperationStart {
        /// Session name.
        session: String,
        /// What kind of operation.
        operation: OperationKind,
    },
    /// A piece of visible model text.
    TextDelta {
        /// The new text.
        text: String,
    },
    /// A piece of model reasoning.
    ThinkingDelta {
        /// The new text.
        text: String,
    },
    /// A tool call is about to run.
    ToolStart {
        /// Call id.
        call_id: String,
        /// Tool name.
        name: String,
        /// Input as the model sent it.
        input: Value,
    },
    /// A tool call finished.
    ToolEnd {
        /// Call id.
        call_id: String,
        /// Tool name.
        name: String,
        /// True when the tool failed.
        is_error: bool,
        /// What the model will see (possibly truncated for display by renderers).
        output: String,
    },
    /// A running tool emitted structured data for UI readers (`ToolContext::emit_data`). The
    /// model never sees it; it is stored with the call's tool result.
    Data {
        /// The tool call that emitted it.
        call_id: String,
        /// What the data is.
        name: String,
        /// The data.
        data: Value,
        /// The tool's id for it, when given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
    },
    /// One model turn finished and was stored.
    TurnEnd {
        /// The model of this turn.
        model: ModelRef,
        /// Usage of this turn.
        usage: Usage,
        /// Why the model stopped.
        stop_reason: StopReason,
    },
    /// A stored model turn ended without a normal end (after its `turn_end`): the model
    /// refused, was cut off (`max_tokens`, `context_window_exceeded`), was stopped by a content
    /// filter, paused, or stopped for a reason this version does not know. Unless the turn
    /// paused (and is continued) or hit `max_tokens`, the operation then fails with the
    /// matching error kind (`model_refusal`, `content_filter`, `context_window_exceeded`,
    /// `model_stopped`).
    TurnStopped {
        /// The model of this turn.
        model: ModelRef,
        /// Why the model stopped.
        stop_reason: StopReason,
        /// The model's refusal in its own words, when it refused and said why.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        refusal: Option<String>,
    },
    /// Compaction started: older history is being folded into a summary.
    CompactionStart {
        /// What triggered it.
        reason: CompactionReason,
        /// Estimated context tokens before compaction.
        estimated_tokens: u64,
    },
    /// Compaction ended. On success the summary is durable; on failure (`error` set) the
    /// session is unchanged and the counts after equal the counts before.
    CompactionEnd {
        /// Records the model saw before compaction.
        messages_before: u64,
        /// Records the model sees after compaction (the summary counts as one).
        messages_after: u64,
        /// Estimated context tokens before compaction.
        tokens_before: u64,
        /// Estimated context tokens after compaction.
        tokens_after: u64,
        /// Wall-clock duration in milliseconds.
        duration_ms: u64,
        /// Usage of the summary model calls.
        usage: Usage,
        /// Why compaction failed (including `aborted`), when it did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<ErrorInfo>,
    },
    /// A model call failed with a transient error (a dropped connection, 429, 5xx) before any
    /// output, and the provider tries it again after `delay_ms`.
    ProviderRetry {
        /// The provider id.
        provider: String,
        /// Which retry this is, from 1.
        attempt: u32,
        /// How many retries the provider makes at most.
        max_retries: u32,
        /// How long it waits before the retry, in milliseconds.
        delay_ms: u64,
        /// Why the call failed (the provider's key redacted).
        message: String,
    },
    /// A task (a detached child session) was created and is about to run.
    TaskStart {
        /// The child session, `task:<parent>:<uuid>`.
        session: String,
        /// The session that delegated.
        parent: String,
        /// The subagent profile, when one was selected.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent: Option<String>,
        /// Levels below the root session (a task of the root is at depth 1).
        depth: u32,
        /// The delegating session's `task` call that runs this task (none for a task started
        /// from code).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_id: Option<String>,
    },
    /// A task ended. Emitted only after the child session's records are durable.
    TaskEnd {
        /// The child session.
        session: String,
        /// The subagent profile, when one was selected.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent: Option<String>,
        /// Levels below the root session.
        depth: u32,
        /// How the task ended.
        outcome: Outcome,
        /// Usage of the task's model turns.
        usage: Usage,
        /// The error when `outcome` is not `completed`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<ErrorInfo>,
    },
    /// Something a task did, forwarded to the stream of the operation that started it as it
    /// happens: the task's text and thinking deltas, tool starts and ends, emitted data, turn
    /// ends and compaction. Tasks nested in a task arrive wrapped once, labelled with their own
    /// session. A task's turn usage is counted in its `task_end`, not again here.
    TaskActivity {
        /// The task session the event belongs to, `task:<parent>:<uuid>`.
        session: String,
        /// Levels below the root session.
        depth: u32,
        /// The task's event.
        event: Box<Event>,
    },
    /// A tool call waits for a decision: the operation pauses before its side effect and
    /// ends with the outcome `requires_action`. Emitted once the pending action is durable.
    ActionRequired {
        /// The pending action.
        action: PendingAction,
    },
    /// A hook decided at one of the loop's points (emitted once the decision is stored, for
    /// the points that store it); `decision` is `error` when the hook failed.
    HookDecision {
        /// The decision, as stored.
        hook: HookRecord,
    },
    /// A custom tool was called: the application runs it and supplies the result (emitted
    /// with its [`Event::ActionRequired`]).
    CustomToolUse {
        /// The action to resolve with the result.
        action_id: String,
        /// Call id.
        call_id: String,
        /// Tool name.
        name: String,
        /// Input as the model sent it.
        input: Value,
    },
    /// A pending action was decided (once the decision is durable).
    ActionResolved {
        /// The action.
        action_id: String,
        /// The decision.
        decision: ActionDecision,
    },
    /// A submission paused on pending actions: it is `waiting`, nobody owns the conversation,
    /// and any process resolves it. Emitted once the state is durable.
    SubmissionWaiting {
        /// The submission.
        submission_id: String,
        /// The pending action ids.
        actions: Vec<String>,
    },
    /// A submission was admitted durably (emitted by the admitting process; at least once).
    SubmissionQueued {
        /// The submission.
        submission_id: String,
    },
    /// An attempt started processing a submission (again on every recovery attempt).
    SubmissionRunning {
        /// The submission.
        submission_id: String,
        /// Attempt number, 1-based, counted across restarts.
        attempt: u32,
    },
    /// A submission settled. Emitted only after its settlement record is durable.
    SubmissionSettled {
        /// The submission.
        submission_id: String,
        /// How it ended.
        outcome: Outcome,
        /// The error when `outcome` is not `completed`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<ErrorInfo>,
    },
    /// The operation ended. Emitted only after its records are durable.
    OperationEnd {
        /// How it ended.
        outcome: Outcome,
        /// Usage summed over the operation.
        usage: Usage,
        /// The error when `outcome` is not `completed`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<ErrorInfo>,
    },
}

/// The kinds of session operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum OperationKind {
    /// `session.prompt`.
    Prompt,
    /// `session.skill`.
    Skill,
    /// `session.task`.
    Task,
    /// `session.shell`.
    Shell,
    /// `session.compact`.
    Compact,
}

impl OperationKind {
    /// The wire name (`prompt`, `skill`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Prompt => "prompt",
            Self::Skill => "skill",
            Self::Task => "task",
            Self::Shell => "shell",
            Self::Compact => "compact",
        }
    }
}

/// What triggered a compaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CompactionReason {
    /// The context estimate passed the window minus the reserve before a model call.
    Threshold,
    /// The provider rejected a turn with a context overflow.
    Overflow,
    /// `session.compact()`.
    Manual,
}

/// How an operation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Outcome {
    /// It produced its answer.
    Completed,
    /// It failed with an error.
    Failed,
    /// Its caller aborted it.
    Aborted,
    /// It paused on tool calls that wait for a decision (a confirmation or a custom tool's
    /// result); resolving them resumes it. Never the outcome of a settled submission.
    RequiresAction,
}

impl Outcome {
    /// The wire name (`completed`, `failed`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Aborted => "aborted",
            Self::RequiresAction => "requires_action",
        }
    }
}

/// The wire shape of an error: `{"kind": ..., "message": ...}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorInfo {
    /// Stable kind string.
    pub kind: String,
    /// Human-readable message.
    pub message: String,
}

#[cfg(test)]
mod tests;
