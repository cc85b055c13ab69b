//! Loading valid workspaces: discovery, defaults, context, and agent files given by path.

use std::collections::BTreeMap;

use flue_build::{
    AgentFile, Defaults, Diagnostic, SandboxKind, SkillFile, Workspace, WorkspaceConfig,
};
use flue_core::{DurabilityConfig, ThinkingLevel, config::Compaction, config::CompactionConfig};
use pretty_assertions::assert_eq;

use crate::support::{MODEL, agent, at, load, skill_md, workspace, write_files};

const REVIEWER: &str = "\
---
description: Reviews pull requests
model: anthropic/claude-sonnet-4-6
thinking: medium
skills: [code-review, security-audit]
subagents: [security]
sandbox: local
compaction: { reserve_tokens: 20000, keep_recent_tokens: 8000 }
durability: { max_attempts: 3 }
max_turns: 25
---

You are a careful reviewer.

Be brief.
";

#[test]
fn a_valid_workspace_loads_every_file() {
    let workspace = load(&[
        (
            "flue.toml",
            "[defaults]\nmodel = \"openai/gpt-5\"\nthinking = \"low\"\n",
        ),
        ("AGENTS.md", "# Project\nUse tabs.\n"),
        ("agents/reviewer.md", REVIEWER),
        (
            "agents/security.md",
            "---\ndescription: Finds vulnerabilities\n---\nLook for holes.\n",
        ),
        ("agents/notes.txt", "not an agent"),
        ("agents/.draft.md", "not an agent either"),
        (
            "agents/nested/deep.md",
            "---\nbroken: [\n---\nnot discovered",
        ),
        (
            ".agents/skills/code-review.md",
            "---\nname: code-review\ndescription: Reviews code\n---\nReview code.",
        ),
        (
            ".agents/skills/security-audit/SKILL.md",
            "---\nname: security-audit\ndescription: Audits security\n---\nAudit.",
        ),
        (".agents/skills/security-audit/owasp.md", "Top ten."),
    ]);
    let expected = Workspace {
        root: "/workspace".into(),
        config: WorkspaceConfig {
            defaults: Defaults {
                model: Some("openai/gpt-5".to_owned()),
                thinking: Some(ThinkingLevel::Low),
                permissions: Vec::new(),
                budget: None,
            },
            ..WorkspaceConfig::default()
        },
        context: Some("# Project\nUse tabs.\n".to_owned()),
        agents: BTreeMap::from([
            (
                "reviewer".to_owned(),
                AgentFile {
                    description: Some("Reviews pull requests".to_owned()),
                    model: Some(MODEL.to_owned()),
                    thinking: Some(ThinkingLevel::Medium),
                    skills: vec!["code-review".to_owned(), "security-audit".to_owned()],
                    subagents: vec!["security".to_owned()],
                    sandbox: Some(SandboxKind::Local),
                    compaction: Some(Compaction::Enabled(CompactionConfig {
                        reserve_tokens: Some(20_000),
                        keep_recent_tokens: Some(8_000),
                        model: None,
                    })),
                    durability: Some(DurabilityConfig {
                        max_attempts: 3,
                        timeout_ms: 3_600_000,
                    }),
                    max_turns: Some(25),
                    instructions: "You are a careful reviewer.\n\nBe brief.".to_owned(),
                    ..agent("reviewer")
                },
            ),
            (
                "security".to_owned(),
                AgentFile {
                    description: Some("Finds vulnerabilities".to_owned()),
                    instructions: "Look for holes.".to_owned(),
                    ..agent("security")
                },
            ),
        ]),
        skills: BTreeMap::from([
            (
                "code-review".to_owned(),
                SkillFile {
                    name: "code-review".to_owned(),
                    path: ".agents/skills/code-review.md".to_owned(),
                    description: "Reviews code".to_owned(),
                    body: "Review code.".to_owned(),
                    ..SkillFile::default()
                },
            ),
            (
                "security-audit".to_owned(),
                SkillFile {
                    name: "security-audit".to_owned(),
                    path: ".agents/skills/security-audit/SKILL.md".to_owned(),
                    description: "Audits security".to_owned(),
                    body: "Audit.".to_owned(),
                    resources: BTreeMap::from([("owasp.md".to_owned(), b"Top ten.".to_vec())]),
                    ..SkillFile::default()
                },
            ),
        ]),
        roles: BTreeMap::new(),
    };
    assert_eq!(workspace, expected);
}

#[test]
fn an_empty_folder_is_an_empty_workspace() {
    let workspace = load(&[]);
    let expected = Workspace {
        root: "/workspace".into(),
        config: WorkspaceConfig::default(),
        context: None,
        agents: BTreeMap::new(),
        skills: BTreeMap::new(),
        roles: BTreeMap::new(),
    };
    assert_eq!(workspace, expected);
}

#[test]
fn a_blank_agents_md_is_no_context() {
    assert_eq!(load(&[("AGENTS.md", "\n  \n")]).context, None);
}

