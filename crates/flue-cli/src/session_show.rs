//! `flue session show`: print a stored transcript, and with `--tree` its task sessions and
//! background tasks (each a conversation of its own, with its state). Each model turn is
//! followed by its model, tokens and cost; the transcript ends with the conversation's (every
//! session's) usage.

use std::fmt::Write as _;

use flue_core::record::ActionKind;
use flue_core::store::DynConversationStore;
use flue_core::submission::{SubmissionState, background_parent};
use flue_core::view::Transcript;
use flue_core::{
    ActionDecision, AssistantContent, BatchBody, ConversationKey, Offset, Record, UserContent,
};
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
    let background = if args.tree {
        background_tree(store, &instance_id).await?
    } else {
        Vec::new()
    };
    if args.json {
        let mut out = shown.to_json();
        if let Value::Object(map) = &mut out {
            map.insert("id".into(), Value::String(args.id.clone()));
            if !args.tree {
                map.remove("tasks");
            } else {
                let listed = background.iter().map(BackgroundChild::to_json).collect();
                map.insert("background".into(), Value::Array(listed));
            }
        }
        outln!("{}", output.json_pretty(&out)?)?;
    } else {
        let mut text = String::new();
        write_text(&shown, &mut text, 0, args.tree);
        for child in &background {
            child.write_text(&mut text);
        }
        if let Some((value, version)) = shown.state() {
            let _ = writeln!(text, "state (version {version}): {value}");
        }
        if let Some(rules) = standing_rules(&shown) {
            let _ = writeln!(text, "{rules}");
        }
        let (usage, turns) = flue_core::view::conversation_usage(store, &instance_id).await?;
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

/// The root session's standing approvals, each checked against this user's approval key (a
/// store from elsewhere lists them as unverified).
fn standing_rules(shown: &Transcript) -> Option<String> {
    if shown.session != flue_core::DEFAULT_SESSION {
        return None;
    }
    let records: Vec<Record> = shown
        .records
        .iter()
        .map(|stored| stored.record.clone())
        .collect();
    let env = flue_host::Env::from_vars(std::env::vars());
    let key = flue_host::approval_key(&env).ok().flatten();
    crate::approvals::rules_text(&flue_core::standing::standing_rules(&records, key.as_ref()))
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

/// A background task below the shown conversation: its conversation, how deep, where its
/// task (the first submission) is, and its root session's transcript.
struct BackgroundChild {
    key: ConversationKey,
    depth: usize,
    state: Option<SubmissionState>,
    outcome: Option<flue_core::Outcome>,
    transcript: Transcript,
}

impl BackgroundChild {
    fn state_text(&self) -> String {
        let state = self
            .state
            .and_then(|state| serde_json::to_value(state).ok())
            .and_then(|value| value.as_str().map(str::to_owned))
            .unwrap_or_else(|| "unknown".to_owned());
        match self.outcome {
            Some(outcome) => format!("{state}, {}", outcome.as_str()),
            None => state,
        }
    }

    fn write_text(&self, out: &mut String) {
        let indent = "  ".repeat(self.depth);
        let _ = writeln!(
            out,
            "{indent}== background task {}/{} ({})",
            self.key.agent,
            self.key.id,
            self.state_text()
        );
        write_text(&self.transcript, out, self.depth + 1, true);
    }

    fn to_json(&self) -> Value {
        serde_json::json!({
            "agent": self.key.agent,
            "conversation": self.key.id,
            "depth": self.depth,
            "state": self.state,
            "outcome": self.outcome,
            "transcript": self.transcript.to_json(),
        })
    }
}

/// The background tasks below the conversation `instance_id`, to any depth, each followed by
/// its own (depth first), oldest first per level.
async fn background_tree(
    store: &dyn DynConversationStore,
    instance_id: &str,
) -> anyhow::Result<Vec<BackgroundChild>> {
    let instances = store.instance_ids().await?;
    let Some(root) = key_of(instance_id) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    let mut stack = children_of(store, &instances, &root, 1).await?;
    stack.reverse();
    while let Some(child) = stack.pop() {
        let below = children_of(store, &instances, &child.key, child.depth + 1).await?;
        out.push(child);
        stack.extend(below.into_iter().rev());
    }
    Ok(out)
}

fn key_of(instance: &str) -> Option<ConversationKey> {
    instance
        .split_once(':')
        .map(|(agent, id)| ConversationKey::new(agent, id))
}

/// The background tasks `parent` started, oldest first.
async fn children_of(
    store: &dyn DynConversationStore,
    instances: &[String],
    parent: &ConversationKey,
    depth: usize,
) -> anyhow::Result<Vec<BackgroundChild>> {
    let mut children = Vec::new();
    for child in instances.iter().filter_map(|instance| key_of(instance)) {
        if background_parent(&child).as_ref() == Some(parent) {
            children.push(background_child(store, child, depth).await?);
        }
    }
    children.sort_by_key(|child| child.transcript.records.first().map(|stored| stored.at));
    Ok(children)
}

async fn background_child(
    store: &dyn DynConversationStore,
    key: ConversationKey,
    depth: usize,
) -> anyhow::Result<BackgroundChild> {
    let page = store.read_stream(&key, Offset::START, 8).await?;
    let first = page.batches.iter().find_map(|batch| match &batch.body {
        BatchBody::Admitted { submission_id, .. } => Some(submission_id.clone()),
        _ => None,
    });
    let status = match first {
        Some(id) => store.submission_status(&id).await?,
        None => None,
    };
    let transcript =
        Transcript::load(store, &key.instance_id(), flue_core::DEFAULT_SESSION, true).await?;
    Ok(BackgroundChild {
        key,
        depth,
        state: status.as_ref().map(|status| status.state),
        outcome: status
            .and_then(|status| status.settlement)
            .map(|settlement| settlement.outcome),
        transcript,
    })
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
/// (`user (turn 2): ...`), counted as `flue_core::fork::turn_starts` counts them.
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
            Record::Rule(rule) => writeln!(
                out,
                "standing rule {} for {}: {}",
                rule.rule_id,
                rule.tool_name,
                match rule.change {
                    flue_core::record::RuleChange::Grant => "always allowed",
                    _ => "revoked",
                }
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
