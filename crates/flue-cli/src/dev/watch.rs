//! Watching a workspace for the changes that need a rebuild: `agents/` and `.agents/`
//! (recursively), `flue.toml`, `AGENTS.md` and `.env*` at the root, and the scripts of agents
//! on the scripted model. Only writes count (creating, changing, removing, renaming, closing
//! after a write): reading a file, as a rebuild does, never triggers one. [`next_batch`]
//! debounces: it waits for a change, then for a quiet period, and returns every path seen.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context;
use notify::event::{AccessKind, AccessMode, EventKind};
use notify::{RecommendedWatcher, RecursiveMode, Watcher as _};
use tokio::sync::mpsc;

/// The folders watched recursively, relative to the root.
const TREES: &[&str] = &["agents", ".agents"];

/// A running watcher. Dropping it stops watching.
pub(super) struct Watcher {
    watcher: RecommendedWatcher,
    /// What is watched now: (path, recursive).
    watched: BTreeSet<(PathBuf, bool)>,
    /// The script files that count as relevant (shared with the event handler).
    scripts: Arc<Mutex<BTreeSet<PathBuf>>>,
}

impl Watcher {
    /// Starts watching `root`; the paths of relevant changes arrive on the returned channel
    /// as they happen (see [`next_batch`]).
    pub(super) fn start(root: &Path) -> anyhow::Result<(Self, mpsc::UnboundedReceiver<PathBuf>)> {
        let (sender, receiver) = mpsc::unbounded_channel();
        let scripts = Arc::new(Mutex::new(BTreeSet::new()));
        let filter_root = root.to_path_buf();
        let filter_scripts = Arc::clone(&scripts);
        let handler = move |result: notify::Result<notify::Event>| {
            // A watch error (e.g. a watched folder removed): the next refresh re-adds what
            // exists; there is nothing to rebuild from an error alone.
            let Ok(event) = result else { return };
            if !is_write(event.kind) {
                return;
            }
            let scripts = filter_scripts
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            for path in event.paths {
                if relevant(&filter_root, &path, &scripts) {
                    let _ = sender.send(path);
                }
            }
        };
        let watcher = notify::recommended_watcher(handler)
            .context("cannot watch the workspace for changes")?;
        let mut watcher = Self {
            watcher,
            watched: BTreeSet::new(),
            scripts,
        };
        watcher.refresh(root, &[]);
        Ok((watcher, receiver))
    }

    /// Watches what exists now: the root, `agents/`, `.agents/` and the folders of `files`
    /// (model scripts, an `--env` file), which count as relevant too; a folder created since
    /// the last refresh is added, removed ones are dropped.
    pub(super) fn refresh(&mut self, root: &Path, files: &[PathBuf]) {
        let scripts = files;
        let mut wanted: BTreeSet<(PathBuf, bool)> = BTreeSet::new();
        wanted.insert((root.to_path_buf(), false));
        for tree in TREES {
            let path = root.join(tree);
            if path.is_dir() {
                wanted.insert((path, true));
            }
        }
        for script in scripts {
            if let Some(folder) = script.parent()
                && folder.is_dir()
                && !TREES.iter().any(|tree| folder.starts_with(root.join(tree)))
            {
                wanted.insert((folder.to_path_buf(), false));
            }
        }
        *self.scripts.lock().unwrap_or_else(PoisonError::into_inner) =
            scripts.iter().cloned().collect();
        let watcher = &mut self.watcher;
        for (path, _) in self.watched.difference(&wanted) {
            let _ = watcher.unwatch(path);
        }
        let mut now = BTreeSet::new();
        for (path, recursive) in wanted {
            let mode = if recursive {
                RecursiveMode::Recursive
            } else {
                RecursiveMode::NonRecursive
            };
            let known = self.watched.contains(&(path.clone(), recursive));
            if known || watcher.watch(&path, mode).is_ok() {
                now.insert((path, recursive));
            }
        }
        self.watched = now;
    }
}

/// Waits for the next relevant change, then until `debounce` passes without another; returns
/// every changed path (sorted, once each), or `None` when the watcher stopped.
pub(super) async fn next_batch(
    changes: &mut mpsc::UnboundedReceiver<PathBuf>,
    debounce: Duration,
) -> Option<Vec<PathBuf>> {
    let mut batch = BTreeSet::new();
    batch.insert(changes.recv().await?);
    loop {
        match tokio::time::timeout(debounce, changes.recv()).await {
            Ok(Some(path)) => {
                batch.insert(path);
            }
            Ok(None) => return None,
            Err(_) => return Some(batch.into_iter().collect()),
        }
    }
}

/// True for the events that change a file: reads (open, close after reading) are not.
fn is_write(kind: EventKind) -> bool {
    match kind {
        EventKind::Create(_)
        | EventKind::Modify(_)
        | EventKind::Remove(_)
        | EventKind::Any
        | EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) | EventKind::Other => false,
    }
}

/// True when a change of `path` needs a rebuild.
pub(super) fn relevant(root: &Path, path: &Path, scripts: &BTreeSet<PathBuf>) -> bool {
    if scripts.contains(path) {
        return true;
    }
    let Ok(relative) = path.strip_prefix(root) else {
        return false;
    };
    let mut components = relative.components();
    let Some(first) = components.next() else {
        return false;
    };
    let first = first.as_os_str().to_string_lossy();
    let top_level = components.next().is_none();
    if TREES.contains(&first.as_ref()) {
        return true;
    }
    top_level && (first == "flue.toml" || first == "AGENTS.md" || first.starts_with(".env"))
}

#[cfg(test)]
mod tests;
