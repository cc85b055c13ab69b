//! The `SessionStore` contract, run against every store, plus SQLite-only durability tests.
//!
//! `store_contract!` instantiates each contract test once per backend; a contract test is a
//! plain `async fn` taking the store, so adding a backend is one macro line.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use flue_core::{
    AssistantContent, AssistantMessage, CompactionSummary, FlueError, Image, MemoryStore, ModelRef,
    Record, Result, SessionKey, SessionLog, DynSessionStore, SessionSummary, ShellExchange,
    SqliteStore, StopReason, StoredRecord, ToolCall, ToolResult, Usage, UserContent, UserMessage,
    now_ms,
};
use pretty_assertions::assert_eq;
use serde_json::json;
use tempfile::TempDir;
use tokio::sync::Barrier;

/// Instantiates every contract test for one backend: `store_contract!(name, || -> Backend)`.
macro_rules! store_contract {
    ($backend:ident, $open:expr) => {
        mod $backend {
            use super::*;

            store_contract!(@tests $open;
                create_makes_an_empty_session,
                create_twice_fails,
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
                let backend: Backend = ($open)();
                super::$test(Arc::clone(&backend.store)).await;
            }
        )*
    };
}

store_contract!(memory, Backend::memory);
store_contract!(sqlite_file, Backend::sqlite_file);
store_contract!(sqlite_in_memory, Backend::sqlite_in_memory);
store_contract!(postgres, Backend::postgres);

/// A store under test, with the directory that holds its files.
struct Backend {
    store: Arc<dyn DynSessionStore>,
    _dir: Option<TempDir>,
}

impl Backend {
    fn memory() -> Self {
        Self {
            store: Arc::new(MemoryStore::new()),
            _dir: None,
        }
    }

