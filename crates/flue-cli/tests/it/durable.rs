//! `flue run` as a durable submission, with real processes: runs killed with SIGKILL at random
//! instants are recovered by the next run on the conversation, and two runs on one
//! conversation at once take turns.
//!
//! The agent runs scripted `bash` tool calls in the local sandbox; each appends its own label
//! (`<step>.a`, `<step>.b`) to `effects.log` in the workspace, so the file counts side effects.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use flue_core::{
    BatchBody, ConversationKey, DeliveredMessage, Offset, Record,
    store::{ConversationStore, SessionKey, SessionStore},
};
use flue_store::SqliteStore;
use pretty_assertions::assert_eq;

use crate::{Workspace, json, stderr, stdout};

/// Kill trials in the suite (each a real `flue run` process killed at a random instant).
const KILL_TRIALS: u64 = 50;
/// Rounds of two concurrent runs on one conversation.
const CONCURRENT_ROUNDS: u64 = 4;

/// A workspace whose agent `worker` answers `step <n>` with two tool calls, each appending
/// `<n>.a` / `<n>.b` to `effects.log` and sleeping `sleep` seconds, then `done <n>`.
fn worker(steps: u64, sleep: &str) -> Workspace {
    let mut rules = Vec::new();
    for step in 0..steps {
        let user = format!("^step {step}$");
        let call = |label: &str| {
            serde_json::json!([{"name": "bash", "input": {
                "command": format!("echo {step}.{label} >> effects.log; sleep {sleep}")
            }}])
        };
        rules.push(serde_json::json!({
            "when": {"user_matches": user, "tool_result": "bash", "turn": 2},
            "reply": {"tool_calls": call("b")}
        }));
        rules.push(serde_json::json!({
            "when": {"user_matches": user, "tool_result": "bash"},
            "reply": {"text": format!("done {step}")}
        }));
        rules.push(serde_json::json!({
            "when": {"user_matches": user},
            "reply": {"tool_calls": call("a")}
        }));
    }
    let script = serde_json::json!({ "rules": rules }).to_string();
    Workspace::new(&[
        (
            "agents/worker.md",
            "---\nmodel: scripted/s.json\ntools: [bash]\nsandbox: local\n---\nWork.\n",
        ),
        ("s.json", &script),
    ])
}

fn spawn_run(ws: &Workspace, id: &str, message: &str, extra: &[&str]) -> Child {
    Command::new(assert_cmd::cargo::cargo_bin("flue"))
        .env("FLUE_TRUST", "1")
        .args([
            "run", "worker", "-m", message, "--id", id, "--json", "--root",
        ])
        .arg(ws.root())
        .args(extra)
        .env_remove("FLUE_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A small deterministic generator (xorshift); the seed is printed so a failure replays.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn from_time() -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let seed = (nanos as u64) | 1;
        eprintln!("seed: {seed}");
        Self(seed)
    }

    pub(crate) fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound
    }
}

/// The submission id a run printed once its message was durable.
fn acknowledged(output: &Output) -> Option<String> {
    stderr(output)
        .lines()
        .find_map(|line| line.strip_prefix("submission: ").map(str::to_owned))
}

/// What the store holds about conversation `worker/<id>`.
struct Stored {
    /// User messages of the root session, in order.
    users: Vec<String>,
    /// Each tool call's label with whether its result was an error (interrupted).
    tool_results: Vec<(String, bool)>,
    /// Settlement count per admitted submission id.
    settlements: BTreeMap<String, usize>,
    /// The admitted messages' texts, in admission order.
    admitted: Vec<String>,
}

