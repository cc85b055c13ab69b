//! `read_file`: text with line slicing, and the sha256 of the whole file for stale checks.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::Result;
use crate::tool::builtin::files::{
    FileError, READ_ONLY, file_tool, read_existing, resolve, sha256_hex,
};
use crate::tool::{ToolContext, ToolDefinition};

/// Bytes of content returned when the call sets no `maxBytes`.
const DEFAULT_MAX_BYTES: usize = 50_000;

/// The largest `maxBytes` a call may set.
const MAX_MAX_BYTES: usize = 1_000_000;

const DESCRIPTION: &str = "Read a text file from the workspace. Use it before changing a file, \
and to look at source code, configuration, documentation or logs. `path` is relative to the \
working directory (or absolute inside the workspace). Returns `data.content` (the selected \
lines, verbatim) and `data.sha256`, the sha256 of the file's FULL bytes even when you read only \
a slice: pass it as `expectedSha256` to write_file or edit_file (or in `expectedSha256ByPath` \
to apply_patch) to prove you saw the current file. Select lines with `startLine` and `endLine` \
(1-based, inclusive). At most `maxBytes` bytes of content come back (default 50000); when that \
cuts the selection short, `data.truncated` is true and `data.endLine` is the last line returned, \
so read on with `startLine` = endLine + 1. `data.totalLines` and `data.totalBytes` describe the \
whole file. Binary files are refused.";

/// Input of `read_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ReadFileInput {
    /// Path of the file: relative to the working directory, or absolute inside the workspace.
    path: String,
    /// First line to return, counting from 1 (default 1).
    #[schemars(range(min = 1))]
    start_line: Option<usize>,
    /// Last line to return, inclusive (default: the last line of the file).
    #[schemars(range(min = 1))]
    end_line: Option<usize>,
    /// At most this many bytes of content (default 50000, at most 1000000).
    #[schemars(range(min = 1, max = 1_000_000))]
    max_bytes: Option<usize>,
}

pub(crate) fn read_file_tool() -> Result<ToolDefinition> {
    file_tool(
        "read_file",
        DESCRIPTION,
        READ_ONLY,
        |input: ReadFileInput, ctx: ToolContext| async move { read_file(&input, &ctx).await },
    )
}

async fn read_file(input: &ReadFileInput, ctx: &ToolContext) -> Result<Value, FileError> {
    let path = resolve(ctx, &input.path)?;
    let bytes = read_existing(ctx, &path).await?;
    let sha256 = sha256_hex(&bytes);
    let Ok(text) = std::str::from_utf8(&bytes) else {
        return Err(FileError::invalid_input(
            format!("{} is not UTF-8 text (probably a binary file)", path.shown),
            "read_file only reads text; use the bash tool (file, xxd, od) to inspect binary files.",
        ));
    };
    let max_bytes = input
        .max_bytes
        .unwrap_or(DEFAULT_MAX_BYTES)
        .clamp(1, MAX_MAX_BYTES);
    let slice = select_lines(text, input.start_line, input.end_line, max_bytes)?;
    Ok(json!({
        "path": path.shown,
        "content": slice.content,
        "sha256": sha256,
        "startLine": slice.start_line,
        "endLine": slice.end_line,
        "totalLines": slice.total_lines,
        "selectedLines": slice.selected_lines,
        "totalBytes": bytes.len(),
        "truncated": slice.truncated,
    }))
}

/// The lines of a file that a call selected.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Slice {
    pub(crate) content: String,
    pub(crate) start_line: usize,
    /// Last line returned (`start_line - 1` when none was).
    pub(crate) end_line: usize,
    pub(crate) total_lines: usize,
    pub(crate) selected_lines: usize,
    /// `max_bytes` cut the selection short.
    pub(crate) truncated: bool,
}

/// Lines `start..=end` (1-based) of `text`, whole lines only while they fit in `max_bytes`;
/// when even the first does not fit, the part of it that does.
pub(crate) fn select_lines(
    text: &str,
    start: Option<usize>,
    end: Option<usize>,
    max_bytes: usize,
) -> Result<Slice, FileError> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let total_lines = lines.len();
    let start_line = start.unwrap_or(1).max(1);
    let fix =
        "Pick startLine and endLine within the file (data.totalLines says how many lines it has).";
    if total_lines == 0 {
        if start_line > 1 {
            return Err(FileError::invalid_input(
                format!("startLine {start_line} is past the end of the file, which is empty"),
                fix,
            ));
        }
        return Ok(Slice {
            content: String::new(),
            start_line: 1,
            end_line: 0,
            total_lines: 0,
            selected_lines: 0,
            truncated: false,
        });
    }
    if start_line > total_lines {
        return Err(FileError::invalid_input(
            format!(
                "startLine {start_line} is past the end of the file, which has {total_lines} lines"
            ),
            fix,
        ));
    }
    let wanted_end = end.unwrap_or(total_lines).min(total_lines);
    if wanted_end < start_line {
        return Err(FileError::invalid_input(
            format!("endLine {wanted_end} is before startLine {start_line}"),
            fix,
        ));
    }
    let mut content = String::new();
    let mut end_line = start_line - 1;
    let mut truncated = false;
    for line in lines
        .iter()
        .skip(start_line - 1)
        .take(wanted_end + 1 - start_line)
    {
        if content.len() + line.len() > max_bytes {
            truncated = true;
            if content.is_empty() {
                // Not even one line fits: return the part of it that does.
                let mut cut = max_bytes;
                while !line.is_char_boundary(cut) {
                    cut -= 1;
                }
                content.push_str(&line[..cut]);
                end_line = start_line;
            }
            break;
        }
        content.push_str(line);
        end_line += 1;
    }
    Ok(Slice {
        content,
        start_line,
        end_line,
        total_lines,
        selected_lines: end_line + 1 - start_line,
        truncated,
    })
}
