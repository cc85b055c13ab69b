//! Agent frontmatter settings: each key's values, types and line numbers.

use flue_build::AgentFile;
use flue_core::{
    Budget, BudgetLimits, DurabilityConfig, Permission, ThinkingLevel, config::Compaction,
    config::CompactionConfig,
};

use crate::support::{MODEL, agent, at, check_agent, check_diagnostics};

/// An agent file `agents/a.md` with a model and the given extra frontmatter lines.
fn agent_with(extra: &str) -> String {
    format!("---\nmodel: {MODEL}\n{extra}---\nBody\n")
}

fn check_field(extra: &str, expected: &AgentFile) {
    check_agent(&[("agents/a.md", &agent_with(extra))], "a", expected);
}

fn check_field_errors(extra: &str, expected: &[(usize, &str)]) {
    let expected: Vec<_> = expected
        .iter()
        .map(|(line, message)| at("agents/a.md", *line, message))
        .collect();
    check_diagnostics(&[("agents/a.md", &agent_with(extra))], &expected);
}

fn base() -> AgentFile {
    AgentFile {
        model: Some(MODEL.to_owned()),
        instructions: "Body".to_owned(),
        ..agent("a")
    }
}

#[test]
fn an_unknown_key_suggests_the_closest_known_one() {
    check_diagnostics(
        &[(
            "agents/a.md",
            "---\nmodle: anthropic/claude-sonnet-4-6\n---\nBody",
        )],
        &[
            flue_build::Diagnostic::file(
                "agents/a.md",
                "no model for this agent: set `model: <provider>/<model>` in its frontmatter, `model` under [defaults] in flue.toml, or `model: false` to choose it per call (`flue run --model`)",
            ),
            at(
                "agents/a.md",
                2,
                "unknown key `modle` (did you mean `model`?)",
            ),
        ],
    );
}

#[test]
fn an_unknown_key_without_a_close_match_lists_the_known_ones() {
    check_field_errors(
        "colour: blue\n",
        &[(
            3,
            "unknown key `colour` (known keys: description, model, thinking, skills, subagents, task, tools, mcp, sandbox, compaction, durability, max_turns, budget, role, permissions, cwd, schedules, hooks, memory, result, hold_reply_until_stop)",
        )],
    );
}

#[test]
fn every_thinking_level_is_accepted() {
    for level in ThinkingLevel::ALL {
        check_field(
            &format!("thinking: {level}\n"),
            &AgentFile {
                thinking: Some(level),
                ..base()
            },
        );
    }
}

#[test]
fn bad_thinking_model_and_sandbox_values_are_reported_at_their_lines() {
    check_diagnostics(
        &[(
            "agents/a.md",
            "---\ndescription: Test\nmodel: claude\nthinking: maximum\nsandbox: docker\n---\nBody",
        )],
        &[
            at(
                "agents/a.md",
                3,
                "invalid model `claude`: expected `<provider>/<model>`, e.g. `anthropic/claude-sonnet-4-6`",
            ),
            at(
                "agents/a.md",
                4,
                "invalid thinking level `maximum`: expected one of off, minimal, low, medium, high, xhigh",
            ),
            at(
                "agents/a.md",
                5,
                "invalid sandbox `docker`: expected one of virtual, local, isolated, daytona",
            ),
        ],
    );
}

#[test]
fn model_parts_must_both_be_non_empty() {
    for model in ["/gpt-5", "openai/"] {
        check_diagnostics(
            &[("agents/a.md", &format!("---\nmodel: {model}\n---\nBody"))],
            &[at(
                "agents/a.md",
                2,
                &format!(
                    "invalid model `{model}`: expected `<provider>/<model>`, e.g. `anthropic/claude-sonnet-4-6`"
                ),
            )],
        );
    }
}

