//! `flue session show`: transcripts, as text and as JSON.

use pretty_assertions::assert_eq;
use serde_json::json;

use crate::{Workspace, json, stderr, stdout};

#[test]
fn shows_a_transcript_as_text_and_json() {
    let ws = Workspace::hello_world();
    let run = ws.flue(&["run", "hello", "-m", "Run a command please", "--id", "t"]);
    assert!(run.status.success(), "{}", stderr(&run));

    let text = ws.flue(&["session", "show", "--id", "t"]);
    let text = stdout(&text);
    // Each model turn is followed by its tokens (cost too when the model's price is known),
    // and the transcript ends with the conversation's.
    let (usage, transcript) = without_usage(&text);
    assert_eq!(usage.len(), 3, "{text}");
    for turn in &usage[..2] {
        assert!(
            turn.starts_with("  [scripted/script.json: ") && turn.ends_with(" output tokens]"),
            "{text}"
        );
    }
    assert!(
        usage[2].starts_with("conversation usage: 2 model turns, ")
            && text.ends_with(&format!("{}\n", usage[2])),
        "{text}"
    );
    // The default sandbox is virtual: a copy of the workspace at /workspace.
    let root_name = "workspace";
    assert_eq!(
        transcript,
        format!(
            "user (turn 1): Run a command please\n\
             assistant: Let me run that.\n\
             tool call: bash {{\"command\":\"echo hello from $(basename \\\"$PWD\\\")\"}}\n\
             tool result (bash ok): hello from {root_name}\n\n\
             assistant: The command printed: hello from {root_name}\n\n"
        )
    );

    let shown = json(&ws.flue(&["session", "show", "--id", "t", "--json"]));
    assert_eq!(shown["id"], "t");
    assert_eq!(shown["session"], "default");
    assert_eq!(shown["version"], 4);
    // The command's run: when it began and how long it took, as recorded.
    let result = &shown["messages"][2];
    assert!(result["started_at"].as_u64().unwrap() <= result["at"].as_u64().unwrap());
    assert!(result["duration_ms"].as_u64().is_some(), "{result}");
    assert_eq!(
        shown["messages"][2],
        json!({
            "role": "tool", "type": "tool_result", "v": 1, "at": result["at"],
            "started_at": result["started_at"], "duration_ms": result["duration_ms"],
            "call_id": "call_1_0", "tool_name": "bash", "content": format!("hello from {root_name}\n"),
            "is_error": false
        })
    );
}

/// The usage lines of a `session show` transcript (each model turn's, the conversation's), and
/// the transcript without them.
pub(crate) fn without_usage(text: &str) -> (Vec<String>, String) {
    let mut usage = Vec::new();
    let mut rest = String::new();
    for line in text.split_inclusive('\n') {
        let bare = line.trim_end_matches('\n');
        let trimmed = bare.trim_start();
        if (trimmed.starts_with('[') && trimmed.ends_with(" tokens]"))
            || trimmed.starts_with("conversation usage: ")
        {
            usage.push(bare.to_owned());
        } else {
            rest.push_str(line);
        }
    }
    (usage, rest)
}

#[test]
fn unknown_ids_and_sessions_are_errors() {
    let ws = Workspace::hello_world();
    let none = ws.flue(&["session", "show", "--id", "nope"]);
    assert_eq!(none.status.code(), Some(1));
    assert!(
        stderr(&none).contains("no conversations are stored"),
        "{}",
        stderr(&none)
    );
    assert!(
        ws.flue(&["run", "hello", "-m", "hi", "--id", "t"])
            .status
            .success()
    );
    let missing = ws.flue(&["session", "show", "--id", "nope"]);
    assert!(
        stderr(&missing).contains("conversation \"nope\" does not exist"),
        "{}",
        stderr(&missing)
    );
}
