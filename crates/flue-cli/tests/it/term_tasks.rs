//! Running tasks in `flue chat` on a real pseudo-terminal: the status line lists them while a
//! reply runs (agent, current tool, tokens), `/tasks` lists them with their sessions and
//! `/abort N` aborts one alone while the other's answer still reaches the reply. Each task
//! waits in `cat` on a FIFO the test writes, so nothing depends on timing.

use std::process::Command;

use crate::Workspace;
use crate::pty::Terminal;

/// `lead` starts two tasks at once, `reader-a` reading the FIFO `gate-a` and `reader-b`
/// reading `gate-b`; it answers once both calls are answered.
fn gated() -> Workspace {
    let reader = |gate: &str| {
        format!(
            "---\ndescription: Reads {gate}\nmodel: scripted/s.json\ntools: [bash]\n\
             sandbox: local\n---\nRead.\n"
        )
    };
    let ws = Workspace::new(&[
        (
            "agents/lead.md",
            "---\nmodel: scripted/s.json\ntools: [bash]\nsubagents: [reader-a, reader-b]\n\
             sandbox: local\n---\nDelegate.\n",
        ),
        ("agents/reader-a.md", &reader("gate-a")),
        ("agents/reader-b.md", &reader("gate-b")),
        (
            "s.json",
            r#"{"rules": [
  {"when": {"user_contains": "gate-", "tool_result": "bash"}, "reply": {"text": "read it"}},
  {"when": {"user_contains": "gate-a"}, "reply": {"tool_calls": [
    {"name": "bash", "input": {"command": "cat gate-a"}}]}},
  {"when": {"user_contains": "gate-b"}, "reply": {"tool_calls": [
    {"name": "bash", "input": {"command": "cat gate-b"}}]}},
  {"when": {"tool_result": "task"}, "reply": {"text": "Both tasks answered."}},
  {"reply": {"tool_calls": [
    {"name": "task", "input": {"agent": "reader-a", "prompt": "Read gate-a"}},
    {"name": "task", "input": {"agent": "reader-b", "prompt": "Read gate-b"}}]}}
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

/// The number `/tasks` gave the task of `agent` on `screen`.
fn number_of(screen: &vt100::Parser, agent: &str) -> String {
    let contents = screen.screen().contents();
    let line = contents
        .lines()
        .find(|line| line.starts_with('[') && line.contains(&format!("] {agent} task:")))
        .unwrap_or_else(|| panic!("no /tasks line for {agent}:\n{contents}"));
    line[1..line.find(']').unwrap()].to_owned()
}

#[test]
fn the_status_line_lists_running_tasks_and_abort_n_aborts_one_while_the_reply_goes_on() {
    let ws = gated();
    let root = ws.root().to_str().unwrap();
    let mut terminal = Terminal::start(&["chat", "lead", "--id", "t1", "--root", root]);
    terminal.resize(200);
    terminal.expect("> ");
    terminal.send("go\r");
    // Both tasks are in their command: the status line names each with its tool.
    terminal.expect_screen("reader-a bash");
    terminal.expect_screen("reader-b bash");
    let screen = terminal.expect_screen("· tasks: [1] reader-");
    let status = screen.screen().contents();
    assert!(status.contains("/abort N aborts a task"), "{status}");
    assert!(status.contains(" tokens, [2] reader-"), "{status}");

    terminal.send("/tasks\r");
    let screen = terminal.expect_screen("] reader-b task:");
    let screen = if screen.screen().contents().contains("] reader-a task:") {
        screen
    } else {
        terminal.expect_screen("] reader-a task:")
    };
    let first = number_of(&screen, "reader-a");
    assert!(
        screen.screen().contents().contains(": bash, "),
        "{}",
        screen.screen().contents()
    );
    terminal.send(&format!("/abort {first}\r"));
    terminal.expect("aborting task task:");
    terminal.expect("alone; the reply goes on");
    // Only now does the other task's command get its line; the reply completes.
    std::fs::write(ws.root().join("gate-b"), "b\n").unwrap();
    terminal.expect("Both tasks answered.");
    terminal.expect("> ");
    terminal.send("/exit\r");
    let (code, shown) = terminal.wait();
    assert_eq!(code, 0, "{shown}");
    assert!(shown.contains("<= task reader-a aborted"), "{shown}");
    assert!(shown.contains("<= task reader-b done"), "{shown}");
}

#[test]
fn flue_run_on_a_terminal_lists_running_tasks_in_its_status_line() {
    let ws = gated();
    let root = ws.root().to_str().unwrap();
    let mut terminal = Terminal::start(&["run", "lead", "-m", "go", "--root", root]);
    terminal.resize(200);
    let screen = terminal.expect_screen("· tasks: [1] reader-");
    let status = screen.screen().contents();
    assert!(status.contains(" tokens, [2] reader-"), "{status}");
    terminal.expect_screen("reader-a bash");
    terminal.expect_screen("reader-b bash");
    // Both commands get their line; the tasks end, and so does the line's list.
    std::fs::write(ws.root().join("gate-a"), "a\n").unwrap();
    std::fs::write(ws.root().join("gate-b"), "b\n").unwrap();
    let (code, shown) = terminal.wait();
    assert_eq!(code, 0, "{shown}");
    assert!(shown.contains("Both tasks answered."), "{shown}");
    assert!(shown.contains("<= task reader-a done"), "{shown}");
    // `flue run` reads no command while it works: the hint is the chat's only.
    assert!(!shown.contains("/abort N"), "{shown}");
}
