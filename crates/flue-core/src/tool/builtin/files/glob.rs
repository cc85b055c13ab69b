//! `glob`: files and folders whose paths match a glob pattern.

use globset::{GlobBuilder, GlobMatcher};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::Result;
use crate::tool::builtin::files::walk::{Keep, WalkOptions, walk};
use crate::tool::builtin::files::{FileError, READ_ONLY, file_tool, resolve};
use crate::tool::{ToolContext, ToolDefinition};

/// Matches returned when the call sets no `maxResults`.
const DEFAULT_MAX_RESULTS: usize = 500;

/// The largest `maxResults` a call may set.
const MAX_MAX_RESULTS: usize = 5000;

const DESCRIPTION: &str = "Find files and folders whose paths match a glob pattern, such as \
`**/*.rs`, `src/**/test_*.py` or `docs/*.md`. Use it to locate files by name before reading \
them. Paths are matched relative to `path` (default: the working directory): `*` and `?` stay \
within one path segment, `**` crosses any number of them, `{a,b}` and `[abc]` work as usual. \
Returns `data.matches` with each match's `path` and `type` (file, directory or symlink), in \
sorted depth-first order. Skips `.git` and whatever .gitignore/.ignore files exclude unless \
`includeIgnored` is true. At most `maxResults` matches (default 500); `data.truncated` says \
when there were more. To search inside files, use search_files.";

/// Input of `glob`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct GlobInput {
    /// The glob pattern, relative to `path`.
    pattern: String,
    /// Directory to search from (default: the working directory).
    path: Option<String>,
    /// Also match files and folders that ignore files exclude (default false).
    #[serde(default)]
    include_ignored: bool,
    /// At most this many matches (default 500, at most 5000).
    #[schemars(range(min = 1, max = 5000))]
    max_results: Option<usize>,
}

pub(crate) fn glob_tool() -> Result<ToolDefinition> {
    file_tool(
        "glob",
        DESCRIPTION,
        READ_ONLY,
        |input: GlobInput, ctx: ToolContext| async move { glob(&input, &ctx).await },
    )
}

async fn glob(input: &GlobInput, ctx: &ToolContext) -> Result<Value, FileError> {
    let matcher = compile_glob(&input.pattern)?;
    let path = resolve(ctx, input.path.as_deref().unwrap_or("."))?;
    let max_results = input
        .max_results
        .unwrap_or(DEFAULT_MAX_RESULTS)
        .clamp(1, MAX_MAX_RESULTS);
    let options = WalkOptions {
        recursive: true,
        respect_ignore: !input.include_ignored,
    };
    let mut n_kept = 0usize;
    let walked = walk(ctx, &path, options, |entry| {
        if !matcher.is_match(&entry.rel) {
            return Keep::No;
        }
        if n_kept == max_results {
            return Keep::Stop;
        }
        n_kept += 1;
        Keep::Yes
    })
    .await?;
    let matches: Vec<Value> = walked
        .entries
        .iter()
        .map(|entry| json!({"path": entry.rel, "type": entry.kind.as_str()}))
        .collect();
    Ok(json!({"matches": matches, "truncated": walked.truncated}))
}

/// A glob with path semantics (`*` stays within a segment); a bad one is `invalid_input`.
pub(crate) fn compile_glob(pattern: &str) -> Result<GlobMatcher, FileError> {
    let trimmed = pattern.trim().trim_start_matches("./");
    if trimmed.is_empty() {
        return Err(FileError::invalid_input(
            "the glob pattern is empty",
            "Pass a pattern such as **/*.rs.",
        ));
    }
    GlobBuilder::new(trimmed)
        .literal_separator(true)
        .build()
        .map(|glob| glob.compile_matcher())
        .map_err(|err| {
            FileError::invalid_input(
                format!("invalid glob pattern {pattern:?}: {err}"),
                "Fix the pattern: `*` matches within a path segment, `**` across segments, \
                 `{a,b}` alternatives, `[abc]` classes.",
            )
        })
}
