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
    // The default sandbox is virtual: a copy of the workspace at /workspace.
    let root_name = "workspace";
    assert_eq!(
        stdout(&text),
        format!(
            "user: Run a command please\n\
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
    assert_eq!(
        shown["messages"][2],
        json!({
            "role": "tool", "type": "tool_result", "v": 1, "at": shown["messages"][2]["at"],
            "call_id": "call_1_0", "tool_name": "bash", "content": format!("hello from {root_name}\n"),
            "is_error": false
        })
    );
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