fn stored(ws: &Workspace, id: &str) -> Stored {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = Arc::new(SqliteStore::open(&ws.db()).unwrap());
        let key = ConversationKey::new("worker", id);
        let log = store
            .load(&SessionKey::new(key.instance_id(), "default"), 0)
            .await
            .unwrap()
            .expect("the conversation's root session exists");
        let mut users = Vec::new();
        let mut labels = BTreeMap::new();
        let mut tool_results = Vec::new();
        for stored in &log.records {
            match &stored.record {
                Record::User(user) => users.push(user.joined_text()),
                Record::Assistant(message) => {
                    for call in message.tool_calls() {
                        let command = call.input["command"].as_str().unwrap_or_default();
                        let label = command.split_whitespace().nth(1).unwrap_or_default();
                        labels.insert(call.id.clone(), label.to_owned());
                    }
                }
                Record::ToolResult(result) => tool_results.push((
                    labels.get(&result.call_id).cloned().unwrap_or_default(),
                    result.is_error,
                )),
                _ => {}
            }
        }
        let mut settlements = BTreeMap::new();
        let mut admitted = Vec::new();
        let mut after = Offset::START;
        loop {
            let page = store.read_stream(&key, after, 1000).await.unwrap();
            for batch in &page.batches {
                match &batch.body {
                    BatchBody::Admitted {
                        submission_id,
                        message,
                        ..
                    } => {
                        settlements.entry(submission_id.clone()).or_insert(0);
                        if let DeliveredMessage::User { body, .. } = message {
                            admitted.push(body.clone());
                        }
                    }
                    BatchBody::Settled(settlement) => {
                        *settlements
                            .entry(settlement.submission_id.clone())
                            .or_insert(0) += 1;
                    }
                    _ => {}
                }
            }
            if page.up_to_date || page.batches.is_empty() {
                break;
            }
            after = page.next_offset;
        }
        Stored {
            users,
            tool_results,
            settlements,
            admitted,
        }
    })
}

