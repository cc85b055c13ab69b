//! Built-in tools: the file tools (`files/`, `patch/`) and `bash`, all working through the
//! session's sandbox.
//!
//! Each is a [`ToolDefinition`] with [`Ownership::Managed`]. Failures the model can act on
//! (a missing file, a path outside the workspace, bad arguments) are [`ToolError`]s with a
//! stable kind. The file tools answer `{ok, data}` JSON and keep an audit log and a trash in
//! the runtime's store (see `files/mod.rs`); `bash` answers plain text.

mod files;
mod patch;
mod state;

#[cfg(test)]
mod tests;

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::error::{FlueError, Result};
use crate::sandbox::{ExecOptions, ShellResult};
use crate::tool::{
    Effects, InterruptBehavior, Ownership, Permission, ToolContext, ToolDefinition, ToolError,
    ToolMeta,
};

/// Names of the built-in tools, as accepted by [`builtin_tool`].
pub const BUILTIN_TOOL_NAMES: &[&str] = &[
    "read_file",
    "list_directory",
    "search_files",
    "glob",
    "create_file",
    "write_file",
    "edit_file",
    "delete_file",
    "restore_file",
    "move_file",
    "apply_patch",
    "bash",
];

pub use state::STATE_TOOL_NAMES;

/// The file tools that only read: a safe default for agents that should not change anything.
pub const READ_ONLY_TOOL_NAMES: &[&str] = &["read_file", "list_directory", "search_files", "glob"];

/// Time limit of a `bash` call that sets no `timeout_ms`.
const DEFAULT_TIMEOUT_MS: u64 = 120_000;

/// The largest `timeout_ms` a `bash` call may set.
const MAX_TIMEOUT_MS: u64 = 600_000;

/// Characters of `bash` output shown to the model; longer output keeps its tail.
const MAX_OUTPUT_CHARS: usize = 30_000;

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
/// let bash = flue_core::tool::builtin_tool("bash").unwrap();
/// assert_eq!(bash.name(), "bash");
/// assert!(flue_core::tool::builtin_tool("teleport").is_err());
/// ```
pub fn builtin_tool(name: &str) -> Result<ToolDefinition> {
    match name {
        "read_file" => files::read_file_tool(),
        "list_directory" => files::list_directory_tool(),
        "search_files" => files::search_files_tool(),
        "glob" => files::glob_tool(),
        "create_file" => files::create_file_tool(),
        "write_file" => files::write_file_tool(),
        "edit_file" => files::edit_file_tool(),
        "delete_file" => files::delete_file_tool(),
        "restore_file" => files::restore_file_tool(),
        "move_file" => files::move_file_tool(),
        "apply_patch" => patch::apply_patch_tool(),
        "bash" => bash_tool(),
        "state_read" => state::state_read_tool(),
        "state_write" => state::state_write_tool(),
        _ => Err(FlueError::config(format!(
            "unknown built-in tool {name:?} (known built-in tools: {}, and the state tools {})",
            BUILTIN_TOOL_NAMES.join(", "),
            STATE_TOOL_NAMES.join(", ")
        ))),
    }
}

/// The built-in tools called `names`, in order; fails on the first unknown name.
pub fn builtin_tools(names: &[String]) -> Result<Vec<ToolDefinition>> {
    names.iter().map(|name| builtin_tool(name)).collect()
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
        effects: Effects::SHELL.with(Effects::FILES),
        interrupt: InterruptBehavior::Cancel,
        replay_safe: false,
    }))
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
