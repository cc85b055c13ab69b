//! Seeding a virtual sandbox: a one-time copy of a host directory into its root.
//!
//! The host side is only read, on a blocking thread, and only through open directory
//! handles: every directory and file is opened relative to its parent's handle without
//! following symlinks (`openat` with `O_NOFOLLOW`), so swapping a directory for a symlink while
//! the copy runs cannot lead it out of the seed, and a seed given below a root
//! ([`SeedSource::within`]) cannot be reached through a symlink or `..`. Symlinks inside the
//! seed are recreated, not followed. Everything is collected and checked against the limits
//! first, so a seed that is too large fails before anything is written, with a message naming
//! the limit.

use std::ffi::{OsStr, OsString};
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use bashkit::{FileSystem, InMemoryFs};
use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, open, openat, readlinkat};
use nix::sys::stat::{Mode, SFlag, fstat, fstatat};

use crate::error::{BoxError, FlueError, Result, SandboxErrorReason};
use crate::sandbox::vfs::{VirtualLimits, vfs_error};

/// How a directory opens while seeding: never through a symlink.
const DIR_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

/// Where a seed is copied from: the directory `within` below `base`. `base` is trusted as
/// given (symlinks followed); `within` must be relative, without `..`, and is walked without
/// following any symlink.
#[derive(Clone, Debug)]
pub(super) struct SeedSource {
    pub(super) base: PathBuf,
    pub(super) within: PathBuf,
}

/// One entry to create, by its path relative to the seed directory.
#[derive(Debug)]
pub(super) enum SeedEntry {
    Dir(PathBuf),
    File(PathBuf, Vec<u8>),
    /// A symlink and where it points.
    Symlink(PathBuf, SymlinkTarget),
}

#[derive(Debug)]
pub(super) enum SymlinkTarget {
    /// Kept as written.
    Relative(PathBuf),
    /// An absolute host path inside the seed directory, as a path relative to it.
    InsideSeed(PathBuf),
}

/// Reads the tree of `source`, leaving out `exclude`d names, within `limits`.
pub(super) async fn collect(
    source: &SeedSource,
    exclude: &[String],
    limits: &VirtualLimits,
) -> Result<Vec<SeedEntry>> {
    let source = source.clone();
    let exclude = exclude.to_vec();
    let limits = limits.clone();
    tokio::task::spawn_blocking(move || collect_blocking(&source, &exclude, &limits))
        .await
        .map_err(|err| FlueError::Sandbox {
            message: "seed the virtual sandbox: the copying thread failed".into(),
            reason: SandboxErrorReason::Other,
            source: Some(BoxError::from(err)),
        })?
}

/// Creates `entries` under `root` in `fs`.
pub(super) async fn install(fs: &InMemoryFs, root: &str, entries: Vec<SeedEntry>) -> Result<()> {
    let root = Path::new(root);
    for entry in entries {
        match entry {
            SeedEntry::Dir(rel) => {
                let path = root.join(&rel);
                fs.mkdir(&path, true)
                    .await
                    .map_err(|err| vfs_error("seed", &rel.to_string_lossy(), err))?;
            }
            SeedEntry::File(rel, content) => {
                let path = root.join(&rel);
                fs.write_file(&path, &content)
                    .await
                    .map_err(|err| vfs_error("seed", &rel.to_string_lossy(), err))?;
            }
            SeedEntry::Symlink(rel, target) => {
                let path = root.join(&rel);
                let target = match target {
                    SymlinkTarget::Relative(target) => target,
                    SymlinkTarget::InsideSeed(inside) => root.join(inside),
                };
                fs.symlink(&target, &path)
                    .await
                    .map_err(|err| vfs_error("seed", &rel.to_string_lossy(), err))?;
            }
        }
    }
    Ok(())
}

