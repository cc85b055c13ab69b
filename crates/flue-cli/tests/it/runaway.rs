//! `flue run` with runaway commands in the virtual sandbox (the default): a CPU-bound loop
//! stops at the sandbox's `timeout_ms` and on SIGINT or SIGTERM, and recursion the interpreter
//! does not count ends as a tool error, not a crashed process.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;

use crate::{Workspace, json, stderr};

/// A CPU-bound loop that runs until something stops it: each of its iterations expands a
/// thousand words, so the sandbox's limit of 100,000 loop iterations is minutes of CPU away
/// even on a fast machine, and only the timeout or a signal can end it within a test.
const ENDLESS: &str = "while true; do a=({1..1000}); done";

/// The longest wait for flue to end after what should end it: generous (a busy machine is
/// slow); it only ends a test that would otherwise hang.
const PATIENCE: Duration = Duration::from_secs(120);

/// A workspace whose agent runs `command` with bash in a virtual sandbox with `timeout_ms`,
/// then replies with the tool result.
fn workspace(command: &str, timeout_ms: u64) -> Workspace {
    let agent = format!(
        "---\nmodel: scripted/s.json\ntools: [bash]\nsandbox: {{ kind: virtual, timeout_ms: {timeout_ms} }}\n---\nRun it.\n"
    );
    let script = serde_json::json!({
        "rules": [
            {"when": {"tool_result": "bash"}, "reply": {"text": "{{tool_result}}"}},
            {"reply": {"tool_calls": [{"name": "bash", "input": {"command": command}}]}}
        ]
    })
    .to_string();
    Workspace::new(&[("agents/w.md", &agent), ("s.json", &script)])
}

#[test]
fn a_cpu_bound_loop_stops_at_the_sandbox_timeout() {
    let ws = workspace(ENDLESS, 1_000);
    let output = ws.flue(&["run", "w", "-m", "go", "--json"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let message = json(&output)["message"].as_str().unwrap().to_owned();
    assert!(message.contains("timed out after 1000 ms"), "{message}");
}

#[test]
fn eval_recursion_is_a_tool_error_not_a_crash() {
    let ws = workspace(r#"cmd='eval "$cmd"'; eval "$cmd""#, 10_000);
    let output = ws.flue(&["run", "w", "-m", "go", "--json"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let message = json(&output)["message"].as_str().unwrap().to_owned();
    assert!(message.contains("nested too deeply"), "{message}");
}

#[test]
fn a_signal_stops_a_cpu_bound_loop() {
    let ws = workspace(ENDLESS, 600_000);
    let mut outcomes = Vec::new();
    for signal in ["INT", "TERM"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_flue"))
            .env("FLUE_TRUST", "1")
            .args(["run", "w", "-m", "go", "--json", "--root"])
            .arg(ws.root())
            .env_remove("FLUE_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Signal once the command is starting (the loop runs until a signal or the 10 minute
        // timeout ends it).
        let mut stderr_lines = BufReader::new(child.stderr.take().unwrap()).lines();
        for line in stderr_lines.by_ref() {
            if line.unwrap().starts_with("-> bash") {
                break;
            }
        }
        let drain = std::thread::spawn(move || stderr_lines.count());
        let sent = Command::new("kill")
            .args([format!("-{signal}"), child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let signalled = Instant::now();
        let stopped = loop {
            if child.try_wait().unwrap().is_some() {
                break true;
            }
            if signalled.elapsed() > PATIENCE {
                let _ = child.kill();
                break false;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let output = child.wait_with_output().unwrap();
        drain.join().unwrap();
        let envelope: serde_json::Value =
            serde_json::from_slice(&output.stdout).unwrap_or_default();
        outcomes.push((
            signal,
            output.status.code(),
            envelope["outcome"].as_str().map(str::to_owned),
            stopped,
        ));
    }
    assert_eq!(
        outcomes,
        vec![
            ("INT", Some(130), Some("aborted".to_owned()), true),
            ("TERM", Some(143), Some("aborted".to_owned()), true),
        ]
    );
}