fn effects(root: &Path) -> Vec<String> {
    std::fs::read_to_string(root.join("effects.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Checks what must hold however the runs were killed: every admitted submission settled
/// exactly once, every acknowledged message is in the log exactly once, no tool call ran
/// twice, and every tool call answered as run left its side effect.
fn check_invariants(
    ws: &Workspace,
    id: &str,
    acknowledged: &BTreeSet<String>,
    messages: &[String],
) {
    let stored = stored(ws, id);
    for (submission_id, count) in &stored.settlements {
        assert_eq!(
            *count, 1,
            "submission {submission_id} settled {count} times"
        );
    }
    for submission_id in acknowledged {
        assert!(
            stored.settlements.contains_key(submission_id),
            "acknowledged submission {submission_id} is not in the stream"
        );
    }
    for message in messages {
        let n_in_log = stored.users.iter().filter(|user| *user == message).count();
        assert!(n_in_log <= 1, "{message:?} is in the log {n_in_log} times");
    }
    let effects = effects(ws.root());
    let mut seen = BTreeSet::new();
    for label in &effects {
        assert!(
            seen.insert(label.clone()),
            "tool call {label} ran twice: {effects:?}"
        );
    }
    for (label, is_error) in &stored.tool_results {
        if !is_error {
            assert!(
                seen.contains(label),
                "{label} answered as run but left no effect"
            );
        }
    }
    let answered: BTreeSet<&String> = stored.tool_results.iter().map(|(label, _)| label).collect();
    for label in &seen {
        assert!(
            answered.contains(label),
            "{label} ran but its call has no result"
        );
    }
}

#[test]
fn runs_killed_at_random_instants_are_recovered_by_the_next_run() {
    let ws = worker(KILL_TRIALS + 2, "0.1");
    let mut rng = Rng::from_time();
    let mut acknowledged_ids = BTreeSet::new();
    let mut acknowledged_messages = Vec::new();
    let mut messages = Vec::new();
    let mut n_killed_after_ack = 0;
    // Calibration: how long this machine, now, takes from spawn to admission. Kills land at
    // random within that time plus the run's work, so they hit every phase however loaded
    // the machine is.
    let calibration = format!("step {}", KILL_TRIALS + 1);
    messages.push(calibration.clone());
    let spawned = Instant::now();
    let mut child = spawn_run(&ws, "k", &calibration, &[]);
    let lines = wait_for_line(&mut child, "submission: ", Duration::from_secs(30));
    let ack_ms = u64::try_from(spawned.elapsed().as_millis()).unwrap();
    assert!(child.wait().unwrap().success(), "{lines:?}");
    if let Some(line) = lines.iter().find_map(|l| l.strip_prefix("submission: ")) {
        acknowledged_ids.insert(line.to_owned());
        acknowledged_messages.push(calibration);
    }
    let window_ms = ack_ms + 400;
    let started = Instant::now();
    for step in 0..KILL_TRIALS {
        let message = format!("step {step}");
        messages.push(message.clone());
        let mut child = spawn_run(&ws, "k", &message, &[]);
        // A third of the kills land anywhere (before admission too, as calibrated); a third
        // after admission, before the tools' sleeps (200 ms of them) can be done; a third
        // inside a bash call (its sleep lasts 100 ms after its line). Waiting for the line
        // instead of guessing a time keeps the phases covered on a busy machine.
        let needle = match step % 3 {
            0 => None,
            1 => Some(("submission: ", 200)),
            _ => Some(("-> bash", 100)),
        };
        let seen = match needle {
            None => {
                std::thread::sleep(Duration::from_millis(rng.below(window_ms)));
                Vec::new()
            }
            Some((needle, within_ms)) => {
                let lines = wait_for_line(&mut child, needle, Duration::from_secs(120));
                assert!(lines.iter().any(|l| l.contains(needle)), "{lines:?}");
                std::thread::sleep(Duration::from_millis(rng.below(within_ms)));
                lines
            }
        };
        let _ = child.kill();
        let output = child.wait_with_output().unwrap();
        let submission_id = seen
            .iter()
            .find_map(|line| line.strip_prefix("submission: ").map(str::to_owned))
            .or_else(|| acknowledged(&output));
        if let Some(submission_id) = submission_id {
            acknowledged_ids.insert(submission_id);
            acknowledged_messages.push(message);
            if !output.status.success() {
                n_killed_after_ack += 1;
            }
        }
    }
    // The last run is not killed: it recovers whatever the previous one left, then runs.
    let message = format!("step {KILL_TRIALS}");
    messages.push(message.clone());
    let last = spawn_run(&ws, "k", &message, &[])
        .wait_with_output()
        .unwrap();
    assert!(last.status.success(), "{}", stderr(&last));
    assert_eq!(json(&last)["message"], format!("done {KILL_TRIALS}"));
    eprintln!(
        "{KILL_TRIALS} kill trials in {:?} (admission after {ack_ms} ms): {} acknowledged, \
         {n_killed_after_ack} killed after acknowledging",
        started.elapsed(),
        acknowledged_ids.len()
    );
    // Kills must land both before and after admission for the trials to mean anything.
    assert!(
        n_killed_after_ack >= 5,
        "only {n_killed_after_ack} kills after admission"
    );
    check_invariants(&ws, "k", &acknowledged_ids, &messages);
    let stored = stored(&ws, "k");
    for message in &acknowledged_messages {
        assert!(
            stored.users.contains(message),
            "acknowledged {message:?} is lost"
        );
    }
    // Every acknowledged message was answered: recovery finished what the kills interrupted.
    assert!(stored.settlements.len() >= acknowledged_ids.len());
    let n_interrupted = stored
        .tool_results
        .iter()
        .filter(|(_, is_error)| *is_error)
        .count();
    eprintln!(
        "{} tool calls answered, {n_interrupted} of them interrupted by a kill",
        stored.tool_results.len()
    );
    // Kills landed inside tool calls too (each such call is answered `interrupted`).
    assert!(n_interrupted >= 1, "no kill landed inside a tool call");
}

/// Reads a child's stderr lines as they come, until `needle` shows up (or `timeout`).
pub(crate) fn wait_for_line(child: &mut Child, needle: &str, timeout: Duration) -> Vec<String> {
    let stderr = child.stderr.take().unwrap();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Reads to the end even when nobody listens any more, so the child never writes
        // into a closed pipe.
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let _ = sender.send(line);
        }
    });
    let deadline = Instant::now() + timeout;
    let mut lines = Vec::new();
    while let Ok(line) = receiver.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        let found = line.contains(needle);
        lines.push(line);
        if found {
            break;
        }
    }
    lines
}

