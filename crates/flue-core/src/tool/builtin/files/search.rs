//! `search_files`: literal text, regex or glob search across the files below a directory.

use globset::GlobMatcher;
use regex::{Regex, RegexBuilder};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::Result;
use crate::tool::builtin::files::glob::compile_glob;
use crate::tool::builtin::files::walk::{EntryKind, Keep, WalkEntry, WalkOptions, walk};
use crate::tool::builtin::files::{FileError, READ_ONLY, file_tool, resolve};
use crate::tool::{ToolContext, ToolDefinition};

/// Matches returned when the call sets no `maxResults`.
const DEFAULT_MAX_RESULTS: usize = 100;

/// The largest `maxResults` a call may set.
const MAX_MAX_RESULTS: usize = 1000;

/// Files larger than this are not searched.
const MAX_SEARCHED_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// Characters of a matching line shown in a result.
const MAX_LINE_CHARS: usize = 300;

/// The largest compiled regex, in bytes.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

const DESCRIPTION: &str = "Search the files below a directory. Use it to find where something \
is defined or used before reading the files that matter. `mode` is `text` (default: `pattern` \
is literal text), `regex` (`pattern` is a regular expression, Rust regex syntax) or `glob` \
(`pattern` matches file paths, like the glob tool, and results carry only paths). Text and \
regex searches return `data.matches`, each with `path`, `line` (1-based) and the line's `text`; \
they match line by line and skip binary files and files over 4 MiB. `include` restricts the \
search to files matching a glob (a pattern without `/`, such as `*.rs`, matches file names at \
any depth). `caseSensitive` defaults to true. `.git` and whatever .gitignore/.ignore files \
exclude are skipped unless `includeIgnored` is true. At most `maxResults` matches (default 100); \
`data.truncated` says when there were more, so narrow the pattern, `path` or `include`.";

/// How `pattern` is read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum SearchMode {
    /// Literal text.
    #[default]
    Text,
    /// A regular expression.
    Regex,
    /// A glob over file paths.
    Glob,
}

/// Input of `search_files`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct SearchFilesInput {
    /// What to look for: text, a regular expression or a glob, per `mode`.
    pattern: String,
    /// `text` (default), `regex` or `glob`.
    #[serde(default)]
    mode: SearchMode,
    /// Directory to search (default: the working directory).
    path: Option<String>,
    /// Only search files matching this glob (e.g. `*.rs`, `src/**/*.ts`).
    include: Option<String>,
    /// Match case exactly (default true); text and regex modes.
    case_sensitive: Option<bool>,
    /// Also search what ignore files exclude (default false).
    #[serde(default)]
    include_ignored: bool,
    /// At most this many matches (default 100, at most 1000).
    #[schemars(range(min = 1, max = 1000))]
    max_results: Option<usize>,
}

pub(crate) fn search_files_tool() -> Result<ToolDefinition> {
    file_tool(
        "search_files",
        DESCRIPTION,
        READ_ONLY,
        |input: SearchFilesInput, ctx: ToolContext| async move { search_files(&input, &ctx).await },
    )
}

async fn search_files(input: &SearchFilesInput, ctx: &ToolContext) -> Result<Value, FileError> {
    if input.pattern.is_empty() {
        return Err(FileError::invalid_input(
            "the search pattern is empty",
            "Pass the text, regular expression or glob to look for.",
        ));
    }
    let path = resolve(ctx, input.path.as_deref().unwrap_or("."))?;
    let max_results = input
        .max_results
        .unwrap_or(DEFAULT_MAX_RESULTS)
        .clamp(1, MAX_MAX_RESULTS);
    let include = input.include.as_deref().map(PathFilter::new).transpose()?;
    let options = WalkOptions {
        recursive: true,
        respect_ignore: !input.include_ignored,
    };
    let wanted = |entry: &WalkEntry| {
        entry.kind == EntryKind::File
            && include
                .as_ref()
                .is_none_or(|filter| filter.matches(&entry.rel))
    };

    if input.mode == SearchMode::Glob {
        let filter = PathFilter::new(&input.pattern)?;
        let mut n_kept = 0usize;
        let walked = walk(ctx, &path, options, |entry| {
            if !wanted(entry) || !filter.matches(&entry.rel) {
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
            .map(|entry| json!({"path": entry.rel}))
            .collect();
        return Ok(json!({
            "matches": matches,
            "truncated": walked.truncated,
            "filesSearched": walked.entries.len(),
        }));
    }

    let regex = build_regex(input)?;
    let walked = walk(ctx, &path, options, |entry| {
        if wanted(entry) { Keep::Yes } else { Keep::No }
    })
    .await?;
    let mut matches = Vec::new();
    let mut truncated = walked.truncated;
    let mut files_searched = 0usize;
    'files: for entry in &walked.entries {
        if entry
            .size
            .is_some_and(|size| size > MAX_SEARCHED_FILE_BYTES)
        {
            continue;
        }
        let Ok(bytes) = ctx.sandbox.read_file_bytes(&entry.abs).await else {
            continue;
        };
        let Some(text) = as_text(&bytes) else {
            continue;
        };
        files_searched += 1;
        for (line_idx, line) in text.lines().enumerate() {
            if !regex.is_match(line) {
                continue;
            }
            if matches.len() == max_results {
                truncated = true;
                break 'files;
            }
            matches.push(json!({
                "path": entry.rel,
                "line": line_idx + 1,
                "text": cut_chars(line, MAX_LINE_CHARS),
            }));
        }
    }
    Ok(json!({
        "matches": matches,
        "truncated": truncated,
        "filesSearched": files_searched,
    }))
}

/// The regex of a text or regex search; a bad one is `invalid_input`.
fn build_regex(input: &SearchFilesInput) -> Result<Regex, FileError> {
    let source = match input.mode {
        SearchMode::Regex => input.pattern.clone(),
        SearchMode::Text | SearchMode::Glob => regex::escape(&input.pattern),
    };
    RegexBuilder::new(&source)
        .case_insensitive(!input.case_sensitive.unwrap_or(true))
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|err| {
            FileError::invalid_input(
                format!("invalid regular expression {:?}: {err}", input.pattern),
                "Fix the regular expression (Rust regex syntax), or search for literal text with mode \"text\".",
            )
        })
}

/// The UTF-8 text of a file, or `None` for binary content.
fn as_text(bytes: &[u8]) -> Option<&str> {
    let head = &bytes[..bytes.len().min(8192)];
    if head.contains(&0) {
        return None;
    }
    std::str::from_utf8(bytes).ok()
}

/// The first `max_chars` characters of `line`, with `…` when cut.
fn cut_chars(line: &str, max_chars: usize) -> String {
    match line.char_indices().nth(max_chars) {
        None => line.to_owned(),
        Some((idx, _)) => format!("{}…", &line[..idx]),
    }
}

/// A glob over relative paths; without a `/` it matches the file name at any depth.
struct PathFilter {
    matcher: GlobMatcher,
    name_only: bool,
}

impl PathFilter {
    fn new(pattern: &str) -> Result<Self, FileError> {
        Ok(Self {
            matcher: compile_glob(pattern)?,
            name_only: !pattern.contains('/'),
        })
    }

    fn matches(&self, rel: &str) -> bool {
        if self.name_only {
            let name = rel.rsplit('/').next().unwrap_or(rel);
            self.matcher.is_match(name)
        } else {
            self.matcher.is_match(rel)
        }
    }
}
