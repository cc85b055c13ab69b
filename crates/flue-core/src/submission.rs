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
//! embedder's code): the runtime asks it for a [`HarnessBuilder`](crate::harness::HarnessBuilder) per
//! agent, then sets the conversation's instance id and a fenced view of its store.
//!
//! [`ConversationStore`]: crate::store::ConversationStore

mod actions;
mod background;
mod compact;
mod driver;
mod fenced;
mod registry;
mod runtime;

// The wire types live in flue-protocol; the alias keeps `crate::submission::wire::X` working.
use flue_protocol::submission as wire;

pub use actions::{InterruptReceipt, ResolveReceipt};
pub use background::{
    BackgroundLimits, BackgroundTask, BackgroundTaskInfo, TASK_RESULT_SIGNAL, background_parent,
};
pub use registry::{AgentInfo, AgentRegistry, StaticAgents};
pub use runtime::{AgentRuntime, AgentRuntimeBuilder, RuntimeEvent};
pub use wire::{
    BatchBody, ConversationInfo, ConversationKey, DeliveredMessage, DispatchOptions,
    DispatchReceipt, MessageOptions, Offset, SendCondition, Settlement, StreamBatch, StreamPage,
    SubmissionInfo, SubmissionState, WhenBusy,
};

use crate::error::{FlueError, Result};
use crate::redact::Redactor;

/// Checks a conversation id: the rule of every instance id ([`crate::harness::check_instance_id`]: 1
/// to 128 characters, no whitespace, control or invisible characters, no slash, not `.` or
/// `..`), so CLIs, the HTTP server and dispatch accept the same ids. Refusals are
/// [`FlueError::InvalidInstanceId`] (kind `invalid_id`).
pub fn check_conversation_id(id: &str) -> Result<()> {
    flue_protocol::check_conversation_id(id).map_err(FlueError::from)
}

/// Checks what a message must satisfy before admission: a non-empty signal type, and tag and
/// attribute names that are XML names (`^[A-Za-z_][A-Za-z0-9_.-]*$`), since they are rendered
/// unescaped into the model's context.
pub(crate) fn check_message(message: &DeliveredMessage) -> Result<()> {
    if let Some(schema) = message.result_schema()
        && let Err(problem) = crate::tool::check_schema(schema)
    {
        return Err(FlueError::InvalidRequest {
            message: format!("the message's `result` schema: {problem}; send a JSON Schema object"),
        });
    }
    if let Some(data) = message.initial_data() {
        crate::tool::check_state(data)?;
    }
    let options = message.options();
    if options.skill.is_some() && matches!(message, DeliveredMessage::Signal { .. }) {
        return Err(FlueError::InvalidRequest {
            message: "a signal runs no skill: drop `skill` (and `args`), or send a user message"
                .into(),
        });
    }
    if options.skill.is_none() && !options.args.is_empty() {
        return Err(FlueError::InvalidRequest {
            message: "`args` are a skill's arguments: name the skill in `skill`, or drop `args`"
                .into(),
        });
    }
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

/// Redacts what `redactor` knows from the text of `message` that its session record shows (the
/// body, images, a signal's attribute values, a skill's arguments), as the session's write
/// path redacts that record: the stored submission is served too (the conversation's snapshot
/// and stream), and must not hold a key the user quoted. The `result` schema and
/// `initialData` are the caller's program data, not the message's text, and are kept as sent.
pub(crate) fn redact_message(redactor: &Redactor, message: &mut DeliveredMessage) {
    if redactor.is_empty() {
        return;
    }
    match message {
        DeliveredMessage::User {
            body,
            images,
            options,
            ..
        } => {
            // In place: a large message is scanned, not copied, when it holds no secret.
            redactor.redact_in_place(body);
            for image in images {
                redactor.redact_in_place(&mut image.data);
            }
            for value in options.args.values_mut() {
                redactor.redact_json(value);
            }
        }
        DeliveredMessage::Signal {
            body, attributes, ..
        } => {
            redactor.redact_in_place(body);
            for value in attributes.values_mut() {
                redactor.redact_in_place(value);
            }
        }
        // A kind added later: all of it, through its JSON form.
        _ => {
            redactor.redact_value(message);
        }
    }
}

fn is_xml_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}