#[test]
fn flue_toml_defaults_stand_in_for_a_missing_model() {
    // The agent file keeps what it declares; the default applies in agent_config.
    let workspace = load(&[
        ("flue.toml", "[defaults]\nmodel = \"openai/gpt-5\"\n"),
        ("agents/helper.md", "---\ndescription: Helps\n---\nHelp."),
    ]);
    let expected = AgentFile {
        description: Some("Helps".to_owned()),
        instructions: "Help.".to_owned(),
        ..agent("helper")
    };
    assert_eq!(workspace.agents.get("helper"), Some(&expected));
}

#[test]
fn a_missing_root_is_a_diagnostic() {
    let dir = workspace(&[]);
    let root = dir.path().join("missing");
    let diagnostics = Workspace::load(&root).unwrap_err().into_vec();
    let expected = vec![Diagnostic::file(
        root.display().to_string(),
        "workspace root is not a directory: pass the folder that holds agents/",
    )];
    assert_eq!(diagnostics, expected);
}

#[test]
fn an_agent_file_outside_the_workspace_is_checked_against_it() {
    let root = workspace(&[
        ("flue.toml", "[defaults]\nmodel = \"openai/gpt-5\"\n"),
        (
            "agents/security.md",
            "---\ndescription: Finds vulnerabilities\n---\nLook.",
        ),
        (".agents/skills/code-review.md", &skill_md("code-review")),
    ]);
    let elsewhere = workspace(&[(
        "scratch/reviewer.md",
        "---\nsubagents: [security]\nskills: [code-review]\n---\nReview.",
    )]);
    let file = elsewhere.path().join("scratch/reviewer.md");

    let workspace = Workspace::load_with_agent_file(root.path(), &file).unwrap();

    let expected = AgentFile {
        path: file.display().to_string(),
        subagents: vec!["security".to_owned()],
        skills: vec!["code-review".to_owned()],
        instructions: "Review.".to_owned(),
        ..agent("reviewer")
    };
    assert_eq!(workspace.agents.get("reviewer"), Some(&expected));
    assert_eq!(
        workspace.agents.keys().collect::<Vec<_>>(),
        ["reviewer", "security"]
    );
}

#[test]
fn an_agent_file_outside_agents_replaces_the_agent_of_that_name() {
    let root = workspace(&[
        ("agents/reviewer.md", "---\nmodel: openai/gpt-5\n---\nOld."),
        (
            "drafts/reviewer.md",
            "---\nmodel: anthropic/claude-sonnet-4-6\n---\nNew.",
        ),
    ]);
    let file = root.path().join("drafts/reviewer.md");

    let workspace = Workspace::load_with_agent_file(root.path(), &file).unwrap();

    let expected = AgentFile {
        path: "drafts/reviewer.md".to_owned(),
        model: Some(MODEL.to_owned()),
        instructions: "New.".to_owned(),
        ..agent("reviewer")
    };
    assert_eq!(workspace.agents.get("reviewer"), Some(&expected));
}

#[test]
fn an_agent_file_inside_agents_is_the_workspace_agent() {
    let root = workspace(&[(
        "agents/reviewer.md",
        "---\nmodel: openai/gpt-5\n---\nReview.",
    )]);
    let file = root.path().join("agents/reviewer.md");

    let workspace = Workspace::load_with_agent_file(root.path(), &file).unwrap();

    assert_eq!(workspace.agents.keys().collect::<Vec<_>>(), ["reviewer"]);
    assert_eq!(workspace.agents["reviewer"].path, "agents/reviewer.md");
}

#[test]
fn a_bad_agent_file_outside_the_workspace_is_reported_with_its_path() {
    let root = workspace(&[("agents/security.md", "---\nmodel: openai/gpt-5\n---\nLook.")]);
    write_files(
        root.path(),
        &[(
            "drafts/reviewer.md",
            "---\nmodel: openai/gpt-5\nsubagents: [securty]\n---\n",
        )],
    );
    let file = root.path().join("drafts/reviewer.md");

    let diagnostics = Workspace::load_with_agent_file(root.path(), &file)
        .unwrap_err()
        .into_vec();

    let expected = vec![at(
        "drafts/reviewer.md",
        3,
        "unknown subagent `securty` (did you mean `security`?): add agents/securty.md or remove it from `subagents`",
    )];
    assert_eq!(diagnostics, expected);
}

#[test]
fn a_broken_agent_file_inside_agents_is_reported_once() {
    let root = workspace(&[("agents/reviewer.md", "---\nmodel: openai/gpt-5\n")]);
    let file = root.path().join("agents/reviewer.md");

    let diagnostics = Workspace::load_with_agent_file(root.path(), &file)
        .unwrap_err()
        .into_vec();

    let expected = vec![at(
        "agents/reviewer.md",
        1,
        "frontmatter is not closed: add a `---` line after the last key",
    )];
    assert_eq!(diagnostics, expected);
}

#[test]
fn a_missing_agent_file_is_reported() {
    let root = workspace(&[]);
    let file = root.path().join("nowhere.md");

    let diagnostics = Workspace::load_with_agent_file(root.path(), &file)
        .unwrap_err()
        .into_vec();

    assert_eq!(diagnostics.len(), 1);
    assert_eq!(diagnostics[0].path, file.display().to_string());
    assert!(
        diagnostics[0].message.starts_with("cannot read file: "),
        "{diagnostics:?}"
    );
}
