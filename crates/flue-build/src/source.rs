//! Where a workspace's files come from: a folder on disk, or the files of a bundle.
//!
//! Loading reads every file through a [`Source`], by its path relative to the workspace root
//! with `/` separators (`""` is the root itself). The same loader therefore validates a source
//! tree and a bundle, and a bundle can never hold a workspace the loader would reject.
//! [`read_text`] reads one file as UTF-8 within a size limit, reporting a failure as a
//! diagnostic against it. On disk, every read follows the workspace file rule (links stay
//! inside the root, regular files only, bounded): the one rule for every file the build reads.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use flue_core::util::workspace_file::{
    EntryKind, WorkspaceFileError, WorkspaceFiles, read_file_at_most,
};

use crate::diagnostic::Diagnostic;

/// Read access to a workspace's files.
///
/// On disk every answer follows the workspace file rule of
/// [`flue_core::util::workspace_file`]: symbolic links are followed only while they stay
/// inside the root. A link that leads out answers `true` to [`Source::exists`],
/// [`Source::is_dir`] and [`Source::is_file`] alike, so that whoever uses it reads or lists it
/// and gets the refusal ([`WorkspaceFileError::Outside`]) reported against its path.
pub(crate) trait Source {
    /// Whether `relative` is a folder (following symlinks inside the root).
    fn is_dir(&self, relative: &str) -> bool;
    /// Whether `relative` is a file (following symlinks inside the root); FIFOs, sockets and
    /// devices count as files, so that reading them reports them.
    fn is_file(&self, relative: &str) -> bool;
    /// Whether `relative` itself is a symbolic link.
    fn is_symlink(&self, relative: &str) -> bool;
    /// Whether anything is at `relative`.
    fn exists(&self, relative: &str) -> bool;
    /// The UTF-8 entry names of the folder `relative`, sorted.
    fn list(&self, relative: &str) -> Result<Vec<String>, WorkspaceFileError>;
    /// The bytes of the regular file `relative`, at most `limit` of them.
    fn read(&self, relative: &str, limit: u64) -> Result<Vec<u8>, WorkspaceFileError>;
}

/// `base/name`, or `name` at the root.
pub(crate) fn join(base: &str, name: &str) -> String {
    match (base.is_empty(), name.is_empty()) {
        (true, _) => name.to_owned(),
        (false, true) => base.to_owned(),
        (false, false) => format!("{base}/{name}"),
    }
}

/// A workspace folder on disk. When recording, it remembers every file it read, so a build
/// can bundle exactly what loading looked at.
pub(crate) struct Disk {
    root: PathBuf,
    /// The root, opened; `None` when it is not a readable folder (loading reports that).
    files: Option<WorkspaceFiles>,
    /// Every file read so far, when recording.
    read: Option<Mutex<BTreeMap<String, Vec<u8>>>>,
}

impl Disk {
    /// The folder `root`.
    pub(crate) fn new(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
            files: WorkspaceFiles::open(root).ok(),
            read: None,
        }
    }

    /// The folder `root`, keeping a copy of every file read (for bundling).
    pub(crate) fn recording(root: &Path) -> Self {
        Self {
            read: Some(Mutex::new(BTreeMap::new())),
            ..Self::new(root)
        }
    }

    fn path(&self, relative: &str) -> PathBuf {
        let mut path = self.root.clone();
        path.extend(relative.split('/').filter(|part| !part.is_empty()));
        path
    }

    /// What `relative` leads to; `Err` for a link out of the root.
    fn entry(&self, relative: &str) -> Result<Option<EntryKind>, WorkspaceFileError> {
        match &self.files {
            Some(files) => files.entry(relative),
            None => Ok(None),
        }
    }

    /// Every file read so far, by relative path.
    pub(crate) fn files_read(&self) -> BTreeMap<String, Vec<u8>> {
        self.read
            .as_ref()
            .and_then(|read| read.lock().ok().map(|read| read.clone()))
            .unwrap_or_default()
    }
}

impl Source for Disk {
    fn is_dir(&self, relative: &str) -> bool {
        match self.entry(relative) {
            Ok(kind) => kind == Some(EntryKind::Dir),
            Err(_) => true,
        }
    }

