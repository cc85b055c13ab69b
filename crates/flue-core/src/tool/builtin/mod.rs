//! Built-in tools: `read_file` and `bash`, both working through the session's sandbox.
//!
//! Each is a [`ToolDefinition`] with [`Ownership::Managed`]. Failures the model can act on
//! (a missing file, a path outside the workspace, bad arguments) are [`ToolError`]s with a
//! stable kind; output is plain text written for the model.

#[cfg(test)]
mod tests;

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::error::{FlueError, Result};
use crate::sandbox::{ExecOptions, ShellResult, normalize_path};
use crate::tool::{Ownership, Permission, ToolContext, ToolDefinition, ToolError, ToolMeta};

/// Names of the built-in tools, as accepted by [`builtin_tool`].
pub const BUILTIN_TOOL_NAMES: &[&str] = &["read_file", "bash"];

/// Lines `read_file` returns when the call sets no `limit`.
const DEFAULT_LINE_LIMIT: usize = 2000;

/// Time limit of a `bash` call that sets no `timeout_ms`.
const DEFAULT_TIMEOUT_MS: u64 = 120_000;

/// The largest `timeout_ms` a `bash` call may set.
const MAX_TIMEOUT_MS: u64 = 600_000;

/// Characters of `bash` output shown to the model; longer output keeps its tail.
const MAX_OUTPUT_CHARS: usize = 30_000;

const READ_FILE_DESCRIPTION: &str = "Read a text file from the workspace. Use it to look at \
source code, configuration, documentation or logs, for example before changing a file. `path` \
is relative to the working directory, or absolute inside the workspace. Returns the file's text \
as is. A long file comes in slices: at most `limit` lines (default 2000) starting at line \
`offset` (1-based, default 1), and a note at the end such as \"[lines 1-2000 of 5000; call \
again with offset=2001 to read more]\" says which lines you got. Binary files are refused; \
use the bash tool to inspect them, and to list directories.";

const BASH_DESCRIPTION: &str = "Run a shell command with bash in the working directory of the \
workspace. Use it to list and search files, inspect the system, build, test and run programs, \
and change files. Returns standard output, then standard error, then \"exit code: N\" when the \
command failed (exit code 124 means it hit its time limit). The time limit is `timeout_ms` \
milliseconds (default 120000, at most 600000). Long output keeps only its last 30000 \
characters, so filter it (grep, head, tail) when you need a specific part. Standard input is \
closed, so do not start interactive programs, and anything left running in the background is \
killed when the command ends.";

/// The built-in tool called `name`; an unknown name is a [`FlueError::InvalidConfig`].
///
/// ```
/// let bash = flue_core::builtin_tool("bash").unwrap();
/// assert_eq!(bash.name(), "bash");
/// assert!(flue_core::builtin_tool("teleport").is_err());
/// ```
pub fn builtin_tool(name: &str) -> Result<ToolDefinition> {
    match name {
        "read_file" => read_file_tool(),
        "bash" => bash_tool(),
        _ => Err(FlueError::config(format!(
            "unknown built-in tool {name:?} (known built-in tools: {})",
            BUILTIN_TOOL_NAMES.join(", ")
        ))),
    }
}

/// The built-in tools called `names`, in order; fails on the first unknown name.
pub fn builtin_tools(names: &[String]) -> Result<Vec<ToolDefinition>> {
    names.iter().map(|name| builtin_tool(name)).collect()
}

/// Input of `read_file`.
#[derive(Debug, Deserialize, JsonSchema)]
struct ReadFileInput {
    /// Path of the file: relative to the working directory, or absolute inside the workspace.
    path: String,
    /// Number of the first line to return, counting from 1 (default 1).
    #[schemars(range(min = 1))]
    offset: Option<usize>,
    /// Maximum number of lines to return (default 2000).
    #[schemars(range(min = 1))]
    limit: Option<usize>,
}

/// Input of `bash`.
#[derive(Debug, Deserialize, JsonSchema)]
struct BashInput {
    /// The command line, run with `bash -c` in the working directory.
    command: String,
    /// Time limit in milliseconds (default 120000, at most 600000).
    #[schemars(range(min = 1, max = 600_000))]
    timeout_ms: Option<u64>,
}

fn read_file_tool() -> Result<ToolDefinition> {
    let tool = ToolDefinition::from_fn(
        "read_file",
        READ_FILE_DESCRIPTION,
        |input: ReadFileInput, ctx: ToolContext| async move {
            read_file(&input, &ctx).await.map(Value::String)
        },
    )?;
    Ok(tool.with_meta(ToolMeta {
        ownership: Ownership::Managed,
        permission: Permission::AlwaysAllow,
        read_only: true,
        destructive: false,
    }))
}

