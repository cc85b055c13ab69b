//! Race-free file operations below an open handle of the sandbox root.
//!
//! A path is walked one component at a time from the root's directory handle. Each step is a
//! single-name `*at` system call with `O_NOFOLLOW` on a directory this module holds open, so
//! the kernel never follows a symlink and never resolves `..`. Symlinks are read with
//! `readlinkat` and their targets walked the same way by this module, `..` popping the stack
//! of open directories: a target that climbs above the root, or an absolute one outside it, is
//! refused. Whatever another process does to the tree meanwhile (swapping a directory for a
//! symlink to `/`, say), an operation only ever reads, creates or removes entries of
//! directories it holds open below the root; when an entry changes between two steps the walk
//! starts again, a bounded number of times. A component that is protected (the tree's
//! [`Protect`] rule: the local sandbox's `.flue` and `.env*`) is refused wherever it appears on
//! the way, and left out of listings.
//!
//! Two users: the local sandbox (with its protected names) and the workspace file reader
//! ([`super::workspace_file`], nothing protected), so a file the build reads and a file a tool
//! reads obey the same rule. Everything here blocks; callers run it on a blocking thread.

use std::ffi::{CString, OsStr, OsString};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

/// Why a name is protected, if it is: refused on every path and left out of listings.
pub(crate) type Protect = fn(&str) -> Option<&'static str>;

/// Nothing is protected.
pub(crate) fn nothing_protected(_name: &str) -> Option<&'static str> {
    None
}

/// Symlinks followed by one operation before it gives up.
const MAX_SYMLINK_HOPS: usize = 40;

/// How often one operation starts again because an entry changed under it.
const MAX_RESTARTS: usize = 64;

/// Directories one operation may create (a path has at most 4,096 bytes, so fewer parts).
const MAX_CREATED: usize = 4096;

/// How deep a recursive removal goes (each level holds a directory open).
const MAX_REMOVE_DEPTH: usize = 256;

/// Why an operation below the root failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The path, or a symlink on the way, leads out of the root.
    Outside,
    /// A component on the way is protected; the reason says why.
    Protected(&'static str),
    /// Entries kept changing under the walk.
    Unstable,
    /// More than [`MAX_SYMLINK_HOPS`] symlinks.
    TooManyLinks,
    /// A recursive removal went deeper than [`MAX_REMOVE_DEPTH`].
    TooDeep,
    /// The entry is neither a regular file nor a directory (a FIFO, a socket, a device).
    NotRegular,
    /// The file holds more than this many bytes.
    TooLarge(u64),
    /// The path is the root itself, which cannot be removed.
    IsRoot,
    /// A directory to remove without `recursive`.
    NeedsRecursive,
    /// The system call failed.
    Io(io::Error),
}

impl From<Errno> for Failure {
    fn from(errno: Errno) -> Self {
        Self::Io(io::Error::from(errno))
    }
}

impl From<io::Error> for Failure {
    fn from(err: io::Error) -> Self {
        Self::Io(err)
    }
}

pub(crate) type Outcome<T> = std::result::Result<T, Failure>;

/// The root directory, held open for the life of the sandbox.
#[derive(Debug)]
pub(crate) struct Tree {
    root: OwnedFd,
    /// The canonical host path of the root, for absolute symlink targets.
    root_path: PathBuf,
    /// Names refused on the way and left out of listings.
    protect: Protect,
}

/// What a walk arrived at.
enum Located {
    /// The root itself.
    Root,
    /// The entry `name` of the open directory `parent` (which may not exist yet).
    Entry { parent: OwnedFd, name: OsString },
}

/// How a walk treats the last component and missing parents.
#[derive(Clone, Copy)]
struct Walk {
    /// Follow a final symlink (else it is checked, then returned as itself).
    follow_final: bool,
    /// Create missing directories before the last component.
    create_parents: bool,
}

const FOLLOW: Walk = Walk {
    follow_final: true,
    create_parents: false,
};

