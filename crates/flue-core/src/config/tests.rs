//! Unit tests of profile validation and the agent-over-profile merge rules.

use pretty_assertions::assert_eq;
use serde_json::json;

use super::*;
use crate::action::ActionDefinition;

fn tool(name: &str) -> ToolDefinition {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Input {}
    ToolDefinition::from_fn(name, "A tool.", |_input: Input, _ctx| async {
        Ok(json!(null))
    })
    .unwrap()
}

fn skill(name: &str) -> Skill {
    Skill::new(name, "A skill.")
}

fn tool_names(agent: &ResolvedAgent) -> Vec<&str> {
    agent.tools.iter().map(ToolDefinition::name).collect()
}

fn message(result: Result<impl std::fmt::Debug>) -> String {
    result.unwrap_err().to_string()
}

#[test]
fn the_profile_is_the_baseline_and_agent_scalars_replace_it() {
    let profile = AgentProfile::new("base")
        .with_model("a/one")
        .with_instructions("from profile")
        .with_thinking(ThinkingLevel::Low)
        .with_description("profile description");
    let agent = AgentConfig::new()
        .with_profile(profile.clone())
        .with_model("b/two")
        .resolve()
        .unwrap();
    assert_eq!(agent.name, "base");
    assert_eq!(agent.model.as_deref(), Some("b/two"));
    assert_eq!(agent.instructions, "from profile");
    assert_eq!(agent.thinking, ThinkingLevel::Low);
    assert_eq!(agent.description.as_deref(), Some("profile description"));

    let agent = AgentConfig::new()
        .with_profile(profile)
        .with_name("mine")
        .with_instructions("mine")
        .with_thinking(ThinkingLevel::High)
        .resolve()
        .unwrap();
    assert_eq!(
        (agent.name.as_str(), agent.instructions.as_str()),
        ("mine", "mine")
    );
    assert_eq!(agent.thinking, ThinkingLevel::High);
}

#[test]
fn lists_concatenate_profile_first() {
    let profile = AgentProfile::new("base")
        .with_tool(tool("a"))
        .with_skill(skill("s1"));
    let agent = AgentConfig::new()
        .with_profile(profile)
        .with_tool(tool("b"))
        .with_skill(skill("s2"))
        .resolve()
        .unwrap();
    assert_eq!(tool_names(&agent), vec!["a", "b"]);
    let skills: Vec<&str> = agent.skills.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(skills, vec!["s1", "s2"]);
}

#[test]
fn duplicates_after_concatenation_are_errors_all_reported() {
    let profile = AgentProfile::new("base")
        .with_tool(tool("a"))
        .with_skill(skill("s"));
    let err = AgentConfig::new()
        .with_profile(profile)
        .with_tool(tool("a"))
        .with_skill(skill("s"))
        .with_subagent(AgentProfile::new("x"))
        .with_subagent(AgentProfile::new("x"))
        .resolve();
    assert_eq!(
        message(err),
        "agent base: duplicate skill \"s\"; agent base: duplicate tool \"a\"; \
         agent base: duplicate subagent \"x\""
            .replace("agent base", "agent")
    );
}

#[test]
fn defaults_apply_when_nothing_is_set() {
    let agent = AgentConfig::new().resolve().unwrap();
    assert_eq!(agent.name, "agent");
    assert_eq!(agent.model, None);
    assert_eq!(agent.thinking, ThinkingLevel::Off);
    assert_eq!(
        agent.compaction,
        Compaction::Enabled(CompactionConfig::default())
    );
    assert_eq!(
        agent.durability,
        DurabilityConfig {
            max_attempts: 10,
            timeout_ms: 3_600_000
        }
    );
    assert_eq!(agent.max_turns, DEFAULT_MAX_TURNS);
}

#[test]
fn names_and_models_are_checked() {
    let err = AgentProfile::new("bad name!")
        .with_model("no-slash")
        .with_skill(skill(""))
        .validate();
    assert_eq!(
        message(err),
        "profile name \"bad name!\" may only contain letters, digits, '_' and '-'; \
         profile: invalid model specifier \"no-slash\": expected \"<provider>/<model>\"; \
         profile: skill name \"\" is empty"
    );
    assert!(AgentProfile::new("x".repeat(65)).validate().is_err());
    assert!(
        AgentProfile::new("ok-name_1")
            .with_model("p/m/with/slashes")
            .validate()
            .is_ok()
    );
}

#[test]
fn circular_subagents_are_rejected_with_the_cycle() {
    let inner = AgentProfile::new("b").with_subagent(AgentProfile::new("a"));
    let err = AgentProfile::new("a").with_subagent(inner).validate();
    assert_eq!(message(err), "circular subagents: a -> b -> a");
    let self_loop = AgentProfile::new("a")
        .with_subagent(AgentProfile::new("a"))
        .validate();
    assert_eq!(message(self_loop), "circular subagents: a -> a");
}

#[test]
fn subagents_need_names_and_no_durability() {
    let mut durable = AgentProfile::new("worker");
    durable.durability = Some(DurabilityConfig::default());
    let err = AgentProfile::new("lead")
        .with_subagent(AgentProfile::default())
        .with_subagent(durable)
        .validate();
    assert_eq!(
        message(err),
        "subagent profile (lead): every subagent profile needs a name; \
         subagent \"worker\": durability is not allowed on subagent profiles"
            .replace("subagent profile (lead)", "profile")
    );
}

#[test]
fn max_turns_must_be_positive() {
    assert_eq!(
        message(AgentConfig::new().with_max_turns(0).resolve()),
        "max_turns must be at least 1"
    );
}

#[test]
fn a_bad_thinking_level_is_a_config_error_with_the_protocol_message() {
    let err = FlueError::from("extreme".parse::<ThinkingLevel>().unwrap_err());
    assert_eq!(err.kind(), "invalid_config");
    assert_eq!(
        message(Err::<(), _>(err)),
        "invalid thinking level \"extreme\": expected one of off, minimal, low, medium, high, xhigh"
    );
}

fn action(name: &str) -> ActionDefinition {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Input {}
    ActionDefinition::from_fn(name, "An action.", |_input: Input, _ctx| async {
        Ok::<_, crate::tool::ToolError>(json!(null))
    })
    .unwrap()
}

#[test]
fn actions_concatenate_and_collide_with_tools_and_each_other_at_every_level() {
    let resolved = AgentConfig::new()
        .with_profile(AgentProfile::new("base").with_action(action("a")))
        .with_action(action("b"))
        .resolve()
        .unwrap();
    let names: Vec<&str> = resolved.actions.iter().map(ToolDefinition::name).collect();
    assert_eq!(names, ["a", "b"]);

    let helper = AgentProfile::new("helper")
        .with_tool(tool("x"))
        .with_action(action("x"));
    let err = message(
        AgentConfig::new()
            .with_profile(AgentProfile::new("base").with_action(action("a")))
            .with_action(action("a"))
            .with_subagent(helper)
            .resolve(),
    );
    assert_eq!(
        err,
        "agent: duplicate action \"a\"; subagent \"helper\": action \"x\" \
         has the name of a tool; the model calls both by name, rename one"
    );
}
