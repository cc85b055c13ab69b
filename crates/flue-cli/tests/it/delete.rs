//! Deleting a conversation: `flue session delete` on SQLite and Postgres, and `DELETE
//! /agents/<agent>/<id>` of a real `flue serve` called with fetch around the official client.
//! Busy is made deterministic with a confirmation pause: the paused submission stays unsettled
//! (`waiting`) until someone decides, whatever the machine's speed.

use pretty_assertions::assert_eq;
use serde_json::Value;

use crate::serve::Server;
use crate::{Workspace, json, stderr, stdout};

/// An agent whose `bash` asks first: `go` makes one call (creating `made.txt` when allowed);
/// any other message is answered at once.
fn asking(extra_toml: &str) -> Workspace {
    let script = serde_json::json!({"rules": [
        {"when": {"user_matches": "^go$", "tool_result": "bash"}, "reply": {"text": "done"}},
        {"when": {"user_matches": "^go$"},
         "reply": {"tool_calls": [{"name": "bash", "input": {"command": "echo made > made.txt"}}]}},
        {"reply": {"text": "hi there"}}
    ]})
    .to_string();
    Workspace::new(&[
        (
            "agents/careful.md",
            "---\nmodel: scripted/s.json\ntools: [bash, write_file]\nsandbox: local\n\
             permissions:\n  bash: always_ask\n---\nWork.\n",
        ),
        ("s.json", &script),
        ("flue.toml", extra_toml),
    ])
}

/// The CLI round: a paused conversation cannot be deleted (exit 1, `session_busy`, everything
/// kept); once its submission settled, `flue session delete` removes it and its sessions, and
/// the id starts afresh. `store` is passed as `--store` when given.
fn cli_round(workspace: &Workspace, store: Option<&str>) {
    let with_store = |args: &[&str]| -> Vec<String> {
        let mut all: Vec<String> = args.iter().map(|arg| (*arg).to_owned()).collect();
        if let Some(url) = store {
            all.extend(["--store".to_owned(), url.to_owned()]);
        }
        all
    };
    let run = |args: Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        workspace.flue(&args)
    };
    let paused = workspace.flue(&["run", "careful", "-m", "go", "--id", "d1", "--json"]);
    assert_eq!(paused.status.code(), Some(3), "{}", stderr(&paused));
    let action_id = json(&paused)["pendingActions"][0]["action_id"]
        .as_str()
        .unwrap()
        .to_owned();

    let busy = run(with_store(&["session", "delete", "--id", "d1"]));
    assert_eq!(busy.status.code(), Some(1), "{}", stderr(&busy));
    assert!(
        stderr(&busy).contains("busy with 1 unsettled submission"),
        "{}",
        stderr(&busy)
    );
    let listed = run(with_store(&["session", "list", "--json"]));
    assert_eq!(json(&listed)["conversations"][0]["id"], "d1");

    let denied = workspace.flue(&[
        "run",
        "careful",
        "--id",
        "d1",
        "--confirm",
        &action_id,
        "--deny",
        "no",
    ]);
    assert_eq!(denied.status.code(), Some(0), "{}", stderr(&denied));

    let deleted = run(with_store(&["session", "delete", "--id", "d1", "--json"]));
    assert_eq!(deleted.status.code(), Some(0), "{}", stderr(&deleted));
    let out = json(&deleted);
    assert_eq!(
        (&out["deleted"], &out["instance"], &out["sessions"]),
        (
            &Value::Bool(true),
            &Value::from("careful:d1"),
            &serde_json::json!(["default"])
        )
    );
    let listed = run(with_store(&["session", "list", "--json"]));
    assert_eq!(json(&listed)["conversations"], serde_json::json!([]));
    let shown = run(with_store(&["session", "show", "--id", "d1"]));
    assert_eq!(shown.status.code(), Some(1));
    // A second delete names the missing conversation.
    let again = run(with_store(&["session", "delete", "--id", "d1"]));
    assert_eq!(again.status.code(), Some(1));
    assert!(
        stderr(&again).contains("no conversation \"d1\""),
        "{}",
        stderr(&again)
    );
    // The id starts a new conversation.
    let fresh = workspace.flue(&["run", "careful", "-m", "hello", "--id", "d1"]);
    assert_eq!(stdout(&fresh), "hi there\n", "{}", stderr(&fresh));
}

#[test]
fn session_delete_is_refused_while_a_message_waits_then_deletes_the_conversation() {
    let workspace = asking("");
    cli_round(&workspace, None);
}

