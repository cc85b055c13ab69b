//! The `SessionStore` contract, run against every store (flue-store's tests include this file
//! and run it on SQLite and Postgres).
//!
//! `store_contract!` instantiates each contract test once per backend; a contract test is a
//! plain `async fn` taking the store, so adding a backend is one macro line.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use flue_core::{
    AssistantContent, AssistantMessage, FlueError, Image, ModelRef, Record, Result, StopReason,
    StoredRecord, ToolCall, ToolResult, Usage, UserContent, UserMessage,
    record::CompactionSummary,
    record::ShellExchange,
    store::{DynSessionStore, SessionKey, SessionLog, SessionSummary},
    util::now_ms,
};
use pretty_assertions::assert_eq;
use serde_json::json;
use tempfile::TempDir;
use tokio::sync::Barrier;

/// Instantiates every contract test for one backend: `store_contract!(name, || -> Backend)`.
macro_rules! store_contract {
    ($backend:ident, $open:expr) => {
        mod $backend {
            $crate::store_contract::store_contract!(@tests $open;
                create_makes_an_empty_session,
                create_twice_fails,
                create_sessions_writes_every_session_or_none,
                same_name_in_another_instance_is_another_session,
                load_missing_session_is_none,
                append_and_load_round_trip_every_record_kind,
                appends_continue_at_the_new_version,
                load_from_returns_the_tail,
                version_conflict_writes_nothing,
                empty_append_is_a_no_op,
                append_to_missing_session_fails,
                append_moves_updated_at_only,
                delete_removes_the_session_and_its_records,
                delete_missing_session_is_ok,
                delete_leaves_other_sessions_alone,
                list_is_per_instance_and_sorted,
                instance_ids_name_each_instance_once_sorted,
                concurrent_appends_have_one_winner,
            );
        }
    };
    (@tests $open:expr; $($test:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $test() {
                let backend: $crate::store_contract::Backend = ($open)();
                $crate::store_contract::$test(std::sync::Arc::clone(&backend.store)).await;
            }
        )*
    };
}

pub(crate) use store_contract;

/// A store under test, with the directory that holds its files.
pub(crate) struct Backend {
    pub(crate) store: Arc<dyn DynSessionStore>,
    pub(crate) _dir: Option<TempDir>,
}

// ---------------------------------------------------------------------------------------------
// The contract.

pub(crate) async fn create_makes_an_empty_session(store: Arc<dyn DynSessionStore>) {
    let before = now_ms();
    store.create(&key("chat")).await.unwrap();
    let after = now_ms();

    let log = store.load(&key("chat"), 0).await.unwrap().unwrap();
    assert!(
        (before..=after).contains(&log.created_at),
        "{log:?} not in {before}..={after}"
    );
    let expected = SessionLog {
        version: 0,
        records: vec![],
        created_at: log.created_at,
        updated_at: log.created_at,
    };
    assert_eq!(log, expected);
}

pub(crate) async fn create_twice_fails(store: Arc<dyn DynSessionStore>) {
    store.create(&key("chat")).await.unwrap();
    store.append(&key("chat"), 0, &[user("hi")]).await.unwrap();

    assert_eq!(
        outcome(store.create(&key("chat")).await),
        "session_already_exists chat"
    );
    assert_eq!(
        records(&*store, &key("chat")).await,
        Some((1, vec![user("hi")]))
    );
}

/// What a fork writes: several sessions with their records in one call, all or none.
pub(crate) async fn create_sessions_writes_every_session_or_none(store: Arc<dyn DynSessionStore>) {
    let fork = |session: &str| SessionKey::new("agent-fork", session);
    let sessions = vec![
        (fork("default"), vec![user("one"), user("two")]),
        (fork("task:default:1"), vec![user("task")]),
        (fork("task:default:2"), vec![]),
    ];
    store.create_sessions(&sessions).await.unwrap();
    assert_eq!(
        records(&*store, &fork("default")).await,
        Some((2, vec![user("one"), user("two")]))
    );
    assert_eq!(
        records(&*store, &fork("task:default:1")).await,
        Some((1, vec![user("task")]))
    );
    assert_eq!(
        records(&*store, &fork("task:default:2")).await,
        Some((0, vec![]))
    );
    // One of them exists already: refused, and none of the others is written.
    let again = |session: &str| SessionKey::new("agent-again", session);
    store.create(&again("task:default:2")).await.unwrap();
    let sessions = vec![
        (again("default"), vec![user("one")]),
        (again("task:default:2"), vec![user("task")]),
    ];
    assert_eq!(
        outcome(store.create_sessions(&sessions).await),
        "session_already_exists task:default:2"
    );
    assert_eq!(records(&*store, &again("default")).await, None);
    assert_eq!(
        records(&*store, &again("task:default:2")).await,
        Some((0, vec![]))
    );
}

