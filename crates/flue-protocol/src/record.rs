//! Session records: the append-only, serialisable log a session is made of.
//!
//! This module is wire format. It imports nothing else from the crate, every enum is tagged
//! with `type` in snake_case, and fields are never renamed without an alias. A stored record
//! carries [`RECORD_FORMAT_VERSION`] so later versions can read old logs.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The record format written by this version of Flue.
pub const RECORD_FORMAT_VERSION: u32 = 1;

/// One entry of a session log, as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredRecord {
    /// Record format version ([`RECORD_FORMAT_VERSION`] when written by this crate).
    pub v: u32,
    /// Milliseconds since the Unix epoch when the record was created.
    pub at: u64,
    /// When the work this record reports began, in milliseconds since the Unix epoch, where
    /// the runtime measured it: a model call (`assistant`, `failed_turn`), a tool call's run
    /// (`tool_result`; a `task` call's run is its task), a compaction (`compaction`). Absent
    /// on other records and in logs written before it was recorded (they read as before;
    /// readers estimate from the records around it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<u64>,
    /// How long that work took, in milliseconds (set with `started_at`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// The record itself.
    #[serde(flatten)]
    pub record: Record,
}

impl StoredRecord {
    /// Wraps a record with the current format version and a timestamp.
    pub fn new(record: Record, at: u64) -> Self {
        Self {
            v: RECORD_FORMAT_VERSION,
            at,
            started_at: None,
            duration_ms: None,
            record,
        }
    }

    /// The same record, saying its work began at `started_at` and took `duration_ms`.
    #[must_use]
    pub fn with_timing(mut self, timing: Option<WorkTiming>) -> Self {
        if let Some(timing) = timing {
            self.started_at = Some(timing.started_at);
            self.duration_ms = Some(timing.duration_ms);
        }
        self
    }

    /// When the work this record reports began and how long it took, when recorded.
    pub fn timing(&self) -> Option<WorkTiming> {
        Some(WorkTiming {
            started_at: self.started_at?,
            duration_ms: self.duration_ms?,
        })
    }
}

/// When a record's work began and how long it took (see [`StoredRecord::started_at`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkTiming {
    /// Milliseconds since the Unix epoch.
    pub started_at: u64,
    /// Milliseconds.
    pub duration_ms: u64,
}

/// What a session log holds. Grows over time: match with a wildcard.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Record {
    /// A message from the user (or the application on the user's behalf).
    User(UserMessage),
    /// One model turn: text, thinking and tool calls.
    Assistant(AssistantMessage),
    /// The answer to one tool call of the preceding assistant message.
    ToolResult(ToolResult),
    /// A command run with `session.shell`, recorded for the model to see.
    Shell(ShellExchange),
    /// A summary that replaces the records before `first_kept` in the model's view.
    Compaction(CompactionSummary),
    /// A tool call of the preceding assistant message that waits for a decision (a
    /// confirmation, or a custom tool's result) before it runs: the operation paused here.
    ActionRequired(PendingAction),
    /// The decision on a pending action. The first one stored wins.
    ActionResolved(ActionResolution),
    /// A confirmed call started running. A call with this record and no result was cut short
    /// (a crash): it is answered `interrupted`, never run again.
    ActionStarted(ActionStarted),
    /// An MCP server's sampling request during a tool call of the preceding assistant message,
    /// run (or refused) with the agent's model, as that model saw it, secrets redacted. Not
    /// part of the agent's own conversation: the model never sees it in later turns.
    Sampling(SamplingExchange),
    /// A model turn that failed after the provider reported tokens it used (input read before
    /// a mid-stream error, a cut stream, a retried attempt): its usage, counted like a turn's,
    /// and why it failed. Nothing the model wrote in it is kept; the model never sees it.
    FailedTurn(FailedTurn),
    /// A hook's decision at one of the agent loop's points (see [`HookRecord`]): who decided,
    /// what, and what it changed. The model never sees it; the runtime reads it back so that a
    /// stored decision is not asked for again (after a pause or a crash).
    Hook(HookRecord),
    /// A new value of the conversation's state document: the whole document after the change,
    /// stored with the unit of work that made it (a batch of tool results, the first message's
    /// `initialData`, an application's write). The latest one is the state.
    State(StateChange),
    /// One attempt at a replay-safe tool call of the preceding assistant message, stored before
    /// it runs: a call cut off by a crash is run again on recovery with the same idempotency
    /// key, so the log shows every attempt.
    ToolAttempt(ToolAttempt),
    /// A standing approval of the conversation granted ("always" answered to a confirmation)
    /// or revoked (see [`StandingRule`]). The model never sees it.
    Rule(StandingRule),
}

