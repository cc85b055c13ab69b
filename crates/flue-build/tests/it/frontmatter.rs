//! The shape of agent files: frontmatter delimiters, YAML syntax and the body.

use flue_build::{AgentFile, Diagnostic};

use crate::support::{MODEL, agent, at, check_agent, check_diagnostics};

#[test]
fn malformed_yaml_points_at_the_parser_position() {
    check_diagnostics(
        &[(
            "agents/a.md",
            "---\nmodel: openai/y\ndescription: a: b\n---\nBody",
        )],
        &[at(
            "agents/a.md",
            3,
            "invalid yaml in frontmatter: mapping values are not allowed in this context",
        )],
    );
}

#[test]
fn an_unclosed_flow_list_points_at_the_last_frontmatter_line() {
    // The parser notices at the end of the input; the closing `---` is not yaml, so the line
    // named is the last one the user wrote.
    check_diagnostics(
        &[("agents/a.md", "---\nmodel: openai/y\ntools: [\n---\nBody")],
        &[at(
            "agents/a.md",
            3,
            "invalid yaml in frontmatter: while parsing a node, did not find expected node content",
        )],
    );
}

#[test]
fn a_duplicate_key_is_reported_at_its_second_occurrence() {
    check_diagnostics(
        &[(
            "agents/a.md",
            "---\nmodel: openai/y\nmodel: openai/b\n---\nBody",
        )],
        &[at(
            "agents/a.md",
            3,
            "invalid yaml in frontmatter: `model` is set twice: keep one",
        )],
    );
}

#[test]
fn a_missing_closing_delimiter_is_reported_at_the_opening_one() {
    check_diagnostics(
        &[("agents/a.md", "---\nmodel: openai/y\n\nYou are helpful.\n")],
        &[at(
            "agents/a.md",
            1,
            "frontmatter is not closed: add a `---` line after the last key",
        )],
    );
}

#[test]
fn an_empty_file_is_reported() {
    check_diagnostics(
        &[("agents/a.md", "\n\n")],
        &[Diagnostic::file(
            "agents/a.md",
            "file is empty: add frontmatter between `---` lines, then the agent's instructions",
        )],
    );
}

#[test]
fn frontmatter_that_is_not_a_mapping_is_reported() {
    check_diagnostics(
        &[("agents/a.md", "---\n- model\n- thinking\n---\nBody")],
        &[at(
            "agents/a.md",
            2,
            "frontmatter must be a mapping of `key: value` lines, got a list",
        )],
    );
    check_diagnostics(
        &[("agents/a.md", "---\njust words\n---\nBody")],
        &[at(
            "agents/a.md",
            2,
            "frontmatter must be a mapping of `key: value` lines, got \"just words\"",
        )],
    );
}

#[test]
fn a_file_without_frontmatter_is_all_instructions() {
    check_agent(
        &[
            ("flue.toml", "[defaults]\nmodel = \"openai/gpt-5\"\n"),
            ("agents/a.md", "\nJust do it.\n"),
        ],
        "a",
        &AgentFile {
            instructions: "Just do it.".to_owned(),
            ..agent("a")
        },
    );
}

#[test]
fn empty_frontmatter_and_comments_are_allowed() {
    check_agent(
        &[
            ("flue.toml", "[defaults]\nmodel = \"openai/gpt-5\"\n"),
            ("agents/a.md", "---\n# nothing yet\n---\nBody"),
            ("agents/b.md", "---\n---\nBody"),
        ],
        "a",
        &AgentFile {
            instructions: "Body".to_owned(),
            ..agent("a")
        },
    );
}

#[test]
fn crlf_line_endings_and_a_byte_order_mark_are_accepted() {
    check_agent(
        &[(
            "agents/a.md",
            "\u{feff}---\r\nmodel: anthropic/claude-sonnet-4-6\r\n---\r\nLine one.\r\nLine two.\r\n",
        )],
        "a",
        &AgentFile {
            model: Some(MODEL.to_owned()),
            instructions: "Line one.\r\nLine two.".to_owned(),
            ..agent("a")
        },
    );
}

#[test]
fn a_body_with_horizontal_rules_is_kept_whole() {
    check_agent(
        &[(
            "agents/a.md",
            "---\nmodel: anthropic/claude-sonnet-4-6\n---\nPart one.\n\n---\n\nPart two.\n",
        )],
        "a",
        &AgentFile {
            model: Some(MODEL.to_owned()),
            instructions: "Part one.\n\n---\n\nPart two.".to_owned(),
            ..agent("a")
        },
    );
}