pub(crate) async fn same_name_in_another_instance_is_another_session(
    store: Arc<dyn DynSessionStore>,
) {
    let other = SessionKey::new("agent-2", "chat");
    store.create(&key("chat")).await.unwrap();
    store.create(&other).await.unwrap();
    store
        .append(&key("chat"), 0, &[user("one"), user("two")])
        .await
        .unwrap();

    assert_eq!(records(&*store, &other).await, Some((0, vec![])));
    assert_eq!(
        outcome(store.append(&other, 2, &[user("x")]).await),
        conflict("chat", 2, 0)
    );
}

pub(crate) async fn load_missing_session_is_none(store: Arc<dyn DynSessionStore>) {
    assert_eq!(store.load(&key("nope"), 0).await.unwrap(), None);
    store
        .create(&SessionKey::new("agent-2", "nope"))
        .await
        .unwrap();
    assert_eq!(store.load(&key("nope"), 0).await.unwrap(), None);
}

pub(crate) async fn append_and_load_round_trip_every_record_kind(store: Arc<dyn DynSessionStore>) {
    let all = every_record_kind();
    store.create(&key("chat")).await.unwrap();

    assert_eq!(outcome(store.append(&key("chat"), 0, &all).await), "ok 7");
    assert_eq!(records(&*store, &key("chat")).await, Some((7, all)));
}

pub(crate) async fn appends_continue_at_the_new_version(store: Arc<dyn DynSessionStore>) {
    store.create(&key("chat")).await.unwrap();

    assert_eq!(
        outcome(store.append(&key("chat"), 0, &[user("1"), user("2")]).await),
        "ok 2"
    );
    assert_eq!(
        outcome(store.append(&key("chat"), 2, &[user("3")]).await),
        "ok 3"
    );
    assert_eq!(
        outcome(store.append(&key("chat"), 3, &[user("4"), user("5")]).await),
        "ok 5"
    );
    let expected = vec![user("1"), user("2"), user("3"), user("4"), user("5")];
    assert_eq!(records(&*store, &key("chat")).await, Some((5, expected)));
}

pub(crate) async fn load_from_returns_the_tail(store: Arc<dyn DynSessionStore>) {
    let all = every_record_kind();
    store.create(&key("chat")).await.unwrap();
    store.append(&key("chat"), 0, &all[..4]).await.unwrap();
    store.append(&key("chat"), 4, &all[4..]).await.unwrap();

    let tail = |from: u64| {
        let store = Arc::clone(&store);
        async move {
            let log = store.load(&key("chat"), from).await.unwrap().unwrap();
            (log.version, log.records)
        }
    };
    assert_eq!(tail(0).await, (7, all.clone()));
    assert_eq!(tail(3).await, (7, all[3..].to_vec()));
    assert_eq!(tail(6).await, (7, all[6..].to_vec()));
    assert_eq!(tail(7).await, (7, vec![]));
    assert_eq!(tail(1_000).await, (7, vec![]));
    assert_eq!(tail(u64::MAX).await, (7, vec![]));
}

pub(crate) async fn version_conflict_writes_nothing(store: Arc<dyn DynSessionStore>) {
    store.create(&key("chat")).await.unwrap();
    store
        .append(&key("chat"), 0, &[user("1"), user("2")])
        .await
        .unwrap();
    let before = store.load(&key("chat"), 0).await.unwrap();

    let late = [user("late 1"), user("late 2"), user("late 3")];
    assert_eq!(
        outcome(store.append(&key("chat"), 0, &late).await),
        conflict("chat", 0, 2)
    );
    assert_eq!(
        outcome(store.append(&key("chat"), 1, &late).await),
        conflict("chat", 1, 2)
    );
    assert_eq!(
        outcome(store.append(&key("chat"), 3, &late).await),
        conflict("chat", 3, 2)
    );
    assert_eq!(store.load(&key("chat"), 0).await.unwrap(), before);

    // The session is still usable at the version it really has.
    assert_eq!(
        outcome(store.append(&key("chat"), 2, &[user("3")]).await),
        "ok 3"
    );
}

