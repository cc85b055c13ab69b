//! Submission wire types: messages, receipts, offsets, stream batches and settlements.
//!
//! Data only, like [`crate::record`] and [`crate::event`]: it imports nothing from the crate but
//! those two modules and [`DurabilityConfig`], every enum is tagged (`type` or `kind`) in
//! snake_case, and fields are never renamed without an alias. The stored stream batches use
//! these types, so they are a durable format as well as an API.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::config::{Budget, DurabilityConfig, ThinkingLevel};
use crate::event::{ErrorInfo, Outcome};
use crate::record::{Image, StoredRecord, UserContent, UserMessage};

/// Identifies one conversation: an agent name and a caller-chosen id.
///
/// A conversation's sessions live under the harness instance id [`ConversationKey::instance_id`]
/// (`"<agent>:<id>"`), so two agents may use the same id without sharing anything.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ConversationKey {
    /// The agent's name (`[a-z0-9_-]`, 1 to 64 characters).
    pub agent: String,
    /// The conversation id chosen by the caller.
    pub id: String,
}

impl ConversationKey {
    /// A key. Validate with [`crate::check_conversation_id`] (the runtime does it on dispatch).
    pub fn new(agent: impl Into<String>, id: impl Into<String>) -> Self {
        Self {
            agent: agent.into(),
            id: id.into(),
        }
    }

    /// The harness instance id whose sessions make up this conversation: `"<agent>:<id>"`.
    /// Agent names contain no `:`, so the first `:` separates the two parts.
    pub fn instance_id(&self) -> String {
        format!("{}:{}", self.agent, self.id)
    }

    /// The key of an instance id made by [`ConversationKey::instance_id`], or `None`.
    pub fn from_instance_id(instance_id: &str) -> Option<Self> {
        let (agent, id) = instance_id.split_once(':')?;
        Some(Self::new(agent, id))
    }
}

impl fmt::Display for ConversationKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.agent, self.id)
    }
}

/// One message delivered to a conversation: what flue-core's `AgentRuntime::dispatch` admits.
///
/// Serialised with `kind` (`user` | `signal`), like the TypeScript Flue's `DeliveredMessage`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum DeliveredMessage {
    /// A user chat turn: text and optional images.
    User {
        /// The text.
        body: String,
        /// Images, in order after the text.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<Image>,
        /// JSON Schema of a structured result: the submission then settles with validated
        /// `data` (or fails `result_unavailable`). Stored with the message, so an attempt after
        /// a restart asks for the same result.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<serde_json::Value>,
        /// Creation data (the wire's `initialData`): seeds the conversation's state when this
        /// message is the first to reach it; ignored otherwise. A JSON object.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        initial_data: Option<serde_json::Value>,
        /// What this message chooses for its own run (model, thinking level, role, a skill to
        /// run): stored with it, so every attempt runs with the same choices.
        #[serde(default, skip_serializing_if = "no_options")]
        options: Box<MessageOptions>,
    },
    /// A structured event for the agent (a webhook, a schedule, another system).
    Signal {
        /// What happened, e.g. `github.issue_opened`. Must not be empty.
        #[serde(rename = "type")]
        signal_type: String,
        /// The payload as text (JSON-encode structured payloads yourself).
        body: String,
        /// Extra attributes shown to the model on the signal's envelope.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        attributes: BTreeMap<String, String>,
        /// The envelope's tag name in the model's context (default `signal`); must match
        /// `^[A-Za-z_][A-Za-z0-9_.-]*$`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tag_name: Option<String>,
        /// Creation data, as for a user message.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        initial_data: Option<serde_json::Value>,
        /// The model, thinking level and role of its run, as for a user message (a signal runs
        /// no skill).
        #[serde(default, skip_serializing_if = "no_options")]
        options: Box<MessageOptions>,
    },
}

