//! `flue audit` and `flue trash`: what an agent's file tools changed, end to end through
//! `flue run` with a scripted model, a real workspace and a real SQLite file.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::{Workspace, json, stderr, stdout};

const AGENT: &str = "---
description: Keeps a todo file
model: scripted/script.json
sandbox: local
tools: [create_file, delete_file]
---
You keep the todo file.
";

const SCRIPT: &str = r#"{"rules": [
  {"when": {"tool_result": "create_file"}, "reply": {"text": "create ok={{tool_result.ok}} {{tool_result.error.kind}}"}},
  {"when": {"tool_result": "delete_file"}, "reply": {"text": "trash id {{tool_result.data.trashId}}"}},
  {"when": {"user_matches": "create"}, "reply": {"tool_calls": [
    {"name": "create_file", "input": {"path": "notes/todo.txt", "content": "buy milk\n"}}
  ]}},
  {"when": {"user_matches": "delete"}, "reply": {"tool_calls": [
    {"name": "delete_file", "input": {"path": "notes/todo.txt"}}
  ]}},
  {"reply": {"text": "?"}}
]}"#;

fn workspace() -> Workspace {
    Workspace::new(&[("agents/keeper.md", AGENT), ("script.json", SCRIPT)])
}

fn run(ws: &Workspace, message: &str) -> String {
    let output = ws.flue(&["run", "keeper", "-m", message, "--id", "c1"]);
    assert!(output.status.success(), "{}", stderr(&output));
    stdout(&output)
}

#[test]
fn audit_and_trash_follow_what_the_agent_did() {
    let ws = workspace();
    assert_eq!(run(&ws, "create the todo"), "create ok=true \n");
    assert_eq!(
        std::fs::read_to_string(ws.root().join("notes/todo.txt")).unwrap(),
        "buy milk\n"
    );
    assert_eq!(
        run(&ws, "create it again"),
        "create ok=false already_exists\n"
    );
    let deleted = run(&ws, "delete the todo");
    let trash_id = deleted.trim().strip_prefix("trash id ").unwrap().to_owned();
    assert_eq!(trash_id.len(), 26, "{deleted}");
    assert!(!ws.root().join("notes/todo.txt").exists());

    // The audit log, as JSON: every call, the failed one too.
    let audit = json(&ws.flue(&["audit", "--id", "c1", "--json"]));
    let root = ws.root().canonicalize().unwrap().display().to_string();
    let todo = format!("{root}/notes/todo.txt");
    let summary: Vec<Value> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| {
            json!([
                entry["tool"],
                entry["operation"],
                entry["path"],
                entry["ok"],
                entry["error_kind"],
                entry["session"],
                entry["agent"]
            ])
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            json!([
                "create_file",
                "create",
                todo,
                true,
                null,
                "default",
                "keeper"
            ]),
            json!([
                "create_file",
                "create",
                todo,
                false,
                "already_exists",
                "default",
                "keeper"
            ]),
            json!([
                "delete_file",
                "delete",
                todo,
                true,
                null,
                "default",
                "keeper"
            ]),
        ]
    );
    assert_eq!(
        audit["entries"][0]["diff"],
        "--- /dev/null\n+++ b/notes/todo.txt\n@@ -0,0 +1 @@\n+buy milk\n"
    );

    // As text, one line per entry.
    let text = stdout(&ws.flue(&["audit", "--id", "c1"]));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    let (time, rest) = lines[0].split_once("  ").unwrap();
    assert_eq!(
        (time.len(), &time[..2], time.ends_with('Z')),
        (20, "20", true),
        "{text}"
    );
    let sha_prefix = audit["entries"][0]["sha256_after"].as_str().unwrap()[..12].to_owned();
    assert_eq!(
        rest,
        format!(
            "create_file create  notes/todo.txt  - -> {sha_prefix}  (conversation c1, session default, agent keeper)"
        )
    );
    assert!(
        lines[1].contains("FAILED already_exists: notes/todo.txt already exists"),
        "{text}"
    );
    let with_diff = stdout(&ws.flue(&["audit", "--id", "c1", "--diff"]));
    assert!(with_diff.contains("+buy milk\n"), "{with_diff}");

    // The trash.
    let listed = json(&ws.flue(&["trash", "list", "--id", "c1", "--json"]));
    assert_eq!(
        (
            listed["entries"][0]["id"].clone(),
            listed["entries"][0]["path"].clone(),
            listed["entries"][0]["reason"].clone(),
            listed["entries"][0]["size"].clone()
        ),
        // Workspace-relative: it restores wherever the workspace is.
        (
            json!(trash_id),
            json!("notes/todo.txt"),
            json!("deleted"),
            json!(9)
        )
    );
    let text = stdout(&ws.flue(&["trash", "list", "--id", "c1"]));
    assert!(text.starts_with(&format!("{trash_id}  ")), "{text}");
    assert!(
        text.contains("deleted      notes/todo.txt  9 bytes"),
        "{text}"
    );

    // Restore: back in place; a second time it is occupied; elsewhere is fine.
    let restored = ws.flue(&["trash", "restore", &trash_id, "--id", "c1"]);
    assert!(restored.status.success(), "{}", stderr(&restored));
    assert!(stdout(&restored).starts_with("restored notes/todo.txt (sha256 "));
    assert_eq!(
        std::fs::read_to_string(ws.root().join("notes/todo.txt")).unwrap(),
        "buy milk\n"
    );
    let again = ws.flue(&["trash", "restore", &trash_id, "--id", "c1"]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        stderr(&again).contains("already_exists"),
        "{}",
        stderr(&again)
    );
    let elsewhere = ws.flue(&[
        "trash",
        "restore",
        &trash_id,
        "--id",
        "c1",
        "--to",
        "old/todo.txt",
        "--json",
    ]);
    assert!(elsewhere.status.success(), "{}", stderr(&elsewhere));
    assert_eq!(json(&elsewhere)["data"]["path"], "old/todo.txt");
    assert_eq!(
        std::fs::read_to_string(ws.root().join("old/todo.txt")).unwrap(),
        "buy milk\n"
    );

    // Restores from the command line are audited too.
    let audit = json(&ws.flue(&["audit", "--id", "c1", "--json"]));
    let restores: Vec<Value> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|entry| entry["tool"] == "restore_file")
        .map(|entry| json!([entry["ok"], entry["session"], entry["error_kind"]]))
        .collect();
    assert_eq!(
        restores,
        vec![
            json!([true, "cli", null]),
            json!([false, "cli", "already_exists"]),
            json!([true, "cli", null])
        ]
    );
}

#[test]
fn unknown_ids_are_empty_and_missing_stores_are_errors() {
    let ws = workspace();
    let none = ws.flue(&["audit", "--id", "c1"]);
    assert_eq!(none.status.code(), Some(1));
    assert!(
        stderr(&none).contains("no conversations are stored"),
        "{}",
        stderr(&none)
    );
    run(&ws, "create the todo");
    let other = ws.flue(&["audit", "--id", "other", "--json"]);
    assert!(other.status.success());
    assert_eq!(json(&other), json!({"id": "other", "entries": []}));
    let trash = ws.flue(&["trash", "list", "--id", "other"]);
    assert_eq!(stdout(&trash), "");
    assert!(stderr(&trash).contains("is empty"));
    let missing = ws.flue(&["trash", "restore", "01NOPE", "--id", "c1"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        stderr(&missing).contains("not_found"),
        "{}",
        stderr(&missing)
    );
}