pub(crate) async fn empty_append_is_a_no_op(store: Arc<dyn DynSessionStore>) {
    store.create(&key("chat")).await.unwrap();
    store.append(&key("chat"), 0, &[user("1")]).await.unwrap();
    let before = store.load(&key("chat"), 0).await.unwrap();
    tokio::time::sleep(Duration::from_millis(3)).await;

    assert_eq!(outcome(store.append(&key("chat"), 1, &[]).await), "ok 1");
    assert_eq!(store.load(&key("chat"), 0).await.unwrap(), before);
    assert_eq!(
        outcome(store.append(&key("chat"), 0, &[]).await),
        conflict("chat", 0, 1)
    );
    assert_eq!(
        outcome(store.append(&key("ghost"), 0, &[]).await),
        "session_not_found ghost"
    );
}

pub(crate) async fn append_to_missing_session_fails(store: Arc<dyn DynSessionStore>) {
    assert_eq!(
        outcome(store.append(&key("ghost"), 0, &[user("1")]).await),
        "session_not_found ghost"
    );
    assert_eq!(store.load(&key("ghost"), 0).await.unwrap(), None);
    assert_eq!(store.list(AGENT).await.unwrap(), vec![]);
}

pub(crate) async fn append_moves_updated_at_only(store: Arc<dyn DynSessionStore>) {
    store.create(&key("chat")).await.unwrap();
    let created = store.load(&key("chat"), 0).await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;

    store.append(&key("chat"), 0, &[user("1")]).await.unwrap();
    let after = now_ms();
    let appended = store.load(&key("chat"), 0).await.unwrap().unwrap();
    assert_eq!(appended.created_at, created.created_at);
    assert!(
        appended.updated_at > created.updated_at && appended.updated_at <= after,
        "updated_at {} should move past {} and not beyond {after}",
        appended.updated_at,
        created.updated_at,
    );
}

pub(crate) async fn delete_removes_the_session_and_its_records(store: Arc<dyn DynSessionStore>) {
    store.create(&key("chat")).await.unwrap();
    store
        .append(&key("chat"), 0, &every_record_kind())
        .await
        .unwrap();

    store.delete(&key("chat")).await.unwrap();
    assert_eq!(store.load(&key("chat"), 0).await.unwrap(), None);
    assert_eq!(
        outcome(store.append(&key("chat"), 7, &[user("x")]).await),
        "session_not_found chat"
    );

    // A session created again under the same name starts empty.
    store.create(&key("chat")).await.unwrap();
    assert_eq!(records(&*store, &key("chat")).await, Some((0, vec![])));
    assert_eq!(
        outcome(store.append(&key("chat"), 0, &[user("new")]).await),
        "ok 1"
    );
    assert_eq!(
        records(&*store, &key("chat")).await,
        Some((1, vec![user("new")]))
    );
}

pub(crate) async fn delete_missing_session_is_ok(store: Arc<dyn DynSessionStore>) {
    store.delete(&key("ghost")).await.unwrap();
    store.create(&key("chat")).await.unwrap();
    store.delete(&key("chat")).await.unwrap();
    store.delete(&key("chat")).await.unwrap();
    assert_eq!(store.load(&key("chat"), 0).await.unwrap(), None);
}

pub(crate) async fn delete_leaves_other_sessions_alone(store: Arc<dyn DynSessionStore>) {
    let keys = [key("a"), key("b"), SessionKey::new("agent-2", "a")];
    for (idx, session_key) in keys.iter().enumerate() {
        store.create(session_key).await.unwrap();
        store
            .append(session_key, 0, &[user(&format!("record of {idx}"))])
            .await
            .unwrap();
    }

    store.delete(&keys[0]).await.unwrap();
    assert_eq!(records(&*store, &keys[0]).await, None);
    assert_eq!(
        records(&*store, &keys[1]).await,
        Some((1, vec![user("record of 1")]))
    );
    assert_eq!(
        records(&*store, &keys[2]).await,
        Some((1, vec![user("record of 2")]))
    );
}

