//! Pauses in one process: `always_ask` confirmations (allow, deny), custom tools fulfilled by
//! the application, interrupts, the typed errors around them, and resuming from the store in
//! a second harness.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use flue_core::{
    ActionDecision, AgentConfig, Event, FlueError, Harness, Outcome, Permission, PromptOptions,
    ProviderRegistry, Record, ToolDefinition, VirtualSandbox, record::ActionKind,
};
use flue_store::SqliteStore;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::rules::{Reply, RuleProvider, Seen, fixture, kinds};

/// A tool that counts its runs.
fn counting_tool(name: &'static str, runs: &Arc<AtomicUsize>) -> ToolDefinition {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Input {
        #[allow(dead_code, reason = "the schema is the point")]
        path: Option<String>,
    }
    let runs = Arc::clone(runs);
    ToolDefinition::from_fn(name, "Does something.", move |_input: Input, _ctx| {
        let runs = Arc::clone(&runs);
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok(json!(format!("{name} done")))
        }
    })
    .unwrap()
}

/// The model: `both` -> a `safe` and a `danger` call in one turn; `custom` -> a `lookup`
/// call; after tool results -> a summary of the last result; else echoes.
fn model() -> Arc<RuleProvider> {
    RuleProvider::new(|seen: &Seen| {
        if let Some(result) = seen.last_tool_result() {
            return Reply::Text(format!("after: {}", result.content));
        }
        match seen.messages.last() {
            Some(Record::User(message)) => match message.joined_text().as_str() {
                "both" => Reply::Calls(vec![
                    ("safe", json!({})),
                    ("danger", json!({"path": "/etc/x"})),
                ]),
                "custom" => Reply::Calls(vec![("lookup", json!({"id": "42"}))]),
                "check" => Reply::Calls(vec![("permissions_check", json!({}))]),
                other => Reply::Text(format!("echo: {other}")),
            },
            _ => Reply::Text("?".into()),
        }
    })
}

struct Tools {
    safe: Arc<AtomicUsize>,
    danger: Arc<AtomicUsize>,
}

fn agent(tools: &Tools) -> AgentConfig {
    let mut agent = AgentConfig::new()
        .with_model("test/model")
        .with_permission("dang*", Permission::AlwaysAsk);
    agent.tools = vec![
        counting_tool("safe", &tools.safe),
        counting_tool("danger", &tools.danger),
        ToolDefinition::custom(
            "lookup",
            "Looks an order up.",
            json!({"type": "object", "properties": {"id": {"type": "string"}}}),
        )
        .unwrap()
        .with_output_schema(json!({"type": "object", "required": ["status"]}))
        .unwrap(),
    ];
    agent
}

fn tools() -> Tools {
    Tools {
        safe: Arc::new(AtomicUsize::new(0)),
        danger: Arc::new(AtomicUsize::new(0)),
    }
}

async fn events_of(
    mut handle: flue_core::CallHandle<flue_core::PromptResponse>,
) -> (flue_core::Result<flue_core::PromptResponse>, Vec<Event>) {
    let mut events = handle.take_events().unwrap();
    let result = handle.await;
    let mut all = Vec::new();
    while let Some(event) = events.recv().await {
        all.push(event);
    }
    (result, all)
}

fn end_outcome(events: &[Event]) -> Option<Outcome> {
    events.iter().find_map(|event| match event {
        Event::OperationEnd { outcome, .. } => Some(*outcome),
        _ => None,
    })
}

