//! What the router needs from a runtime: admission, one ordered stream of batches per
//! conversation readable from an offset, a wake-up when it grows, abort and submission status.
//!
//! The router never reaches into sessions; it renders what [`Backend`] hands it. The crate's
//! [`LocalRuntime`](crate::LocalRuntime) implements it over flue-core sessions; a durable
//! submissions runtime implements the same trait.

use std::sync::Arc;

use flue_core::BoxFuture;
use serde::Serialize;
use serde_json::Value;

use crate::wire::{ChunkBody, Offset};

/// One conversation: an agent and the caller-chosen id.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ConversationKey {
    /// The agent's name.
    pub agent: String,
    /// The caller-chosen id.
    pub id: String,
}

impl ConversationKey {
    /// `<agent>/<id>`: how the conversation is named on the wire and in logs (the store's
    /// instance id is flue-core's `ConversationKey::instance_id`).
    pub fn conversation_id(&self) -> String {
        format!("{}/{}", self.agent, self.id)
    }
}

/// An agent the server serves (`GET /_flue/agents`).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct AgentInfo {
    /// Its name (the URL segment).
    pub name: String,
    /// Its description, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its model specifier, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// A validated delivered message.
#[derive(Clone, Debug, PartialEq)]
pub enum Delivered {
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
pub struct Attachment {
    /// Base64 data.
    pub data: String,
    /// MIME type.
    pub mime_type: String,
    /// The uploader's name for it.
    pub filename: Option<String>,
}

/// One stored attachment, as `GET .../attachments/<id>` serves it.
#[derive(Clone, Debug, PartialEq)]
pub struct AttachmentBytes {
    /// The MIME type the uploader gave.
    pub mime_type: String,
    /// The decoded bytes.
    pub bytes: Vec<u8>,
}

/// The send condition.
#[derive(Clone, Debug, PartialEq)]
pub enum SendCondition {
    /// Deliver, creating the conversation if needed.
    Any,
    /// Create only: fail with [`BackendError::InstanceExists`] when it exists.
    CreateOnly,
    /// Deliver only to this incarnation: else [`BackendError::InstanceNotFound`].
    Uid(String),
}

/// One admission request.
#[derive(Clone, Debug, PartialEq)]
pub struct Delivery {
    /// The message.
    pub message: Delivered,
    /// The condition.
    pub condition: SendCondition,
    /// Creation data (consulted only when this send creates the conversation).
    pub initial_data: Option<Value>,
    /// The request's W3C `traceparent` header, if any: a durable backend stores it (when
    /// valid) so that an attempt another process runs joins the caller's trace.
    pub trace_parent: Option<String>,
}

/// A durable admission.
#[derive(Clone, Debug, PartialEq)]
pub struct Admitted {
    /// The submission's id.
    pub submission_id: String,
    /// The incarnation's uid.
    pub uid: String,
    /// The head after the admitted message was recorded.
    pub offset: Offset,
}

/// One appended batch: its offset (the head once it was written) and its chunks.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    /// This batch's ordinal: reading after `offset - 1` returns it.
    pub offset: Offset,
    /// What it says, in order. May be empty (an internal batch).
    pub chunks: Vec<ChunkBody>,
    /// The submission whose model turn (text or reasoning) this batch records, when it does:
    /// a reader that reads it sends no more live chunks of that turn.
    pub ends_live_turn: Option<String>,
    /// True when live chunks of that turn may have reached a reader: updates then send the
    /// batch as a `conversation-reset` (the snapshot through it), never its deltas again.
    pub replaces_live: bool,
}

impl Batch {
    /// A batch of chunks with no live turn.
    pub fn new(offset: Offset, chunks: Vec<ChunkBody>) -> Self {
        Self {
            offset,
            chunks,
            ends_live_turn: None,
            replaces_live: false,
        }
    }
}

/// Where an SSE reader is in the live output: the turn and how many of its chunks it sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveCursor {
    /// The turn's number (0: none yet).
    pub turn: u64,
    /// Chunks of that turn already sent.
    pub index: usize,
}

/// Chunks of the model turn in progress, not yet durable (see [`Backend::live`]).
#[derive(Clone, Debug, PartialEq)]
pub struct LiveChunks {
    /// The turn's number (grows; a new number is a new turn).
    pub turn: u64,
    /// Its submission.
    pub submission_id: String,
    /// The index of `chunks[0]` within the turn.
    pub first_index: usize,
    /// `message-started` then `message-delta`s, in order.
    pub chunks: Vec<ChunkBody>,
}

/// The result of one read.
#[derive(Clone, Debug, PartialEq)]
pub struct Page {
    /// The batches after the requested offset, at most the requested number.
    pub batches: Vec<Arc<Batch>>,
    /// The durable head when the read ran; when more batches are waiting than were returned,
    /// it may be a lower bound (at least one past the last batch returned).
    pub head: Offset,
    /// The stream's incarnation: changes when the stream was rebuilt (offsets do not carry
    /// over).
    pub incarnation: Arc<str>,
}

/// Where a submission is.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SubmissionStatus {
    /// The submission.
    pub submission_id: String,
    /// `queued`, `running` or `settled`.
    pub state: &'static str,
    /// The outcome once settled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// The caller-safe error of a failed or aborted submission.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
}

/// Why a backend call failed; the router maps each to its protocol error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
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
    /// The conversation waits for decisions and takes no new message.
    #[error("the conversation waits for decisions on {}", .0.join(", "))]
    ActionsPending(Vec<String>),
    /// Anything else (logged, never sent).
    #[error(transparent)]
    Internal(#[from] flue_core::FlueError),
}

