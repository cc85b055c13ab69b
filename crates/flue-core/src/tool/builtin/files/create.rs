//! `create_file`: a new file; `already_exists` when anything is at the path.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::Result;
use crate::tool::builtin::files::{
    Audit, Existing, FileError, MODIFYING, check_content_size, file_tool, probe, resolve,
    sha256_hex,
};
use crate::tool::{ToolContext, ToolDefinition};

const DESCRIPTION: &str = "Create a new file with the given content; missing parent directories \
are created. Use it only for files that do not exist yet: when anything is already at `path` it \
fails with `already_exists` and changes nothing (to change an existing file, read it with \
read_file, then use edit_file or write_file). Returns the new file's `sha256`, which you can \
pass as `expectedSha256` to a later edit. Every call is recorded in the audit log.";

/// Input of `create_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct CreateFileInput {
    /// Path of the new file: relative to the working directory, or absolute inside the workspace.
    path: String,
    /// The whole content of the file.
    content: String,
}

pub(crate) fn create_file_tool() -> Result<ToolDefinition> {
    file_tool(
        "create_file",
        DESCRIPTION,
        MODIFYING,
        |input: CreateFileInput, ctx: ToolContext| async move {
            let mut audit = Audit::new(&ctx, "create_file", "create");
            let outcome = create_file(&input, &ctx, &mut audit).await;
            audit.finish(&ctx, outcome).await
        },
    )
}

async fn create_file(
    input: &CreateFileInput,
    ctx: &ToolContext,
    audit: &mut Audit,
) -> Result<Value, FileError> {
    audit.raw_path(&input.path);
    let path = resolve(ctx, &input.path)?;
    audit.path(&path);
    check_content_size(&path.shown, &input.content)?;
    if probe(ctx, &path).await? != Existing::Missing {
        return Err(FileError::new(
            "already_exists",
            format!(
                "{} already exists; create_file never overwrites",
                path.shown
            ),
            "Read the existing file with read_file and change it with edit_file or write_file, \
             or create the file at another path.",
        ));
    }
    let content = input.content.as_bytes();
    ctx.sandbox
        .write_file(&path.abs, content)
        .await
        .map_err(|err| FileError::from_flue(&path.shown, &err))?;
    audit.change(&path.shown, None, Some(content));
    Ok(json!({
        "path": path.shown,
        "sha256": sha256_hex(content),
        "bytes": content.len(),
    }))
}
