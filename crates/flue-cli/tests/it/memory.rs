//! Memory across conversations, end to end: real `flue run` and `flue serve` processes with
//! a scripted model whose agent has `memory: true`, on SQLite and on Postgres (two nodes).
//! A note written in one conversation is found in another of the same subject, never in
//! another subject's; it is stored redacted; the application lists and erases it.

use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::serve::{Server, http, snapshot};
use crate::{Workspace, json, stderr, stdout};

/// A value of `.env`: a known secret, which no stored note may hold.
const TOKEN: &str = "tok-9f8e7d6c5b4a3f2e1d0c";

const AGENT: &str = "---
description: Remembers its users
model: scripted/script.json
memory: true
---
You remember what users tell you.
";

fn script() -> String {
    json!({"rules": [
        {"when": {"tool_result": "memory_write"},
         "reply": {"text": "stored ok={{tool_result.ok}} {{tool_result.error.kind}}"}},
        {"when": {"tool_result": "memory_search"},
         "reply": {"text": "found: {{tool_result.data.notes.0.text}} {{tool_result.error.kind}}"}},
        {"when": {"user_matches": "remember tea"}, "reply": {"tool_calls": [
            {"name": "memory_write",
             "input": {"text": format!("Likes green tea; their token is {TOKEN}")}}
        ]}},
        {"when": {"user_matches": "what do I drink"}, "reply": {"tool_calls": [
            {"name": "memory_search", "input": {"query": "Tea?"}}
        ]}},
        {"reply": {"text": "ok"}}
    ]})
    .to_string()
}

fn workspace() -> Workspace {
    Workspace::new(&[
        ("agents/helper.md", AGENT),
        ("script.json", &script()),
        (".env", &format!("DEPLOY_TOKEN={TOKEN}\n")),
    ])
}

fn run(ws: &Workspace, id: &str, subject: Option<&str>, message: &str) -> std::process::Output {
    let mut args = vec!["run", "helper", "-m", message, "--id", id];
    if let Some(subject) = subject {
        args.extend(["--memory-subject", subject]);
    }
    ws.flue(&args)
}

fn reply(ws: &Workspace, id: &str, subject: Option<&str>, message: &str) -> String {
    let output = run(ws, id, subject, message);
    assert!(output.status.success(), "{}", stderr(&output));
    stdout(&output)
}

#[test]
fn a_note_written_in_one_conversation_is_found_in_another_of_its_subject_and_erased() {
    let ws = workspace();
    assert_eq!(
        reply(&ws, "c1", Some("alice"), "remember tea"),
        "stored ok=true \n"
    );
    let found = reply(&ws, "c2", Some("alice"), "what do I drink?");
    assert!(
        found.starts_with("found: Likes green tea; their token is "),
        "{found}"
    );
    assert!(!found.contains(TOKEN), "{found}");
    // Another subject's memory, and a conversation without one.
    assert_eq!(
        reply(&ws, "c3", Some("bob"), "what do I drink?"),
        "found:  \n"
    );
    assert_eq!(
        reply(&ws, "c4", None, "what do I drink?"),
        "found:  memory_unavailable\n"
    );
    // A conversation keeps its subject.
    let refused = run(&ws, "c1", Some("bob"), "what do I drink?");
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("keeps the memory of subject \"alice\", not \"bob\""),
        "{}",
        stderr(&refused)
    );

    // The application lists the notes, redacted as stored.
    let listed = json(&ws.flue(&["memory", "list", "--subject", "alice", "--json"]));
    let notes = listed["notes"].as_array().unwrap();
    assert_eq!(notes.len(), 1, "{listed}");
    assert_eq!(notes[0]["agent"], "helper");
    assert_eq!(notes[0]["subject"], "alice");
    let text = notes[0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("Likes green tea") && !text.contains(TOKEN),
        "{text}"
    );
    let plain = stdout(&ws.flue(&["memory", "list"]));
    assert!(plain.contains("  helper  alice  "), "{plain}");

    // Erased: gone for every conversation of the subject.
    let erased = json(&ws.flue(&["memory", "delete", "--subject", "alice", "--json"]));
    assert_eq!(erased["deleted"], 1);
    assert_eq!(
        reply(&ws, "c5", Some("alice"), "what do I drink?"),
        "found:  \n"
    );
    let listed = json(&ws.flue(&["memory", "list", "--json"]));
    assert_eq!(listed["notes"], json!([]));
}