const NO_FOLLOW: Walk = Walk {
    follow_final: false,
    create_parents: false,
};

/// One open directory on the way down, and its name in its parent.
struct Frame {
    fd: OwnedFd,
    name: OsString,
}

/// Symlink hops and restarts spent by one operation.
#[derive(Default)]
struct Budget {
    hops: usize,
    restarts: usize,
    created: usize,
}

impl Budget {
    fn hop(&mut self) -> Outcome<()> {
        self.hops += 1;
        if self.hops > MAX_SYMLINK_HOPS {
            return Err(Failure::TooManyLinks);
        }
        Ok(())
    }

    /// Counts a directory made on the way; a racer removing each one as it is made cannot keep
    /// the walk going for ever.
    fn create(&mut self) -> Outcome<()> {
        self.created += 1;
        if self.created > MAX_CREATED {
            return Err(Failure::Unstable);
        }
        Ok(())
    }

    fn restart(&mut self) -> Outcome<()> {
        self.restarts += 1;
        if self.restarts > MAX_RESTARTS {
            return Err(Failure::Unstable);
        }
        Ok(())
    }
}

/// Metadata of one entry, as `stat` reports it.
pub(crate) struct EntryStat {
    pub(crate) file_type: FileType,
    pub(crate) size: u64,
    pub(crate) mtime_ms: Option<u64>,
}

impl Tree {
    /// Opens the directory `root` (a canonical host path), refusing the names `protect`
    /// names.
    pub(crate) fn open(root: &Path, protect: Protect) -> io::Result<Self> {
        let fd = rustix::fs::open(
            root,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Self {
            root: fd,
            root_path: root.to_path_buf(),
            protect,
        })
    }

    /// The bytes of the file at `components`, following symlinks that stay inside.
    pub(crate) fn read(&self, components: &[OsString]) -> Outcome<Vec<u8>> {
        self.read_at_most(components, u64::MAX)
    }

