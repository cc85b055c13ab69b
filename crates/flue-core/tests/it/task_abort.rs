//! Aborting one running task alone: the parent's `task` call answers `task_aborted`, a task
//! running beside it still delivers its answer, and the parent's operation completes.

use std::sync::Arc;

use flue_core::{
    AgentConfig, Event, EventStream, Outcome, PromptOptions, Record, ToolDefinition, ToolError,
};
use pretty_assertions::assert_eq;
use serde_json::json;
use tokio::sync::{Notify, mpsc};

use crate::rules::{Reply, RuleProvider, fixture};

/// A tool that reports its session on `started`, then waits until `release` or its abort.
fn waiting_tool(
    name: &'static str,
    started: mpsc::UnboundedSender<(&'static str, String)>,
    release: Arc<Notify>,
) -> ToolDefinition {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Input {}
    ToolDefinition::from_fn(name, "Waits.", move |_input: Input, ctx| {
        let started = started.clone();
        let release = Arc::clone(&release);
        async move {
            let _ = started.send((name, ctx.session.clone()));
            tokio::select! {
                () = release.notified() => Ok::<_, ToolError>(json!(format!("{name} released"))),
                () = ctx.cancel.cancelled() => Err(ToolError::new("aborted", "cancelled")),
            }
        }
    })
    .unwrap()
}

async fn drain(mut events: EventStream) -> Vec<Event> {
    let mut all = Vec::new();
    while let Some(event) = events.recv().await {
        all.push(event);
    }
    all
}

#[tokio::test]
async fn aborting_one_of_two_parallel_tasks_answers_its_call_and_the_parent_completes() {
    let provider = RuleProvider::new(|seen| {
        let first = seen.first_user_text();
        match (first.as_str(), seen.last_tool_result()) {
            ("lead", None) => Reply::Calls(vec![
                ("task", json!({"prompt": "slow"})),
                ("task", json!({"prompt": "quick"})),
            ]),
            ("lead", Some(_)) => Reply::Text("parent done".into()),
            ("slow", None) => Reply::Calls(vec![("hold", json!({}))]),
            ("quick", None) => Reply::Calls(vec![("gate", json!({}))]),
            (_, Some(result)) => Reply::Text(format!("{first}: {}", result.content)),
            _ => Reply::Text("unexpected".into()),
        }
    });
    let (started_tx, mut started_rx) = mpsc::unbounded_channel();
    let never = Arc::new(Notify::new());
    let gate = Arc::new(Notify::new());
    let agent = AgentConfig::new()
        .with_model("test/model")
        .with_tool(waiting_tool("hold", started_tx.clone(), Arc::clone(&never)))
        .with_tool(waiting_tool("gate", started_tx, Arc::clone(&gate)));
    let f = fixture(agent, provider, |builder| builder).await;
    let session = f.harness.session("default").await.unwrap();
    let mut handle = session.prompt("lead", PromptOptions::default());
    let events = handle.take_events().unwrap();

    // Both children are inside their tools before anything is aborted.
    let mut sessions = std::collections::HashMap::new();
    while sessions.len() < 2 {
        let (name, session) = started_rx.recv().await.unwrap();
        sessions.insert(name, session);
    }
    let slow = sessions["hold"].clone();
    let quick = sessions["gate"].clone();
    let mut running = f.harness.running_tasks();
    running.sort();
    let mut expected = vec![slow.clone(), quick.clone()];
    expected.sort();
    assert_eq!(running, expected);

    assert!(f.harness.abort_task(&slow));
    assert!(!f.harness.abort_task("task:default:not-running"));
    gate.notify_one();

    // A failure guard only: the parent ends as soon as both calls are answered.
    let response = tokio::time::timeout(std::time::Duration::from_secs(60), handle)
        .await
        .expect("the parent goes on after one task is aborted")
        .unwrap();
    assert_eq!(response.text, "parent done");
    assert!(f.harness.running_tasks().is_empty());

    // The parent's two `task` calls: the aborted one answered as such, the other with its text.
    let results: Vec<(bool, Option<String>, String)> = f
        .records("default")
        .await
        .into_iter()
        .filter_map(|record| match record {
            Record::ToolResult(result) => {
                Some((result.is_error, result.error_kind, result.content))
            }
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2);
    let aborted = results.iter().find(|(is_error, ..)| *is_error).unwrap();
    assert_eq!(aborted.1.as_deref(), Some("task_aborted"));
    assert!(aborted.2.contains("aborted by the user"), "{}", aborted.2);
    assert!(aborted.2.contains(&slow), "{}", aborted.2);
    let answered = results.iter().find(|(is_error, ..)| !*is_error).unwrap();
    assert!(
        answered.2.contains("quick: gate released"),
        "{}",
        answered.2
    );

    // The stream says which task ended how, and which call started each.
    let events = drain(events).await;
    let ends: std::collections::HashMap<String, Outcome> = events
        .iter()
        .filter_map(|event| match event {
            Event::TaskEnd {
                session, outcome, ..
            } => Some((session.clone(), *outcome)),
            _ => None,
        })
        .collect();
    assert_eq!(ends[&slow], Outcome::Aborted);
    assert_eq!(ends[&quick], Outcome::Completed);
    let calls: Vec<Option<String>> = events
        .iter()
        .filter_map(|event| match event {
            Event::TaskStart { call_id, .. } => Some(call_id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(calls.len(), 2);
    assert!(calls.iter().all(Option::is_some), "{calls:?}");
}

#[tokio::test]
async fn aborting_a_nested_task_answers_its_parent_task_which_goes_on() {
    let provider = RuleProvider::new(|seen| {
        let first = seen.first_user_text();
        match (first.as_str(), seen.last_tool_result()) {
            ("lead", None) => Reply::Calls(vec![("task", json!({"prompt": "middle"}))]),
            ("middle", None) => Reply::Calls(vec![("task", json!({"prompt": "deep"}))]),
            ("deep", None) => Reply::Calls(vec![("hold", json!({}))]),
            (_, Some(result)) => Reply::Text(format!("{first} got: {}", result.content)),
            _ => Reply::Text("unexpected".into()),
        }
    });
    let (started_tx, mut started_rx) = mpsc::unbounded_channel();
    let agent = AgentConfig::new()
        .with_model("test/model")
        .with_tool(waiting_tool("hold", started_tx, Arc::new(Notify::new())));
    let f = fixture(agent, provider, |builder| builder).await;
    let session = f.harness.session("default").await.unwrap();
    let mut handle = session.prompt("lead", PromptOptions::default());
    let events = handle.take_events().unwrap();

    let (_, deep) = started_rx.recv().await.unwrap();
    let middle = flue_core::util::task_session_parent(&deep)
        .unwrap()
        .to_owned();
    let mut running = f.harness.running_tasks();
    running.sort();
    let mut expected = vec![middle.clone(), deep.clone()];
    expected.sort();
    assert_eq!(running, expected);
    assert!(f.harness.abort_task(&deep));

    // A failure guard only: the tasks above go on as soon as the deep one is answered.
    let response = tokio::time::timeout(std::time::Duration::from_secs(60), handle)
        .await
        .expect("the tasks above go on after the nested one is aborted")
        .unwrap();
    assert!(response.text.starts_with("lead got: "), "{}", response.text);
    assert!(
        response
            .text
            .contains("middle got: the task was aborted by the user"),
        "{}",
        response.text
    );
    let events = drain(events).await;
    let ends: std::collections::HashMap<String, Outcome> = events
        .iter()
        .filter_map(|event| match event {
            Event::TaskEnd {
                session, outcome, ..
            } => Some((session.clone(), *outcome)),
            _ => None,
        })
        .collect();
    assert_eq!(ends[&deep], Outcome::Aborted);
    assert_eq!(ends[&middle], Outcome::Completed);
}