/// Waits until the conversation has `n` settlements; returns its last reply's text.
fn settled_reply(server: &Server, path: &str, n: usize) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let shown = snapshot(server.addr(), path);
        if shown["settlements"].as_array().unwrap().len() >= n {
            let messages = shown["messages"].as_array().unwrap();
            let last = messages
                .iter()
                .rev()
                .find(|message| message["role"] == "assistant")
                .unwrap_or_else(|| panic!("no reply in {shown}"));
            return last["parts"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|part| part["text"].as_str())
                .collect();
        }
        assert!(
            Instant::now() < deadline,
            "{path} never settled:\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn send(server: &Server, path: &str, body: &Value) -> (u16, Value) {
    let (status, text) = http(
        server.addr(),
        "POST",
        path,
        &[("content-type", "application/json")],
        &body.to_string(),
    );
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn request(server: &Server, method: &str, path: &str) -> (u16, Value) {
    let (status, text) = http(server.addr(), method, path, &[], "");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// The HTTP side on two nodes: a note written through one is found through the other,
/// listed and erased over HTTP.
fn memory_over_http(first: &Server, second: &Server) {
    let (status, body) = send(
        first,
        "/agents/helper/h1",
        &json!({"kind": "user", "body": "remember tea", "memorySubject": "carol"}),
    );
    assert_eq!(status, 202, "{body}");
    assert_eq!(
        settled_reply(first, "/agents/helper/h1", 1),
        "stored ok=true "
    );
    let (status, body) = send(
        second,
        "/agents/helper/h2",
        &json!({"kind": "user", "body": "what do I drink?", "memorySubject": "carol"}),
    );
    assert_eq!(status, 202, "{body}");
    let found = settled_reply(second, "/agents/helper/h2", 1);
    assert!(found.starts_with("found: Likes green tea"), "{found}");
    assert!(!found.contains(TOKEN), "{found}");

    // The subject is the conversation's, once.
    let (status, body) = send(
        second,
        "/agents/helper/h2",
        &json!({"kind": "user", "body": "hi", "memorySubject": "dave"}),
    );
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["type"], "memory_subject_conflict");
    let (status, body) = send(
        second,
        "/agents/helper/h2",
        &json!({"kind": "user", "body": "hi", "memorySubject": 7}),
    );
    assert_eq!(status, 400, "{body}");

    let (status, listed) = request(second, "GET", "/_flue/memory/helper/carol");
    assert_eq!(status, 200, "{listed}");
    let notes = listed["notes"].as_array().unwrap();
    assert_eq!(notes.len(), 1, "{listed}");
    let note_id = notes[0]["id"].as_str().unwrap().to_owned();
    let (status, body) = request(
        first,
        "DELETE",
        &format!("/_flue/memory/helper/carol/{note_id}"),
    );
    assert_eq!((status, &body["deleted"]), (200, &json!(1)), "{body}");
    let (status, body) = request(
        first,
        "DELETE",
        &format!("/_flue/memory/helper/carol/{note_id}"),
    );
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["type"], "note_not_found");

    // Erasure of a subject across agents.
    let (status, body) = send(
        first,
        "/agents/helper/h3",
        &json!({"kind": "user", "body": "remember tea", "memorySubject": "carol"}),
    );
    assert_eq!(status, 202, "{body}");
    settled_reply(first, "/agents/helper/h3", 1);
    let (status, body) = request(second, "DELETE", "/_flue/memory/*/carol");
    assert_eq!((status, &body["deleted"]), (200, &json!(1)), "{body}");
    let (status, listed) = request(first, "GET", "/_flue/memory/*/carol");
    assert_eq!((status, &listed["notes"]), (200, &json!([])), "{listed}");
}

#[test]
fn memory_over_http_on_sqlite() {
    let ws = workspace();
    let server = Server::start(ws.root(), &[], &[]);
    memory_over_http(&server, &server);
}

#[test]
fn memory_over_http_is_shared_by_two_nodes_on_postgres() {
    let ws = workspace();
    let url = crate::pg_server::fresh_database();
    let first = Server::start(ws.root(), &["--store", &url], &[]);
    let second = Server::start(ws.root(), &["--store", &url], &[]);
    memory_over_http(&first, &second);
    // The command line reads the same store.
    let listed = json(&ws.flue(&["memory", "list", "--store", &url, "--json"]));
    assert_eq!(listed["notes"], json!([]));
}
