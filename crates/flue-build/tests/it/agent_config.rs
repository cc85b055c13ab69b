//! From agent files to flue-core configuration.

use flue_build::Workspace;
use flue_core::{
    AgentConfig, AgentProfile, DurabilityConfig, FlueError, ThinkingLevel, config::Compaction,
};
use pretty_assertions::assert_eq;

use crate::support::{load, skill_md};

/// The comparable parts of an [`AgentConfig`] (it holds tools, which have no `PartialEq`).
#[derive(Debug, PartialEq)]
struct ConfigSummary {
    name: Option<String>,
    description: Option<String>,
    model: Option<String>,
    instructions: Option<String>,
    thinking: Option<ThinkingLevel>,
    tools: Vec<String>,
    skills: usize,
    subagents: Vec<ProfileSummary>,
    compaction: Option<Compaction>,
    durability: Option<DurabilityConfig>,
    max_turns: Option<u32>,
}

/// The comparable parts of an [`AgentProfile`].
#[derive(Debug, PartialEq)]
struct ProfileSummary {
    name: Option<String>,
    description: Option<String>,
    model: Option<String>,
    instructions: Option<String>,
    thinking: Option<ThinkingLevel>,
    tools: Vec<String>,
    skills: usize,
    subagents: Vec<ProfileSummary>,
    compaction: Option<Compaction>,
    durability: Option<DurabilityConfig>,
}

fn summary(config: &AgentConfig) -> ConfigSummary {
    ConfigSummary {
        name: config.name.clone(),
        description: config.description.clone(),
        model: config.model.clone(),
        instructions: config.instructions.clone(),
        thinking: config.thinking,
        tools: config
            .tools
            .iter()
            .map(|tool| tool.name().to_owned())
            .collect(),
        skills: config.skills.len(),
        subagents: config.subagents.iter().map(profile_summary).collect(),
        compaction: config.compaction.clone(),
        durability: config.durability.clone(),
        max_turns: config.max_turns,
    }
}

fn profile_summary(profile: &AgentProfile) -> ProfileSummary {
    ProfileSummary {
        name: profile.name.clone(),
        description: profile.description.clone(),
        model: profile.model.clone(),
        instructions: profile.instructions.clone(),
        thinking: profile.thinking,
        tools: profile
            .tools
            .iter()
            .map(|tool| tool.name().to_owned())
            .collect(),
        skills: profile.skills.len(),
        subagents: profile.subagents.iter().map(profile_summary).collect(),
        compaction: profile.compaction.clone(),
        durability: profile.durability.clone(),
    }
}

fn check_config(workspace: &Workspace, name: &str, expected: &ConfigSummary) {
    let config = workspace.agent_config(name).unwrap();
    assert_eq!(&summary(&config), expected);
}

#[test]
fn defaults_fill_in_model_and_thinking() {
    let workspace = load(&[
        (
            "flue.toml",
            "[defaults]\nmodel = \"openai/gpt-5\"\nthinking = \"low\"\n",
        ),
        (
            "agents/helper.md",
            "---\ndescription: Helps\n---\n\nHelp the user.\n",
        ),
    ]);
    check_config(
        &workspace,
        "helper",
        &ConfigSummary {
            name: Some("helper".to_owned()),
            description: Some("Helps".to_owned()),
            model: Some("openai/gpt-5".to_owned()),
            instructions: Some("Help the user.".to_owned()),
            thinking: Some(ThinkingLevel::Low),
            tools: Vec::new(),
            skills: 0,
            subagents: Vec::new(),
            compaction: None,
            durability: None,
            max_turns: None,
        },
    );
}

#[test]
fn the_agents_own_settings_win_over_defaults() {
    let workspace = load(&[
        (
            "flue.toml",
            "[defaults]\nmodel = \"openai/gpt-5\"\nthinking = \"low\"\n",
        ),
        (
            "agents/a.md",
            "---\nmodel: anthropic/claude-sonnet-4-6\nthinking: high\ncompaction: false\ndurability: { max_attempts: 2 }\nmax_turns: 9\nskills: [style]\n---\n",
        ),
        (".agents/skills/style.md", &skill_md("style")),
    ]);
    check_config(
        &workspace,
        "a",
        &ConfigSummary {
            name: Some("a".to_owned()),
            description: None,
            model: Some("anthropic/claude-sonnet-4-6".to_owned()),
            instructions: None,
            thinking: Some(ThinkingLevel::High),
            tools: Vec::new(),
            // Skills are injected by a later stage; their names stay on the agent file.
            skills: 0,
            subagents: Vec::new(),
            compaction: Some(Compaction::Disabled),
            durability: Some(DurabilityConfig {
                max_attempts: 2,
                timeout_ms: 3_600_000,
            }),
            max_turns: Some(9),
        },
    );
}

