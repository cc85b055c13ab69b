//! An agent file's `tools:` list: built-in tool names and command tools declared inline.
//!
//! A string entry names a built-in tool; a mapping declares a command tool (`name`,
//! `description`, `input` as JSON Schema written in YAML, `command`, `timeout_ms`,
//! `max_output_chars`, `replay_safe`, `state`), which flue-core runs in the agent's sandbox
//! ([`flue_core::CommandToolSpec`]). Every entry is checked here, each problem at its own line:
//! names follow the rules of every tool, and a command tool may not take the name of a
//! built-in tool, of a framework tool (`task`, `load_skill`, `finish`, `give_up`), of another
//! entry, or the `mcp__` prefix of MCP tools.

use flue_core::CommandToolSpec;
use gray_matter::Pod;
use serde_json::{Map, Number, Value};

use crate::fields::{self, Report};
use crate::frontmatter::describe;

/// The keys of a command tool entry.
const COMMAND_TOOL_KEYS: &[&str] = &[
    "name",
    "description",
    "input",
    "command",
    "timeout_ms",
    "max_output_chars",
    "replay_safe",
    "state",
];

/// Names the runtime gives its own tools.
const FRAMEWORK_TOOLS: &[&str] = &[
    flue_core::TASK_TOOL,
    flue_core::LOAD_SKILL_TOOL,
    flue_core::FINISH_TOOL,
    flue_core::GIVE_UP_TOOL,
];

/// The built-in tool names and the command tools of a `tools:` value, in order. Problems are
/// reported and the entry left out.
pub(crate) fn parse(value: &Pod, report: &mut Report<'_>) -> (Vec<String>, Vec<CommandToolSpec>) {
    let mut builtins = Vec::new();
    let mut commands: Vec<CommandToolSpec> = Vec::new();
    let Pod::Array(items) = value else {
        report.error(
            &["tools"],
            format!(
                "`tools` must be a list of built-in tool names and command tools, got {}",
                describe(value)
            ),
        );
        return (builtins, commands);
    };
    let mut seen: Vec<String> = Vec::new();
    for (item_idx, item) in items.iter().enumerate() {
        match item {
            Pod::String(name) => {
                if let Err(message) = builtin(name) {
                    report.error_at_item("tools", item_idx, None, message);
                } else if seen.contains(name) {
                    report.error_at_item(
                        "tools",
                        item_idx,
                        None,
                        format!("`tools` lists `{name}` twice: remove one"),
                    );
                } else {
                    seen.push(name.clone());
                    builtins.push(name.clone());
                }
            }
            Pod::Hash(_) => {
                let Some(spec) = command_tool(item, item_idx, report) else {
                    continue;
                };
                if seen.contains(&spec.name) {
                    report.error_at_item(
                        "tools",
                        item_idx,
                        Some("name"),
                        format!("`tools` has two tools named `{}`: rename one", spec.name),
                    );
                    continue;
                }
                seen.push(spec.name.clone());
                commands.push(spec);
            }
            other => report.error_at_item(
                "tools",
                item_idx,
                None,
                format!(
                    "a `tools` entry must be a built-in tool name or a command tool mapping \
                     (name, description, input, command), got {}",
                    describe(other)
                ),
            ),
        }
    }
    (builtins, commands)
}

/// Checks a built-in tool name.
fn builtin(name: &str) -> Result<(), String> {
    if flue_core::BUILTIN_TOOL_NAMES.contains(&name) || flue_core::STATE_TOOL_NAMES.contains(&name)
    {
        return Ok(());
    }
    let suggestion =
        crate::suggest::did_you_mean(name, flue_core::BUILTIN_TOOL_NAMES.iter().copied());
    Err(format!(
        "unknown built-in tool `{name}`{suggestion}; known tools: {}; or declare a command tool \
         as a mapping with name, description, input and command",
        flue_core::BUILTIN_TOOL_NAMES.join(", ")
    ))
}

