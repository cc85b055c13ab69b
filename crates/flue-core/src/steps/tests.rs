//! Unit tests of reading the log: next steps, interrupted calls, the model view, call ids.

use flue_protocol::record::{
    AssistantContent, AssistantMessage, CompactionSummary, ModelRef, StopReason, Usage, UserMessage,
};
use pretty_assertions::assert_eq;
use serde_json::json;

use super::*;

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
        interrupted: false,
    })
}

fn result(id: &str) -> Record {
    Record::ToolResult(ToolResult {
        call_id: id.into(),
        tool_name: "bash".into(),
        content: "ok".into(),
        is_error: false,
        error_kind: None,
        data: Vec::new(),
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
        usage: None,
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

/// The call ids of a new turn with `ids` after the log `records`, once made unique.
fn unique_ids(records: &[Record], ids: &[&str]) -> Vec<String> {
    let Record::Assistant(message) = assistant("", ids) else {
        unreachable!()
    };
    let mut content = message.content;
    make_call_ids_unique(&mut content, records);
    content
        .iter()
        .filter_map(|part| match part {
            AssistantContent::ToolCall(call) => Some(call.id.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn repeated_and_empty_call_ids_are_renamed_deterministically() {
    assert_eq!(unique_ids(&[], &["a", "b"]), ["a", "b"]);
    assert_eq!(unique_ids(&[], &["a", "a", "a"]), ["a", "a_2", "a_3"]);
    assert_eq!(
        unique_ids(&[], &["", " ", ""]),
        ["call_1", "call_2", "call_3"]
    );
    // A new name skips ids already taken, in the turn as in the log.
    assert_eq!(unique_ids(&[], &["a_2", "a", "a"]), ["a_2", "a", "a_3"]);
    // Ids of earlier turns (calls and results) are taken too: `call_0` in every turn.
    let log = [
        user("hi"),
        assistant("", &["call_0", "call_1"]),
        result("call_0"),
        result("call_1"),
        result("orphan"),
    ];
    assert_eq!(
        unique_ids(&log, &["call_0", "orphan", "new"]),
        ["call_0_2", "orphan_2", "new"]
    );
}

fn required(call: &str, kind: ActionKind) -> Record {
    Record::ActionRequired(PendingAction {
        action_id: action_id(call),
        call_id: call.into(),
        tool_name: "bash".into(),
        input: json!({}),
        kind,
        reason: "asks".into(),
        session: None,
        output_schema: None,
        idempotency_key: None,
    })
}

fn resolved(call: &str, decision: ActionDecision) -> Record {
    Record::ActionResolved(ActionResolution::new(action_id(call), decision))
}

/// The index answers what the functions of the whole log answer, after every record of a
/// log with calls, results, confirmations (decided, repeated, pending) and live questions.
#[test]
fn the_log_index_answers_as_the_whole_log_does() {
    let deny = ActionDecision::Deny {
        message: Some("no".into()),
    };
    let log = vec![
        user("1"),
        assistant("a", &["c1", "c2"]),
        result("c1"),
        required("c2", ActionKind::Confirmation),
        resolved("c2", deny.clone()),
        result("c2"),
        user("2"),
        assistant("b", &["c3", "c4", "c5"]),
        required("c3", ActionKind::Confirmation),
        required("c4", ActionKind::CustomTool),
        required("c5", ActionKind::Elicitation),
        resolved("c3", ActionDecision::Allow),
        resolved("c3", deny.clone()),
        required("c3", ActionKind::Confirmation),
        resolved("c3", deny),
        resolved("c5", ActionDecision::Interrupted),
        required("c5", ActionKind::Elicitation),
        result("c4"),
        user("3"),
        assistant("c", &["c1", "", "c6"]),
    ];
    let mut index = LogIndex::default();
    for end in 0..=log.len() {
        let records = &log[..end];
        if end > 0 {
            index.extend(&log[end - 1..end]);
        }
        assert_eq!(
            index.pending_actions(),
            pending_actions(records),
            "at {end}"
        );
        assert_eq!(
            orphaned_live_actions_in(&index),
            orphaned_live_actions(records),
            "at {end}"
        );
        assert_eq!(
            results_before_input_in(records, &index),
            results_before_input(records),
            "at {end}"
        );
        let mut by_index = vec![
            AssistantContent::ToolCall(ToolCall {
                id: "c1".into(),
                name: "bash".into(),
                input: json!({}),
            }),
            AssistantContent::ToolCall(ToolCall {
                id: String::new(),
                name: "bash".into(),
                input: json!({}),
            }),
        ];
        let mut by_log = by_index.clone();
        rename_repeated_calls(&mut by_index, &index);
        make_call_ids_unique(&mut by_log, records);
        assert_eq!(by_index, by_log, "at {end}");
    }
    assert_eq!(
        index.pending_actions().len(),
        2,
        "c4 (custom tool) and the second question of c5 wait"
    );
}
