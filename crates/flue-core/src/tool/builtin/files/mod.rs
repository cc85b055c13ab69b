//! The built-in file tools and what they share: paths, hashes, the result envelope, errors,
//! the audit log and the trash.
//!
//! Every tool here works through the [`Sandbox`](crate::sandbox::Sandbox) trait only, so it behaves the
//! same in every sandbox. Results are `{"ok": true, "data": ...}`; failures are [`ToolError`]s
//! with a stable kind and a suggested action, which the model sees as
//! `{"ok": false, "error": {"kind", "message", "suggestedAction"}}`.
//!
//! The stale-file protocol: `read_file` returns the sha256 of the file's full bytes; the tools
//! that change an existing file (`write_file`, `edit_file`, `apply_patch`) take it back as
//! `expectedSha256` and refuse with `stale_file` when the file changed since.

mod create;
mod delete;
mod edit;
mod glob;
mod list;
mod move_file;
mod read;
mod restore;
mod search;
mod walk;
mod write;

#[cfg(test)]
mod tests;

use std::fmt::Write as _;
use std::future::Future;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::error::{FlueError, Result};
use crate::sandbox::normalize_path;
use crate::store::{AUDIT_DIFF_LIMIT, AuditEntry, TrashEntry, TrashReason};
use crate::tool::{
    Effects, InterruptBehavior, Ownership, Permission, ToolContext, ToolDefinition, ToolError,
    ToolMeta,
};
use crate::util::{new_ulid, now_ms};

pub(super) use create::create_file_tool;
pub(super) use delete::delete_file_tool;
pub(super) use edit::edit_file_tool;
pub(super) use glob::glob_tool;
pub(super) use list::list_directory_tool;
pub(super) use move_file::move_file_tool;
pub(super) use read::read_file_tool;
pub(super) use restore::restore_file_tool;
pub(super) use search::search_files_tool;
pub(super) use write::write_file_tool;

/// The largest file the tools read or write whole, in bytes.
pub(crate) const MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;

/// What to do after `stale_file`, as the seed words it.
pub(crate) const STALE_ACTION: &str =
    "Re-read the file to obtain the current sha256 and re-apply your edit.";

/// A failed file-tool call: a stable kind, a message for the model, and what to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileError {
    pub(crate) kind: &'static str,
    pub(crate) message: String,
    pub(crate) suggested_action: String,
}

impl FileError {
    pub(crate) fn new(
        kind: &'static str,
        message: impl Into<String>,
        suggested_action: impl Into<String>,
    ) -> Self {
        Self {
            kind,
            message: message.into(),
            suggested_action: suggested_action.into(),
        }
    }

    pub(crate) fn invalid_input(message: impl Into<String>, action: impl Into<String>) -> Self {
        Self::new("invalid_input", message, action)
    }

    pub(crate) fn stale(shown: &str, expected: &str, actual: &str) -> Self {
        Self::new(
            "stale_file",
            format!(
                "{shown} changed since you read it: expectedSha256 is {expected:?} but the file's \
                 sha256 is now {actual}"
            ),
            STALE_ACTION,
        )
    }

    pub(crate) fn not_found(shown: &str) -> Self {
        Self::new(
            "not_found",
            format!("{shown} does not exist"),
            default_action("not_found"),
        )
    }

    pub(crate) fn already_exists(shown: &str) -> Self {
        Self::new(
            "already_exists",
            format!("{shown} already exists"),
            default_action("already_exists"),
        )
    }

    pub(crate) fn is_directory(shown: &str) -> Self {
        Self::new(
            "is_directory",
            format!("{shown} is a directory, not a file"),
            default_action("is_directory"),
        )
    }

    pub(crate) fn too_large(shown: &str, size: u64) -> Self {
        Self::new(
            "too_large",
            format!(
                "{shown} is {size} bytes; the file tools handle files of at most {MAX_FILE_BYTES} bytes"
            ),
            "Use the bash tool (head, tail, grep, sed) to work on parts of a file this large.",
        )
    }

    /// A sandbox or store error about the file the model called `shown`.
    pub(crate) fn from_flue(shown: &str, err: &FlueError) -> Self {
        let kind = err.kind();
        match kind {
            "not_found" => Self::not_found(shown),
            "is_directory" => Self::is_directory(shown),
            "already_exists" => Self::already_exists(shown),
            "outside_workspace" => Self::new(
                kind,
                format!("{shown} is outside the workspace"),
                default_action(kind),
            ),
            "protected_path" => {
                let reason = if let FlueError::ProtectedPath { reason, .. } = err {
                    reason.as_str()
                } else {
                    "flue keeps it from agents"
                };
                Self::new(
                    kind,
                    format!("{shown} is protected and cannot be used by tools: {reason}"),
                    default_action(kind),
                )
            }
            "not_a_directory" => Self::new(
                kind,
                format!("{shown}: a parent of this path is a file, not a directory"),
                default_action(kind),
            ),
            "permission_denied" => Self::new(
                kind,
                format!("{shown}: permission denied ({err})"),
                default_action(kind),
            ),
            _ => Self::new(kind, format!("{shown}: {err}"), default_action(kind)),
        }
    }

