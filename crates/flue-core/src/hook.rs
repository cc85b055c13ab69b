//! Hooks: code that sees, blocks or changes what the agent does, at fixed points of the loop.
//!
//! A [`Hook`] is asked at the points of [`HookPoint`] (a user message arriving, each model
//! call, each tool call before and after it runs, the final reply, compaction, a session
//! starting, an operation ending) and answers with a [`HookDecision`]: carry on, allow, deny
//! with a reason the model sees, ask (the call pauses for a confirmation like an `always_ask`
//! tool), block (at the final reply: the model tries again), trip a guardrail (the operation
//! ends with `guardrail_tripped`), or replace what the point carries (a tool's input, a tool's
//! result, the reply, the prompt). Hooks are written in Rust (implement [`Hook`], or wrap a
//! closure with [`hook_fn`]) or declared as commands ([`CommandHook`], the Claude Code hooks
//! contract: JSON on standard input, exit codes, JSON on standard output) or as http hooks
//! (the same [`CommandHook`] with an [`HttpHookTarget`]: the JSON POSTed, the answer's body
//! read as standard output) or as prompt hooks (with a [`PromptHookTarget`]: a model judges
//! the JSON with the hook's prompt). They are set on
//! the agent with `AgentConfig::with_hook`; the runtime records every decision in the
//! session log and reports it as an event (the runner is in `hook_points`). Hooks read the
//! conversation's state ([`HookContext::state`]) and may replace it
//! ([`HookDecision::state`]); the change is stored with the decision.

mod command;
mod http;
mod prompt;
mod transcript;

pub(crate) use command::NON_BLOCKING_PREFIX;
pub use transcript::remove_transcripts;
pub(crate) use transcript::render as render_transcript;

use std::sync::Arc;

use flue_protocol::record::{ToolCall, ToolResult};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::util::BoxFuture;

pub use http::{
    HTTP_HOOK_MAX_RESPONSE_BYTES, HttpHookClient, HttpHookError, HttpHookResponse, HttpHookTarget,
    fill_header,
};

pub use prompt::{
    DEFAULT_PROMPT_HOOK_TIMEOUT_SECS, HookModel, PROMPT_HOOK_POINTS, PromptHookTarget,
};

pub use command::{
    CommandHook, CommandHookSpec, DEFAULT_HOOK_TIMEOUT_SECS, HOOK_INPUT_VAR,
    HOOK_INPUT_VAR_MAX_BYTES, HookMatcher, MAX_HOOK_TIMEOUT_SECS, OnFailure, claude_tool_name,
};

/// A point of the agent loop where hooks are asked. The names are Claude Code's hook event
/// names where Claude Code has the point, and flue's own (`BeforeModelCall`) where it has not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum HookPoint {
    /// A session's first operation starts (its log was empty).
    SessionStart,
    /// A user message arrives, before it is stored and before the model sees it.
    UserPromptSubmit,
    /// Before each model call (flue's own point).
    BeforeModelCall,
    /// Before a tool call runs (after its input was parsed, before the permission rules).
    PreToolUse,
    /// After a tool call ran, before its result is stored and seen by the model.
    PostToolUse,
    /// After a tool call failed (its result is an error), after the `PostToolUse` hooks.
    PostToolUseFailure,
    /// A tool call would wait for a person's confirmation: a hook may answer it instead.
    PermissionRequest,
    /// The model gave its final reply in a root session.
    Stop,
    /// The model gave its final reply in a task session (a subagent).
    SubagentStop,
    /// Before the conversation is compacted.
    PreCompact,
    /// An operation ended (completed, failed, aborted or paused): the submission settles next.
    SessionEnd,
    /// The operation paused for a person (a confirmation or an answer), after `SessionEnd`.
    Notification,
    /// A task session (a subagent) got its first message, before `SessionStart`.
    SubagentStart,
    /// The conversation was compacted.
    PostCompact,
}

