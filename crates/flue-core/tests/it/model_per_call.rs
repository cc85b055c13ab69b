//! `model: false` (`with_model_per_call`): an agent or subagent profile without a default
//! model, whose every call must choose one; a subagent so marked does not inherit its parent's.

use flue_core::{AgentConfig, AgentProfile, PromptOptions, TaskOptions};
use pretty_assertions::assert_eq;

use crate::rules::{Reply, RuleProvider, fixture};

fn echo() -> std::sync::Arc<RuleProvider> {
    RuleProvider::new(|_seen| Reply::Text("ok".into()))
}

#[tokio::test]
async fn an_agent_without_a_default_model_needs_one_per_call() {
    let provider = echo();
    let f = fixture(
        AgentConfig::new().with_model_per_call(),
        provider.clone(),
        |builder| builder,
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let err = session
        .prompt("hi", PromptOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "model_not_configured");
    let reply = session
        .prompt("hi", PromptOptions::default().with_model("test/chosen"))
        .await
        .unwrap();
    assert_eq!(reply.text, "ok");
    let models: Vec<String> = provider.seen().into_iter().map(|seen| seen.model).collect();
    assert_eq!(models, ["chosen"]);
}

#[tokio::test]
async fn a_per_call_subagent_does_not_inherit_its_parents_model() {
    let provider = echo();
    let f = fixture(
        AgentConfig::new()
            .with_model("test/parent")
            .with_subagent(AgentProfile::new("picky").with_model_per_call())
            .with_subagent(AgentProfile::new("easy")),
        provider.clone(),
        |builder| builder,
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let err = session
        .task("x", TaskOptions::default().with_agent("picky"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "model_not_configured");
    session
        .task(
            "x",
            TaskOptions::default()
                .with_agent("picky")
                .with_model("test/chosen"),
        )
        .await
        .unwrap();
    session
        .task("x", TaskOptions::default().with_agent("easy"))
        .await
        .unwrap();
    let models: Vec<String> = provider.seen().into_iter().map(|seen| seen.model).collect();
    assert_eq!(models, ["chosen", "parent"]);
}

#[test]
fn a_model_given_with_the_agent_wins_over_the_profiles_model_false() {
    let profile = AgentProfile::new("base").with_model_per_call();
    let resolved = AgentConfig::new()
        .with_profile(profile.clone())
        .with_model("test/override")
        .resolve()
        .unwrap();
    assert_eq!(resolved.model.as_deref(), Some("test/override"));
    let resolved = AgentConfig::new()
        .with_profile(AgentProfile::new("base").with_model("test/base"))
        .with_model_per_call()
        .resolve()
        .unwrap();
    assert_eq!(resolved.model, None);
}

#[test]
fn a_profile_may_not_set_both_a_model_and_model_false() {
    let mut profile = AgentProfile::new("both").with_model("test/x");
    profile.model_per_call = true;
    let err = profile.validate().unwrap_err();
    assert_eq!(err.kind(), "invalid_config");
    assert!(
        err.to_string()
            .contains("sets both a model and `model: false`"),
        "{err}"
    );
}
