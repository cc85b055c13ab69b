//! Finding the workspace root and where its conversations are stored (`.flue/flue.db`).

use std::path::{Path, PathBuf};

use flue_core::SqliteStore;

use crate::HostError;

/// Where conversations persist, relative to the workspace root.
pub const DB_PATH: &str = ".flue/flue.db";

/// The nearest ancestor of `start` (itself included) holding `agents/` or `flue.toml`.
pub fn find_root(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .find(|dir| dir.join("agents").is_dir() || dir.join("flue.toml").is_file())
        .map(Path::to_path_buf)
}

/// The root given explicitly (`--root`), else the one found from `cwd` with [`find_root`].
///
/// The library never reads the process's current directory: the caller passes it.
pub fn resolve_root(explicit: Option<&Path>, cwd: &Path) -> Result<PathBuf, HostError> {
    if let Some(root) = explicit {
        if !root.is_dir() {
            return Err(HostError::RootNotFound {
                message: format!("--root {} is not a directory", root.display()),
            });
        }
        return Ok(root.to_path_buf());
    }
    find_root(cwd).ok_or_else(|| HostError::RootNotFound {
        message: format!(
            "no workspace found: neither {} nor any parent holds agents/ or flue.toml (pass --root DIR)",
            cwd.display()
        ),
    })
}

/// The store file of the workspace at `root`.
pub fn store_path(root: &Path) -> PathBuf {
    root.join(DB_PATH)
}

/// Opens the workspace's conversation store, creating it on first use.
pub fn open_store(root: &Path) -> Result<SqliteStore, HostError> {
    Ok(SqliteStore::open(&store_path(root))?)
}