/// One command tool entry, or `None` after reporting its problems.
fn command_tool(item: &Pod, item_idx: usize, report: &mut Report<'_>) -> Option<CommandToolSpec> {
    let entries = fields::mapping("tools entry", item, "a mapping").ok()?;
    let mut spec = CommandToolSpec::new("", "", Value::Null, "");
    let mut valid = true;
    let (mut has_name, mut has_description, mut has_command) = (false, false, false);
    for (key, value) in entries {
        let dotted = format!("tools.{key}");
        let result: Result<(), String> = match key.as_str() {
            "name" => fields::string(&dotted, value).map(|name| {
                has_name = true;
                spec.name = name;
            }),
            "description" => fields::string(&dotted, value).map(|text| {
                has_description = true;
                spec.description = text;
            }),
            "command" => fields::string(&dotted, value).map(|command| {
                has_command = true;
                spec.command = command;
            }),
            "input" => schema(value).map(|schema| spec.input_schema = schema),
            "timeout_ms" => fields::u64_at_least(&dotted, value, 1).map(|timeout| {
                spec.timeout_ms = Some(timeout);
            }),
            "max_output_chars" => fields::u64_at_least(&dotted, value, 1)
                .and_then(|chars| usize::try_from(chars).map_err(|err| err.to_string()))
                .map(|chars| spec.max_output_chars = Some(chars)),
            "replay_safe" => {
                fields::boolean(&dotted, value).map(|replay_safe| spec.replay_safe = replay_safe)
            }
            "state" => fields::string(&dotted, value).and_then(|text| {
                spec.state = match text.as_str() {
                    "none" => flue_core::CommandState::None,
                    "read" => flue_core::CommandState::Read,
                    "write" => flue_core::CommandState::Write,
                    other => {
                        return Err(format!(
                            "`{dotted}` must be `none`, `read` or `write`, got `{other}`"
                        ));
                    }
                };
                Ok(())
            }),
            _ => {
                let suggestion =
                    crate::suggest::did_you_mean(key, COMMAND_TOOL_KEYS.iter().copied());
                Err(format!(
                    "unknown key `{key}` in a command tool{}",
                    if suggestion.is_empty() {
                        format!(" (known keys: {})", COMMAND_TOOL_KEYS.join(", "))
                    } else {
                        suggestion
                    }
                ))
            }
        };
        if let Err(message) = result {
            report.error_at_item("tools", item_idx, Some(key), message);
            valid = false;
        }
    }
    for (present, key, hint) in [
        (has_name, "name", "the name the model calls it by"),
        (has_description, "description", "what the tool does"),
        (has_command, "command", "the command line to run"),
    ] {
        if !present {
            report.error_at_item(
                "tools",
                item_idx,
                None,
                format!("a command tool needs `{key}`: {hint}"),
            );
            valid = false;
        }
    }
    if !valid {
        return None;
    }
    if spec.input_schema.is_null() {
        spec.input_schema = serde_json::json!({"type": "object", "properties": {}});
    }
    let name = spec.name.clone();
    let reserved = if flue_core::BUILTIN_TOOL_NAMES.contains(&name.as_str()) {
        Some(format!(
            "command tool `{name}` has the name of a built-in tool: rename it, or list the \
             built-in tool by name"
        ))
    } else if FRAMEWORK_TOOLS.contains(&name.as_str()) {
        Some(format!(
            "command tool `{name}` has the name of a tool the runtime provides: rename it"
        ))
    } else if name.starts_with("mcp__") {
        Some(format!(
            "command tool `{name}` starts with `mcp__`, which is kept for MCP tools: rename it"
        ))
    } else {
        None
    };
    if let Some(message) = reserved {
        report.error_at_item("tools", item_idx, Some("name"), message);
        return None;
    }
    // The runtime's own checks: name, schema, variable names, limits.
    if let Err(err) = spec.to_tool() {
        let message = match err {
            flue_core::FlueError::InvalidTool { name, message } => {
                format!("command tool `{name}`: {message}")
            }
            other => other.to_string(),
        };
        report.error_at_item("tools", item_idx, None, message);
        return None;
    }
    Some(spec)
}

/// The `input` schema as JSON: a mapping (YAML) describing an object.
fn schema(value: &Pod) -> Result<Value, String> {
    let Pod::Hash(_) = value else {
        return Err(format!(
            "`input` must be a JSON Schema written as a mapping, like \
             `{{ type: object, properties: {{ path: {{ type: string }} }} }}`, got {}",
            describe(value)
        ));
    };
    let schema = to_json(value);
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err(
            "`input` must describe an object: add `type: object` and list the fields under \
             `properties`"
                .to_owned(),
        );
    }
    Ok(schema)
}

/// A YAML value as JSON.
fn to_json(value: &Pod) -> Value {
    match value {
        Pod::Null => Value::Null,
        Pod::String(text) => Value::String(text.clone()),
        Pod::Integer(number) => Value::Number((*number).into()),
        Pod::Float(number) => Number::from_f64(*number).map_or(Value::Null, Value::Number),
        Pod::Boolean(flag) => Value::Bool(*flag),
        Pod::Array(items) => Value::Array(items.iter().map(to_json).collect()),
        Pod::Hash(map) => Value::Object(
            map.iter()
                .map(|(key, value)| (key.clone(), to_json(value)))
                .collect::<Map<String, Value>>(),
        ),
    }
}
