//! Output to a pipe whose reader went away (`flue session list | head -1`): the command ends
//! quietly with its usual exit status instead of a panic, and what it did stays done.

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Child, Command, Output, Stdio};

use pretty_assertions::assert_eq;

use crate::{Workspace, json, stderr};

const ECHO_SCRIPT: &str = r#"{"rules": [{"reply": {"text": "echo: {{user}}"}}]}"#;

fn echo_workspace() -> Workspace {
    Workspace::new(&[
        (
            "agents/echo.md",
            "---\nmodel: scripted/script.json\n---\nEcho.\n",
        ),
        ("script.json", ECHO_SCRIPT),
    ])
}

fn flue(ws: &Workspace, args: &[&str]) -> Command {
    let mut command = Command::new(assert_cmd::cargo::cargo_bin("flue"));
    command
        .env("FLUE_TRUST", "1")
        .env_remove("FLUE_LOG")
        .args(args)
        .arg("--root")
        .arg(ws.root());
    command
}

/// Runs `command` with stdout a pipe nobody reads any more: its reader is closed before the
/// command starts, so its first write to stdout fails with EPIPE.
fn with_reader_gone(mut command: Command) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    command
        .stdout(writer)
        .stderr(Stdio::piped())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn quiet_success(output: &Output) {
    let err = stderr(output);
    assert!(output.status.success(), "{:?}: {err}", output.status);
    assert!(!err.contains("panicked"), "{err}");
    assert!(!err.contains("error"), "{err}");
}

#[test]
fn listing_into_a_closed_pipe_ends_quietly_with_success() {
    let ws = echo_workspace();
    for id in ["one", "two"] {
        let ran = ws.flue(&["run", "echo", "-m", "hi", "--id", id]);
        assert!(ran.status.success(), "{}", stderr(&ran));
    }
    for args in [
        &["session", "list", "--json"][..],
        &["session", "list"],
        &["session", "show", "--id", "one", "--json"],
        &["tools", "echo"],
    ] {
        let output = with_reader_gone(flue(&ws, args));
        quiet_success(&output);
    }
}

#[test]
fn a_reply_into_a_closed_pipe_ends_quietly_and_the_conversation_is_kept() {
    let ws = echo_workspace();
    let output = with_reader_gone(flue(&ws, &["run", "echo", "-m", "hello", "--id", "gone"]));
    quiet_success(&output);
    let shown = json(&ws.flue(&["session", "show", "--id", "gone", "--json"]));
    assert_eq!(shown["messages"][1]["content"][0]["text"], "echo: hello");
}

/// Like `flue run ... | head -1`: the reader takes the first line of a reply larger than the
/// pipe's buffer and closes, while the command is still writing.
#[test]
fn a_reader_that_stops_after_one_line_ends_a_long_reply_quietly() {
    let ws = echo_workspace();
    let message = format!("{}END", "long line of text\n".repeat(12_000));
    // Into a file: on a pipe nobody reads, the activity written there (the reply streams to
    // stderr too when stdout is not a terminal) would block the command.
    let stderr_path = ws.root().join("stderr.txt");
    let mut child: Child = flue(&ws, &["run", "echo", "-m", "-", "--id", "long"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(format!("{message}\n").as_bytes()).unwrap();
    drop(stdin);
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert_eq!(first, "echo: long line of text\n");
    let status = child.wait().unwrap();
    quiet_success(&Output {
        status,
        stdout: Vec::new(),
        stderr: std::fs::read(&stderr_path).unwrap(),
    });
    let shown = json(&ws.flue(&["session", "show", "--id", "long", "--json"]));
    assert_eq!(
        shown["messages"][1]["content"][0]["text"],
        format!("echo: {message}")
    );
}