/// What one message chooses for its own run, over the agent's configuration: the model, the
/// thinking level, the role, and a skill to run with its arguments. Nothing of it changes a
/// file or a later message. Stored with the message (the admitted batch, the submission), so
/// an attempt after a restart or on another node runs with the same choices.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct MessageOptions {
    /// The model specifier (`<provider>/<model>`) instead of the agent's (and its role's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The thinking level instead of the agent's (and its role's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<ThinkingLevel>,
    /// A role of the workspace for this message, instead of the agent's default role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// A skill to run, as `session.skill` does: the message records the skill's instruction
    /// and arguments (then the message's text, when it has any) and the skill's instructions
    /// join the system prompt. User messages only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skill: Option<String>,
    /// The skill's arguments, by name (only with `skill`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub args: BTreeMap<String, serde_json::Value>,
}

impl MessageOptions {
    /// True when the message chooses nothing (it runs as the agent is configured).
    pub fn is_empty(&self) -> bool {
        self.model.is_none()
            && self.thinking.is_none()
            && self.role.is_none()
            && self.skill.is_none()
            && self.args.is_empty()
    }

    /// Sets the model specifier.
    #[must_use]
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Sets the thinking level.
    #[must_use]
    pub fn with_thinking(mut self, thinking: ThinkingLevel) -> Self {
        self.thinking = Some(thinking);
        self
    }

    /// Sets the role.
    #[must_use]
    pub fn with_role(mut self, role: impl Into<String>) -> Self {
        self.role = Some(role.into());
        self
    }

    /// Sets the skill to run.
    #[must_use]
    pub fn with_skill(mut self, skill: impl Into<String>) -> Self {
        self.skill = Some(skill.into());
        self
    }

    /// Adds an argument of the skill.
    #[must_use]
    pub fn with_arg(mut self, name: impl Into<String>, value: serde_json::Value) -> Self {
        self.args.insert(name.into(), value);
        self
    }
}

impl DeliveredMessage {
    /// A user message of text only.
    pub fn user(body: impl Into<String>) -> Self {
        Self::User {
            body: body.into(),
            images: Vec::new(),
            result: None,
            initial_data: None,
            options: Box::default(),
        }
    }

    /// What this message chooses for its run (see [`MessageOptions`]).
    pub fn options(&self) -> &MessageOptions {
        match self {
            Self::User { options, .. } | Self::Signal { options, .. } => options,
        }
    }

    /// Sets what this message chooses for its run (see [`MessageOptions`]).
    #[must_use]
    pub fn with_options(mut self, chosen: MessageOptions) -> Self {
        match &mut self {
            Self::User { options, .. } | Self::Signal { options, .. } => {
                **options = chosen;
            }
        }
        self
    }

    /// Asks for a structured result matching `schema` (a user message; a signal is returned
    /// unchanged).
    #[must_use]
    pub fn with_result(mut self, schema: serde_json::Value) -> Self {
        if let Self::User { result, .. } = &mut self {
            *result = Some(schema);
        }
        self
    }

    /// The JSON Schema of the structured result this message asks for, if any.
    pub fn result_schema(&self) -> Option<&serde_json::Value> {
        match self {
            Self::User { result, .. } => result.as_ref(),
            Self::Signal { .. } => None,
        }
    }

    /// A signal without attributes or tag name.
    pub fn signal(signal_type: impl Into<String>, body: impl Into<String>) -> Self {
        Self::Signal {
            signal_type: signal_type.into(),
            body: body.into(),
            attributes: BTreeMap::new(),
            tag_name: None,
            initial_data: None,
            options: Box::default(),
        }
    }

    /// The creation data this message carries (see [`DeliveredMessage::with_initial_data`]).
    pub fn initial_data(&self) -> Option<&serde_json::Value> {
        match self {
            Self::User { initial_data, .. } | Self::Signal { initial_data, .. } => {
                initial_data.as_ref()
            }
        }
    }

