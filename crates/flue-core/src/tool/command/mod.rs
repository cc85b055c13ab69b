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
/// use flue_core::CommandToolSpec;
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
        }
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
        };
        let definition = ToolDefinition::new(
            &self.name,
            &self.description,
            self.input_schema.clone(),
            Arc::new(tool),
        )?;
        Ok(definition.with_meta(ToolMeta {
            ownership: Ownership::Custom,
            permission: Permission::AlwaysAllow,
            read_only: false,
            destructive: true,
            effects: Effects::SHELL.with(Effects::FILES),
            interrupt: InterruptBehavior::Cancel,
            replay_safe: false,
        }))
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
            let result = ctx.sandbox.exec(&line, options).await?;
            Ok(json!({
                "exit_code": result.exit_code,
                "stdout": keep_tail(&result.stdout, self.max_output_chars),
                "stderr": keep_tail(&result.stderr, self.max_output_chars),
            }))
        })
    }
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