#[tokio::test]
async fn an_always_ask_call_pauses_before_its_side_effect_and_runs_once_when_allowed() {
    let tools = tools();
    let f = fixture(agent(&tools), model(), |builder| builder).await;
    let session = f.harness.session("default").await.unwrap();

    let (paused, events) = events_of(session.prompt("both", PromptOptions::default())).await;
    let paused = paused.unwrap();
    assert_eq!(end_outcome(&events), Some(Outcome::RequiresAction));
    assert!(paused.requires_action());
    let action = paused.pending_actions[0].clone();
    assert_eq!(
        (action.tool_name.as_str(), action.kind, &action.input),
        (
            "danger",
            ActionKind::Confirmation,
            &json!({"path": "/etc/x"})
        )
    );
    assert!(action.reason.contains("dang*"), "{}", action.reason);
    assert!(
        events
            .iter()
            .any(|event| matches!(event, Event::ActionRequired { .. }))
    );
    // The allowed call of the same turn ran; the asking one did not.
    assert_eq!(tools.safe.load(Ordering::SeqCst), 1);
    assert_eq!(tools.danger.load(Ordering::SeqCst), 0);
    assert_eq!(
        kinds(&f.records("default").await),
        ["user", "assistant", "tool", "action_required:danger"]
    );

    // A new prompt is refused, naming the action; the session is idle, not busy.
    let err = session
        .prompt("something else", PromptOptions::default())
        .await
        .unwrap_err();
    match &err {
        FlueError::ActionsPending { actions, .. } => {
            assert_eq!(actions, std::slice::from_ref(&action.action_id));
        }
        other => panic!("expected actions_pending, got {other:?}"),
    }

    let (done, events) = events_of(session.resolve(&action.action_id, ActionDecision::Allow)).await;
    let done = done.unwrap();
    assert_eq!(end_outcome(&events), Some(Outcome::Completed));
    assert_eq!(done.text, "after: danger done");
    assert_eq!(tools.danger.load(Ordering::SeqCst), 1);
    assert_eq!(
        kinds(&f.records("default").await),
        [
            "user",
            "assistant",
            "tool",
            "action_required:danger",
            "action_resolved",
            "action_started",
            "tool",
            "assistant"
        ]
    );

    // The first decision won.
    let again = session
        .resolve(&action.action_id, ActionDecision::Deny { message: None })
        .await
        .unwrap_err();
    assert_eq!(again.kind(), "action_already_resolved");
    let unknown = session
        .resolve("act_nope", ActionDecision::Allow)
        .await
        .unwrap_err();
    assert_eq!(unknown.kind(), "action_not_found");
    assert_eq!(tools.danger.load(Ordering::SeqCst), 1);
    let listed = session.actions().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].decision, Some(ActionDecision::Allow));
}

#[tokio::test]
async fn a_denied_call_is_an_error_the_model_sees_and_carries_on_from() {
    let tools = tools();
    let provider = model();
    let f = fixture(agent(&tools), provider.clone(), |builder| builder).await;
    let session = f.harness.session("default").await.unwrap();
    let paused = session
        .prompt("both", PromptOptions::default())
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
    assert_eq!(tools.danger.load(Ordering::SeqCst), 0);
    assert!(done.text.contains("not on production"), "{}", done.text);
    let last_result = provider
        .seen()
        .last()
        .unwrap()
        .last_tool_result()
        .cloned()
        .unwrap();
    assert_eq!(
        (last_result.is_error, last_result.error_kind.as_deref()),
        (true, Some("permission_denied"))
    );
}

