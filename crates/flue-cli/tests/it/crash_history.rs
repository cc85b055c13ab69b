//! Crash trials for going back and remembering: real `flue session fork`, `flue rewind`,
//! `flue run` and `flue serve` processes killed with SIGKILL at random instants, many times
//! each, on a real workspace and SQLite file; then what was lost or done twice is counted.
//!
//! - A fork exists whole (every session, every record) or not at all; running it again
//!   finishes it or refuses it clearly (`already exists`).
//! - A rewind leaves every file as before or as restored, has an audit entry for every file
//!   it changed, and, run again, completes; undoing the rewinds (newest first) puts the
//!   workspace back.
//! - A `memory_write` call cut off stores its note at most once, and its call is answered
//!   (with its id, or `interrupted`).
//!
//! Kill instants are uniform over a window sized from one uncut run on this machine, so the
//! kills land before, inside and after the work; what each kill finds is classified, never
//! assumed.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flue_core::store::{DynSessionStore, SessionKey};
use flue_core::{Record, StoredRecord, UserMessage};
use flue_store::{PostgresOptions, PostgresStore, SqliteStore};
use serde_json::{Value, json};
use sha2::Digest as _;

use crate::durable::{Rng, wait_for_line};
use crate::serve::{Server, http};
use crate::{Workspace, json, stderr, stdout};

