//! Crash trials for background tasks: a parent starts a background task per message (the
//! `task` tool with `background: true`), the child runs a command in a conversation of its
//! own, and its result comes back to the parent as a `task_result` message. Real `flue serve`
//! processes are killed with SIGKILL at random instants (half of them inside a child's
//! command) and restarted; then the store is counted.
//!
//! What a user relies on: every background task started is started once (one child
//! conversation per `task` call, whatever the kills), and its result reaches the parent
//! conversation exactly once: never lost, never twice.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flue_core::store::{DynConversationStore, SessionKey};
use flue_core::{BatchBody, ConversationKey, Offset, Record};
use flue_store::{PostgresOptions, PostgresStore, SqliteStore};
use serde_json::{Value, json};

use crate::Workspace;
use crate::crash_history::{Db, block_on, instant, wait_settled};
use crate::durable::Rng;
use crate::serve::{Server, http};

/// `boss` starts one background task per message (`job N` -> `sub N` for `worker`) and
/// answers at once; a `task_result` message gets a short reply. `worker` runs one command,
/// which notes each run in a file first and its end in another, and reports. `child_wait` is
/// the shell command a child's command waits with.
fn background_workspace(jobs: u64, child_wait: &str) -> Workspace {
    let mut rules = vec![json!({"when": {"user_contains": "<task_result"},
        "reply": {"text": "noted"}})];
    for job in 0..jobs {
        let user = format!("^job {job}$");
        rules.push(
            json!({"when": {"user_matches": user, "tool_result": "task"},
            "reply": {"text": format!("job {job} started")}}),
        );
        let task = json!({"name": "task", "input": {"agent": "worker",
            "prompt": format!("sub {job}"), "background": true}});
        rules.push(json!({"when": {"user_matches": user}, "reply": {"tool_calls": [task]}}));
        let sub = format!("^sub {job}$");
        rules.push(json!({"when": {"user_matches": sub, "tool_result": "bash"},
            "reply": {"text": format!("child {job} finished: {{{{tool_result}}}}")}}));
        let command = format!(
            "echo {job} >> child-runs.log; {child_wait}; echo {job} >> child-ends.log; \
             echo {job} did it"
        );
        rules.push(json!({"when": {"user_matches": sub},
            "reply": {"tool_calls": [{"name": "bash", "input": {"command": command}}]}}));
    }
    let boss = "---\nmodel: scripted/s.json\nsubagents: [worker]\nsandbox: local\n\
                durability:\n  max_attempts: 100\n---\nDelegate in the background.\n";
    let worker = "---\ndescription: Does one piece of work\nmodel: scripted/s.json\n\
                  tools: [bash]\nsandbox: local\n---\nWork.\n";
    Workspace::new(&[
        ("agents/boss.md", boss),
        ("agents/worker.md", worker),
        ("s.json", &json!({ "rules": rules }).to_string()),
    ])
}

fn post_job(server: &Server, id: &str, job: u64) {
    let (status, answer) = http(
        server.addr(),
        "POST",
        &format!("/agents/boss/{id}"),
        &[("content-type", "application/json")],
        &json!({"kind": "user", "body": format!("job {job}")}).to_string(),
    );
    assert_eq!(status, 202, "{answer}");
}

