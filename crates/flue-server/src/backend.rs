//! What the router and the durable runtime hand each other: a validated delivery, admissions,
//! pages of projected batches, live chunks, submission status and the errors the router maps
//! onto the protocol's.
//!
//! The router never reaches into sessions; it renders what
//! [`DurableRuntime`](crate::DurableRuntime) hands it in these shapes.

use std::sync::Arc;

use flue_core::submission::SendCondition;
use serde::Serialize;
use serde_json::Value;

use crate::wire::{ChunkBody, Offset};

/// A validated delivered message.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Delivered {
    /// A user chat turn.
    User {
        /// The text.
        text: String,
        /// Images, base64.
        images: Vec<Attachment>,
    },
    /// A structured event.
    Signal {
        /// Its type (non-empty).
        signal_type: String,
        /// Its payload.
        body: String,
        /// Its attributes.
        attributes: Vec<(String, String)>,
        /// The envelope tag (a valid XML name).
        tag_name: Option<String>,
    },
}

/// One image of a user turn.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Attachment {
    /// Base64 data.
    pub(crate) data: String,
    /// MIME type.
    pub(crate) mime_type: String,
    /// The uploader's name for it.
    pub(crate) filename: Option<String>,
}

/// One stored attachment, as `GET .../attachments/<id>` serves it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct AttachmentBytes {
    /// The MIME type the uploader gave.
    pub(crate) mime_type: String,
    /// The decoded bytes.
    pub(crate) bytes: Vec<u8>,
}

/// One admission request.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Delivery {
    /// The message.
    pub(crate) message: Delivered,
    /// The condition.
    pub(crate) condition: SendCondition,
    /// The caller's idempotency key (scoped to the conversation).
    pub(crate) idempotency_key: Option<String>,
    /// The request's W3C `traceparent` header, if any: a durable backend stores it (when
    /// valid) so that an attempt another process runs joins the caller's trace.
    pub(crate) trace_parent: Option<String>,
    /// The message's budgets, over the agent's.
    pub(crate) budget: Option<flue_core::Budget>,
    /// The conversation's memory subject (`memorySubject`), bound before admission.
    pub(crate) memory_subject: Option<String>,
    /// JSON Schema of a structured result (user messages only; checked at admission).
    pub(crate) result: Option<Value>,
    /// Creation data (`initialData`): seeds the conversation's state when this is the first
    /// message to reach it.
    pub(crate) initial_data: Option<serde_json::Value>,
    /// What the message chooses for its run (model, thinking, role, skill and its arguments).
    pub(crate) options: flue_core::MessageOptions,
}

/// A durable admission.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Admitted {
    /// The submission's id.
    pub(crate) submission_id: String,
    /// The incarnation's uid.
    pub(crate) uid: String,
    /// The head after the admitted message was recorded (for a deduplicated send, after the
    /// original one was).
    pub(crate) offset: Offset,
    /// True when an idempotency key matched an earlier submission of the same message.
    pub(crate) deduplicated: bool,
}

/// One appended batch: its offset (the head once it was written) and its chunks.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Batch {
    /// This batch's ordinal: reading after `offset - 1` returns it.
    pub(crate) offset: Offset,
    /// What it says, in order. May be empty (an internal batch).
    pub(crate) chunks: Vec<ChunkBody>,
    /// The submission whose model turn (text or reasoning) this batch records, when it does:
    /// a reader that reads it sends no more live chunks of that turn.
    pub(crate) ends_live_turn: Option<String>,
    /// True when live chunks of that turn may have reached a reader: updates then send the
    /// batch as a `conversation-reset` (the snapshot through it), never its deltas again.
    pub(crate) replaces_live: bool,
}

/// Where an SSE reader is in the live output: the turn and how many of its chunks it sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LiveCursor {
    /// The turn's number (0: none yet).
    pub(crate) turn: u64,
    /// Chunks of that turn already sent.
    pub(crate) index: usize,
}

