//! `flue run` and tool confirmations: without a terminal it stops with exit code 3 and the
//! pending actions (`--json`: outcome `requires_action`), `--confirm` / `--deny` resume the
//! conversation from another process, `--yes` approves, and on a pseudo-terminal the person
//! answers y or n.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;

use crate::{Workspace, json, stderr, stdout};

/// An agent whose `bash` asks first; `go` makes one call that creates `made.txt`.
fn asking() -> Workspace {
    let script = serde_json::json!({"rules": [
        {"when": {"user_matches": "^go$", "tool_result": "bash"},
         "reply": {"text": "done"}},
        {"when": {"user_matches": "^go$"},
         "reply": {"tool_calls": [{"name": "bash", "input": {"command": "echo made > made.txt"}}]}}
    ]})
    .to_string();
    Workspace::new(&[
        (
            "agents/careful.md",
            "---\nmodel: scripted/s.json\ntools: [bash]\nsandbox: local\npermissions:\n  bash: always_ask\n---\nWork.\n",
        ),
        ("s.json", &script),
    ])
}

#[test]
fn without_a_terminal_the_run_stops_and_another_run_confirms() {
    let workspace = asking();
    let paused = workspace.flue(&["run", "careful", "-m", "go", "--id", "c1", "--json"]);
    assert_eq!(paused.status.code(), Some(3), "{}", stderr(&paused));
    let envelope = json(&paused);
    assert_eq!(envelope["outcome"], "requires_action");
    let action = &envelope["pendingActions"][0];
    assert_eq!(
        (
            &action["tool_name"],
            &action["kind"],
            &action["input"]["command"]
        ),
        (
            &serde_json::json!("bash"),
            &serde_json::json!("confirmation"),
            &serde_json::json!("echo made > made.txt")
        )
    );
    assert!(!workspace.root().join("made.txt").exists());
    let action_id = action["action_id"].as_str().unwrap().to_owned();

    // New input is refused while the action waits.
    let refused = workspace.flue(&["run", "careful", "-m", "go", "--id", "c1", "--json"]);
    assert_eq!(refused.status.code(), Some(1));
    assert_eq!(json(&refused)["error"]["kind"], "actions_pending");

    let resumed = workspace.flue(&["run", "careful", "--id", "c1", "--confirm", &action_id]);
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    assert_eq!(stdout(&resumed), "done\n");
    assert!(workspace.root().join("made.txt").exists());

    let again = workspace.flue(&[
        "run",
        "careful",
        "--id",
        "c1",
        "--confirm",
        &action_id,
        "--json",
    ]);
    assert_eq!(again.status.code(), Some(1));
    assert_eq!(json(&again)["error"]["kind"], "action_already_resolved");
}

#[test]
fn a_denial_and_yes_resume_or_skip_the_pause() {
    let workspace = asking();
    let paused = workspace.flue(&["run", "careful", "-m", "go", "--id", "d1", "--json"]);
    assert_eq!(paused.status.code(), Some(3));
    let action_id = json(&paused)["pendingActions"][0]["action_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let wrong = workspace.flue(&[
        "run",
        "careful",
        "--id",
        "d1",
        "--tool-result",
        &action_id,
        "--value",
        "1",
        "--json",
    ]);
    assert_eq!(json(&wrong)["error"]["kind"], "invalid_decision");
    let denied = workspace.flue(&[
        "run",
        "careful",
        "--id",
        "d1",
        "--confirm",
        &action_id,
        "--deny",
        "not today",
        "--json",
    ]);
    assert_eq!(denied.status.code(), Some(0), "{}", stderr(&denied));
    assert_eq!(json(&denied)["outcome"], "completed");
    assert!(!workspace.root().join("made.txt").exists());

    let approved = workspace.flue(&["run", "careful", "-m", "go", "--id", "d2", "--yes"]);
    assert_eq!(approved.status.code(), Some(0), "{}", stderr(&approved));
    assert_eq!(stdout(&approved), "done\n");
    assert!(workspace.root().join("made.txt").exists());
}