impl HookPoint {
    /// Every point, in the order of the table in docs/hooks.md.
    pub const ALL: [Self; 14] = [
        Self::SessionStart,
        Self::UserPromptSubmit,
        Self::BeforeModelCall,
        Self::PreToolUse,
        Self::PostToolUse,
        Self::PostToolUseFailure,
        Self::PermissionRequest,
        Self::Stop,
        Self::SubagentStop,
        Self::PreCompact,
        Self::PostCompact,
        Self::SessionEnd,
        Self::Notification,
        Self::SubagentStart,
    ];

    /// The event name (`PreToolUse`, ...), as in agent files and session logs.
    pub fn name(self) -> &'static str {
        match self {
            Self::SessionStart => "SessionStart",
            Self::UserPromptSubmit => "UserPromptSubmit",
            Self::BeforeModelCall => "BeforeModelCall",
            Self::PreToolUse => "PreToolUse",
            Self::PostToolUse => "PostToolUse",
            Self::PostToolUseFailure => "PostToolUseFailure",
            Self::PermissionRequest => "PermissionRequest",
            Self::Stop => "Stop",
            Self::SubagentStop => "SubagentStop",
            Self::PreCompact => "PreCompact",
            Self::SessionEnd => "SessionEnd",
            Self::Notification => "Notification",
            Self::SubagentStart => "SubagentStart",
            Self::PostCompact => "PostCompact",
        }
    }

    /// The point of an event name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|point| point.name() == name)
    }

    /// Whether a hook here can stop what the point leads to (a tool call, the prompt, the
    /// model call); a failing hook at such a point blocks unless it is set to fail open.
    pub fn is_blocking(self) -> bool {
        matches!(
            self,
            Self::UserPromptSubmit | Self::BeforeModelCall | Self::PreToolUse
        )
    }
}

/// What a hook is asked about.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum HookEvent {
    /// A session's first operation starts; `source` is `startup`.
    SessionStart {
        /// Why the session starts (`startup`).
        source: String,
    },
    /// A user message arrives.
    UserPromptSubmit {
        /// Its text (the text parts joined).
        prompt: String,
    },
    /// A model call is about to be made.
    BeforeModelCall {
        /// The model turn of this operation it starts (1 for the first).
        turn: u32,
        /// The model specifier.
        model: String,
    },
    /// A tool call is about to run.
    PreToolUse {
        /// The call, with the model's input (or an earlier hook's replacement).
        call: ToolCall,
    },
    /// A tool call ran.
    PostToolUse {
        /// The call, with the input it ran with.
        call: ToolCall,
        /// Its result, as the model would see it.
        result: ToolResult,
        /// How long it ran, when it ran to an end.
        duration_ms: Option<u64>,
    },
    /// The model gave its final reply (`Stop` in a root session, `SubagentStop` in a task).
    Stop {
        /// The reply's text.
        reply: String,
        /// Whether a `Stop` hook already blocked in this operation (the model is answering
        /// such a block).
        stop_hook_active: bool,
        /// A task session's reply.
        subagent: bool,
    },
    /// The conversation is about to be compacted.
    PreCompact {
        /// `auto` (over the threshold) or `overflow` (the provider refused the context).
        trigger: String,
    },
    /// An operation ended.
    SessionEnd {
        /// How: `completed`, `failed`, `aborted` or `requires_action`.
        reason: String,
    },
    /// A tool call failed (after its `PostToolUse` hooks).
    PostToolUseFailure {
        /// The call, with the input it ran with.
        call: ToolCall,
        /// Its error result, as the model would see it.
        result: ToolResult,
        /// How long it ran, when it ran to an end.
        duration_ms: Option<u64>,
    },
    /// A tool call would wait for a person's confirmation (after its `PreToolUse` hooks).
    PermissionRequest {
        /// The call, with the input it would run with.
        call: ToolCall,
    },
    /// The operation paused for a person.
    Notification {
        /// What it waits for, in a sentence.
        message: String,
        /// Claude Code's kind of notification: `permission_prompt` (a call waits for a
        /// confirmation) or `elicitation_dialog` (a question waits for an answer).
        notification_type: String,
    },
    /// A task session got its first message.
    SubagentStart,
    /// The conversation was compacted.
    PostCompact {
        /// `auto`, `overflow` or `manual`, as at `PreCompact`.
        trigger: String,
        /// The summary that now stands for the folded records.
        summary: String,
    },
}

