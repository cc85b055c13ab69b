//! `delete_file`: delete a file, keeping its content in the trash.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::Result;
use crate::sandbox::RmOptions;
use crate::store::TrashReason;
use crate::tool::builtin::files::{
    Audit, DESTRUCTIVE, Existing, FileError, check_fresh, file_tool, probe, read_existing, resolve,
    sha256_hex, trash,
};
use crate::tool::{ToolContext, ToolDefinition};

const DESCRIPTION: &str = "Delete a file. Its content goes to the trash first, so the deletion \
can be undone: restore_file with the returned `data.trashId` (or with the file's path) puts it \
back. Only files: a directory fails with `is_directory`. Optionally pass `expectedSha256` (from \
read_file) to delete the file only if it is still the version you read; otherwise the call \
fails with `stale_file`. Every call is recorded in the audit log.";

/// Input of `delete_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct DeleteFileInput {
    /// Path of the file: relative to the working directory, or absolute inside the workspace.
    path: String,
    /// Delete only if the file's sha256 is still this one (optional).
    expected_sha256: Option<String>,
}

pub(crate) fn delete_file_tool() -> Result<ToolDefinition> {
    file_tool(
        "delete_file",
        DESCRIPTION,
        DESTRUCTIVE,
        |input: DeleteFileInput, ctx: ToolContext| async move {
            let mut audit = Audit::new(&ctx, "delete_file", "delete");
            let outcome = delete_file(&input, &ctx, &mut audit).await;
            audit.finish(&ctx, outcome).await
        },
    )
}

async fn delete_file(
    input: &DeleteFileInput,
    ctx: &ToolContext,
    audit: &mut Audit,
) -> Result<Value, FileError> {
    audit.raw_path(&input.path);
    let path = resolve(ctx, &input.path)?;
    audit.path(&path);
    if probe(ctx, &path).await? == Existing::Directory {
        return Err(FileError::new(
            "is_directory",
            format!(
                "{} is a directory; delete_file deletes files only",
                path.shown
            ),
            "Delete the files inside it one by one, or pass the path of a file.",
        ));
    }
    let current = read_existing(ctx, &path).await?;
    audit.before(&current);
    if let Some(expected) = &input.expected_sha256 {
        check_fresh(&path.shown, expected, &current)?;
    }
    let trash_id = trash(ctx, "delete_file", &path, &current, TrashReason::Deleted).await?;
    ctx.sandbox
        .rm(&path.abs, RmOptions::default())
        .await
        .map_err(|err| FileError::from_flue(&path.shown, &err))?;
    audit.change(&path.shown, Some(&current), None);
    Ok(json!({
        "path": path.shown,
        "sha256": sha256_hex(&current),
        "trashId": trash_id,
    }))
}
