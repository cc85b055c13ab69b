//! Roles under `.agents/roles/`: their frontmatter, and references to them from agents.

use std::collections::BTreeMap;

use flue_build::RoleFile;
use flue_core::ThinkingLevel;
use pretty_assertions::assert_eq;

use crate::support::{at, check_diagnostics, file, load};

#[test]
fn a_role_loads_with_its_persona_and_optional_model_and_thinking() {
    let workspace = load(&[
        (
            "agents/a.md",
            "---\nmodel: openai/y\nrole: security-engineer\n---\nA.",
        ),
        (
            ".agents/roles/security-engineer.md",
            "---\ndescription: Thinks like an attacker\nmodel: anthropic/claude-opus-4-1\n\
             thinking: high\n---\nYou are a security engineer.\n",
        ),
        (
            ".agents/roles/editor.md",
            "---\ndescription: Polishes prose\n---\nYou edit text.",
        ),
        (".agents/roles/README.txt", "not a role"),
    ]);
    assert_eq!(
        workspace.roles,
        BTreeMap::from([
            (
                "editor".to_owned(),
                RoleFile {
                    name: "editor".to_owned(),
                    path: ".agents/roles/editor.md".to_owned(),
                    description: "Polishes prose".to_owned(),
                    instructions: "You edit text.".to_owned(),
                    ..RoleFile::default()
                },
            ),
            (
                "security-engineer".to_owned(),
                RoleFile {
                    name: "security-engineer".to_owned(),
                    path: ".agents/roles/security-engineer.md".to_owned(),
                    description: "Thinks like an attacker".to_owned(),
                    model: Some("anthropic/claude-opus-4-1".to_owned()),
                    thinking: Some(ThinkingLevel::High),
                    instructions: "You are a security engineer.".to_owned(),
                },
            ),
        ])
    );
    assert_eq!(
        workspace.agents["a"].role.as_deref(),
        Some("security-engineer")
    );
    let role = workspace.roles["security-engineer"].to_role();
    assert_eq!(
        (role.model.as_deref(), role.thinking),
        (Some("anthropic/claude-opus-4-1"), Some(ThinkingLevel::High))
    );
}

#[test]
fn bad_role_files_and_unknown_roles_are_reported_together() {
    check_diagnostics(
        &[
            ("agents/a.md", "---\nmodel: openai/y\nrole: editr\n---\nA."),
            ("agents/b.md", "---\nmodel: openai/y\nrole: broken\n---\nB."),
            (
                ".agents/roles/editor.md",
                "---\ndescription: Edits\n---\nEdit.",
            ),
            (
                ".agents/roles/broken.md",
                "---\nmodel: nope\nthinking: hard\ntone: dry\n---\n",
            ),
            (".agents/roles/Bad Name.md", "---\ndescription: X\n---\nX."),
        ],
        &[
            file(
                ".agents/roles/Bad Name.md",
                "invalid role name `Bad Name`: rename the file to 1 to 64 characters of a-z, \
                 0-9, `-` and `_`",
            ),
            file(
                ".agents/roles/broken.md",
                "the role has no persona text: write it below the frontmatter",
            ),
            at(
                ".agents/roles/broken.md",
                1,
                "missing `description`: add one line saying what the role is for",
            ),
            at(
                ".agents/roles/broken.md",
                2,
                "invalid model `nope`: expected `<provider>/<model>`, e.g. \
                 `anthropic/claude-sonnet-4-6`",
            ),
            at(
                ".agents/roles/broken.md",
                3,
                "invalid thinking level `hard`: expected one of off, minimal, low, medium, high, \
                 xhigh",
            ),
            at(
                ".agents/roles/broken.md",
                4,
                "unknown key `tone` (known keys: description, model, thinking)",
            ),
            // `broken` exists (it is reported above), so only the misspelt role is unknown.
            at(
                "agents/a.md",
                3,
                "unknown role `editr` (did you mean `editor`?): add .agents/roles/editr.md",
            ),
        ],
    );
}
