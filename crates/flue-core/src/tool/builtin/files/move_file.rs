//! `move_file`: move or rename a file, never overwriting.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::Result;
use crate::sandbox::RmOptions;
use crate::tool::builtin::files::{
    Audit, Existing, FileError, MODIFYING, file_tool, probe, read_existing, resolve, sha256_hex,
};
use crate::tool::{ToolContext, ToolDefinition};

const DESCRIPTION: &str = "Move or rename a file; missing parent directories of the destination \
are created. It never overwrites: when anything is already at `destination` the call fails \
with `already_exists` and nothing moves. Files only (a directory fails with `is_directory`). \
The content is unchanged, so its sha256 stays valid for later edits at the new path. Every call \
is recorded in the audit log.";

/// Input of `move_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct MoveFileInput {
    /// The file to move: relative to the working directory, or absolute inside the workspace.
    source: String,
    /// Its new path; nothing may be there yet.
    destination: String,
}

pub(crate) fn move_file_tool() -> Result<ToolDefinition> {
    file_tool(
        "move_file",
        DESCRIPTION,
        MODIFYING,
        |input: MoveFileInput, ctx: ToolContext| async move {
            let mut audit = Audit::new(&ctx, "move_file", "move");
            let outcome = move_file(&input, &ctx, &mut audit).await;
            audit.finish(&ctx, outcome).await
        },
    )
}

async fn move_file(
    input: &MoveFileInput,
    ctx: &ToolContext,
    audit: &mut Audit,
) -> Result<Value, FileError> {
    audit.raw_path(&input.source);
    audit.raw_destination(&input.destination);
    let source = resolve(ctx, &input.source)?;
    audit.path(&source);
    let destination = resolve(ctx, &input.destination)?;
    audit.destination(&destination);
    if source.abs == destination.abs {
        return Err(FileError::invalid_input(
            format!(
                "source and destination are the same path ({})",
                source.shown
            ),
            "Pass a different destination.",
        ));
    }
    match probe(ctx, &source).await? {
        Existing::Missing => return Err(FileError::not_found(&source.shown)),
        Existing::Directory => {
            return Err(FileError::new(
                "is_directory",
                format!(
                    "{} is a directory; move_file moves files only",
                    source.shown
                ),
                "Move the files inside it one by one.",
            ));
        }
        Existing::File => {}
    }
    if probe(ctx, &destination).await? != Existing::Missing {
        return Err(FileError::new(
            "already_exists",
            format!(
                "{} already exists; move_file never overwrites",
                destination.shown
            ),
            "Choose another destination, or delete the file there first (delete_file keeps it \
             in the trash).",
        ));
    }
    let content = read_existing(ctx, &source).await?;
    audit.same_content(&content);
    ctx.sandbox
        .write_file(&destination.abs, &content)
        .await
        .map_err(|err| FileError::from_flue(&destination.shown, &err))?;
    if let Err(err) = ctx.sandbox.rm(&source.abs, RmOptions::default()).await {
        // Undo the copy, so that the call changes nothing.
        let _ = ctx.sandbox.rm(&destination.abs, RmOptions::default()).await;
        return Err(FileError::from_flue(&source.shown, &err));
    }
    Ok(json!({
        "source": source.shown,
        "destination": destination.shown,
        "sha256": sha256_hex(&content),
    }))
}
