//! Finding the workspace root and opening what lives in it (`.flue/flue.db`).

use std::path::{Path, PathBuf};

use flue_core::SqliteStore;

use crate::run::SetupError;

/// Where conversations persist, relative to the workspace root.
pub(crate) const DB_PATH: &str = ".flue/flue.db";

/// The nearest ancestor of `start` (itself included) holding `agents/` or `flue.toml`.
pub(crate) fn find_root(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .find(|dir| dir.join("agents").is_dir() || dir.join("flue.toml").is_file())
        .map(Path::to_path_buf)
}

/// The root given with `--root`, or the one found from the current directory, once it is
/// known to be readable.
pub(crate) fn resolve_root(explicit: Option<&Path>) -> Result<PathBuf, SetupError> {
    let root = find_or_take_root(explicit)?;
    // Without this, an unreadable root looks empty (no agents) and the first error is about
    // the first file read in it, `.env`, which is not what needs fixing.
    if let Err(err) = std::fs::read_dir(&root) {
        return Err(SetupError::RootUnreadable {
            message: format!(
                "cannot read the workspace root {shown}: {err}; give this user permission to \
                 list and read it (`chmod u+rx {shown}`) or pass another --root",
                shown = root.display()
            ),
        });
    }
    Ok(root)
}

fn find_or_take_root(explicit: Option<&Path>) -> Result<PathBuf, SetupError> {
    if let Some(root) = explicit {
        if !root.is_dir() {
            return Err(SetupError::RootNotFound {
                message: format!("--root {} is not a directory", root.display()),
            });
        }
        return Ok(root.to_path_buf());
    }
    #[allow(
        clippy::disallowed_methods,
        reason = "the CLI is where the process cwd is read"
    )]
    let cwd = std::env::current_dir().map_err(|err| SetupError::RootNotFound {
        message: format!("cannot read the current directory: {err}"),
    })?;
    find_root(&cwd).ok_or_else(|| SetupError::RootNotFound {
        message: format!(
            "no workspace found: neither {} nor any parent holds agents/ or flue.toml (pass --root DIR)",
            cwd.display()
        ),
    })
}

/// Opens the workspace's conversation store, creating it on first use.
pub(crate) fn open_store(root: &Path) -> Result<SqliteStore, SetupError> {
    Ok(SqliteStore::open(&root.join(DB_PATH))?)
}