    fn is_file(&self, relative: &str) -> bool {
        match self.entry(relative) {
            Ok(kind) => matches!(kind, Some(EntryKind::File | EntryKind::Other)),
            Err(_) => true,
        }
    }

    fn is_symlink(&self, relative: &str) -> bool {
        self.path(relative).is_symlink()
    }

    fn exists(&self, relative: &str) -> bool {
        !matches!(self.entry(relative), Ok(None))
    }

    fn list(&self, relative: &str) -> Result<Vec<String>, WorkspaceFileError> {
        match &self.files {
            Some(files) => files.list(relative),
            None => Err(WorkspaceFileError::Io(io::Error::from(
                io::ErrorKind::NotFound,
            ))),
        }
    }

    fn read(&self, relative: &str, limit: u64) -> Result<Vec<u8>, WorkspaceFileError> {
        let Some(files) = &self.files else {
            return Err(WorkspaceFileError::Io(io::Error::from(
                io::ErrorKind::NotFound,
            )));
        };
        let bytes = files.read(relative, limit)?;
        if let Some(Ok(mut read)) = self.read.as_ref().map(Mutex::lock) {
            read.insert(relative.to_owned(), bytes.clone());
        }
        Ok(bytes)
    }
}

/// Files held in memory (a bundle's), by relative path; folders are implied by the paths.
pub(crate) struct Memory {
    files: BTreeMap<String, Vec<u8>>,
}

impl Memory {
    pub(crate) fn new(files: BTreeMap<String, Vec<u8>>) -> Self {
        Self { files }
    }
}

impl Source for Memory {
    fn is_dir(&self, relative: &str) -> bool {
        relative.is_empty() || {
            let prefix = format!("{relative}/");
            self.files.keys().any(|path| path.starts_with(&prefix))
        }
    }

    fn is_file(&self, relative: &str) -> bool {
        self.files.contains_key(relative)
    }

    fn is_symlink(&self, _relative: &str) -> bool {
        false
    }

    fn exists(&self, relative: &str) -> bool {
        self.is_file(relative) || self.is_dir(relative)
    }

    fn list(&self, relative: &str) -> Result<Vec<String>, WorkspaceFileError> {
        if !self.is_dir(relative) {
            return Err(WorkspaceFileError::Io(io::Error::from(
                io::ErrorKind::NotFound,
            )));
        }
        let prefix = if relative.is_empty() {
            String::new()
        } else {
            format!("{relative}/")
        };
        let names: BTreeSet<&str> = self
            .files
            .keys()
            .filter_map(|path| path.strip_prefix(&prefix))
            .filter_map(|rest| rest.split('/').next())
            .collect();
        Ok(names.into_iter().map(str::to_owned).collect())
    }

    fn read(&self, relative: &str, limit: u64) -> Result<Vec<u8>, WorkspaceFileError> {
        let bytes = self
            .files
            .get(relative)
            .ok_or_else(|| WorkspaceFileError::Io(io::Error::from(io::ErrorKind::NotFound)))?;
        if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > limit {
            return Err(WorkspaceFileError::TooLarge { limit });
        }
        Ok(bytes.clone())
    }
}

/// Reads the UTF-8 file `relative` (at most `limit` bytes) from `source`, reporting failures
/// against it.
pub(crate) fn read_text(
    source: &dyn Source,
    relative: &str,
    limit: u64,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<String> {
    utf8(source.read(relative, limit), relative, diagnostics)
}

/// Reads the UTF-8 file at `path`, which the user named outside the workspace (at most
/// `limit` bytes), reporting failures against `relative`.
pub(crate) fn read_path(
    path: &Path,
    relative: &str,
    limit: u64,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<String> {
    utf8(read_file_at_most(path, limit), relative, diagnostics)
}

/// The diagnostic for a file that could not be read.
pub(crate) fn unreadable(relative: &str, error: &WorkspaceFileError) -> Diagnostic {
    Diagnostic::file(relative, format!("cannot read file: {error}"))
}

fn utf8(
    read: Result<Vec<u8>, WorkspaceFileError>,
    relative: &str,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<String> {
    match read {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => Some(text),
            Err(_) => {
                diagnostics.push(Diagnostic::file(
                    relative,
                    "file is not valid utf-8: save it as utf-8",
                ));
                None
            }
        },
        Err(error) => {
            diagnostics.push(unreadable(relative, &error));
            None
        }
    }
}
