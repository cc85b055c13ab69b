//! Unit tests of command tool declarations: variable names, limits and the problem list.

use pretty_assertions::assert_eq;
use serde_json::json;

use super::{CommandToolSpec, check_variable_name, keep_tail};

#[test]
fn property_names_must_be_safe_shell_variables() {
    for good in ["path", "_x", "Name2", "pattern", "Path"] {
        assert_eq!(check_variable_name(good), Ok(()), "{good}");
    }
    for bad in [
        "",
        "2x",
        "a-b",
        "a b",
        "é",
        "PATH",
        "IFS",
        "LD_PRELOAD",
        "BASH_ENV",
        "FLUE_X",
    ] {
        assert!(check_variable_name(bad).is_err(), "{bad}");
    }
}

#[test]
fn problems_name_every_bad_field_at_once() {
    let spec = CommandToolSpec {
        name: "t".into(),
        description: " ".into(),
        input_schema: json!({"type": "object", "properties": {"PATH": {}, "ok": {}, "a-b": {}}}),
        command: String::new(),
        timeout_ms: Some(0),
        max_output_chars: Some(0),
        replay_safe: false,
        state: crate::tool::CommandState::None,
    };
    let problems = spec.problems();
    assert_eq!(problems.len(), 6, "{problems:#?}");
    assert!(problems[0].contains("`description` is empty"));
    assert!(problems[1].contains("`command` is empty"));
    assert!(problems[2].contains("`timeout_ms` must be between 1 and 600000, got 0"));
    assert!(problems[3].contains("`max_output_chars`"));
    let err = spec.to_tool().unwrap_err();
    assert_eq!(err.kind(), "invalid_tool");
}

#[test]
fn a_good_spec_becomes_a_custom_tool_with_its_schema() {
    let schema = json!({"type": "object", "properties": {"path": {"type": "string"}}});
    let tool = CommandToolSpec::new("count", "Counts", schema.clone(), "wc -l")
        .to_tool()
        .unwrap();
    assert_eq!(tool.name(), "count");
    assert_eq!(tool.input_schema(), &schema);
    assert_eq!(tool.meta().ownership, crate::tool::Ownership::Custom);
}

#[test]
fn output_keeps_its_tail() {
    assert_eq!(keep_tail("abc", 3), "abc");
    assert_eq!(
        keep_tail("abcdef", 2),
        "[output truncated: showing the last 2 of 6 characters]\nef"
    );
}
