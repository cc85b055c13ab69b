//! `flue session fork` and `flue rewind`: going back in a stored conversation, with nothing
//! running. A fork copies the turns before a point into a new conversation; a rewind puts the
//! workspace's files back as they were before a turn (or undoes a rewind).

use flue_core::fork::{ForkReport, fork_conversation, turn_starts};
use flue_core::rewind::{RewindAction, RewindPlan, RewindTarget};
use flue_core::store::{DynConversationStore, SessionKey};
use flue_core::{DEFAULT_SESSION, check_instance_id};
use serde_json::json;

use crate::Exit;
use crate::args::{ForkArgs, RewindArgs};
use crate::audit::open_existing_store;
use crate::stdout::{out, outln};
use crate::terminal::Output;
use crate::workspace::{instance_id, resolve_store_root};

/// Runs `flue session fork`: prints the new conversation's id (or one `--json` object).
pub(crate) async fn fork(args: ForkArgs) -> anyhow::Result<Exit> {
    check_instance_id(&args.id)?;
    let new_id = match &args.new_id {
        Some(new_id) => {
            flue_core::submission::check_conversation_id(new_id)?;
            new_id.clone()
        }
        None => flue_core::util::new_ulid(),
    };
    let root = resolve_store_root(args.root.as_deref())?;
    let store = open_existing_store(&root, args.store.as_deref()).await?;
    let from = instance_id(&*store, &args.id).await?;
    let (agent, report) = fork_into(&*store, &from, Some(args.at), &new_id).await?;
    let output = Output::for_workspace(&root)?;
    if args.json {
        let out = json!({
            "id": new_id,
            "agent": agent,
            "from": args.id,
            "at": report.at,
            "turns": report.turns,
            "records": report.records,
            "tasks": report.tasks,
        });
        outln!("{}", output.json_line(&out)?)?;
    } else {
        eprintln!(
            "forked {:?} before turn {} of {} into a new conversation ({} records, {} task \
             session(s))",
            args.id,
            report.at,
            report.turns,
            report.records,
            report.tasks.len()
        );
        outln!("{}", output.stdout_text(&new_id))?;
    }
    Ok(Exit::Success)
}

/// Forks conversation `from` (an instance id) into a new conversation `new_id` of the same
/// agent, before turn `at` (`None`: with every turn); fails when `new_id` exists. Returns the
/// agent (`None` for sessions written without the runtime) and what was copied.
pub(crate) async fn fork_into(
    store: &dyn DynConversationStore,
    from: &str,
    at: Option<u64>,
    new_id: &str,
) -> anyhow::Result<(Option<String>, ForkReport)> {
    // A conversation's sessions live under `<agent>:<id>`; the fork's under `<agent>:<new>`.
    let (agent, to) = match flue_core::ConversationKey::from_instance_id(from) {
        Some(key) => {
            let target = flue_core::ConversationKey::new(key.agent.clone(), new_id);
            // Sessions without a conversation record count too (an earlier fork to that id).
            if store.conversation(&target).await?.is_some()
                || !store.list(&target.instance_id()).await?.is_empty()
            {
                anyhow::bail!(
                    "conversation {new_id:?} of agent {} already exists; pass another --new-id",
                    key.agent
                );
            }
            (Some(key.agent), target.instance_id())
        }
        None => {
            if !store.list(new_id).await?.is_empty() {
                anyhow::bail!("conversation {new_id:?} already exists; pass another --new-id");
            }
            (None, new_id.to_owned())
        }
    };
    let at = match at {
        Some(at) => at,
        None => n_turns(store, from).await? + 1,
    };
    let report = fork_conversation(store, from, at, &to).await?;
    Ok((agent, report))
}

/// How many turns conversation `instance` (an instance id) has: the `user (turn N):` lines of
/// `flue session show`.
pub(crate) async fn n_turns(
    store: &dyn DynConversationStore,
    instance: &str,
) -> anyhow::Result<u64> {
    let key = SessionKey::new(instance, DEFAULT_SESSION);
    let records = store
        .load(&key, 0)
        .await?
        .map(|log| log.records)
        .unwrap_or_default();
    Ok(turn_starts(&records).len() as u64)
}

/// Runs `flue rewind`: prints the plan, one line per file; fails (changing nothing) when a
/// file is in conflict.
pub(crate) async fn rewind(args: RewindArgs) -> anyhow::Result<Exit> {
    check_instance_id(&args.id)?;
    let target = match (args.to, &args.undo) {
        (_, Some(undo)) => RewindTarget::Undo { id: undo.clone() },
        (Some(turn), None) => RewindTarget::Turn { turn },
        (None, None) => anyhow::bail!("pass --to N (a turn) or --undo REWIND_ID"),
    };
    let root = resolve_store_root(args.root.as_deref())?;
    let store = open_existing_store(&root, args.store.as_deref()).await?;
    let instance = instance_id(&*store, &args.id).await?;
    let agent = flue_core::ConversationKey::from_instance_id(&instance)
        .map_or_else(|| "flue-cli".to_owned(), |key| key.agent);
    if !args.dry_run
        && let Some(key) = flue_core::ConversationKey::from_instance_id(&instance)
        && let Some(info) = store.conversation(&key).await?
        && info.unsettled > 0
    {
        anyhow::bail!(
            "conversation {:?} has {} unsettled submission(s); rewind once they have settled \
             (or abort them), or pass --dry-run to only list",
            args.id,
            info.unsettled
        );
    }
    let plan =
        flue_host::rewind_workspace(&root, store, &instance, target, args.dry_run, &agent).await?;
    let output = Output::for_workspace(&root)?;
    let conflicts = plan.conflicts().count();
    if args.json {
        outln!("{}", output.json_line(&serde_json::to_value(&plan)?)?)?;
    } else {
        out!("{}", output.stdout_text(&plan.text()))?;
        if conflicts == 0 {
            eprintln!("{}", rewind_note(&plan, &args.id));
        }
    }
    if conflicts > 0 {
        eprintln!(
            "error: {conflicts} file(s) changed outside the agent since its last write; nothing \
             was rewound (restore or move them, then run the rewind again)"
        );
        return Ok(Exit::Failure);
    }
    Ok(Exit::Success)
}

/// The line that says what a rewind without conflicts did, or would do.
pub(crate) fn rewind_note(plan: &RewindPlan, id: &str) -> String {
    if plan.files.is_empty() && plan.skipped.is_empty() {
        return match &plan.target {
            RewindTarget::Turn { turn } => format!(
                "nothing to rewind: no file tool of conversation {id:?} changed a file in turn \
                 {turn} or later (`flue audit --id {id}` lists what they changed)"
            ),
            _ => "nothing to undo: that rewind changed no file".to_owned(),
        };
    }
    if plan.applied {
        return format!(
            "rewind {}: {} file(s); undo it with `flue rewind --id {id} --undo {}`",
            plan.id,
            plan.files.len(),
            plan.id
        );
    }
    let n_changes = plan
        .files
        .iter()
        .filter(|file| matches!(file.action, RewindAction::Restore | RewindAction::Delete))
        .count();
    format!(
        "dry run: {n_changes} file(s) would be restored or deleted, nothing was changed; run it \
         again without --dry-run to apply"
    )
}
