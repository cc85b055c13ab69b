//! `apply_patch`: a multi-file patch envelope, checked as one plan and committed atomically.
//!
//! [`parse`] reads the envelope, [`plan`] checks every section against the sandbox and
//! computes the new contents in memory (with [`apply`] for Update chunks), and
//! [`plan::commit`] writes them, rolling back on a failed write. One audit entry is appended
//! per changed file, or one for the failed call.

mod apply;
mod parse;
mod plan;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::Result;
use crate::tool::builtin::files::{Audit, DESTRUCTIVE, FileError, file_tool, resolve, sha256_hex};
use crate::tool::{ToolContext, ToolDefinition};

const DESCRIPTION: &str = "Apply a patch that adds, updates, moves and deletes files, all or \
nothing: the whole patch is checked first, and if any section fails (a file changed, a chunk \
does not match, a path exists) no file changes. Use it for changes that span several places or \
files. Format:\n\
*** Begin Patch\n\
*** Add File: path/new.txt\n\
+each line of the new file, prefixed with +\n\
*** Update File: path/old.txt\n\
*** Move to: path/renamed.txt   (optional)\n\
@@ a line above the change, to locate it (optional)\n\
 context line (prefixed with a space)\n\
-line to remove\n\
+line to add\n\
*** End of File   (optional: the chunk ends at the end of the file)\n\
*** Delete File: path/gone.txt\n\
*** End Patch\n\
Chunks are found by their context and `-` lines, not by line numbers, so include 3 lines of \
unchanged context around each change and copy them exactly. Nothing may come before `*** Begin \
Patch` or after `*** End Patch`. Adding a file that exists, or moving onto one, fails with \
`already_exists`. Stale-file protocol: `expectedSha256ByPath` maps paths to the sha256 you read \
(read_file's `data.sha256`); a file whose sha256 differs fails the patch with `stale_file`, so \
re-read it and rebuild the patch. Map an Add File (or Move to) path to \"\" to assert it does not \
exist. Paths missing from the map are not checked. Replaced and deleted contents go to the \
trash; every changed file is recorded in the audit log. Returns each changed file's new sha256 \
in `data.sha256ByPath`.";

/// Input of `apply_patch`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ApplyPatchInput {
    /// The whole patch, from `*** Begin Patch` to `*** End Patch`.
    patch: String,
    /// Path -> the sha256 you last read; `""` asserts that an added file does not exist yet.
    #[serde(default)]
    expected_sha256_by_path: BTreeMap<String, String>,
}

pub(crate) fn apply_patch_tool() -> Result<ToolDefinition> {
    file_tool(
        "apply_patch",
        DESCRIPTION,
        DESTRUCTIVE,
        |input: ApplyPatchInput, ctx: ToolContext| async move { apply_patch(&input, &ctx).await },
    )
}

async fn apply_patch(input: &ApplyPatchInput, ctx: &ToolContext) -> Result<Value, FileError> {
    let mut failure = Audit::new(ctx, "apply_patch", "patch");
    let outcome = check_and_commit(input, ctx).await;
    let plan = match outcome {
        Ok(plan) => plan,
        Err(err) => {
            if let Some(path) = &err.path {
                failure.raw_path(path);
            }
            return failure.finish(ctx, Err(err.error)).await;
        }
    };
    let mut files = Vec::new();
    for section in &plan.sections {
        let mut audit = Audit::new(ctx, "apply_patch", section.operation);
        audit.path(&section.path);
        let shown = match &section.destination {
            Some(destination) => {
                audit.destination(destination);
                &destination.shown
            }
            None => &section.path.shown,
        };
        audit.change(shown, section.before.as_deref(), section.after.as_deref());
        audit.finish(ctx, Ok(Value::Null)).await?;
        let mut file = json!({"path": section.path.shown, "operation": section.operation});
        if let Some(destination) = &section.destination {
            file["destination"] = json!(destination.shown);
        }
        files.push(file);
    }
    let sha256_by_path: BTreeMap<&str, String> = plan
        .changes
        .iter()
        .filter_map(|change| {
            let after = change.after.as_deref()?;
            Some((change.path.shown.as_str(), sha256_hex(after)))
        })
        .collect();
    Ok(json!({"files": files, "sha256ByPath": sha256_by_path}))
}

/// Parses, plans and commits; the error names the path at fault when there is one.
async fn check_and_commit(
    input: &ApplyPatchInput,
    ctx: &ToolContext,
) -> Result<plan::Plan, plan::PatchFailure> {
    let no_path = |error| plan::PatchFailure { error, path: None };
    let patch = parse::parse_patch(&input.patch).map_err(|err| {
        no_path(FileError::new(
            "patch_parse_error",
            format!("patch line {}: {}", err.line, err.message),
            "Fix the patch: it must start with `*** Begin Patch`, end with `*** End Patch`, and \
             hold only `*** Add File:`, `*** Update File:` (with `@@` chunks of ` `, `-`, `+` \
             lines) and `*** Delete File:` sections.",
        ))
    })?;
    let mut expected = HashMap::new();
    for (path, sha256) in &input.expected_sha256_by_path {
        let resolved = resolve(ctx, path).map_err(|error| plan::PatchFailure {
            error,
            path: Some(path.clone()),
        })?;
        expected.insert(resolved.abs, sha256.clone());
    }
    let plan = plan::plan(ctx, &patch, &expected).await?;
    plan::commit(ctx, &plan).await?;
    Ok(plan)
}
