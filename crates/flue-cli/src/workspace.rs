//! The workspace root as the command line gives it: `--root`, else found from the current
//! directory (the one place the process cwd is read).

use std::path::{Path, PathBuf};

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