/// Polls `path` of a running server until `done` holds for its JSON (no fixed sleep: each
/// poll asks the server again; the deadline only ends a test that hangs).
fn wait_for(addr: &str, path: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let (status, body) = crate::serve::http(addr, "GET", path, &[], "");
        if status == 200 {
            let value: Value = serde_json::from_str(&body).unwrap();
            if done(&value) {
                return value;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{path} never got there: {status} {body}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// On Postgres (`flue serve --store URL` runs the conversation, `flue session delete --store
/// URL` deletes it): refused while the message waits for a decision, done once it settled.
#[test]
fn session_delete_works_on_a_postgres_store() {
    let url = crate::pg_server::fresh_database();
    let workspace = asking("");
    let server = Server::start(workspace.root(), &["--store", &url], &[]);
    let addr = server.addr().to_owned();
    let admitted = crate::serve::post_message(&addr, "/agents/careful/p1", "go");
    let submission = admitted["submissionId"].as_str().unwrap().to_owned();
    let actions = wait_for(&addr, "/agents/careful/p1/actions", |value| {
        value["actions"]
            .as_array()
            .is_some_and(|actions| !actions.is_empty())
    });
    let busy = workspace.flue(&["session", "delete", "--id", "p1", "--store", &url]);
    assert_eq!(busy.status.code(), Some(1), "{}", stderr(&busy));
    assert!(
        stderr(&busy).contains("busy with 1 unsettled"),
        "{}",
        stderr(&busy)
    );

    let action = actions["actions"][0]["actionId"].as_str().unwrap();
    let (status, body) = crate::serve::http(
        &addr,
        "POST",
        &format!("/agents/careful/p1/actions/{action}"),
        &[("content-type", "application/json")],
        r#"{"decision": "deny", "message": "no"}"#,
    );
    assert_eq!(status, 202, "{body}");
    wait_for(
        &addr,
        &format!("/agents/careful/p1/submissions/{submission}"),
        |value| value["state"] == "settled",
    );
    let deleted = workspace.flue(&["session", "delete", "--id", "p1", "--store", &url, "--json"]);
    assert_eq!(deleted.status.code(), Some(0), "{}", stderr(&deleted));
    assert_eq!(json(&deleted)["instance"], "careful:p1");
    let listed = workspace.flue(&["session", "list", "--store", &url, "--json"]);
    assert_eq!(json(&listed)["conversations"], serde_json::json!([]));
    // The server reads the deletion from the shared store.
    let (status, _) = crate::serve::http(&addr, "GET", "/agents/careful/p1", &[], "");
    assert_eq!(status, 404);
}

/// The audit log and the trash of a deleted conversation's file changes are kept (found by
/// the instance id `AGENT:ID`, as no conversation names it any more).
#[test]
fn the_audit_log_and_trash_outlive_the_conversation() {
    let script = serde_json::json!({"rules": [
        {"when": {"tool_result": "create_file"}, "reply": {"text": "created"}},
        {"when": {"tool_result": "delete_file"}, "reply": {"text": "trashed"}},
        {"when": {"user_matches": "create"}, "reply": {"tool_calls": [
            {"name": "create_file", "input": {"path": "notes.txt", "content": "kept\n"}}]}},
        {"when": {"user_matches": "delete"}, "reply": {"tool_calls": [
            {"name": "delete_file", "input": {"path": "notes.txt"}}]}}
    ]})
    .to_string();
    let workspace = Workspace::new(&[
        (
            "agents/writer.md",
            "---\nmodel: scripted/s.json\ntools: [create_file, delete_file]\nsandbox: local\n---\nWrite.\n",
        ),
        ("s.json", &script),
    ]);
    for (message, reply) in [("create", "created\n"), ("delete", "trashed\n")] {
        let run = workspace.flue(&["run", "writer", "-m", message, "--id", "w1"]);
        assert_eq!(stdout(&run), reply, "{}", stderr(&run));
    }
    let deleted = workspace.flue(&["session", "delete", "--id", "w1"]);
    assert_eq!(deleted.status.code(), Some(0), "{}", stderr(&deleted));
    assert!(
        stderr(&deleted).contains("its audit log and trash are kept"),
        "{}",
        stderr(&deleted)
    );
    let audit = workspace.flue(&["audit", "--id", "writer:w1", "--json"]);
    assert_eq!(audit.status.code(), Some(0), "{}", stderr(&audit));
    assert_eq!(
        json(&audit)["entries"].as_array().unwrap().len(),
        2,
        "{}",
        stdout(&audit)
    );
    let trash = workspace.flue(&["trash", "list", "--id", "writer:w1", "--json"]);
    assert_eq!(trash.status.code(), Some(0), "{}", stderr(&trash));
    assert!(stdout(&trash).contains("notes.txt"), "{}", stdout(&trash));
}

/// Over HTTP, from Node: fetch without the token is 401; with it, 409 `session_busy` while the
/// message waits (nothing deleted: the official client still reads it), then, after the
/// decision and settlement, 200 `{deleted: true}`; the official client then finds no
/// conversation (404), a second delete answers `{deleted: false}`, and the id starts afresh.
#[test]
fn http_delete_is_token_protected_refused_while_busy_and_read_back_by_the_official_client() {
    let workspace = asking("");
    let token = "delete-test-t0ken-123";
    let server = Server::start(workspace.root(), &["--token", token], &[]);
    let base = format!("http://{}", server.addr());
    let output = std::process::Command::new("node")
        .current_dir(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/peers"))
        .arg("delete_conversation.mjs")
        .args([base.as_str(), token, "careful", "h1"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "{out}\n{}\n{}",
        String::from_utf8_lossy(&output.stderr),
        server.log()
    );
    let facts: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        facts,
        serde_json::json!({
            "withoutToken": 401,
            "busy": {"status": 409, "type": "session_busy", "unsettled": 1},
            "keptMessages": 1,
            "denied": 202,
            "deleted": {"status": 200, "body": {"deleted": true}},
            "afterDelete": {"status": 404, "type": "stream_not_found"},
            "again": {"deleted": false},
            "freshReply": "hi there",
            "freshUserMessages": 1,
        })
    );
    assert!(!workspace.root().join("made.txt").exists());
}
