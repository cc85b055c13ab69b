//! Roles: persona overlays for one call, model precedence, session and agent defaults, errors.

use std::sync::Arc;

use flue_core::{
    AgentConfig, FlueError, Harness, LocalSandbox, PromptOptions, ProviderRegistry, Role,
    ThinkingLevel,
};
use pretty_assertions::assert_eq;

use crate::rules::{Reply, RuleProvider, fixture, kinds};

fn roles() -> Vec<Role> {
    vec![
        Role::new("auditor", "Thinks like an attacker")
            .with_instructions("You are a security auditor.")
            .with_model("test/strong")
            .with_thinking(ThinkingLevel::High),
        Role::new("editor", "Polishes prose").with_instructions("You are a copy editor."),
    ]
}

const AUDITOR: &str = "# Role: auditor\n\nFor this request you act in this role.\n\n\
                       You are a security auditor.";

/// (model, thinking, system) of every request.
fn requests(provider: &RuleProvider) -> Vec<(String, ThinkingLevel, String)> {
    provider
        .seen()
        .into_iter()
        .map(|seen| (seen.model, seen.thinking, seen.system))
        .collect()
}

#[tokio::test]
async fn a_role_overlays_one_call_and_model_precedence_is_call_role_agent() {
    let provider = RuleProvider::new(|_| Reply::Text("ok".into()));
    let f = fixture(
        AgentConfig::new()
            .with_model("test/agent")
            .with_instructions("Be brief.")
            .with_thinking(ThinkingLevel::Low),
        provider.clone(),
        |builder| builder.with_roles(roles()),
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    for options in [
        PromptOptions::default().with_role("auditor"),
        PromptOptions::default(),
        PromptOptions::default()
            .with_role("auditor")
            .with_model("test/call")
            .with_thinking(ThinkingLevel::Minimal),
        PromptOptions::default().with_role("editor"),
    ] {
        session.prompt("check", options).await.unwrap();
    }
    assert_eq!(
        requests(&provider),
        vec![
            (
                "strong".to_owned(),
                ThinkingLevel::High,
                format!("Be brief.\n\n{AUDITOR}")
            ),
            (
                "agent".to_owned(),
                ThinkingLevel::Low,
                "Be brief.".to_owned()
            ),
            (
                "call".to_owned(),
                ThinkingLevel::Minimal,
                format!("Be brief.\n\n{AUDITOR}")
            ),
            (
                "agent".to_owned(),
                ThinkingLevel::Low,
                "Be brief.\n\n# Role: editor\n\nFor this request you act in this role.\n\n\
                 You are a copy editor."
                    .to_owned()
            ),
        ]
    );
    // Nothing of a role is persisted: only the conversation is.
    assert_eq!(
        kinds(&session.records().await),
        ["user", "assistant"].repeat(4)
    );
    let stored = serde_json::to_string(&f.records("default").await).unwrap();
    assert!(!stored.contains("auditor"), "{stored}");
}

#[tokio::test]
async fn a_session_default_role_applies_until_changed_and_calls_override_it() {
    let provider = RuleProvider::new(|_| Reply::Text("ok".into()));
    let f = fixture(
        AgentConfig::new()
            .with_model("test/agent")
            .with_role("editor"),
        provider.clone(),
        |builder| builder.with_roles(roles()),
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    assert_eq!(session.role().as_deref(), Some("editor"));
    session.prompt("a", PromptOptions::default()).await.unwrap();
    session.set_role(Some("auditor")).unwrap();
    // Every handle of the session shares its default role.
    let other_handle = f.harness.session("default").await.unwrap();
    assert_eq!(other_handle.role().as_deref(), Some("auditor"));
    session.prompt("b", PromptOptions::default()).await.unwrap();
    session
        .prompt("c", PromptOptions::default().with_role("editor"))
        .await
        .unwrap();
    session.set_role(None).unwrap();
    session.prompt("d", PromptOptions::default()).await.unwrap();
    let roles: Vec<Option<String>> = provider
        .seen()
        .iter()
        .map(|seen| {
            seen.system
                .split("# Role: ")
                .nth(1)
                .map(|rest| rest.lines().next().unwrap().to_owned())
        })
        .collect();
    assert_eq!(
        roles,
        vec![
            Some("editor".to_owned()),
            Some("auditor".to_owned()),
            Some("editor".to_owned()),
            None
        ]
    );
}

#[tokio::test]
async fn unknown_roles_are_typed_errors_listing_the_roles() {
    let provider = RuleProvider::new(|_| Reply::Text("never".into()));
    let f = fixture(
        AgentConfig::new().with_model("test/agent"),
        provider.clone(),
        |builder| builder.with_roles(roles()),
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let err = session
        .prompt("x", PromptOptions::default().with_role("hacker"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "unknown_role");
    assert_eq!(
        err.to_string(),
        "unknown role \"hacker\" (roles: auditor, editor)"
    );
    let err = session.set_role(Some("hacker")).unwrap_err();
    assert!(matches!(
        err,
        FlueError::UnknownRole { ref role, ref known } if role == "hacker" && known == &["auditor", "editor"]
    ));
    assert!(provider.seen().is_empty());
    assert_eq!(session.version().await, 0);
}

#[tokio::test]
async fn an_agent_default_role_that_does_not_exist_fails_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let provider = RuleProvider::new(|_| Reply::Text("never".into()));
    let err = Harness::builder(
        AgentConfig::new()
            .with_model("test/agent")
            .with_role("ghost"),
    )
    .with_providers(ProviderRegistry::new().with_provider(provider))
    .with_sandbox(Arc::new(LocalSandbox::new(dir.path()).unwrap()))
    .with_roles(roles())
    .build()
    .await
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "agent \"agent\": unknown role \"ghost\" (roles: auditor, editor)"
    );
}