#[test]
fn subagents_become_profiles_recursively() {
    let workspace = load(&[
        (
            "flue.toml",
            "[defaults]\nmodel = \"openai/gpt-5\"\nthinking = \"low\"\n",
        ),
        (
            "agents/lead.md",
            "---\ndescription: Leads\nsubagents: [reviewer, writer]\n---\nLead.",
        ),
        (
            "agents/reviewer.md",
            "---\ndescription: Reviews\nmodel: anthropic/claude-sonnet-4-6\nthinking: high\ncompaction: { keep_recent_tokens: 100 }\nsubagents: [checker]\n---\nReview.",
        ),
        ("agents/writer.md", "---\ndescription: Writes\n---\nWrite."),
        ("agents/checker.md", "---\ndescription: Checks\n---\nCheck."),
    ]);
    let checker = ProfileSummary {
        name: Some("checker".to_owned()),
        description: Some("Checks".to_owned()),
        model: None,
        instructions: Some("Check.".to_owned()),
        thinking: None,
        tools: Vec::new(),
        skills: 0,
        subagents: Vec::new(),
        compaction: None,
        durability: None,
    };
    let reviewer = ProfileSummary {
        name: Some("reviewer".to_owned()),
        description: Some("Reviews".to_owned()),
        model: Some("anthropic/claude-sonnet-4-6".to_owned()),
        instructions: Some("Review.".to_owned()),
        thinking: Some(ThinkingLevel::High),
        tools: Vec::new(),
        skills: 0,
        subagents: vec![checker],
        compaction: Some(Compaction::Enabled(flue_core::config::CompactionConfig {
            reserve_tokens: None,
            keep_recent_tokens: Some(100),
            model: None,
        })),
        // Durability is never set on subagent profiles (loading rejects it on subagents).
        durability: None,
    };
    let writer = ProfileSummary {
        name: Some("writer".to_owned()),
        description: Some("Writes".to_owned()),
        // Unset model and thinking are inherited from the parent at run time.
        model: None,
        instructions: Some("Write.".to_owned()),
        thinking: None,
        tools: Vec::new(),
        skills: 0,
        subagents: Vec::new(),
        compaction: None,
        durability: None,
    };
    check_config(
        &workspace,
        "lead",
        &ConfigSummary {
            name: Some("lead".to_owned()),
            description: Some("Leads".to_owned()),
            model: Some("openai/gpt-5".to_owned()),
            instructions: Some("Lead.".to_owned()),
            thinking: Some(ThinkingLevel::Low),
            tools: Vec::new(),
            skills: 0,
            subagents: vec![reviewer, writer],
            compaction: None,
            durability: None,
            max_turns: None,
        },
    );
    // flue-core accepts the result.
    assert!(workspace.agent_config("lead").unwrap().resolve().is_ok());
}

#[test]
fn built_in_tools_are_created_by_name() {
    let names: Vec<&str> = flue_core::tool::BUILTIN_TOOL_NAMES.to_vec();
    let workspace = load(&[(
        "agents/a.md",
        &*format!(
            "---\nmodel: openai/gpt-5\ntools: [{}]\n---\nA.",
            names.join(", ")
        ),
    )]);
    let config = workspace.agent_config("a").unwrap();
    let tools: Vec<&str> = config
        .tools
        .iter()
        .map(flue_core::ToolDefinition::name)
        .collect();
    assert_eq!(tools, names);
}

#[test]
fn an_unknown_agent_is_an_invalid_config_error() {
    let workspace = load(&[("agents/a.md", "---\nmodel: openai/gpt-5\n---\nA.")]);
    let error = workspace.agent_config("b").unwrap_err();
    assert_eq!(error.kind(), "invalid_config");
    assert!(matches!(error, FlueError::InvalidConfig { .. }));
    assert_eq!(
        error.to_string(),
        "unknown agent `b`: there is no agents/b.md (known agents: a)"
    );
}

