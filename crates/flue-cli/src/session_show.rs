//! `flue session show`: print a stored transcript, and with `--tree` its task sessions.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::bail;
use flue_core::{
    ActionDecision, ActionKind, AssistantContent, DynConversationStore, Record, SessionKey,
    StoredRecord, UserContent, task_session_parent,
};
use serde_json::{Value, json};

use crate::Exit;
use crate::args::ShowArgs;
use crate::audit::open_existing_store;
use crate::terminal::Output;
use crate::workspace::{instance_id, resolve_store_root};

/// Runs `flue session show`.
pub(crate) async fn show(args: ShowArgs) -> anyhow::Result<Exit> {
    flue_core::check_instance_id(&args.id)?;
    let root = resolve_store_root(args.root.as_deref())?;
    let store = open_existing_store(&root, args.store.as_deref()).await?;
    let store = &*store;
    let instance_id = instance_id(store, &args.id).await?;
    let tasks = if args.tree {
        task_tree(store, &instance_id).await?
    } else {
        BTreeMap::new()
    };
    let shown = load(store, &instance_id, &args.session, &tasks).await?;
    let output = Output::for_workspace(&root)?;
    if args.json {
        let mut out = shown.to_json()?;
        if let Value::Object(map) = &mut out {
            map.insert("id".into(), Value::String(args.id.clone()));
            if !args.tree {
                map.remove("tasks");
            }
        }
        println!("{}", output.json_pretty(&out)?);
    } else {
        let mut text = String::new();
        shown.write_text(&mut text, 0, args.tree);
        print!("{}", output.stdout_text(&text));
    }
    Ok(Exit::Success)
}

/// The stored transcript of conversation `instance_id`: its root session with the task
/// sessions nested, as `session show --json --tree` prints it (the dev console reads it).
/// `None` when the conversation has no sessions.
pub(crate) async fn transcript_tree(
    store: &dyn DynConversationStore,
    instance_id: &str,
) -> anyhow::Result<Option<Value>> {
    if store.list(instance_id).await?.is_empty() {
        return Ok(None);
    }
    let tasks = task_tree(store, instance_id).await?;
    let shown = load(store, instance_id, flue_core::DEFAULT_SESSION, &tasks).await?;
    Ok(Some(shown.to_json()?))
}

/// A session's stored records and its task sessions (when the tree was asked for).
struct Shown {
    session: String,
    version: u64,
    records: Vec<StoredRecord>,
    tasks: Vec<Shown>,
}

impl Shown {
    fn to_json(&self) -> anyhow::Result<Value> {
        let messages: Vec<Value> = self
            .records
            .iter()
            .map(message_json)
            .collect::<Result<_, _>>()?;
        let tasks: Vec<Value> = self
            .tasks
            .iter()
            .map(Shown::to_json)
            .collect::<Result<_, _>>()?;
        Ok(json!({
            "session": self.session,
            "version": self.version,
            "messages": messages,
            "tasks": tasks,
        }))
    }

    fn write_text(&self, out: &mut String, depth: usize, headers: bool) {
        let indent = "  ".repeat(depth);
        if headers {
            let _ = writeln!(out, "{indent}== {}", self.session);
        }
        let records: Vec<Record> = self
            .records
            .iter()
            .map(|stored| stored.record.clone())
            .collect();
        let text = transcript_text(&records);
        if depth == 0 {
            out.push_str(&text);
        } else {
            for line in text.lines() {
                let _ = writeln!(out, "{indent}{line}");
            }
        }
        for task in &self.tasks {
            task.write_text(out, depth + 1, headers);
        }
    }
}

/// Loads `session` and, recursively, the task sessions `tasks` lists under it.
fn load<'a>(
    store: &'a dyn DynConversationStore,
    id: &'a str,
    session: &'a str,
    tasks: &'a BTreeMap<String, Vec<String>>,
) -> flue_core::BoxFuture<'a, anyhow::Result<Shown>> {
    Box::pin(async move {
        let key = SessionKey::new(id, session);
        let Some(log) = store.load(&key, 0).await? else {
            let sessions = store.list(id).await?;
            if sessions.is_empty() {
                bail!(
                    "conversation {:?} does not exist; `flue session list` shows the stored ones",
                    crate::audit::conversation_of(id)
                );
            }
            let names: Vec<&str> = sessions.iter().map(|s| s.session.as_str()).collect();
            bail!(
                "conversation {:?} has no session {session:?}; its sessions: {}",
                crate::audit::conversation_of(id),
                names.join(", ")
            );
        };
        let mut children = Vec::new();
        for child in tasks.get(session).into_iter().flatten() {
            children.push(load(store, id, child, tasks).await?);
        }
        Ok(Shown {
            session: session.to_owned(),
            version: log.version,
            records: log.records,
            tasks: children,
        })
    })
}

/// Task sessions by parent, each list in creation order.
async fn task_tree(
    store: &dyn DynConversationStore,
    id: &str,
) -> anyhow::Result<BTreeMap<String, Vec<String>>> {
    let mut sessions = store.list(id).await?;
    sessions.sort_by(|a, b| (a.created_at, &a.session).cmp(&(b.created_at, &b.session)));
    let mut tree: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for summary in sessions {
        if let Some(parent) = task_session_parent(&summary.session) {
            tree.entry(parent.to_owned())
                .or_default()
                .push(summary.session.clone());
        }
    }
    Ok(tree)
}

/// One stored record as a transcript message: the record's own fields plus a `role`.
fn message_json(stored: &StoredRecord) -> serde_json::Result<Value> {
    let role = match &stored.record {
        Record::Assistant(_) => "assistant",
        Record::ToolResult(_) => "tool",
        Record::Sampling(_) => "sampling",
        _ => "user",
    };
    let mut value = serde_json::to_value(stored)?;
    if let Value::Object(map) = &mut value {
        map.insert("role".into(), Value::String(role.into()));
    }
    Ok(value)
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

fn transcript_text(records: &[Record]) -> String {
    let mut out = String::new();
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
            _ => Ok(()),
        };
    }
    out
}
