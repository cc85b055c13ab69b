//! Durable pauses: a submission that paused on pending actions is `waiting` (no owner, no
//! clock running), any process resolves it from the stored log, the first decision wins, and
//! a kill -9 of the pausing process loses nothing and runs no tool twice.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use flue_core::{
    ActionDecision, AgentRuntime, ConversationKey, DeliveredMessage, DispatchOptions,
    DurabilityConfig, MemoryStore, Outcome, store::ConversationStore, submission::SubmissionState,
};
use flue_store::SqliteStore;
use pretty_assertions::assert_eq;

use crate::submission_support::{AGENT, AgentSettings, runtime, side_effect_counts};

fn asking(dir: &Path) -> AgentSettings {
    let mut settings = AgentSettings::new(dir);
    settings.ask = true;
    settings.delegate = std::env::var_os("FLUE_PAUSE_DELEGATE").is_some();
    settings
}

/// What the pausing process sends: `tools 1`, or `delegate 1` (the `helper` subagent's call
/// pauses) with `FLUE_PAUSE_DELEGATE` set.
fn pausing_prompt() -> &'static str {
    match std::env::var_os("FLUE_PAUSE_DELEGATE") {
        Some(_) => "delegate 1",
        None => "tools 1",
    }
}

fn key() -> ConversationKey {
    ConversationKey::new(AGENT, "paused-1")
}

async fn pending_ids(runtime: &AgentRuntime) -> Vec<String> {
    runtime
        .actions(&key())
        .await
        .unwrap()
        .into_iter()
        .filter(|info| info.decision.is_none())
        .map(|info| info.action.action_id)
        .collect()
}

#[tokio::test]
async fn a_paused_submission_waits_unowned_off_the_clock_and_resumes_per_decision() {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = asking(dir.path());
    settings.durability = DurabilityConfig {
        timeout_ms: 400,
        ..DurabilityConfig::default()
    };
    let store = Arc::new(MemoryStore::new());
    let runtime = runtime(store.clone(), &settings).await;
    let receipt = runtime
        .dispatch(
            &key(),
            DeliveredMessage::user("tools 2"),
            DispatchOptions::default(),
        )
        .await
        .unwrap();
    let info = runtime.wait_idle(&receipt.submission_id).await.unwrap();
    assert_eq!((info.state, info.attempts), (SubmissionState::Waiting, 1));
    let conversation = runtime.conversation(&key()).await.unwrap().unwrap();
    assert_eq!((conversation.owner, conversation.unsettled), (None, 0));
    assert!(store.pending_conversations().await.unwrap().is_empty());
    let pending = pending_ids(&runtime).await;
    assert_eq!(pending.len(), 2);

    // New input is refused while actions wait, naming them.
    let refused = runtime
        .dispatch(
            &key(),
            DeliveredMessage::user("hi"),
            DispatchOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), "actions_pending");
    assert!(refused.to_string().contains(&pending[0]), "{refused}");

    // Waiting longer than the whole budget does not count against it.
    tokio::time::sleep(Duration::from_millis(600)).await;
    runtime
        .resolve(&key(), &pending[0], ActionDecision::Allow)
        .await
        .unwrap();
    let info = runtime.wait_idle(&receipt.submission_id).await.unwrap();
    assert_eq!((info.state, info.attempts), (SubmissionState::Waiting, 1));
    assert_eq!(side_effect_counts(&settings.side_effects).len(), 1);
    let second = runtime
        .resolve(&key(), &pending[0], ActionDecision::Deny { message: None })
        .await
        .unwrap_err();
    assert_eq!(second.kind(), "action_already_resolved");

    tokio::time::sleep(Duration::from_millis(600)).await;
    runtime
        .resolve(
            &key(),
            &pending[1],
            ActionDecision::Deny {
                message: Some("no".into()),
            },
        )
        .await
        .unwrap();
    let info = runtime.wait_idle(&receipt.submission_id).await.unwrap();
    let settlement = info.settlement.unwrap();
    assert_eq!(
        (
            settlement.outcome,
            settlement.text.as_deref(),
            settlement.attempts
        ),
        (Outcome::Completed, Some("done (2 results)"), 1)
    );
    let counts = side_effect_counts(&settings.side_effects);
    assert_eq!(counts.values().copied().collect::<Vec<_>>(), [1]);
    runtime.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_interrupt_settles_the_waiting_submission_and_sends_the_new_message() {
    let dir = tempfile::tempdir().unwrap();
    let settings = asking(dir.path());
    let runtime = runtime(Arc::new(MemoryStore::new()), &settings).await;
    let receipt = runtime
        .dispatch(
            &key(),
            DeliveredMessage::user("tools 1"),
            DispatchOptions::default(),
        )
        .await
        .unwrap();
    runtime.wait_idle(&receipt.submission_id).await.unwrap();
    let interrupted = runtime
        .interrupt(&key(), Some(DeliveredMessage::user("instead")))
        .await
        .unwrap();
    assert_eq!(interrupted.interrupted.len(), 1);
    assert_eq!(
        interrupted.settled.as_deref(),
        Some(receipt.submission_id.as_str())
    );
    let settled = runtime.wait(&receipt.submission_id).await.unwrap();
    assert_eq!(settled.outcome, Outcome::Aborted);
    let next = interrupted.dispatched.unwrap();
    assert_eq!(
        runtime.read(&next.submission_id).await.unwrap(),
        "echo: instead"
    );
    assert!(side_effect_counts(&settings.side_effects).is_empty());
    assert!(pending_ids(&runtime).await.is_empty());
    runtime.shutdown().await.unwrap();
}

