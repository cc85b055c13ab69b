//! Chunks written the same way wherever they come from: the admitted message, a settlement
//! (with the advisory of a failed or aborted one), timestamps, and an action's wire form (the
//! `actions` route lists it, the stream carries it as a `data-action-<id>` part).

use flue_core::util::now_ms;
use serde_json::{Value, json};

use crate::backend::Delivered;
use crate::wire::{ChunkBody, Message};

/// The current time as ISO 8601.
pub(crate) fn timestamp() -> String {
    iso8601(now_ms())
}

/// A settlement's chunks: the advisory message of a failed or aborted submission, then
/// `submission-settled`.
pub(crate) fn settlement_chunks(
    submission_id: &str,
    outcome: &str,
    error: Option<Value>,
    data: Option<Value>,
    at_ms: u64,
) -> Vec<ChunkBody> {
    let mut chunks = Vec::with_capacity(2);
    if outcome != "completed" {
        let text = error
            .as_ref()
            .and_then(|error| error.get("message"))
            .and_then(Value::as_str)
            .unwrap_or(outcome)
            .to_owned();
        chunks.push(ChunkBody::MessageAppended {
            message: Message {
                id: format!("advisory_{submission_id}"),
                role: "system".to_owned(),
                purpose: "advisory".to_owned(),
                display: "diagnostic".to_owned(),
                submission_id: Some(submission_id.to_owned()),
                turn_id: None,
                signal: None,
                settlement: Some(json!({ "outcome": outcome })),
                parts: vec![json!({"type": "text", "text": text, "state": "done"})],
            },
        });
    }
    chunks.push(ChunkBody::SubmissionSettled {
        submission_id: submission_id.to_owned(),
        outcome: outcome.to_owned(),
        error,
        answered_by_submission_id: Some(submission_id.to_owned()),
        data,
        timestamp: Some(iso8601(at_ms)),
    });
    chunks
}

/// The admitted message as the conversation shows it.
pub(crate) fn user_message(submission_id: &str, message: &Delivered) -> Message {
    let id = format!("entry_{submission_id}");
    match message {
        Delivered::User { text, images } => {
            let mut parts = vec![json!({"type": "text", "text": text, "state": "done"})];
            for (idx, image) in images.iter().enumerate() {
                let mut part = json!({
                    "type": "file",
                    "mediaType": image.mime_type,
                    "id": attachment_id(submission_id, idx),
                    "size": decoded_len(&image.data),
                });
                if let Some(filename) = &image.filename {
                    part["filename"] = filename.clone().into();
                }
                parts.push(part);
            }
            Message {
                id,
                role: "user".to_owned(),
                purpose: "user".to_owned(),
                display: "visible".to_owned(),
                submission_id: Some(submission_id.to_owned()),
                turn_id: None,
                signal: None,
                settlement: None,
                parts,
            }
        }
        Delivered::Signal {
            signal_type,
            body,
            attributes,
            tag_name,
        } => {
            let mut attrs: serde_json::Map<String, Value> = attributes
                .iter()
                .map(|(name, value)| (name.clone(), Value::String(value.clone())))
                .collect();
            attrs.insert("type".to_owned(), signal_type.clone().into());
            let mut signal = json!({ "attributes": attrs });
            if let Some(tag) = tag_name {
                signal["tagName"] = tag.clone().into();
            }
            Message {
                id,
                role: "system".to_owned(),
                purpose: "dispatch".to_owned(),
                display: "diagnostic".to_owned(),
                submission_id: Some(submission_id.to_owned()),
                turn_id: None,
                signal: Some(signal),
                settlement: None,
                parts: vec![json!({"type": "text", "text": body, "state": "done"})],
            }
        }
    }
}

/// The id of the `idx`-th image of a submission's message: the `file` part's `id` and the
/// last segment of `GET .../attachments/<id>`.
pub(crate) fn attachment_id(submission_id: &str, idx: usize) -> String {
    format!("att_{submission_id}_{idx}")
}

/// The submission and image index an [`attachment_id`] names, or `None`.
pub(crate) fn parse_attachment_id(id: &str) -> Option<(&str, usize)> {
    let (submission_id, idx) = id.strip_prefix("att_")?.rsplit_once('_')?;
    if submission_id.is_empty() || !idx.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((submission_id, idx.parse().ok()?))
}

/// The byte length of padded standard base64 `data`.
pub(crate) fn decoded_len(data: &str) -> usize {
    let padding = data.bytes().rev().take_while(|b| *b == b'=').count();
    (data.len() / 4 * 3).saturating_sub(padding)
}

/// Decodes an image's base64 data (checked at admission, so a failure means a corrupt
/// store).
pub(crate) fn decode_image(data: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(data).ok()
}

/// `ms` since the epoch as ISO 8601 (UTC, milliseconds).
pub(crate) fn iso8601(ms: u64) -> String {
    flue_core::util::iso8601_ms(ms)
}

/// One action on the wire (camelCase, `state` naming the decision or `pending`).
pub(crate) fn action_json(info: &flue_core::record::ActionInfo) -> Value {
    let action = &info.action;
    let mut value = json!({
        "actionId": action.action_id,
        "toolCallId": action.call_id,
        "toolName": action.tool_name,
        "input": action.input,
        "kind": action.kind,
        "reason": action.reason,
        "state": action_state(info.decision.as_ref()),
    });
    if let Some(session) = &action.session {
        value["session"] = json!(session);
    }
    if let Some(schema) = &action.output_schema {
        value["outputSchema"] = schema.clone();
    }
    if let Some(key) = &action.idempotency_key {
        value["idempotencyKey"] = json!(key);
    }
    if let Some(decision) = &info.decision {
        decision_fields(&mut value, decision);
    }
    value
}

/// Adds what a decision carries to an action's wire form: a denial's or decline's `message`, a
/// result's `value` and `isError`, an accepted question's `content`.
pub(crate) fn decision_fields(value: &mut Value, decision: &flue_core::ActionDecision) {
    match decision {
        flue_core::ActionDecision::Deny {
            message: Some(message),
        }
        | flue_core::ActionDecision::Decline {
            message: Some(message),
        } => value["message"] = json!(message),
        flue_core::ActionDecision::Result {
            value: result,
            is_error,
        } => {
            value["value"] = result.clone();
            value["isError"] = json!(is_error);
        }
        flue_core::ActionDecision::Accept { content } => value["content"] = content.clone(),
        _ => {}
    }
}

/// `pending`, or what the decision was: `allowed`, `denied`, `answered`, `interrupted`, and
/// for an MCP server's question `accepted`, `declined`, `cancelled`.
pub(crate) fn action_state(decision: Option<&flue_core::ActionDecision>) -> &'static str {
    match decision {
        None => "pending",
        Some(flue_core::ActionDecision::Allow) => "allowed",
        Some(flue_core::ActionDecision::Deny { .. }) => "denied",
        Some(flue_core::ActionDecision::Result { .. }) => "answered",
        Some(flue_core::ActionDecision::Accept { .. }) => "accepted",
        Some(flue_core::ActionDecision::Decline { .. }) => "declined",
        Some(flue_core::ActionDecision::Cancel) => "cancelled",
        Some(_) => "interrupted",
    }
}