    pub(crate) fn into_tool_error(self) -> ToolError {
        ToolError::new(self.kind, self.message).with_suggested_action(self.suggested_action)
    }
}

/// The suggested action for an error `kind` when the tool has nothing more specific to say.
pub(crate) fn default_action(kind: &str) -> &'static str {
    match kind {
        "stale_file" => STALE_ACTION,
        "not_found" => {
            "Check the path (list_directory or glob find files) and retry; create a new file with \
             create_file."
        }
        "already_exists" => {
            "Choose another path, or read the existing file and change it with edit_file or \
             write_file."
        }
        "is_directory" => "Pass the path of a file; list_directory shows what the directory holds.",
        "not_a_directory" => "Choose a path whose parent directories are directories.",
        "permission_denied" => "The sandbox refused access; choose a path you may change.",
        "outside_workspace" => {
            "Use a path inside the workspace: relative to the working directory, or absolute \
             inside it."
        }
        "protected_path" => {
            "Leave this path alone: flue's store (.flue/) and secrets files (.env*) are off \
             limits; work on other files."
        }
        "patch_conflict" => "Re-read the file and rebuild the change from its current content.",
        "aborted" => "The operation was aborted; nothing more to do.",
        _ => "Retry once; if it fails again, tell the user what failed.",
    }
}

/// A path as the model gave it, resolved against the working directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FilePath {
    /// Absolute sandbox path.
    pub(crate) abs: String,
    /// How results name it: relative to the working directory when inside it, else as given.
    pub(crate) shown: String,
}

/// Resolves `input` (relative to the working directory, or absolute inside the sandbox).
pub(crate) fn resolve(ctx: &ToolContext, input: &str) -> Result<FilePath, FileError> {
    if input.trim().is_empty() {
        return Err(FileError::invalid_input(
            "path is empty",
            "Pass the path of a file, relative to the working directory.",
        ));
    }
    let abs = normalize_path(&ctx.cwd, input).map_err(|err| FileError::from_flue(input, &err))?;
    let relative = shown_path(&ctx.cwd, &abs);
    // Outside the working directory, results name the path as the model wrote it.
    let shown = if relative == abs {
        input.to_owned()
    } else {
        relative
    };
    Ok(FilePath { shown, abs })
}

/// `abs` relative to `cwd` when it lies inside it (`.` for `cwd` itself), else `abs`.
pub(crate) fn shown_path(cwd: &str, abs: &str) -> String {
    if abs == cwd {
        return ".".to_owned();
    }
    let prefix = if cwd.ends_with('/') {
        cwd.to_owned()
    } else {
        format!("{cwd}/")
    };
    abs.strip_prefix(&prefix).unwrap_or(abs).to_owned()
}

/// Lowercase hex sha256 of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut hex = String::with_capacity(64);
    for byte in digest {
        // Writing to a String cannot fail.
        let _ = write!(hex, "{byte:02x}");
    }
    hex
}

/// What is at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Existing {
    Missing,
    Directory,
    /// A file (or a symlink, or anything else that is not a directory).
    File,
}

/// What is at `path`; a missing path is not an error.
pub(crate) async fn probe(ctx: &ToolContext, path: &FilePath) -> Result<Existing, FileError> {
    match ctx.sandbox.stat(&path.abs).await {
        Ok(stat) if stat.is_dir => Ok(Existing::Directory),
        Ok(_) => Ok(Existing::File),
        Err(err) if err.kind() == "not_found" => Ok(Existing::Missing),
        Err(err) => Err(FileError::from_flue(&path.shown, &err)),
    }
}

