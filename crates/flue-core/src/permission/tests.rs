//! Unit tests of permission rules: globs, exact names, source order, bad patterns.

use pretty_assertions::assert_eq;

use super::*;

fn rule(pattern: &str, permission: Permission, source: PermissionSource) -> PermissionRule {
    PermissionRule::new(pattern, permission, source)
}

fn decide(rules: &[PermissionRule], tool: &str) -> Permission {
    PermissionPolicy::new(rules)
        .unwrap()
        .decide(tool, Permission::AlwaysAllow)
        .0
}

#[test]
fn globs_exact_names_and_sources_apply_in_order() {
    use Permission::{AlwaysAllow as Allow, AlwaysAsk as Ask};
    use PermissionSource::{AgentFile, Code, Defaults};
    let rules = [
        rule("mcp__*", Ask, Defaults),
        rule("mcp__docs__*", Allow, Defaults),
        rule("bash", Ask, AgentFile),
        rule("*", Allow, AgentFile),
        rule("delete_file", Ask, Code),
    ];
    let decided: Vec<(&str, Permission)> = [
        "mcp__github__push",
        "mcp__docs__search",
        "bash",
        "read_file",
        "delete_file",
    ]
    .into_iter()
    .map(|tool| (tool, decide(&rules, tool)))
    .collect();
    // `*` in the agent file overrides the flue.toml defaults for MCP tools; the exact `bash`
    // beats it within the agent file; code overrides both.
    assert_eq!(
        decided,
        vec![
            ("mcp__github__push", Allow),
            ("mcp__docs__search", Allow),
            ("bash", Ask),
            ("read_file", Allow),
            ("delete_file", Ask),
        ]
    );
    let only_defaults = [
        rule("mcp__*", Ask, Defaults),
        rule("mcp__docs__*", Allow, Defaults),
    ];
    assert_eq!(decide(&only_defaults, "mcp__github__push"), Ask);
    assert_eq!(decide(&only_defaults, "mcp__docs__search"), Allow);
    assert_eq!(
        PermissionPolicy::default().decide("bash", Ask).0,
        Ask,
        "without rules a tool keeps its own default"
    );
}

#[test]
fn bad_patterns_are_configuration_errors_naming_each() {
    let err = PermissionPolicy::new(&[
        rule("mcp/*", Permission::AlwaysAsk, PermissionSource::Code),
        rule("", Permission::AlwaysAsk, PermissionSource::Code),
        rule("bash", Permission::AlwaysAsk, PermissionSource::Code),
    ])
    .unwrap_err();
    assert_eq!(err.kind(), "invalid_config");
    let message = err.to_string();
    assert!(message.contains("\"mcp/*\" contains '/'"), "{message}");
    assert!(message.contains("pattern is empty"), "{message}");
}

#[test]
fn explain_names_the_rule_that_decided_and_skips_bad_patterns() {
    use Permission::{AlwaysAllow as Allow, AlwaysAsk as Ask};
    let rules = [
        rule("bash", Ask, PermissionSource::AgentFile),
        rule("bad pattern", Ask, PermissionSource::AgentFile),
        rule("mcp__*", Ask, PermissionSource::Defaults),
    ];
    assert_eq!(
        explain_permission(&rules, "bash", Allow),
        (Ask, Some(rules[0].clone()))
    );
    assert_eq!(
        explain_permission(&rules, "mcp__docs__search", Allow),
        (Ask, Some(rules[2].clone()))
    );
    assert_eq!(
        explain_permission(&rules, "read_file", Allow),
        (Allow, None)
    );
    assert_eq!(
        explain_permission(&rules, "bad pattern", Allow),
        (Allow, None)
    );
}
