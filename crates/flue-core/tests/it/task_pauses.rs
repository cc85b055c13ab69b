//! Pauses inside tasks: a subagent's `always_ask` call pauses the whole conversation, is
//! listed (with its session) by the root, and resolving it resumes the subagent and then its
//! parent from the stored logs, in this harness or another one on the same store.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use flue_core::{
    ActionDecision, AgentConfig, AgentProfile, Event, Harness, Permission, PromptOptions,
    ProviderRegistry, Record, TaskOptions, ToolDefinition, VirtualSandbox, record::ActionKind,
};
use flue_store::SqliteStore;
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::rules::{Reply, RuleProvider, Seen, fixture, kinds};

fn danger_tool(runs: &Arc<AtomicUsize>) -> ToolDefinition {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Input {
        #[allow(dead_code, reason = "the schema is the point")]
        path: Option<String>,
    }
    let runs = Arc::clone(runs);
    ToolDefinition::from_fn(
        "danger",
        "Does something risky.",
        move |_input: Input, _ctx| {
            let runs = Arc::clone(&runs);
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok(json!("danger done"))
            }
        },
    )
    .unwrap()
}

/// The model: `delegate` -> a `task` call to the `cleaner`; `clean` (the task's prompt) -> a
/// `danger` call; after a tool result -> a summary of it; else echoes.
fn model() -> Arc<RuleProvider> {
    RuleProvider::new(|seen: &Seen| {
        if let Some(result) = seen.last_tool_result() {
            return Reply::Text(format!("after: {}", result.content));
        }
        match seen.messages.last() {
            Some(Record::User(message)) => match message.joined_text().as_str() {
                "delegate" => Reply::Calls(vec![(
                    "task",
                    json!({"prompt": "clean", "agent": "cleaner"}),
                )]),
                "clean" => Reply::Calls(vec![("danger", json!({"path": "/etc/x"}))]),
                other => Reply::Text(format!("echo: {other}")),
            },
            _ => Reply::Text("?".into()),
        }
    })
}

fn agent(runs: &Arc<AtomicUsize>) -> AgentConfig {
    AgentConfig::new()
        .with_model("test/model")
        .with_permission("danger", Permission::AlwaysAsk)
        .with_subagent(AgentProfile::new("cleaner").with_tool(danger_tool(runs)))
}

#[tokio::test]
async fn a_subagents_always_ask_call_pauses_the_conversation_and_runs_once_when_allowed() {
    let runs = Arc::new(AtomicUsize::new(0));
    let f = fixture(agent(&runs), model(), |builder| builder).await;
    let session = f.harness.session("default").await.unwrap();

    let mut handle = session.prompt("delegate", PromptOptions::default());
    let mut events = handle.take_events().unwrap();
    let paused = handle.await.unwrap();
    let mut seen_events = Vec::new();
    while let Some(event) = events.recv().await {
        seen_events.push(event);
    }
    assert!(paused.requires_action());
    assert_eq!(paused.pending_actions.len(), 1);
    let action = paused.pending_actions[0].clone();
    assert_eq!(
        (action.tool_name.as_str(), action.kind, &action.input),
        (
            "danger",
            ActionKind::Confirmation,
            &json!({"path": "/etc/x"})
        )
    );
    let child = action.session.clone().unwrap();
    assert_eq!(
        flue_core::util::task_session_parent(&child),
        Some("default")
    );
    assert!(action.action_id.starts_with("act_"), "{}", action.action_id);
    // The root's stream announces the subagent's action.
    assert!(seen_events.iter().any(|event| matches!(
        event,
        Event::ActionRequired { action: announced } if announced.action_id == action.action_id
    )));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    // The root lists the subagent's action; the parent's `task` call waits.
    assert_eq!(
        session.pending_actions().await.unwrap(),
        vec![action.clone()]
    );
    assert_eq!(
        kinds(&f.records("default").await),
        ["user", "assistant", "attempt:task", "action_required:task"]
    );
    assert_eq!(
        kinds(&f.records(&child).await),
        ["user", "assistant", "action_required:danger"]
    );
    let refused = session
        .prompt("something else", PromptOptions::default())
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), "actions_pending");
    assert!(refused.to_string().contains(&action.action_id), "{refused}");
    // A `task` call's own action is not decided directly.
    let task_action = f
        .records("default")
        .await
        .iter()
        .find_map(|record| match record {
            Record::ActionRequired(action) => Some(action.action_id.clone()),
            _ => None,
        });
    let wrong = session
        .resolve(&task_action.unwrap(), ActionDecision::Allow)
        .await
        .unwrap_err();
    assert_eq!(wrong.kind(), "invalid_decision");

    let done = session
        .resolve(&action.action_id, ActionDecision::Allow)
        .await
        .unwrap();
    assert!(!done.requires_action());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // The parent got the task's answer as its `task` call's result.
    assert!(done.text.starts_with("after: "), "{}", done.text);
    assert!(done.text.contains("after: danger done"), "{}", done.text);
    assert!(done.text.contains(&child), "{}", done.text);
    assert!(session.pending_actions().await.unwrap().is_empty());
    let again = session
        .resolve(&action.action_id, ActionDecision::Allow)
        .await
        .unwrap_err();
    assert_eq!(again.kind(), "action_already_resolved");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let listed = session.actions().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].decision, Some(ActionDecision::Allow));
    // The conversation carries on.
    let next = session
        .prompt("hello", PromptOptions::default())
        .await
        .unwrap();
    assert_eq!(next.text, "echo: hello");
}

