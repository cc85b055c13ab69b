//! An MCP server's question (elicitation) in `flue serve`: while the tool call waits, the
//! question is a pending action listed over HTTP with its schema and defaults; a POST answers
//! it (accept with values checked against the schema, decline, cancel; the first answer wins),
//! the tool result carries the answer and the submission settles. Unanswered, it is declined
//! after the server's `elicitation_timeout_ms`; a restart answers it `interrupted`; the call's
//! own timeout stands still meanwhile; on Postgres another node's answer reaches the node
//! holding the call. The server is the Python SDK peer (tests/peers/py_server.py, tool
//! `release`), over stdio.

use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::mcp::peer;
use super::serve::{Server, http, post_message, snapshot};
use crate::Workspace;

const TOOL: &str = "mcp__py__release";

/// The longest wait for a question or a settlement: generous (a busy machine is slow); it only
/// ends a test that would otherwise hang.
const PATIENCE: Duration = Duration::from_secs(120);

/// Agents `asker` (the default question timeout), `hasty` (400 ms) and `patient` (a 4 s
/// request timeout), all calling `release`.
fn workspace() -> Workspace {
    let script = json!({"rules": [
        {"when": {"user_contains": "release"}, "reply": {"tool_calls": [{"name": TOOL, "input": {}}]}},
        {"when": {"tool_result": TOOL}, "reply": {"text": "Tool said: {{tool_result}}"}},
        {"reply": {"text": "ok"}}
    ]});
    let python = peer(".venv/bin/python");
    let server = peer("py_server.py");
    let agent = |extra: &str| {
        format!(
            "---\nmodel: scripted/script.json\nmcp:\n  py:\n    command: {python}\n    args: [\"{server}\", stdio]\n{extra}---\nYou release.\n"
        )
    };
    Workspace::new(&[
        ("agents/asker.md", &agent("")),
        (
            "agents/hasty.md",
            &agent("    elicitation_timeout_ms: 400\n"),
        ),
        ("agents/patient.md", &agent("    timeout_ms: 4000\n")),
        ("script.json", &script.to_string()),
    ])
}

fn actions(addr: &str, path: &str) -> Vec<Value> {
    let (status, body) = http(addr, "GET", &format!("{path}/actions"), &[], "");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str::<Value>(&body).unwrap()["actions"]
        .as_array()
        .unwrap()
        .clone()
}