    /// Attaches creation data: the first message to reach a conversation seeds its state with
    /// it (a JSON object); later messages' data is ignored.
    #[must_use]
    pub fn with_initial_data(mut self, data: serde_json::Value) -> Self {
        match &mut self {
            Self::User { initial_data, .. } | Self::Signal { initial_data, .. } => {
                *initial_data = Some(data);
            }
        }
        self
    }

    /// Takes the creation data out of the message.
    pub fn take_initial_data(&mut self) -> Option<serde_json::Value> {
        match self {
            Self::User { initial_data, .. } | Self::Signal { initial_data, .. } => {
                initial_data.take()
            }
        }
    }

    /// The session record of this message: user text and images, or a signal's envelope (an
    /// element named by its tag name, `signal` by default, with its type and attributes, values
    /// escaped, around the body).
    pub fn to_user_message(&self) -> UserMessage {
        self.clone().into_user_message()
    }

    /// [`DeliveredMessage::to_user_message`], taking the message: a user message's text and
    /// images move into the record instead of being copied.
    pub fn into_user_message(self) -> UserMessage {
        match self {
            Self::User { body, images, .. } => {
                let mut content = Vec::with_capacity(1 + images.len());
                content.push(UserContent::Text { text: body });
                content.extend(images.into_iter().map(UserContent::Image));
                UserMessage { content }
            }
            Self::Signal {
                signal_type,
                body,
                attributes,
                tag_name,
                ..
            } => {
                let tag = tag_name.as_deref().unwrap_or("signal");
                let mut open = format!("<{tag} type=\"{}\"", escape_attribute(&signal_type));
                for (name, value) in &attributes {
                    open.push_str(&format!(" {name}=\"{}\"", escape_attribute(value)));
                }
                UserMessage::text(format!("{open}>\n{body}\n</{tag}>"))
            }
        }
    }
}

/// Which incarnation of a conversation a dispatch may reach (the HTTP `uid` send condition).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum SendCondition {
    /// Deliver to whatever exists, creating the conversation when absent (the default).
    #[default]
    Any,
    /// Deliver only to the incarnation with this uid; a missing conversation or another uid
    /// fails with `FlueError::AgentInstanceNotFound`.
    Uid(String),
    /// Create only: an existing conversation fails with
    /// `FlueError::AgentInstanceExists`, which names its uid.
    Create,
}

/// What happens when the conversation already has unsettled work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WhenBusy {
    /// Queue behind it (the default): submissions run one at a time, first in first out.
    #[default]
    Queue,
    /// Admit nothing and fail with `FlueError::ConversationBusy`, which names the
    /// running owner.
    Fail,
}

/// Options of one dispatch. Builder-lite: start from `DispatchOptions::default()`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DispatchOptions {
    /// Idempotency key: the same key with the same message returns the first receipt (marked
    /// `deduplicated`); the same key with another message is `FlueError::SubmissionConflict`.
    /// Scoped to the conversation.
    pub idempotency_key: Option<String>,
    /// Which incarnation may receive the message.
    pub condition: SendCondition,
    /// What to do when the conversation is busy.
    pub when_busy: WhenBusy,
    /// The caller's W3C `traceparent` (`00-<trace id>-<span id>-<flags>`), stored with the
    /// submission so that an attempt started by another process (after a restart, or on
    /// another node) joins the caller's trace. An invalid value is dropped at admission.
    pub trace_parent: Option<String>,
    /// Budgets of this submission and its conversation, over the agent's: each limit set here
    /// replaces the agent's (see [`Budget`]). Stored with the submission, so that whichever
    /// process runs it applies them.
    pub budget: Option<Budget>,
}

