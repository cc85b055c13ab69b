//! An agent file's `tools:` list: built-in tool names, and command tools and custom tools
//! declared inline.
//!
//! A string entry names a built-in tool; a mapping declares a command tool (`name`,
//! `description`, `input` as JSON Schema written in YAML, `command`, `timeout_ms`,
//! `max_output_chars`, `replay_safe`, `state`), which flue-core runs in the agent's sandbox
//! ([`flue_core::tool::CommandToolSpec`]), or, with `custom: true` instead of `command`, a custom
//! tool the application answers ([`CustomToolDecl`]; `output` is an optional JSON Schema the
//! posted result must match). Every entry is checked here, each problem at its own line:
//! names follow the rules of every tool, and a command tool may not take the name of a
//! built-in tool, of a framework tool (`task`, `load_skill`, `finish`, `give_up`), of another
//! entry, or the `mcp__` prefix of MCP tools.

use flue_core::tool::CommandToolSpec;
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

/// The keys of a custom tool entry.
const CUSTOM_TOOL_KEYS: &[&str] = &["name", "description", "input", "output", "custom"];

/// A custom tool declared in an agent file (`custom: true`): the model calls it like any
/// tool, the operation pauses with `requires_action`, and the application posts the result
/// ([`flue_core::ToolDefinition::custom`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CustomToolDecl {
    /// The name the model calls it by.
    pub name: String,
    /// What it does, shown to the model.
    pub description: String,
    /// JSON Schema of its input object.
    pub input_schema: Value,
    /// JSON Schema a posted result must match, when declared.
    pub output_schema: Option<Value>,
}

impl CustomToolDecl {
    /// The flue-core tool.
    pub fn to_tool(&self) -> Result<flue_core::ToolDefinition, flue_core::FlueError> {
        let tool = flue_core::ToolDefinition::custom(
            &self.name,
            &self.description,
            self.input_schema.clone(),
        )?;
        match &self.output_schema {
            Some(schema) => tool.with_output_schema(schema.clone()),
            None => Ok(tool),
        }
    }
}

/// What one `tools:` value declares.
#[derive(Default)]
pub(crate) struct DeclaredTools {
    /// Built-in tool names.
    pub(crate) builtins: Vec<String>,
    /// Command tools.
    pub(crate) commands: Vec<CommandToolSpec>,
    /// Custom tools.
    pub(crate) custom: Vec<CustomToolDecl>,
}

/// Names the runtime gives its own tools.
const FRAMEWORK_TOOLS: &[&str] = &[
    flue_core::TASK_TOOL,
    flue_core::LOAD_SKILL_TOOL,
    flue_core::FINISH_TOOL,
    flue_core::GIVE_UP_TOOL,
];

/// The built-in tool names and the command tools of a `tools:` value, in order. Problems are
/// reported and the entry left out.
pub(crate) fn parse(value: &Pod, report: &mut Report<'_>) -> DeclaredTools {
    let mut builtins = Vec::new();
    let mut commands: Vec<CommandToolSpec> = Vec::new();
    let mut custom: Vec<CustomToolDecl> = Vec::new();
    let Pod::Array(items) = value else {
        report.error(
            &["tools"],
            format!(
                "`tools` must be a list of built-in tool names and command tools, got {}",
                describe(value)
            ),
        );
        return DeclaredTools::default();
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
            Pod::Hash(map) if map.contains_key("custom") => {
                let Some(decl) = custom_tool(item, item_idx, report) else {
                    continue;
                };
                if seen.contains(&decl.name) {
                    report.error_at_item(
                        "tools",
                        item_idx,
                        Some("name"),
                        format!("`tools` has two tools named `{}`: rename one", decl.name),
                    );
                    continue;
                }
                seen.push(decl.name.clone());
                custom.push(decl);
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
                    "a `tools` entry must be a built-in tool name, a command tool mapping \
                     (name, description, input, command) or a custom tool mapping (name, \
                     description, input, output, custom: true), got {}",
                    describe(other)
                ),
            ),
        }
    }
    DeclaredTools {
        builtins,
        commands,
        custom,
    }
}