/// A `flue` child with `--root`, its output discarded.
fn spawn(ws: &Workspace, args: &[&str]) -> Child {
    Command::new(assert_cmd::cargo::cargo_bin("flue"))
        .env("FLUE_TRUST", "1")
        .args(args)
        .arg("--root")
        .arg(ws.root())
        .env_remove("FLUE_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Kills `child` (SIGKILL) after `delay`; whether it had already exited by then.
fn kill_after(child: &mut Child, delay: Duration) -> bool {
    std::thread::sleep(delay);
    let exited = child.try_wait().unwrap().is_some();
    let _ = child.kill();
    let _ = child.wait();
    exited
}

/// A kill instant: uniform over one and a half times `uncut`, so some kills land after the
/// work is done.
pub(crate) fn instant(rng: &mut Rng, uncut: Duration) -> Duration {
    let window = u64::try_from(uncut.as_micros() * 3 / 2).unwrap().max(1);
    Duration::from_micros(rng.below(window))
}

pub(crate) fn block_on<T>(future: impl Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// Where the trial's conversations are stored.
#[derive(Clone)]
pub(crate) enum Db {
    /// The workspace's `.flue/flue.db`.
    Sqlite,
    /// A Postgres database (its URL), passed to every command as `--store`.
    Postgres(String),
}

impl Db {
    /// The store, opened in this process.
    pub(crate) async fn open(&self, ws: &Workspace) -> Arc<dyn DynSessionStore> {
        match self {
            Self::Sqlite => Arc::new(SqliteStore::open(&ws.db()).unwrap()),
            Self::Postgres(url) => Arc::new(
                PostgresStore::connect(url, PostgresOptions::default())
                    .await
                    .unwrap(),
            ),
        }
    }

    /// `args` with `--store` when the store is not the workspace's file.
    pub(crate) fn args(&self, args: &[&str]) -> Vec<String> {
        let mut all: Vec<String> = args.iter().map(|arg| (*arg).to_owned()).collect();
        if let Self::Postgres(url) = self {
            all.extend(["--store".to_owned(), url.clone()]);
        }
        all
    }
}

// ---------------------------------------------------------------------------------------
// Fork

const FORK_AGENT: &str = "---\nmodel: scripted/s.json\n---\nKeep notes.\n";
const FORK_TURNS: u64 = 40;
const FORK_TASKS: u64 = 120;
const FORK_AT: u64 = 30;

/// A workspace with conversation `keeper:orig`: `FORK_TURNS` turns in its root session and
/// `FORK_TASKS` task sessions of 10 records each, written through the store (a fork reads
/// only the store). Turns are stamped after the tasks, so every task is carried.
fn fork_workspace(db: &Db) -> Workspace {
    let ws = Workspace::new(&[
        ("agents/keeper.md", FORK_AGENT),
        ("s.json", r#"{"rules": [{"reply": {"text": "ok"}}]}"#),
    ]);
    std::fs::create_dir_all(ws.root().join(".flue")).unwrap();
    block_on(async {
        let store = db.open(&ws).await;
        let base = flue_core::util::now_ms() + 10_000_000;
        let text = "x".repeat(1500);
        let root = SessionKey::new("keeper:orig", "default");
        store.create(&root).await.unwrap();
        let turns: Vec<StoredRecord> = (1..=FORK_TURNS)
            .map(|turn| {
                let message = UserMessage::text(format!("turn {turn} {text}"));
                StoredRecord::new(Record::User(message), base + turn * 1000)
            })
            .collect();
        store.append(&root, 0, &turns).await.unwrap();
        for task in 0..FORK_TASKS {
            let key = SessionKey::new("keeper:orig", format!("task:default:{task:08}"));
            store.create(&key).await.unwrap();
            let records: Vec<StoredRecord> = (0..10)
                .map(|n| {
                    let message = UserMessage::text(format!("task {task} step {n} {text}"));
                    StoredRecord::new(Record::User(message), base - 1)
                })
                .collect();
            store.append(&key, 0, &records).await.unwrap();
        }
    });
    ws
}

#[derive(Debug, PartialEq, Eq)]
enum ForkFound {
    /// No session of the fork.
    Absent,
    /// Every session, with every record.
    Whole,
    /// Anything else: what is missing or different.
    Partial(String),
}

/// What the store holds of fork `to` (an instance id), compared with the original's turns
/// before `FORK_AT` and its tasks.
fn fork_found(ws: &Workspace, db: &Db, to: &str) -> ForkFound {
    block_on(async {
        let store = db.open(ws).await;
        let sessions = store.list(to).await.unwrap();
        if sessions.is_empty() {
            return ForkFound::Absent;
        }
        let original = store.list("keeper:orig").await.unwrap();
        let names = |list: &[flue_core::store::SessionSummary]| -> BTreeSet<String> {
            list.iter().map(|summary| summary.session.clone()).collect()
        };
        if names(&sessions) != names(&original) {
            return ForkFound::Partial(format!(
                "{} of {} sessions",
                sessions.len(),
                original.len()
            ));
        }
        for summary in &original {
            let records = |instance: &str| {
                let key = SessionKey::new(instance, summary.session.as_str());
                let store = &*store;
                async move { store.load(&key, 0).await.unwrap().unwrap().records }
            };
            let mut expected = records("keeper:orig").await;
            if summary.session == "default" {
                expected.truncate(usize::try_from(FORK_AT - 1).unwrap());
            }
            let copied = records(to).await;
            if copied != expected {
                return ForkFound::Partial(format!(
                    "session {} holds {} of {} records",
                    summary.session,
                    copied.len(),
                    expected.len()
                ));
            }
        }
        ForkFound::Whole
    })
}

const FORK_TRIALS: u64 = 25;

/// `flue session fork` killed at random instants: each fork is whole or absent, never half
/// copied; the same command run again then finishes an absent fork and refuses a whole one
/// (`already exists`), leaving it whole.
#[test]
fn a_fork_cut_off_by_kill_9_exists_whole_or_not_at_all_and_a_retry_converges() {
    fork_trials(&Db::Sqlite, FORK_TRIALS);
}

/// The same on Postgres: the fork is one transaction of the database.
#[test]
fn a_fork_on_postgres_cut_off_by_kill_9_exists_whole_or_not_at_all() {
    fork_trials(&Db::Postgres(crate::pg_server::fresh_database()), 12);
}

fn fork_trials(db: &Db, trials: u64) {
    let ws = fork_workspace(db);
    let fork_args = |new_id: &str| {
        db.args(&[
            "session",
            "fork",
            "--id",
            "keeper:orig",
            "--at",
            "30",
            "--new-id",
            new_id,
        ])
    };
    let started = Instant::now();
    let args = fork_args("calibration");
    let calibration = ws.flue(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(calibration.status.success(), "{}", stderr(&calibration));
    let uncut = started.elapsed();
    assert_eq!(fork_found(&ws, db, "keeper:calibration"), ForkFound::Whole);

    let mut rng = Rng::from_time();
    let (mut absent, mut whole, mut partial, mut finished_first) = (0, 0, 0, 0);
    for trial in 0..trials {
        let new_id = format!("f{trial}");
        let args = fork_args(&new_id);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut child = spawn(&ws, &args);
        if kill_after(&mut child, instant(&mut rng, uncut)) {
            finished_first += 1;
        }
        let instance = format!("keeper:{new_id}");
        match fork_found(&ws, db, &instance) {
            ForkFound::Absent => {
                absent += 1;
                let retried = ws.flue(&args);
                assert!(retried.status.success(), "{}", stderr(&retried));
                assert_eq!(stdout(&retried), format!("{new_id}\n"));
            }
            ForkFound::Whole => {
                whole += 1;
                let retried = ws.flue(&args);
                assert!(!retried.status.success());
                assert!(
                    stderr(&retried).contains("already exists"),
                    "{}",
                    stderr(&retried)
                );
            }
            ForkFound::Partial(what) => {
                partial += 1;
                eprintln!("trial {trial}: a half-copied fork: {what}");
            }
        }
        assert_eq!(
            fork_found(&ws, db, &instance),
            ForkFound::Whole,
            "trial {trial}"
        );
    }
    eprintln!(
        "{trials} forks killed at random instants (uncut: {uncut:?}): {absent} not begun or \
         rolled back, {whole} whole ({finished_first} had exited before the kill), {partial} \
         half copied; every retry converged"
    );
    assert_eq!(partial, 0);
}

/// Sends `body` as a POST to `path` and does not wait for the answer.
fn post_and_leave(addr: &str, path: &str, body: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    let request = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-type: \
         application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    stream
}

const HTTP_FORK_TRIALS: u64 = 8;

/// The HTTP fork route on `flue serve`, the server killed at random instants after the
/// request was sent: the fork is whole or absent; the same request to the restarted server
/// then answers 201 (absent before) or 409 `conversation_exists` (whole), and the fork is
/// whole.
#[test]
fn an_http_fork_cut_off_by_kill_9_of_the_server_exists_whole_or_not_at_all() {
    let ws = fork_workspace(&Db::Sqlite);
    let body = |id: &str| json!({"at": FORK_AT, "id": id}).to_string();
    let mut server = Server::start(ws.root(), &[], &[]);
    let started = Instant::now();
    let (status, answer) = http(
        server.addr(),
        "POST",
        "/agents/keeper/orig/fork",
        &[("content-type", "application/json")],
        &body("calibration"),
    );
    assert_eq!(status, 201, "{answer}");
    let uncut = started.elapsed();
    let mut rng = Rng::from_time();
    let (mut absent, mut whole, mut partial) = (0, 0, 0);
    for trial in 0..HTTP_FORK_TRIALS {
        let new_id = format!("h{trial}");
        let _stream = post_and_leave(server.addr(), "/agents/keeper/orig/fork", &body(&new_id));
        std::thread::sleep(instant(&mut rng, uncut));
        server.kill9();
        let found = fork_found(&ws, &Db::Sqlite, &format!("keeper:{new_id}"));
        server = Server::start(ws.root(), &[], &[]);
        let (status, answer) = http(
            server.addr(),
            "POST",
            "/agents/keeper/orig/fork",
            &[("content-type", "application/json")],
            &body(&new_id),
        );
        match found {
            ForkFound::Absent => {
                absent += 1;
                assert_eq!(status, 201, "{answer}");
            }
            ForkFound::Whole => {
                whole += 1;
                assert_eq!(status, 409, "{answer}");
                assert!(answer.contains("conversation_exists"), "{answer}");
            }
            ForkFound::Partial(what) => {
                partial += 1;
                eprintln!("trial {trial}: a half-copied fork: {what}");
            }
        }
        assert_eq!(
            fork_found(&ws, &Db::Sqlite, &format!("keeper:{new_id}")),
            ForkFound::Whole,
            "trial {trial}"
        );
    }
    eprintln!(
        "{HTTP_FORK_TRIALS} HTTP forks with the server killed at random instants (uncut: \
         {uncut:?}): {absent} absent, {whole} whole, {partial} half copied"
    );
    assert_eq!(partial, 0);
}

// ---------------------------------------------------------------------------------------
// Rewind

const REWIND_FILES: usize = 40;

/// A workspace whose agent `keeper` creates `REWIND_FILES` files in one turn (`create`,
/// content `one <n>`) and overwrites them all in the next (`update`, `two <n>`).
fn rewind_workspace() -> Workspace {
    // `write_file` overwrites only with the sha256 of what the agent last saw.
    let calls = |tool: &str, content: &str| -> Value {
        (0..REWIND_FILES)
            .map(|n| {
                let mut input = json!({
                    "path": format!("notes/f{n:02}.txt"), "content": format!("{content} {n}\n")
                });
                if tool == "write_file" {
                    let seen = sha2::Sha256::digest(format!("one {n}\n").as_bytes());
                    input["expectedSha256"] = json!(hex::encode(seen));
                }
                json!({"name": tool, "input": input})
            })
            .collect()
    };
    let script = json!({"rules": [
        {"when": {"tool_result": "create_file"}, "reply": {"text": "created"}},
        {"when": {"tool_result": "write_file"}, "reply": {"text": "updated"}},
        {"when": {"user_matches": "^create$"}, "reply": {"tool_calls": calls("create_file", "one")}},
        {"when": {"user_matches": "^update$"}, "reply": {"tool_calls": calls("write_file", "two")}},
        {"reply": {"text": "ok"}}
    ]});
    let agent = "---\nmodel: scripted/s.json\nsandbox: local\ntools: [create_file, write_file]\n\
                 ---\nKeep notes.\n";
    let ws = Workspace::new(&[("agents/keeper.md", agent), ("s.json", &script.to_string())]);
    for message in ["create", "update"] {
        let output = ws.flue(&["run", "keeper", "-m", message, "--id", "c"]);
        assert!(output.status.success(), "{}", stderr(&output));
    }
    ws
}

/// Each file's content: `one` (restored), `two` (as before the rewind), or what else.
fn file_versions(ws: &Workspace) -> BTreeMap<String, String> {
    (0..REWIND_FILES)
        .map(|n| {
            let name = format!("f{n:02}.txt");
            let content = std::fs::read_to_string(ws.root().join("notes").join(&name));
            let version = match content {
                Ok(text) if text == format!("one {n}\n") => "one".to_owned(),
                Ok(text) if text == format!("two {n}\n") => "two".to_owned(),
                Ok(text) => format!("other: {text:?}"),
                Err(_) => "missing".to_owned(),
            };
            (name, version)
        })
        .collect()
}

/// The conversation's rewinds, in order: (rewind id, the file names it has entries for).
fn rewinds(ws: &Workspace) -> Vec<(String, BTreeSet<String>)> {
    let audit = json(&ws.flue(&["audit", "--id", "c", "--json"]));
    let mut found: Vec<(String, BTreeSet<String>)> = Vec::new();
    for entry in audit["entries"].as_array().unwrap() {
        if entry["tool"] != "rewind" {
            continue;
        }
        let id = entry["session"]
            .as_str()
            .unwrap()
            .strip_prefix("rewind:")
            .unwrap()
            .to_owned();
        let name = entry["path"]
            .as_str()
            .unwrap()
            .rsplit('/')
            .next()
            .unwrap()
            .to_owned();
        match found.iter_mut().find(|(seen, _)| *seen == id) {
            Some((_, names)) => {
                names.insert(name);
            }
            None => found.push((id, BTreeSet::from([name]))),
        }
    }
    found
}

const REWIND_TRIALS: u64 = 20;

/// `flue rewind --to 2` killed at random instants: every file is as before or as restored
/// (or, cut inside a write, counted as torn), every file the rewind changed has its audit
/// entry; run again the rewind completes without a conflict; undoing the rewinds of the trial
/// (newest first) puts every file back.
#[test]
fn a_rewind_cut_off_by_kill_9_leaves_files_before_or_restored_audited_and_undoable() {
    let ws = rewind_workspace();
    let all = |version: &str| -> BTreeMap<String, String> {
        (0..REWIND_FILES)
            .map(|n| (format!("f{n:02}.txt"), version.to_owned()))
            .collect()
    };
    assert_eq!(file_versions(&ws), all("two"));
    let undo_all = |ids: &[String]| {
        for id in ids.iter().rev() {
            let undone = ws.flue(&["rewind", "--id", "c", "--undo", id]);
            assert!(undone.status.success(), "undo {id}: {}", stderr(&undone));
        }
    };
    let started = Instant::now();
    let calibration = ws.flue(&["rewind", "--id", "c", "--to", "2"]);
    assert!(calibration.status.success(), "{}", stderr(&calibration));
    let uncut = started.elapsed();
    assert_eq!(file_versions(&ws), all("one"));
    undo_all(&[rewinds(&ws).last().unwrap().0.clone()]);
    assert_eq!(file_versions(&ws), all("two"));

    let mut rng = Rng::from_time();
    let (mut cut_short, mut untouched, mut completed) = (0, 0, 0);
    let (mut torn, mut unaudited, mut recorded_not_written) = (0, 0, 0);
    for trial in 0..REWIND_TRIALS {
        let known = rewinds(&ws).len();
        let mut child = spawn(&ws, &["rewind", "--id", "c", "--to", "2"]);
        kill_after(&mut child, instant(&mut rng, uncut));
        let versions = file_versions(&ws);
        let new: Vec<(String, BTreeSet<String>)> = rewinds(&ws).split_off(known);
        let audited: BTreeSet<&String> = new.iter().flat_map(|(_, names)| names).collect();
        let restored = versions
            .values()
            .filter(|version| *version == "one")
            .count();
        for (name, version) in &versions {
            match version.as_str() {
                "one" if !audited.contains(name) => unaudited += 1,
                "two" if audited.contains(name) => recorded_not_written += 1,
                "one" | "two" => {}
                other => {
                    torn += 1;
                    eprintln!("trial {trial}: {name} is {other}");
                }
            }
        }
        match restored {
            0 => untouched += 1,
            REWIND_FILES => completed += 1,
            _ => cut_short += 1,
        }
        // Run again, it completes: no conflict, every file restored.
        let again = ws.flue(&["rewind", "--id", "c", "--to", "2"]);
        assert!(again.status.success(), "trial {trial}: {}", stderr(&again));
        assert_eq!(file_versions(&ws), all("one"), "trial {trial}");
        // No temporary file is left: one a kill left was reused and renamed by the rerun.
        let leftovers: Vec<String> = std::fs::read_dir(ws.root().join("notes"))
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".flue-replace"))
            .collect();
        assert_eq!(leftovers, Vec::<String>::new(), "trial {trial}");
        // Undone, newest first: the workspace as before the trial.
        let ids: Vec<String> = rewinds(&ws)
            .split_off(known)
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        undo_all(&ids);
        assert_eq!(file_versions(&ws), all("two"), "trial {trial}");
    }
    eprintln!(
        "{REWIND_TRIALS} rewinds of {REWIND_FILES} files killed at random instants (uncut: \
         {uncut:?}): {untouched} changed nothing, {cut_short} cut short, {completed} done; \
         files torn {torn}, changed without an audit entry {unaudited}, recorded before the \
         kill but not yet written {recorded_not_written}; every rerun completed and every \
         undo put the files back"
    );
    assert_eq!((torn, unaudited), (0, 0));
}

const HTTP_REWIND_TRIALS: u64 = 6;

/// The HTTP rewind route on `flue serve`, the server killed at random instants after the
/// request was sent: every file is as before or as restored, none changed without its audit
/// entry; the same request to the restarted server completes the rewind; undoing the trial's
/// rewinds puts every file back.
#[test]
fn an_http_rewind_cut_off_by_kill_9_of_the_server_leaves_files_before_or_restored() {
    let ws = rewind_workspace();
    let all = |version: &str| -> BTreeMap<String, String> {
        (0..REWIND_FILES)
            .map(|n| (format!("f{n:02}.txt"), version.to_owned()))
            .collect()
    };
    let body = json!({"to": 2}).to_string();
    let rewind_over = |server: &Server| {
        let (status, answer) = http(
            server.addr(),
            "POST",
            "/agents/keeper/c/rewind",
            &[("content-type", "application/json")],
            &body,
        );
        assert_eq!(status, 200, "{answer}");
        let plan: Value = serde_json::from_str(&answer).unwrap();
        assert_eq!(plan["applied"], true, "{plan}");
    };
    let undo_since = |known: usize| {
        let ids: Vec<String> = rewinds(&ws)
            .split_off(known)
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        for id in ids.iter().rev() {
            let undone = ws.flue(&["rewind", "--id", "c", "--undo", id]);
            assert!(undone.status.success(), "undo {id}: {}", stderr(&undone));
        }
    };
    let mut server = Server::start(ws.root(), &[], &[]);
    let started = Instant::now();
    rewind_over(&server);
    let uncut = started.elapsed();
    undo_since(0);
    assert_eq!(file_versions(&ws), all("two"));
    let mut rng = Rng::from_time();
    let (mut torn, mut unaudited, mut restored_before_kill) = (0, 0, 0);
    for trial in 0..HTTP_REWIND_TRIALS {
        let known = rewinds(&ws).len();
        let _stream = post_and_leave(server.addr(), "/agents/keeper/c/rewind", &body);
        std::thread::sleep(instant(&mut rng, uncut));
        server.kill9();
        let versions = file_versions(&ws);
        let new = rewinds(&ws).split_off(known);
        let audited: BTreeSet<&String> = new.iter().flat_map(|(_, names)| names).collect();
        for (name, version) in &versions {
            match version.as_str() {
                "one" if !audited.contains(name) => unaudited += 1,
                "one" => restored_before_kill += 1,
                "two" => {}
                other => {
                    torn += 1;
                    eprintln!("trial {trial}: {name} is {other}");
                }
            }
        }
        server = Server::start(ws.root(), &[], &[]);
        rewind_over(&server);
        assert_eq!(file_versions(&ws), all("one"), "trial {trial}");
        undo_since(known);
        assert_eq!(file_versions(&ws), all("two"), "trial {trial}");
    }
    eprintln!(
        "{HTTP_REWIND_TRIALS} HTTP rewinds of {REWIND_FILES} files with the server killed at \
         random instants (uncut: {uncut:?}): {restored_before_kill} files restored before a \
         kill; torn {torn}, changed without an audit entry {unaudited}; every rerun completed"
    );
    assert_eq!((torn, unaudited), (0, 0));
}

// ---------------------------------------------------------------------------------------
// Memory

const MEMORY_TRIALS: u64 = 20;

/// A workspace whose agent `helper` (`memory: true`) answers `note <n>` with one
/// `memory_write` of `fact <n>`, then `stored`.
fn memory_workspace() -> Workspace {
    let mut rules = vec![json!({"when": {"tool_result": "memory_write"},
        "reply": {"text": "stored ok={{tool_result.ok}} {{tool_result.error.kind}}"}})];
    for step in 0..=MEMORY_TRIALS {
        rules.push(json!({"when": {"user_matches": format!("^note {step}$")},
        "reply": {"tool_calls": [
            {"name": "memory_write", "input": {"text": format!("fact {step}")}}
        ]}}));
    }
    rules.push(json!({"reply": {"text": "ok"}}));
    let agent = "---\nmodel: scripted/s.json\nmemory: true\n---\nRemember.\n";
    Workspace::new(&[
        ("agents/helper.md", agent),
        ("s.json", &json!({ "rules": rules }).to_string()),
    ])
}

/// `flue run` killed at random instants around a `memory_write` call: every note is stored
/// at most once, every call the log holds is answered (with the note's id, or
/// `interrupted`), and a call answered with an id has its note.
#[test]
fn a_memory_write_cut_off_by_kill_9_stores_its_note_once_or_is_answered_interrupted() {
    let ws = memory_workspace();
    let run = |step: u64| -> Vec<String> {
        [
            "run",
            "helper",
            "-m",
            &format!("note {step}"),
            "--id",
            "m",
            "--memory-subject",
            "u1",
            "--json",
        ]
        .map(str::to_owned)
        .to_vec()
    };
    let args = run(MEMORY_TRIALS);
    let started = Instant::now();
    let calibration = ws.flue(&[
        "run",
        "helper",
        "-m",
        "hello",
        "--id",
        "cal",
        "--memory-subject",
        "u0",
    ]);
    assert!(calibration.status.success(), "{}", stderr(&calibration));
    let uncut = started.elapsed();

    let mut rng = Rng::from_time();
    for step in 0..MEMORY_TRIALS {
        let args = run(step);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        if step % 2 == 0 {
            let mut child = spawn(&ws, &args);
            kill_after(&mut child, instant(&mut rng, uncut));
        } else {
            // These kills land just after a call started (this step's, or an earlier one's
            // recovered first), within the few milliseconds around the note's write.
            let mut child = Command::new(assert_cmd::cargo::cargo_bin("flue"))
                .env("FLUE_TRUST", "1")
                .args(&args)
                .arg("--root")
                .arg(ws.root())
                .env_remove("FLUE_LOG")
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            wait_for_line(&mut child, "-> memory_write", Duration::from_secs(120));
            kill_after(&mut child, Duration::from_micros(rng.below(5_000)));
        }
    }
    // The last run is not killed: it recovers what the previous one left, then runs.
    let last = ws.flue(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(last.status.success(), "{}", stderr(&last));
    assert_eq!(json(&last)["message"], "stored ok=true ");

    memory_outcome(
        &ws,
        &Db::Sqlite,
        "m",
        &format!("{MEMORY_TRIALS} runs killed at random instants (uncut: {uncut:?})"),
    );
}

const SERVE_MEMORY_TRIALS: u64 = 8;

/// `flue serve` killed at random instants while messages whose reply is a `memory_write` are
/// processed, then restarted: once every submission has settled, no note is stored twice and
/// every call is answered.
#[test]
fn a_memory_write_on_a_killed_server_stores_its_note_once() {
    serve_memory_trials(&Db::Sqlite, SERVE_MEMORY_TRIALS);
}

/// The same with the servers on Postgres (each restart is another node taking over).
#[test]
fn a_memory_write_on_a_killed_postgres_node_stores_its_note_once() {
    serve_memory_trials(&Db::Postgres(crate::pg_server::fresh_database()), 6);
}

fn serve_memory_trials(db: &Db, trials: u64) {
    let ws = memory_workspace();
    let body = |step: u64| {
        json!({"kind": "user", "body": format!("note {step}"), "memorySubject": "u1"}).to_string()
    };
    let serve_args = db.args(&[]);
    let serve_args: Vec<&str> = serve_args.iter().map(String::as_str).collect();
    let mut server = Server::start(ws.root(), &serve_args, &[]);
    let started = Instant::now();
    let (status, answer) = http(
        server.addr(),
        "POST",
        "/agents/helper/cal",
        &[("content-type", "application/json")],
        &json!({"kind": "user", "body": "note 0", "memorySubject": "u0"}).to_string(),
    );
    assert_eq!(status, 202, "{answer}");
    wait_settled(&ws, db, "cal");
    let uncut = started.elapsed();
    let mut rng = Rng::from_time();
    for step in 0..trials {
        let _stream = post_and_leave(server.addr(), "/agents/helper/m", &body(step));
        std::thread::sleep(instant(&mut rng, uncut));
        server.kill9();
        server = Server::start(ws.root(), &serve_args, &[]);
    }
    // The restarted server recovers what the kills left, then takes one more message.
    let (status, answer) = http(
        server.addr(),
        "POST",
        "/agents/helper/m",
        &[("content-type", "application/json")],
        &body(trials),
    );
    assert_eq!(status, 202, "{answer}");
    wait_settled(&ws, db, "m");
    drop(server);
    memory_outcome(
        &ws,
        db,
        "m",
        &format!("{trials} servers killed at random instants (uncut: {uncut:?})"),
    );
}

/// Waits until conversation `id` has no pending submission (`flue session list`); the
/// deadline only ends a test whose server hangs.
pub(crate) fn wait_settled(ws: &Workspace, db: &Db, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(300);
    let args = db.args(&["session", "list", "--json"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    loop {
        let listed = json(&ws.flue(&args));
        let conversations = listed["conversations"].as_array().unwrap();
        let pending: u64 = conversations
            .iter()
            .filter(|conversation| conversation["id"] == id)
            .map(|conversation| conversation["pending"].as_u64().unwrap_or(0))
            .sum();
        if pending == 0 && conversations.iter().any(|c| c["id"] == id) {
            return;
        }
        assert!(Instant::now() < deadline, "still pending: {listed}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Counts, over conversation `id` and subject `u1`, what the kills left of the `memory_write`
/// calls (printed after `what`), and asserts that no note was stored twice, every call in the
/// log was answered, and a call answered with an id has that note.
fn memory_outcome(ws: &Workspace, db: &Db, id: &str, what: &str) {
    let flue = |args: &[&str]| {
        let args = db.args(args);
        ws.flue(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    // The notes, by text.
    let listed = json(&flue(&["memory", "list", "--subject", "u1", "--json"]));
    let mut notes: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for note in listed["notes"].as_array().unwrap() {
        notes
            .entry(note["text"].as_str().unwrap().to_owned())
            .or_default()
            .push(note["id"].as_str().unwrap().to_owned());
    }
    // The calls, by text: the result's note id, or its error kind.
    let shown = json(&flue(&["session", "show", "--id", id, "--json"]));
    let mut calls: BTreeMap<String, (String, Option<Value>)> = BTreeMap::new();
    let mut texts: BTreeMap<String, String> = BTreeMap::new();
    let mut run_again = 0;
    for message in shown["messages"].as_array().unwrap() {
        if message["type"] == "tool_attempt" && message["attempt"].as_u64() > Some(1) {
            run_again += 1;
        }
        if message["type"] == "assistant" {
            for part in message["content"].as_array().unwrap() {
                if part["type"] == "tool_call" && part["name"] == "memory_write" {
                    let text = part["input"]["text"].as_str().unwrap().to_owned();
                    texts.insert(part["id"].as_str().unwrap().to_owned(), text);
                }
            }
        }
        if message["type"] == "tool_result" && message["tool_name"] == "memory_write" {
            let call = message["call_id"].as_str().unwrap();
            let text = texts[call].clone();
            let content: Value =
                serde_json::from_str(message["content"].as_str().unwrap()).unwrap_or(Value::Null);
            let kind = message["error_kind"].as_str().unwrap_or("ok").to_owned();
            let previous = calls.insert(text.clone(), (kind, content["data"].get("id").cloned()));
            assert!(previous.is_none(), "{text} answered twice");
        }
    }
    let (mut once_ok, mut interrupted_stored, mut interrupted_not_stored) = (0, 0, 0);
    let (mut twice, mut lost, mut unanswered) = (0, 0, 0);
    for (text, ids) in &notes {
        if ids.len() > 1 {
            twice += 1;
            eprintln!("{text} stored {} times", ids.len());
        }
    }
    for text in texts.values() {
        let stored = notes.get(text).map_or(0, Vec::len);
        match calls.get(text) {
            None => unanswered += 1,
            Some((kind, Some(id))) if kind == "ok" => {
                if stored == 1 && notes[text][0] == *id {
                    once_ok += 1;
                } else {
                    lost += 1;
                    eprintln!(
                        "{text}: answered with {id} but stored {:?}",
                        notes.get(text)
                    );
                }
            }
            Some((kind, _)) if kind == "interrupted" && stored == 0 => interrupted_not_stored += 1,
            Some((kind, _)) if kind == "interrupted" => interrupted_stored += 1,
            Some(other) => panic!("{text} answered {other:?}"),
        }
    }
    // No note without its call in the log.
    let called: BTreeSet<&String> = texts.values().collect();
    assert!(notes.keys().all(|text| called.contains(text)), "{notes:?}");
    eprintln!(
        "{what}: {} memory_write \
         calls in the log, {run_again} runs of a call again after a kill; stored once and \
         answered {once_ok}; answered interrupted with the note stored {interrupted_stored}, \
         without {interrupted_not_stored}; stored twice {twice}, answered but lost {lost}, \
         unanswered {unanswered}",
        texts.len()
    );
    assert_eq!((twice, lost, unanswered), (0, 0, 0));
}
