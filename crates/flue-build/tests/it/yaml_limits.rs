//! Frontmatter beyond the YAML limits (aliases, nesting, size) is refused with file and line.
//!
//! Every input here stays just past a limit, so even a loader without the limits would only
//! take a few megabytes; the real bombs run against the binary under a memory cap (flue-cli's
//! `hostile_yaml` tests).

use crate::support::{at, check_diagnostics, load};

const EXPANSION: &str = "frontmatter expands to more than 10000 values or 1048576 bytes (YAML \
                         aliases `*name` repeat what they name): write the values out instead \
                         of repeating them through aliases";

/// `a: &a [x, x, ...]` with `items` entries, then `b:` listing `*a` `aliases` times.
fn aliased_list(items: usize, aliases: usize) -> String {
    let list = vec!["x"; items].join(", ");
    let refs = vec!["*a"; aliases].join(", ");
    format!("a: &a [{list}]\nb: [{refs}]\n")
}

#[test]
fn aliases_expanding_past_the_node_limit_are_refused_where_they_do() {
    // 101 nodes per alias: the 99th alias takes the total past 10,000.
    let text = format!("---\nmodel: openai/y\n{}---\nBody", aliased_list(100, 100));
    check_diagnostics(
        &[("agents/a.md", &text)],
        &[at("agents/a.md", 4, EXPANSION)],
    );
}

#[test]
fn a_long_string_repeated_through_aliases_is_refused() {
    let long = "y".repeat(10_000);
    let refs = vec!["*s"; 110].join(", ");
    let text = format!("---\nmodel: openai/y\ns: &s {long}\nr: [{refs}]\n---\nBody");
    check_diagnostics(
        &[("agents/a.md", &text)],
        &[at("agents/a.md", 4, EXPANSION)],
    );
}

#[test]
fn the_limits_apply_to_skills_and_roles_too() {
    let bomb = format!(
        "---\nname: s\ndescription: d\n{}---\nBody",
        aliased_list(100, 100)
    );
    let role_bomb = format!("---\ndescription: d\n{}---\nBody", aliased_list(100, 100));
    check_diagnostics(
        &[
            ("agents/a.md", "---\nmodel: openai/y\n---\nA."),
            (".agents/skills/s/SKILL.md", &bomb),
            (".agents/roles/r.md", &role_bomb),
        ],
        &[
            at(".agents/roles/r.md", 4, EXPANSION),
            at(".agents/skills/s/SKILL.md", 5, EXPANSION),
        ],
    );
}

#[test]
fn nesting_deeper_than_the_limit_is_refused() {
    let message = "frontmatter nests mappings and lists more than 64 levels deep: flatten it";
    let flow = format!(
        "---\nmodel: openai/y\nx: {}{}\n---\nBody",
        "[".repeat(70),
        "]".repeat(70)
    );
    check_diagnostics(&[("agents/a.md", &flow)], &[at("agents/a.md", 3, message)]);
    // Block lists nest without brackets: `- - - ...` on one line.
    let block = format!(
        "---\nmodel: openai/y\nx:\n  {}y\n---\nBody",
        "- ".repeat(70)
    );
    check_diagnostics(&[("agents/a.md", &block)], &[at("agents/a.md", 4, message)]);
}

#[test]
fn oversized_frontmatter_is_refused_at_its_start() {
    let text = format!(
        "---\nmodel: openai/y\ndescription: {}\n---\nBody",
        "z".repeat(70_000)
    );
    check_diagnostics(
        &[("agents/a.md", &text)],
        &[at(
            "agents/a.md",
            2,
            "frontmatter is 70030 bytes, more than the limit of 65536: keep the settings short \
             and put long text in the body",
        )],
    );
}

#[test]
fn ordinary_aliases_within_the_limits_still_work() {
    let skill = "---\nname: s\ndescription: &d Reviews code\nmetadata:\n  summary: *d\n---\nDo s.";
    let workspace = load(&[
        ("agents/a.md", "---\nmodel: openai/y\nskills: [s]\n---\nA."),
        (".agents/skills/s/SKILL.md", skill),
    ]);
    let loaded = &workspace.skills["s"];
    assert_eq!(loaded.description, "Reviews code");
    assert_eq!(
        loaded.metadata.get("summary").map(String::as_str),
        Some("Reviews code")
    );
}

#[test]
fn thousands_of_keys_are_each_reported_at_their_own_line() {
    // Within the limits, but a lookup per key that scanned the frontmatter made this quadratic.
    let keys: String = (0..4000).map(|idx| format!("k{idx}: 1\n")).collect();
    let text = format!("---\nmodel: openai/y\n{keys}\"quoted key\": 2\n---\nBody");
    let dir = crate::support::workspace(&[("agents/a.md", &text)]);
    let problems = flue_build::Workspace::load(dir.path())
        .unwrap_err()
        .into_vec();
    assert_eq!(problems.len(), 4001);
    let line_of = |needle: &str| {
        problems
            .iter()
            .find(|problem| problem.message.starts_with(needle))
            .and_then(|problem| problem.line)
    };
    assert_eq!(line_of("unknown key `k0`"), Some(3));
    assert_eq!(line_of("unknown key `k3999`"), Some(4002));
    assert_eq!(line_of("unknown key `quoted key`"), Some(4003));
}