impl HookEvent {
    /// The point of this event.
    pub fn point(&self) -> HookPoint {
        match self {
            Self::SessionStart { .. } => HookPoint::SessionStart,
            Self::UserPromptSubmit { .. } => HookPoint::UserPromptSubmit,
            Self::BeforeModelCall { .. } => HookPoint::BeforeModelCall,
            Self::PreToolUse { .. } => HookPoint::PreToolUse,
            Self::PostToolUse { .. } => HookPoint::PostToolUse,
            Self::Stop { subagent: true, .. } => HookPoint::SubagentStop,
            Self::Stop { .. } => HookPoint::Stop,
            Self::PreCompact { .. } => HookPoint::PreCompact,
            Self::SessionEnd { .. } => HookPoint::SessionEnd,
            Self::PostToolUseFailure { .. } => HookPoint::PostToolUseFailure,
            Self::Notification { .. } => HookPoint::Notification,
            Self::PermissionRequest { .. } => HookPoint::PermissionRequest,
            Self::SubagentStart => HookPoint::SubagentStart,
            Self::PostCompact { .. } => HookPoint::PostCompact,
        }
    }

    /// The tool call of a tool point.
    pub fn call(&self) -> Option<&ToolCall> {
        match self {
            Self::PreToolUse { call }
            | Self::PostToolUse { call, .. }
            | Self::PostToolUseFailure { call, .. }
            | Self::PermissionRequest { call } => Some(call),
            _ => None,
        }
    }
}

/// Where a hook is asked: the session, its agent, and the operation's cancellation.
#[derive(Clone, Debug)]
pub struct HookContext {
    /// The agent instance id (a conversation's is `<agent>:<id>`).
    pub instance_id: String,
    /// The session's name (`default`, or a task session's).
    pub session: String,
    /// The agent's name.
    pub agent: String,
    /// Levels below the root session (0 for the root, 1 for its tasks, ...).
    pub depth: u32,
    /// The working directory inside the sandbox, when the agent sets one.
    pub cwd: Option<String>,
    /// Fires when the operation is aborted; a hook should stop promptly.
    pub cancel: CancellationToken,
    /// The conversation's state document as of now (`{}` before its first write; earlier
    /// hooks' and tool calls' writes included); `None` in a task session, which has no state.
    pub state: Option<Value>,
    /// The session's log as of now as a Claude Code transcript (JSON lines: user and
    /// assistant messages, tool uses and results); command hooks get it as the file
    /// `transcript_path`. `None` where the runtime gives none.
    pub transcript: Option<Arc<str>>,
    /// The models a hook may ask (a prompt hook judges with one): the operation's model by
    /// default; what the calls cost is counted in the operation's usage. `None` where the
    /// runtime gives none.
    pub model: Option<HookModel>,
}

/// What a hook decided.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// No objection (what a hook that says nothing decides).
    #[default]
    Continue,
    /// `PreToolUse`: the call may run (the permission rules still apply).
    Allow,
    /// `PreToolUse`: the call does not run; the model gets the reason as the call's error.
    Deny,
    /// `PreToolUse`: the call pauses for a confirmation, like an `always_ask` tool.
    Ask,
    /// `Stop`/`SubagentStop`: the model gets the reason and answers again (bounded);
    /// `PostToolUse`: the reason is added to the result the model sees; `UserPromptSubmit`,
    /// `BeforeModelCall`: the operation ends with `guardrail_tripped`.
    Block,
    /// At any point: the operation ends with `guardrail_tripped` and the reason.
    Tripwire,
}

