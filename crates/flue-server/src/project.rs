//! Reducing chunks into a materialized conversation: the snapshot of `view=history` and of a
//! `conversation-reset`. The rules mirror how the official client applies chunks, so a
//! snapshot equals what a client that followed every chunk holds.

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::wire::{ChunkBody, Message, Settlement, Snapshot};

/// A conversation's materialized state.
#[derive(Clone, Debug, Default)]
pub(crate) struct Conversation {
    messages: Vec<Message>,
    by_id: HashMap<String, usize>,
    settlements: Vec<Settlement>,
}

impl Conversation {
    /// Applies one chunk.
    pub(crate) fn apply(&mut self, chunk: &ChunkBody) {
        match chunk {
            ChunkBody::ConversationReset { snapshot } => {
                *self = Conversation::default();
                for message in &snapshot.messages {
                    self.upsert(message.clone());
                }
                self.settlements.clone_from(&snapshot.settlements);
            }
            ChunkBody::MessageAppended { message } => self.upsert(message.clone()),
            ChunkBody::MessageStarted {
                message_id,
                submission_id,
                turn_id,
                ..
            } => {
                if !self.by_id.contains_key(message_id) {
                    self.upsert(Message {
                        id: message_id.clone(),
                        role: "assistant".to_owned(),
                        purpose: "assistant".to_owned(),
                        display: "visible".to_owned(),
                        submission_id: submission_id.clone(),
                        turn_id: turn_id.clone(),
                        signal: None,
                        settlement: None,
                        parts: Vec::new(),
                    });
                }
            }
            ChunkBody::DataPart {
                message_id,
                name,
                data,
            } => {
                if let Some(message) = self.message_mut(message_id) {
                    let part_type = format!("data-{name}");
                    let part = json!({"type": part_type, "data": data});
                    match message
                        .parts
                        .iter_mut()
                        .find(|part| part["type"] == part_type.as_str())
                    {
                        Some(existing) => *existing = part,
                        None => message.parts.push(part),
                    }
                }
            }
            ChunkBody::MessageDelta {
                message_id,
                kind,
                delta,
            } => {
                if let Some(message) = self.message_mut(message_id) {
                    append_delta(&mut message.parts, kind, delta);
                }
            }
            ChunkBody::ToolInput {
                message_id,
                tool_call_id,
                tool_name,
                input,
                ..
            } => {
                if let Some(message) = self.message_mut(message_id) {
                    let known = message.parts.iter().any(|part| {
                        part["type"] == "dynamic-tool"
                            && part["toolCallId"] == tool_call_id.as_str()
                    });
                    if !known {
                        close_streaming(&mut message.parts);
                        message.parts.push(json!({
                            "type": "dynamic-tool",
                            "toolName": tool_name,
                            "toolCallId": tool_call_id,
                            "state": "input-available",
                            "input": input,
                        }));
                    }
                }
            }
            ChunkBody::ToolOutput {
                tool_call_id,
                output,
                duration_ms,
                ..
            } => self.tool_result(tool_call_id, |part| {
                part.insert("state".into(), "output-available".into());
                part.insert("output".into(), output.clone());
                part.remove("errorText");
                if let Some(ms) = duration_ms {
                    part.insert("durationMs".into(), (*ms).into());
                }
            }),
            ChunkBody::ToolOutputError {
                tool_call_id,
                error_text,
                duration_ms,
                ..
            } => self.tool_result(tool_call_id, |part| {
                part.insert("state".into(), "output-error".into());
                part.insert("errorText".into(), error_text.clone().into());
                part.remove("output");
                if let Some(ms) = duration_ms {
                    part.insert("durationMs".into(), (*ms).into());
                }
            }),
            ChunkBody::MessageCompleted { message_id, .. } => {
                if let Some(message) = self.message_mut(message_id) {
                    for part in &mut message.parts {
                        if part["type"] == "text" || part["type"] == "reasoning" {
                            part["state"] = "done".into();
                        }
                    }
                }
            }
            ChunkBody::SubmissionSettled {
                submission_id,
                outcome,
                error,
                answered_by_submission_id,
                data,
                ..
            } => {
                let settlement = Settlement {
                    submission_id: submission_id.clone(),
                    outcome: outcome.clone(),
                    error: error.clone(),
                    answered_by_submission_id: answered_by_submission_id.clone(),
                    data: data.clone(),
                };
                match self
                    .settlements
                    .iter_mut()
                    .find(|existing| existing.submission_id == *submission_id)
                {
                    Some(existing) => *existing = settlement,
                    None => self.settlements.push(settlement),
                }
            }
        }
    }

    /// The snapshot at `offset`.
    pub(crate) fn snapshot(
        &self,
        conversation_id: &str,
        offset: String,
        incarnation: &str,
    ) -> Snapshot {
        Snapshot {
            v: 1,
            conversation_id: conversation_id.to_owned(),
            offset,
            messages: self.messages.clone(),
            settlements: self.settlements.clone(),
            incarnation: Some(incarnation.to_owned()),
        }
    }

    fn upsert(&mut self, message: Message) {
        match self.by_id.get(&message.id) {
            Some(&idx) => self.messages[idx] = message,
            None => {
                self.by_id.insert(message.id.clone(), self.messages.len());
                self.messages.push(message);
            }
        }
    }

    fn message_mut(&mut self, id: &str) -> Option<&mut Message> {
        let idx = *self.by_id.get(id)?;
        self.messages.get_mut(idx)
    }

    fn tool_result(
        &mut self,
        call_id: &str,
        update: impl FnOnce(&mut serde_json::Map<String, Value>),
    ) {
        let part = self.messages.iter_mut().rev().find_map(|message| {
            message
                .parts
                .iter_mut()
                .find(|part| part["type"] == "dynamic-tool" && part["toolCallId"] == call_id)
        });
        if let Some(Value::Object(part)) = part {
            update(part);
        }
    }
}

/// Appends streamed text: extends the last part when it is a streaming part of the same kind,
/// else closes a streaming text/reasoning part and opens a new one.
fn append_delta(parts: &mut Vec<Value>, kind: &str, delta: &str) {
    if let Some(last) = parts.last_mut()
        && last["type"] == kind
        && last["state"] == "streaming"
    {
        let text = format!("{}{delta}", last["text"].as_str().unwrap_or_default());
        last["text"] = text.into();
        return;
    }
    close_streaming(parts);
    parts.push(json!({"type": kind, "text": delta, "state": "streaming"}));
}

fn close_streaming(parts: &mut [Value]) {
    if let Some(last) = parts.last_mut()
        && (last["type"] == "text" || last["type"] == "reasoning")
        && last["state"] == "streaming"
    {
        last["state"] = "done".into();
    }
}