    /// [`Tree::read`], reading at most `limit` + 1 bytes: a longer file fails with
    /// [`Failure::TooLarge`] without being read whole (a sparse file or a growing one alike).
    pub(crate) fn read_at_most(&self, components: &[OsString], limit: u64) -> Outcome<Vec<u8>> {
        let mut budget = Budget::default();
        loop {
            let Located::Entry { parent, name } = self.locate(components, FOLLOW, &mut budget)?
            else {
                return Err(Errno::ISDIR.into());
            };
            let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
            let Some(fd) = open_entry(&parent, &name, flags)? else {
                budget.restart()?;
                continue;
            };
            match FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode) {
                FileType::RegularFile => {}
                FileType::Directory => return Err(Errno::ISDIR.into()),
                _ => return Err(Failure::NotRegular),
            }
            let mut bytes = Vec::new();
            std::fs::File::from(fd)
                .take(limit.saturating_add(1))
                .read_to_end(&mut bytes)?;
            if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > limit {
                return Err(Failure::TooLarge(limit));
            }
            return Ok(bytes);
        }
    }

    /// Writes `content` to the file at `components`, creating missing parent directories.
    pub(crate) fn write(&self, components: &[OsString], content: &[u8]) -> Outcome<()> {
        let mut budget = Budget::default();
        let walk = Walk {
            follow_final: true,
            create_parents: true,
        };
        loop {
            let Located::Entry { parent, name } = self.locate(components, walk, &mut budget)?
            else {
                return Err(Errno::ISDIR.into());
            };
            let flags = OFlags::WRONLY
                | OFlags::CREATE
                | OFlags::NONBLOCK
                | OFlags::NOCTTY
                | OFlags::CLOEXEC;
            let Some(fd) = open_entry(&parent, &name, flags)? else {
                budget.restart()?;
                continue;
            };
            if FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode) != FileType::RegularFile {
                return Err(Failure::NotRegular);
            }
            rustix::fs::ftruncate(&fd, 0)?;
            std::fs::File::from(fd).write_all(content)?;
            return Ok(());
        }
    }

    /// Replaces the file at `components` with `content` so that a crash leaves the old content
    /// or the new, never part of it: the content goes to `.<name>.flue-replace` beside it
    /// (fsynced), which is renamed over it. The file's permission bits are kept; missing
    /// parent directories are created. A temporary file a crash left is reused (truncated)
    /// by the next replace of the same file.
    pub(crate) fn replace(&self, components: &[OsString], content: &[u8]) -> Outcome<()> {
        let mut budget = Budget::default();
        let walk = Walk {
            follow_final: true,
            create_parents: true,
        };
        let Located::Entry { parent, name } = self.locate(components, walk, &mut budget)? else {
            return Err(Errno::ISDIR.into());
        };
        let mode = match rustix::fs::statat(&parent, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile => {
                Mode::from_raw_mode(stat.st_mode & 0o7777)
            }
            Ok(_) => return Err(Failure::NotRegular),
            Err(Errno::NOENT) => Mode::from_raw_mode(0o666),
            Err(errno) => return Err(errno.into()),
        };
        let mut temp = OsString::from(".");
        temp.push(&name);
        temp.push(".flue-replace");
        let flags = OFlags::WRONLY
            | OFlags::CREATE
            | OFlags::TRUNC
            | OFlags::NOFOLLOW
            | OFlags::NONBLOCK
            | OFlags::NOCTTY
            | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&parent, temp.as_os_str(), flags, mode)?;
        if FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode) != FileType::RegularFile {
            return Err(Failure::NotRegular);
        }
        let written = (|| -> Outcome<()> {
            rustix::fs::fchmod(&fd, mode)?;
            let mut file = std::fs::File::from(fd);
            file.write_all(content)?;
            file.sync_all()?;
            rustix::fs::renameat(&parent, temp.as_os_str(), &parent, name.as_os_str())?;
            Ok(())
        })();
        if written.is_err() {
            let _ = rustix::fs::unlinkat(&parent, temp.as_os_str(), AtFlags::empty());
        }
        written
    }

    /// Metadata of `components`, not following a final symlink (whose target must still lie
    /// inside).
    pub(crate) fn stat(&self, components: &[OsString]) -> Outcome<EntryStat> {
        let mut budget = Budget::default();
        let stat = match self.locate(components, NO_FOLLOW, &mut budget)? {
            Located::Root => rustix::fs::fstat(&self.root)?,
            Located::Entry { parent, name } => {
                rustix::fs::statat(&parent, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)?
            }
        };
        Ok(entry_stat(&stat))
    }

    /// Metadata of what `components` leads to, following symlinks that stay inside.
    pub(crate) fn stat_following(&self, components: &[OsString]) -> Outcome<EntryStat> {
        let mut budget = Budget::default();
        let stat = match self.locate(components, FOLLOW, &mut budget)? {
            Located::Root => rustix::fs::fstat(&self.root)?,
            Located::Entry { parent, name } => {
                rustix::fs::statat(&parent, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)?
            }
        };
        Ok(entry_stat(&stat))
    }

    /// The names in the directory at `components`, protected ones left out, unsorted.
    pub(crate) fn list(&self, components: &[OsString]) -> Outcome<Vec<OsString>> {
        let mut budget = Budget::default();
        let fd = self.open_dir(components, OFlags::RDONLY, &mut budget)?;
        Ok(read_names(&fd)?
            .into_iter()
            .filter(|name| (self.protect)(&name.to_string_lossy()).is_none())
            .collect())
    }

    /// Checks that `components` is a directory inside the root (a command's working
    /// directory).
    pub(crate) fn check_dir(&self, components: &[OsString]) -> Outcome<()> {
        let mut budget = Budget::default();
        self.open_dir(components, OFlags::PATH, &mut budget)
            .map(drop)
    }

    /// Creates the directory `components`; with `recursive`, its missing parents too, and an
    /// existing directory is fine.
    pub(crate) fn mkdir(&self, components: &[OsString], recursive: bool) -> Outcome<()> {
        let mut budget = Budget::default();
        let walk = Walk {
            follow_final: recursive,
            create_parents: recursive,
        };
        loop {
            let (parent, name) = match self.locate(components, walk, &mut budget)? {
                Located::Root if recursive => return Ok(()),
                Located::Root => return Err(Errno::EXIST.into()),
                Located::Entry { parent, name } => (parent, name),
            };
            match rustix::fs::mkdirat(&parent, name.as_os_str(), Mode::from_raw_mode(0o777)) {
                Ok(()) => return Ok(()),
                Err(Errno::EXIST) if recursive => {
                    match entry_type(&parent, &name)? {
                        Some(FileType::Directory) => return Ok(()),
                        // A symlink appeared: follow it on the next walk.
                        Some(FileType::Symlink) => budget.restart()?,
                        _ => return Err(Errno::EXIST.into()),
                    }
                }
                Err(errno) => return Err(errno.into()),
            }
        }
    }

    /// Removes the entry at `components` (a symlink itself, never its target); a directory
    /// only with `recursive`, its whole tree removed through handles held below it.
    pub(crate) fn remove(&self, components: &[OsString], recursive: bool) -> Outcome<()> {
        let mut budget = Budget::default();
        let Located::Entry { parent, name } = self.locate(components, NO_FOLLOW, &mut budget)?
        else {
            return Err(Failure::IsRoot);
        };
        match entry_type(&parent, &name)? {
            None => Err(Errno::NOENT.into()),
            Some(FileType::Directory) if !recursive => Err(Failure::NeedsRecursive),
            Some(FileType::Directory) => {
                // Refuse before removing anything: a tree holding a protected entry stays whole.
                if let Some(reason) = protected_below(&parent, &name, self.protect, 0)? {
                    return Err(Failure::Protected(reason));
                }
                remove_tree(&parent, &name, self.protect, 0)
            }
            Some(_) => Ok(rustix::fs::unlinkat(
                &parent,
                name.as_os_str(),
                AtFlags::empty(),
            )?),
        }
    }

    /// Opens the directory at `components` (following symlinks inside) with `flags`.
    fn open_dir(
        &self,
        components: &[OsString],
        flags: OFlags,
        budget: &mut Budget,
    ) -> Outcome<OwnedFd> {
        loop {
            let flags = flags | OFlags::DIRECTORY | OFlags::CLOEXEC;
            match self.locate(components, FOLLOW, budget)? {
                Located::Root => {
                    return Ok(rustix::fs::openat(&self.root, ".", flags, Mode::empty())?);
                }
                Located::Entry { parent, name } => match open_entry(&parent, &name, flags)? {
                    Some(fd) => return Ok(fd),
                    None => budget.restart()?,
                },
            }
        }
    }

    /// Walks `components` (relative to the root, already free of `..`) from the root.
    fn locate(&self, components: &[OsString], walk: Walk, budget: &mut Budget) -> Outcome<Located> {
        let stack = vec![Frame {
            fd: self.root.try_clone()?,
            name: OsString::new(),
        }];
        let todo = components.iter().rev().cloned().collect();
        self.walk(stack, todo, walk, budget)
    }

    /// Walks `todo` (a stack: the next component last) down from the directories of `stack`.
    fn walk(
        &self,
        mut stack: Vec<Frame>,
        mut todo: Vec<OsString>,
        walk: Walk,
        budget: &mut Budget,
    ) -> Outcome<Located> {
        while let Some(name) = todo.pop() {
            if name == ".." {
                if stack.len() <= 1 {
                    return Err(Failure::Outside);
                }
                stack.pop();
                continue;
            }
            if name.is_empty() || name == "." {
                continue;
            }
            if let Some(reason) = (self.protect)(&name.to_string_lossy()) {
                return Err(Failure::Protected(reason));
            }
            let Some(top) = stack.last() else {
                return Err(Failure::Outside);
            };
            let is_final = todo.is_empty();
            match entry_type(&top.fd, &name)? {
                Some(FileType::Symlink) => {
                    budget.hop()?;
                    let target = match rustix::fs::readlinkat(&top.fd, name.as_os_str(), vec![]) {
                        Ok(target) => target,
                        // No longer a symlink: look at the entry again.
                        Err(Errno::INVAL | Errno::NOENT) => {
                            budget.restart()?;
                            todo.push(name);
                            continue;
                        }
                        Err(errno) => return Err(errno.into()),
                    };
                    if is_final && !walk.follow_final {
                        // The link itself is the entry, but where it leads must be allowed.
                        self.check_target(&stack, &target, budget)?;
                        return Ok(Located::Entry {
                            parent: top.fd.try_clone()?,
                            name,
                        });
                    }
                    self.splice(&mut stack, &mut todo, &target)?;
                }
                Some(FileType::Directory) if !is_final => {
                    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
                    match open_entry(&top.fd, &name, flags)? {
                        Some(fd) => stack.push(Frame { fd, name }),
                        None => {
                            budget.restart()?;
                            todo.push(name);
                        }
                    }
                }
                None if !is_final => {
                    if !walk.create_parents {
                        return Err(Errno::NOENT.into());
                    }
                    budget.create()?;
                    match rustix::fs::mkdirat(&top.fd, name.as_os_str(), Mode::from_raw_mode(0o777))
                    {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(errno) => return Err(errno.into()),
                    }
                    // Walk into it (or whatever stands there now) on the next round.
                    todo.push(name);
                }
                Some(_) if !is_final => return Err(Errno::NOTDIR.into()),
                // The final component: a file, a directory, or nothing yet.
                _ => {
                    return Ok(Located::Entry {
                        parent: top.fd.try_clone()?,
                        name,
                    });
                }
            }
        }
        // The walk ended on a directory it holds (the root, or one reached through `..`).
        let Some(last) = stack.pop() else {
            return Err(Failure::Outside);
        };
        match stack.last() {
            None => Ok(Located::Root),
            Some(parent) => Ok(Located::Entry {
                parent: parent.fd.try_clone()?,
                name: last.name,
            }),
        }
    }

    /// Replaces the symlink just read by its `target` in the walk: relative targets continue
    /// from the link's directory, absolute ones from the root (they must name a path in it).
    fn splice(
        &self,
        stack: &mut Vec<Frame>,
        todo: &mut Vec<OsString>,
        target: &CString,
    ) -> Outcome<()> {
        let target = Path::new(OsStr::from_bytes(target.as_bytes()));
        let relative = if target.is_absolute() {
            let Ok(below) = target.strip_prefix(&self.root_path) else {
                return Err(Failure::Outside);
            };
            stack.truncate(1);
            below
        } else {
            target
        };
        let mut parts: Vec<OsString> = relative
            .components()
            .filter_map(|part| match part {
                Component::Normal(name) => Some(name.to_owned()),
                Component::ParentDir => Some(OsString::from("..")),
                Component::CurDir | Component::RootDir | Component::Prefix(_) => None,
            })
            .collect();
        if parts.is_empty() {
            // A link to `.` or to the root: the walk stays where the link's target is.
            return Ok(());
        }
        parts.reverse();
        todo.extend(parts);
        Ok(())
    }

    /// Checks where a final symlink leads without following it for the operation: out of the
    /// root or into a protected entry is refused; a missing target is fine.
    fn check_target(&self, stack: &[Frame], target: &CString, budget: &mut Budget) -> Outcome<()> {
        let mut copy = Vec::with_capacity(stack.len());
        for frame in stack {
            copy.push(Frame {
                fd: frame.fd.try_clone()?,
                name: frame.name.clone(),
            });
        }
        let mut todo = Vec::new();
        self.splice(&mut copy, &mut todo, target)?;
        match self.walk(copy, todo, FOLLOW, budget) {
            Ok(_) | Err(Failure::Io(_)) => Ok(()),
            Err(failure) => Err(failure),
        }
    }
}