/// The child's entry point (`FLUE_PAUSE_MODE` = `pause` | `resolve`, `FLUE_PAUSE_DIR`):
/// `pause` dispatches, prints `PAUSED <action id>` once the submission waits, then idles until
/// killed; `resolve` allows the action named by `FLUE_PAUSE_ACTION` and prints `DONE <text>`
/// or `REFUSED <kind>`. Run directly, it pauses and resolves in one process on SQLite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_worker() {
    let (Ok(mode), Ok(dir)) = (
        std::env::var("FLUE_PAUSE_MODE"),
        std::env::var("FLUE_PAUSE_DIR"),
    ) else {
        let temp = tempfile::tempdir().unwrap();
        let store = Arc::new(SqliteStore::open(&temp.path().join("flue.db")).unwrap());
        let runtime = runtime(store, &asking(temp.path())).await;
        let receipt = runtime
            .dispatch(
                &key(),
                DeliveredMessage::user("tools 1"),
                DispatchOptions::default(),
            )
            .await
            .unwrap();
        runtime.wait_idle(&receipt.submission_id).await.unwrap();
        let action = pending_ids(&runtime).await.remove(0);
        runtime
            .resolve(&key(), &action, ActionDecision::Allow)
            .await
            .unwrap();
        assert_eq!(
            runtime.read(&receipt.submission_id).await.unwrap(),
            "done (1 results)"
        );
        runtime.shutdown().await.unwrap();
        return;
    };
    let dir = Path::new(&dir);
    let store = Arc::new(SqliteStore::open(&dir.join("flue.db")).unwrap());
    let runtime = runtime(store, &asking(dir)).await;
    match mode.as_str() {
        "pause" => {
            let receipt = runtime
                .dispatch(
                    &key(),
                    DeliveredMessage::user(pausing_prompt()),
                    DispatchOptions::default(),
                )
                .await
                .unwrap();
            runtime.wait_idle(&receipt.submission_id).await.unwrap();
            println!("PAUSED {}", pending_ids(&runtime).await[0]);
            std::future::pending::<()>().await;
        }
        "resolve" => {
            let action = std::env::var("FLUE_PAUSE_ACTION").unwrap();
            match runtime
                .resolve(&key(), &action, ActionDecision::Allow)
                .await
            {
                Ok(receipt) => {
                    let id = receipt.submission_id.unwrap();
                    let info = runtime.wait_idle(&id).await.unwrap();
                    let text = info.settlement.and_then(|settlement| settlement.text);
                    println!("DONE {}", text.unwrap_or_default());
                }
                Err(err) => println!("REFUSED {}", err.kind()),
            }
            runtime.shutdown().await.unwrap();
        }
        other => panic!("unknown mode {other}"),
    }
}

