//! The protocol's wire shapes: request bodies, the admission, snapshots, update chunks and
//! offsets. Data only; it imports nothing else from this crate, so the shapes can be read (and
//! reviewed as API) in one place. Field names follow the TypeScript Flue 2.x protocol exactly
//! (camelCase, `type` tags in kebab-case).

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A position in a conversation's stream: the number of batches before it.
///
/// On the wire it is two 16-digit zero-padded integers joined by `_`, the first always 0
/// (`0000000000000000_0000000000000003`); `-1` means "before the first batch".
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Offset(pub u64);

impl Offset {
    /// Before the first batch (`-1` on the wire, also `0000000000000000_0000000000000000`).
    pub const START: Offset = Offset(0);

    /// Parses `-1` or the two-component form; `None` for anything else.
    pub fn parse(text: &str) -> Option<Offset> {
        if text == "-1" {
            return Some(Offset::START);
        }
        let (high, low) = text.split_once('_')?;
        let digits = |part: &str| part.len() == 16 && part.bytes().all(|b| b.is_ascii_digit());
        if !digits(high) || !digits(low) || high.bytes().any(|b| b != b'0') {
            return None;
        }
        low.parse().ok().map(Offset)
    }
}

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016}_{:016}", 0, self.0)
    }
}

/// The body of `POST /agents/<agent>/<id>`: a delivered message plus the reserved siblings.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptBody {
    /// `user` or `signal`.
    pub kind: String,
    /// The text (a user turn or the signal's payload).
    pub body: Option<Value>,
    /// Images of a user turn.
    #[serde(default)]
    pub attachments: Option<Vec<Value>>,
    /// A signal's type.
    #[serde(rename = "type")]
    pub signal_type: Option<Value>,
    /// A signal's attributes.
    pub attributes: Option<Value>,
    /// A signal's envelope tag.
    pub tag_name: Option<Value>,
    /// Instance-creation data (refused: no per-conversation data is kept yet).
    pub initial_data: Option<Value>,
    /// The send condition: absent (field missing), `null` (create only) or a uid.
    #[serde(default, deserialize_with = "present")]
    pub uid: Option<Value>,
    /// The caller's name for this delivery: a retried send with the same key and message gets
    /// the first submission's receipt (`deduplicated`), with another message a 409
    /// `submission_conflict`.
    pub idempotency_key: Option<Value>,
    /// Addition: budgets of this submission and its conversation, over the agent's
    /// (`{maxCostUsd?, maxTurns?, conversation?: {maxCostUsd?, maxTurns?}}`).
    pub budget: Option<Value>,
    /// Whose memory the conversation uses (a user id), bound to the conversation once, before
    /// the message is admitted.
    pub memory_subject: Option<Value>,
    /// JSON Schema of a structured result (a user message): the settlement then carries the
    /// validated `data`.
    pub result: Option<Value>,
    /// Addition: the model of this message's run (`<provider>/<model>`).
    pub model: Option<Value>,
    /// Addition: the thinking level of this message's run.
    pub thinking: Option<Value>,
    /// Addition: the role of this message's run.
    pub role: Option<Value>,
    /// Addition: a skill this (user) message runs.
    pub skill: Option<Value>,
    /// Addition: the skill's arguments (with `skill`).
    pub args: Option<Value>,
}

/// Distinguishes a missing field (`None`) from an explicit `null` (`Some(Value::Null)`).
fn present<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

/// The 202 admission.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionResponse {
    /// The conversation's read URL (the request URL without its query).
    pub stream_url: String,
    /// The durable head right after the admitted message.
    pub offset: String,
    /// Identity of this delivery's settlement.
    pub submission_id: String,
    /// The contacted incarnation's uid.
    pub uid: String,
    /// `true` when the send's `idempotencyKey` matched an earlier submission of the same
    /// message: the receipt is that submission's, and nothing new was admitted. Absent
    /// otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deduplicated: Option<bool>,
}

/// `POST .../abort`'s answer.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct AbortResponse {
    /// True when running or queued work existed and is now being aborted.
    pub aborted: bool,
}

/// The answer to `DELETE /agents/<agent>/<id>`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct DeleteResponse {
    /// True when the conversation existed and is now deleted; false when there was none.
    pub deleted: bool,
}

/// One materialized conversation.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    /// Always 1.
    pub v: u32,
    /// The conversation's id (`<agent>/<id>`).
    pub conversation_id: String,
    /// The head this snapshot was reduced through.
    pub offset: String,
    /// The transcript in order.
    pub messages: Vec<Message>,
    /// Terminal outcomes of settled submissions.
    pub settlements: Vec<Settlement>,
    /// The stream's incarnation (the official client compares it with `stream-checkpoint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incarnation: Option<String>,
}