/// A standing approval, as stored (see [`Record::Rule`]): from its grant on, confirmations of
/// `tool_name` in the conversation are approved without asking, until a revocation of the
/// same `rule_id`. A grant counts only when its `signature` verifies with the approval key of
/// the process reading it, so a store a cloned workspace ships cannot approve anything.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StandingRule {
    /// The rule's id (`rule_<ulid>`); a revocation names the grant's.
    pub rule_id: String,
    /// The tool whose confirmations it answers.
    pub tool_name: String,
    /// Granted or revoked.
    pub change: RuleChange,
    /// The confirmation whose "always" answer granted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action_id: Option<String>,
    /// A grant's HMAC-SHA256 (hex) over its id and tool, with the user's approval key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

/// What a [`StandingRule`] record does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RuleChange {
    /// The rule starts to apply.
    Grant,
    /// The rule no longer applies.
    Revoke,
}

/// One hook decision, as stored (see [`Record::Hook`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HookRecord {
    /// The point, by its event name (`PreToolUse`, `UserPromptSubmit`, `BeforeModelCall`, ...).
    pub event: String,
    /// Who decided: the hook's name (for a command hook, its command and where it was
    /// declared).
    pub hook: String,
    /// What the decision is about: the tool call id for tool points, else absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The decision: `continue`, `allow`, `deny`, `ask`, `block`, `tripwire` or `error` (the
    /// hook failed; `reason` says how).
    pub decision: String,
    /// The reason given (shown to the model for `deny` and `block`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The tool input that replaced the model's (`PreToolUse`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_input: Option<Value>,
    /// Text that replaced what the point carried: the tool result the model sees
    /// (`PostToolUse`), the final reply (`Stop`), the user's prompt (`UserPromptSubmit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replacement: Option<String>,
    /// Context the hook added for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_context: Option<String>,
    /// What a model call the hook made cost (a `prompt` hook's judgement); counted in the
    /// operation's usage and the budgets like a turn's, but not as a turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// The largest state document, in bytes of its JSON (64 KiB).
pub const MAX_STATE_BYTES: usize = 64 * 1024;

/// A new value of the conversation's state (see [`Record::State`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StateChange {
    /// The whole document after the change (a JSON object).
    pub value: Value,
    /// The state's version: 1 for the first value, one more for each change.
    pub version: u64,
    /// Who changed it: `initial_data`, `tool:<name>` (with the call in `call_id`), `action`,
    /// `api`.
    pub source: String,
    /// The tool call that changed it, when a tool did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
}

/// One attempt at a replay-safe tool call (see [`Record::ToolAttempt`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolAttempt {
    /// The call.
    pub call_id: String,
    /// The tool's name.
    pub tool_name: String,
    /// 1 for the first run, one more for each run after a crash.
    pub attempt: u32,
    /// The call's idempotency key: the same on every attempt.
    pub idempotency_key: String,
}

/// A model turn that failed, with the usage the provider reported before it did (see
/// [`Record::FailedTurn`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FailedTurn {
    /// The model the turn ran on.
    pub model: ModelRef,
    /// The tokens (and cost) the provider reported for the turn before it failed, retried
    /// attempts of the turn included.
    pub usage: Usage,
    /// The error's stable kind (`provider_error`, ...).
    pub error_kind: String,
    /// The error message, secrets redacted.
    pub message: String,
}

/// A tool call waiting for a person or the application (see [`Record::ActionRequired`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PendingAction {
    /// The action's id, unique in the session (`act_<call id>`).
    pub action_id: String,
    /// The tool call it holds back.
    pub call_id: String,
    /// The tool's name.
    pub tool_name: String,
    /// The call's input.
    pub input: Value,
    /// Confirmation or custom tool.
    pub kind: ActionKind,
    /// Why the call waits, for the person deciding.
    pub reason: String,
    /// The task session that holds the action, when a subagent's call waits (`None`: the
    /// session it is listed in). Decide it through the root session all the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// A custom tool's output JSON Schema, when it declares one: a posted result must match
    /// it (stored with the action, so every process checks the same schema).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// The call's idempotency key (the same one a tool run sees): an application fulfilling a
    /// custom tool does its effect once per key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

