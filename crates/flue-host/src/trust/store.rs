//! The user's trust records: one JSON file in the user's configuration directory, listing
//! each trusted workspace root with the items trust was given for.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{TrustItem, TrustManifest};
use crate::HostError;

/// The file's name inside the configuration directory.
const FILE_NAME: &str = "trusted-workspaces.json";
/// Held while the file is read, changed and replaced, so two `flue trust` at once both count.
const LOCK_NAME: &str = "trusted-workspaces.lock";
/// The format this version writes; older ones are read, newer ones refused.
const VERSION: u32 = 1;
/// The largest trust file read: far more than thousands of workspaces need.
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Where the user's trust is recorded.
#[derive(Clone, Debug)]
pub struct TrustStore {
    dir: PathBuf,
}

/// One trusted workspace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustRecord {
    /// The workspace root, absolute and with links resolved.
    pub root: PathBuf,
    /// The manifest's digest when trust was given.
    pub digest: String,
    /// When trust was given, in milliseconds since the Unix epoch.
    pub trusted_at_ms: u64,
    /// What trust was given for.
    pub items: Vec<TrustItem>,
}

#[derive(Default, Serialize, Deserialize)]
struct TrustFile {
    version: u32,
    workspaces: Vec<TrustRecord>,
}

impl TrustStore {
    /// Records kept in `dir` (created on the first record, readable by the user alone).
    pub fn in_dir(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The user's own: `FLUE_CONFIG_DIR`, else `$XDG_CONFIG_HOME/flue`, else
    /// `$HOME/.config/flue`, from the variables `var` gives; `None` without any of them.
    pub fn for_user(var: impl Fn(&str) -> Option<String>) -> Option<Self> {
        let set = |name: &str| var(name).filter(|value| !value.trim().is_empty());
        if let Some(dir) = set("FLUE_CONFIG_DIR") {
            return Some(Self::in_dir(dir));
        }
        if let Some(dir) = set("XDG_CONFIG_HOME") {
            return Some(Self::in_dir(Path::new(&dir).join("flue")));
        }
        set("HOME").map(|home| Self::in_dir(Path::new(&home).join(".config/flue")))
    }

    /// The folder the records are in (the user's flue configuration directory).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file the records are in.
    pub fn path(&self) -> PathBuf {
        self.dir.join(FILE_NAME)
    }

    /// Every record, in the order given.
    pub fn records(&self) -> Result<Vec<TrustRecord>, HostError> {
        Ok(self.read()?.workspaces)
    }

    /// The record of the workspace at `root`, if it was ever trusted.
    pub fn record(&self, root: &Path) -> Result<Option<TrustRecord>, HostError> {
        let root = canonical(root);
        Ok(self
            .read()?
            .workspaces
            .into_iter()
            .find(|record| record.root == root))
    }

    /// Trusts the workspace at `root` for exactly the items of `manifest`, replacing any
    /// earlier record of it.
    pub fn trust(&self, root: &Path, manifest: &TrustManifest) -> Result<TrustRecord, HostError> {
        let record = TrustRecord {
            root: canonical(root),
            digest: manifest.digest(),
            trusted_at_ms: flue_core::util::now_ms(),
            items: manifest.items().to_vec(),
        };
        self.update(|file| {
            file.workspaces.retain(|old| old.root != record.root);
            file.workspaces.push(record.clone());
        })?;
        Ok(record)
    }

    /// Adds the items of `manifest` to what the workspace at `root` is trusted for (what a
    /// command that loads some of its agents asked about), keeping what was trusted before.
    pub fn add(&self, root: &Path, manifest: &TrustManifest) -> Result<TrustRecord, HostError> {
        let root = canonical(root);
        let mut added = None;
        self.update(|file| {
            let mut items: Vec<TrustItem> = file
                .workspaces
                .iter()
                .find(|old| old.root == root)
                .map(|old| old.items.clone())
                .unwrap_or_default();
            items.extend(manifest.items().iter().cloned());
            let all = TrustManifest::from_items(items);
            let record = TrustRecord {
                root: root.clone(),
                digest: all.digest(),
                trusted_at_ms: flue_core::util::now_ms(),
                items: all.items().to_vec(),
            };
            file.workspaces.retain(|old| old.root != root);
            file.workspaces.push(record.clone());
            added = Some(record);
        })?;
        added.ok_or_else(|| self.error("nothing was recorded"))
    }

    /// Forgets the workspace at `root`; whether it was trusted.
    pub fn revoke(&self, root: &Path) -> Result<bool, HostError> {
        let root = canonical(root);
        let mut found = false;
        self.update(|file| {
            let before = file.workspaces.len();
            file.workspaces.retain(|old| old.root != root);
            found = file.workspaces.len() != before;
        })?;
        Ok(found)
    }

    /// The items of `manifest` the record of `root` does not cover.
    pub(crate) fn uncovered<'a>(
        &self,
        root: &Path,
        manifest: &'a TrustManifest,
    ) -> Result<Vec<&'a TrustItem>, HostError> {
        let trusted: BTreeSet<String> = self
            .record(root)?
            .map(|record| record.items.iter().map(TrustItem::digest).collect())
            .unwrap_or_default();
        Ok(manifest
            .items()
            .iter()
            .filter(|item| !trusted.contains(&item.digest()))
            .collect())
    }

    fn read(&self) -> Result<TrustFile, HostError> {
        let path = self.path();
        let bytes = match flue_core::util::workspace_file::read_file_at_most(&path, MAX_FILE_BYTES)
        {
            Ok(bytes) => bytes,
            Err(err) if err.is_not_found() => return Ok(TrustFile::default()),
            Err(err) => return Err(self.error(&format!("cannot read it: {err}"))),
        };
        let file: TrustFile = serde_json::from_slice(&bytes).map_err(|err| {
            self.error(&format!(
                "it is not a trust file ({err}); delete it to trust workspaces anew"
            ))
        })?;
        if file.version > VERSION {
            return Err(self.error(&format!(
                "it was written by a newer flue (format {}); upgrade flue",
                file.version
            )));
        }
        Ok(file)
    }

    /// Reads, changes and replaces the file under the lock: a synced temporary file renamed
    /// over the old one, so a crash leaves the old records or the new ones.
    fn update(&self, change: impl FnOnce(&mut TrustFile)) -> Result<(), HostError> {
        create_private_dir(&self.dir)
            .map_err(|err| self.error(&format!("cannot create: {err}")))?;
        let lock = std::fs::File::create(self.dir.join(LOCK_NAME))
            .map_err(|err| self.error(&format!("cannot lock: {err}")))?;
        lock.lock()
            .map_err(|err| self.error(&format!("cannot lock: {err}")))?;
        let mut file = self.read()?;
        change(&mut file);
        file.version = VERSION;
        let json = serde_json::to_vec_pretty(&file)
            .map_err(|err| self.error(&format!("cannot write: {err}")))?;
        let temp = self
            .dir
            .join(format!("{FILE_NAME}.{}.tmp", std::process::id()));
        write_private(&temp, &json)
            .and_then(|()| std::fs::rename(&temp, self.path()))
            .map_err(|err| {
                let _ = std::fs::remove_file(&temp);
                self.error(&format!("cannot write: {err}"))
            })
    }

    fn error(&self, problem: &str) -> HostError {
        HostError::TrustFile {
            message: format!("trust file {}: {problem}", self.path().display()),
        }
    }
}

/// `root` absolute with links resolved, so every spelling of a folder is one record.
fn canonical(root: &Path) -> PathBuf {
    std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf())
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}
