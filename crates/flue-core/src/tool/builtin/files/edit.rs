//! `edit_file`: exact-string replacements in an existing file, gated by sha256.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::Result;
use crate::store::TrashReason;
use crate::tool::builtin::files::{
    Audit, FileError, MODIFYING, check_content_size, check_fresh, file_tool, read_existing,
    resolve, sha256_hex, trash,
};
use crate::tool::{ToolContext, ToolDefinition};

const DESCRIPTION: &str = "Change part of an existing text file by exact string replacement. \
Each edit replaces `oldText` with `newText`; edits apply in order, each to the result of the \
previous one. `oldText` must match the file exactly (whitespace and indentation included) and \
exactly once, so include enough surrounding lines to make it unique, or set `replaceAll: true` \
to replace every occurrence. An empty `oldText` is refused (use write_file or create_file for \
whole files). If any edit does not apply, the call fails with `patch_conflict` and the file is \
left untouched. Stale-file protocol: pass as `expectedSha256` the `sha256` that read_file (or \
your last change) returned; if the file changed since, the call fails with `stale_file`, so \
re-read it and redo the edit. The old content goes to the trash (`data.trashId`) and the call \
is recorded in the audit log. Returns the new `sha256`.";

/// Input of `edit_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct EditFileInput {
    /// Path of the file: relative to the working directory, or absolute inside the workspace.
    path: String,
    /// The sha256 of the file as you last read it (read_file's `data.sha256`).
    expected_sha256: String,
    /// The replacements, applied in order.
    #[schemars(length(min = 1))]
    edits: Vec<Edit>,
}

/// One replacement.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Edit {
    /// Text to find: exact, non-empty, and unique in the file unless `replaceAll` is set.
    old_text: String,
    /// Replacement text.
    new_text: String,
    /// Replace every occurrence instead of requiring exactly one (default false).
    #[serde(default)]
    replace_all: bool,
}

pub(crate) fn edit_file_tool() -> Result<ToolDefinition> {
    file_tool(
        "edit_file",
        DESCRIPTION,
        MODIFYING,
        |input: EditFileInput, ctx: ToolContext| async move {
            let mut audit = Audit::new(&ctx, "edit_file", "edit");
            let outcome = edit_file(&input, &ctx, &mut audit).await;
            audit.finish(&ctx, outcome).await
        },
    )
}

async fn edit_file(
    input: &EditFileInput,
    ctx: &ToolContext,
    audit: &mut Audit,
) -> Result<Value, FileError> {
    audit.raw_path(&input.path);
    let path = resolve(ctx, &input.path)?;
    audit.path(&path);
    let empty: Vec<String> = input
        .edits
        .iter()
        .enumerate()
        .filter(|(_, edit)| edit.old_text.is_empty())
        .map(|(edit_idx, _)| format!("edits[{edit_idx}]"))
        .collect();
    if input.edits.is_empty() || !empty.is_empty() {
        return Err(FileError::invalid_input(
            if input.edits.is_empty() {
                "edits is empty".to_owned()
            } else {
                format!("oldText is empty in {}", empty.join(", "))
            },
            "Give each edit the exact, non-empty text to replace; to write a whole file use \
             write_file (or create_file for a new one).",
        ));
    }
    let current = read_existing(ctx, &path).await?;
    audit.before(&current);
    check_fresh(&path.shown, &input.expected_sha256, &current)?;
    let Ok(text) = std::str::from_utf8(&current) else {
        return Err(FileError::invalid_input(
            format!("{} is not UTF-8 text", path.shown),
            "edit_file only edits text files.",
        ));
    };
    let (edited, n_replacements) = apply_edits(&path.shown, text, &input.edits)?;
    check_content_size(&path.shown, &edited)?;
    let trash_id = trash(ctx, "edit_file", &path, &current, TrashReason::Overwritten).await?;
    ctx.sandbox
        .write_file(&path.abs, edited.as_bytes())
        .await
        .map_err(|err| FileError::from_flue(&path.shown, &err))?;
    audit.change(&path.shown, Some(&current), Some(edited.as_bytes()));
    Ok(json!({
        "path": path.shown,
        "sha256": sha256_hex(edited.as_bytes()),
        "previousSha256": sha256_hex(&current),
        "replacements": n_replacements,
        "trashId": trash_id,
    }))
}

/// Applies `edits` in order; returns the new text and the number of replacements made.
fn apply_edits(shown: &str, text: &str, edits: &[Edit]) -> Result<(String, usize), FileError> {
    let mut text = text.to_owned();
    let mut n_replacements = 0;
    for (edit_idx, edit) in edits.iter().enumerate() {
        let n_found = text.matches(edit.old_text.as_str()).count();
        if n_found == 0 {
            return Err(FileError::new(
                "patch_conflict",
                format!(
                    "edits[{edit_idx}].oldText was not found in {shown}{}; nothing was changed",
                    if edit_idx > 0 {
                        " (after the earlier edits)"
                    } else {
                        ""
                    }
                ),
                "Re-read the file and copy oldText exactly from its current content, whitespace \
                 and indentation included.",
            ));
        }
        if n_found > 1 && !edit.replace_all {
            return Err(FileError::new(
                "patch_conflict",
                format!(
                    "edits[{edit_idx}].oldText matches {n_found} places in {shown}; nothing was changed"
                ),
                "Add surrounding lines to oldText so it matches exactly one place, or set \
                 replaceAll to replace every occurrence.",
            ));
        }
        text = text.replace(edit.old_text.as_str(), &edit.new_text);
        n_replacements += n_found;
    }
    Ok((text, n_replacements))
}