/// What a pending action waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ActionKind {
    /// Permission to run a tool whose policy is `always_ask`: allow or deny.
    Confirmation,
    /// The result of a custom tool the application runs (or a denial).
    CustomTool,
    /// A `task` call whose subagent session (`session`) waits for decisions on its own
    /// actions. Nobody decides it directly: it is answered when the task ends (or interrupted).
    Task,
    /// An MCP server's question (elicitation) during a running tool call: answered with
    /// `accept` (values fitting the requested schema), `decline` or `cancel`. A live action: the
    /// call waits for it in the process that holds the connection, never across a restart
    /// (a restart answers it `interrupted`); it does not pause the operation.
    Elicitation,
}

/// The decision on one pending action (see [`Record::ActionResolved`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ActionResolution {
    /// The action decided.
    pub action_id: String,
    /// The decision.
    pub decision: ActionDecision,
    /// The decided call's tool (filled in by the runtime when it stores the decision).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tool_name: String,
    /// The decided call's id (likewise).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub call_id: String,
}

impl ActionResolution {
    /// A decision on `action_id`; the runtime fills in the tool and call when storing it.
    pub fn new(action_id: impl Into<String>, decision: ActionDecision) -> Self {
        Self {
            action_id: action_id.into(),
            decision,
            tool_name: String::new(),
            call_id: String::new(),
        }
    }

    /// This decision on `action`, naming its tool and call.
    pub fn of(action: &PendingAction, decision: ActionDecision) -> Self {
        Self {
            action_id: action.action_id.clone(),
            decision,
            tool_name: action.tool_name.clone(),
            call_id: action.call_id.clone(),
        }
    }
}

/// A decision on a pending action.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ActionDecision {
    /// Run the call (confirmations only).
    Allow,
    /// Run the call, and approve this tool's later calls in the conversation without asking
    /// (confirmations only): stored as [`ActionDecision::Allow`] plus a signed
    /// [`Record::Rule`] grant, never itself.
    AllowAlways,
    /// Don't run it; the model sees the denial (with `message`) as the call's error.
    Deny {
        /// Why, for the model.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// The custom tool's result, supplied by the application.
    Result {
        /// The output the model sees (a string is shown as is, anything else as JSON).
        value: Value,
        /// Whether the output is an error.
        #[serde(default)]
        is_error: bool,
    },
    /// Answered as interrupted by an interrupt of the conversation, or (an elicitation) because
    /// the process holding the call stopped.
    Interrupted,
    /// An elicitation's answer: the values, checked against the requested schema, with its
    /// defaults filled in.
    Accept {
        /// The values (a JSON object).
        content: Value,
    },
    /// An elicitation declined (by a person, or by its timeout); the server is told `message`.
    Decline {
        /// Why, for the server and the log.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// An elicitation dismissed without a choice.
    Cancel,
}

/// One action of a session and its decision (`None` while it waits), as listed by
/// flue-core's `Session::actions`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ActionInfo {
    /// The action.
    #[serde(flatten)]
    pub action: PendingAction,
    /// The decision, once taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<ActionDecision>,
}

/// A confirmed call started (see [`Record::ActionStarted`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionStarted {
    /// The action.
    pub action_id: String,
}

/// One sampling request and its answer (see [`Record::Sampling`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SamplingExchange {
    /// The tool call during which the server asked.
    pub call_id: String,
    /// The MCP server that asked.
    pub server: String,
    /// The model that answered (`provider/model`).
    pub model: String,
    /// The server's system prompt, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// The conversation the server sent, oldest first.
    pub messages: Vec<SampledMessage>,
    /// The most tokens the answer could have.
    pub max_tokens: u32,
    /// The model's answer; `None` when the request was refused or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<String>,
    /// Why the request was refused or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the answer cost; counted in the operation's usage.
    #[serde(default)]
    pub usage: Usage,
}

/// One message of a [`SamplingExchange`]'s conversation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampledMessage {
    /// `user` or `assistant`.
    pub role: String,
    /// The text (images and audio as placeholders).
    pub text: String,
}

