//! Reading the files a workspace supplies (flue.toml, `AGENTS.md`, `.env`, agents, skills,
//! roles, scripts of the scripted model): one rule for all of them.
//!
//! A workspace is often a cloned repository, so its files are input from someone else. Every
//! read goes through [`WorkspaceFiles`], which walks from a handle of the workspace root the
//! way the local sandbox does (`beneath.rs`): symbolic links are followed only while they stay
//! inside the root, so `AGENTS.md -> ~/.aws/credentials` or an `agents/` folder linked to
//! `/etc` is refused ([`WorkspaceFileError::Outside`]) and never read. Only regular files are
//! read (a FIFO would block for ever, `/dev/zero` would never end), and at most `limit` + 1
//! bytes of them, so a huge or sparse file fails with its limit before it fills memory.
//! [`read_file_at_most`] applies the same size and file-type rule to a file the user named
//! directly (`--env FILE`, a bundle, an agent file given on the command line), which may live
//! anywhere.

use std::ffi::OsString;
use std::fmt;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags};

use crate::util::beneath::{Failure, Tree, nothing_protected};

const MIB: u64 = 1024 * 1024;

/// The most bytes of flue.toml and of an env file (`.env`, `--env FILE`).
pub const MAX_CONFIG_BYTES: u64 = MIB;
/// The most bytes of a markdown file: `AGENTS.md`, an agent file, a role, a skill's
/// `SKILL.md` or `<name>.md`.
pub const MAX_MARKDOWN_BYTES: u64 = 4 * MIB;
/// The most bytes of one file of a skill folder besides its `SKILL.md`.
pub const MAX_RESOURCE_BYTES: u64 = 16 * MIB;
/// The most bytes of a script of the scripted model.
pub const MAX_SCRIPT_BYTES: u64 = 16 * MIB;
/// The most bytes of a bundle (`flue build`'s output, read by `flue serve --bundle`).
pub const MAX_BUNDLE_BYTES: u64 = 256 * MIB;

/// What a workspace path leads to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A folder.
    Dir,
    /// Anything else: a FIFO, a socket, a device.
    Other,
}

/// Why a workspace file could not be read.
#[derive(Debug)]
#[non_exhaustive]
pub enum WorkspaceFileError {
    /// The path, or a symbolic link on the way, leads outside the workspace root.
    Outside,
    /// Not a regular file (a FIFO, a socket, a device).
    NotRegular,
    /// The file holds more than `limit` bytes.
    TooLarge {
        /// The most bytes a file of this kind may hold.
        limit: u64,
    },
    /// Anything else, as the system reported it (a missing file is [`io::ErrorKind::NotFound`]).
    Io(io::Error),
}

impl WorkspaceFileError {
    /// Whether nothing is there.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Io(err) if err.kind() == io::ErrorKind::NotFound)
    }
}

impl fmt::Display for WorkspaceFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Outside => f.write_str(
                "it leads outside the workspace (a symbolic link to a path outside the \
                 workspace root): flue reads only files inside the workspace; replace the link \
                 with a copy of the file",
            ),
            Self::NotRegular => f.write_str(
                "it is not a regular file (a FIFO, a socket or a device): replace it with a \
                 regular file",
            ),
            Self::TooLarge { limit } => write!(
                f,
                "it is larger than the limit of {} for this kind of file: make it smaller",
                show_bytes(*limit)
            ),
            Self::Io(err) => write!(f, "{err}"),
        }
    }
}

impl std::error::Error for WorkspaceFileError {}

impl From<Failure> for WorkspaceFileError {
    fn from(failure: Failure) -> Self {
        match failure {
            Failure::Outside => Self::Outside,
            Failure::NotRegular => Self::NotRegular,
            Failure::TooLarge(limit) => Self::TooLarge { limit },
            Failure::Io(err) => Self::Io(err),
            Failure::TooManyLinks => {
                Self::Io(io::Error::other("too many levels of symbolic links"))
            }
            Failure::Unstable => Self::Io(io::Error::other(
                "the path kept changing while it was resolved; retry",
            )),
            Failure::Protected(reason) => Self::Io(io::Error::other(reason)),
            Failure::TooDeep | Failure::IsRoot | Failure::NeedsRecursive => {
                Self::Io(io::Error::other("unexpected file system state"))
            }
        }
    }
}

