//! Command tools in an agent file's `tools:` list: parsing, every problem at its line, and the
//! tools an agent config gets.

use flue_build::AgentFile;
use flue_core::tool::CommandToolSpec;
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::support::{MODEL, agent, at, check_agent, check_diagnostics, load};

fn agent_with(extra: &str) -> String {
    format!("---\nmodel: {MODEL}\n{extra}---\nBody\n")
}

fn check_errors(extra: &str, expected: &[(usize, &str)]) {
    let expected: Vec<_> = expected
        .iter()
        .map(|(line, message)| at("agents/a.md", *line, message))
        .collect();
    check_diagnostics(&[("agents/a.md", &agent_with(extra))], &expected);
}

const COUNT_LINES: &str = "\
tools:
  - read_file
  - name: count_lines
    description: Count the lines of a file in the workspace
    input: { type: object, properties: { path: { type: string } }, required: [path] }
    command: wc -l -- \"$path\"
    timeout_ms: 10000
";

#[test]
fn a_command_tool_is_read_with_its_schema_and_limits() {
    check_agent(
        &[("agents/a.md", &agent_with(COUNT_LINES))],
        "a",
        &AgentFile {
            model: Some(MODEL.to_owned()),
            instructions: "Body".to_owned(),
            tools: vec!["read_file".to_owned()],
            command_tools: vec![
                CommandToolSpec::new(
                    "count_lines",
                    "Count the lines of a file in the workspace",
                    json!({
                        "type": "object",
                        "properties": {"path": {"type": "string"}},
                        "required": ["path"],
                    }),
                    "wc -l -- \"$path\"",
                )
                .with_timeout_ms(10_000),
            ],
            ..agent("a")
        },
    );
}

#[test]
fn the_agent_config_and_subagent_profiles_get_the_command_tools() {
    let workspace = load(&[
        (
            "agents/a.md",
            &agent_with(&format!("{COUNT_LINES}subagents: [b]\n")),
        ),
        ("agents/b.md", &agent_with(COUNT_LINES)),
    ]);
    let config = workspace.agent_config("a").unwrap();
    let names: Vec<&str> = config
        .tools
        .iter()
        .map(flue_core::ToolDefinition::name)
        .collect();
    assert_eq!(names, ["read_file", "count_lines"]);
    let names: Vec<&str> = config.subagents[0]
        .tools
        .iter()
        .map(flue_core::ToolDefinition::name)
        .collect();
    assert_eq!(names, ["read_file", "count_lines"]);
}

#[test]
fn an_input_schema_is_optional_and_defaults_to_an_empty_object() {
    let workspace = load(&[(
        "agents/a.md",
        &agent_with("tools:\n  - name: today\n    description: The date\n    command: date\n"),
    )]);
    let spec = &workspace.agents["a"].command_tools[0];
    assert_eq!(
        spec.input_schema,
        json!({"type": "object", "properties": {}})
    );
}

#[test]
fn every_problem_is_reported_at_its_entry_and_key() {
    check_errors(
        "tools:
  - name: count
    descriptoin: typo
    command: wc -l
  - name: bash
    description: Shadows the built-in
    command: echo
  - name: task
    description: Shadows the runtime's tool
    command: echo
  - name: mcp__x__y
    description: Looks like MCP
    command: echo
  - name: ok
    description: Fine
    command: echo
  - name: ok
    description: Twice
    command: echo
  - name: bad_input
    description: Input is not an object
    input: { type: string }
    command: echo
  - name: bad_limit
    description: A limit of zero
    command: echo
    timeout_ms: 0
  - name: bad_vars
    description: A property that is a shell variable
    input: { type: object, properties: { PATH: { type: string }, a-b: { type: string } } }
    command: echo
  - 3
",
        &[
            (4, "a command tool needs `description`: what the tool does"),
            (
                5,
                "unknown key `descriptoin` in a command tool (did you mean `description`?)",
            ),
            (
                7,
                "command tool `bash` has the name of a built-in tool: rename it, or list the built-in tool by name",
            ),
            (
                10,
                "command tool `task` has the name of a tool the runtime provides: rename it",
            ),
            (
                13,
                "command tool `mcp__x__y` starts with `mcp__`, which is kept for MCP tools: rename it",
            ),
            (19, "`tools` has two tools named `ok`: rename one"),
            (
                24,
                "`input` must describe an object: add `type: object` and list the fields under `properties`",
            ),
            (
                29,
                "`tools.timeout_ms` must be a whole number of at least 1, got 0",
            ),
            (
                30,
                "command tool `bad_vars`: input property `PATH` would replace a variable the shell relies on: rename it (lowercase names are safe); input property `a-b` cannot be an environment variable: use letters, digits and `_`, not starting with a digit",
            ),
            (
                34,
                "a `tools` entry must be a built-in tool name, a command tool mapping (name, description, input, command) or a custom tool mapping (name, description, input, output, custom: true), got 3",
            ),
        ],
    );
}
