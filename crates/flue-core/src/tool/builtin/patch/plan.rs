//! Checking a parsed patch against the sandbox and committing it atomically.
//!
//! [`plan`] walks the sections in order over an in-memory overlay of the files they touch:
//! every path is resolved, every stale check made against the bytes on disk, every chunk
//! applied, and every new file's parent checked, before anything is written. A section that
//! fails fails the whole patch. [`commit`] then re-checks that no file changed since it was
//! read, puts every replaced content in the trash, and writes; if a write fails midway it puts
//! back what it had written (from the pre-images it kept) and removes the directories it made.

use std::collections::{BTreeMap, HashMap};

use crate::sandbox::{MkdirOptions, RmOptions};
use crate::store::TrashReason;
use crate::tool::ToolContext;
use crate::tool::builtin::files::{
    FileError, FilePath, MAX_FILE_BYTES, default_action, resolve, sha256_hex, shown_path, trash,
};
use crate::tool::builtin::patch::apply::apply_chunks;
use crate::tool::builtin::patch::parse::{Patch, Section};

/// The tool name used for the trash and errors.
const TOOL: &str = "apply_patch";

/// What a file looks like to the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Missing,
    Directory,
    File(Vec<u8>),
}

/// A checked patch, ready to commit.
#[derive(Debug)]
pub(crate) struct Plan {
    /// One entry per changed path, in the order the patch first touched them.
    pub(crate) changes: Vec<Change>,
    /// One summary per section, for the result and the audit log.
    pub(crate) sections: Vec<SectionOutcome>,
}

/// One path's change.
#[derive(Debug)]
pub(crate) struct Change {
    pub(crate) path: FilePath,
    /// The content on disk when planned (`None`: no file there).
    pub(crate) before: Option<Vec<u8>>,
    /// The content to leave (`None`: delete).
    pub(crate) after: Option<Vec<u8>>,
}

/// What one section does.
#[derive(Debug, Clone)]
pub(crate) struct SectionOutcome {
    /// `add`, `update`, `delete` or `move`.
    pub(crate) operation: &'static str,
    pub(crate) path: FilePath,
    pub(crate) destination: Option<FilePath>,
    pub(crate) before: Option<Vec<u8>>,
    pub(crate) after: Option<Vec<u8>>,
}

/// A failed plan or commit: the error and the path of the section at fault, when known.
#[derive(Debug)]
pub(crate) struct PatchFailure {
    pub(crate) error: FileError,
    pub(crate) path: Option<String>,
}

impl PatchFailure {
    fn at(path: &FilePath, error: FileError) -> Self {
        Self {
            error,
            path: Some(path.abs.clone()),
        }
    }
}

/// The overlay of the files a patch touches.
struct Overlay<'a> {
    ctx: &'a ToolContext,
    /// Path -> (state on disk, state after the sections so far).
    files: BTreeMap<String, (State, State)>,
    order: Vec<FilePath>,
}

impl Overlay<'_> {
    /// The current planned state of `path`, reading the sandbox the first time.
    async fn current(&mut self, path: &FilePath) -> Result<State, FileError> {
        if let Some((_, current)) = self.files.get(&path.abs) {
            return Ok(current.clone());
        }
        let state = read_state(self.ctx, path).await?;
        self.files
            .insert(path.abs.clone(), (state.clone(), state.clone()));
        self.order.push(path.clone());
        Ok(state)
    }

    /// The state on disk of a path already read.
    fn original(&self, path: &FilePath) -> State {
        self.files
            .get(&path.abs)
            .map_or(State::Missing, |(original, _)| original.clone())
    }

    fn set(&mut self, path: &FilePath, state: State) {
        if let Some((_, current)) = self.files.get_mut(&path.abs) {
            *current = state;
        }
    }

    /// Fails with `not_a_directory` when a parent of `path` is (or will be) a file.
    async fn check_parents(&mut self, path: &FilePath) -> Result<(), FileError> {
        let mut parent = path.abs.as_str();
        while let Some(cut) = parent.rfind('/') {
            parent = &path.abs[..cut];
            if parent.is_empty() {
                break;
            }
            let planned = self.files.get(parent).map(|(_, current)| current.clone());
            let blocked = match planned {
                Some(state) => matches!(state, State::File(_)),
                None => match self.ctx.sandbox.stat(parent).await {
                    Ok(stat) => !stat.is_dir,
                    Err(_) => false,
                },
            };
            if blocked {
                return Err(FileError::new(
                    "not_a_directory",
                    format!(
                        "{}: its parent {} is a file, not a directory",
                        path.shown,
                        shown_path(&self.ctx.cwd, parent)
                    ),
                    default_action("not_a_directory"),
                ));
            }
        }
        Ok(())
    }
}

