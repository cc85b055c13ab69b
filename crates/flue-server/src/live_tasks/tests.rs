//! What a console page opened while tasks run is sent first.

use flue_core::submission::RuntimeEvent;
use flue_core::{ConversationKey, Event, ModelRef, Outcome, StopReason, Usage};
use pretty_assertions::assert_eq;
use serde_json::json;

use super::LiveTasks;

fn on(conversation: &str, event: Event) -> RuntimeEvent {
    RuntimeEvent {
        conversation: ConversationKey::new("lead", conversation),
        submission_id: Some("sub-1".to_owned()),
        event,
    }
}

fn activity(session: &str, event: Event) -> Event {
    Event::TaskActivity {
        session: session.to_owned(),
        depth: 1,
        event: Box::new(event),
    }
}

fn start(session: &str) -> Event {
    Event::TaskStart {
        session: session.to_owned(),
        parent: "default".to_owned(),
        agent: Some("helper".to_owned()),
        depth: 1,
        call_id: Some("call-1".to_owned()),
    }
}

fn turn_end(tokens: u64) -> Event {
    Event::TurnEnd {
        model: ModelRef::default(),
        usage: Usage {
            input_tokens: tokens,
            ..Usage::default()
        },
        stop_reason: StopReason::ToolUse,
    }
}

fn tool(name: &str) -> Event {
    Event::ToolStart {
        call_id: "c".to_owned(),
        name: name.to_owned(),
        input: json!({}),
    }
}

#[test]
fn a_running_task_replays_as_its_start_turn_ends_and_latest_activity() {
    let tasks = LiveTasks::default();
    let a = "task:default:a";
    let b = "task:default:b";
    for event in [
        start(a),
        activity(a, turn_end(10)),
        activity(a, tool("read_file")),
        start(b),
        activity(a, tool("bash")),
        activity(a, Event::TextDelta { text: "x".into() }),
        activity(a, turn_end(5)),
        activity(b, tool("grep")),
    ] {
        tasks.apply(&on("c1", event));
    }
    // Another conversation's task is not this one's.
    tasks.apply(&on("c2", start("task:default:other")));
    let replay: Vec<Event> = tasks
        .replay("lead/c1")
        .into_iter()
        .map(|e| e.event)
        .collect();
    assert_eq!(
        replay,
        [
            start(a),
            activity(a, turn_end(10)),
            activity(a, turn_end(5)),
            activity(a, Event::TextDelta { text: "x".into() }),
            start(b),
            activity(b, tool("grep")),
        ]
    );
    // An ended task is gone; a settled submission takes the rest with it.
    tasks.apply(&on(
        "c1",
        Event::TaskEnd {
            session: a.to_owned(),
            agent: None,
            depth: 1,
            outcome: Outcome::Aborted,
            usage: Usage::default(),
            error: None,
        },
    ));
    let left: Vec<Event> = tasks
        .replay("lead/c1")
        .into_iter()
        .map(|e| e.event)
        .collect();
    assert_eq!(left, [start(b), activity(b, tool("grep"))]);
    tasks.apply(&on(
        "c1",
        Event::SubmissionSettled {
            submission_id: "sub-1".to_owned(),
            outcome: Outcome::Completed,
            error: None,
        },
    ));
    assert!(tasks.replay("lead/c1").is_empty());
    assert_eq!(tasks.replay("lead/c2").len(), 1);
}