/// `n` bytes for people: `1 MiB (1048576 bytes)`, or plain bytes when not a whole KiB/MiB.
fn show_bytes(n: u64) -> String {
    if n >= MIB && n.is_multiple_of(MIB) {
        format!("{} MiB ({n} bytes)", n / MIB)
    } else if n >= 1024 && n.is_multiple_of(1024) {
        format!("{} KiB ({n} bytes)", n / 1024)
    } else {
        format!("{n} bytes")
    }
}

/// The files of one workspace folder, read under the rule of the module docs.
#[derive(Debug)]
pub struct WorkspaceFiles {
    tree: Tree,
    root: PathBuf,
}

impl WorkspaceFiles {
    /// Opens the workspace folder `root` (symlinks in `root` itself are followed: the user
    /// named it).
    pub fn open(root: &Path) -> io::Result<Self> {
        let canonical = std::fs::canonicalize(root)?;
        if !canonical.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("{} is not a directory", root.display()),
            ));
        }
        Ok(Self {
            tree: Tree::open(&canonical, nothing_protected)?,
            root: canonical,
        })
    }

    /// The canonical path of the root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The bytes of the regular file `relative` (`/`-separated, relative to the root), at
    /// most `limit` of them.
    pub fn read(&self, relative: &str, limit: u64) -> Result<Vec<u8>, WorkspaceFileError> {
        Ok(self.tree.read_at_most(&components(relative), limit)?)
    }

    /// What `relative` leads to (following symlinks that stay inside); `None` when nothing is
    /// there. A symlink out of the root fails with [`WorkspaceFileError::Outside`].
    pub fn entry(&self, relative: &str) -> Result<Option<EntryKind>, WorkspaceFileError> {
        match self.tree.stat_following(&components(relative)) {
            Ok(stat) => Ok(Some(match stat.file_type {
                FileType::RegularFile => EntryKind::File,
                FileType::Directory => EntryKind::Dir,
                _ => EntryKind::Other,
            })),
            Err(Failure::Io(err))
                if matches!(
                    err.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                ) =>
            {
                Ok(None)
            }
            Err(failure) => Err(failure.into()),
        }
    }

    /// The UTF-8 entry names of the folder `relative`, sorted (other names are skipped).
    pub fn list(&self, relative: &str) -> Result<Vec<String>, WorkspaceFileError> {
        let mut names: Vec<String> = self
            .tree
            .list(&components(relative))?
            .into_iter()
            .filter_map(|name| name.into_string().ok())
            .collect();
        names.sort();
        Ok(names)
    }
}

/// The parts of a `/`-separated relative path.
fn components(relative: &str) -> Vec<OsString> {
    relative
        .split('/')
        .filter(|part| !part.is_empty() && *part != ".")
        .map(OsString::from)
        .collect()
}

/// The bytes of the regular file at `path`, which the user named (it may live anywhere), at
/// most `limit` of them: a FIFO, a device or a file over the limit fails without blocking or
/// reading it whole.
pub fn read_file_at_most(path: &Path, limit: u64) -> Result<Vec<u8>, WorkspaceFileError> {
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let file = std::fs::File::from(
        rustix::fs::open(path, flags, Mode::empty())
            .map_err(|errno| WorkspaceFileError::Io(errno.into()))?,
    );
    let metadata = file.metadata().map_err(WorkspaceFileError::Io)?;
    if metadata.is_dir() {
        return Err(WorkspaceFileError::Io(io::Error::new(
            io::ErrorKind::IsADirectory,
            "is a directory",
        )));
    }
    if !metadata.is_file() {
        return Err(WorkspaceFileError::NotRegular);
    }
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(WorkspaceFileError::Io)?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > limit {
        return Err(WorkspaceFileError::TooLarge { limit });
    }
    Ok(bytes)
}
