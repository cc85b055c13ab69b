//! The workspace root as the command line gives it: `--root`, else found from the current
//! directory (the one place the process cwd is read).

use std::path::{Path, PathBuf};

use flue_core::{ConversationStore, FlueError, SessionStore, SqliteStore};
pub(crate) use flue_host::DB_PATH;
use flue_host::HostError;

/// The root given with `--root`, or the one found from the current directory.
pub(crate) fn resolve_root(explicit: Option<&Path>) -> Result<PathBuf, HostError> {
    if let Some(root) = explicit {
        return flue_host::resolve_root(Some(root), root);
    }
    flue_host::resolve_root(None, &current_dir()?)
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
pub(crate) async fn instance_id(store: &SqliteStore, id: &str) -> Result<String, FlueError> {
    if !store.list(id).await?.is_empty() {
        return Ok(id.to_owned());
    }
    let mut found = store.conversations_with_id(id).await?;
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