/// Checks every section of `patch` and computes the new contents; nothing is written.
pub(crate) async fn plan(
    ctx: &ToolContext,
    patch: &Patch,
    expected: &HashMap<String, String>,
) -> Result<Plan, PatchFailure> {
    let mut overlay = Overlay {
        ctx,
        files: BTreeMap::new(),
        order: Vec::new(),
    };
    let mut sections = Vec::new();
    for section in &patch.sections {
        let path = resolve(ctx, section.path()).map_err(|error| PatchFailure {
            error,
            path: Some(section.path().to_owned()),
        })?;
        let outcome = plan_section(&mut overlay, section, &path, expected)
            .await
            .map_err(|error| PatchFailure::at(&path, with_line(error, section.line())))?;
        sections.push(outcome);
    }
    let changes = overlay
        .order
        .iter()
        .filter_map(|path| {
            let (original, current) = overlay.files.get(&path.abs)?;
            let before = as_content(original);
            let after = as_content(current);
            (before != after).then(|| Change {
                path: path.clone(),
                before,
                after,
            })
        })
        .collect();
    Ok(Plan { changes, sections })
}

async fn plan_section(
    overlay: &mut Overlay<'_>,
    section: &Section,
    path: &FilePath,
    expected: &HashMap<String, String>,
) -> Result<SectionOutcome, FileError> {
    match section {
        Section::Add { content, .. } => {
            let current = overlay.current(path).await?;
            check_absent_expected(path, expected)?;
            if current != State::Missing {
                return Err(FileError::new(
                    "already_exists",
                    format!("cannot add {}: it already exists", path.shown),
                    "Change the existing file with an `*** Update File:` section instead, or \
                     add the file at another path.",
                ));
            }
            check_size(path, content.len())?;
            overlay.check_parents(path).await?;
            overlay.set(path, State::File(content.clone().into_bytes()));
            Ok(SectionOutcome {
                operation: "add",
                path: path.clone(),
                destination: None,
                before: None,
                after: Some(content.clone().into_bytes()),
            })
        }
        Section::Delete { .. } => {
            let current = existing_file(overlay, path).await?;
            check_expected(overlay, path, expected)?;
            overlay.set(path, State::Missing);
            Ok(SectionOutcome {
                operation: "delete",
                path: path.clone(),
                destination: None,
                before: Some(current),
                after: None,
            })
        }
        Section::Update {
            move_to, chunks, ..
        } => {
            let current = existing_file(overlay, path).await?;
            check_expected(overlay, path, expected)?;
            let Ok(text) = String::from_utf8(current.clone()) else {
                return Err(FileError::invalid_input(
                    format!("cannot update {}: it is not UTF-8 text", path.shown),
                    "apply_patch only updates text files.",
                ));
            };
            let updated = apply_chunks(&text, chunks).map_err(|conflict| {
                FileError::new(
                    "patch_conflict",
                    format!(
                        "patch line {}: cannot update {}: {}",
                        conflict.line, path.shown, conflict.message
                    ),
                    "Re-read the file and rebuild the chunk from its current content: context \
                     and `-` lines must match the file's lines exactly and in order.",
                )
            })?;
            check_size(path, updated.len())?;
            let updated = updated.into_bytes();
            let destination = match move_to {
                Some(move_to) => Some(resolve(overlay.ctx, move_to)?),
                None => None,
            };
            match destination.filter(|destination| destination.abs != path.abs) {
                None => {
                    overlay.set(path, State::File(updated.clone()));
                    Ok(SectionOutcome {
                        operation: "update",
                        path: path.clone(),
                        destination: None,
                        before: Some(current),
                        after: Some(updated),
                    })
                }
                Some(destination) => {
                    let at_destination = overlay.current(&destination).await?;
                    check_absent_expected(&destination, expected)?;
                    if at_destination != State::Missing {
                        return Err(FileError::new(
                            "already_exists",
                            format!(
                                "cannot move {} to {}: the destination already exists",
                                path.shown, destination.shown
                            ),
                            "Move to a path that does not exist, or delete the file there first \
                             with a `*** Delete File:` section.",
                        ));
                    }
                    overlay.check_parents(&destination).await?;
                    overlay.set(path, State::Missing);
                    overlay.set(&destination, State::File(updated.clone()));
                    Ok(SectionOutcome {
                        operation: "move",
                        path: path.clone(),
                        destination: Some(destination),
                        before: Some(current),
                        after: Some(updated),
                    })
                }
            }
        }
    }
}