impl SamplingExchange {
    /// An exchange with `server` during call `call_id`, on `model`; fill in the rest.
    pub fn new(
        call_id: impl Into<String>,
        server: impl Into<String>,
        model: impl Into<String>,
    ) -> Self {
        Self {
            call_id: call_id.into(),
            server: server.into(),
            model: model.into(),
            ..Self::default()
        }
    }
}

/// A user message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UserMessage {
    /// Text and image parts, in order.
    pub content: Vec<UserContent>,
}

impl UserMessage {
    /// A message of one text part.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            content: vec![UserContent::Text { text: text.into() }],
        }
    }

    /// The text parts joined by blank lines.
    pub fn joined_text(&self) -> String {
        let texts: Vec<&str> = self
            .content
            .iter()
            .filter_map(|part| match part {
                UserContent::Text { text } => Some(text.as_str()),
                UserContent::Image(_) => None,
            })
            .collect();
        texts.join("\n\n")
    }
}

/// One part of a user message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum UserContent {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// An inline image.
    Image(Image),
}

/// An inline image, base64-encoded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Image {
    /// Base64 data without a `data:` prefix.
    pub data: String,
    /// MIME type such as `image/png`.
    pub mime_type: String,
}

/// One model turn as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessage {
    /// Text, thinking and tool calls in the order the model produced them.
    pub content: Vec<AssistantContent>,
    /// The model that produced the turn.
    pub model: ModelRef,
    /// Token usage the provider reported for this turn.
    #[serde(default)]
    pub usage: Usage,
    /// Why the model stopped.
    pub stop_reason: StopReason,
    /// The reply was aborted while it streamed: `content` is the text shown until then.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
}

impl AssistantMessage {
    /// The text parts concatenated.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for part in &self.content {
            if let AssistantContent::Text { text } = part {
                out.push_str(text);
            }
        }
        out
    }

    /// The tool calls of this turn, in order.
    pub fn tool_calls(&self) -> impl Iterator<Item = &ToolCall> {
        self.content.iter().filter_map(|part| match part {
            AssistantContent::ToolCall(call) => Some(call),
            _ => None,
        })
    }
}

/// One part of an assistant message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum AssistantContent {
    /// Visible text.
    Text {
        /// The text.
        text: String,
    },
    /// Reasoning the provider exposed; `signature` round-trips to providers that sign it.
    Thinking {
        /// The reasoning text (a summary, where the provider shows only that).
        text: String,
        /// Opaque provider signature or encrypted reasoning, when given; sent back unchanged.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
        /// The provider's id for this reasoning item, where the provider names them (the
        /// OpenAI Responses API); sent back unchanged.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
    },
    /// Reasoning the provider withheld and sent encrypted (Anthropic `redacted_thinking`):
    /// never shown, sent back unchanged to the model that wrote it.
    RedactedThinking {
        /// The opaque data, verbatim.
        data: String,
    },
    /// The model's refusal to answer, in its own words (OpenAI `refusal`, Anthropic's
    /// refusal explanation).
    Refusal {
        /// The refusal text.
        text: String,
    },
    /// A request to run a tool.
    ToolCall(ToolCall),
    /// A piece of the turn in the provider's own wire form that flue keeps without reading it
    /// (OpenRouter's `reasoning_details` entries, Anthropic's server tool blocks, Gemini's
    /// thought signatures): never shown, sent back unchanged to the provider and model that
    /// wrote it, which need it to continue the conversation.
    ProviderData {
        /// The provider's JSON, verbatim.
        data: Value,
    },
}

/// A tool call requested by the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Provider-assigned call id; the matching [`ToolResult`] carries it.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments as the model sent them (not yet validated). Arguments that were not valid
    /// JSON are kept verbatim as a JSON string; the call is answered with `invalid_input`.
    pub input: Value,
}

/// The model a turn ran on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ModelRef {
    /// Provider id, the part of the specifier before the first `/`.
    pub provider: String,
    /// Model id, the rest of the specifier.
    pub id: String,
}

impl std::fmt::Display for ModelRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.provider, self.id)
    }
}

/// Why a model turn ended.
///
/// Stored and sent as a snake_case string. A reason this version does not know is kept as the
/// provider sent it ([`StopReason::Other`]), never read as a normal end.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StopReason {
    /// The model finished its answer.
    EndTurn,
    /// The model wants tool results before it continues.
    ToolUse,
    /// The output token limit cut the turn short.
    MaxTokens,
    /// The turn was aborted; the message holds what arrived before the abort.
    Aborted,
    /// The model declined to answer; the turn holds an [`AssistantContent::Refusal`] when the
    /// provider said why.
    Refusal,
    /// The provider's content filter withheld or cut the answer.
    ContentFilter,
    /// The provider paused a long turn; sending the conversation back continues it.
    PauseTurn,
    /// The conversation no longer fits the model's context window.
    ContextWindowExceeded,
    /// A reason this version does not know, as the provider spelled it.
    Other(String),
}