/// Opens the entry `name` of `parent` without following a symlink; `None` when the entry is a
/// symlink (it changed since the walk looked: walk again).
fn open_entry(parent: &OwnedFd, name: &OsStr, flags: OFlags) -> Outcome<Option<OwnedFd>> {
    let mode = Mode::from_raw_mode(0o666);
    match rustix::fs::openat(parent, name, flags | OFlags::NOFOLLOW, mode) {
        Ok(fd) => Ok(Some(fd)),
        Err(Errno::LOOP) => Ok(None),
        // `O_DIRECTORY` on a symlink may report "not a directory".
        Err(Errno::NOTDIR) if flags.contains(OFlags::DIRECTORY) => {
            match entry_type(parent, name)? {
                Some(FileType::Symlink) => Ok(None),
                _ => Err(Errno::NOTDIR.into()),
            }
        }
        Err(errno) => Err(errno.into()),
    }
}

/// The type of the entry `name` of `parent` (not following a symlink); `None` when missing.
fn entry_type(parent: &OwnedFd, name: &OsStr) -> Outcome<Option<FileType>> {
    match rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => Ok(Some(FileType::from_raw_mode(stat.st_mode))),
        Err(Errno::NOENT) => Ok(None),
        Err(errno) => Err(errno.into()),
    }
}