pub(crate) async fn list_is_per_instance_and_sorted(store: Arc<dyn DynSessionStore>) {
    for name in ["charlie", "alpha", "Bravo", "bravo", "task:1"] {
        store.create(&key(name)).await.unwrap();
    }
    store
        .create(&SessionKey::new("agent-2", "zulu"))
        .await
        .unwrap();
    store
        .append(&key("bravo"), 0, &[user("1"), user("2")])
        .await
        .unwrap();

    let listing = store.list(AGENT).await.unwrap();
    let mut expected = Vec::new();
    for name in ["Bravo", "alpha", "bravo", "charlie", "task:1"] {
        let log = store.load(&key(name), 0).await.unwrap().unwrap();
        expected.push(SessionSummary {
            session: name.to_owned(),
            version: log.version,
            created_at: log.created_at,
            updated_at: log.updated_at,
        });
    }
    assert_eq!(listing, expected);
    assert_eq!(listing[2].version, 2);

    let names = |listing: Vec<SessionSummary>| {
        listing
            .into_iter()
            .map(|summary| summary.session)
            .collect::<Vec<_>>()
    };
    assert_eq!(names(store.list("agent-2").await.unwrap()), ["zulu"]);
    assert_eq!(
        names(store.list("agent").await.unwrap()),
        Vec::<String>::new()
    );
}

pub(crate) async fn concurrent_appends_have_one_winner(store: Arc<dyn DynSessionStore>) {
    const N_WRITERS: usize = 8;
    store.create(&key("chat")).await.unwrap();
    store
        .append(&key("chat"), 0, &[user("first")])
        .await
        .unwrap();

    let outcomes = race(N_WRITERS, |_| Arc::clone(&store)).await;

    let (winners, losers): (Vec<_>, Vec<_>) = outcomes
        .iter()
        .enumerate()
        .partition(|(_, outcome)| outcome.as_str() == "ok 3");
    assert_eq!(winners.len(), 1, "{outcomes:#?}");
    let expected_loser = conflict("chat", 1, 3);
    assert!(
        losers
            .iter()
            .all(|(_, outcome)| **outcome == expected_loser),
        "{outcomes:#?}"
    );
    let winner = winners[0].0;
    assert_eq!(
        records(&*store, &key("chat")).await,
        Some((
            3,
            vec![
                user("first"),
                user(&format!("writer {winner}")),
                user("again")
            ]
        )),
    );
}

// ---------------------------------------------------------------------------------------------
// Helpers.

pub(crate) const AGENT: &str = "agent-1";

pub(crate) fn key(session: &str) -> SessionKey {
    SessionKey::new(AGENT, session)
}

pub(crate) fn user(text: &str) -> StoredRecord {
    StoredRecord::new(Record::User(UserMessage::text(text)), 1_700_000_000_000)
}

/// One record of every kind, with the optional parts filled in.
pub(crate) fn every_record_kind() -> Vec<StoredRecord> {
    let call = ToolCall {
        id: "call-1".to_owned(),
        name: "read".to_owned(),
        input: json!({"path": "src/main.rs", "limit": 20, "nested": [true, null]}),
    };
    let records = [
        Record::User(UserMessage {
            content: vec![
                UserContent::Text {
                    text: "what is in this picture?".to_owned(),
                },
                UserContent::Image(Image {
                    data: "iVBORw0KGgo=".to_owned(),
                    mime_type: "image/png".to_owned(),
                }),
            ],
        }),
        Record::Assistant(AssistantMessage {
            content: vec![
                AssistantContent::Thinking {
                    text: "let me look".to_owned(),
                    signature: Some("sig==".to_owned()),
                    id: None,
                },
                AssistantContent::RedactedThinking {
                    data: "EmwKAhgBEgy3va3pzix/LafPsn4a".to_owned(),
                },
                AssistantContent::Text {
                    text: "Reading the file.".to_owned(),
                },
                AssistantContent::ToolCall(call.clone()),
            ],
            model: ModelRef {
                provider: "anthropic".to_owned(),
                id: "claude-x".to_owned(),
            },
            usage: Usage {
                input_tokens: 120,
                output_tokens: 30,
                cache_read_tokens: 1_000,
                cache_write_tokens: 7,
                cost_usd: Some(0.25),
            },
            stop_reason: StopReason::ToolUse,
            interrupted: false,
        }),
        Record::ToolResult(ToolResult {
            call_id: call.id.clone(),
            tool_name: call.name.clone(),
            content: "fn main() {}\n".to_owned(),
            is_error: false,
            error_kind: None,
            data: Vec::new(),
        }),
        Record::ToolResult(ToolResult {
            call_id: "call-2".to_owned(),
            tool_name: "write".to_owned(),
            content: "path \"/etc\" is outside the sandbox".to_owned(),
            is_error: true,
            error_kind: Some("outside_workspace".to_owned()),
            data: Vec::new(),
        }),
        Record::Assistant(AssistantMessage {
            content: vec![
                AssistantContent::Thinking {
                    text: "done".to_owned(),
                    signature: Some("gAAAAB-encrypted".to_owned()),
                    id: Some("rs_123".to_owned()),
                },
                AssistantContent::Refusal {
                    text: "I can't help with that.".to_owned(),
                },
            ],
            model: ModelRef {
                provider: "scripted".to_owned(),
                id: "s.json".to_owned(),
            },
            usage: Usage::default(),
            stop_reason: StopReason::Other("a_reason_from_the_future".to_owned()),
            interrupted: false,
        }),
        Record::Shell(ShellExchange {
            command: "ls -la | wc -l".to_owned(),
            cwd: Some("/workspace".to_owned()),
            env_keys: vec!["HOME".to_owned(), "PATH".to_owned()],
            stdout: "12\n".to_owned(),
            stderr: "ünïcödé ✓\n".to_owned(),
            exit_code: 124,
        }),
        Record::Compaction(CompactionSummary {
            summary: "The user asked about a picture.".to_owned(),
            first_kept: 5,
            tokens_before: 42_000,
            usage: None,
        }),
    ];
    records
        .into_iter()
        .zip(0..)
        .map(|(record, offset)| StoredRecord::new(record, 1_700_000_000_000 + offset))
        .collect()
}