/// The current content of a file the section needs to exist.
async fn existing_file(overlay: &mut Overlay<'_>, path: &FilePath) -> Result<Vec<u8>, FileError> {
    match overlay.current(path).await? {
        State::File(bytes) => Ok(bytes),
        State::Missing => Err(FileError::new(
            "not_found",
            format!("{} does not exist", path.shown),
            "Check the path; to create a file use an `*** Add File:` section.",
        )),
        State::Directory => Err(FileError::new(
            "is_directory",
            format!("{} is a directory, not a file", path.shown),
            "Patch sections name files; pass the path of a file.",
        )),
    }
}

/// The stale check of a file that exists: against its bytes on disk, when the map names it.
fn check_expected(
    overlay: &Overlay<'_>,
    path: &FilePath,
    expected: &HashMap<String, String>,
) -> Result<(), FileError> {
    let Some(expected_sha) = expected.get(&path.abs) else {
        return Ok(());
    };
    let actual = match overlay.original(path) {
        State::File(bytes) => sha256_hex(&bytes),
        State::Missing | State::Directory => String::new(),
    };
    if expected_sha.trim().eq_ignore_ascii_case(&actual) {
        Ok(())
    } else if actual.is_empty() {
        Err(FileError::new(
            "stale_file",
            format!(
                "{} did not exist when the patch was checked, but expectedSha256ByPath gives {expected_sha:?}",
                path.shown
            ),
            crate::tool::builtin::files::STALE_ACTION,
        ))
    } else {
        Err(FileError::stale(&path.shown, expected_sha, &actual))
    }
}

/// The stale check of a path that must not exist: only `""` is accepted.
fn check_absent_expected(
    path: &FilePath,
    expected: &HashMap<String, String>,
) -> Result<(), FileError> {
    match expected.get(&path.abs) {
        Some(expected_sha) if !expected_sha.is_empty() => Err(FileError::new(
            "stale_file",
            format!(
                "expectedSha256ByPath gives {expected_sha:?} for {}, which the patch creates; \
                 use \"\" to assert that it does not exist",
                path.shown
            ),
            crate::tool::builtin::files::STALE_ACTION,
        )),
        _ => Ok(()),
    }
}

fn check_size(path: &FilePath, size: usize) -> Result<(), FileError> {
    if size as u64 > MAX_FILE_BYTES {
        return Err(FileError::too_large(&path.shown, size as u64));
    }
    Ok(())
}

/// What is at `path` in the sandbox.
async fn read_state(ctx: &ToolContext, path: &FilePath) -> Result<State, FileError> {
    let stat = match ctx.sandbox.stat(&path.abs).await {
        Ok(stat) => stat,
        Err(err) if err.kind() == "not_found" => return Ok(State::Missing),
        Err(err) => return Err(FileError::from_flue(&path.shown, &err)),
    };
    if stat.is_dir {
        return Ok(State::Directory);
    }
    crate::tool::builtin::files::read_existing(ctx, path)
        .await
        .map(State::File)
}

fn as_content(state: &State) -> Option<Vec<u8>> {
    match state {
        State::File(bytes) => Some(bytes.clone()),
        State::Missing | State::Directory => None,
    }
}

fn with_line(mut error: FileError, line: usize) -> FileError {
    if !error.message.starts_with("patch line") {
        error.message = format!("patch line {line}: {}", error.message);
    }
    error
}