/// Runs `flue run careful -m go` with stdin and stderr on a pseudo-terminal, answers
/// `answer` when asked, and returns the exit code, stdout and everything the terminal showed.
fn on_terminal(workspace: &Workspace, answer: &str) -> (Option<i32>, String, String) {
    let pty = nix::pty::openpty(None, None).unwrap();
    let child = Command::new(assert_cmd::cargo::cargo_bin("flue"))
        .env("FLUE_TRUST", "1")
        .args(["run", "careful", "-m", "go", "--root"])
        .arg(workspace.root())
        .env_remove("FLUE_LOG")
        .stdin(Stdio::from(pty.slave.try_clone().unwrap()))
        .stderr(Stdio::from(pty.slave))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut master = std::fs::File::from(pty.master);
    let mut reader = master.try_clone().unwrap();
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buffer = [0u8; 4096];
        // The read fails (EIO) once the child closed the terminal.
        while let Ok(n) = reader.read(&mut buffer) {
            if n == 0 || sender.send(buffer[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut shown = String::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !shown.contains("allow? [y/N]") {
        let chunk = receiver
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| panic!("no question on the terminal; it showed: {shown}"));
        shown.push_str(&String::from_utf8_lossy(&chunk));
    }
    master.write_all(format!("{answer}\n").as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    // Everything the terminal still holds, until the reader sees it closed (the deadline only
    // ends a test whose terminal stays open).
    while let Ok(chunk) = receiver.recv_timeout(deadline.saturating_duration_since(Instant::now()))
    {
        shown.push_str(&String::from_utf8_lossy(&chunk));
    }
    (output.status.code(), stdout(&output), shown)
}

#[test]
fn on_a_terminal_the_person_answers_y_or_n() {
    let workspace = asking();
    let (code, out, shown) = on_terminal(&workspace, "n");
    assert_eq!((code, out.as_str()), (Some(0), "done\n"), "{shown}");
    assert!(shown.contains("bash wants to run:"), "{shown}");
    assert!(shown.contains("echo made > made.txt"), "{shown}");
    assert!(!workspace.root().join("made.txt").exists());

    let (code, out, shown) = on_terminal(&workspace, "y");
    assert_eq!((code, out.as_str()), (Some(0), "done\n"), "{shown}");
    assert!(workspace.root().join("made.txt").exists());
}

/// A lead agent that delegates `go` to the `cleaner` subagent, whose `bash` asks first.
fn delegating() -> Workspace {
    let script = serde_json::json!({"rules": [
        {"when": {"user_matches": "^clean$", "tool_result": "bash"},
         "reply": {"text": "cleaned"}},
        {"when": {"user_matches": "^clean$"},
         "reply": {"tool_calls": [{"name": "bash", "input": {"command": "echo made > made.txt"}}]}},
        {"when": {"user_matches": "^go$", "tool_result": "task"},
         "reply": {"text": "lead done"}},
        {"when": {"user_matches": "^go$"},
         "reply": {"tool_calls": [{"name": "task", "input": {"prompt": "clean", "agent": "cleaner"}}]}}
    ]})
    .to_string();
    Workspace::new(&[
        (
            "agents/lead.md",
            "---\nmodel: scripted/s.json\nsandbox: local\nsubagents: [cleaner]\npermissions:\n  bash: always_ask\n---\nLead.\n",
        ),
        (
            "agents/cleaner.md",
            "---\ndescription: Cleans up\nmodel: scripted/s.json\ntools: [bash]\n---\nClean.\n",
        ),
        ("s.json", &script),
    ])
}

#[test]
fn a_subagents_confirmation_stops_the_run_and_another_run_confirms_it() {
    let workspace = delegating();
    let paused = workspace.flue(&["run", "lead", "-m", "go", "--id", "c1", "--json"]);
    assert_eq!(
        paused.status.code(),
        Some(3),
        "{}\n{}",
        stderr(&paused),
        stdout(&paused)
    );
    let envelope = json(&paused);
    assert_eq!(envelope["outcome"], "requires_action");
    let action = &envelope["pendingActions"][0];
    assert_eq!(action["tool_name"], "bash");
    assert!(
        action["session"].as_str().unwrap().starts_with("task:"),
        "{action}"
    );
    assert!(!workspace.root().join("made.txt").exists());
    let action_id = action["action_id"].as_str().unwrap().to_owned();

    let resumed = workspace.flue(&["run", "lead", "--id", "c1", "--confirm", &action_id]);
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    assert_eq!(stdout(&resumed), "lead done\n");
    assert!(workspace.root().join("made.txt").exists());
}
