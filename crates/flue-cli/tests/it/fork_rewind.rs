//! `flue session fork` and `flue rewind`, and their HTTP routes: real `flue run` and
//! `flue serve` processes with a scripted model on a real workspace and SQLite file. Every
//! command is its own process, so each fork and rewind runs after a restart.

use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::serve::{Server, http, post_message, snapshot};
use crate::{Workspace, json, stderr, stdout};

const AGENT: &str = "---
description: Keeps notes
model: scripted/script.json
sandbox: local
tools: [create_file, delete_file]
---
You keep notes.
";

const SCRIPT: &str = r#"{"rules": [
  {"when": {"tool_result": "create_file"}, "reply": {"text": "created ok={{tool_result.ok}}"}},
  {"when": {"tool_result": "delete_file"}, "reply": {"text": "deleted ok={{tool_result.ok}}"}},
  {"when": {"user_matches": "create a"}, "reply": {"tool_calls": [
    {"name": "create_file", "input": {"path": "notes/a.txt", "content": "alpha\n"}}
  ]}},
  {"when": {"user_matches": "create b"}, "reply": {"tool_calls": [
    {"name": "create_file", "input": {"path": "notes/b.txt", "content": "beta\n"}}
  ]}},
  {"when": {"user_matches": "delete a"}, "reply": {"tool_calls": [
    {"name": "delete_file", "input": {"path": "notes/a.txt"}}
  ]}},
  {"reply": {"text": "heard: {{user}}"}}
]}"#;

fn workspace() -> Workspace {
    Workspace::new(&[("agents/keeper.md", AGENT), ("script.json", SCRIPT)])
}

fn run(ws: &Workspace, id: &str, message: &str) -> String {
    let output = ws.flue(&["run", "keeper", "-m", message, "--id", id]);
    assert!(output.status.success(), "{}", stderr(&output));
    stdout(&output)
}

fn read(ws: &Workspace, path: &str) -> Option<String> {
    std::fs::read_to_string(ws.root().join(path)).ok()
}

/// The `user:` lines of a transcript.
fn user_lines(ws: &Workspace, id: &str) -> Vec<String> {
    let output = ws.flue(&["session", "show", "--id", id]);
    assert!(output.status.success(), "{}", stderr(&output));
    stdout(&output)
        .lines()
        .filter(|line| line.starts_with("user (turn "))
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_fork_copies_the_turns_before_its_point_and_goes_on_alone() {
    let ws = workspace();
    for message in ["first", "second", "third"] {
        run(&ws, "orig", message);
    }
    // `session show --json` numbers the turns that fork takes.
    let shown = json(&ws.flue(&["session", "show", "--id", "orig", "--json"]));
    let turns: Vec<(Value, Value)> = shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|message| message["type"] == "user")
        .map(|message| {
            (
                message["turn"].clone(),
                message["content"][0]["text"].clone(),
            )
        })
        .collect();
    assert_eq!(
        turns,
        vec![
            (json!(1), json!("first")),
            (json!(2), json!("second")),
            (json!(3), json!("third")),
        ]
    );

    let forked = ws.flue(&[
        "session", "fork", "--id", "orig", "--at", "3", "--new-id", "branch",
    ]);
    assert!(forked.status.success(), "{}", stderr(&forked));
    assert_eq!(stdout(&forked), "branch\n");
    assert_eq!(
        user_lines(&ws, "branch"),
        vec!["user (turn 1): first", "user (turn 2): second"]
    );
    // The fork continues on its own; the original is untouched.
    assert_eq!(
        run(&ws, "branch", "another third"),
        "heard: another third\n"
    );
    assert_eq!(
        user_lines(&ws, "branch"),
        vec![
            "user (turn 1): first",
            "user (turn 2): second",
            "user (turn 3): another third"
        ]
    );
    assert_eq!(
        user_lines(&ws, "orig"),
        vec![
            "user (turn 1): first",
            "user (turn 2): second",
            "user (turn 3): third"
        ]
    );

    // A fork without --new-id gets a new ULID; --json says what was copied.
    let forked = json(&ws.flue(&["session", "fork", "--id", "orig", "--at", "2", "--json"]));
    assert_eq!(forked["agent"], "keeper");
    assert_eq!(forked["at"], 2);
    assert_eq!(forked["turns"], 3);
    let new_id = forked["id"].as_str().unwrap();
    assert_eq!(new_id.len(), 26);
    assert_eq!(user_lines(&ws, new_id), vec!["user (turn 1): first"]);

    // Refusals: a point out of range, an id in use; nothing is written.
    let refused = ws.flue(&["session", "fork", "--id", "orig", "--at", "5"]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("has 3 turn(s); pass --at 1 to 4"),
        "{}",
        stderr(&refused)
    );
    let refused = ws.flue(&[
        "session", "fork", "--id", "orig", "--at", "2", "--new-id", "branch",
    ]);
    assert!(!refused.status.success());
    assert_eq!(
        stderr(&refused),
        "error: conversation \"branch\" of agent keeper already exists; pass another --new-id\n"
    );
    assert_eq!(user_lines(&ws, "branch").len(), 3);
    // A fork not yet run on (its sessions only) is taken too: named as a conversation, not
    // by the store's internal session key.
    let fork = |new_id: &str| {
        ws.flue(&[
            "session", "fork", "--id", "orig", "--at", "2", "--new-id", new_id,
        ])
    };
    assert!(fork("fresh").status.success());
    let again = fork("fresh");
    assert_eq!(
        (again.status.code(), stderr(&again)),
        (
            Some(1),
            "error: conversation \"fresh\" of agent keeper already exists; pass another \
             --new-id\n"
                .to_owned()
        )
    );
}

