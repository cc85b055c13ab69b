//! `flue session list`: the workspace's conversations, least recently active first, so the
//! one to continue is at the bottom, next to the prompt.

use std::fmt::Write as _;

use serde_json::json;

use crate::Exit;
use crate::args::ListArgs;
use crate::audit::{format_time, open_inspected_store};
use crate::terminal::Output;
use crate::workspace::{ConversationSummary, conversations, resolve_store_root};

/// Runs `flue session list`.
pub(crate) async fn list(args: ListArgs) -> anyhow::Result<Exit> {
    let root = resolve_store_root(args.root.as_deref())?;
    let output = Output::for_workspace(&root)?;
    let mut listed = match open_inspected_store(&root, args.store.as_deref()).await? {
        Some(store) => conversations(&*store).await?,
        // A workspace nothing ran in yet has no store: no conversations, not an error.
        None => Vec::new(),
    };
    if let Some(agent) = &args.agent {
        listed.retain(|summary| &summary.agent == agent);
    }
    if args.json {
        println!(
            "{}",
            output.json_pretty(&json!({ "conversations": listed }))?
        );
        return Ok(Exit::Success);
    }
    if listed.is_empty() {
        eprintln!(
            "no conversations under {} yet; start one with `flue run AGENT -m MESSAGE` or \
             `flue chat AGENT`",
            root.display()
        );
        return Ok(Exit::Success);
    }
    print!("{}", output.stdout_text(&table(&listed)));
    Ok(Exit::Success)
}

/// One line per conversation under a header: id, agent, last activity, messages, tokens (input
/// with cached input, and output), cost, pending, origin (a schedule's, else `-`).
fn table(listed: &[ConversationSummary]) -> String {
    let id_width = listed
        .iter()
        .map(|summary| summary.id.chars().count())
        .chain([2])
        .max()
        .unwrap_or(2);
    let agent_width = listed
        .iter()
        .map(|summary| summary.agent.chars().count())
        .chain([5])
        .max()
        .unwrap_or(5);
    let mut out = String::new();
    // Writing to a String cannot fail.
    let tokens: Vec<String> = listed
        .iter()
        .map(|summary| {
            let usage = &summary.usage;
            let input = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens;
            format!("{input} in / {} out", usage.output_tokens)
        })
        .collect();
    let tokens_width = tokens.iter().map(String::len).chain([6]).max().unwrap_or(6);
    let pendings: Vec<String> = listed
        .iter()
        .map(|summary| match summary.pending {
            0 => "-".to_owned(),
            n => format!("{n} submission(s)"),
        })
        .collect();
    let pending_width = pendings
        .iter()
        .map(String::len)
        .chain([7])
        .max()
        .unwrap_or(7);
    let _ = writeln!(
        out,
        "{:<id_width$}  {:<agent_width$}  {:<20}  {:>8}  {:>tokens_width$}  {:>9}  \
         {:<pending_width$}  ORIGIN",
        "ID", "AGENT", "LAST ACTIVITY", "MESSAGES", "TOKENS", "COST", "PENDING"
    );
    for ((summary, tokens), pending) in listed.iter().zip(&tokens).zip(&pendings) {
        let cost = summary
            .usage
            .cost_usd
            .map_or_else(|| "-".to_owned(), crate::render::cost_text);
        let origin = summary.origin.as_deref().unwrap_or("-");
        let _ = writeln!(
            out,
            "{:<id_width$}  {:<agent_width$}  {:<20}  {:>8}  {tokens:>tokens_width$}  {cost:>9}  \
             {pending:<pending_width$}  {origin}",
            summary.id,
            summary.agent,
            format_time(summary.last_activity),
            summary.messages,
        );
    }
    out
}
