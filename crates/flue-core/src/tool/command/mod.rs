//! Command tools: tools declared without Rust, as a shell command run in the session's sandbox.
//!
//! An agent file's `tools:` list may declare one with a name, a description, a JSON Schema for
//! its input and a command. The runtime validates the model's input against the schema like
//! any tool's, then runs the command with the input passed as data, never as shell text: the
//! whole input as JSON on standard input (and in `FLUE_TOOL_INPUT`), and each top-level
//! property the schema declares as an environment variable of the same name (strings as they
//! are, anything else as JSON). The command is the agent author's, so it is trusted shell; the
//! input is the model's, so it only ever reaches the command as the value of a variable. The
//! result is `{"exit_code", "stdout", "stderr"}`, each stream cut to the output limit; a
//! command that hits its time limit is killed and exits with `TIMEOUT_EXIT_CODE` (124).

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::error::{FlueError, Result};
use crate::sandbox::ExecOptions;
use crate::tool::{
    Effects, InterruptBehavior, Ownership, Permission, Tool, ToolContext, ToolDefinition,
    ToolError, ToolMeta,
};
use crate::util::BoxFuture;

/// Time limit of a command tool that sets none.
pub const DEFAULT_COMMAND_TIMEOUT_MS: u64 = 60_000;

/// The largest time limit a command tool may set (10 minutes).
pub const MAX_COMMAND_TIMEOUT_MS: u64 = 600_000;

/// Characters of each output stream kept when a command tool sets no limit.
pub const DEFAULT_COMMAND_OUTPUT_CHARS: usize = 30_000;

/// The environment variable holding the whole input as JSON.
pub const COMMAND_INPUT_VAR: &str = "FLUE_TOOL_INPUT";

/// The environment variable holding the call's idempotency key (the same on every attempt).
pub const COMMAND_KEY_VAR: &str = "FLUE_IDEMPOTENCY_KEY";

/// The environment variable holding the call's attempt (1, or more when run again after a
/// crash).
pub const COMMAND_ATTEMPT_VAR: &str = "FLUE_TOOL_ATTEMPT";

/// The environment variable holding the conversation's state as JSON (`state: read` or
/// `write`).
pub const COMMAND_STATE_VAR: &str = "FLUE_STATE";

/// The environment variable naming the file a `state: write` command may rewrite with the new
/// state (a JSON object); it holds the current state when the command starts.
pub const COMMAND_STATE_FILE_VAR: &str = "FLUE_STATE_FILE";

/// What a command tool may do with the conversation's state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CommandState {
    /// Nothing (the default).
    #[default]
    None,
    /// Read it: `FLUE_STATE` holds it as JSON.
    Read,
    /// Read it and write it back: `FLUE_STATE` holds it, and the file `FLUE_STATE_FILE`
    /// names holds it too; what that file holds when the command exits with 0 is the new state.
    Write,
}

/// Variables an input property may not be named after: they change how the shell, the
/// dynamic loader or the command lookup behave. Prefixes end with `_`.
const FORBIDDEN_VARIABLES: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "PWD",
    "OLDPWD",
    "IFS",
    "ENV",
    "CDPATH",
    "GLOBIGNORE",
    "SHELLOPTS",
    "BASHOPTS",
    "PS4",
    "PROMPT_COMMAND",
    "TMPDIR",
    "TERM",
    "LANG",
    "LC_",
    "LD_",
    "DYLD_",
    "BASH_",
    "FLUE_",
];

/// A command tool as declared: what [`CommandToolSpec::to_tool`] turns into a
/// [`ToolDefinition`].
///
/// ```
/// use flue_core::tool::CommandToolSpec;
/// let spec = CommandToolSpec::new(
///     "count_lines",
///     "Count the lines of a file",
///     serde_json::json!({"type": "object", "properties": {"path": {"type": "string"}}}),
///     r#"wc -l -- "$path""#,
/// )
/// .with_timeout_ms(10_000);
/// let tool = spec.to_tool().unwrap();
/// assert_eq!(tool.name(), "count_lines");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandToolSpec {
    /// The tool name the model calls.
    pub name: String,
    /// What the tool does, shown to the model.
    pub description: String,
    /// JSON Schema of the input object.
    pub input_schema: Value,
    /// The command line, run with bash in the session's working directory.
    pub command: String,
    /// Time limit in milliseconds ([`DEFAULT_COMMAND_TIMEOUT_MS`] when unset).
    pub timeout_ms: Option<u64>,
    /// Characters kept of stdout and of stderr ([`DEFAULT_COMMAND_OUTPUT_CHARS`] when unset);
    /// longer output keeps its tail.
    pub max_output_chars: Option<usize>,
    /// Whether a call cut off by a crash runs again on recovery, with the same
    /// `FLUE_IDEMPOTENCY_KEY` (the command does its effect once per key).
    pub replay_safe: bool,
    /// What the command may do with the conversation's state.
    pub state: CommandState,
}