#[test]
fn a_model_splits_at_the_first_slash() {
    check_agent(
        &[(
            "agents/a.md",
            "---\nmodel: openrouter/meta/llama-4\n---\nBody",
        )],
        "a",
        &AgentFile {
            model: Some("openrouter/meta/llama-4".to_owned()),
            instructions: "Body".to_owned(),
            ..agent("a")
        },
    );
}

#[test]
fn a_misspelt_value_gets_a_suggestion() {
    check_field_errors(
        "sandbox: locall\n",
        &[(
            3,
            "invalid sandbox `locall`: expected one of virtual, local, isolated, daytona (did you mean `local`?)",
        )],
    );
}

#[test]
fn every_sandbox_kind_is_accepted() {
    use flue_build::SandboxKind;
    for (word, kind) in [
        ("virtual", SandboxKind::Virtual),
        ("local", SandboxKind::Local),
        ("isolated", SandboxKind::Isolated),
        ("daytona", SandboxKind::Daytona),
    ] {
        check_field(
            &format!("sandbox: {word}\n"),
            &AgentFile {
                sandbox: Some(kind),
                ..base()
            },
        );
    }
}

#[test]
fn wrong_value_types_are_reported() {
    check_field_errors(
        "description: [a, b]\nskills: code-review\nsubagents: [1]\ntools: {bash: true}\nmax_turns: ten\n",
        &[
            (3, "`description` must be a string, got a list"),
            (
                4,
                "`skills` must be a list of names like `skills: [a, b]`, got \"code-review\"",
            ),
            (5, "`subagents` must be a list of names, got 1 in it"),
            (
                6,
                "`tools` must be a list of built-in tool names and command tools, got a mapping",
            ),
            (
                7,
                "`max_turns` must be a whole number of at least 1, got \"ten\"",
            ),
        ],
    );
}

#[test]
fn an_empty_value_is_a_type_error() {
    check_field_errors(
        "description:\n",
        &[(3, "`description` must be a string, got nothing")],
    );
}

#[test]
fn a_name_listed_twice_is_reported() {
    check_field_errors(
        "subagents: [b, b]\n",
        &[(3, "`subagents` lists `b` twice: remove one")],
    );
}

#[test]
fn max_turns_must_be_positive_and_fit() {
    check_field_errors(
        "max_turns: 0\n",
        &[(3, "`max_turns` must be a whole number of at least 1, got 0")],
    );
    check_field_errors(
        "max_turns: -4\n",
        &[(
            3,
            "`max_turns` must be a whole number of at least 1, got -4",
        )],
    );
    check_field_errors(
        "max_turns: 2.5\n",
        &[(
            3,
            "`max_turns` must be a whole number of at least 1, got 2.5",
        )],
    );
    check_field_errors(
        "max_turns: 99999999999\n",
        &[(3, "`max_turns` is too large: at most 4294967295")],
    );
    check_field(
        "max_turns: 7\n",
        &AgentFile {
            max_turns: Some(7),
            ..base()
        },
    );
}

#[test]
fn compaction_is_false_true_or_a_mapping() {
    check_field(
        "compaction: false\n",
        &AgentFile {
            compaction: Some(Compaction::Disabled),
            ..base()
        },
    );
    check_field(
        "compaction: true\n",
        &AgentFile {
            compaction: Some(Compaction::default()),
            ..base()
        },
    );
    check_field(
        "compaction:\n  reserve_tokens: 1000\n  keep_recent_tokens: 0\n  model: openai/gpt-5-mini\n",
        &AgentFile {
            compaction: Some(Compaction::Enabled(CompactionConfig {
                reserve_tokens: Some(1000),
                keep_recent_tokens: Some(0),
                model: Some("openai/gpt-5-mini".to_owned()),
            })),
            ..base()
        },
    );
}

