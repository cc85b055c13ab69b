//! `flue run` under signals, with real processes in the local sandbox: SIGTERM at random
//! instants goes through the abort path (exit 143, the `--json` envelope, a loadable log, no
//! command left running); after SIGKILL of flue, the agent's commands die within a bound, in
//! the local and the isolated sandbox.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pretty_assertions::assert_eq;

use crate::Workspace;

/// What the agent runs: its shell's pid and a background job's pid go to `pids`, then it
/// sleeps far longer than any test.
const LONG_COMMAND: &str =
    "echo $$ >> pids; (sleep 1001; echo never) & echo $! >> pids; while true; do sleep 1002; done";

/// How long after flue's death its commands may still be seen alive. Their death does not wait
/// on a clock (the local sandbox's watchdog kills the group when flue's end of its pipe closes;
/// the isolated sandbox's namespace dies with its init), so the checks below return as soon as
/// none is left; this generous bound only ends a test whose commands survive for good.
const DEATH_BOUND: Duration = Duration::from_secs(60);

/// The longest wait for something flue does on its own (catch a signal, start a command, exit
/// after a signal): generous, a busy machine is slow; it only ends a test that would hang.
const PATIENCE: Duration = Duration::from_secs(120);

fn workspace() -> Workspace {
    workspace_running(LONG_COMMAND)
}

/// A workspace whose agent (local sandbox) runs `command`.
fn workspace_running(command: &str) -> Workspace {
    let agent = "---\nmodel: scripted/s.json\ntools: [bash]\nsandbox: local\n---\nRun it.\n";
    let script = serde_json::json!({
        "rules": [
            {"when": {"tool_result": "bash"}, "reply": {"text": "{{tool_result}}"}},
            {"reply": {"text": "running", "tool_calls": [{"name": "bash", "input": {"command": command}}]}}
        ]
    })
    .to_string();
    Workspace::new(&[("agents/w.md", agent), ("s.json", &script)])
}

fn spawn_run(ws: &Workspace, id: &str) -> Child {
    spawn_run_in(ws, id, "local")
}

