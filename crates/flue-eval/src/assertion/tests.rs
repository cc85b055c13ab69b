//! Assertions against hand-made transcripts.

use pretty_assertions::assert_eq;
use serde_json::json;

use super::*;
use crate::transcript::CallRecord;

fn call(name: &str, input: Json) -> CallRecord {
    CallRecord {
        session: "default".to_owned(),
        name: name.to_owned(),
        input,
        output: None,
        is_error: false,
    }
}

fn transcript() -> Transcript {
    Transcript {
        outcome: "completed".to_owned(),
        reply: "All good".to_owned(),
        tool_calls: vec![
            call("read_file", json!({"path": "a.py", "startLine": 1})),
            call("bash", json!({"command": "ls"})),
            call("read_file", json!({"path": "b.py"})),
        ],
        ..Transcript::default()
    }
}

fn failed(expect: &Expect, transcript: &Transcript) -> Vec<String> {
    check(expect, transcript)
        .into_iter()
        .filter(|check| !check.passed)
        .map(|check| format!("{}: {}", check.name, check.detail))
        .collect()
}

fn expects(name: &str, input: Option<Json>) -> ToolCallExpect {
    ToolCallExpect {
        name: name.to_owned(),
        input,
    }
}

#[test]
fn tool_calls_match_in_order_with_input_subsets() {
    let mut expect = Expect {
        tool_calls: vec![
            expects("read_file", Some(json!({"path": "a.py"}))),
            expects("read_file", Some(json!({"path": "b.py"}))),
        ],
        ..Expect::default()
    };
    assert_eq!(failed(&expect, &transcript()), Vec::<String>::new());
    expect.tool_calls = vec![
        expects("bash", None),
        expects("read_file", Some(json!({"path": "a.py"}))),
    ];
    assert_eq!(
        failed(&expect, &transcript()),
        vec![
            "tool_calls: expected a call of `read_file` with input holding {\"path\":\"a.py\"} after `bash`; the calls were [read_file, bash, read_file]"
        ]
    );
}

#[test]
fn counts_and_never_called() {
    let mut expect = Expect::default();
    expect.tool_call_counts.insert("read_file".to_owned(), 2);
    expect.tool_call_counts.insert("glob".to_owned(), 0);
    expect.never_called = vec!["bash".to_owned(), "write_file".to_owned()];
    assert_eq!(
        failed(&expect, &transcript()),
        vec!["never_called: expected no call of `bash`; there were 1"]
    );
}

#[test]
fn subsets_hold_keys_items_and_numbers_by_value() {
    assert!(is_subset(
        &json!({"a": {"b": 1}}),
        &json!({"a": {"b": 1.0, "c": 2}, "d": 3})
    ));
    assert!(is_subset(
        &json!([{"x": 1}, 2]),
        &json!([{"x": 1, "y": 0}, 2])
    ));
    assert!(!is_subset(&json!([1]), &json!([1, 2])));
    assert!(!is_subset(&json!({"a": null}), &json!({})));
    assert!(!is_subset(&json!("1"), &json!(1)));
}

#[test]
fn a_conversation_that_did_not_complete_fails_with_its_error() {
    let mut transcript = transcript();
    transcript.outcome = "failed".to_owned();
    transcript.error = Some(flue_core::ErrorInfo {
        kind: "provider_error".to_owned(),
        message: "boom".to_owned(),
    });
    assert_eq!(
        failed(&Expect::default(), &transcript),
        vec!["completed: the conversation ended failed: boom (provider_error)"]
    );
}

#[test]
fn limits_and_files() {
    let mut transcript = transcript();
    transcript.turns = 4;
    transcript.usage.input_tokens = 90;
    transcript.usage.output_tokens = 20;
    transcript.usage.cost_usd = Some(0.02);
    transcript.latency_ms = 10;
    transcript
        .files
        .insert("out.txt".to_owned(), Some("hello world".to_owned()));
    transcript.files.insert("gone.txt".to_owned(), None);
    let expect = Expect {
        max_turns: Some(3),
        max_tokens: Some(110),
        max_cost_usd: Some(0.01),
        max_latency_ms: Some(10),
        files: vec![
            FileExpect {
                path: "out.txt".to_owned(),
                exists: true,
                contains: vec!["world".to_owned(), "moon".to_owned()],
                not_contains: vec!["hello".to_owned()],
                equals: None,
                matches: Some("^hello".to_owned()),
            },
            FileExpect {
                path: "gone.txt".to_owned(),
                exists: false,
                contains: Vec::new(),
                not_contains: Vec::new(),
                equals: None,
                matches: None,
            },
        ],
        ..Expect::default()
    };
    assert_eq!(
        failed(&expect, &transcript),
        vec![
            "files: out.txt: it does not contain \"moon\"; it contains \"hello\"",
            "max_turns: at most 3 turn(s); it took 4",
            "max_cost_usd: at most $0.01; it cost $0.020000",
        ]
    );
}
