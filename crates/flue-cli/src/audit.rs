//! `flue audit`: print the file tools' audit log of one conversation.

#[cfg(test)]
mod tests;

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;

use anyhow::bail;
use flue_core::store::{AuditEntry, DynAuditStore, DynConversationStore};
use serde_json::json;

use crate::Exit;
use crate::args::AuditArgs;
use crate::stdout::{out, outln};
use crate::terminal::Output;
use crate::workspace::{DB_PATH, instance_id, resolve_store_root};

/// Runs `flue audit`.
pub(crate) async fn show(args: AuditArgs) -> anyhow::Result<Exit> {
    if let Some(id) = &args.id {
        flue_core::check_instance_id(id)?;
    }
    let root = resolve_store_root(args.root.as_deref())?;
    let store = open_existing_store(&root, args.store.as_deref()).await?;
    let audit = audit_of(&store)?;
    let entries = match &args.id {
        Some(id) => audit.list_audit(&instance_id(&*store, id).await?).await?,
        None => audit.list_all_audit().await?,
    };
    let output = Output::for_workspace(&root)?;
    if args.json {
        let out = json!({"id": args.id, "entries": entries});
        outln!("{}", output.json_pretty(&out)?)?;
        return Ok(Exit::Success);
    }
    if entries.is_empty() {
        match &args.id {
            Some(id) => eprintln!("conversation {id:?} has no audit entries"),
            None => eprintln!("no conversation of this workspace has audit entries"),
        }
    }
    let root_text = root
        .canonicalize()
        .unwrap_or_else(|_| root.clone())
        .display()
        .to_string();
    out!(
        "{}",
        output.stdout_text(&audit_text(&entries, &root_text, args.diff))
    )?;
    Ok(Exit::Success)
}

/// The store the inspection commands read, as `flue serve` picks it: `url` (`--store`), else
/// flue.toml's `[store] url`, else `.flue/flue.db` under `root`. `None` when that file does
/// not exist (nothing ran here yet). `${VAR}` in a URL comes from the environment and `.env`.
pub(crate) async fn open_inspected_store(
    root: &Path,
    url: Option<&str>,
) -> anyhow::Result<Option<Arc<dyn DynConversationStore>>> {
    let vars = std::env::vars_os()
        .filter_map(|(key, value)| Some((key.into_string().ok()?, value.into_string().ok()?)));
    let env = flue_host::Env::for_root(vars, root, None)?;
    // Its errors name the file or `user@host:port/database` already.
    let opened = flue_host::open_inspect_store(root, url, &env, &crate::trust::policy()).await?;
    Ok(opened.map(|opened| opened.store))
}

/// [`open_inspected_store`], failing when there is no store yet.
pub(crate) async fn open_existing_store(
    root: &Path,
    url: Option<&str>,
) -> anyhow::Result<Arc<dyn DynConversationStore>> {
    match open_inspected_store(root, url).await? {
        Some(store) => Ok(store),
        None => bail!(
            "no conversations are stored under {} (no {DB_PATH}); pass --store URL to read a \
             Postgres store",
            root.display()
        ),
    }
}

/// The audit log and trash of `store`.
pub(crate) fn audit_of(
    store: &Arc<dyn DynConversationStore>,
) -> anyhow::Result<Arc<dyn DynAuditStore>> {
    match Arc::clone(store).audit_store() {
        Some(audit) => Ok(audit),
        None => bail!("this store keeps no audit log"),
    }
}

/// One line per entry: time, outcome, tool, operation, path(s), hashes, conversation, session
/// and agent.
fn audit_text(entries: &[AuditEntry], root: &str, with_diff: bool) -> String {
    let mut out = String::new();
    for entry in entries {
        let mut paths = entry
            .path
            .as_deref()
            .map(|path| relative(path, root))
            .unwrap_or_default();
        if let Some(destination) = &entry.destination_path {
            let _ = write!(paths, " -> {}", relative(destination, root));
        }
        let outcome = if entry.ok {
            let short = |sha: Option<&String>| {
                sha.map_or_else(|| "-".to_owned(), |sha| sha.chars().take(12).collect())
            };
            format!(
                "{} -> {}",
                short(entry.sha256_before.as_ref()),
                short(entry.sha256_after.as_ref())
            )
        } else {
            format!(
                "FAILED {}: {}",
                entry.error_kind.as_deref().unwrap_or("error"),
                entry.error_message.as_deref().unwrap_or_default()
            )
        };
        // Writing to a String cannot fail.
        let _ = writeln!(
            out,
            "{}  {} {}  {}  {}  (conversation {}, session {}, agent {})",
            format_time(entry.at),
            entry.tool,
            entry.operation,
            paths,
            outcome,
            conversation_of(&entry.instance_id),
            entry.session,
            if entry.agent.is_empty() {
                "-"
            } else {
                &entry.agent
            },
        );
        if with_diff && let Some(diff) = &entry.diff {
            out.push_str(diff);
            if entry.diff_truncated {
                out.push_str("[diff truncated at 64 KiB]\n");
            }
        }
    }
    out
}

/// The conversation id of a harness instance id (`agent:id` for conversations `flue run` and
/// `flue serve` keep).
pub(crate) fn conversation_of(instance_id: &str) -> &str {
    instance_id
        .split_once(':')
        .map_or(instance_id, |(_, id)| id)
}

/// `path` relative to the workspace root when inside it.
pub(crate) fn relative(path: &str, root: &str) -> String {
    path.strip_prefix(root)
        .and_then(|rest| rest.strip_prefix('/'))
        .unwrap_or(path)
        .to_owned()
}

/// Milliseconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ` (UTC): to the second.
pub(crate) fn format_time(ms: u64) -> String {
    flue_core::util::iso8601_ms(ms - ms % 1000).replace(".000Z", "Z")
}
