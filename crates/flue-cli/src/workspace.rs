//! The workspace root as the command line gives it: `--root`, else found from the current
//! directory (the one place the process cwd is read).

use std::path::{Path, PathBuf};

use flue_core::{
    ConversationInfo, DEFAULT_SESSION, FlueError, Record, Usage,
    store::{DynConversationStore, SessionKey},
};
pub(crate) use flue_host::DB_PATH;
use flue_host::HostError;

/// The root given with `--root`, or the one found from the current directory. A root that
/// holds no workspace but sits next to one (the `agents/` folder itself, or a parent of the
/// workspace) is an error naming the folder to pass instead.
pub(crate) fn resolve_root(explicit: Option<&Path>) -> Result<PathBuf, HostError> {
    if let Some(root) = explicit {
        let root = flue_host::resolve_root(Some(root), root)?;
        if !holds_workspace(&root)
            && !root.join(DB_PATH).is_file()
            && let Some(hint) = nearby_workspace(&root)
        {
            return Err(HostError::RootNotFound {
                message: format!(
                    "--root {} holds no agents/ or flue.toml; {hint}",
                    root.display()
                ),
            });
        }
        return Ok(root);
    }
    let cwd = current_dir()?;
    flue_host::resolve_root(None, &cwd).map_err(|err| match nearby_workspace(&cwd) {
        Some(hint) => HostError::RootNotFound {
            message: format!("{err}; {hint}"),
        },
        None => err,
    })
}

/// The root of commands that read stored conversations (`session`, `audit`, `trash`): as
/// [`resolve_root`], except that without `--root` the nearest ancestor of the current directory
/// holding `.flue/flue.db` also counts (where a `--bundle` run keeps its conversations).
pub(crate) fn resolve_store_root(explicit: Option<&Path>) -> Result<PathBuf, HostError> {
    if explicit.is_some() {
        return resolve_root(explicit);
    }
    let cwd = current_dir()?;
    match cwd
        .ancestors()
        .find(|dir| holds_workspace(dir) || dir.join(DB_PATH).is_file())
    {
        Some(root) => flue_host::resolve_root(Some(root), root),
        None => resolve_root(None),
    }
}

fn holds_workspace(dir: &Path) -> bool {
    dir.join("agents").is_dir() || dir.join("flue.toml").is_file()
}

