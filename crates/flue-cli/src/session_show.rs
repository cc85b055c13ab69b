//! `flue session show`: print a stored transcript.

use std::fmt::Write as _;

use anyhow::{Context, bail};
use flue_core::{AssistantContent, Record, SessionKey, SessionStore, StoredRecord, UserContent};
use serde_json::{Value, json};

use crate::Exit;
use crate::args::ShowArgs;
use crate::workspace::{DB_PATH, resolve_root};

/// Runs `flue session show`.
pub(crate) async fn show(args: ShowArgs) -> anyhow::Result<Exit> {
    let root = resolve_root(args.root.as_deref())?;
    let db = root.join(DB_PATH);
    if !db.is_file() {
        bail!(
            "no conversations are stored under {} (no {DB_PATH})",
            root.display()
        );
    }
    let store = flue_core::SqliteStore::open(&db)?;
    let key = SessionKey::new(args.id.clone(), args.session.clone());
    let log = store.load(&key, 0).await?.with_context(|| {
        format!(
            "conversation {:?} has no session {:?}",
            args.id, args.session
        )
    })?;
    if args.json {
        let messages: Vec<Value> = log
            .records
            .iter()
            .map(message_json)
            .collect::<Result<_, _>>()?;
        let out = json!({"id": args.id, "session": args.session, "version": log.version, "messages": messages});
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        let records: Vec<Record> = log
            .records
            .into_iter()
            .map(|stored| stored.record)
            .collect();
        print!("{}", transcript_text(&records));
    }
    Ok(Exit::Success)
}

/// One stored record as a transcript message: the record's own fields plus a `role`.
fn message_json(stored: &StoredRecord) -> serde_json::Result<Value> {
    let role = match &stored.record {
        Record::Assistant(_) => "assistant",
        Record::ToolResult(_) => "tool",
        _ => "user",
    };
    let mut value = serde_json::to_value(stored)?;
    if let Value::Object(map) = &mut value {
        map.insert("role".into(), Value::String(role.into()));
    }
    Ok(value)
}

fn transcript_text(records: &[Record]) -> String {
    let mut out = String::new();
    for record in records {
        // Writing to a String cannot fail.
        let _ = match record {
            Record::User(message) => {
                let images = message
                    .content
                    .iter()
                    .filter(|p| matches!(p, UserContent::Image(_)))
                    .count();
                let suffix = if images > 0 {
                    format!(" [{images} image(s)]")
                } else {
                    String::new()
                };
                writeln!(out, "user: {}{suffix}", message.joined_text())
            }
            Record::Assistant(message) => {
                for part in &message.content {
                    let _ = match part {
                        AssistantContent::Text { text } => writeln!(out, "assistant: {text}"),
                        AssistantContent::Thinking { text, .. } => {
                            writeln!(out, "thinking: {text}")
                        }
                        AssistantContent::ToolCall(call) => {
                            writeln!(out, "tool call: {} {}", call.name, call.input)
                        }
                        _ => Ok(()),
                    };
                }
                Ok(())
            }
            Record::ToolResult(result) => {
                let status = if result.is_error { "error" } else { "ok" };
                writeln!(
                    out,
                    "tool result ({} {status}): {}",
                    result.tool_name, result.content
                )
            }
            Record::Shell(exchange) => writeln!(
                out,
                "shell: $ {} (exit {})\n{}{}",
                exchange.command, exchange.exit_code, exchange.stdout, exchange.stderr
            ),
            Record::Compaction(summary) => writeln!(out, "summary: {}", summary.summary),
            _ => Ok(()),
        };
    }
    out
}