/// The bytes of the existing file `path`: `not_found`, `is_directory` and `too_large` otherwise.
pub(crate) async fn read_existing(
    ctx: &ToolContext,
    path: &FilePath,
) -> Result<Vec<u8>, FileError> {
    let stat = ctx
        .sandbox
        .stat(&path.abs)
        .await
        .map_err(|err| FileError::from_flue(&path.shown, &err))?;
    if stat.is_dir {
        return Err(FileError::is_directory(&path.shown));
    }
    if let Some(size) = stat.size.filter(|size| *size > MAX_FILE_BYTES) {
        return Err(FileError::too_large(&path.shown, size));
    }
    let bytes = ctx
        .sandbox
        .read_file_bytes(&path.abs)
        .await
        .map_err(|err| FileError::from_flue(&path.shown, &err))?;
    // A symlink's stat gives the link's size; check what was read too.
    let size = bytes.len() as u64;
    if size > MAX_FILE_BYTES {
        return Err(FileError::too_large(&path.shown, size));
    }
    Ok(bytes)
}

/// Refuses content larger than [`MAX_FILE_BYTES`].
pub(crate) fn check_content_size(shown: &str, content: &str) -> Result<(), FileError> {
    let size = content.len() as u64;
    if size > MAX_FILE_BYTES {
        return Err(FileError::new(
            "too_large",
            format!(
                "the content for {shown} is {size} bytes; the file tools write at most {MAX_FILE_BYTES} bytes"
            ),
            "Write the file in smaller parts, or generate it with the bash tool.",
        ));
    }
    Ok(())
}

/// Checks `expected` (from the model) against the file's current bytes.
pub(crate) fn check_fresh(shown: &str, expected: &str, current: &[u8]) -> Result<(), FileError> {
    let actual = sha256_hex(current);
    if expected.trim().eq_ignore_ascii_case(&actual) {
        Ok(())
    } else {
        Err(FileError::stale(shown, expected, &actual))
    }
}

/// A unified diff from `before` to `after` (`None`: the file does not exist), cut at
/// [`AUDIT_DIFF_LIMIT`] bytes; `None` when either side is not UTF-8 text.
pub(crate) fn unified_diff(
    shown: &str,
    before: Option<&[u8]>,
    after: Option<&[u8]>,
) -> (Option<String>, bool) {
    fn as_text(bytes: Option<&[u8]>) -> Option<&str> {
        match bytes {
            None => Some(""),
            Some(bytes) => std::str::from_utf8(bytes).ok(),
        }
    }
    let (Some(old), Some(new)) = (as_text(before), as_text(after)) else {
        return (None, false);
    };
    let label = |side: Option<&[u8]>, prefix: &str| match side {
        None => "/dev/null".to_owned(),
        Some(_) => format!("{prefix}/{shown}"),
    };
    let mut options = diffy::DiffOptions::new();
    options
        .set_original_filename(label(before, "a"))
        .set_modified_filename(label(after, "b"));
    let diff = options.create_patch(old, new).to_string();
    let (diff, truncated) = cut_at(diff, AUDIT_DIFF_LIMIT);
    (Some(diff), truncated)
}