/// Waits until `path` has more than `seen` lines; the deadline only ends a hung test.
fn wait_for_lines(path: &Path, seen: usize) {
    let deadline = Instant::now() + Duration::from_secs(300);
    while lines_of(path).len() <= seen {
        assert!(Instant::now() < deadline, "{} never grew", path.display());
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// What the parent's log holds of its background tasks.
#[derive(Debug, Default)]
struct Tally {
    /// Child conversations named by the `task` calls' results, per call.
    started: BTreeMap<String, String>,
    /// `task_result` messages per child conversation, with their outcomes.
    delivered: BTreeMap<String, Vec<String>>,
}

fn attribute(text: &str, name: &str) -> String {
    let needle = format!(" {name}=\"");
    text.split_once(&needle)
        .and_then(|(_, rest)| rest.split_once('"'))
        .map(|(value, _)| value.to_owned())
        .unwrap_or_default()
}

fn tally(ws: &Workspace, db: &Db, id: &str) -> Tally {
    let records: Vec<Record> = block_on(async {
        let store = db.open(ws).await;
        let key = SessionKey::new(ConversationKey::new("boss", id).instance_id(), "default");
        let log = store.load(&key, 0).await.unwrap().unwrap();
        log.records
            .into_iter()
            .map(|stored| stored.record)
            .collect()
    });
    let mut tally = Tally::default();
    for record in records {
        match record {
            Record::ToolResult(result) if result.tool_name == "task" => {
                assert!(!result.is_error, "{result:?}");
                let output: Value = serde_json::from_str(&result.content).unwrap();
                let child = output["conversation"].as_str().unwrap().to_owned();
                let previous = tally.started.insert(result.call_id.clone(), child);
                assert!(previous.is_none(), "a task call answered twice");
            }
            Record::User(message) if message.joined_text().starts_with("<task_result") => {
                let text = message.joined_text();
                tally
                    .delivered
                    .entry(attribute(&text, "conversation"))
                    .or_default()
                    .push(attribute(&text, "outcome"));
            }
            _ => {}
        }
    }
    tally
}

/// The child conversations of `boss:<id>` in the store.
fn child_conversations(ws: &Workspace, db: &Db, id: &str) -> Vec<String> {
    let args = db.args(&["session", "list", "--json"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let listed = crate::json(&ws.flue(&args));
    let prefix = format!("{id}~bg.");
    listed["conversations"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|conversation| conversation["id"].as_str())
        .filter(|child| child.starts_with(&prefix))
        .map(str::to_owned)
        .collect()
}

/// How many of the child conversations `children` of `worker` ran more than one attempt (a
/// kill cut one off and a restarted server took it up again).
fn reattempted(ws: &Workspace, db: &Db, children: &[String]) -> usize {
    block_on(async {
        let store: Arc<dyn DynConversationStore> = match db {
            Db::Sqlite => Arc::new(SqliteStore::open(&ws.db()).unwrap()),
            Db::Postgres(url) => Arc::new(
                PostgresStore::connect(url, PostgresOptions::default())
                    .await
                    .unwrap(),
            ),
        };
        let mut n_reattempted = 0;
        for child in children {
            let key = ConversationKey::new("worker", child.as_str());
            let page = store.read_stream(&key, Offset::START, 1000).await.unwrap();
            let n_started = page
                .batches
                .iter()
                .filter(|batch| matches!(batch.body, BatchBody::Started { .. }))
                .count();
            if n_started > 1 {
                n_reattempted += 1;
            }
        }
        n_reattempted
    })
}

/// Waits until the parent has heard of `expected` children and settled what that brought.
fn wait_delivered(ws: &Workspace, db: &Db, id: &str, expected: usize) -> Tally {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        wait_settled(ws, db, id);
        let tally = tally(ws, db, id);
        if tally.delivered.len() >= expected {
            wait_settled(ws, db, id);
            return tally;
        }
        assert!(Instant::now() < deadline, "never delivered: {tally:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Asserts one child per `task` call and one delivery per child, and prints the counts.
fn check(ws: &Workspace, db: &Db, id: &str, jobs: usize, what: &str) {
    let tally = wait_delivered(ws, db, id, jobs);
    let children = child_conversations(ws, db, id);
    let twice: Vec<_> = tally
        .delivered
        .iter()
        .filter(|(_, d)| d.len() > 1)
        .collect();
    let lost: Vec<_> = tally
        .started
        .values()
        .filter(|child| !tally.delivered.contains_key(*child))
        .collect();
    let mut outcomes: BTreeMap<&str, u64> = BTreeMap::new();
    for outcome in tally.delivered.values().flatten() {
        *outcomes.entry(outcome.as_str()).or_default() += 1;
    }
    eprintln!(
        "{what}: {} background tasks started, {} child conversations ({} of them attempted \
         again after a kill), results delivered {:?}; lost {}, delivered twice {}; child \
         commands run {}",
        tally.started.len(),
        children.len(),
        reattempted(ws, db, &children),
        outcomes,
        lost.len(),
        twice.len(),
        lines_of(&ws.root().join("child-runs.log")).len()
    );
    assert_eq!(tally.started.len(), jobs, "{tally:?}");
    assert_eq!(children.len(), jobs, "{children:?} {tally:?}");
    assert!(lost.is_empty(), "{lost:?} {tally:?}");
    assert!(twice.is_empty(), "{twice:?}");
    assert_eq!(tally.delivered.len(), jobs, "{tally:?}");
}

/// No kill: the call answers at once (the parent settles while its child is held at a gate),
/// the child runs on, and its answer arrives as a message that runs a turn of the parent.
#[test]
fn a_background_task_answers_at_once_and_its_result_arrives_as_a_message() {
    let ws = background_workspace(1, "until [ -f gate ]; do sleep 0.05; done");
    let server = Server::start(ws.root(), &[], &[]);
    post_job(&server, "b", 0);
    wait_settled(&ws, &Db::Sqlite, "b");
    let before = tally(&ws, &Db::Sqlite, "b");
    assert_eq!(before.started.len(), 1, "{before:?}");
    assert!(before.delivered.is_empty(), "{before:?}");
    assert!(lines_of(&ws.root().join("child-ends.log")).is_empty());
    std::fs::write(ws.root().join("gate"), "").unwrap();
    check(&ws, &Db::Sqlite, "b", 1, "no kill");
    let tally = tally(&ws, &Db::Sqlite, "b");
    assert_eq!(
        tally.delivered.values().flatten().collect::<Vec<_>>(),
        ["completed"]
    );
    drop(server);
}

const TRIALS: u64 = 9;

/// `flue serve` killed at random instants and restarted: a third of the kills at a random
/// instant of a message's uncut run, a third inside a child's command, a third within 30 ms
/// of a child's command ending (while the child answers, delivers and settles). Every
/// background task is started once and its result delivered exactly once.
#[test]
fn background_results_on_a_server_killed_at_random_instants_arrive_exactly_once() {
    background_trials(&Db::Sqlite, TRIALS);
}

/// The same on Postgres.
#[test]
fn background_results_on_postgres_killed_at_random_instants_arrive_exactly_once() {
    background_trials(&Db::Postgres(crate::pg_server::fresh_database()), 6);
}

fn background_trials(db: &Db, trials: u64) {
    let ws = background_workspace(trials + 2, "sleep 0.4");
    let serve_args = db.args(&[]);
    let serve_args: Vec<&str> = serve_args.iter().map(String::as_str).collect();
    let start = || Server::start(ws.root(), &serve_args, &[]);
    let mut server = start();
    let started = Instant::now();
    post_job(&server, "cal", 0);
    wait_delivered(&ws, db, "cal", 1);
    let uncut = started.elapsed();
    let child_runs = ws.root().join("child-runs.log");
    let child_ends = ws.root().join("child-ends.log");
    let mut rng = Rng::from_time();
    for job in 1..=trials {
        let runs_seen = lines_of(&child_runs).len();
        let ends_seen = lines_of(&child_ends).len();
        post_job(&server, "t", job);
        match job % 3 {
            0 => {
                wait_for_lines(&child_runs, runs_seen);
                std::thread::sleep(Duration::from_millis(rng.below(400)));
            }
            1 => {
                wait_for_lines(&child_ends, ends_seen);
                std::thread::sleep(Duration::from_millis(rng.below(30)));
            }
            _ => std::thread::sleep(instant(&mut rng, uncut)),
        }
        server.kill9();
        server = start();
    }
    post_job(&server, "t", trials + 1);
    let what = format!("{trials} kills during background tasks (uncut: {uncut:?})");
    check(&ws, db, "t", usize::try_from(trials + 1).unwrap(), &what);
    drop(server);
}