#[tokio::test]
async fn a_custom_tool_pauses_with_its_event_and_takes_the_applications_result() {
    let tools = tools();
    let f = fixture(agent(&tools), model(), |builder| builder).await;
    let session = f.harness.session("default").await.unwrap();
    let (paused, events) = events_of(session.prompt("custom", PromptOptions::default())).await;
    let action = paused.unwrap().pending_actions[0].clone();
    assert_eq!(action.kind, ActionKind::CustomTool);
    assert!(events.iter().any(|event| matches!(
        event,
        Event::CustomToolUse { name, input, .. } if name == "lookup" && input == &json!({"id": "42"})
    )));
    let wrong = session
        .resolve(&action.action_id, ActionDecision::Allow)
        .await
        .unwrap_err();
    assert_eq!(wrong.kind(), "invalid_decision");
    // The output schema checks the result; the action stays pending.
    assert_eq!(
        action.output_schema,
        Some(json!({"type": "object", "required": ["status"]}))
    );
    let misfit = session
        .resolve(
            &action.action_id,
            ActionDecision::Result {
                value: json!({"state": "shipped"}),
                is_error: false,
            },
        )
        .await
        .unwrap_err();
    assert_eq!(misfit.kind(), "invalid_decision");
    assert!(misfit.to_string().contains("\"status\""), "{misfit}");
    assert_eq!(session.pending_actions().await.unwrap().len(), 1);
    let done = session
        .resolve(
            &action.action_id,
            ActionDecision::Result {
                value: json!({"status": "shipped"}),
                is_error: false,
            },
        )
        .await
        .unwrap();
    assert_eq!(done.text, r#"after: {"status":"shipped"}"#);
}

#[tokio::test]
async fn an_interrupt_answers_every_pending_action_and_may_bring_a_new_message() {
    let tools = tools();
    let provider = model();
    let f = fixture(agent(&tools), provider.clone(), |builder| builder).await;
    let session = f.harness.session("default").await.unwrap();
    session
        .prompt("both", PromptOptions::default())
        .await
        .unwrap();
    let done = session.interrupt(Some("never mind")).await.unwrap();
    assert_eq!(done.text, "echo: never mind");
    assert!(session.pending_actions().await.unwrap().is_empty());
    assert_eq!(tools.danger.load(Ordering::SeqCst), 0);
    let records = f.records("default").await;
    assert_eq!(
        kinds(&records)[3..],
        [
            "action_required:danger",
            "action_resolved",
            "tool_error:interrupted",
            "user",
            "assistant"
        ]
    );

    // Without a message, an interrupt only answers.
    session
        .prompt("custom", PromptOptions::default())
        .await
        .unwrap();
    let n_turns = provider.seen().len();
    let quiet = session.interrupt(None).await.unwrap();
    assert!(!quiet.requires_action());
    assert_eq!(provider.seen().len(), n_turns, "no model call");
    assert!(session.pending_actions().await.unwrap().is_empty());
}

#[tokio::test]
async fn another_harness_on_the_same_store_resolves_from_the_log_alone() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("flue.db");
    let tools = tools();
    let build = |tools: &Tools| {
        let store = Arc::new(SqliteStore::open(&db).unwrap());
        Harness::builder(agent(tools))
            .with_instance_id("pause-1")
            .with_store(store)
            .with_providers(ProviderRegistry::new().with_provider(model()))
            .with_sandbox(Arc::new(VirtualSandbox::new()))
            .with_workspace_context(None)
            .build()
    };
    let first = build(&tools).await.unwrap();
    let paused = first
        .session("default")
        .await
        .unwrap()
        .prompt("both", PromptOptions::default())
        .await
        .unwrap();
    drop(first);
    let second = build(&tools).await.unwrap();
    let session = second.session("default").await.unwrap();
    let pending = session.pending_actions().await.unwrap();
    assert_eq!(pending, paused.pending_actions);
    let done = session
        .resolve(&pending[0].action_id, ActionDecision::Allow)
        .await
        .unwrap();
    assert_eq!(done.text, "after: danger done");
    assert_eq!(tools.danger.load(Ordering::SeqCst), 1);
    let value: Value = serde_json::to_value(session.actions().await.unwrap()).unwrap();
    assert_eq!(value[0]["decision"], json!({"decision": "allow"}));
    assert_eq!(value[0]["tool_name"], json!("danger"));
}

#[tokio::test]
async fn the_preflight_tool_tells_which_tools_pause() {
    let tools = tools();
    let provider = model();
    let f = fixture(agent(&tools), provider.clone(), |builder| builder).await;
    let session = f.harness.session("default").await.unwrap();
    let done = session
        .prompt("check", PromptOptions::default())
        .await
        .unwrap();
    assert!(
        provider.seen()[0]
            .tool_names()
            .contains(&"permissions_check")
    );
    let listed: Value = serde_json::from_str(done.text.strip_prefix("after: ").unwrap()).unwrap();
    let verdicts: Vec<(&str, &str)> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| {
            (
                tool["tool"].as_str().unwrap(),
                tool["when_called"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        verdicts,
        [("danger", "confirmation"), ("lookup", "application")]
    );

    // An agent whose tools never pause does not get the tool.
    let plain = fixture(
        AgentConfig::new().with_model("test/model"),
        provider.clone(),
        |builder| builder,
    )
    .await;
    let n_seen = provider.seen().len();
    plain
        .harness
        .session("default")
        .await
        .unwrap()
        .prompt("hello", PromptOptions::default())
        .await
        .unwrap();
    assert!(
        !provider.seen()[n_seen]
            .tool_names()
            .contains(&"permissions_check")
    );
}