/// A decision on a pending action, as `POST /agents/<agent>/<id>/actions/<action>` takes it.
pub type Decision = flue_core::ActionDecision;

/// A stored decision.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    /// The submission it resumed, if one was waiting.
    pub submission_id: Option<String>,
    /// The head after the decision was recorded.
    pub offset: Offset,
}

/// What an interrupt did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Interrupted {
    /// The actions answered as interrupted.
    pub interrupted: Vec<String>,
    /// The waiting submission it settled as aborted, if any.
    pub settled: Option<String>,
    /// The submission of the new message, when one came with the interrupt.
    pub submission_id: Option<String>,
}

/// A runtime the router serves. Implementations must answer reads without waiting for the
/// agent (reads never block writers and writers never wait for readers).
pub trait Backend: Send + Sync + 'static {
    /// Every agent served.
    fn agents(&self) -> Vec<AgentInfo>;

    /// True when `agent` is served.
    fn has_agent(&self, agent: &str) -> bool;

    /// Admits one message durably; returns once it is recorded.
    fn dispatch<'a>(
        &'a self,
        key: &'a ConversationKey,
        delivery: Delivery,
    ) -> BoxFuture<'a, Result<Admitted, BackendError>>;

    /// Up to `max_batches` batches after `after`.
    fn read<'a>(
        &'a self,
        key: &'a ConversationKey,
        after: Offset,
        max_batches: usize,
    ) -> BoxFuture<'a, Result<Page, BackendError>>;

    /// The durable head (`StreamNotFound` for a conversation that never received a message).
    fn head<'a>(&'a self, key: &'a ConversationKey) -> BoxFuture<'a, Result<Offset, BackendError>>;

    /// Resolves once the head passes `after` (maybe spuriously; callers re-read). Callers
    /// bound the wait with their own timeout; dropping the future unsubscribes.
    fn changed<'a>(&'a self, key: &'a ConversationKey, after: Offset) -> BoxFuture<'a, ()>;

    /// Aborts the running submission and everything queued. True when there was work.
    fn abort<'a>(&'a self, key: &'a ConversationKey) -> BoxFuture<'a, Result<bool, BackendError>>;

    /// One attachment of a message admitted to this conversation (its id is the `file` part's
    /// `id`); `None` when the conversation has no such attachment. Callers check that the
    /// conversation exists first.
    fn attachment<'a>(
        &'a self,
        key: &'a ConversationKey,
        attachment_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<AttachmentBytes>, BackendError>>;

    /// The live chunks after `cursor` of the model turn in progress, when the runtime streams
    /// model output ahead of its durable records; `None` when there is none. The default
    /// streams nothing live (every chunk comes from a durable batch).
    fn live(&self, key: &ConversationKey, cursor: LiveCursor) -> Option<LiveChunks> {
        let _ = (key, cursor);
        None
    }

    /// Resolves when the live output of `key` may have changed (callers re-read). The
    /// default never resolves.
    fn live_changed<'a>(&'a self, key: &'a ConversationKey) -> BoxFuture<'a, ()> {
        let _ = key;
        Box::pin(std::future::pending())
    }

    /// Called before live chunks of `submission_id` are sent to a reader, so that its durable
    /// turns are sent as resets from then on ([`Batch::replaces_live`]).
    fn mark_streamed(&self, submission_id: &str) {
        let _ = submission_id;
    }

    /// A submission's state, `None` when the conversation has no such submission.
    fn submission<'a>(
        &'a self,
        key: &'a ConversationKey,
        submission_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<SubmissionStatus>, BackendError>>;

    /// The conversation's tool calls that waited for a decision, pending and decided, in
    /// order (`StreamNotFound` for a conversation that never received a message). The default
    /// is for backends without pauses: none.
    fn actions<'a>(
        &'a self,
        key: &'a ConversationKey,
    ) -> BoxFuture<'a, Result<Vec<flue_core::ActionInfo>, BackendError>> {
        Box::pin(async move {
            self.head(key).await?;
            Ok(Vec::new())
        })
    }

    /// Answers every pending action as interrupted (settling a waiting submission as
    /// aborted), then admits `message` as a new user message when there is one; returns once
    /// both are durable. The default is for backends without pauses: nothing to interrupt;
    /// the message is dispatched as any other.
    fn interrupt<'a>(
        &'a self,
        key: &'a ConversationKey,
        message: Option<String>,
    ) -> BoxFuture<'a, Result<Interrupted, BackendError>> {
        Box::pin(async move {
            self.head(key).await?;
            let submission_id = match message {
                Some(text) => {
                    let delivery = Delivery {
                        message: Delivered::User {
                            text,
                            images: Vec::new(),
                        },
                        condition: SendCondition::Any,
                        initial_data: None,
                        trace_parent: None,
                    };
                    Some(self.dispatch(key, delivery).await?.submission_id)
                }
                None => None,
            };
            Ok(Interrupted {
                submission_id,
                ..Interrupted::default()
            })
        })
    }

    /// Decides one pending action and resumes the conversation; returns once the decision is
    /// durable. The default is for backends without pauses: `ActionNotFound`.
    fn resolve<'a>(
        &'a self,
        key: &'a ConversationKey,
        action_id: &'a str,
        _decision: Decision,
    ) -> BoxFuture<'a, Result<Resolved, BackendError>> {
        Box::pin(async move {
            self.head(key).await?;
            Err(BackendError::ActionNotFound {
                conversation: key.conversation_id(),
                action_id: action_id.to_owned(),
            })
        })
    }
}
