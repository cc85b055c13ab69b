//! `restore_file`: put a trashed file back, at its original path or another one.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::Result;
use crate::sandbox::normalize_path;
use crate::store::TrashedFile;
use crate::tool::builtin::files::{
    Audit, Existing, FileError, MODIFYING, file_tool, probe, resolve, sha256_hex, shown_path,
};
use crate::tool::{ToolContext, ToolDefinition};

const DESCRIPTION: &str = "Restore a file from the trash. The trash holds every file that \
delete_file, apply_patch or the runtime deleted, and the previous content of every file that \
write_file, edit_file or apply_patch changed. Pass `trashId` (returned by the call that trashed \
it), or `path` to restore the most recently trashed content of that path. The file goes back to \
its original path, or to `destination` when given; if something is already there the call \
fails with `already_exists` and changes nothing (pass another destination, or move the file \
that is in the way). Returns the restored file's `path` and `sha256`. Every call is recorded in \
the audit log.";

/// Input of `restore_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RestoreFileInput {
    /// The trash id of the content to restore.
    trash_id: Option<String>,
    /// Or: the original path; the most recently trashed content of that path is restored.
    path: Option<String>,
    /// Where to restore to (default: the original path).
    destination: Option<String>,
}

pub(crate) fn restore_file_tool() -> Result<ToolDefinition> {
    file_tool(
        "restore_file",
        DESCRIPTION,
        MODIFYING,
        |input: RestoreFileInput, ctx: ToolContext| async move {
            let mut audit = Audit::new(&ctx, "restore_file", "restore");
            let outcome = restore_file(&input, &ctx, &mut audit).await;
            audit.finish(&ctx, outcome).await
        },
    )
}

async fn restore_file(
    input: &RestoreFileInput,
    ctx: &ToolContext,
    audit: &mut Audit,
) -> Result<Value, FileError> {
    let trashed = find_trashed(input, ctx).await?;
    audit.raw_path(&trashed.entry.path);
    let destination = match &input.destination {
        Some(destination) => {
            audit.raw_destination(destination);
            resolve(ctx, destination)?
        }
        // Relative (or, from older entries, absolute) to the working directory.
        None => resolve(ctx, &trashed.entry.path)?,
    };
    audit.destination(&destination);
    if probe(ctx, &destination).await? != Existing::Missing {
        return Err(FileError::new(
            "already_exists",
            format!(
                "{} already exists; restore_file never overwrites",
                destination.shown
            ),
            "Pass another `destination`, or move or delete what is at that path first.",
        ));
    }
    ctx.sandbox
        .write_file(&destination.abs, &trashed.content)
        .await
        .map_err(|err| FileError::from_flue(&destination.shown, &err))?;
    audit.change(&destination.shown, None, Some(&trashed.content));
    Ok(json!({
        "path": destination.shown,
        "originalPath": original_path(ctx, &trashed.entry.path),
        "trashId": trashed.entry.id,
        "sha256": sha256_hex(&trashed.content),
    }))
}

/// The trash entry the call names, by id or by original path (the newest one).
async fn find_trashed(
    input: &RestoreFileInput,
    ctx: &ToolContext,
) -> Result<TrashedFile, FileError> {
    let store_error = |err: crate::error::FlueError| {
        FileError::new(
            "store_error",
            format!("cannot read the trash: {err}"),
            "Retry once; if it fails again, tell the user that the trash is failing.",
        )
    };
    let trash_id = match (&input.trash_id, &input.path) {
        (Some(trash_id), _) => trash_id.clone(),
        (None, Some(path)) => {
            let path = resolve(ctx, path)?;
            let entries = ctx
                .audit
                .list_trash(&ctx.instance_id)
                .await
                .map_err(store_error)?;
            let Some(newest) = entries.into_iter().rev().find(|entry| {
                normalize_path(&ctx.cwd, &entry.path).is_ok_and(|abs| abs == path.abs)
            }) else {
                return Err(FileError::new(
                    "not_found",
                    format!("nothing from {} is in the trash", path.shown),
                    "Check the path; pass `trashId` from the call that deleted or changed the file.",
                ));
            };
            newest.id
        }
        (None, None) => {
            return Err(FileError::invalid_input(
                "pass `trashId` or `path`",
                "Pass the `trashId` that delete_file (or the change) returned, or the file's original path.",
            ));
        }
    };
    ctx.audit
        .get_trash(&ctx.instance_id, &trash_id)
        .await
        .map_err(store_error)?
        .ok_or_else(|| {
            FileError::new(
                "not_found",
                format!("there is no trash entry {trash_id:?}"),
                "Pass a `trashId` returned by delete_file, write_file, edit_file or apply_patch.",
            )
        })
}

/// A trash entry's path as results name it: relative to the working directory when inside.
fn original_path(ctx: &ToolContext, stored: &str) -> String {
    match normalize_path(&ctx.cwd, stored) {
        Ok(abs) => shown_path(&ctx.cwd, &abs),
        Err(_) => stored.to_owned(),
    }
}
