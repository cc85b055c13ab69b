//! Unit tests of the log-driven step decision and the model view.

use pretty_assertions::assert_eq;
use serde_json::json;

use super::*;
use crate::record::{AssistantContent, CompactionSummary, ModelRef, StopReason};

fn user(text: &str) -> Record {
    Record::User(UserMessage::text(text))
}

fn assistant(text: &str, calls: &[&str]) -> Record {
    let mut content = vec![AssistantContent::Text {
        text: text.to_owned(),
    }];
    content.extend(calls.iter().map(|id| {
        AssistantContent::ToolCall(ToolCall {
            id: (*id).to_owned(),
            name: "bash".into(),
            input: json!({}),
        })
    }));
    Record::Assistant(AssistantMessage {
        content,
        model: ModelRef::default(),
        usage: Usage::default(),
        stop_reason: if calls.is_empty() {
            StopReason::EndTurn
        } else {
            StopReason::ToolUse
        },
    })
}

fn result(id: &str) -> Record {
    Record::ToolResult(ToolResult {
        call_id: id.into(),
        tool_name: "bash".into(),
        content: "ok".into(),
        is_error: false,
        error_kind: None,
    })
}

fn pending_ids(step: Step) -> Vec<String> {
    match step {
        Step::RunTools(calls) => calls.into_iter().map(|call| call.id).collect(),
        other => panic!("expected RunTools, got {other:?}"),
    }
}

#[test]
fn empty_log_and_user_input_call_the_model() {
    assert_eq!(next_step(&[]), Step::CallModel);
    assert_eq!(next_step(&[user("hi")]), Step::CallModel);
}

#[test]
fn an_answer_without_calls_ends_the_operation() {
    assert_eq!(
        next_step(&[user("hi"), assistant("hello", &[])]),
        Step::Answered
    );
}

#[test]
fn unanswered_calls_are_run_and_answered_ones_skipped() {
    let log = [user("hi"), assistant("", &["a", "b", "c"]), result("b")];
    assert_eq!(pending_ids(next_step(&log)), vec!["a", "c"]);
}

#[test]
fn all_calls_answered_calls_the_model_again() {
    let log = [
        user("hi"),
        assistant("", &["a", "b"]),
        result("a"),
        result("b"),
    ];
    assert_eq!(next_step(&log), Step::CallModel);
}

#[test]
fn interrupted_calls_get_error_results() {
    let log = [user("hi"), assistant("", &["a", "b"]), result("a")];
    let repairs = interrupted_results(&log);
    assert_eq!(repairs.len(), 1);
    let Record::ToolResult(repair) = &repairs[0] else {
        panic!("not a tool result")
    };
    assert_eq!((repair.call_id.as_str(), repair.is_error), ("b", true));
    assert_eq!(repair.error_kind.as_deref(), Some("interrupted"));
    assert!(interrupted_results(&[user("hi")]).is_empty());
}

#[test]
fn model_view_starts_at_the_latest_summary() {
    let summary = Record::Compaction(CompactionSummary {
        summary: "earlier".into(),
        first_kept: 2,
        tokens_before: 100,
    });
    let log = vec![
        user("1"),
        assistant("a1", &[]),
        user("2"),
        assistant("a2", &[]),
        summary.clone(),
        user("3"),
    ];
    let view = model_view(&log);
    assert_eq!(
        view.to_vec(),
        vec![summary, user("2"), assistant("a2", &[]), user("3")]
    );
    let plain = [user("1")];
    assert!(matches!(model_view(&plain), Cow::Borrowed(_)));
}
