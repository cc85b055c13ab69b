//! Unit tests of adapted tool names.

use pretty_assertions::assert_eq;

use super::{MAX_TOOL_NAME, adapted_name, sanitize};

#[test]
fn names_join_server_and_tool() {
    assert_eq!(adapted_name("docs", "search"), "mcp__docs__search");
    assert_eq!(
        adapted_name("my-server", "get_sum"),
        "mcp__my-server__get_sum"
    );
}

#[test]
fn unsupported_characters_become_underscores_and_outer_ones_are_trimmed() {
    let cases = [
        ("get tiny.image", "get_tiny_image"),
        ("__private__", "private"),
        ("ünïcödé", "n_c_d"),
        ("a/b:c", "a_b_c"),
        ("-dash-", "-dash-"),
        ("", "unnamed"),
        ("???", "unnamed"),
        ("___", "unnamed"),
    ];
    let actual: Vec<(&str, String)> = cases.iter().map(|(raw, _)| (*raw, sanitize(raw))).collect();
    let expected: Vec<(&str, String)> = cases
        .iter()
        .map(|(raw, want)| (*raw, (*want).to_owned()))
        .collect();
    assert_eq!(actual, expected);
}

#[test]
fn long_names_are_shortened_to_64_characters_with_a_stable_hash() {
    let tool = "a_really_long_tool_name_that_goes_on_and_on_and_on_forever";
    let name = adapted_name("server", tool);
    assert_eq!(name.len(), MAX_TOOL_NAME);
    assert_eq!(name, adapted_name("server", tool));
    assert!(
        name.starts_with("mcp__server__a_really_long_tool_name_that_goes_on_and"),
        "{name}"
    );
    // Two long names sharing the kept prefix still differ.
    assert!(name != adapted_name("server", &format!("{tool}_2")));
    // 55 characters, `_`, then FNV-1a of the full name.
    assert_eq!(
        name,
        "mcp__server__a_really_long_tool_name_that_goes_on_and_o_15a44366"
    );
}