fn worker(dir: &Path, mode: &str, action: Option<&str>) -> Command {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "submission_pauses::pause_worker",
            "--exact",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env("FLUE_PAUSE_MODE", mode)
        .env("FLUE_PAUSE_DIR", dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(action) = action {
        command.env("FLUE_PAUSE_ACTION", action);
    }
    command
}

/// Pauses in one process and kills it with SIGKILL; returns the pending action id.
fn pause_and_kill(dir: &Path) -> String {
    let mut child = worker(dir, "pause", None).spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let action = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|line| line.strip_prefix("PAUSED ").map(str::to_owned))
        .expect("the pausing process did not pause");
    child.kill().unwrap();
    child.wait().unwrap();
    action
}

fn marker_lines(output: &std::process::Output) -> Vec<String> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|line| line.starts_with("DONE ") || line.starts_with("REFUSED "))
        .map(str::to_owned)
        .collect()
}

#[test]
fn after_kill_9_another_process_resolves_and_the_tool_runs_exactly_once() {
    const TRIALS: usize = 3;
    for _ in 0..TRIALS {
        let dir = tempfile::tempdir().unwrap();
        let action = pause_and_kill(dir.path());
        assert!(side_effect_counts(&dir.path().join("side_effects.txt")).is_empty());
        let output = worker(dir.path(), "resolve", Some(&action))
            .output()
            .unwrap();
        assert!(output.status.success());
        assert_eq!(marker_lines(&output), ["DONE done (1 results)"]);
        let counts = side_effect_counts(&dir.path().join("side_effects.txt"));
        assert_eq!(counts.values().copied().collect::<Vec<_>>(), [1]);
    }
}

#[test]
fn after_kill_9_another_process_resolves_a_subagents_action_and_the_parent_finishes() {
    const TRIALS: usize = 2;
    for _ in 0..TRIALS {
        let dir = tempfile::tempdir().unwrap();
        let pause = || {
            let mut child = worker(dir.path(), "pause", None)
                .env("FLUE_PAUSE_DELEGATE", "1")
                .spawn()
                .unwrap();
            let stdout = child.stdout.take().unwrap();
            let action = BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .find_map(|line| line.strip_prefix("PAUSED ").map(str::to_owned))
                .expect("the pausing process did not pause");
            child.kill().unwrap();
            child.wait().unwrap();
            action
        };
        let action = pause();
        assert!(side_effect_counts(&dir.path().join("side_effects.txt")).is_empty());
        let output = worker(dir.path(), "resolve", Some(&action))
            .env("FLUE_PAUSE_DELEGATE", "1")
            .output()
            .unwrap();
        assert!(output.status.success());
        // The subagent's call ran and the parent's model got the task's answer.
        assert_eq!(marker_lines(&output), ["DONE done (1 results)"]);
        let counts = side_effect_counts(&dir.path().join("side_effects.txt"));
        assert_eq!(counts.values().copied().collect::<Vec<_>>(), [1]);
    }
}

#[test]
fn two_processes_resolving_at_once_exactly_one_wins() {
    const TRIALS: usize = 3;
    for _ in 0..TRIALS {
        let dir = tempfile::tempdir().unwrap();
        let action = pause_and_kill(dir.path());
        let first = worker(dir.path(), "resolve", Some(&action))
            .spawn()
            .unwrap();
        let second = worker(dir.path(), "resolve", Some(&action))
            .spawn()
            .unwrap();
        let mut markers: Vec<String> = [first, second]
            .into_iter()
            .flat_map(|child| marker_lines(&child.wait_with_output().unwrap()))
            .collect();
        markers.sort();
        assert_eq!(
            markers,
            ["DONE done (1 results)", "REFUSED action_already_resolved"]
        );
        let counts = side_effect_counts(&dir.path().join("side_effects.txt"));
        assert_eq!(counts.values().copied().collect::<Vec<_>>(), [1]);
    }
}