#[test]
fn a_rewind_restores_the_files_before_a_turn_refuses_outside_changes_and_is_undone() {
    let ws = workspace();
    assert_eq!(run(&ws, "c1", "create a"), "created ok=true\n");
    assert_eq!(run(&ws, "c1", "create b"), "created ok=true\n");
    assert_eq!(run(&ws, "c1", "delete a"), "deleted ok=true\n");
    assert_eq!(read(&ws, "notes/a.txt"), None);
    assert_eq!(read(&ws, "notes/b.txt").as_deref(), Some("beta\n"));

    // The dry run lists, and changes nothing.
    let dry = ws.flue(&["rewind", "--id", "c1", "--to", "2", "--dry-run", "--json"]);
    assert!(dry.status.success(), "{}", stderr(&dry));
    let plan: Value = serde_json::from_slice(&dry.stdout).unwrap();
    let actions: Vec<(Value, Value)> = plan["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|file| (file["path"].clone(), file["action"].clone()))
        .collect();
    assert_eq!(
        actions,
        vec![
            (json!("notes/a.txt"), json!("restore")),
            (json!("notes/b.txt"), json!("delete")),
        ]
    );
    assert_eq!(plan["applied"], false);
    assert_eq!(read(&ws, "notes/a.txt"), None);
    let dry = ws.flue(&["rewind", "--id", "c1", "--to", "2", "--dry-run"]);
    assert!(
        stderr(&dry).ends_with(
            "dry run: 2 file(s) would be restored or deleted, nothing was changed; run it again \
             without --dry-run to apply\n"
        ),
        "{}",
        stderr(&dry)
    );
    // A conversation whose tools changed no file: said so, not just "nothing was changed".
    assert_eq!(run(&ws, "talk", "hello"), "heard: hello\n");
    let idle = ws.flue(&["rewind", "--id", "talk", "--to", "1", "--dry-run"]);
    assert_eq!(
        (idle.status.code(), stdout(&idle), stderr(&idle)),
        (
            Some(0),
            String::new(),
            "nothing to rewind: no file tool of conversation \"talk\" changed a file in turn 1 \
             or later (`flue audit --id talk` lists what they changed)\n"
                .to_owned()
        )
    );

    // The rewind: a.txt back from the trash, b.txt (made in turn 2) gone.
    let rewound = ws.flue(&["rewind", "--id", "c1", "--to", "2", "--json"]);
    assert!(rewound.status.success(), "{}", stderr(&rewound));
    let plan: Value = serde_json::from_slice(&rewound.stdout).unwrap();
    assert_eq!(plan["applied"], true);
    let rewind_id = plan["id"].as_str().unwrap().to_owned();
    assert_eq!(read(&ws, "notes/a.txt").as_deref(), Some("alpha\n"));
    assert_eq!(read(&ws, "notes/b.txt"), None);

    // It is audited: one entry per file, tool `rewind`, session `rewind:<id>`.
    let audit = json(&ws.flue(&["audit", "--id", "c1", "--json"]));
    let rewinds: Vec<(Value, Value)> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|entry| entry["tool"] == "rewind")
        .map(|entry| (entry["operation"].clone(), entry["session"].clone()))
        .collect();
    let session = json!(format!("rewind:{rewind_id}"));
    assert_eq!(
        rewinds,
        vec![
            (json!("create"), session.clone()),
            (json!("delete"), session.clone())
        ]
    );

    // Undone: the workspace as before the rewind.
    let undone = ws.flue(&["rewind", "--id", "c1", "--undo", &rewind_id]);
    assert!(undone.status.success(), "{}", stderr(&undone));
    assert_eq!(read(&ws, "notes/a.txt"), None);
    assert_eq!(read(&ws, "notes/b.txt").as_deref(), Some("beta\n"));

    // A file changed outside the agent since its last write: refused, nothing changed.
    std::fs::write(ws.root().join("notes/b.txt"), "edited by hand\n").unwrap();
    let refused = ws.flue(&["rewind", "--id", "c1", "--to", "2"]);
    assert!(!refused.status.success());
    assert!(
        stdout(&refused).contains("conflict   notes/b.txt"),
        "{}",
        stdout(&refused)
    );
    assert!(
        stderr(&refused).contains("changed outside the agent"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(read(&ws, "notes/a.txt"), None);
    assert_eq!(
        read(&ws, "notes/b.txt").as_deref(),
        Some("edited by hand\n")
    );

    // A turn that does not exist.
    let refused = ws.flue(&["rewind", "--id", "c1", "--to", "9"]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("has 3 turn(s)"),
        "{}",
        stderr(&refused)
    );
}

/// Waits until the conversation has `n` settlements.
fn settled(server: &Server, path: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let shown = snapshot(server.addr(), path);
        if shown["settlements"].as_array().unwrap().len() >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{path} never settled:\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn post_json(server: &Server, path: &str, body: &Value) -> (u16, Value) {
    let (status, text) = http(
        server.addr(),
        "POST",
        path,
        &[("content-type", "application/json")],
        &body.to_string(),
    );
    let value = serde_json::from_str(&text).unwrap_or(Value::Null);
    (status, value)
}

#[test]
fn fork_and_rewind_over_http_work_on_a_restarted_server() {
    let ws = workspace();
    let mut server = Server::start(ws.root(), &[], &[]);
    for (n, message) in ["create a", "create b", "delete a"].into_iter().enumerate() {
        post_message(server.addr(), "/agents/keeper/h1", message);
        settled(&server, "/agents/keeper/h1", n + 1);
    }
    // Restarted: what it does next it reads from the store.
    server.kill9();
    let server = Server::start(ws.root(), &[], &[]);

    let (status, forked) = post_json(
        &server,
        "/agents/keeper/h1/fork",
        &json!({"at": 2, "id": "h2"}),
    );
    assert_eq!(status, 201, "{forked}");
    assert_eq!(forked["id"], "h2");
    assert_eq!(forked["turns"], 3);
    post_message(server.addr(), "/agents/keeper/h2", "hello fork");
    settled(&server, "/agents/keeper/h2", 1);
    assert_eq!(
        user_lines(&ws, "h2"),
        vec!["user (turn 1): create a", "user (turn 2): hello fork"]
    );
    let (status, refused) = post_json(
        &server,
        "/agents/keeper/h1/fork",
        &json!({"at": 2, "id": "h2"}),
    );
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"]["type"], "conversation_exists");

    let (status, plan) = post_json(
        &server,
        "/agents/keeper/h1/rewind",
        &json!({"to": 2, "dryRun": true}),
    );
    assert_eq!(status, 200, "{plan}");
    assert_eq!(plan["applied"], false);
    assert_eq!(read(&ws, "notes/a.txt"), None);
    let (status, plan) = post_json(&server, "/agents/keeper/h1/rewind", &json!({"to": 2}));
    assert_eq!(status, 200, "{plan}");
    assert_eq!(plan["applied"], true);
    assert_eq!(read(&ws, "notes/a.txt").as_deref(), Some("alpha\n"));
    assert_eq!(read(&ws, "notes/b.txt"), None);

    std::fs::write(ws.root().join("notes/a.txt"), "edited by hand\n").unwrap();
    let (status, refused) = post_json(
        &server,
        "/agents/keeper/h1/rewind",
        &json!({"undo": plan["id"]}),
    );
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"]["type"], "rewind_conflict");
    assert_eq!(
        read(&ws, "notes/a.txt").as_deref(),
        Some("edited by hand\n")
    );
    let (status, refused) = post_json(&server, "/agents/keeper/h1/rewind", &json!({"to": "x"}));
    assert_eq!(status, 400, "{refused}");
}

#[test]
fn fork_and_rewind_on_postgres_from_another_node() {
    let ws = workspace();
    let url = crate::pg_server::fresh_database();
    let mut first = Server::start(ws.root(), &["--store", &url], &[]);
    for (n, message) in ["create a", "create b", "delete a"].into_iter().enumerate() {
        post_message(first.addr(), "/agents/keeper/p1", message);
        settled(&first, "/agents/keeper/p1", n + 1);
    }
    // The node that ran the conversation is gone; another one forks and rewinds it.
    first.kill9();
    let second = Server::start(ws.root(), &["--store", &url], &[]);
    let (status, forked) = post_json(
        &second,
        "/agents/keeper/p1/fork",
        &json!({"at": 3, "id": "p2"}),
    );
    assert_eq!(status, 201, "{forked}");
    post_message(second.addr(), "/agents/keeper/p2", "hello fork");
    settled(&second, "/agents/keeper/p2", 1);
    let shown = json(&ws.flue(&["session", "show", "--id", "p2", "--store", &url, "--json"]));
    let users: Vec<&Value> = shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|message| message["type"] == "user")
        .map(|message| &message["content"][0]["text"])
        .collect();
    assert_eq!(users, vec!["create a", "create b", "hello fork"]);

    let (status, plan) = post_json(&second, "/agents/keeper/p1/rewind", &json!({"to": 2}));
    assert_eq!(status, 200, "{plan}");
    assert_eq!(read(&ws, "notes/a.txt").as_deref(), Some("alpha\n"));
    assert_eq!(read(&ws, "notes/b.txt"), None);
    // Undone from the command line, on the same store.
    let undone = ws.flue(&[
        "rewind",
        "--id",
        "p1",
        "--undo",
        plan["id"].as_str().unwrap(),
        "--store",
        &url,
    ]);
    assert!(undone.status.success(), "{}", stderr(&undone));
    assert_eq!(read(&ws, "notes/a.txt"), None);
    assert_eq!(read(&ws, "notes/b.txt").as_deref(), Some("beta\n"));
}
