//! Seeding a virtual sandbox: a one-time copy of a host directory into its root.
//!
//! The host side is only read (`symlink_metadata`, `read`, `read_link`), on a blocking
//! thread. Everything is collected and checked against the limits first, so a seed that is
//! too large fails before anything is written, with a message naming the limit.

use std::io;
use std::path::{Component, Path, PathBuf};

use bashkit::{FileSystem, InMemoryFs};

use crate::error::{BoxError, FlueError, Result, SandboxErrorReason};
use crate::sandbox::vfs::{VirtualLimits, vfs_error};

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

/// Reads the tree under `dir`, leaving out `exclude`d names, within `limits`.
pub(super) async fn collect(
    dir: &Path,
    exclude: &[String],
    limits: &VirtualLimits,
) -> Result<Vec<SeedEntry>> {
    let dir = dir.to_path_buf();
    let exclude = exclude.to_vec();
    let limits = limits.clone();
    tokio::task::spawn_blocking(move || collect_blocking(&dir, &exclude, &limits))
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
    dir: &Path,
    exclude: &[String],
    limits: &VirtualLimits,
) -> Result<Vec<SeedEntry>> {
    let shown = dir.display().to_string();
    let canonical = std::fs::canonicalize(dir).map_err(|err| seed_io_error(&shown, err))?;
    let metadata = std::fs::metadata(&canonical).map_err(|err| seed_io_error(&shown, err))?;
    if !metadata.is_dir() {
        return Err(FlueError::sandbox(
            SandboxErrorReason::NotADirectory,
            format!("seed directory {shown}: not a directory"),
        ));
    }
    let mut entries = Vec::new();
    let mut n_files: u64 = 0;
    let mut n_dirs: u64 = 0;
    let mut n_bytes: u64 = 0;
    // Directories still to read, relative to the seed directory.
    let mut pending = vec![PathBuf::new()];
    while let Some(rel_dir) = pending.pop() {
        let host_dir = canonical.join(&rel_dir);
        let mut children: Vec<_> = std::fs::read_dir(&host_dir)
            .map_err(|err| seed_io_error(&host_dir.display().to_string(), err))?
            .filter_map(std::result::Result::ok)
            .collect();
        children.sort_by_key(std::fs::DirEntry::file_name);
        for child in children {
            let name = child.file_name();
            if is_excluded(&name.to_string_lossy(), exclude) {
                continue;
            }
            let rel = rel_dir.join(&name);
            let host_path = canonical.join(&rel);
            let Ok(metadata) = std::fs::symlink_metadata(&host_path) else {
                continue;
            };
            let file_type = metadata.file_type();
            if file_type.is_dir() {
                n_dirs += 1;
                if n_dirs > limits.max_dirs {
                    return Err(too_large(
                        &shown,
                        &format!("more than {} directories", limits.max_dirs),
                    ));
                }
                entries.push(SeedEntry::Dir(rel.clone()));
                pending.push(rel);
            } else if file_type.is_file() {
                n_files += 1;
                n_bytes = n_bytes.saturating_add(metadata.len());
                if n_files > limits.max_files {
                    return Err(too_large(
                        &shown,
                        &format!("more than {} files", limits.max_files),
                    ));
                }
                if metadata.len() > limits.max_file_bytes {
                    return Err(too_large(
                        &shown,
                        &format!(
                            "{}, a file of {} bytes (the limit per file is {})",
                            rel.display(),
                            metadata.len(),
                            limits.max_file_bytes
                        ),
                    ));
                }
                if n_bytes > limits.max_fs_bytes {
                    return Err(too_large(
                        &shown,
                        &format!("more than {} bytes of files", limits.max_fs_bytes),
                    ));
                }
                let content = std::fs::read(&host_path)
                    .map_err(|err| seed_io_error(&host_path.display().to_string(), err))?;
                entries.push(SeedEntry::File(rel, content));
            } else if file_type.is_symlink() {
                let Ok(target) = std::fs::read_link(&host_path) else {
                    continue;
                };
                if let Some(target) = symlink_target(&canonical, &rel_dir, &target) {
                    entries.push(SeedEntry::Symlink(rel, target));
                }
            }
            // Sockets, fifos and devices are left out.
        }
    }
    Ok(entries)
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