impl Verdict {
    /// The name stored in the session log (`continue`, `allow`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Self::Continue => "continue",
            Self::Allow => "allow",
            Self::Deny => "deny",
            Self::Ask => "ask",
            Self::Block => "block",
            Self::Tripwire => "tripwire",
        }
    }
}

/// A hook's answer: a verdict, its reason, and what it replaces or adds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HookDecision {
    /// The verdict.
    pub verdict: Verdict,
    /// Why; the model sees it for `Deny` and `Block`.
    pub reason: Option<String>,
    /// `PreToolUse`: the input the call runs with instead of the model's.
    pub updated_input: Option<Value>,
    /// Text replacing what the point carries: the tool result the model sees
    /// (`PostToolUse`), the final reply (`Stop`), the prompt (`UserPromptSubmit`).
    pub replacement: Option<String>,
    /// Context for the model: added to the prompt (`UserPromptSubmit`, `SessionStart`), the
    /// tool result (`PostToolUse`, `PreToolUse` when the call runs) or the system prompt of the
    /// coming model call (`BeforeModelCall`).
    pub additional_context: Option<String>,
    /// The conversation's new state document (a JSON object, replacing the whole document),
    /// stored as a `state` record with the decision, in the same fenced write. Not at
    /// `SessionEnd` and `PreCompact` (their decisions are not stored) nor in a task session:
    /// there, and when the value is not an object or is over the state's size limit, the hook
    /// fails (see [`Hook::fails_open`]) and nothing is written.
    pub state: Option<Value>,
}

impl HookDecision {
    /// No objection.
    pub fn proceed() -> Self {
        Self::default()
    }

    /// `PreToolUse`: let the call run.
    pub fn allow() -> Self {
        Self::with(Verdict::Allow, None)
    }

    /// `PreToolUse`: refuse the call; the model sees `reason`.
    pub fn deny(reason: impl Into<String>) -> Self {
        Self::with(Verdict::Deny, Some(reason.into()))
    }

    /// `PreToolUse`: pause the call for a confirmation.
    pub fn ask(reason: impl Into<String>) -> Self {
        Self::with(Verdict::Ask, Some(reason.into()))
    }

    /// Block (see [`Verdict::Block`]).
    pub fn block(reason: impl Into<String>) -> Self {
        Self::with(Verdict::Block, Some(reason.into()))
    }

    /// End the operation with `guardrail_tripped`.
    pub fn tripwire(reason: impl Into<String>) -> Self {
        Self::with(Verdict::Tripwire, Some(reason.into()))
    }

    /// `PreToolUse`: run the call with `input` instead.
    pub fn rewrite(input: Value) -> Self {
        Self {
            updated_input: Some(input),
            ..Self::default()
        }
    }

    /// Replace the text the point carries (see [`HookDecision::replacement`]).
    pub fn replace(text: impl Into<String>) -> Self {
        Self {
            replacement: Some(text.into()),
            ..Self::default()
        }
    }

    /// Add context for the model (see [`HookDecision::additional_context`]).
    #[must_use]
    pub fn with_context(mut self, context: impl Into<String>) -> Self {
        self.additional_context = Some(context.into());
        self
    }

    /// Replace the conversation's state document with `state` (see [`HookDecision::state`]).
    #[must_use]
    pub fn with_state(mut self, state: Value) -> Self {
        self.state = Some(state);
        self
    }

    fn with(verdict: Verdict, reason: Option<String>) -> Self {
        Self {
            verdict,
            reason,
            ..Self::default()
        }
    }

    /// Whether the decision changes nothing (a plain `continue`).
    pub fn is_plain(&self) -> bool {
        *self == Self::default()
    }
}

