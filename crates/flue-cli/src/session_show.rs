//! `flue session show`: print a stored transcript, and with `--tree` its task sessions. Each
//! model turn is followed by its model, tokens and cost; the transcript ends with the
//! conversation's (every session's) usage.

use std::fmt::Write as _;

use flue_core::{ActionDecision, ActionKind, AssistantContent, Record, UserContent};
use flue_server::Transcript;
use serde_json::Value;

use crate::Exit;
use crate::args::ShowArgs;
use crate::audit::open_existing_store;
use crate::stdout::{out, outln};
use crate::terminal::Output;
use crate::workspace::{instance_id, resolve_store_root};

/// Runs `flue session show`.
pub(crate) async fn show(args: ShowArgs) -> anyhow::Result<Exit> {
    flue_core::check_instance_id(&args.id)?;
    let root = resolve_store_root(args.root.as_deref())?;
    let store = open_existing_store(&root, args.store.as_deref()).await?;
    let store = &*store;
    let instance_id = instance_id(store, &args.id).await?;
    let shown = Transcript::load(store, &instance_id, &args.session, args.tree).await?;
    let output = Output::for_workspace(&root)?;
    if args.json {
        let mut out = shown.to_json();
        if let Value::Object(map) = &mut out {
            map.insert("id".into(), Value::String(args.id.clone()));
            if !args.tree {
                map.remove("tasks");
            }
        }
        outln!("{}", output.json_pretty(&out)?)?;
    } else {
        let mut text = String::new();
        write_text(&shown, &mut text, 0, args.tree);
        if let Some((value, version)) = shown.state() {
            let _ = writeln!(text, "state (version {version}): {value}");
        }
        let (usage, turns) = flue_server::conversation_usage(store, &instance_id).await?;
        if turns > 0 {
            let noun = if turns == 1 { "turn" } else { "turns" };
            let _ = writeln!(
                text,
                "conversation usage: {turns} model {noun}, {}",
                crate::render::usage_text(&usage)
            );
        }
        out!("{}", output.stdout_text(&text))?;
    }
    Ok(Exit::Success)
}

/// A transcript as text: each session's records, with the task sessions indented below their
/// parent (and a `== session` header each when `headers`).
fn write_text(shown: &Transcript, out: &mut String, depth: usize, headers: bool) {
    let indent = "  ".repeat(depth);
    if headers {
        let _ = writeln!(out, "{indent}== {}", shown.session);
    }
    let records: Vec<Record> = shown
        .records
        .iter()
        .map(|stored| stored.record.clone())
        .collect();
    // Turn numbers (what `fork --at` and `rewind --to` take) belong to the root session.
    let numbered = shown.session == flue_core::DEFAULT_SESSION;
    let text = transcript_text(&records, numbered);
    if depth == 0 {
        out.push_str(&text);
    } else {
        for line in text.lines() {
            let _ = writeln!(out, "{indent}{line}");
        }
    }
    for task in &shown.tasks {
        write_text(task, out, depth + 1, headers);
    }
}

/// A question's answer in one line.
fn answer_text(decision: &ActionDecision) -> String {
    match decision {
        ActionDecision::Accept { content } => format!("accepted {content}"),
        ActionDecision::Decline {
            message: Some(message),
        } => format!("declined: {message}"),
        ActionDecision::Decline { message: None } => "declined".to_owned(),
        ActionDecision::Cancel => "cancelled".to_owned(),
        _ => "interrupted".to_owned(),
    }
}

/// The records as text; with `numbered`, each user message shows its turn number
/// (`user (turn 2): ...`), counted as `flue_core::turn_starts` counts them.
fn transcript_text(records: &[Record], numbered: bool) -> String {
    let mut out = String::new();
    let mut turn = 0_u64;
    // MCP servers' questions (live actions), shown with their answers.
    let mut questions = std::collections::HashSet::new();
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
                if numbered {
                    turn += 1;
                    writeln!(out, "user (turn {turn}): {}{suffix}", message.joined_text())
                } else {
                    writeln!(out, "user: {}{suffix}", message.joined_text())
                }
            }
            Record::Assistant(message) => {
                for part in &message.content {
                    let _ = match part {
                        AssistantContent::Text { text } if message.interrupted => {
                            writeln!(out, "assistant (interrupted): {text}")
                        }
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
                writeln!(
                    out,
                    "  [{}: {}]",
                    message.model,
                    crate::render::usage_text(&message.usage)
                )
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
            Record::ActionRequired(action) if action.kind == ActionKind::Elicitation => {
                questions.insert(action.action_id.clone());
                writeln!(out, "question ({}): {}", action.action_id, action.reason)
            }
            Record::ActionResolved(resolution) if questions.contains(&resolution.action_id) => {
                writeln!(
                    out,
                    "answer ({}): {}",
                    resolution.action_id,
                    answer_text(&resolution.decision)
                )
            }
            Record::Sampling(exchange) => writeln!(
                out,
                "sampling by mcp server `{}` ({}): {}",
                exchange.server,
                exchange.model,
                exchange
                    .response
                    .as_deref()
                    .or(exchange.error.as_deref())
                    .unwrap_or_default()
            ),
            Record::Hook(hook) => writeln!(out, "{}", crate::render::hook_text(hook)),
            Record::FailedTurn(failed) => writeln!(
                out,
                "failed model turn ({}): {}\n  [{}: {}]",
                failed.error_kind,
                failed.message,
                failed.model,
                crate::render::usage_text(&failed.usage)
            ),
            Record::State(change) => writeln!(
                out,
                "state v{} ({}): {}",
                change.version, change.source, change.value
            ),
            Record::ToolAttempt(attempt) => writeln!(
                out,
                "attempt {} of {} ({}, key {})",
                attempt.attempt, attempt.tool_name, attempt.call_id, attempt.idempotency_key
            ),
            _ => Ok(()),
        };
    }
    out
}