#[test]
fn two_runs_on_one_conversation_take_turns_in_order() {
    let ws = worker(2 * CONCURRENT_ROUNDS, "0.2");
    let mut messages = Vec::new();
    let mut acknowledged_ids = BTreeSet::new();
    for round in 0..CONCURRENT_ROUNDS {
        let (first, second) = (2 * round, 2 * round + 1);
        let mut a = spawn_run(&ws, "c", &format!("step {first}"), &[]);
        let lines = wait_for_line(&mut a, "-> bash", Duration::from_secs(20));
        assert!(lines.iter().any(|l| l.contains("-> bash")), "{lines:?}");
        let b = spawn_run(&ws, "c", &format!("step {second}"), &[]);
        let b = b.wait_with_output().unwrap();
        let a_output = a.wait_with_output().unwrap();
        assert!(a_output.status.success());
        assert!(b.status.success(), "{}", stderr(&b));
        assert_eq!(json(&a_output)["message"], format!("done {first}"));
        assert_eq!(json(&b)["message"], format!("done {second}"));
        let b_err = stderr(&b);
        assert!(b_err.contains("is busy: owner "), "{b_err}");
        for output in [&a_output, &b] {
            let envelope = json(output);
            assert!(!stdout(output).contains("version_conflict"), "{envelope}");
            acknowledged_ids.insert(envelope["submissionId"].as_str().unwrap().to_owned());
        }
        messages.extend([format!("step {first}"), format!("step {second}")]);
    }
    let stored = stored(&ws, "c");
    // Both replies, in order, and nobody's tool call answered `interrupted` (no hijack).
    assert_eq!(stored.users, messages);
    assert!(
        stored.tool_results.iter().all(|(_, is_error)| !is_error),
        "{:?}",
        stored.tool_results
    );
    let expected: Vec<String> = (0..2 * CONCURRENT_ROUNDS)
        .flat_map(|step| [format!("{step}.a"), format!("{step}.b")])
        .collect();
    assert_eq!(effects(ws.root()), expected);
    check_invariants(&ws, "c", &acknowledged_ids, &messages);
}

#[test]
fn no_wait_fails_with_session_busy_naming_the_owner() {
    let ws = worker(2, "0.3");
    let mut a = spawn_run(&ws, "n", "step 0", &[]);
    let lines = wait_for_line(&mut a, "-> bash", Duration::from_secs(20));
    assert!(lines.iter().any(|l| l.contains("-> bash")), "{lines:?}");
    let b = spawn_run(&ws, "n", "step 1", &["--no-wait"])
        .wait_with_output()
        .unwrap();
    assert_eq!(b.status.code(), Some(1), "{}", stderr(&b));
    let envelope = json(&b);
    assert_eq!(envelope["outcome"], "error");
    assert_eq!(envelope["error"]["kind"], "session_busy");
    let message = envelope["error"]["message"].as_str().unwrap();
    assert!(message.contains("owner"), "{message}");
    let a = a.wait_with_output().unwrap();
    assert_eq!(json(&a)["message"], "done 0");
    // The refused message was not admitted.
    assert_eq!(stored(&ws, "n").users, vec!["step 0".to_owned()]);
}

#[test]
fn three_runs_at_once_are_answered_in_admission_order() {
    let ws = worker(6, "0.1");
    let mut messages = Vec::new();
    for round in 0..2u64 {
        let first = 3 * round;
        let mut a = spawn_run(&ws, "t", &format!("step {first}"), &[]);
        let lines = wait_for_line(&mut a, "-> bash", Duration::from_secs(20));
        assert!(lines.iter().any(|l| l.contains("-> bash")), "{lines:?}");
        let others: Vec<Child> = [first + 1, first + 2]
            .iter()
            .map(|step| spawn_run(&ws, "t", &format!("step {step}"), &[]))
            .collect();
        let mut outputs = vec![a.wait_with_output().unwrap()];
        outputs.extend(others.into_iter().map(|c| c.wait_with_output().unwrap()));
        for (output, step) in outputs.iter().zip(first..) {
            assert!(output.status.success(), "{}", stderr(output));
            assert_eq!(json(output)["message"], format!("done {step}"));
        }
        messages.extend((first..first + 3).map(|step| format!("step {step}")));
    }
    let stored = stored(&ws, "t");
    // One at a time, first in first out: the log holds the messages in admission order, each
    // turn whole (no interrupted call), and every submission settled once.
    assert_eq!(stored.users, stored.admitted);
    let mut sorted = stored.users.clone();
    sorted.sort();
    let mut expected = messages.clone();
    expected.sort();
    assert_eq!(sorted, expected);
    assert!(stored.tool_results.iter().all(|(_, is_error)| !is_error));
    let expected_effects: Vec<String> = stored
        .admitted
        .iter()
        .flat_map(|message| {
            let step = message.trim_start_matches("step ");
            [format!("{step}.a"), format!("{step}.b")]
        })
        .collect();
    assert_eq!(effects(ws.root()), expected_effects);
    check_invariants(&ws, "t", &BTreeSet::new(), &messages);
}