    fn sqlite_file() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("flue.db")).unwrap();
        Self {
            store: Arc::new(store),
            _dir: Some(dir),
        }
    }

    fn sqlite_in_memory() -> Self {
        Self {
            store: Arc::new(SqliteStore::open_in_memory().unwrap()),
            _dir: None,
        }
    }

    /// A fresh database on the test Postgres server.
    fn postgres() -> Self {
        let url = crate::pg_server::fresh_database();
        let store = tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(flue_connectors::PostgresStore::connect(
                &url,
                flue_connectors::PostgresOptions::default(),
            ))
        })
        .unwrap();
        Self {
            store: Arc::new(store),
            _dir: None,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The contract.

async fn create_makes_an_empty_session(store: Arc<dyn DynSessionStore>) {
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

async fn create_twice_fails(store: Arc<dyn DynSessionStore>) {
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

async fn same_name_in_another_instance_is_another_session(store: Arc<dyn DynSessionStore>) {
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

async fn load_missing_session_is_none(store: Arc<dyn DynSessionStore>) {
    assert_eq!(store.load(&key("nope"), 0).await.unwrap(), None);
    store
        .create(&SessionKey::new("agent-2", "nope"))
        .await
        .unwrap();
    assert_eq!(store.load(&key("nope"), 0).await.unwrap(), None);
}

async fn append_and_load_round_trip_every_record_kind(store: Arc<dyn DynSessionStore>) {
    let all = every_record_kind();
    store.create(&key("chat")).await.unwrap();

    assert_eq!(outcome(store.append(&key("chat"), 0, &all).await), "ok 7");
    assert_eq!(records(&*store, &key("chat")).await, Some((7, all)));
}

async fn appends_continue_at_the_new_version(store: Arc<dyn DynSessionStore>) {
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

async fn load_from_returns_the_tail(store: Arc<dyn DynSessionStore>) {
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

async fn version_conflict_writes_nothing(store: Arc<dyn DynSessionStore>) {
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

async fn empty_append_is_a_no_op(store: Arc<dyn DynSessionStore>) {
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

async fn append_to_missing_session_fails(store: Arc<dyn DynSessionStore>) {
    assert_eq!(
        outcome(store.append(&key("ghost"), 0, &[user("1")]).await),
        "session_not_found ghost"
    );
    assert_eq!(store.load(&key("ghost"), 0).await.unwrap(), None);
    assert_eq!(store.list(AGENT).await.unwrap(), vec![]);
}

async fn append_moves_updated_at_only(store: Arc<dyn DynSessionStore>) {
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

async fn delete_removes_the_session_and_its_records(store: Arc<dyn DynSessionStore>) {
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

async fn delete_missing_session_is_ok(store: Arc<dyn DynSessionStore>) {
    store.delete(&key("ghost")).await.unwrap();
    store.create(&key("chat")).await.unwrap();
    store.delete(&key("chat")).await.unwrap();
    store.delete(&key("chat")).await.unwrap();
    assert_eq!(store.load(&key("chat"), 0).await.unwrap(), None);
}

async fn delete_leaves_other_sessions_alone(store: Arc<dyn DynSessionStore>) {
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

async fn list_is_per_instance_and_sorted(store: Arc<dyn DynSessionStore>) {
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

async fn concurrent_appends_have_one_winner(store: Arc<dyn DynSessionStore>) {
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
// SQLite only.

#[tokio::test]
async fn sqlite_data_survives_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deep/er/flue.db");
    let first_log = {
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.path(), Some(path.as_path()));
        store.create(&key("chat")).await.unwrap();
        store.create(&key("empty")).await.unwrap();
        store
            .append(&key("chat"), 0, &every_record_kind())
            .await
            .unwrap();
        store.load(&key("chat"), 0).await.unwrap()
    };
    assert!(path.is_file());

    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.load(&key("chat"), 0).await.unwrap(), first_log);
    let names: Vec<String> = store
        .list(AGENT)
        .await
        .unwrap()
        .into_iter()
        .map(|summary| summary.session)
        .collect();
    assert_eq!(names, ["chat", "empty"]);
    assert_eq!(
        outcome(store.append(&key("chat"), 7, &[user("more")]).await),
        "ok 8"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_two_stores_on_one_file_never_interleave() {
    const N_ROUNDS: u64 = 100;
    const N_WRITERS: usize = 6;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flue.db");
    let stores: [Arc<dyn DynSessionStore>; 2] = [
        Arc::new(SqliteStore::open(&path).unwrap()),
        Arc::new(SqliteStore::open(&path).unwrap()),
    ];
    stores[0].create(&key("chat")).await.unwrap();
    assert_eq!(
        outcome(stores[1].create(&key("chat")).await),
        "session_already_exists chat"
    );

    // Each round every writer appends two records at the same version; one wins, the rest
    // conflict, and the log grows by exactly the winner's two records.
    let mut expected = Vec::new();
    for round in 0..N_ROUNDS {
        let version = round * 2;
        let outcomes = race_at(N_WRITERS, version, |writer| Arc::clone(&stores[writer % 2])).await;
        let winners: Vec<usize> = (0..N_WRITERS)
            .filter(|&writer| outcomes[writer] == format!("ok {}", version + 2))
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: {outcomes:#?}");
        let expected_loser = conflict("chat", version, version + 2);
        for (writer, outcome) in outcomes.iter().enumerate() {
            if writer != winners[0] {
                assert_eq!(*outcome, expected_loser, "round {round}, writer {writer}");
            }
        }
        expected.extend([user(&format!("writer {}", winners[0])), user("again")]);
    }

    for store in &stores {
        assert_eq!(
            records(&**store, &key("chat")).await,
            Some((N_ROUNDS * 2, expected.clone()))
        );
    }
}

#[tokio::test]
async fn sqlite_migration_sets_user_version_and_wal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flue.db");
    drop(SqliteStore::open(&path).unwrap());

    let raw = rusqlite::Connection::open(&path).unwrap();
    let user_version: i64 = raw
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    let journal_mode: String = raw
        .query_row("PRAGMA journal_mode", [], |row| row.get(0))
        .unwrap();
    let mut select = raw
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap();
    let tables: Vec<String> = select
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        (user_version, journal_mode.as_str(), tables),
        (
            5,
            "wal",
            [
                "audit",
                "conversations",
                "records",
                "sessions",
                "stream",
                "submissions",
                "trash",
                "trash_blobs"
            ]
            .map(str::to_owned)
            .to_vec()
        )
    );
}

#[tokio::test]
async fn a_version_4_database_keeps_its_submissions_with_no_trace_parent() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flue.db");
    let key = flue_core::ConversationKey::new("agent", "old");
    let admitted = {
        let store = SqliteStore::open(&path).unwrap();
        flue_core::ConversationStore::admit(
            &store,
            &flue_core::Admission {
                key: key.clone(),
                submission_id: flue_core::new_ulid(),
                new_uid: flue_core::new_ulid(),
                message: flue_core::DeliveredMessage::user("from before"),
                accepted_at: now_ms(),
                options: flue_core::DispatchOptions::default(),
            },
        )
        .await
        .unwrap()
    };
    // Back to the version-4 schema, as an older flue left it.
    let raw = rusqlite::Connection::open(&path).unwrap();
    raw.execute_batch("ALTER TABLE submissions DROP COLUMN trace_parent; PRAGMA user_version = 4;")
        .unwrap();
    drop(raw);

    let store = SqliteStore::open(&path).unwrap();
    let info = flue_core::ConversationStore::submission(&store, &admitted.submission_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (info.message, info.trace_parent),
        (flue_core::DeliveredMessage::user("from before"), None)
    );
    let user_version: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(user_version, 5);
}

#[tokio::test]
async fn sqlite_newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flue.db");
    drop(SqliteStore::open(&path).unwrap());
    rusqlite::Connection::open(&path)
        .unwrap()
        .pragma_update(None, "user_version", 99)
        .unwrap();

    let err = SqliteStore::open(&path).unwrap_err();
    let shown = path.display();
    assert_eq!(
        (err.kind(), err.to_string()),
        (
            "store_error",
            format!(
                "store error: cannot open the conversation store {shown}: database schema \
                 version 99 is newer than this flue-core supports (5); upgrade flue to read it, \
                 or move it aside (`mv {shown} {shown}.damaged`) and run again to start an \
                 empty store"
            )
        )
    );
}

#[tokio::test]
async fn sqlite_a_damaged_or_unusable_file_is_named_with_its_cause_and_fix() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flue.db");
    let shown = path.display();
    std::fs::write(&path, "not a database, just text\n".repeat(200)).unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert_eq!(
        (err.kind(), err.to_string()),
        (
            "store_error",
            format!(
                "store error: cannot open the conversation store {shown}: cannot set the journal \
                 mode: file is not a database; the file is damaged or is not a flue store: move \
                 it aside (`mv {shown} {shown}.damaged`) and run again to start an empty store"
            )
        )
    );

    // A real store whose pages were cut off is damaged too.
    std::fs::remove_file(&path).unwrap();
    {
        let store = SqliteStore::open(&path).unwrap();
        for idx in 0..50 {
            let key = key(&format!("s{idx}"));
            store.create(&key).await.unwrap();
            store
                .append(&key, 0, &[user(&"x".repeat(2000))])
                .await
                .unwrap();
        }
    }
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 3]).unwrap();
    let _ = std::fs::remove_file(dir.path().join("flue.db-wal"));
    let _ = std::fs::remove_file(dir.path().join("flue.db-shm"));
    match SqliteStore::open(&path) {
        Err(err) => {
            assert!(
                err.to_string().contains(&format!("{shown}: ")) && err.to_string().contains("mv "),
                "{err}"
            );
        }
        // SQLite only reads the pages it needs: opening may work, reading then fails.
        Ok(store) => {
            let mut failed = 0;
            for idx in 0..50 {
                failed += usize::from(store.load(&key(&format!("s{idx}")), 0).await.is_err());
            }
            assert!(failed > 0, "a store cut to a third still read back whole");
        }
    }

    // A folder where the file should be.
    let folder = dir.path().join("folder.db");
    std::fs::create_dir(&folder).unwrap();
    let err = SqliteStore::open(&folder).unwrap_err();
    let message = err.to_string();
    assert!(
        message.starts_with(&format!(
            "store error: cannot open the conversation store {}: ",
            folder.display()
        )) && message.ends_with(
            "check that this user can read and write the file and its folder (and that the \
             folder is on a writable disk)"
        ),
        "{message}"
    );
}

#[tokio::test]
async fn sqlite_corrupt_record_is_reported_with_its_index() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flue.db");
    let store = SqliteStore::open(&path).unwrap();
    store.create(&key("chat")).await.unwrap();
    store
        .append(&key("chat"), 0, &[user("1"), user("2")])
        .await
        .unwrap();

    let raw = rusqlite::Connection::open(&path).unwrap();
    raw.execute(
        "INSERT INTO records (instance_id, session, idx, record) VALUES (?1, 'chat', 2, '{oops')",
        [AGENT],
    )
    .unwrap();
    raw.execute("UPDATE sessions SET version = 3 WHERE session = 'chat'", [])
        .unwrap();

    assert_eq!(
        outcome(store.load(&key("chat"), 0).await),
        "corrupt_record chat #2"
    );
    assert_eq!(
        outcome(store.load(&key("chat"), 2).await),
        "corrupt_record chat #2"
    );
    // Loading only what comes after the bad record still works.
    let head = store.load(&key("chat"), 3).await.unwrap().unwrap();
    assert_eq!((head.version, head.records), (3, vec![]));

    // A record of an unknown type is corrupt too, not a panic.
    raw.execute(
        "UPDATE records SET record = ?1 WHERE idx = 2",
        [json!({"v": 1, "at": 1, "type": "hologram"}).to_string()],
    )
    .unwrap();
    assert_eq!(
        outcome(store.load(&key("chat"), 1).await),
        "corrupt_record chat #2"
    );

    // A record written by a newer format is refused rather than misread.
    raw.execute(
        "UPDATE records SET record = ?1 WHERE idx = 2",
        [json!({"v": 99, "at": 1, "type": "user", "content": []}).to_string()],
    )
    .unwrap();
    let err = store.load(&key("chat"), 2).await.unwrap_err();
    assert!(
        err.to_string().contains("newer than this flue supports"),
        "{err}"
    );
}

#[tokio::test]
async fn sqlite_in_memory_store_has_no_path() {
    let store = SqliteStore::open_in_memory().unwrap();
    assert_eq!(store.path(), None);
    assert_eq!(format!("{store:?}"), "SqliteStore { path: None, .. }");
    let dir = tempfile::tempdir().unwrap();
    let on_disk = SqliteStore::open(&dir.path().join("x.db")).unwrap();
    assert_eq!(
        format!("{on_disk:?}"),
        format!(
            "SqliteStore {{ path: Some({:?}), .. }}",
            dir.path().join("x.db")
        )
    );
}

// ---------------------------------------------------------------------------------------------
// Helpers.

const AGENT: &str = "agent-1";

fn key(session: &str) -> SessionKey {
    SessionKey::new(AGENT, session)
}

fn user(text: &str) -> StoredRecord {
    StoredRecord::new(Record::User(UserMessage::text(text)), 1_700_000_000_000)
}

/// One record of every kind, with the optional parts filled in.
fn every_record_kind() -> Vec<StoredRecord> {
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
            content: vec![AssistantContent::Thinking {
                text: "done".to_owned(),
                signature: None,
            }],
            model: ModelRef {
                provider: "scripted".to_owned(),
                id: "s.json".to_owned(),
            },
            usage: Usage::default(),
            stop_reason: StopReason::EndTurn,
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
        }),
    ];
    records
        .into_iter()
        .zip(0..)
        .map(|(record, offset)| StoredRecord::new(record, 1_700_000_000_000 + offset))
        .collect()
}

/// The version and records of a session, without its timestamps.
async fn records(store: &dyn DynSessionStore, key: &SessionKey) -> Option<(u64, Vec<StoredRecord>)> {
    let log = store.load(key, 0).await.unwrap()?;
    Some((log.version, log.records))
}

/// A store call's result as one comparable line.
fn outcome<T: Debug>(result: Result<T>) -> String {
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

fn conflict(session: &str, expected: u64, actual: u64) -> String {
    outcome::<()>(Err(FlueError::VersionConflict {
        session: session.to_owned(),
        expected,
        actual,
    }))
}

/// Spawns `n_writers` tasks that, released together, each append two records to `chat` at the
/// session's current version; returns each writer's outcome.
async fn race(n_writers: usize, store_of: impl Fn(usize) -> Arc<dyn DynSessionStore>) -> Vec<String> {
    let store = store_of(0);
    let version = store.load(&key("chat"), 0).await.unwrap().unwrap().version;
    race_at(n_writers, version, store_of).await
}

/// Like [`race`], at a given version.
async fn race_at(
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

async fn instance_ids_name_each_instance_once_sorted(store: Arc<dyn DynSessionStore>) {
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
