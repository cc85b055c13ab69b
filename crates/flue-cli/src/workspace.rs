//! The workspace root as the command line gives it: `--root`, else found from the current
//! directory (the one place the process cwd is read).

use std::path::{Path, PathBuf};

pub(crate) use flue_core::view::ConversationSummary;
use flue_core::view::{ConversationIndex, ConversationPage, ConversationQuery};
use flue_core::{FlueError, store::DynConversationStore};
pub(crate) use flue_host::DB_PATH;
use flue_host::HostError;

/// The root given with `--root`, or the one found from the current directory, canonical
/// (absolute, symlinks, `.` and `..` resolved: see [`canonical`]). A root that holds no
/// workspace but sits next to one (the `agents/` folder itself, or a parent of the workspace)
/// is an error naming the folder to pass instead.
pub(crate) fn resolve_root(explicit: Option<&Path>) -> Result<PathBuf, HostError> {
    if let Some(root) = explicit {
        let root = canonical(&flue_host::resolve_root(Some(root), root)?, "--root")?;
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
    let root = flue_host::resolve_root(None, &cwd).map_err(|err| match nearby_workspace(&cwd) {
        Some(hint) => HostError::RootNotFound {
            message: format!("{err}; {hint}"),
        },
        None => err,
    })?;
    canonical(&root, "the workspace root")
}

/// `path` as one absolute form with every symlink, `.` and `..` resolved, whatever form the
/// command line gave it in (`my-agents`, `./my-agents`, `..`, a symlinked folder). Done once, at
/// the edge: later comparisons (a watcher's absolute event paths against the root, paths shown
/// relative to it) hold only between paths of this form. `what` names the argument in errors.
pub(crate) fn canonical(path: &Path, what: &str) -> Result<PathBuf, HostError> {
    std::fs::canonicalize(path).map_err(|err| HostError::RootNotFound {
        message: format!("{what} {}: {err}", path.display()),
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
        Some(root) => canonical(
            &flue_host::resolve_root(Some(root), root)?,
            "the store root",
        ),
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

/// A page of the store's conversations as `query` asks, most recently active first, with the
/// schedule each came from (flue-server's listing, which `GET /_flue/dev/conversations` reads
/// too).
pub(crate) async fn conversations(
    store: &dyn DynConversationStore,
    query: &ConversationQuery,
) -> Result<ConversationPage, FlueError> {
    let mut page = ConversationIndex::new().search(store, query).await?;
    for summary in &mut page.conversations {
        summary.origin = summary
            .first_key
            .as_deref()
            .and_then(flue_build::schedule_of_key)
            .map(|name| format!("{}{name}", flue_build::SCHEDULE_ORIGIN_PREFIX));
    }
    Ok(page)
}

/// The id of agent `agent`'s most recently active conversation, if it has any.
pub(crate) async fn latest_conversation(
    store: &dyn DynConversationStore,
    agent: &str,
) -> Result<Option<String>, FlueError> {
    let query = ConversationQuery::new(None, Some(agent.to_owned()), 1);
    Ok(conversations(store, &query)
        .await?
        .conversations
        .into_iter()
        .next()
        .map(|summary| summary.id))
}