fn collect_blocking(
    source: &SeedSource,
    exclude: &[String],
    limits: &VirtualLimits,
) -> Result<Vec<SeedEntry>> {
    let shown = source.base.join(&source.within).display().to_string();
    let base_flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let base = open(&source.base, base_flags, Mode::empty())
        .map_err(|errno| seed_io_error(&shown, errno.into()))?;
    let seed = open_beneath(&base, &source.within, &shown)?;
    // Absolute symlink targets are compared against the seed's real path.
    let canonical = std::fs::canonicalize(&source.base)
        .map_err(|err| seed_io_error(&shown, err))?
        .join(normalized(&source.within));
    let mut entries = Vec::new();
    let mut n_files: u64 = 0;
    let mut n_dirs: u64 = 0;
    let mut n_bytes: u64 = 0;
    // Directories still to read, relative to the seed directory.
    let mut pending = vec![PathBuf::new()];
    while let Some(rel_dir) = pending.pop() {
        let shown_dir = canonical.join(&rel_dir).display().to_string();
        let dir_fd = open_beneath(&seed, &rel_dir, &shown)?;
        let mut dir =
            Dir::from_fd(dir_fd).map_err(|errno| seed_io_error(&shown_dir, errno.into()))?;
        let mut names: Vec<OsString> = dir
            .iter()
            .filter_map(std::result::Result::ok)
            .map(|entry| OsStr::from_bytes(entry.file_name().to_bytes()).to_os_string())
            .filter(|name| name != "." && name != "..")
            .collect();
        names.sort();
        for name in names {
            if is_excluded(&name.to_string_lossy(), exclude) {
                continue;
            }
            let rel = rel_dir.join(&name);
            // Gone since the listing: nothing to copy.
            let Ok(stat) = fstatat(&dir, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) else {
                continue;
            };
            match SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT {
                SFlag::S_IFDIR => {
                    n_dirs += 1;
                    if n_dirs > limits.max_dirs {
                        return Err(too_large(
                            &shown,
                            &format!("more than {} directories", limits.max_dirs),
                        ));
                    }
                    entries.push(SeedEntry::Dir(rel.clone()));
                    pending.push(rel);
                }
                SFlag::S_IFREG => {
                    let Some(content) = read_file(&dir, &name, &rel, limits, &shown)? else {
                        continue;
                    };
                    n_files += 1;
                    n_bytes = n_bytes.saturating_add(content.len() as u64);
                    if n_files > limits.max_files {
                        return Err(too_large(
                            &shown,
                            &format!("more than {} files", limits.max_files),
                        ));
                    }
                    if n_bytes > limits.max_fs_bytes {
                        return Err(too_large(
                            &shown,
                            &format!("more than {} bytes of files", limits.max_fs_bytes),
                        ));
                    }
                    entries.push(SeedEntry::File(rel, content));
                }
                SFlag::S_IFLNK => {
                    let Ok(target) = readlinkat(&dir, name.as_os_str()) else {
                        continue;
                    };
                    if let Some(target) = symlink_target(&canonical, &rel_dir, Path::new(&target)) {
                        entries.push(SeedEntry::Symlink(rel, target));
                    }
                }
                // Sockets, fifos and devices are left out.
                _ => {}
            }
        }
    }
    Ok(entries)
}

/// Opens the directory `relative` below the open directory `base`, one component at a time,
/// never following a symlink: a `..`, an absolute path or a symlink on the way is refused.
fn open_beneath(base: &OwnedFd, relative: &Path, shown: &str) -> Result<OwnedFd> {
    let mut current = openat(base, ".", DIR_FLAGS, Mode::empty())
        .map_err(|errno| seed_io_error(shown, errno.into()))?;
    for part in relative.components() {
        let name = match part {
            Component::Normal(name) => name,
            Component::CurDir => continue,
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(outside(shown, "it climbs out with `..` or is absolute"));
            }
        };
        current = match openat(&current, name, DIR_FLAGS, Mode::empty()) {
            Ok(next) => next,
            // Linux reports a symlink opened with `O_DIRECTORY | O_NOFOLLOW` as "not a
            // directory"; look at the entry itself to tell the two apart.
            Err(errno @ (Errno::ELOOP | Errno::ENOTDIR)) => {
                let is_symlink =
                    fstatat(&current, name, AtFlags::AT_SYMLINK_NOFOLLOW).is_ok_and(|stat| {
                        SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK
                    });
                if is_symlink {
                    return Err(outside(
                        shown,
                        &format!("`{}` on the way is a symlink", name.to_string_lossy()),
                    ));
                }
                return Err(seed_io_error(shown, errno.into()));
            }
            Err(errno) => return Err(seed_io_error(shown, errno.into())),
        };
    }
    Ok(current)
}

