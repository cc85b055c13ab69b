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

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use serde_json::{Map, Value, json};

use flue_protocol::record::{AssistantContent, Record};

/// Where the transcripts hooks read are written, under the workspace root.
const TRANSCRIPTS_DIR: &str = ".flue/transcripts";

/// The transcript file of session `session` of instance `instance_id` under `root`.
pub(crate) fn file_path(root: &Path, instance_id: &str, session: &str) -> PathBuf {
    let name = format!("{}.{}.jsonl", file_safe(instance_id), file_safe(session));
    root.join(TRANSCRIPTS_DIR).join(name)
}

/// What this process last wrote to each transcript file: its length and a hash of its bytes.
static WRITTEN: Mutex<BTreeMap<PathBuf, (u64, u64)>> = Mutex::new(BTreeMap::new());

/// Writes `transcript` to `path`. When the file holds exactly what this process last wrote
/// there and that is the start of `transcript`, only the rest is appended (a transcript grows
/// at its end); otherwise the file is replaced whole, through a new file renamed over it, so a
/// reader never sees half of it.
pub(crate) async fn write(path: &Path, transcript: &[u8]) -> std::io::Result<()> {
    let known = WRITTEN
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(path)
        .copied();
    let on_disk = tokio::fs::metadata(path).await.ok().map(|meta| meta.len());
    let prefix = known.and_then(|(len, hash)| {
        let len_usize = usize::try_from(len).ok()?;
        let head = transcript.get(..len_usize)?;
        (on_disk == Some(len) && fnv(head) == hash).then_some(len_usize)
    });
    match prefix {
        Some(len) => {
            use tokio::io::AsyncWriteExt;
            let mut file = tokio::fs::OpenOptions::new()
                .append(true)
                .open(path)
                .await?;
            file.write_all(&transcript[len..]).await?;
            file.flush().await?;
        }
        None => replace(path, transcript).await?,
    }
    let written = (
        u64::try_from(transcript.len()).unwrap_or(u64::MAX),
        fnv(transcript),
    );
    WRITTEN
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(path.to_owned(), written);
    Ok(())
}

async fn replace(path: &Path, transcript: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let partial = dir.join(format!(".{name}.{}.partial", std::process::id()));
    tokio::fs::create_dir_all(dir).await?;
    tokio::fs::write(&partial, transcript).await?;
    tokio::fs::rename(&partial, path).await
}

/// FNV-1a of `bytes`: enough to tell whether a file still starts as it was written.
fn fnv(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// Removes the transcript files of every session of instance `instance_id` under `root` (the
/// conversation was deleted: its copy for hooks goes too). A missing directory is no error.
///
/// # Errors
///
/// The directory cannot be read or a file cannot be removed.
pub fn remove_transcripts(root: &Path, instance_id: &str) -> std::io::Result<()> {
    let prefix = format!("{}.", file_safe(instance_id));
    let entries = match std::fs::read_dir(root.join(TRANSCRIPTS_DIR)) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(err),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(&prefix) && name.ends_with(".jsonl") {
            std::fs::remove_file(entry.path())?;
            WRITTEN
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&entry.path());
        }
    }
    Ok(())
}

/// `text` with every character but ASCII letters, digits, `-`, `_` and `.` as `_`.
fn file_safe(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

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
