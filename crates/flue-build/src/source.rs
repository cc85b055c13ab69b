//! Where a workspace's files come from: a folder on disk, or the files of a bundle.
//!
//! Loading reads every file through a [`Source`], by its path relative to the workspace root
//! with `/` separators (`""` is the root itself). The same loader therefore validates a source
//! tree and a bundle, and a bundle can never hold a workspace the loader would reject.
//! [`read_text`] reads one file as UTF-8, reporting a failure as a diagnostic against it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::diagnostic::Diagnostic;

/// Read access to a workspace's files.
pub(crate) trait Source {
    /// Whether `relative` is a folder (following symlinks).
    fn is_dir(&self, relative: &str) -> bool;
    /// Whether `relative` is a file (following symlinks).
    fn is_file(&self, relative: &str) -> bool;
    /// Whether `relative` itself is a symbolic link.
    fn is_symlink(&self, relative: &str) -> bool;
    /// Whether anything is at `relative`.
    fn exists(&self, relative: &str) -> bool;
    /// The UTF-8 entry names of the folder `relative`, sorted.
    fn list(&self, relative: &str) -> io::Result<Vec<String>>;
    /// The bytes of the file `relative`.
    fn read(&self, relative: &str) -> io::Result<Vec<u8>>;
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
    /// Every file read so far, when recording.
    read: Option<Mutex<BTreeMap<String, Vec<u8>>>>,
}

impl Disk {
    /// The folder `root`.
    pub(crate) fn new(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
            read: None,
        }
    }

    /// The folder `root`, keeping a copy of every file read (for bundling).
    pub(crate) fn recording(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
            read: Some(Mutex::new(BTreeMap::new())),
        }
    }

    fn path(&self, relative: &str) -> PathBuf {
        let mut path = self.root.clone();
        path.extend(relative.split('/').filter(|part| !part.is_empty()));
        path
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
        self.path(relative).is_dir()
    }

    fn is_file(&self, relative: &str) -> bool {
        self.path(relative).is_file()
    }

    fn is_symlink(&self, relative: &str) -> bool {
        self.path(relative).is_symlink()
    }

    fn exists(&self, relative: &str) -> bool {
        self.path(relative).exists()
    }

    fn list(&self, relative: &str) -> io::Result<Vec<String>> {
        let mut names: Vec<String> = fs::read_dir(self.path(relative))?
            .filter_map(Result::ok)
            .filter_map(|entry| entry.file_name().into_string().ok())
            .collect();
        names.sort();
        Ok(names)
    }

    fn read(&self, relative: &str) -> io::Result<Vec<u8>> {
        let bytes = fs::read(self.path(relative))?;
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

    fn list(&self, relative: &str) -> io::Result<Vec<String>> {
        if !self.is_dir(relative) {
            return Err(io::Error::from(io::ErrorKind::NotFound));
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

    fn read(&self, relative: &str) -> io::Result<Vec<u8>> {
        self.files
            .get(relative)
            .cloned()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }
}

/// Reads the UTF-8 file `relative` from `source`, reporting failures against it.
pub(crate) fn read_text(
    source: &dyn Source,
    relative: &str,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<String> {
    utf8(source.read(relative), relative, diagnostics)
}

/// Reads the UTF-8 file at `path`, reporting failures against `relative`.
pub(crate) fn read_path(
    path: &Path,
    relative: &str,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<String> {
    utf8(fs::read(path), relative, diagnostics)
}

fn utf8(
    read: std::io::Result<Vec<u8>>,
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
            diagnostics.push(Diagnostic::file(
                relative,
                format!("cannot read file: {error}"),
            ));
            None
        }
    }
}