/// One message of a snapshot.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    /// Stable message identity.
    pub id: String,
    /// `user`, `assistant` or `system`.
    pub role: String,
    /// `user`, `assistant`, `dispatch` or `advisory`.
    pub purpose: String,
    /// `visible`, `hidden` or `diagnostic`.
    pub display: String,
    /// The submission that produced the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submission_id: Option<String>,
    /// The model round trip that produced it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
    /// Signal detail (system messages from signals only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<Value>,
    /// The terminal advisory of a failed or aborted submission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settlement: Option<Value>,
    /// Renderable parts.
    pub parts: Vec<Value>,
}

/// A settled submission.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Settlement {
    /// The submission.
    pub submission_id: String,
    /// `completed`, `failed` or `aborted`.
    pub outcome: String,
    /// The caller-safe error of a failed or aborted submission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
    /// The submission whose reply answered this one (itself, here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_by_submission_id: Option<String>,
    /// The validated structured result, when the message (or the agent) asked for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

/// Where a chunk was projected from: the batch's ordinal and the chunk's index within it.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct Position {
    /// The batch (its offset once written).
    pub batch: u64,
    /// Index within the batch's projection.
    pub index: u32,
}

/// The control event of an SSE stream.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Control {
    /// The offset to resume from.
    pub stream_next_offset: String,
    /// Present (true) only when caught up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up_to_date: Option<bool>,
}

/// The error envelope's body.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ErrorBody {
    /// Stable machine-readable category.
    #[serde(rename = "type")]
    pub kind: String,
    /// One caller-safe sentence.
    pub message: String,
    /// Longer caller-safe prose.
    pub details: String,
    /// Structured data, when the error carries it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
}

/// `{ "error": ... }`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ErrorEnvelope {
    /// The error.
    pub error: ErrorBody,
}

/// What one chunk of the updates view says, without its `conversationId` and `position`
/// (added when the chunk is sent). This is also what a runtime records in a conversation's
/// stream, so projecting a batch is adding those two fields.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(
    tag = "type",
    rename_all = "kebab-case",
    rename_all_fields = "camelCase"
)]
#[non_exhaustive]
pub enum ChunkBody {
    /// Replace all state with the snapshot.
    ConversationReset {
        /// The snapshot.
        snapshot: Box<Snapshot>,
    },
    /// A complete message (a user turn, a signal, an advisory).
    MessageAppended {
        /// The message.
        message: Message,
    },
    /// An assistant response opened (or continues, for a known id).
    MessageStarted {
        /// The response's message id.
        message_id: String,
        /// Its submission.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        submission_id: Option<String>,
        /// The model round trip.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        turn_id: Option<String>,
        /// Capture time (ISO 8601).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timestamp: Option<String>,
    },
    /// A named data part (task activity, compaction).
    DataPart {
        /// The response's message id.
        message_id: String,
        /// The part is `data-<name>`.
        name: String,
        /// Its payload.
        data: Value,
    },
    /// Streamed text or reasoning.
    MessageDelta {
        /// The response's message id.
        message_id: String,
        /// `text` or `reasoning`.
        kind: String,
        /// The new text.
        delta: String,
    },
    /// A tool call was recorded.
    ToolInput {
        /// The response's message id.
        message_id: String,
        /// Call id.
        tool_call_id: String,
        /// Tool name.
        tool_name: String,
        /// The model's input.
        input: Value,
        /// Capture time.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timestamp: Option<String>,
    },
    /// A tool call succeeded.
    ToolOutput {
        /// Call id.
        tool_call_id: String,
        /// The result.
        output: Value,
        /// Handler time.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        duration_ms: Option<u64>,
        /// Capture time.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timestamp: Option<String>,
    },
    /// A tool call failed.
    ToolOutputError {
        /// Call id.
        tool_call_id: String,
        /// What went wrong.
        error_text: String,
        /// Handler time.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        duration_ms: Option<u64>,
        /// Capture time.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timestamp: Option<String>,
    },
    /// The assistant response closed.
    MessageCompleted {
        /// The response's message id.
        message_id: String,
        /// Capture time.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timestamp: Option<String>,
    },
    /// A submission's terminal outcome.
    SubmissionSettled {
        /// The submission.
        submission_id: String,
        /// `completed`, `failed` or `aborted`.
        outcome: String,
        /// The caller-safe error.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<Value>,
        /// The submission whose reply answered it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answered_by_submission_id: Option<String>,
        /// The validated structured result, when one was asked for.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data: Option<Value>,
        /// Capture time.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timestamp: Option<String>,
    },
}

/// One update chunk as sent: the body plus where it came from.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Chunk<'a> {
    /// The chunk.
    #[serde(flatten)]
    pub body: &'a ChunkBody,
    /// The conversation.
    pub conversation_id: &'a str,
    /// Batch and index.
    pub position: Position,
}

/// The leading chunk of every updates response: the stream's incarnation. A client that sees
/// it change knows offsets it holds belong to an earlier stream and re-reads from a snapshot.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Checkpoint<'a> {
    /// Always `stream-checkpoint`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The incarnation.
    pub incarnation: &'a str,
}
