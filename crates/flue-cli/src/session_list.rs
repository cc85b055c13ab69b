//! `flue session list`: a page of the workspace's conversations (the `--limit` most recently
//! active, or those before `--before`), printed least recently active first, so the one to
//! continue is at the bottom, next to the prompt; the cursor of the page before it last.

use std::fmt::Write as _;

use flue_core::view::ConversationQuery;
use serde_json::json;

use crate::Exit;
use crate::args::ListArgs;
use crate::audit::{format_time, open_inspected_store};
use crate::stdout::{out, outln};
use crate::terminal::Output;
use crate::workspace::{ConversationSummary, conversations, resolve_store_root};

/// Runs `flue session list`.
pub(crate) async fn list(args: ListArgs) -> anyhow::Result<Exit> {
    let root = resolve_store_root(args.root.as_deref())?;
    let output = Output::for_workspace(&root)?;
    let query = ConversationQuery::new(
        args.search.clone().filter(|text| !text.trim().is_empty()),
        args.agent.clone(),
        usize::from(args.limit),
    )
    .with_before(args.before.clone());
    let (mut listed, next) = match open_inspected_store(&root, args.store.as_deref()).await? {
        Some(store) => {
            let page = conversations(&*store, &query).await?;
            (page.conversations, page.next)
        }
        // A workspace nothing ran in yet has no store: no conversations, not an error.
        None => (Vec::new(), None),
    };
    listed.reverse();
    if args.json {
        outln!(
            "{}",
            output.json_pretty(&json!({ "conversations": listed, "next": next }))?
        )?;
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
    out!("{}", output.stdout_text(&table(&listed)))?;
    if let Some(next) = next {
        eprintln!("earlier conversations: {}", earlier_command(&args, &next));
    }
    Ok(Exit::Success)
}

/// The command that lists the page before this one: the same filters, `--before` its cursor.
fn earlier_command(args: &ListArgs, next: &str) -> String {
    let mut command = String::from("flue session list");
    if let Some(agent) = &args.agent {
        let _ = write!(command, " --agent {agent}");
    }
    if let Some(search) = args
        .search
        .as_deref()
        .filter(|text| !text.trim().is_empty())
    {
        let _ = write!(command, " --search {search:?}");
    }
    if args.limit != 50 {
        let _ = write!(command, " --limit {}", args.limit);
    }
    let _ = write!(command, " --before {next}");
    command
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
            .map_or_else(|| "-".to_owned(), crate::term::cost_text);
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