/// Waits for the conversation's one pending question.
fn pending_question(server: &Server, path: &str) -> Value {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(action) = actions(server.addr(), path)
            .into_iter()
            .find(|action| action["state"] == "pending")
        {
            return action;
        }
        assert!(
            Instant::now() < deadline,
            "no question became pending:\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for the conversation to settle; returns its snapshot.
fn settled(server: &Server, path: &str) -> Value {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let snapshot = snapshot(server.addr(), path);
        if !snapshot["settlements"].as_array().unwrap().is_empty() {
            return snapshot;
        }
        assert!(
            Instant::now() < deadline,
            "{path} never settled:\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The final text of the reply.
fn reply_text(snapshot: &Value) -> String {
    snapshot["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|message| message["parts"].as_array().unwrap().iter())
        .filter(|part| part["type"] == "text")
        .filter_map(|part| part["text"].as_str())
        .collect::<Vec<_>>()
        .join("")
}

fn decide(addr: &str, path: &str, action: &str, body: &Value) -> (u16, Value) {
    let (status, body) = http(
        addr,
        "POST",
        &format!("{path}/actions/{action}"),
        &[("content-type", "application/json")],
        &body.to_string(),
    );
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

#[test]
fn a_servers_question_is_answered_over_http_once_and_checked_against_its_schema() {
    let workspace = workspace();
    let server = Server::start(workspace.root(), &[], &[]);
    let addr = server.addr().to_owned();

    // Accept: the question is listed with its schema and defaults.
    let path = "/agents/asker/accept";
    let admitted = post_message(&addr, path, "release it");
    let question = pending_question(&server, path);
    let id = question["actionId"].as_str().unwrap().to_owned();
    assert_eq!(
        (
            &question["kind"],
            &question["toolName"],
            &question["reason"]
        ),
        (
            &json!("elicitation"),
            &json!(TOOL),
            &json!("mcp server `py` asks: Which version should be released?")
        )
    );
    assert_eq!(question["input"]["server"], "py");
    assert_eq!(
        question["input"]["defaults"],
        json!({"channel": "stable", "notify": true})
    );
    assert_eq!(
        question["input"]["requestedSchema"]["required"],
        json!(["version"])
    );
    // A bad answer is refused, naming the fields, and the question stays pending.
    let (status, bad) = decide(
        &addr,
        path,
        &id,
        &json!({"decision": "accept", "content": {"channel": "nightly"}}),
    );
    assert_eq!(
        (status, &bad["error"]["type"]),
        (400, &json!("invalid_request")),
        "{bad}"
    );
    let message = bad["error"]["details"].as_str().unwrap();
    assert!(
        message.contains("`channel` must be one of stable, beta")
            && message.contains("`version` is required"),
        "{message}"
    );
    assert_eq!(pending_question(&server, path)["actionId"], id.as_str());
    // A good one reaches the server, with the defaults filled in.
    let (status, accepted) = decide(
        &addr,
        path,
        &id,
        &json!({"decision": "accept", "content": {"version": "1.2.3", "notify": "no"}}),
    );
    assert_eq!(status, 202, "{accepted}");
    assert_eq!(accepted["submissionId"], admitted["submissionId"]);
    let (status, again) = decide(&addr, path, &id, &json!({"decision": "decline"}));
    assert_eq!(
        (status, &again["error"]["type"]),
        (409, &json!("action_already_resolved"))
    );
    let done = settled(&server, path);
    assert_eq!(done["settlements"][0]["outcome"], "completed", "{done}");
    assert!(
        reply_text(&done).ends_with("released 1.2.3 on stable (notify: no)"),
        "{}",
        reply_text(&done)
    );
    let listed = actions(&addr, path);
    assert_eq!(
        (&listed[0]["state"], &listed[0]["content"]),
        (
            &json!("accepted"),
            &json!({"version": "1.2.3", "channel": "stable", "notify": false})
        )
    );
    // The stream shows the question and its answer as the action's data part.
    let part = done["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|message| message["parts"].as_array().unwrap().iter())
        .find(|part| part["type"] == format!("data-action-{id}").as_str())
        .unwrap_or_else(|| panic!("no data-action part in {done}"))
        .clone();
    assert_eq!(
        (&part["data"]["state"], &part["data"]["content"]["version"]),
        (&json!("accepted"), &json!("1.2.3"))
    );

    // Decline.
    let path = "/agents/asker/decline";
    post_message(&addr, path, "release it");
    let id = pending_question(&server, path)["actionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, body) = decide(
        &addr,
        path,
        &id,
        &json!({"decision": "decline", "message": "not today"}),
    );
    assert_eq!(status, 202, "{body}");
    let done = settled(&server, path);
    assert!(
        reply_text(&done).ends_with("not released: decline"),
        "{done}"
    );
    assert_eq!(
        (
            &actions(&addr, path)[0]["state"],
            &actions(&addr, path)[0]["message"]
        ),
        (&json!("declined"), &json!("not today"))
    );

    // The call's own timeout stands still while its question waits.
    let path = "/agents/patient/slow";
    post_message(&addr, path, "release it");
    let id = pending_question(&server, path)["actionId"]
        .as_str()
        .unwrap()
        .to_owned();
    // Longer than the 4 s timeout; what is left of it after the answer (all of it) is ample
    // for the server to finish the call, even on a busy machine.
    std::thread::sleep(Duration::from_millis(4600));
    let (status, body) = decide(
        &addr,
        path,
        &id,
        &json!({"decision": "accept", "content": {"version": "9", "channel": "beta"}}),
    );
    assert_eq!(status, 202, "{body}");
    let done = settled(&server, path);
    assert!(
        reply_text(&done).ends_with("released 9 on beta (notify: yes)"),
        "{done}"
    );

    // Nobody answers: declined after the server's timeout, saying so.
    let path = "/agents/hasty/late";
    post_message(&addr, path, "release it");
    let done = settled(&server, path);
    assert!(
        reply_text(&done).ends_with("not released: decline"),
        "{done}"
    );
    let listed = actions(&addr, path);
    assert_eq!(listed[0]["state"], "declined");
    assert_eq!(
        listed[0]["message"],
        "no answer within 400ms; the question was declined"
    );
    let id = listed[0]["actionId"].as_str().unwrap().to_owned();
    let (status, late) = decide(&addr, path, &id, &json!({"decision": "cancel"}));
    assert_eq!(
        (status, &late["error"]["type"]),
        (409, &json!("action_already_resolved"))
    );
}

#[test]
fn a_question_pending_when_the_server_dies_is_interrupted_on_restart() {
    let workspace = workspace();
    let mut server = Server::start(workspace.root(), &[], &[]);
    let path = "/agents/asker/crash";
    post_message(server.addr(), path, "release it");
    let id = pending_question(&server, path)["actionId"]
        .as_str()
        .unwrap()
        .to_owned();
    server.kill9();
    let server = Server::start(workspace.root(), &[], &[]);
    let done = settled(&server, path);
    assert_eq!(done["settlements"][0]["outcome"], "completed", "{done}");
    let listed = actions(server.addr(), path);
    let question = listed
        .iter()
        .find(|action| action["actionId"] == id.as_str())
        .unwrap();
    assert_eq!(question["state"], "interrupted");
    assert!(
        listed.iter().all(|action| action["state"] != "pending"),
        "{listed:?}"
    );
    // The log keeps the question and its answer for transcripts.
    let shown = workspace.flue(&["session", "show", "--id", "crash", "--json"]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains("Which version should be released?") && shown.contains("interrupted"),
        "{shown}"
    );
    let shown = workspace.flue(&["session", "show", "--id", "crash"]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains(&format!(
            "question ({id}): mcp server `py` asks: Which version should be released?\nanswer ({id}): interrupted\n"
        )),
        "{shown}"
    );
}

#[test]
fn a_question_held_by_one_node_is_answered_through_another_on_postgres() {
    let workspace = workspace();
    let database = crate::pg_server::fresh_database();
    let start = || Server::start(workspace.root(), &["--store", &database], &[]);
    let nodes = [start(), start()];
    let path = "/agents/asker/shared";
    post_message(nodes[0].addr(), path, "release it");
    let id = pending_question(&nodes[1], path)["actionId"]
        .as_str()
        .unwrap()
        .to_owned();
    // The node running the conversation opened a second connection to the MCP server (the
    // first was its start-up check); the answer goes through the other one.
    let connections = |node: &Server| node.log().matches("Service initialized").count();
    let holder = nodes
        .iter()
        .position(|node| connections(node) >= 2)
        .unwrap_or_else(|| panic!("no node runs it:\n{}", nodes[0].log()));
    let other = &nodes[1 - holder];
    let (status, body) = decide(
        other.addr(),
        path,
        &id,
        &json!({"decision": "accept", "content": {"version": "5.1"}}),
    );
    assert_eq!(status, 202, "{body}");
    let done = settled(other, path);
    assert!(
        reply_text(&done).ends_with("released 5.1 on stable (notify: yes)"),
        "{done}"
    );
}
