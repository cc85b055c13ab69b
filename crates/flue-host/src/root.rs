//! Finding the workspace root and where its conversations are stored (`.flue/flue.db`).

use std::path::{Path, PathBuf};

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

/// The root given explicitly (`--root`), else the one found from `cwd` with [`find_root`],
/// once it is known to be readable ([`HostError::RootUnreadable`] otherwise).
///
/// The library never reads the process's current directory: the caller passes it.
pub fn resolve_root(explicit: Option<&Path>, cwd: &Path) -> Result<PathBuf, HostError> {
    let root = find_or_take_root(explicit, cwd)?;
    // Without this, an unreadable root looks empty (no agents) and the first error is about
    // the first file read in it, `.env`, which is not what needs fixing.
    if let Err(err) = std::fs::read_dir(&root) {
        return Err(HostError::RootUnreadable {
            message: format!(
                "cannot read the workspace root {shown}: {err}; give this user permission to \
                 list and read it (`chmod u+rx {shown}`) or pass another --root",
                shown = root.display()
            ),
        });
    }
    Ok(root)
}

fn find_or_take_root(explicit: Option<&Path>, cwd: &Path) -> Result<PathBuf, HostError> {
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
