//! `flue memory list|delete`: the notes agents with `memory:` keep about subjects, listed and
//! erased by the application (retention, erasure requests), with nothing running.

use std::fmt::Write as _;
use std::sync::Arc;

use anyhow::bail;
use flue_core::store::{DynNoteStore, Note};
use serde_json::json;

use crate::Exit;
use crate::args::{MemoryDeleteArgs, MemoryListArgs};
use crate::audit::{format_time, open_existing_store};
use crate::stdout::{out, outln};
use crate::terminal::Output;
use crate::workspace::resolve_store_root;

/// The note store of the workspace's store (or `--store`).
async fn notes_of(
    root: &std::path::Path,
    url: Option<&str>,
) -> anyhow::Result<Arc<dyn DynNoteStore>> {
    let store = open_existing_store(root, url).await?;
    match store.note_store() {
        Some(notes) => Ok(notes),
        None => bail!("this store keeps no memory notes"),
    }
}

/// Runs `flue memory list`.
pub(crate) async fn list(args: MemoryListArgs) -> anyhow::Result<Exit> {
    let root = resolve_store_root(args.root.as_deref())?;
    let notes = notes_of(&root, args.store.as_deref()).await?;
    let found = notes
        .list_notes(args.agent.as_deref(), args.subject.as_deref())
        .await?;
    let output = Output::for_workspace(&root)?;
    if args.json {
        outln!("{}", output.json_pretty(&json!({ "notes": found }))?)?;
        return Ok(Exit::Success);
    }
    if found.is_empty() {
        eprintln!("no memory notes");
    }
    out!("{}", output.stdout_text(&notes_text(&found)))?;
    Ok(Exit::Success)
}

/// Runs `flue memory delete`.
pub(crate) async fn delete(args: MemoryDeleteArgs) -> anyhow::Result<Exit> {
    let root = resolve_store_root(args.root.as_deref())?;
    let notes = notes_of(&root, args.store.as_deref()).await?;
    let output = Output::for_workspace(&root)?;
    let deleted = match (&args.id, &args.agent) {
        (Some(id), Some(agent)) => u64::from(notes.delete_note(agent, &args.subject, id).await?),
        (_, agent) => notes.erase_notes(agent.as_deref(), &args.subject).await?,
    };
    if args.json {
        outln!("{}", output.json_line(&json!({ "deleted": deleted }))?)?;
    } else {
        eprintln!("deleted {deleted} note(s)");
    }
    if args.id.is_some() && deleted == 0 {
        eprintln!(
            "error: no note {:?} of that agent and subject",
            args.id.as_deref().unwrap_or_default()
        );
        return Ok(Exit::Failure);
    }
    Ok(Exit::Success)
}

/// One line per note: time, agent, subject, id, text.
fn notes_text(notes: &[Note]) -> String {
    let mut out = String::new();
    for note in notes {
        // Writing to a String cannot fail.
        let _ = writeln!(
            out,
            "{}  {}  {}  {}  {}",
            format_time(note.created_at),
            note.agent,
            note.subject,
            note.id,
            note.text.replace('\n', " ")
        );
    }
    out
}