/// The entry names of the open directory `dir`, without `.` and `..`.
fn read_names(dir: &OwnedFd) -> Outcome<Vec<OsString>> {
    let mut names = Vec::new();
    for entry in Dir::read_from(dir.as_fd())? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            names.push(OsString::from_vec(name.to_vec()));
        }
    }
    Ok(names)
}

/// Why the tree of the directory `name` of `parent` holds a protected entry, if it does
/// (symlinks are not followed).
fn protected_below(
    parent: &OwnedFd,
    name: &OsStr,
    protect: Protect,
    depth: usize,
) -> Outcome<Option<&'static str>> {
    if depth > MAX_REMOVE_DEPTH {
        return Err(Failure::TooDeep);
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let Some(dir) = open_entry(parent, name, flags)? else {
        return Ok(None);
    };
    for entry in read_names(&dir)? {
        if let Some(reason) = protect(&entry.to_string_lossy()) {
            return Ok(Some(reason));
        }
        if entry_type(&dir, &entry)? == Some(FileType::Directory)
            && let Some(reason) = protected_below(&dir, &entry, protect, depth + 1)?
        {
            return Ok(Some(reason));
        }
    }
    Ok(None)
}

/// Removes the directory `name` of `parent` and everything below it, through handles held
/// below `parent`: a directory swapped for a symlink meanwhile is unlinked, never followed.
fn remove_tree(parent: &OwnedFd, name: &OsStr, protect: Protect, depth: usize) -> Outcome<()> {
    if depth > MAX_REMOVE_DEPTH {
        return Err(Failure::TooDeep);
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let Some(dir) = open_entry(parent, name, flags)? else {
        return Ok(rustix::fs::unlinkat(parent, name, AtFlags::empty())?);
    };
    for entry in read_names(&dir)? {
        if let Some(reason) = protect(&entry.to_string_lossy()) {
            return Err(Failure::Protected(reason));
        }
        match entry_type(&dir, &entry)? {
            None => {}
            Some(FileType::Directory) => remove_tree(&dir, &entry, protect, depth + 1)?,
            Some(_) => match rustix::fs::unlinkat(&dir, entry.as_os_str(), AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => {}
                Err(errno) => return Err(errno.into()),
            },
        }
    }
    Ok(rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR)?)
}

fn entry_stat(stat: &Stat) -> EntryStat {
    let seconds = u64::try_from(stat.st_mtime).ok();
    let nanos = stat.st_mtime_nsec;
    EntryStat {
        file_type: FileType::from_raw_mode(stat.st_mode),
        size: u64::try_from(stat.st_size).unwrap_or(0),
        mtime_ms: seconds.map(|seconds| {
            seconds
                .saturating_mul(1000)
                .saturating_add(nanos / 1_000_000)
        }),
    }
}