impl CommandToolSpec {
    /// A command tool with the default time and output limits.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
        command: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            input_schema,
            command: command.into(),
            timeout_ms: None,
            max_output_chars: None,
            replay_safe: false,
            state: CommandState::None,
        }
    }

    /// Declares the tool replay-safe (see [`CommandToolSpec::replay_safe`]).
    #[must_use]
    pub fn with_replay_safe(mut self, replay_safe: bool) -> Self {
        self.replay_safe = replay_safe;
        self
    }

    /// Sets what the command may do with the conversation's state.
    #[must_use]
    pub fn with_state(mut self, state: CommandState) -> Self {
        self.state = state;
        self
    }

    /// Sets the time limit.
    #[must_use]
    pub fn with_timeout_ms(mut self, timeout_ms: u64) -> Self {
        self.timeout_ms = Some(timeout_ms);
        self
    }

    /// Sets the output limit.
    #[must_use]
    pub fn with_max_output_chars(mut self, max_output_chars: usize) -> Self {
        self.max_output_chars = Some(max_output_chars);
        self
    }

    /// Every problem with the declaration, each a sentence naming the field: an empty command
    /// or description, a time limit out of range, an output limit of 0, a property whose name
    /// cannot be an environment variable. The tool name and schema are checked by
    /// [`ToolDefinition::new`].
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.description.trim().is_empty() {
            problems.push("`description` is empty: say what the tool does".to_owned());
        }
        if self.command.trim().is_empty() {
            problems.push("`command` is empty: give the command line to run".to_owned());
        }
        if let Some(timeout_ms) = self.timeout_ms
            && !(1..=MAX_COMMAND_TIMEOUT_MS).contains(&timeout_ms)
        {
            problems.push(format!(
                "`timeout_ms` must be between 1 and {MAX_COMMAND_TIMEOUT_MS}, got {timeout_ms}"
            ));
        }
        if self.max_output_chars == Some(0) {
            problems.push("`max_output_chars` must be at least 1".to_owned());
        }
        for name in property_names(&self.input_schema) {
            if let Err(reason) = check_variable_name(name) {
                problems.push(format!("input property `{name}` {reason}"));
            }
        }
        problems
    }

    /// The tool. Fails with [`FlueError::InvalidTool`] naming every problem of
    /// [`CommandToolSpec::problems`], or a bad name or schema.
    pub fn to_tool(&self) -> Result<ToolDefinition> {
        let problems = self.problems();
        if !problems.is_empty() {
            return Err(FlueError::InvalidTool {
                name: self.name.clone(),
                message: problems.join("; "),
            });
        }
        let tool = CommandTool {
            command: self.command.clone(),
            variables: property_names(&self.input_schema)
                .map(str::to_owned)
                .collect(),
            timeout: Duration::from_millis(self.timeout_ms.unwrap_or(DEFAULT_COMMAND_TIMEOUT_MS)),
            max_output_chars: self
                .max_output_chars
                .unwrap_or(DEFAULT_COMMAND_OUTPUT_CHARS),
            state: self.state,
        };
        let definition = ToolDefinition::new(
            &self.name,
            &self.description,
            self.input_schema.clone(),
            Arc::new(tool),
        )?;
        Ok(definition
            .with_meta(ToolMeta {
                ownership: Ownership::Custom,
                permission: Permission::AlwaysAllow,
                read_only: false,
                destructive: true,
                effects: Effects::SHELL.with(Effects::FILES),
                interrupt: InterruptBehavior::Cancel,
                replay_safe: self.replay_safe,
            })
            .with_origin(super::ToolOrigin::Command))
    }
}

/// Whether `name` may be an input property of a command tool: a shell variable name
/// (`[A-Za-z_][A-Za-z0-9_]*`) that is not one of the variables the shell or the loader reads.
pub fn check_variable_name(name: &str) -> std::result::Result<(), String> {
    let mut chars = name.chars();
    let starts_well = chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_');
    if !starts_well || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(
            "cannot be an environment variable: use letters, digits and `_`, not starting with \
             a digit"
                .to_owned(),
        );
    }
    let forbidden = FORBIDDEN_VARIABLES.iter().any(|variable| {
        if variable.ends_with('_') {
            name.starts_with(variable)
        } else {
            name == *variable
        }
    });
    if forbidden {
        return Err(
            "would replace a variable the shell relies on: rename it (lowercase names are safe)"
                .to_owned(),
        );
    }
    Ok(())
}