fn spawn_run_in(ws: &Workspace, id: &str, sandbox: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_flue"))
        .env("FLUE_TRUST", "1")
        .args([
            "run",
            "w",
            "-m",
            "go",
            "--json",
            "--sandbox",
            sandbox,
            "--id",
            id,
            "--root",
        ])
        .arg(ws.root())
        .env_remove("FLUE_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn send(child: &Child, signal: &str) {
    let status = Command::new("kill")
        .args([format!("-{signal}"), child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Waits until `child` catches SIGTERM (bit 15 of `SigCgt` in its /proc status).
fn wait_for_sigterm_handler(child: &Child) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
        let caught = status
            .lines()
            .find_map(|line| line.strip_prefix("SigCgt:"))
            .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
            .unwrap_or(0);
        if caught & (1 << (15 - 1)) != 0 {
            return;
        }
        assert!(Instant::now() < deadline, "flue never caught SIGTERM");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The pids the command wrote so far.
fn pids(root: &Path) -> Vec<u32> {
    std::fs::read_to_string(root.join("pids"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect()
}

/// Whether `pid` is a live process (a zombie is dead).
pub(crate) fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}

/// The pids of `root`'s command still alive once [`DEATH_BOUND`] has passed (or sooner, once
/// none is).
fn survivors(root: &Path) -> Vec<u32> {
    let deadline = Instant::now() + DEATH_BOUND;
    loop {
        let alive_now: Vec<u32> = pids(root).into_iter().filter(|pid| alive(*pid)).collect();
        if alive_now.is_empty() || Instant::now() >= deadline {
            return alive_now;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the command has written both pids (it is running).
fn wait_for_command(root: &Path) {
    let deadline = Instant::now() + PATIENCE;
    while pids(root).len() < 2 {
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether every tool call of a `session show --json` log has exactly one result.
fn every_call_answered_once(log: &serde_json::Value) -> bool {
    let messages = log["messages"].as_array().cloned().unwrap_or_default();
    let mut calls: Vec<String> = messages
        .iter()
        .filter_map(|message| message["content"].as_array())
        .flatten()
        .filter(|part| part["type"] == "tool_call")
        .filter_map(|part| part["id"].as_str().map(str::to_owned))
        .collect();
    let mut results: Vec<String> = messages
        .iter()
        .filter(|message| message["type"] == "tool_result")
        .filter_map(|message| message["call_id"].as_str().map(str::to_owned))
        .collect();
    calls.sort();
    results.sort();
    calls == results
}

/// A small generator of delays, seeded from the clock (the seed is printed on failure).
struct Delays(u64);

impl Delays {
    fn next_ms(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % below
    }
}

#[test]
fn sigterm_at_random_instants_aborts_like_ctrl_c_and_leaves_nothing_running() {
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
        .into();
    let mut delays = Delays(seed);
    let ws = workspace();
    let mut outcomes = Vec::new();
    let mut n_during_command = 0;
    for trial in 0..6 {
        let _ = std::fs::remove_file(ws.root().join("pids"));
        let id = format!("term-{trial}");
        let mut child = spawn_run(&ws, &id);
        // Half the trials strike at any instant once flue catches SIGTERM (setup, model turn,
        // the command's start); the other half once the command runs. Before the handler
        // exists (exec, the first milliseconds of main) a signal ends any program outright.
        if trial % 2 == 1 {
            wait_for_command(ws.root());
        } else {
            wait_for_sigterm_handler(&child);
        }
        std::thread::sleep(Duration::from_millis(delays.next_ms(400)));
        let running = pids(ws.root()).len() == 2;
        n_during_command += usize::from(running);
        send(&child, "TERM");
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(
                started.elapsed() < PATIENCE,
                "flue did not exit after SIGTERM (seed {seed})"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        let output = child.wait_with_output().unwrap();
        let envelope: serde_json::Value = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|err| panic!("no envelope ({err}), seed {seed}: {output:?}"));
        // The log loads, well-formed, whenever the conversation was created before the signal.
        let show = ws.flue(&["session", "show", "--id", &id, "--json"]);
        let log_state = if show.status.success() {
            let log: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
            if every_call_answered_once(&log) {
                "well-formed"
            } else {
                "broken"
            }
        } else if String::from_utf8_lossy(&show.stderr).contains(&id) {
            "never created"
        } else {
            "broken"
        };
        outcomes.push((
            trial,
            status.code(),
            envelope["outcome"].as_str().map(str::to_owned),
            log_state != "broken",
            survivors(ws.root()),
        ));
    }
    let expected: Vec<_> = (0..6)
        .map(|trial| {
            (
                trial,
                Some(143),
                Some("aborted".to_owned()),
                true,
                Vec::new(),
            )
        })
        .collect();
    assert_eq!(outcomes, expected, "seed {seed}");
    assert!(n_during_command >= 3, "seed {seed}");
}

#[test]
fn after_sigkill_of_flue_its_commands_die_within_a_bound() {
    let ws = workspace();
    let mut outcomes = Vec::new();
    for trial in 0..3 {
        let _ = std::fs::remove_file(ws.root().join("pids"));
        let mut child = spawn_run(&ws, &format!("kill-{trial}"));
        wait_for_command(ws.root());
        send(&child, "KILL");
        let _ = child.wait().unwrap();
        outcomes.push((pids(ws.root()).len(), survivors(ws.root())));
    }
    assert_eq!(outcomes, vec![(2, Vec::new()); 3]);
}

/// Host pids of live processes whose command line contains `marker`; with `sleeps_only`, only
/// the `sleep` processes among them.
fn processes_with(marker: &str, sleeps_only: bool) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline);
        if cmdline.contains(marker) && (!sleeps_only || cmdline.starts_with("sleep")) && alive(pid)
        {
            found.push(pid);
        }
    }
    found
}

#[test]
fn after_sigkill_of_flue_isolated_commands_die_within_a_bound() {
    // A sleep length no other process uses, found on the host by its command line (the pids
    // the command sees are those of its pid namespace).
    let marker = format!("1001.{}", std::process::id());
    let ws = workspace_running(&format!("(sleep {marker}; echo never) & sleep {marker}"));
    let mut outcomes = Vec::new();
    for trial in 0..2 {
        let mut child = spawn_run_in(&ws, &format!("kill-isolated-{trial}"), "isolated");
        let deadline = Instant::now() + PATIENCE;
        while processes_with(&marker, true).len() < 2 {
            assert!(Instant::now() < deadline, "the command never started");
            std::thread::sleep(Duration::from_millis(10));
        }
        send(&child, "KILL");
        let _ = child.wait().unwrap();
        let bound = Instant::now() + DEATH_BOUND;
        while !processes_with(&marker, false).is_empty() && Instant::now() < bound {
            std::thread::sleep(Duration::from_millis(20));
        }
        outcomes.push(processes_with(&marker, false));
    }
    assert_eq!(outcomes, vec![Vec::<u32>::new(); 2]);
}