/// The content of the regular file `name` in `dir`, opened without following a symlink;
/// `None` when it is no longer a regular file (changed since it was listed).
fn read_file(
    dir: &Dir,
    name: &OsStr,
    rel: &Path,
    limits: &VirtualLimits,
    shown: &str,
) -> Result<Option<Vec<u8>>> {
    let flags = OFlag::O_RDONLY
        | OFlag::O_NOFOLLOW
        | OFlag::O_CLOEXEC
        | OFlag::O_NONBLOCK
        | OFlag::O_NOCTTY;
    let Ok(fd) = openat(dir, name, flags, Mode::empty()) else {
        return Ok(None);
    };
    let Ok(stat) = fstat(&fd) else {
        return Ok(None);
    };
    if SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
        return Ok(None);
    }
    let too_big = |size: u64| {
        too_large(
            shown,
            &format!(
                "{}, a file of {size} bytes (the limit per file is {})",
                rel.display(),
                limits.max_file_bytes
            ),
        )
    };
    let size = u64::try_from(stat.st_size).unwrap_or(0);
    if size > limits.max_file_bytes {
        return Err(too_big(size));
    }
    let mut content = Vec::new();
    std::fs::File::from(fd)
        .take(limits.max_file_bytes.saturating_add(1))
        .read_to_end(&mut content)
        .map_err(|err| seed_io_error(&rel.display().to_string(), err))?;
    // The file grew after it was measured.
    if content.len() as u64 > limits.max_file_bytes {
        return Err(too_big(content.len() as u64));
    }
    Ok(Some(content))
}

/// `path` without `.` components.
fn normalized(path: &Path) -> PathBuf {
    path.components()
        .filter(|part| !matches!(part, Component::CurDir))
        .collect()
}

/// Whether `name` matches one of the `exclude` patterns (exact, or a prefix ending in `*`).
pub(super) fn is_excluded(name: &str, exclude: &[String]) -> bool {
    exclude
        .iter()
        .any(|pattern| match pattern.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == pattern,
        })
}

/// How a symlink at `rel_dir/<link>` pointing at `target` is recreated, or `None` when it
/// leads out of the seed directory.
fn symlink_target(seed: &Path, rel_dir: &Path, target: &Path) -> Option<SymlinkTarget> {
    if target.is_absolute() {
        let inside = target.strip_prefix(seed).ok()?;
        return stays_inside(Path::new(""), inside)
            .then(|| SymlinkTarget::InsideSeed(inside.into()));
    }
    stays_inside(rel_dir, target).then(|| SymlinkTarget::Relative(target.to_path_buf()))
}

/// Whether `target`, taken relative to `base` (both relative to the seed), stays inside.
pub(super) fn stays_inside(base: &Path, target: &Path) -> bool {
    let mut depth: usize = base
        .components()
        .filter(|part| matches!(part, Component::Normal(_)))
        .count();
    for part in target.components() {
        match part {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir => match depth.checked_sub(1) {
                Some(less) => depth = less,
                None => return false,
            },
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    true
}

fn too_large(shown: &str, what: &str) -> FlueError {
    FlueError::sandbox(
        SandboxErrorReason::LimitExceeded,
        format!(
            "seed directory {shown} holds {what}, beyond the virtual sandbox's limits: leave \
             large directories out (seed exclude), seed a smaller directory, or use the local \
             sandbox"
        ),
    )
}

fn outside(shown: &str, why: &str) -> FlueError {
    FlueError::sandbox(
        SandboxErrorReason::PermissionDenied,
        format!(
            "seed directory {shown}: {why}; a seed must be a directory inside the workspace, \
             reached without symlinks"
        ),
    )
}

fn seed_io_error(shown: &str, err: io::Error) -> FlueError {
    let reason = match err.kind() {
        io::ErrorKind::NotFound => SandboxErrorReason::NotFound,
        io::ErrorKind::PermissionDenied => SandboxErrorReason::PermissionDenied,
        io::ErrorKind::NotADirectory => SandboxErrorReason::NotADirectory,
        _ => SandboxErrorReason::Other,
    };
    FlueError::Sandbox {
        message: format!("seed directory {shown}: {err}"),
        reason,
        source: Some(BoxError::from(err)),
    }
}