#[tokio::test]
async fn a_denied_subagent_call_reaches_the_subagent_and_the_parent_gets_its_answer() {
    let runs = Arc::new(AtomicUsize::new(0));
    let provider = model();
    let f = fixture(agent(&runs), provider.clone(), |builder| builder).await;
    let session = f.harness.session("default").await.unwrap();
    let paused = session
        .prompt("delegate", PromptOptions::default())
        .await
        .unwrap();
    let action_id = paused.pending_actions[0].action_id.clone();
    let done = session
        .resolve(
            &action_id,
            ActionDecision::Deny {
                message: Some("not on production".into()),
            },
        )
        .await
        .unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert!(done.text.contains("not on production"), "{}", done.text);
    let child_saw = provider
        .seen()
        .iter()
        .filter_map(|seen| seen.last_tool_result().cloned())
        .find(|result| result.tool_name == "danger")
        .unwrap();
    assert_eq!(child_saw.error_kind.as_deref(), Some("permission_denied"));
}

#[tokio::test]
async fn an_interrupt_answers_the_subagents_actions_too() {
    let runs = Arc::new(AtomicUsize::new(0));
    let f = fixture(agent(&runs), model(), |builder| builder).await;
    let session = f.harness.session("default").await.unwrap();
    let paused = session
        .prompt("delegate", PromptOptions::default())
        .await
        .unwrap();
    let child = paused.pending_actions[0].session.clone().unwrap();
    let done = session.interrupt(Some("never mind")).await.unwrap();
    assert_eq!(done.text, "echo: never mind");
    assert!(session.pending_actions().await.unwrap().is_empty());
    assert_eq!(
        kinds(&f.records(&child).await),
        [
            "user",
            "assistant",
            "action_required:danger",
            "action_resolved"
        ]
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_task_from_code_still_cannot_pause() {
    let runs = Arc::new(AtomicUsize::new(0));
    let f = fixture(agent(&runs), model(), |builder| builder).await;
    let session = f.harness.session("default").await.unwrap();
    let done = session
        .task("clean", TaskOptions::default().with_agent("cleaner"))
        .await
        .unwrap();
    assert!(!done.requires_action());
    assert!(done.text.contains("cannot pause"), "{}", done.text);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn another_harness_on_the_same_store_resumes_the_subagent_and_its_parent() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("flue.db");
    let runs = Arc::new(AtomicUsize::new(0));
    let build = |runs: &Arc<AtomicUsize>| {
        let store = Arc::new(SqliteStore::open(&db).unwrap());
        Harness::builder(agent(runs))
            .with_instance_id("task-pause-1")
            .with_store(store)
            .with_providers(ProviderRegistry::new().with_provider(model()))
            .with_sandbox(Arc::new(VirtualSandbox::new()))
            .with_workspace_context(None)
            .build()
    };
    let first = build(&runs).await.unwrap();
    let paused = first
        .session("default")
        .await
        .unwrap()
        .prompt("delegate", PromptOptions::default())
        .await
        .unwrap();
    drop(first);
    let second = build(&runs).await.unwrap();
    let session = second.session("default").await.unwrap();
    let pending = session.pending_actions().await.unwrap();
    assert_eq!(pending, paused.pending_actions);
    let done = session
        .resolve(&pending[0].action_id, ActionDecision::Allow)
        .await
        .unwrap();
    assert!(done.text.contains("after: danger done"), "{}", done.text);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(session.pending_actions().await.unwrap().is_empty());
}