/// Checks a built-in tool name.
fn builtin(name: &str) -> Result<(), String> {
    if flue_core::tool::BUILTIN_TOOL_NAMES.contains(&name)
        || flue_core::tool::STATE_TOOL_NAMES.contains(&name)
    {
        return Ok(());
    }
    let suggestion =
        crate::suggest::did_you_mean(name, flue_core::tool::BUILTIN_TOOL_NAMES.iter().copied());
    Err(format!(
        "unknown built-in tool `{name}`{suggestion}; known tools: {}; or declare a command tool \
         as a mapping with name, description, input and command",
        flue_core::tool::BUILTIN_TOOL_NAMES.join(", ")
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
                    "none" => flue_core::tool::CommandState::None,
                    "read" => flue_core::tool::CommandState::Read,
                    "write" => flue_core::tool::CommandState::Write,
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
    if let Some(message) = reserved_name("command tool", &spec.name) {
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

/// Why `name` may not be declared by an agent file (`what`: "command tool", "custom tool").
fn reserved_name(what: &str, name: &str) -> Option<String> {
    if flue_core::tool::BUILTIN_TOOL_NAMES.contains(&name) {
        Some(format!(
            "{what} `{name}` has the name of a built-in tool: rename it, or list the built-in \
             tool by name"
        ))
    } else if FRAMEWORK_TOOLS.contains(&name) {
        Some(format!(
            "{what} `{name}` has the name of a tool the runtime provides: rename it"
        ))
    } else if name.starts_with("mcp__") {
        Some(format!(
            "{what} `{name}` starts with `mcp__`, which is kept for MCP tools: rename it"
        ))
    } else {
        None
    }
}

/// One custom tool entry (a mapping with `custom: true`), or `None` after reporting its
/// problems.
fn custom_tool(item: &Pod, item_idx: usize, report: &mut Report<'_>) -> Option<CustomToolDecl> {
    let entries = fields::mapping("tools entry", item, "a mapping").ok()?;
    let mut decl = CustomToolDecl {
        name: String::new(),
        description: String::new(),
        input_schema: serde_json::json!({"type": "object", "properties": {}}),
        output_schema: None,
    };
    let mut valid = true;
    let (mut has_name, mut has_description) = (false, false);
    for (key, value) in entries {
        let dotted = format!("tools.{key}");
        let result: Result<(), String> = match key.as_str() {
            "name" => fields::string(&dotted, value).map(|name| {
                has_name = true;
                decl.name = name;
            }),
            "description" => fields::string(&dotted, value).map(|text| {
                has_description = true;
                decl.description = text;
            }),
            "custom" => match fields::boolean(&dotted, value) {
                Ok(true) => Ok(()),
                Ok(false) => Err("`custom: false` declares nothing: remove it and give a \
                                  `command` for a command tool, or write `custom: true` for a \
                                  tool the application answers"
                    .to_owned()),
                Err(message) => Err(message),
            },
            "input" => schema(value).map(|schema| decl.input_schema = schema),
            "output" => output_schema(value).map(|schema| decl.output_schema = Some(schema)),
            "command" | "timeout_ms" | "max_output_chars" => Err(format!(
                "a custom tool (`custom: true`) is answered by the application and runs no \
                 command: remove `{key}`, or remove `custom` to declare a command tool"
            )),
            _ => {
                let suggestion =
                    crate::suggest::did_you_mean(key, CUSTOM_TOOL_KEYS.iter().copied());
                Err(format!(
                    "unknown key `{key}` in a custom tool{}",
                    if suggestion.is_empty() {
                        format!(" (known keys: {})", CUSTOM_TOOL_KEYS.join(", "))
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
    ] {
        if !present {
            report.error_at_item(
                "tools",
                item_idx,
                None,
                format!("a custom tool needs `{key}`: {hint}"),
            );
            valid = false;
        }
    }
    if !valid {
        return None;
    }
    if let Some(message) = reserved_name("custom tool", &decl.name) {
        report.error_at_item("tools", item_idx, Some("name"), message);
        return None;
    }
    // The runtime's own checks: name and schemas.
    if let Err(err) = decl.to_tool() {
        let message = match err {
            flue_core::FlueError::InvalidTool { name, message } => {
                format!("custom tool `{name}`: {message}")
            }
            other => other.to_string(),
        };
        report.error_at_item("tools", item_idx, None, message);
        return None;
    }
    Some(decl)
}

/// An `output` schema as JSON: a mapping (YAML) that compiles as a JSON Schema.
fn output_schema(value: &Pod) -> Result<Value, String> {
    let Pod::Hash(_) = value else {
        return Err(format!(
            "`output` must be a JSON Schema written as a mapping, like \
             `{{ type: object, properties: {{ status: {{ type: string }} }} }}`, got {}",
            describe(value)
        ));
    };
    let schema = to_json(value);
    flue_core::tool::check_schema(&schema).map_err(|problem| format!("`output`: {problem}"))?;
    Ok(schema)
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
pub(crate) fn to_json(value: &Pod) -> Value {
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