/// The version and records of a session, without its timestamps.
pub(crate) async fn records(
    store: &dyn DynSessionStore,
    key: &SessionKey,
) -> Option<(u64, Vec<StoredRecord>)> {
    let log = store.load(key, 0).await.unwrap()?;
    Some((log.version, log.records))
}

/// A store call's result as one comparable line.
pub(crate) fn outcome<T: Debug>(result: Result<T>) -> String {
    match result {
        Ok(value) => format!("ok {value:?}"),
        Err(FlueError::VersionConflict {
            session,
            expected,
            actual,
        }) => {
            format!("version_conflict {session}: expected {expected}, actual {actual}")
        }
        Err(FlueError::SessionNotFound { session }) => format!("session_not_found {session}"),
        Err(FlueError::SessionAlreadyExists { session }) => {
            format!("session_already_exists {session}")
        }
        Err(FlueError::CorruptRecord { session, index, .. }) => {
            format!("corrupt_record {session} #{index}")
        }
        Err(err) => format!("{} {err}", err.kind()),
    }
}

pub(crate) fn conflict(session: &str, expected: u64, actual: u64) -> String {
    outcome::<()>(Err(FlueError::VersionConflict {
        session: session.to_owned(),
        expected,
        actual,
    }))
}

/// Spawns `n_writers` tasks that, released together, each append two records to `chat` at the
/// session's current version; returns each writer's outcome.
pub(crate) async fn race(
    n_writers: usize,
    store_of: impl Fn(usize) -> Arc<dyn DynSessionStore>,
) -> Vec<String> {
    let store = store_of(0);
    let version = store.load(&key("chat"), 0).await.unwrap().unwrap().version;
    race_at(n_writers, version, store_of).await
}

/// Like [`race`], at a given version.
pub(crate) async fn race_at(
    n_writers: usize,
    version: u64,
    store_of: impl Fn(usize) -> Arc<dyn DynSessionStore>,
) -> Vec<String> {
    let barrier = Arc::new(Barrier::new(n_writers));
    let tasks: Vec<_> = (0..n_writers)
        .map(|writer| {
            let store = store_of(writer);
            let barrier = Arc::clone(&barrier);
            tokio::spawn(async move {
                let records = [user(&format!("writer {writer}")), user("again")];
                barrier.wait().await;
                outcome(store.append(&key("chat"), version, &records).await)
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.unwrap());
    }
    outcomes
}

pub(crate) async fn instance_ids_name_each_instance_once_sorted(store: Arc<dyn DynSessionStore>) {
    assert_eq!(store.instance_ids().await.unwrap(), Vec::<String>::new());
    for (instance, session) in [
        ("coder:b", "default"),
        ("coder:a", "default"),
        ("coder:b", "task:1"),
        ("Zed:x", "default"),
    ] {
        store
            .create(&SessionKey::new(instance, session))
            .await
            .unwrap();
    }
    assert_eq!(
        store.instance_ids().await.unwrap(),
        ["Zed:x", "coder:a", "coder:b"],
        "bytewise order, each once"
    );
    store
        .delete(&SessionKey::new("coder:a", "default"))
        .await
        .unwrap();
    assert_eq!(store.instance_ids().await.unwrap(), ["Zed:x", "coder:b"]);
}