/// A hook that could not decide (it crashed, timed out, or answered something unreadable).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookFailure {
    /// What went wrong, naming the hook and where it was declared.
    pub message: String,
    /// The hook never ran: it could not be started (a command hook's process could not be
    /// created). Such a failure fails closed at every point but `SessionEnd`, whatever
    /// [`Hook::fails_open`] says: the hook never saw what it guards, and what keeps a process
    /// from starting (memory, process limits) is not the hook author's failure to excuse.
    pub not_started: bool,
}

impl HookFailure {
    /// A failure with its message.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            not_started: false,
        }
    }

    /// The failure of a hook that could not be started (it fails closed; see the field
    /// `not_started`).
    pub fn cannot_start(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            not_started: true,
        }
    }
}

impl std::fmt::Display for HookFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Code the runtime asks at the points of [`HookPoint`].
///
/// The runtime asks the agent's hooks in the order they were added, one after the other: a
/// later hook sees an earlier one's replacement of a tool input. A `Deny`, `Tripwire` or
/// (where it blocks) `Block` stops the asking. Each decision is stored in the session log
/// before it takes effect, and a decision found there (after a pause or a crash) is not asked
/// for again.
pub trait Hook: Send + Sync {
    /// Who decides, as the session log and events name it.
    fn name(&self) -> String;

    /// Whether this hook wants `event` at all (a command hook's event name and matcher).
    fn handles(&self, event: &HookEvent) -> bool;

    /// Whether a failure of this hook lets the point go on, even where a failure blocks by
    /// default ([`HookPoint::is_blocking`]).
    fn fails_open(&self) -> bool {
        false
    }

    /// Whether this hook runs on the host where it can read and change the workspace's files
    /// (a command hook does; an http hook only sends its input away). Such hooks are refused
    /// beside a sandbox whose files are not the workspace's.
    fn touches_host_files(&self) -> bool {
        true
    }

    /// Decides on `event`.
    fn decide<'a>(
        &'a self,
        event: &'a HookEvent,
        ctx: &'a HookContext,
    ) -> BoxFuture<'a, Result<HookDecision, HookFailure>>;
}

impl std::fmt::Debug for dyn Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hook").field("name", &self.name()).finish()
    }
}

/// A hook made of an async closure, asked at `points` only.
///
/// ```
/// use flue_core::hook::{HookDecision, HookEvent, HookPoint, hook_fn};
/// let no_rm = hook_fn("no-rm", &[HookPoint::PreToolUse], |event, _ctx| async move {
///     let risky = event.call().is_some_and(|call| {
///         call.input["command"].as_str().is_some_and(|command| command.contains("rm -rf"))
///     });
///     Ok(if risky { HookDecision::deny("rm -rf is not allowed here") } else { HookDecision::proceed() })
/// });
/// let agent = flue_core::AgentConfig::new().with_hook(no_rm);
/// assert_eq!(agent.hooks.len(), 1);
/// ```
pub fn hook_fn<F, Fut>(name: impl Into<String>, points: &[HookPoint], decide: F) -> Arc<dyn Hook>
where
    F: Fn(HookEvent, HookContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<HookDecision, HookFailure>> + Send + 'static,
{
    Arc::new(FnHook {
        name: name.into(),
        points: points.to_vec(),
        decide,
    })
}

struct FnHook<F> {
    name: String,
    points: Vec<HookPoint>,
    decide: F,
}

impl<F, Fut> Hook for FnHook<F>
where
    F: Fn(HookEvent, HookContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<HookDecision, HookFailure>> + Send + 'static,
{
    fn name(&self) -> String {
        self.name.clone()
    }

    fn handles(&self, event: &HookEvent) -> bool {
        self.points.contains(&event.point())
    }

    fn decide<'a>(
        &'a self,
        event: &'a HookEvent,
        ctx: &'a HookContext,
    ) -> BoxFuture<'a, Result<HookDecision, HookFailure>> {
        Box::pin((self.decide)(event.clone(), ctx.clone()))
    }
}