impl DispatchOptions {
    /// Sets the budgets of this submission (see [`DispatchOptions::budget`]).
    #[must_use]
    pub fn with_budget(mut self, budget: Budget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Sets the idempotency key.
    #[must_use]
    pub fn with_idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// Sets the send condition.
    #[must_use]
    pub fn with_condition(mut self, condition: SendCondition) -> Self {
        self.condition = condition;
        self
    }

    /// Sets what happens when the conversation is busy.
    #[must_use]
    pub fn with_when_busy(mut self, when_busy: WhenBusy) -> Self {
        self.when_busy = when_busy;
        self
    }

    /// Sets the caller's W3C `traceparent` (see [`DispatchOptions::trace_parent`]).
    #[must_use]
    pub fn with_trace_parent(mut self, trace_parent: impl Into<String>) -> Self {
        self.trace_parent = Some(trace_parent.into());
        self
    }
}

/// A position in a conversation's stream: the sequence number of the last batch it includes.
///
/// [`Offset::START`] (0) is "before the first batch"; the first batch is 1, and every append to
/// the conversation (session records, submission lifecycle) takes the next number. Reads are
/// exclusive: reading from an offset returns the batches after it.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Offset(pub u64);

impl Offset {
    /// Before the first batch.
    pub const START: Offset = Offset(0);

    /// The wire form of the TypeScript Flue protocol: `0000000000000000_<16-digit sequence>`.
    pub fn to_wire(self) -> String {
        format!("{:016}_{:016}", 0, self.0)
    }

    /// Parses the wire form; `-1` is [`Offset::START`]. `None` for anything else.
    pub fn parse_wire(text: &str) -> Option<Self> {
        if text == "-1" {
            return Some(Self::START);
        }
        let (high, low) = text.split_once('_')?;
        let all_digits = |part: &str| part.len() == 16 && part.bytes().all(|b| b.is_ascii_digit());
        if !all_digits(high) || !all_digits(low) || high.bytes().any(|b| b != b'0') {
            return None;
        }
        low.parse().ok().map(Offset)
    }
}

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// What flue-core's `AgentRuntime::dispatch` returns once the message is durable.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DispatchReceipt {
    /// The submission's id: await it, read its status, match its settlement.
    pub submission_id: String,
    /// When it was admitted, ms since the epoch (the first admission's, when deduplicated).
    pub accepted_at: u64,
    /// The conversation incarnation's uid (minted with the conversation's first message).
    pub uid: String,
    /// The stream head right after the admission was recorded: reading from here observes
    /// everything the agent does in response, without the history or the admitted message.
    /// For a deduplicated receipt, the offset of the original admission.
    pub offset: Offset,
    /// True when an idempotency key matched an earlier admission of the same message.
    pub deduplicated: bool,
}

/// Where a submission is in its lifecycle.
///
/// `queued -> running -> settled`; `waiting` is reserved for pauses (a tool awaiting
/// confirmation) and not produced yet. Grows over time: match with a wildcard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SubmissionState {
    /// Admitted, waiting for its turn (or for an owner after a crash).
    Queued,
    /// An attempt is running it.
    Running,
    /// Paused on tool calls that wait for a decision: no process owns it, waiting time does
    /// not count against `timeout_ms`, and any process resumes it by resolving an action.
    Waiting,
    /// Terminal: see its [`Settlement`].
    Settled,
}

impl SubmissionState {
    /// The state's wire name (`queued`, `running`, `waiting`, `settled`), as stores keep it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Waiting => "waiting",
            Self::Settled => "settled",
        }
    }
}

/// A submission's terminal outcome, written once (the first terminal state wins).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Settlement {
    /// The submission.
    pub submission_id: String,
    /// `completed`, `failed` or `aborted`.
    pub outcome: Outcome,
    /// The final answer's text, when completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The validated structured result, when the message asked for one (its `result` schema
    /// or the agent's) and the submission completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
    /// Why it failed or was aborted (`submission_timeout`, `submission_retry_exhausted`,
    /// `submission_interrupted`, `submission_aborted`, or the operation's own error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
    /// Attempts used, across restarts.
    pub attempts: u32,
    /// When it settled, ms since the epoch.
    pub settled_at: u64,
}

