//! `write_file`: replace an existing file's content, gated by the sha256 the caller last read.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::Result;
use crate::store::TrashReason;
use crate::tool::builtin::files::{
    Audit, DESTRUCTIVE, FileError, check_content_size, check_fresh, file_tool, read_existing,
    resolve, sha256_hex, trash,
};
use crate::tool::{ToolContext, ToolDefinition};

const DESCRIPTION: &str = "Replace the whole content of an existing file. Prefer edit_file for \
changing part of a file, and use create_file for new files. Stale-file protocol: pass as \
`expectedSha256` the `sha256` that read_file (or your last change) returned for this file; if \
the file changed since, the call fails with `stale_file` and changes nothing, so re-read the \
file and redo your change from its current content. The old content goes to the trash \
(`data.trashId`, recoverable with restore_file) and the call is recorded in the audit log. \
Returns the new `sha256`.";

/// Input of `write_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct WriteFileInput {
    /// Path of the existing file: relative to the working directory, or absolute inside the
    /// workspace.
    path: String,
    /// The new, whole content of the file.
    content: String,
    /// The sha256 of the file as you last read it (read_file's `data.sha256`).
    expected_sha256: String,
}

pub(crate) fn write_file_tool() -> Result<ToolDefinition> {
    file_tool(
        "write_file",
        DESCRIPTION,
        DESTRUCTIVE,
        |input: WriteFileInput, ctx: ToolContext| async move {
            let mut audit = Audit::new(&ctx, "write_file", "write");
            let outcome = write_file(&input, &ctx, &mut audit).await;
            audit.finish(&ctx, outcome).await
        },
    )
}

async fn write_file(
    input: &WriteFileInput,
    ctx: &ToolContext,
    audit: &mut Audit,
) -> Result<Value, FileError> {
    audit.raw_path(&input.path);
    let path = resolve(ctx, &input.path)?;
    audit.path(&path);
    check_content_size(&path.shown, &input.content)?;
    let current = read_existing(ctx, &path).await.map_err(|err| {
        if err.kind == "not_found" {
            return FileError::new(
                "not_found",
                format!(
                    "{} does not exist; write_file only replaces existing files",
                    path.shown
                ),
                "Use create_file to create a new file.",
            );
        }
        err
    })?;
    audit.before(&current);
    check_fresh(&path.shown, &input.expected_sha256, &current)?;
    let content = input.content.as_bytes();
    let trash_id = trash(ctx, "write_file", &path, &current, TrashReason::Overwritten).await?;
    ctx.sandbox
        .write_file(&path.abs, content)
        .await
        .map_err(|err| FileError::from_flue(&path.shown, &err))?;
    audit.change(&path.shown, Some(&current), Some(content));
    Ok(json!({
        "path": path.shown,
        "sha256": sha256_hex(content),
        "previousSha256": sha256_hex(&current),
        "bytes": content.len(),
        "trashId": trash_id,
    }))
}
