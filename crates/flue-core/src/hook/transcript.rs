//! The conversation as a Claude Code transcript: one JSON object a line, as Claude Code writes
//! its session files, for hooks that read `transcript_path`.
//!
//! A user message is `{"type": "user", "message": {"role": "user", "content": <text>}}`, a
//! model turn `{"type": "assistant", "message": {"role": "assistant", "model", "content":
//! [text, thinking and tool_use blocks], "stop_reason", "usage"}}`, a tool result a user line
//! whose content is one `tool_result` block. Each line also has `uuid`, `parentUuid` (the line
//! before), `sessionId`, `isSidechain` (a task session's) and `userType`. Tool names and
//! inputs are Claude Code's ([`super::claude_tool_name`]). Records a model never sees (hook
//! decisions, state, pauses) are left out. The JSON is compact, as Claude Code's is: scripts
//! grep for `"role":"assistant"`.

use serde_json::{Map, Value, json};

use flue_protocol::record::{AssistantContent, Record};

/// The transcript of `records` in the session `session_id` (a task session's lines are marked
/// `isSidechain`), each line ending with a newline.
pub(crate) fn render(records: &[Record], session_id: &str, sidechain: bool) -> String {
    let mut out = String::new();
    let mut parent: Option<String> = None;
    for (record_idx, record) in records.iter().enumerate() {
        let Some((kind, message)) = line_of(record) else {
            continue;
        };
        let uuid = line_uuid(session_id, record_idx);
        let mut line = Map::new();
        line.insert("parentUuid".into(), json!(parent));
        line.insert("isSidechain".into(), json!(sidechain));
        line.insert("userType".into(), json!("external"));
        line.insert("sessionId".into(), json!(session_id));
        line.insert("type".into(), json!(kind));
        line.insert("message".into(), message);
        line.insert("uuid".into(), json!(uuid));
        if let Record::Compaction(_) = record {
            line.insert("isCompactSummary".into(), json!(true));
        }
        out.push_str(&Value::Object(line).to_string());
        out.push('\n');
        parent = Some(uuid);
    }
    out
}

/// The line type and message of a record the model sees.
fn line_of(record: &Record) -> Option<(&'static str, Value)> {
    match record {
        Record::User(message) => Some((
            "user",
            json!({"role": "user", "content": message.joined_text()}),
        )),
        Record::Assistant(message) => {
            let content: Vec<Value> = message.content.iter().filter_map(block).collect();
            let usage = &message.usage;
            let stop_reason = serde_json::to_value(&message.stop_reason).unwrap_or(Value::Null);
            Some((
                "assistant",
                json!({
                    "type": "message",
                    "role": "assistant",
                    "model": message.model.id,
                    "content": content,
                    "stop_reason": stop_reason,
                    "usage": {
                        "input_tokens": usage.input_tokens,
                        "output_tokens": usage.output_tokens,
                        "cache_read_input_tokens": usage.cache_read_tokens,
                        "cache_creation_input_tokens": usage.cache_write_tokens,
                    },
                }),
            ))
        }
        Record::ToolResult(result) => Some((
            "user",
            json!({"role": "user", "content": [{
                "type": "tool_result",
                "tool_use_id": result.call_id,
                "content": result.content,
                "is_error": result.is_error,
            }]}),
        )),
        Record::Shell(shell) => Some((
            "user",
            json!({"role": "user", "content": format!(
                "<bash-input>{}</bash-input>\n<bash-stdout>{}</bash-stdout><bash-stderr>{}</bash-stderr>",
                shell.command, shell.stdout, shell.stderr
            )}),
        )),
        Record::Compaction(summary) => {
            Some(("user", json!({"role": "user", "content": summary.summary})))
        }
        _ => None,
    }
}

/// A content block of a model turn, as Claude Code's transcript has it.
fn block(part: &AssistantContent) -> Option<Value> {
    match part {
        AssistantContent::Text { text } | AssistantContent::Refusal { text } => {
            Some(json!({"type": "text", "text": text}))
        }
        AssistantContent::Thinking { text, .. } => {
            Some(json!({"type": "thinking", "thinking": text}))
        }
        AssistantContent::ToolCall(call) => Some(json!({
            "type": "tool_use",
            "id": call.id,
            "name": super::claude_tool_name(&call.name),
            "input": super::command::to_claude_input(&call.name, &call.input),
        })),
        _ => None,
    }
}

/// A stable id for the line of record `record_idx` (the same line keeps it from one writing of
/// the transcript to the next), in the shape of a UUID.
fn line_uuid(session_id: &str, record_idx: usize) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in session_id.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!(
        "{:08x}-{:04x}-4{:03x}-8000-{:012x}",
        hash >> 32,
        (hash >> 16) & 0xffff,
        hash & 0xfff,
        record_idx
    )
}