/// Everything known about one submission, from any process.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubmissionInfo {
    /// The submission id.
    pub submission_id: String,
    /// Its conversation.
    pub conversation: ConversationKey,
    /// Lifecycle state.
    pub state: SubmissionState,
    /// The admitted message.
    pub message: DeliveredMessage,
    /// Admission time, ms since the epoch.
    pub accepted_at: u64,
    /// Admission order within the conversation (1-based).
    pub position: u64,
    /// Attempts started so far (0 while first queued).
    pub attempts: u32,
    /// Start of the first attempt, ms since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_started_at: Option<u64>,
    /// True once its message was appended to the session log (durable input).
    pub input_applied: bool,
    /// True once an abort was requested.
    pub abort_requested: bool,
    /// The durability limits in force, stored at its first attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub durability: Option<DurabilityConfig>,
    /// The idempotency key it was admitted with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// The caller's W3C `traceparent` it was admitted with (validated), if any: attempts that
    /// another process starts join that trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_parent: Option<String>,
    /// The budgets it was admitted with ([`DispatchOptions::budget`]), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// The settlement, once settled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settlement: Option<Settlement>,
}

/// A conversation's head and ownership, from any process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConversationInfo {
    /// The conversation.
    pub key: ConversationKey,
    /// The incarnation's uid.
    pub uid: String,
    /// The stream head (the last batch's offset).
    pub head: Offset,
    /// Creation time, ms since the epoch.
    pub created_at: u64,
    /// The current owner id, while one holds it (it may be dead: see the store's liveness).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The fencing epoch: bumped every time ownership is taken.
    pub epoch: u64,
    /// Submissions not settled yet.
    pub unsettled: u64,
}

/// One batch of a conversation's stream: everything one append wrote, under one offset.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StreamBatch {
    /// This batch's offset (its sequence number).
    pub offset: Offset,
    /// When it was written, ms since the epoch.
    pub at: u64,
    /// The submission being processed when it was written, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submission_id: Option<String>,
    /// What it holds.
    pub body: BatchBody,
}

/// What a stream batch holds. Grows over time: match with a wildcard.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum BatchBody {
    /// The conversation was created (its first batch).
    Created {
        /// The new incarnation's uid.
        uid: String,
    },
    /// A message was admitted as a submission (the message is not in any session log yet).
    Admitted {
        /// The submission.
        submission_id: String,
        /// The message.
        message: DeliveredMessage,
        /// Admission time, ms since the epoch.
        accepted_at: u64,
    },
    /// An attempt started running a submission.
    Started {
        /// The submission.
        submission_id: String,
        /// Attempt number, 1-based, counted across restarts.
        attempt: u32,
    },
    /// Records appended to one of the conversation's sessions (the root session or a task's).
    Records {
        /// Session name.
        session: String,
        /// Index of the first record in its session log.
        first_index: u64,
        /// The records.
        records: Vec<StoredRecord>,
    },
    /// An abort was requested for these unsettled submissions.
    AbortRequested {
        /// The submissions that will settle `aborted`.
        submission_ids: Vec<String>,
    },
    /// A submission paused on pending actions (it is `waiting`).
    Waiting {
        /// The submission.
        submission_id: String,
        /// The pending action ids.
        actions: Vec<String>,
    },
    /// A submission settled.
    Settled(Settlement),
}

/// A page of a conversation's stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StreamPage {
    /// Batches after the requested offset, in order (at most the requested limit).
    pub batches: Vec<StreamBatch>,
    /// The offset to read from next (the last batch's, or the requested one when empty).
    pub next_offset: Offset,
    /// True when the page reached the head at the time it was read.
    pub up_to_date: bool,
}

/// Whether a message's options choose nothing (boxed: most messages have none, and a
/// message stays small).
fn no_options<T: AsRef<MessageOptions>>(options: &T) -> bool {
    options.as_ref().is_empty()
}

fn escape_attribute(value: &str) -> String {
    value
        .replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