/// Writes a plan. On failure nothing is left changed (unless the rollback itself fails, which
/// the error says; the replaced contents are in the trash either way).
pub(crate) async fn commit(ctx: &ToolContext, plan: &Plan) -> Result<(), PatchFailure> {
    // Nothing written yet: a file that changed since it was read makes the patch stale.
    for change in &plan.changes {
        let now = read_state(ctx, &change.path)
            .await
            .map_err(|error| PatchFailure::at(&change.path, error))?;
        if as_content(&now) != change.before {
            let actual = as_content(&now).map_or_else(String::new, |bytes| sha256_hex(&bytes));
            let expected = change
                .before
                .as_deref()
                .map_or_else(String::new, sha256_hex);
            return Err(PatchFailure::at(
                &change.path,
                FileError::stale(&change.path.shown, &expected, &actual),
            ));
        }
    }
    for change in &plan.changes {
        if let Some(before) = &change.before {
            let reason = if change.after.is_none() {
                TrashReason::Deleted
            } else {
                TrashReason::Overwritten
            };
            trash(ctx, TOOL, &change.path, before, reason)
                .await
                .map_err(|error| PatchFailure::at(&change.path, error))?;
        }
    }
    let mut made_dirs: Vec<String> = Vec::new();
    let mut done: Vec<&Change> = Vec::new();
    // Writes first, then deletions: a move never loses its content midway.
    let writes = plan.changes.iter().filter(|change| change.after.is_some());
    let deletions = plan.changes.iter().filter(|change| change.after.is_none());
    for change in writes.chain(deletions) {
        let res = match &change.after {
            Some(after) => {
                missing_parents(ctx, &change.path.abs, &mut made_dirs).await;
                ctx.sandbox.write_file(&change.path.abs, after).await
            }
            None => ctx.sandbox.rm(&change.path.abs, RmOptions::default()).await,
        };
        if let Err(err) = res {
            let failed = rollback(ctx, &done, &made_dirs).await;
            let mut error = FileError::from_flue(&change.path.shown, &err);
            error.message = if failed.is_empty() {
                format!(
                    "{}; no file was changed (the files written before it were put back)",
                    error.message
                )
            } else {
                format!(
                    "{}; putting back the files written before it failed for {} (their previous \
                     content is in the trash)",
                    error.message,
                    failed.join(", ")
                )
            };
            return Err(PatchFailure::at(&change.path, error));
        }
        done.push(change);
    }
    Ok(())
}

/// Records the parents of `path` that do not exist yet (outermost first), so a rollback can
/// remove the directories the write creates.
async fn missing_parents(ctx: &ToolContext, path: &str, made_dirs: &mut Vec<String>) {
    let mut missing = Vec::new();
    let mut parent = path;
    while let Some(cut) = parent.rfind('/') {
        parent = &path[..cut];
        if parent.is_empty() || made_dirs.iter().any(|dir| dir == parent) {
            break;
        }
        match ctx.sandbox.stat(parent).await {
            Err(err) if err.kind() == "not_found" => missing.push(parent.to_owned()),
            _ => break,
        }
    }
    made_dirs.extend(missing.into_iter().rev());
}

/// Undoes `done` in reverse order and removes the directories made; returns the paths that
/// could not be put back.
async fn rollback(ctx: &ToolContext, done: &[&Change], made_dirs: &[String]) -> Vec<String> {
    let mut failed = Vec::new();
    for change in done.iter().rev() {
        let res = match &change.before {
            Some(before) => {
                let _ = ctx
                    .sandbox
                    .mkdir(
                        parent_of(&change.path.abs),
                        MkdirOptions { recursive: true },
                    )
                    .await;
                ctx.sandbox.write_file(&change.path.abs, before).await
            }
            None => ctx.sandbox.rm(&change.path.abs, RmOptions::default()).await,
        };
        if res.is_err() {
            failed.push(change.path.shown.clone());
        }
    }
    // Innermost first; a directory that is not empty (someone else wrote there) stays.
    for dir in made_dirs.iter().rev() {
        if ctx
            .sandbox
            .readdir(dir)
            .await
            .is_ok_and(|names| names.is_empty())
        {
            let _ = ctx
                .sandbox
                .rm(
                    dir,
                    RmOptions {
                        recursive: true,
                        force: true,
                    },
                )
                .await;
        }
    }
    failed
}

fn parent_of(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(cut) => &path[..cut],
    }
}
