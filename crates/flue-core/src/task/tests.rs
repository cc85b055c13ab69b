//! Unit tests of what a task's session inherits from its parent, and of its name.

use pretty_assertions::assert_eq;

use super::*;
use crate::config::{AgentConfig, AgentProfile, Compaction, CompactionConfig};

fn parent_scope() -> AgentScope {
    let agent = AgentConfig::new()
        .with_model("p/parent")
        .with_thinking(ThinkingLevel::High)
        .with_compaction(Compaction::Disabled)
        .with_role("lead")
        .with_subagent(AgentProfile::new("plain"))
        .with_subagent(
            AgentProfile::new("own")
                .with_compaction(Compaction::Enabled(CompactionConfig {
                    keep_recent_tokens: Some(10),
                    ..CompactionConfig::default()
                }))
                .with_role("critic"),
        )
        .resolve()
        .unwrap();
    AgentScope::root(&agent, &[], "/w".into()).unwrap()
}

fn inherited() -> Inherited {
    Inherited {
        model: Some("p/call".into()),
        thinking: ThinkingLevel::Minimal,
    }
}

#[test]
fn a_subagent_inherits_compaction_unless_it_sets_its_own() {
    let parent = parent_scope();
    let plain = child_scope(&parent, Some("plain"), &inherited(), "/w/x".into()).unwrap();
    assert_eq!(
        (
            plain.compaction,
            plain.model,
            plain.thinking,
            plain.role,
            plain.cwd
        ),
        (
            Compaction::Disabled,
            Some("p/call".to_owned()),
            ThinkingLevel::Minimal,
            None,
            "/w/x".to_owned()
        )
    );
    let own = child_scope(&parent, Some("own"), &inherited(), "/w".into()).unwrap();
    assert_eq!(
        (own.compaction, own.role),
        (
            Compaction::Enabled(CompactionConfig {
                keep_recent_tokens: Some(10),
                ..CompactionConfig::default()
            }),
            Some("critic".to_owned())
        )
    );
}

#[test]
fn without_a_subagent_the_parents_scope_is_kept_with_the_callers_model() {
    let parent = parent_scope();
    let same = child_scope(&parent, None, &inherited(), "/w".into()).unwrap();
    assert_eq!(
        (same.subagent_names(), same.model, same.thinking, same.role),
        (
            vec!["plain".to_owned(), "own".to_owned()],
            Some("p/call".to_owned()),
            ThinkingLevel::Minimal,
            Some("lead".to_owned())
        )
    );
}

/// A tool source known by its label alone.
struct Labelled(&'static str);

impl crate::tool::ToolSource for Labelled {
    fn label(&self) -> String {
        self.0.to_owned()
    }

    fn tools(&self) -> Vec<crate::tool::ToolDefinition> {
        Vec::new()
    }
}

#[test]
fn a_subagent_gets_its_own_tool_sources_and_a_same_agent_task_the_parents() {
    let agent = AgentConfig::new()
        .with_tool_source(std::sync::Arc::new(Labelled("parent's server")))
        .with_subagent(
            AgentProfile::new("worker")
                .with_tool_source(std::sync::Arc::new(Labelled("worker's server"))),
        )
        .resolve()
        .unwrap();
    let parent = AgentScope::root(&agent, &[], "/w".into()).unwrap();
    let labels = |scope: &AgentScope| -> Vec<String> {
        scope
            .tool_sources
            .iter()
            .map(|source| source.label())
            .collect()
    };
    let worker = child_scope(&parent, Some("worker"), &inherited(), "/w".into()).unwrap();
    assert_eq!(labels(&worker), ["worker's server"]);
    let same = child_scope(&parent, None, &inherited(), "/w".into()).unwrap();
    assert_eq!(labels(&same), ["parent's server"]);
}

#[test]
fn a_task_calls_session_is_named_by_its_key_and_links_to_its_parent() {
    let key = crate::tool::idempotency_key("i", "default", "call_1");
    let name = task_session_for_call("default", &key);
    // The same call (every attempt) means the same task session; another call, another.
    assert_eq!(name, task_session_for_call("default", &key));
    let other = crate::tool::idempotency_key("i", "default", "call_2");
    assert_ne!(name, task_session_for_call("default", &other));
    assert_eq!(task_session_parent(&name), Some("default"));
    let nested = task_session_for_call(&name, &key);
    assert_eq!(task_session_parent(&nested), Some(name.as_str()));
    // Without a key (outside a session's tool call) every task is new.
    assert_ne!(
        task_session_for_call("default", ""),
        task_session_for_call("default", "")
    );
}