#[test]
fn bad_compaction_settings_point_at_their_nested_lines() {
    check_field_errors(
        "compaction:\n  reserve_tokens: -1\n  keep_recent: 5\n  model: mini\n",
        &[
            (
                4,
                "`compaction.reserve_tokens` must be a whole number of at least 0, got -1",
            ),
            (
                5,
                "unknown key `keep_recent` in `compaction` (known keys: reserve_tokens, keep_recent_tokens, model)",
            ),
            (
                6,
                "invalid model `mini`: expected `<provider>/<model>`, e.g. `anthropic/claude-sonnet-4-6`",
            ),
        ],
    );
    check_field_errors(
        "compaction: 5\n",
        &[(
            3,
            "`compaction` must be `false` or a mapping with reserve_tokens, keep_recent_tokens and model, got 5",
        )],
    );
}

#[test]
fn durability_fills_unset_limits_with_defaults() {
    check_field(
        "durability: { timeout_ms: 60000 }\n",
        &AgentFile {
            durability: Some(DurabilityConfig {
                max_attempts: 10,
                timeout_ms: 60_000,
            }),
            ..base()
        },
    );
}

#[test]
fn bad_durability_settings_are_reported() {
    check_field_errors(
        "durability: { max_attempts: 0, timeout: 5 }\n",
        &[
            (
                3,
                "`durability.max_attempts` must be a whole number of at least 1, got 0",
            ),
            (
                3,
                "unknown key `timeout` in `durability` (did you mean `timeout_ms`?)",
            ),
        ],
    );
}

#[test]
fn an_unknown_built_in_tool_lists_the_known_ones() {
    let known = format!(
        "known tools: {}; or declare a command tool as a mapping with name, description, input \
         and command",
        flue_core::tool::BUILTIN_TOOL_NAMES.join(", ")
    );
    check_field_errors(
        "tools: [teleport]\n",
        &[(3, &format!("unknown built-in tool `teleport`; {known}"))],
    );
    check_field_errors(
        "tools:\n  - read_file\n  - teleport\n  - levitate\n  - bsah\n",
        &[
            (5, &format!("unknown built-in tool `teleport`; {known}")),
            (6, &format!("unknown built-in tool `levitate`; {known}")),
            (
                7,
                &format!("unknown built-in tool `bsah` (did you mean `bash`?); {known}"),
            ),
        ],
    );
}

#[test]
fn every_built_in_tool_is_accepted() {
    let names: Vec<String> = flue_core::tool::BUILTIN_TOOL_NAMES
        .iter()
        .map(|name| (*name).to_owned())
        .collect();
    check_field(
        &format!("tools: [{}]\n", names.join(", ")),
        &AgentFile {
            tools: names.clone(),
            ..base()
        },
    );
}

#[test]
fn invalid_agent_names_are_reported_and_the_file_still_checked() {
    check_diagnostics(
        &[(
            "agents/Code Reviewer.md",
            "---\nmodel: openai/y\nthinkng: low\n---\nBody",
        )],
        &[
            flue_build::Diagnostic::file(
                "agents/Code Reviewer.md",
                "invalid agent name `Code Reviewer`: rename the file to 1 to 64 characters of a-z, 0-9, `-` and `_`",
            ),
            at(
                "agents/Code Reviewer.md",
                3,
                "unknown key `thinkng` (did you mean `thinking`?)",
            ),
        ],
    );
    let long = format!("agents/{}.md", "a".repeat(65));
    check_diagnostics(
        &[(&long, "---\nmodel: openai/y\n---\nBody")],
        &[flue_build::Diagnostic::file(
            &long,
            format!(
                "invalid agent name `{}`: rename the file to 1 to 64 characters of a-z, 0-9, `-` and `_`",
                "a".repeat(65)
            ),
        )],
    );
}

#[test]
fn a_key_inside_a_block_scalar_does_not_move_line_numbers() {
    check_diagnostics(
        &[(
            "agents/a.md",
            "---\ndescription: |\n  model: in text\n  more\nmodel: nope\n---\nBody",
        )],
        &[at(
            "agents/a.md",
            5,
            "invalid model `nope`: expected `<provider>/<model>`, e.g. `anthropic/claude-sonnet-4-6`",
        )],
    );
}