#[test]
fn skills_and_roles_reach_the_runtime() {
    let workspace = load(&[
        ("flue.toml", "[defaults]\nmodel = \"openai/y\"\n"),
        (
            "agents/lead.md",
            "---\nmodel: openai/y\nrole: editor\nskills: [triage]\nsubagents: [security]\n---\nLead.",
        ),
        (
            "agents/security.md",
            "---\nskills: [audit]\nrole: critic\n---\nAudit.",
        ),
        (".agents/skills/triage.md", &skill_md("triage")),
        (".agents/skills/audit/SKILL.md", &skill_md("audit")),
        (".agents/skills/audit/owasp.md", "Top ten."),
        (
            ".agents/roles/editor.md",
            "---\ndescription: Edits\n---\nEdit.",
        ),
        (
            ".agents/roles/critic.md",
            "---\ndescription: Critiques\n---\nCritique.",
        ),
    ]);
    let config = workspace.agent_config("lead").unwrap();
    // A root agent registers no skills: it runs with every workspace skill.
    assert_eq!(
        (config.role.as_deref(), config.skills.len()),
        (Some("editor"), 0)
    );
    let security = &config.subagents[0];
    assert_eq!(security.role.as_deref(), Some("critic"));
    // A subagent is self-contained: exactly the skills it lists, with body and resources.
    assert_eq!(
        security.skills,
        vec![
            flue_core::Skill::new("audit", "The audit skill")
                .with_body("Do audit.")
                .with_resource("owasp.md", b"Top ten.".to_vec())
        ]
    );
    let skills: Vec<String> = workspace
        .harness_skills()
        .into_iter()
        .map(|skill| skill.name)
        .collect();
    assert_eq!(skills, ["audit", "triage"]);
    let roles: Vec<(String, String)> = workspace
        .harness_roles()
        .into_iter()
        .map(|role| (role.name, role.instructions))
        .collect();
    assert_eq!(
        roles,
        [
            ("critic".to_owned(), "Critique.".to_owned()),
            ("editor".to_owned(), "Edit.".to_owned())
        ]
    );
}

#[test]
fn model_false_leaves_the_model_to_each_call_and_skips_the_default() {
    let workspace = crate::support::load(&[
        ("flue.toml", "[defaults]\nmodel = \"openai/gpt-5\"\n"),
        ("agents/a.md", "---\nmodel: false\nsubagents: [b]\n---\nA."),
        ("agents/b.md", "---\nmodel: false\n---\nB."),
    ]);
    assert!(workspace.agents["a"].model_per_call);
    let config = workspace.agent_config("a").unwrap();
    assert_eq!(
        (config.model.as_deref(), config.model_per_call),
        (None, true)
    );
    assert!(config.subagents[0].model_per_call);
    let resolved = config.with_model("openai/gpt-5-mini").resolve().unwrap();
    assert_eq!(resolved.model.as_deref(), Some("openai/gpt-5-mini"));
}

#[test]
fn model_true_is_refused() {
    crate::support::check_diagnostics(
        &[("agents/a.md", "---\nmodel: true\n---\nA.")],
        &[crate::support::at(
            "agents/a.md",
            2,
            "`model` must be `<provider>/<model>`, or `false` to choose the model per call \
             (`flue run --model`), got true",
        )],
    );
}

#[test]
fn cwd_sets_the_agents_working_directory() {
    let workspace = crate::support::load(&[(
        "agents/a.md",
        "---\nmodel: openai/gpt-5\ncwd: packages/app\n---\nA.",
    )]);
    let config = workspace.agent_config("a").unwrap();
    assert_eq!(config.cwd.as_deref(), Some("packages/app"));
    crate::support::check_diagnostics(
        &[(
            "agents/b.md",
            "---\nmodel: openai/gpt-5\ncwd: ../up\n---\nB.",
        )],
        &[crate::support::at(
            "agents/b.md",
            3,
            "`cwd` must not climb with `..`, got \"../up\": name a directory inside the workspace",
        )],
    );
}

#[test]
fn permission_rules_carry_their_source_defaults_first() {
    use flue_core::{Permission, permission::PermissionRule, permission::PermissionSource};
    let workspace = crate::support::load(&[
        (
            "flue.toml",
            "[defaults]\nmodel = \"anthropic/claude-sonnet-4-6\"\n[defaults.permissions]\n\"mcp__*\" = \"always_ask\"\n",
        ),
        (
            "agents/a.md",
            "---\npermissions:\n  \"mcp__docs__*\": always_allow\n---\nBody\n",
        ),
    ]);
    let config = workspace.agent_config("a").unwrap();
    assert_eq!(
        config.permissions,
        [
            PermissionRule::new("mcp__*", Permission::AlwaysAsk, PermissionSource::Defaults),
            PermissionRule::new(
                "mcp__docs__*",
                Permission::AlwaysAllow,
                PermissionSource::AgentFile
            ),
        ]
    );
}
