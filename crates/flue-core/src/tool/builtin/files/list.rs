//! `list_directory`: a directory's entries with types and sizes, optionally recursive, bounded.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::Result;
use crate::tool::builtin::files::walk::{EntryKind, Keep, WalkOptions, walk};
use crate::tool::builtin::files::{FileError, READ_ONLY, file_tool, resolve};
use crate::tool::{ToolContext, ToolDefinition};

/// Entries returned when the call sets no `maxEntries`.
const DEFAULT_MAX_ENTRIES: usize = 200;

/// The largest `maxEntries` a call may set.
const MAX_MAX_ENTRIES: usize = 5000;

const DESCRIPTION: &str = "List a directory of the workspace: each entry's `path` (relative to \
the listed directory), `type` (file, directory or symlink) and `size` in bytes. Use it to see \
what a directory holds before reading or changing files. `path` defaults to the working \
directory. With `recursive: true` it lists the whole tree below, depth first, skipping `.git` \
and whatever .gitignore/.ignore files exclude (set `includeIgnored: true` to see those too). At \
most `maxEntries` entries come back (default 200); `data.truncated` says when there were more, \
so list a subdirectory or use glob to narrow it down.";

/// Input of `list_directory`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ListDirectoryInput {
    /// Directory to list: relative to the working directory (default), or absolute inside
    /// the workspace.
    path: Option<String>,
    /// List the whole tree below the directory (default false).
    #[serde(default)]
    recursive: bool,
    /// At most this many entries (default 200, at most 5000).
    #[schemars(range(min = 1, max = 5000))]
    max_entries: Option<usize>,
    /// In recursive listings, also list what ignore files exclude (default false).
    #[serde(default)]
    include_ignored: bool,
}

pub(crate) fn list_directory_tool() -> Result<ToolDefinition> {
    file_tool(
        "list_directory",
        DESCRIPTION,
        READ_ONLY,
        |input: ListDirectoryInput, ctx: ToolContext| async move { list_directory(&input, &ctx).await },
    )
}

async fn list_directory(input: &ListDirectoryInput, ctx: &ToolContext) -> Result<Value, FileError> {
    let path = resolve(ctx, input.path.as_deref().unwrap_or("."))?;
    let max_entries = input
        .max_entries
        .unwrap_or(DEFAULT_MAX_ENTRIES)
        .clamp(1, MAX_MAX_ENTRIES);
    let options = WalkOptions {
        recursive: input.recursive,
        respect_ignore: input.recursive && !input.include_ignored,
    };
    let mut n_kept = 0usize;
    let walked = walk(ctx, &path, options, |_| {
        if n_kept == max_entries {
            return Keep::Stop;
        }
        n_kept += 1;
        Keep::Yes
    })
    .await?;
    let entries: Vec<Value> = walked
        .entries
        .iter()
        .map(|entry| {
            let mut value = json!({"path": entry.rel, "type": entry.kind.as_str()});
            if let Some(size) = entry.size.filter(|_| entry.kind == EntryKind::File) {
                value["size"] = json!(size);
            }
            value
        })
        .collect();
    Ok(json!({
        "path": path.shown,
        "entries": entries,
        "truncated": walked.truncated,
    }))
}
