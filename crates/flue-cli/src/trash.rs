//! `flue trash list|restore`: the content the file tools deleted or overwrote.

use flue_core::store::{TrashEntry, TrashReason};
use serde_json::{Value, json};
use std::fmt::Write as _;

use crate::Exit;
use crate::args::{TrashListArgs, TrashRestoreArgs};
use crate::audit::{audit_of, conversation_of, format_time, open_existing_store, relative};
use crate::stdout::{out, outln};
use crate::terminal::Output;
use crate::workspace::{instance_id, resolve_store_root};

/// The session name recorded in the audit log for restores made from the command line.
const CLI_SESSION: &str = "cli";

/// Runs `flue trash list`.
pub(crate) async fn list(args: TrashListArgs) -> anyhow::Result<Exit> {
    if let Some(id) = &args.id {
        flue_core::check_instance_id(id)?;
    }
    let root = resolve_store_root(args.root.as_deref())?;
    let store = open_existing_store(&root, args.store.as_deref()).await?;
    let audit = audit_of(&store)?;
    let entries = match &args.id {
        Some(id) => audit.list_trash(&instance_id(&*store, id).await?).await?,
        None => audit.list_all_trash().await?,
    };
    let output = Output::for_workspace(&root)?;
    if args.json {
        let out = json!({"id": args.id, "entries": entries});
        outln!("{}", output.json_pretty(&out)?)?;
        return Ok(Exit::Success);
    }
    if entries.is_empty() {
        match &args.id {
            Some(id) => eprintln!("the trash of conversation {id:?} is empty"),
            None => eprintln!("the trash of every conversation of this workspace is empty"),
        }
    }
    let root_text = root
        .canonicalize()
        .unwrap_or_else(|_| root.clone())
        .display()
        .to_string();
    out!("{}", output.stdout_text(&trash_text(&entries, &root_text)))?;
    Ok(Exit::Success)
}

/// Runs `flue trash restore`: the `restore_file` tool, run on the workspace directory with the
/// workspace's store, so the restore is audited like the agent's own.
pub(crate) async fn restore(args: TrashRestoreArgs) -> anyhow::Result<Exit> {
    flue_core::check_instance_id(&args.id)?;
    let root = resolve_store_root(args.root.as_deref())?;
    let store = open_existing_store(&root, args.store.as_deref()).await?;
    let instance_id = instance_id(&*store, &args.id).await?;
    let result = flue_host::restore_from_trash(
        &root,
        audit_of(&store)?,
        &instance_id,
        &args.trash_id,
        args.to.as_deref(),
        CLI_SESSION,
        "flue-cli",
    )
    .await?;
    let output = Output::for_workspace(&root)?;
    match result {
        Ok(envelope) => {
            if args.json {
                outln!("{}", output.json_line(&envelope)?)?;
            } else {
                let data = &envelope["data"];
                let line = format!(
                    "restored {} (sha256 {})",
                    data["path"].as_str().unwrap_or_default(),
                    data["sha256"].as_str().unwrap_or_default()
                );
                outln!("{}", output.stdout_text(&line))?;
            }
            Ok(Exit::Success)
        }
        Err(err) => {
            if args.json {
                let envelope: Value = serde_json::from_str(&err.model_text()).unwrap_or_else(
                    |_| json!({"ok": false, "error": {"kind": err.kind, "message": err.message}}),
                );
                outln!("{}", output.json_line(&envelope)?)?;
            }
            eprintln!(
                "error: {}",
                output.stderr_text(&format!("{}: {}", err.kind, err.message))
            );
            if let Some(action) = &err.suggested_action {
                // The tool's hint speaks to a model (`destination`); here it is `--to`.
                let action = action.replace("`destination`", "--to PATH");
                eprintln!("hint: {}", output.stderr_text(&action));
            }
            Ok(Exit::Failure)
        }
    }
}

/// One line per trashed file: id, time, reason, path, size, hash, tool, conversation and
/// session.
fn trash_text(entries: &[TrashEntry], root: &str) -> String {
    let mut out = String::new();
    for entry in entries {
        let reason = match entry.reason {
            TrashReason::Deleted => "deleted",
            TrashReason::Overwritten => "overwritten",
            _ => "trashed",
        };
        // Writing to a String cannot fail.
        let _ = writeln!(
            out,
            "{}  {}  {:<11}  {}  {} bytes  sha256 {}  ({}, conversation {}, session {})",
            entry.id,
            format_time(entry.trashed_at),
            reason,
            relative(&entry.path, root),
            entry.size,
            entry.sha256.chars().take(12).collect::<String>(),
            entry.tool,
            conversation_of(&entry.instance_id),
            entry.session,
        );
    }
    out
}