/// Runs the command of one command tool.
struct CommandTool {
    command: String,
    /// The schema's top-level properties, passed as environment variables.
    variables: Vec<String>,
    timeout: Duration,
    max_output_chars: usize,
    state: CommandState,
}

impl Tool for CommandTool {
    fn run<'a>(
        &'a self,
        input: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, std::result::Result<Value, ToolError>> {
        Box::pin(async move {
            let json = input.to_string();
            let mut options = ExecOptions::new()
                .with_cwd(ctx.cwd.clone())
                .with_timeout(self.timeout)
                .with_cancel(ctx.cancel.clone())
                .with_env(COMMAND_INPUT_VAR, json);
            let empty = Map::new();
            let fields = input.as_object().unwrap_or(&empty);
            for name in &self.variables {
                let Some(value) = fields.get(name) else {
                    continue;
                };
                let text = match value {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                };
                if text.contains('\0') {
                    return Err(ToolError::invalid_input(format!(
                        "`{name}` contains a NUL character, which a command cannot receive"
                    )));
                }
                options = options.with_env(name.clone(), text);
            }
            // The input reaches standard input from the variable, so the model's text is
            // never part of the command line.
            let line = format!(
                "printf '%s' \"${COMMAND_INPUT_VAR}\" | (\n{}\n)",
                self.command
            );
            if !ctx.idempotency_key.is_empty() {
                options = options
                    .with_env(COMMAND_KEY_VAR, ctx.idempotency_key.clone())
                    .with_env(COMMAND_ATTEMPT_VAR, ctx.attempt.to_string());
            }
            let state = match self.state {
                CommandState::None => None,
                CommandState::Read | CommandState::Write => ctx.state(),
            };
            if let Some(state) = state {
                options = options.with_env(COMMAND_STATE_VAR, state.get().to_string());
            }
            let state_file = match (self.state, state) {
                (CommandState::Write, Some(state)) => {
                    let path = state_file_path(&ctx.cwd, &ctx.idempotency_key, &ctx.call_id);
                    ctx.sandbox
                        .write_file(&path, state.get().to_string().as_bytes())
                        .await?;
                    options = options.with_env(COMMAND_STATE_FILE_VAR, path.clone());
                    Some((path, state))
                }
                _ => None,
            };
            let result = ctx.sandbox.exec(&line, options).await;
            if let Some((path, state)) = state_file {
                let written = ctx.sandbox.read_file(&path).await;
                let remove = crate::sandbox::RmOptions {
                    recursive: false,
                    force: true,
                };
                let _ = ctx.sandbox.rm(&path, remove).await;
                if let Ok(done) = &result
                    && done.exit_code == 0
                {
                    let text = written.map_err(|err| {
                        ToolError::new(
                            "invalid_state",
                            format!(
                                "the command removed its state file ({COMMAND_STATE_FILE_VAR}): {err}; leave it in place, rewritten with the new state"
                            ),
                        )
                    })?;
                    let value: Value = serde_json::from_str(&text).map_err(|err| {
                        ToolError::new(
                            "invalid_state",
                            format!(
                                "the state file ({COMMAND_STATE_FILE_VAR}) does not hold JSON: {err}; write a JSON object to it"
                            ),
                        )
                    })?;
                    state.set(value)?;
                }
            }
            let result = result?;
            Ok(json!({
                "exit_code": result.exit_code,
                "stdout": keep_tail(&result.stdout, self.max_output_chars),
                "stderr": keep_tail(&result.stderr, self.max_output_chars),
            }))
        })
    }
}

/// Where a `state: write` command finds and leaves the state: a file of the call's own in
/// the working directory, removed after the call.
fn state_file_path(cwd: &str, key: &str, call_id: &str) -> String {
    let name = if key.is_empty() { call_id } else { key };
    let name: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("{}/.flue-state-{name}.json", cwd.trim_end_matches('/'))
}

/// The names of the schema's top-level properties.
fn property_names(schema: &Value) -> impl Iterator<Item = &str> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|properties| properties.keys().map(String::as_str))
}

/// The last `max_chars` characters of `text`, after a note, when it is longer.
fn keep_tail(text: &str, max_chars: usize) -> String {
    let n_chars = text.chars().count();
    if n_chars <= max_chars {
        return text.to_owned();
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