/// Kill trials of the replay-safe tool test.
const REPLAY_TRIALS: u64 = 30;

/// A workspace whose agent `worker` answers `step <n>` with two calls of `effect`, a
/// replay-safe command tool (labels `<n>.a`, `<n>.b`), then `done <n>`. Each run of `effect`
/// notes its attempt in attempts.log, waits, notes that it reached its effect in reached.log
/// (what a tool ignoring its key would do each time), does its effect once per idempotency key
/// (creating the directory `effects/<label>.<key>`, which fails when it exists), and waits
/// again: a kill can land before, at or after the effect.
fn replay_worker(steps: u64) -> Workspace {
    let mut rules = Vec::new();
    for step in 0..steps {
        let user = format!("^step {step}$");
        let call = |label: &str| serde_json::json!([{"name": "effect", "input": {"label": format!("{step}.{label}")}}]);
        rules.push(serde_json::json!({
            "when": {"user_matches": user, "tool_result": "effect", "turn": 2},
            "reply": {"tool_calls": call("b")}
        }));
        rules.push(serde_json::json!({
            "when": {"user_matches": user, "tool_result": "effect"},
            "reply": {"text": format!("done {step}")}
        }));
        rules.push(serde_json::json!({
            "when": {"user_matches": user},
            "reply": {"tool_calls": call("a")}
        }));
    }
    let script = serde_json::json!({ "rules": rules }).to_string();
    let agent = r#"---
model: scripted/s.json
sandbox: local
durability:
  max_attempts: 20
tools:
  - name: effect
    description: Does one effect per call
    input: {type: object, properties: {label: {type: string}}, required: [label]}
    replay_safe: true
    command: |
      echo "$label $FLUE_IDEMPOTENCY_KEY $FLUE_TOOL_ATTEMPT" >> attempts.log
      sleep 0.15
      echo "$label" >> reached.log
      mkdir -p effects
      if mkdir "effects/$label.$FLUE_IDEMPOTENCY_KEY" 2>/dev/null; then echo "did $label"; else echo "already did $label"; fi
      sleep 0.15
---
Work.
"#;
    Workspace::new(&[("agents/worker.md", agent), ("s.json", &script)])
}

/// One call of `effect` as the log tells it.
#[derive(Debug, Default)]
struct ReplayedCall {
    label: String,
    /// Its `ToolAttempt` records (attempt numbers, and the key of each).
    attempts: Vec<(u32, String)>,
    /// Its result's error kind (`None`: answered with the command's output).
    result: Option<Option<String>>,
}

fn replayed_calls(ws: &Workspace, id: &str) -> Vec<ReplayedCall> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = Arc::new(SqliteStore::open(&ws.db()).unwrap());
        let key = ConversationKey::new("worker", id);
        let log = store
            .load(&SessionKey::new(key.instance_id(), "default"), 0)
            .await
            .unwrap()
            .expect("the conversation's root session exists");
        let mut calls: Vec<(String, ReplayedCall)> = Vec::new();
        for stored in &log.records {
            match &stored.record {
                Record::Assistant(message) => {
                    for call in message.tool_calls() {
                        let label = call.input["label"].as_str().unwrap_or_default();
                        calls.push((
                            call.id.clone(),
                            ReplayedCall {
                                label: label.to_owned(),
                                ..ReplayedCall::default()
                            },
                        ));
                    }
                }
                Record::ToolAttempt(attempt) => {
                    let (_, call) = calls
                        .iter_mut()
                        .find(|(id, _)| *id == attempt.call_id)
                        .expect("an attempt follows its call");
                    call.attempts
                        .push((attempt.attempt, attempt.idempotency_key.clone()));
                }
                Record::ToolResult(result) => {
                    let (_, call) = calls
                        .iter_mut()
                        .find(|(id, _)| *id == result.call_id)
                        .expect("a result follows its call");
                    assert!(call.result.is_none(), "{} answered twice", call.label);
                    call.result = Some(result.error_kind.clone());
                }
                _ => {}
            }
        }
        calls.into_iter().map(|(_, call)| call).collect()
    })
}

fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Replay-safe tool calls cut off by kill -9 at random instants run again on recovery with
/// the same idempotency key: every call is answered with its real output (none
/// `interrupted`), its effect happened exactly once, and the log holds one `tool_attempt`
/// record per run, numbered, all with the call's one key. What a tool ignoring its key would
/// have done twice is counted from reached.log.
#[test]
fn replay_safe_calls_cut_off_by_kill_9_run_again_and_take_effect_once() {
    let ws = replay_worker(REPLAY_TRIALS + 1);
    let mut rng = Rng::from_time();
    let started = Instant::now();
    for step in 0..REPLAY_TRIALS {
        let message = format!("step {step}");
        let mut child = spawn_run(&ws, "r", &message, &[]);
        // Most kills land inside a run of `effect` (the previous step's call run again, or
        // this step's); some anywhere in the first second.
        if step % 4 == 3 {
            std::thread::sleep(Duration::from_millis(rng.below(1000)));
        } else {
            let lines = wait_for_line(&mut child, "-> effect", Duration::from_secs(120));
            assert!(lines.iter().any(|l| l.contains("-> effect")), "{lines:?}");
            std::thread::sleep(Duration::from_millis(rng.below(400)));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    // The last run is not killed: it recovers what the previous one left, then runs.
    let message = format!("step {REPLAY_TRIALS}");
    let last = spawn_run(&ws, "r", &message, &[])
        .wait_with_output()
        .unwrap();
    assert!(last.status.success(), "{}", stderr(&last));
    assert_eq!(json(&last)["message"], format!("done {REPLAY_TRIALS}"));

    let calls = replayed_calls(&ws, "r");
    let effects: Vec<String> = std::fs::read_dir(ws.root().join("effects"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let attempts_log = lines_of(&ws.root().join("attempts.log"));
    let reached = lines_of(&ws.root().join("reached.log"));
    let (mut lost, mut twice, mut replayed, mut naive_twice) = (0, 0, 0, 0);
    for call in &calls {
        let label = &call.label;
        // Every attempt carries the call's one key, numbered 1, 2, ...
        let keys: BTreeSet<&String> = call.attempts.iter().map(|(_, key)| key).collect();
        assert_eq!(keys.len(), 1, "{call:?}");
        let numbers: Vec<u32> = call.attempts.iter().map(|(n, _)| *n).collect();
        let expected: Vec<u32> = (1..=u32::try_from(numbers.len()).unwrap()).collect();
        assert_eq!(numbers, expected, "{call:?}");
        let key = keys.into_iter().next().unwrap();
        // Every run of the command is in the log: each attempts.log line has its record.
        let runs = attempts_log
            .iter()
            .filter(|line| line.starts_with(&format!("{label} {key} ")))
            .count();
        assert!(runs <= call.attempts.len(), "{call:?} ran {runs} times");
        let done = effects
            .iter()
            .filter(|name| **name == format!("{label}.{key}"))
            .count();
        match &call.result {
            Some(None) if done == 1 => {}
            Some(None) => lost += 1,
            other => panic!("{label} answered {other:?}, not with its output: {call:?}"),
        }
        if done > 1 {
            twice += 1;
        }
        if call.attempts.len() > 1 {
            replayed += 1;
        }
        if reached.iter().filter(|line| *line == label).count() > 1 {
            naive_twice += 1;
        }
    }
    // No effect of a call that the log does not hold.
    assert_eq!(effects.len(), calls.len(), "{effects:?}");
    eprintln!(
        "{REPLAY_TRIALS} kill trials in {:?}: {} calls, {replayed} run again after a kill, \
         {} runs in all; lost {lost}, done twice {twice} (a tool ignoring its key would have \
         done {naive_twice} twice)",
        started.elapsed(),
        calls.len(),
        attempts_log.len()
    );
    assert_eq!((lost, twice), (0, 0));
    assert!(
        replayed >= 3,
        "only {replayed} calls were cut off and run again"
    );
}