/// `text` cut to at most `limit` bytes on a character boundary, and whether it was cut.
pub(crate) fn cut_at(mut text: String, limit: usize) -> (String, bool) {
    if text.len() <= limit {
        return (text, false);
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    (text, true)
}

/// The audit entry of one call, filled in as the call goes and appended when it ends.
#[derive(Debug)]
pub(crate) struct Audit {
    entry: AuditEntry,
}

impl Audit {
    pub(crate) fn new(ctx: &ToolContext, tool: &str, operation: &str) -> Self {
        Self {
            entry: AuditEntry {
                id: new_ulid(),
                at: 0,
                instance_id: ctx.instance_id.clone(),
                session: ctx.session.clone(),
                agent: ctx.agent.clone(),
                tool: tool.to_owned(),
                operation: operation.to_owned(),
                ..AuditEntry::default()
            },
        }
    }

    /// Records the path as the model gave it, until it is resolved.
    pub(crate) fn raw_path(&mut self, input: &str) {
        self.entry.path = Some(input.to_owned());
    }

    pub(crate) fn path(&mut self, path: &FilePath) {
        self.entry.path = Some(path.abs.clone());
    }

    /// Records the destination as the model gave it, until it is resolved.
    pub(crate) fn raw_destination(&mut self, input: &str) {
        self.entry.destination_path = Some(input.to_owned());
    }

    pub(crate) fn destination(&mut self, path: &FilePath) {
        self.entry.destination_path = Some(path.abs.clone());
    }

    /// Records the content before and after the change, and their diff.
    pub(crate) fn change(&mut self, shown: &str, before: Option<&[u8]>, after: Option<&[u8]>) {
        self.entry.sha256_before = before.map(sha256_hex);
        self.entry.sha256_after = after.map(sha256_hex);
        let (diff, truncated) = unified_diff(shown, before, after);
        self.entry.diff = diff;
        self.entry.diff_truncated = truncated;
    }

    /// Records the hashes of an unchanged content (a move).
    pub(crate) fn same_content(&mut self, content: &[u8]) {
        let sha256 = sha256_hex(content);
        self.entry.sha256_before = Some(sha256.clone());
        self.entry.sha256_after = Some(sha256);
    }

    /// Records the content before the call (a failed call still says what it found).
    pub(crate) fn before(&mut self, before: &[u8]) {
        self.entry.sha256_before = Some(sha256_hex(before));
    }

    /// Appends the entry with the call's outcome and returns the outcome.
    ///
    /// When the entry cannot be stored the call fails with `store_error`; the message says
    /// whether the change itself was made.
    pub(crate) async fn finish(
        mut self,
        ctx: &ToolContext,
        outcome: Result<Value, FileError>,
    ) -> Result<Value, FileError> {
        self.entry.at = now_ms();
        self.entry.ok = outcome.is_ok();
        if let Err(err) = &outcome {
            self.entry.error_kind = Some(err.kind.to_owned());
            self.entry.error_message = Some(err.message.clone());
            self.entry.sha256_after = None;
            self.entry.diff = None;
            self.entry.diff_truncated = false;
        }
        match ctx.audit.append_audit(&self.entry).await {
            Ok(()) => outcome,
            Err(err) => Err(match outcome {
                Ok(_) => FileError::new(
                    "store_error",
                    format!("the change was made, but its audit entry could not be stored: {err}"),
                    "Do not repeat the change; tell the user that the audit log is failing.",
                ),
                Err(original) => original,
            }),
        }
    }
}

/// Puts `content`, the old content of `path`, in the trash; returns the trash id.
///
/// Called before the change, so a failing store stops the call before anything changes.
pub(crate) async fn trash(
    ctx: &ToolContext,
    tool: &str,
    path: &FilePath,
    content: &[u8],
    reason: TrashReason,
) -> Result<String, FileError> {
    let entry = TrashEntry {
        id: new_ulid(),
        instance_id: ctx.instance_id.clone(),
        session: ctx.session.clone(),
        agent: ctx.agent.clone(),
        tool: tool.to_owned(),
        // Relative to the working directory when inside it, so the entry restores wherever
        // the workspace is next (a virtual run's `/workspace/...` on the real folder).
        path: shown_path(&ctx.cwd, &path.abs),
        sha256: sha256_hex(content),
        size: content.len() as u64,
        trashed_at: now_ms(),
        reason,
    };
    ctx.audit.put_trash(&entry, content).await.map_err(|err| {
        FileError::new(
            "store_error",
            format!(
                "nothing was changed: the old content of {} could not be saved to the trash: {err}",
                path.shown
            ),
            "Retry once; if it fails again, tell the user that the trash is failing.",
        )
    })?;
    Ok(entry.id)
}

/// A built-in file tool: typed input, `{ok, data}` output, [`FileError`]s as tool errors.
pub(crate) fn file_tool<I, F, Fut>(
    name: &str,
    description: &str,
    meta: ToolMeta,
    run: F,
) -> Result<ToolDefinition>
where
    I: JsonSchema + DeserializeOwned + Send + 'static,
    F: Fn(I, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, FileError>> + Send + 'static,
{
    let tool = ToolDefinition::from_fn(name, description, move |input: I, ctx: ToolContext| {
        let running = run(input, ctx);
        async move {
            match running.await {
                Ok(data) => Ok(json!({"ok": true, "data": data})),
                Err(err) => Err(err.into_tool_error()),
            }
        }
    })?;
    Ok(tool.with_meta(meta))
}

/// Metadata of a tool that only reads.
pub(crate) const READ_ONLY: ToolMeta = ToolMeta {
    ownership: Ownership::Managed,
    permission: Permission::AlwaysAllow,
    read_only: true,
    destructive: false,
    effects: Effects::FILES,
    interrupt: InterruptBehavior::Cancel,
    replay_safe: true,
};

/// Metadata of a tool that changes files (recoverably: replaced content goes to the trash).
pub(crate) const MODIFYING: ToolMeta = ToolMeta {
    ownership: Ownership::Managed,
    permission: Permission::AlwaysAllow,
    read_only: false,
    destructive: false,
    effects: Effects::FILES,
    interrupt: InterruptBehavior::Complete,
    replay_safe: false,
};

/// Metadata of a tool that deletes or overwrites files (recoverable from the trash).
pub(crate) const DESTRUCTIVE: ToolMeta = ToolMeta {
    ownership: Ownership::Managed,
    permission: Permission::AlwaysAllow,
    read_only: false,
    destructive: true,
    effects: Effects::FILES,
    interrupt: InterruptBehavior::Complete,
    replay_safe: false,
};