fn bash_tool() -> Result<ToolDefinition> {
    let tool = ToolDefinition::from_fn(
        "bash",
        BASH_DESCRIPTION,
        |input: BashInput, ctx: ToolContext| async move {
            run_bash(&input, &ctx).await.map(Value::String)
        },
    )?;
    Ok(tool.with_meta(ToolMeta {
        ownership: Ownership::Managed,
        permission: Permission::AlwaysAllow,
        read_only: false,
        destructive: true,
    }))
}

async fn read_file(input: &ReadFileInput, ctx: &ToolContext) -> Result<String, ToolError> {
    let shown = &input.path;
    let path = normalize_path(&ctx.cwd, shown).map_err(|err| file_error(shown, &err))?;
    let bytes = ctx
        .sandbox
        .read_file_bytes(&path)
        .await
        .map_err(|err| file_error(shown, &err))?;
    let Ok(text) = String::from_utf8(bytes) else {
        return Err(ToolError::invalid_input(format!(
            "{shown} is not UTF-8 text (probably a binary file); read_file only reads text, \
             use bash to inspect it"
        )));
    };
    select_lines(
        &text,
        input.offset.unwrap_or(1).max(1),
        input.limit.unwrap_or(DEFAULT_LINE_LIMIT).max(1),
    )
}

/// Lines `first..first + limit` (1-based) of `text`, with a note when that is not all of it.
fn select_lines(text: &str, first: usize, limit: usize) -> Result<String, ToolError> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let n_lines = lines.len();
    if n_lines == 0 {
        return Ok("[empty file]".to_owned());
    }
    if first > n_lines {
        return Err(ToolError::invalid_input(format!(
            "offset {first} is past the end of the file, which has {n_lines} lines"
        )));
    }
    let last = (first - 1).saturating_add(limit).min(n_lines);
    let mut selected = lines[first - 1..last].concat();
    if first == 1 && last == n_lines {
        return Ok(selected);
    }
    let note = if last < n_lines {
        format!(
            "[lines {first}-{last} of {n_lines}; call again with offset={} to read more]",
            last + 1
        )
    } else {
        format!("[lines {first}-{last} of {n_lines}]")
    };
    push_line(&mut selected, &note);
    Ok(selected)
}

/// A file error in words for the model, naming the path as the model gave it.
fn file_error(shown: &str, err: &FlueError) -> ToolError {
    let kind = err.kind();
    let message = match kind {
        "outside_workspace" => format!("{shown} is outside the workspace; use a path inside it"),
        "not_found" => format!("{shown} does not exist"),
        "is_directory" => format!("{shown} is a directory; use bash (ls) to list it"),
        _ => err.to_string(),
    };
    ToolError::new(kind, message)
}

async fn run_bash(input: &BashInput, ctx: &ToolContext) -> Result<String, ToolError> {
    if input.command.trim().is_empty() {
        return Err(ToolError::invalid_input("command is empty"));
    }
    let timeout_ms = input
        .timeout_ms
        .unwrap_or(DEFAULT_TIMEOUT_MS)
        .clamp(1, MAX_TIMEOUT_MS);
    let options = ExecOptions::new()
        .with_cwd(ctx.cwd.clone())
        .with_timeout(Duration::from_millis(timeout_ms))
        .with_cancel(ctx.cancel.clone());
    let result = ctx.sandbox.exec(&input.command, options).await?;
    Ok(keep_tail(render_shell_result(&result), MAX_OUTPUT_CHARS))
}

/// Stdout, then stderr, then the exit code when it is not 0.
fn render_shell_result(result: &ShellResult) -> String {
    let mut text = result.stdout.clone();
    if !result.stderr.is_empty() {
        push_line(&mut text, &result.stderr);
    }
    if result.exit_code != 0 {
        push_line(&mut text, &format!("exit code: {}", result.exit_code));
    }
    if text.is_empty() {
        text.push_str("[no output]");
    }
    text
}

/// The last `max_chars` characters of `text`, after a note, when it is longer.
fn keep_tail(text: String, max_chars: usize) -> String {
    let n_chars = text.chars().count();
    if n_chars <= max_chars {
        return text;
    }
    let start = text
        .char_indices()
        .nth(n_chars - max_chars)
        .map_or(text.len(), |(idx, _)| idx);
    format!(
        "[output truncated: showing the last {max_chars} of {n_chars} characters]\n{}",
        &text[start..]
    )
}

/// Appends `line` on a line of its own.
fn push_line(text: &mut String, line: &str) {
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(line);
}