impl StopReason {
    /// The stored spelling: snake_case for known reasons, the provider's own for others.
    pub fn as_str(&self) -> &str {
        match self {
            Self::EndTurn => "end_turn",
            Self::ToolUse => "tool_use",
            Self::MaxTokens => "max_tokens",
            Self::Aborted => "aborted",
            Self::Refusal => "refusal",
            Self::ContentFilter => "content_filter",
            Self::PauseTurn => "pause_turn",
            Self::ContextWindowExceeded => "context_window_exceeded",
            Self::Other(reason) => reason,
        }
    }

    /// The reason spelled `name` (the inverse of [`StopReason::as_str`]).
    pub fn from_name(name: &str) -> Self {
        match name {
            "end_turn" => Self::EndTurn,
            "tool_use" => Self::ToolUse,
            "max_tokens" => Self::MaxTokens,
            "aborted" => Self::Aborted,
            "refusal" => Self::Refusal,
            "content_filter" => Self::ContentFilter,
            "pause_turn" => Self::PauseTurn,
            "context_window_exceeded" => Self::ContextWindowExceeded,
            other => Self::Other(other.to_owned()),
        }
    }

    /// Whether the model ended its answer normally (finished, or handed over to tools).
    pub fn is_normal(&self) -> bool {
        matches!(self, Self::EndTurn | Self::ToolUse)
    }
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for StopReason {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for StopReason {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
        Ok(Self::from_name(&name))
    }
}

/// Token counts and cost. Adds up with `+=`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens not served from cache.
    #[serde(default)]
    pub input_tokens: u64,
    /// Output tokens, thinking included.
    #[serde(default)]
    pub output_tokens: u64,
    /// Input tokens read from the provider's prompt cache.
    #[serde(default)]
    pub cache_read_tokens: u64,
    /// Input tokens written to the provider's prompt cache.
    #[serde(default)]
    pub cache_write_tokens: u64,
    /// Cost in US dollars, when the model's price is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

impl Usage {
    /// All tokens the turn placed in the context window (input, cached input and output).
    pub fn context_tokens(&self) -> u64 {
        self.input_tokens + self.cache_read_tokens + self.cache_write_tokens + self.output_tokens
    }
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Self) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
        self.cost_usd = match (self.cost_usd, other.cost_usd) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        };
    }
}

/// The answer to one tool call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The id of the call this answers.
    pub call_id: String,
    /// The tool's name, repeated for readers of the log.
    pub tool_name: String,
    /// What the model sees: the tool's output, or the error message.
    pub content: String,
    /// True when the tool failed; the model sees the error and may retry.
    #[serde(default)]
    pub is_error: bool,
    /// The stable error kind when `is_error` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<String>,
    /// Structured data the tool emitted for UI readers while it ran (`emit_data`), in order.
    /// Never part of what the model sees.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub data: Vec<EmittedData>,
}

/// One piece of structured data a tool emitted (`ToolContext::emit_data`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EmittedData {
    /// What the data is (`progress`, `chart`, ...): readers pick parts by name.
    pub name: String,
    /// The data, as JSON.
    pub data: Value,
    /// An id the tool gave it, so a reader can replace an earlier part with the same id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// A shell command run through `session.shell`, as the model will see it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShellExchange {
    /// The command line.
    pub command: String,
    /// Working directory it ran in, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Names of the environment variables supplied; values are never recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_keys: Vec<String>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// Exit code (124 after a timeout).
    pub exit_code: i32,
}

/// A summary of older history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompactionSummary {
    /// The summary text shown to the model in place of the folded records.
    pub summary: String,
    /// Index of the first record kept verbatim after the summary.
    pub first_kept: u64,
    /// Estimated context tokens before compaction.
    #[serde(default)]
    pub tokens_before: u64,
    /// What writing the summary cost (its model calls' tokens and cost); absent in records
    /// stored before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

#[cfg(test)]
mod tests;