/// Chunks of the model turn in progress, not yet durable (see `DurableRuntime::live`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct LiveChunks {
    /// The turn's number (grows; a new number is a new turn).
    pub(crate) turn: u64,
    /// Its submission.
    pub(crate) submission_id: String,
    /// The index of `chunks[0]` within the turn.
    pub(crate) first_index: usize,
    /// `message-started` then `message-delta`s, in order.
    pub(crate) chunks: Vec<ChunkBody>,
}

/// The result of one read.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Page {
    /// The batches after the requested offset, at most the requested number.
    pub(crate) batches: Vec<Arc<Batch>>,
    /// The durable head when the read ran; when more batches are waiting than were returned,
    /// it may be a lower bound (at least one past the last batch returned).
    pub(crate) head: Offset,
    /// The stream's incarnation: changes when the stream was rebuilt (offsets do not carry
    /// over).
    pub(crate) incarnation: Arc<str>,
}

/// Where a submission is.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SubmissionStatus {
    /// The submission.
    pub(crate) submission_id: String,
    /// `queued`, `running` or `settled`.
    pub(crate) state: &'static str,
    /// The outcome once settled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) outcome: Option<String>,
    /// The caller-safe error of a failed or aborted submission.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<Value>,
    /// The validated structured result of a completed submission that asked for one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) data: Option<Value>,
}

/// Why a backend call failed; the router maps each to its protocol error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum BackendError {
    /// No such agent.
    #[error("unknown agent {0:?}")]
    UnknownAgent(String),
    /// The conversation never received a message.
    #[error("conversation {0:?} was not found")]
    StreamNotFound(String),
    /// A uid condition failed.
    #[error("agent instance {0:?} was not found")]
    InstanceNotFound(String),
    /// A create-only send reached an existing conversation.
    #[error("agent instance {id:?} already exists")]
    InstanceExists {
        /// The conversation.
        id: String,
        /// Its uid.
        uid: String,
    },
    /// A read past the head.
    #[error("offset {offset} is past the head {head} of the conversation's stream")]
    OffsetBeyondHead {
        /// Requested.
        offset: Offset,
        /// The head.
        head: Offset,
    },
    /// The payload is invalid (the message names the field).
    #[error("{0}")]
    InvalidRequest(String),
    /// The runtime is shutting down and admits nothing.
    #[error("the server is shutting down")]
    ShuttingDown,
    /// No such action in the conversation.
    #[error("no action {action_id:?} in conversation {conversation:?}")]
    ActionNotFound {
        /// The conversation.
        conversation: String,
        /// The action asked for.
        action_id: String,
    },
    /// The action was decided already (the first decision wins).
    #[error("action {0:?} was already resolved")]
    ActionAlreadyResolved(String),
    /// An idempotency key was used before with another message.
    #[error("idempotency key {key:?} was used for submission {submission_id} with another message")]
    SubmissionConflict {
        /// The key.
        key: String,
        /// The submission admitted with it.
        submission_id: String,
    },
    /// The conversation waits for decisions and takes no new message.
    #[error("the conversation waits for decisions on {}", .0.join(", "))]
    ActionsPending(Vec<String>),
    /// A delete of a conversation with unsettled submissions.
    #[error("conversation {conversation:?} has {unsettled} unsettled submission(s)")]
    ConversationBusy {
        /// The conversation (`agent/id`).
        conversation: String,
        /// How many submissions are queued, running or waiting.
        unsettled: u64,
    },
    /// Anything else (logged, never sent).
    #[error(transparent)]
    Internal(#[from] flue_core::FlueError),
}

/// A decision on a pending action, as `POST /agents/<agent>/<id>/actions/<action>` takes it.
pub(crate) type Decision = flue_core::ActionDecision;

/// A stored decision.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Resolved {
    /// The submission it resumed, if one was waiting.
    pub(crate) submission_id: Option<String>,
    /// The head after the decision was recorded.
    pub(crate) offset: Offset,
}

/// What an interrupt did.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Interrupted {
    /// The actions answered as interrupted.
    pub(crate) interrupted: Vec<String>,
    /// The waiting submission it settled as aborted, if any.
    pub(crate) settled: Option<String>,
    /// The submission of the new message, when one came with the interrupt.
    pub(crate) submission_id: Option<String>,
}
