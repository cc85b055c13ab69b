//! A task's activity (tool calls, turns) reaches the parent's event stream as it happens,
//! labelled with the task session, between the task's start and end; nested tasks too.

use flue_core::{
    AgentConfig, AgentProfile, Event, EventStream, PromptOptions, ToolDefinition, ToolError,
    util::task_session_parent,
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::rules::{Reply, RuleProvider, fixture};

async fn drain(mut events: EventStream) -> Vec<Event> {
    let mut all = Vec::new();
    while let Some(event) = events.recv().await {
        all.push(event);
    }
    all
}

fn note_tool() -> ToolDefinition {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Input {}
    ToolDefinition::from_fn("note", "Notes.", |_input: Input, _ctx| async move {
        Ok::<_, ToolError>(json!("noted"))
    })
    .unwrap()
}

/// The parent's stream, one line per event: `task_start S`, `S: tool_start note`, ...
fn outline(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|event| match event {
            Event::TaskStart { session, depth, .. } => {
                Some(format!("task_start {session} {depth}"))
            }
            Event::TaskEnd { session, .. } => Some(format!("task_end {session}")),
            Event::TaskActivity {
                session,
                depth,
                event,
            } => {
                let inner = match event.as_ref() {
                    Event::ToolStart { name, .. } => format!("tool_start {name}"),
                    Event::ToolEnd { name, .. } => format!("tool_end {name}"),
                    Event::TurnEnd { .. } => "turn_end".to_owned(),
                    other => format!("{other:?}"),
                };
                Some(format!("{session} {depth}: {inner}"))
            }
            Event::ToolStart { name, .. } => Some(format!("tool_start {name}")),
            Event::ToolEnd { name, .. } => Some(format!("tool_end {name}")),
            Event::TurnEnd { .. } => Some("turn_end".to_owned()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_tasks_tool_calls_and_turns_are_forwarded_labelled_with_its_session() {
    let provider = RuleProvider::new(|seen| {
        let lead = seen.first_user_text() == "lead";
        match (lead, seen.last_tool_result()) {
            (true, None) => Reply::Calls(vec![(
                "task",
                json!({"prompt": "inner", "agent": "helper"}),
            )]),
            (false, None) => Reply::Calls(vec![("note", json!({}))]),
            (_, Some(_)) => Reply::Text("done".into()),
        }
    });
    let f = fixture(
        AgentConfig::new()
            .with_model("test/model")
            .with_subagent(AgentProfile::new("helper").with_tool(note_tool())),
        provider,
        |builder| builder,
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let mut handle = session.prompt("lead", PromptOptions::default());
    let events = handle.take_events().unwrap();
    handle.await.unwrap();
    let events = drain(events).await;
    let task = events
        .iter()
        .find_map(|event| match event {
            Event::TaskStart { session, .. } => Some(session.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        outline(&events),
        [
            "turn_end".to_owned(),
            "tool_start task".to_owned(),
            format!("task_start {task} 1"),
            format!("{task} 1: turn_end"),
            format!("{task} 1: tool_start note"),
            format!("{task} 1: tool_end note"),
            format!("{task} 1: turn_end"),
            format!("task_end {task}"),
            "tool_end task".to_owned(),
            "turn_end".to_owned(),
        ]
    );
    // The wire shape names the session next to the wrapped event.
    let activity = events
        .iter()
        .find(|event| matches!(event, Event::TaskActivity { .. }))
        .unwrap();
    let wire: Value = serde_json::to_value(activity).unwrap();
    assert_eq!(wire["type"], "task_activity");
    assert_eq!(wire["session"], json!(task));
    assert_eq!(wire["event"]["type"], "turn_end");
}

#[tokio::test]
async fn nested_tasks_arrive_labelled_with_their_own_session_and_depth() {
    let provider = RuleProvider::new(|seen| match seen.last_tool_result() {
        None if seen.first_user_text() == "dig deeper" => Reply::Text("bottom".into()),
        None if seen.first_user_text() == "dig" => {
            Reply::Calls(vec![("task", json!({"prompt": "dig deeper"}))])
        }
        None => Reply::Calls(vec![("task", json!({"prompt": "dig"}))]),
        Some(_) => Reply::Text("up".into()),
    });
    let f = fixture(
        AgentConfig::new()
            .with_model("test/model")
            .with_subagent(AgentProfile::new("helper")),
        provider,
        |builder| builder,
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let mut handle = session.prompt("start", PromptOptions::default());
    let events = handle.take_events().unwrap();
    handle.await.unwrap();
    let events = drain(events).await;
    let labels: Vec<(u32, u32)> = events
        .iter()
        .filter_map(|event| match event {
            Event::TaskActivity { session, depth, .. } => {
                let mut levels = 0;
                let mut current = session.as_str();
                while let Some(parent) = task_session_parent(current) {
                    levels += 1;
                    current = parent;
                }
                Some((*depth, levels))
            }
            _ => None,
        })
        .collect();
    assert!(
        labels.iter().all(|(depth, levels)| depth == levels),
        "{labels:?}"
    );
    assert!(
        labels.contains(&(1, 1)) && labels.contains(&(2, 2)),
        "{labels:?}"
    );
}