/// A hint naming the workspace next to `dir`: its parent when `dir` is an `agents/` folder, or
/// a folder below it (two levels at most) holding `agents/`.
fn nearby_workspace(dir: &Path) -> Option<String> {
    if dir.file_name().is_some_and(|name| name == "agents")
        && let Some(parent) = dir.parent()
    {
        return Some(format!(
            "it is the agents folder itself: pass the folder that holds it, --root {}",
            parent.display()
        ));
    }
    let mut found = Vec::new();
    let children = |dir: &Path| -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        let mut dirs: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| {
                path.is_dir()
                    && !path
                        .file_name()
                        .is_some_and(|name| name.to_string_lossy().starts_with('.'))
            })
            .collect();
        dirs.sort();
        dirs
    };
    for child in children(dir) {
        if holds_workspace(&child) {
            found.push(child);
            continue;
        }
        found.extend(children(&child).into_iter().filter(|c| holds_workspace(c)));
    }
    match found.as_slice() {
        [] => None,
        [one] => Some(format!(
            "the workspace is {}: pass --root {}",
            one.display(),
            one.display()
        )),
        many => Some(format!(
            "workspaces below it: {}; pass one as --root",
            many.iter()
                .take(5)
                .map(|path| path.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// The process's current directory.
pub(crate) fn current_dir() -> Result<PathBuf, HostError> {
    #[allow(
        clippy::disallowed_methods,
        reason = "the CLI is where the process cwd is read"
    )]
    std::env::current_dir().map_err(|err| HostError::RootNotFound {
        message: format!("cannot read the current directory: {err}"),
    })
}

/// The harness instance id a command-line `--id` names. `flue run` keeps a conversation's
/// sessions under `<agent>:<id>`; an id with sessions of its own (or already of that form) is
/// taken as it is. Several agents with that conversation id are an error listing them.
pub(crate) async fn instance_id(
    store: &dyn DynConversationStore,
    id: &str,
) -> Result<String, FlueError> {
    if !store.list(id).await?.is_empty() {
        return Ok(id.to_owned());
    }
    let mut found = store.conversations_with_id(id).await?;
    if found.is_empty() {
        // Written without the runtime (`flue run --skill`): sessions under `AGENT:ID` only.
        let suffix = format!(":{id}");
        let mut direct: Vec<String> = store
            .instance_ids()
            .await?
            .into_iter()
            .filter(|instance| instance.ends_with(&suffix))
            .collect();
        return match direct.len() {
            0 => Ok(id.to_owned()),
            1 => Ok(direct.remove(0)),
            _ => Err(FlueError::config(format!(
                "several agents have a conversation {id:?}: pass --id AGENT:{id}, one of {}",
                direct.join(", ")
            ))),
        };
    }
    match found.len() {
        0 => Ok(id.to_owned()),
        1 => Ok(found.remove(0).key.instance_id()),
        _ => Err(FlueError::config(format!(
            "several agents have a conversation {id:?}: pass --id AGENT:{id}, one of {}",
            found
                .iter()
                .map(|info| info.key.instance_id())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// One stored conversation as `flue session list` shows it.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct ConversationSummary {
    /// The conversation id (`--id`).
    pub(crate) id: String,
    /// Its agent.
    pub(crate) agent: String,
    /// When it was created, ms since the epoch.
    #[serde(rename = "createdAt")]
    pub(crate) created_at: u64,
    /// The last write to any of its sessions, ms since the epoch.
    #[serde(rename = "lastActivity")]
    pub(crate) last_activity: u64,
    /// Records in its default session (messages, tool results, summaries).
    pub(crate) messages: u64,
    /// Its sessions (the default one and task sessions).
    pub(crate) sessions: usize,
    /// Submissions admitted but not settled yet (queued, running, or left by a killed run).
    pub(crate) pending: u64,
    /// Tokens and cost of its model turns, in every session (tasks and MCP sampling
    /// included).
    pub(crate) usage: Usage,
    /// Its model turns, in every session.
    #[serde(rename = "modelTurns")]
    pub(crate) model_turns: u64,
    /// Where its first message came from, when a schedule sent it: `schedule:<name>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) origin: Option<String>,
}

/// The usage of a model turn (a failed one included) or an MCP server's sampling stored in
/// `record`.
pub(crate) fn record_usage(record: &Record) -> Option<Usage> {
    match record {
        Record::Assistant(message) => Some(message.usage),
        Record::FailedTurn(failed) => Some(failed.usage),
        Record::Sampling(exchange) => Some(exchange.usage),
        _ => None,
    }
}

/// The usage summed over every session of conversation `instance_id`, and its model turns.
pub(crate) async fn conversation_usage(
    store: &dyn DynConversationStore,
    instance_id: &str,
) -> Result<(Usage, u64), FlueError> {
    let mut usage = Usage::default();
    let mut turns = 0;
    for session in store.list(instance_id).await? {
        let key = SessionKey::new(instance_id, &session.session);
        let Some(log) = store.load(&key, 0).await? else {
            continue;
        };
        for stored in &log.records {
            if let Some(used) = record_usage(&stored.record) {
                usage += used;
                turns += u64::from(matches!(
                    stored.record,
                    Record::Assistant(_) | Record::FailedTurn(_)
                ));
            }
        }
    }
    Ok((usage, turns))
}

/// Every conversation of the store, least recently active first.
pub(crate) async fn conversations(
    store: &dyn DynConversationStore,
) -> Result<Vec<ConversationSummary>, FlueError> {
    let mut out = Vec::new();
    let managed = store.all_conversations().await?;
    let known: std::collections::BTreeSet<String> =
        managed.iter().map(|info| info.key.instance_id()).collect();
    for info in managed {
        out.push(summarize(store, info).await?);
    }
    // Conversations written without the runtime (`flue run --skill`), named `AGENT:ID`.
    for instance in store.instance_ids().await? {
        if known.contains(&instance) {
            continue;
        }
        let Some((agent, id)) = instance.split_once(':') else {
            continue;
        };
        let info = ConversationInfo {
            key: flue_core::ConversationKey::new(agent, id),
            uid: String::new(),
            head: Default::default(),
            created_at: 0,
            owner: None,
            epoch: 0,
            unsettled: 0,
        };
        let mut summary = summarize(store, info).await?;
        summary.created_at = store
            .list(&instance)
            .await?
            .iter()
            .map(|session| session.created_at)
            .min()
            .unwrap_or(summary.last_activity);
        out.push(summary);
    }
    out.sort_by(|a, b| (a.last_activity, &a.id).cmp(&(b.last_activity, &b.id)));
    Ok(out)
}

async fn summarize(
    store: &dyn DynConversationStore,
    info: ConversationInfo,
) -> Result<ConversationSummary, FlueError> {
    let sessions = store.list(&info.key.instance_id()).await?;
    let last_activity = sessions
        .iter()
        .map(|session| session.updated_at)
        .max()
        .unwrap_or(info.created_at)
        .max(info.created_at);
    let messages = sessions
        .iter()
        .find(|session| session.session == DEFAULT_SESSION)
        .map_or(0, |session| session.version);
    let (usage, model_turns) = conversation_usage(store, &info.key.instance_id()).await?;
    let origin = if info.uid.is_empty() {
        None
    } else {
        origin(store, &info.key).await?
    };
    Ok(ConversationSummary {
        id: info.key.id.clone(),
        agent: info.key.agent.clone(),
        created_at: info.created_at,
        last_activity,
        messages,
        sessions: sessions.len(),
        pending: info.unsettled,
        usage,
        model_turns,
        origin,
    })
}

/// `schedule:<name>` when the conversation's first submission was a schedule's tick (its
/// idempotency key is the schedule's); `None` otherwise.
async fn origin(
    store: &dyn DynConversationStore,
    key: &flue_core::ConversationKey,
) -> Result<Option<String>, FlueError> {
    // The first batches are the creation and the first admission.
    let page = store.read_stream(key, flue_core::Offset(0), 4).await?;
    let Some(submission_id) = page.batches.iter().find_map(|batch| match &batch.body {
        flue_core::BatchBody::Admitted { submission_id, .. } => Some(submission_id.clone()),
        _ => None,
    }) else {
        return Ok(None);
    };
    let key = store
        .submission(&submission_id)
        .await?
        .and_then(|submission| submission.idempotency_key);
    Ok(key
        .as_deref()
        .and_then(flue_build::schedule_of_key)
        .map(|name| format!("{}{name}", flue_build::SCHEDULE_ORIGIN_PREFIX)))
}

/// The id of agent `agent`'s most recently active conversation, if it has any.
pub(crate) async fn latest_conversation(
    store: &dyn DynConversationStore,
    agent: &str,
) -> Result<Option<String>, FlueError> {
    Ok(conversations(store)
        .await?
        .into_iter()
        .rfind(|summary| summary.agent == agent)
        .map(|summary| summary.id))
}