#[test]
fn permissions_map_tool_names_and_globs_to_a_policy() {
    check_field(
        "permissions:\n  bash: always_ask\n  \"mcp__*\": always_ask\n  read_file: always_allow\n",
        &AgentFile {
            permissions: vec![
                ("bash".to_owned(), Permission::AlwaysAsk),
                ("mcp__*".to_owned(), Permission::AlwaysAsk),
                ("read_file".to_owned(), Permission::AlwaysAllow),
            ],
            ..base()
        },
    );
}

#[test]
fn bad_permissions_are_reported_each_at_its_line() {
    check_field_errors(
        "permissions:\n  bash: sometimes\n  \"mcp/docs\": always_ask\n",
        &[
            (
                4,
                "invalid permission `sometimes`: expected one of always_allow, always_ask",
            ),
            (
                5,
                "`permissions`: the tool pattern \"mcp/docs\" contains '/'; use tool names with `*` and `?` wildcards, e.g. `mcp__*` or `bash`",
            ),
        ],
    );
    check_field_errors(
        "permissions: [bash]\n",
        &[(
            3,
            "`permissions` must be a mapping of tool names or globs (such as `mcp__*`) to always_allow or always_ask, got a list",
        )],
    );
}

#[test]
fn a_budget_takes_submission_and_conversation_limits() {
    check_field(
        "budget:\n  max_cost_usd: 0.5\n  max_turns: 20\n  conversation:\n    max_cost_usd: 5\n",
        &AgentFile {
            budget: Some(Budget {
                max_cost_usd: Some(0.5),
                max_turns: Some(20),
                conversation: BudgetLimits {
                    max_cost_usd: Some(5.0),
                    max_turns: None,
                },
            }),
            ..base()
        },
    );
    check_field(
        "task: false\n",
        &AgentFile {
            task: Some(false),
            ..base()
        },
    );
}

#[test]
fn bad_budget_settings_are_reported_with_their_dotted_keys() {
    check_field_errors(
        "budget:\n  max_cost_usd: free\n  max_turn: 3\n  conversation:\n    max_turns: 0\n",
        &[
            (
                4,
                "`budget.max_cost_usd` must be a positive number of US dollars (e.g. 0.50), got \
                 \"free\"",
            ),
            (
                5,
                "unknown key `max_turn` in `budget` (did you mean `max_turns`?)",
            ),
            (
                7,
                "`budget.conversation.max_turns` must be a whole number of at least 1, got 0",
            ),
        ],
    );
}

#[test]
fn memory_is_off_by_default_and_takes_true_false_or_its_bounds() {
    use flue_core::store::NoteLimits;
    check_field("", &base());
    check_field("memory: false\n", &base());
    check_field(
        "memory: true\n",
        &AgentFile {
            memory: Some(NoteLimits::default()),
            ..base()
        },
    );
    check_field(
        "memory: { max_notes: 5, max_note_bytes: 100 }\n",
        &AgentFile {
            memory: Some(NoteLimits {
                max_notes: 5,
                max_note_bytes: 100,
                ..NoteLimits::default()
            }),
            ..base()
        },
    );
    check_field_errors(
        "memory: { max_notes: 0, size: 3 }\n",
        &[
            (
                3,
                "`memory.max_notes` must be a whole number of at least 1, got 0",
            ),
            (
                3,
                "unknown key `size` in `memory` (known keys: max_note_bytes, max_notes, max_subject_bytes)",
            ),
        ],
    );
    check_field_errors(
        "memory: yes please\n",
        &[(
            3,
            "`memory` must be `true`, `false` or a mapping with max_note_bytes, max_notes and max_subject_bytes, got \"yes please\"",
        )],
    );
}
