//! Durable submissions: admission, one-at-a-time processing, settlement and crash recovery.
//!
//! [`AgentRuntime::dispatch`] stores a message durably as a *submission* of a conversation
//! (agent + id) and returns a [`DispatchReceipt`] without waiting for the model. Submissions of
//! one conversation run one at a time, first in first out, each settled exactly once
//! (`completed`, `failed` or `aborted`; the first terminal state wins). The runtime of some
//! process owns a conversation while it works on it (fenced, leased ownership in the
//! [`ConversationStore`]); when that process dies, the next runtime on the store resumes the
//! work from the durable records alone.
//!
//! Harnesses come from an [`AgentRegistry`] (the assembly layer of a workspace or bundle, or an
//! embedder's code): the runtime asks it for a [`HarnessBuilder`](crate::HarnessBuilder) per
//! agent, then sets the conversation's instance id and a fenced view of its store.
//!
//! [`ConversationStore`]: crate::ConversationStore

mod driver;
mod fenced;
mod registry;
mod runtime;
mod wire;

pub use registry::{AgentRegistry, StaticAgents};
pub use runtime::{AgentRuntime, AgentRuntimeBuilder, RuntimeEvent};
pub use wire::{
    BatchBody, ConversationInfo, ConversationKey, DeliveredMessage, DispatchOptions,
    DispatchReceipt, Offset, SendCondition, Settlement, StreamBatch, StreamPage, SubmissionInfo,
    SubmissionState, WhenBusy,
};

use crate::error::{FlueError, Result};

/// Checks a conversation id: 1 to 256 bytes, not only whitespace, no control characters.
///
/// The one validation every entry point uses (dispatch, the CLI's `--id`, the HTTP route).
pub fn check_conversation_id(id: &str) -> Result<()> {
    let reason = if id.is_empty() {
        "a conversation id must not be empty"
    } else if id.len() > 256 {
        "a conversation id must be at most 256 bytes"
    } else if id.trim().is_empty() {
        "a conversation id must not be only whitespace"
    } else if id.chars().any(char::is_control) {
        "a conversation id must not contain control characters"
    } else {
        return Ok(());
    };
    Err(FlueError::InvalidConversationId {
        id: id.to_owned(),
        reason: reason.to_owned(),
    })
}

/// Checks what a message must satisfy before admission: a non-empty signal type, and tag and
/// attribute names that are XML names (`^[A-Za-z_][A-Za-z0-9_.-]*$`), since they are rendered
/// unescaped into the model's context.
pub(crate) fn check_message(message: &DeliveredMessage) -> Result<()> {
    let DeliveredMessage::Signal {
        signal_type,
        attributes,
        tag_name,
        ..
    } = message
    else {
        return Ok(());
    };
    if signal_type.trim().is_empty() {
        return Err(FlueError::InvalidRequest {
            message: "a signal's `type` must not be empty".into(),
        });
    }
    if let Some(tag_name) = tag_name
        && !is_xml_name(tag_name)
    {
        return Err(FlueError::InvalidRequest {
            message: format!(
                "signal tag name {tag_name:?} is not allowed: use letters, digits, `_`, `.` and \
                 `-`, starting with a letter or `_`"
            ),
        });
    }
    if let Some(name) = attributes
        .keys()
        .find(|name| !is_xml_name(name) || *name == "type")
    {
        return Err(FlueError::InvalidRequest {
            message: format!(
                "signal attribute name {name:?} is not allowed: use letters, digits, `_`, `.` \
                 and `-`, starting with a letter or `_` (and not `type`)"
            ),
        });
    }
    Ok(())
}

fn is_xml_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}
