//! The chat commands that change the stored conversation or the workspace: `/fork`,
//! `/rewind` and `/compact`. They run at the prompt, with no reply being written, through the
//! same library calls as `flue session fork` and `flue rewind` (compaction: the runtime's, under
//! its ownership of the conversation).

use std::sync::Arc;

use flue_core::rewind::RewindTarget;
use flue_core::store::DynConversationStore;

use crate::history::{fork_into, n_turns, rewind_note};
use crate::input::Reply;
use crate::render::{Renderer, Target};
use crate::run::Prepared;
use crate::terminal::Output;

/// Forks the conversation with every turn so far into a new one; returns the new id (the chat
/// continues there) or `None` when the fork failed (said on stderr).
pub(crate) async fn fork(prepared: &Prepared, output: &Output) -> Option<String> {
    let store = prepared.app.runtime().store();
    let from = prepared.key.instance_id();
    let new_id = flue_core::util::new_ulid();
    match fork_into(&**store, &from, None, &new_id).await {
        Ok((_, report)) => {
            eprintln!(
                "forked conversation {} ({} turn(s), {} records) into {new_id}; the chat goes on \
                 in the fork (`flue chat {} --id {}` goes back)",
                prepared.key.id, report.turns, report.records, prepared.key.agent, prepared.key.id
            );
            Some(new_id)
        }
        Err(err) => {
            eprintln!("error: {}", output.stderr_text(&format!("{err:#}")));
            None
        }
    }
}

/// Puts back the files the conversation's last turn changed, once the user confirms the plan.
pub(crate) async fn rewind(prepared: &Prepared, output: &Output) {
    if let Err(err) = rewind_last_turn(prepared, output).await {
        eprintln!("error: {}", output.stderr_text(&format!("{err:#}")));
    }
}

/// Compacts the conversation now, showing the compaction's activity as a reply's.
pub(crate) async fn compact(prepared: &Prepared, output: &Output) {
    if let Err(err) = compact_now(prepared, output).await {
        eprintln!("error: {}", output.stderr_text(&format!("{err:#}")));
    }
}

async fn rewind_last_turn(prepared: &Prepared, output: &Output) -> anyhow::Result<()> {
    let store: Arc<dyn DynConversationStore> = Arc::clone(prepared.app.runtime().store());
    let instance = prepared.key.instance_id();
    let turn = n_turns(&*store, &instance).await?;
    if turn == 0 {
        eprintln!("nothing to rewind: the conversation has no turn yet");
        return Ok(());
    }
    let root = prepared.host.agents().root().to_path_buf();
    let agent = prepared.key.agent.as_str();
    let target = RewindTarget::Turn { turn };
    let plan = flue_host::rewind_workspace(
        &root,
        Arc::clone(&store),
        &instance,
        target.clone(),
        true, // dry_run: the plan first, for the user to confirm
        agent,
    )
    .await?;
    if plan.files.is_empty() && plan.skipped.is_empty() {
        eprintln!("{}", rewind_note(&plan, &prepared.key.id));
        return Ok(());
    }
    eprint!("{}", output.stderr_text(&plan.text()));
    if plan.conflicts().count() > 0 {
        anyhow::bail!(
            "file(s) changed outside the agent since its last write; nothing was rewound \
             (restore or move them, then /rewind again)"
        );
    }
    let question = format!("rewind the files of turn {turn}? [y/N] ");
    match crate::input::ask(&question).await {
        Reply::Line(answer) if matches!(answer.trim(), "y" | "Y" | "yes") => {}
        _ => {
            eprintln!("nothing was rewound");
            return Ok(());
        }
    }
    let plan = flue_host::rewind_workspace(&root, store, &instance, target, false, agent).await?;
    if plan.conflicts().count() > 0 {
        eprint!("{}", output.stderr_text(&plan.text()));
        anyhow::bail!("file(s) changed meanwhile; nothing was rewound");
    }
    eprintln!("{}", rewind_note(&plan, &prepared.key.id));
    Ok(())
}

async fn compact_now(prepared: &Prepared, output: &Output) -> anyhow::Result<()> {
    let store = prepared.app.runtime().store();
    if n_turns(&**store, &prepared.key.instance_id()).await? == 0 {
        eprintln!("nothing to compact: the conversation has no message yet");
        return Ok(());
    }
    eprintln!("compacting the conversation");
    let events = prepared.app.runtime().compact(&prepared.key).await?;
    let compacted = events
        .iter()
        .any(|event| matches!(event, flue_core::Event::CompactionEnd { .. }));
    if !compacted {
        eprintln!("nothing to compact: the conversation fits in what is kept verbatim");
        return Ok(());
    }
    let mut renderer = Renderer::new(output.clone(), false, Target::Stderr);
    for event in &events {
        renderer.render(event);
    }
    renderer.finish();
    renderer.write_out();
    Ok(())
}
