//! The `AuditStore` contract (audit log and trash), run against every store, plus SQLite's
//! migration and durability, and the harness wiring that hands the store to the file tools.
//!
//! `audit_contract!` instantiates each contract test once per backend, so adding a backend is
//! one macro line.

use std::sync::Arc;

use flue_core::{
    AgentConfig, AuditEntry, DynAuditStore, Harness, LocalSandbox, MemoryStore, DynSessionStore,
    SqliteStore, TrashEntry, TrashReason, TrashedFile,
};
use pretty_assertions::assert_eq;
use tempfile::TempDir;

macro_rules! audit_contract {
    ($backend:ident, $open:expr) => {
        mod $backend {
            use super::*;

            audit_contract!(@tests $open;
                audit_entries_list_in_order_per_instance,
                audit_entries_round_trip_every_field,
                trash_round_trips_content_per_instance,
                identical_content_is_stored_once_and_listed_twice,
                whole_store_listings_span_every_instance_in_order,
            );
        }
    };
    (@tests $open:expr; $($test:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                let backend: Backend = ($open)();
                super::$test(Arc::clone(&backend.store)).await;
            }
        )*
    };
}

audit_contract!(memory, Backend::memory);
audit_contract!(sqlite_file, Backend::sqlite_file);
audit_contract!(sqlite_in_memory, Backend::sqlite_in_memory);
audit_contract!(postgres, Backend::postgres);

struct Backend {
    store: Arc<dyn DynAuditStore>,
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

fn entry(id: &str, instance_id: &str, ok: bool) -> AuditEntry {
    AuditEntry {
        id: id.into(),
        at: 1_700_000_000_000,
        instance_id: instance_id.into(),
        session: "default".into(),
        agent: "coder".into(),
        tool: "write_file".into(),
        operation: "write".into(),
        path: Some("/workspace/a.txt".into()),
        ok,
        ..AuditEntry::default()
    }
}

fn trash_entry(id: &str, instance_id: &str, content: &[u8]) -> TrashEntry {
    use sha2::{Digest, Sha256};
    TrashEntry {
        id: id.into(),
        instance_id: instance_id.into(),
        session: "default".into(),
        agent: "coder".into(),
        tool: "delete_file".into(),
        path: format!("/workspace/{id}.txt"),
        sha256: format!("{:x}", Sha256::digest(content)),
        size: content.len() as u64,
        trashed_at: 1_700_000_000_000,
        reason: TrashReason::Deleted,
    }
}

async fn audit_entries_list_in_order_per_instance(store: Arc<dyn DynAuditStore>) {
    assert_eq!(store.list_audit("i1").await.unwrap(), vec![]);
    for (id, instance) in [("3", "i1"), ("1", "i2"), ("2", "i1")] {
        store
            .append_audit(&entry(id, instance, true))
            .await
            .unwrap();
    }
    let ids: Vec<String> = store
        .list_audit("i1")
        .await
        .unwrap()
        .into_iter()
        .map(|entry| entry.id)
        .collect();
    assert_eq!(ids, ["3", "2"], "insertion order, not id order");
    assert_eq!(
        store.list_audit("i2").await.unwrap(),
        vec![entry("1", "i2", true)]
    );
}

async fn audit_entries_round_trip_every_field(store: Arc<dyn DynAuditStore>) {
    let full = AuditEntry {
        destination_path: Some("/workspace/b.txt".into()),
        sha256_before: Some("aa".into()),
        sha256_after: Some("bb".into()),
        diff: Some("--- a/a.txt\n+++ b/a.txt\n".into()),
        diff_truncated: true,
        error_kind: Some("stale_file".into()),
        error_message: Some("changed".into()),
        ..entry("x", "i1", false)
    };
    store.append_audit(&full).await.unwrap();
    assert_eq!(store.list_audit("i1").await.unwrap(), vec![full]);
}

async fn trash_round_trips_content_per_instance(store: Arc<dyn DynAuditStore>) {
    let content = b"old content\n\xff binary is fine".to_vec();
    let first = trash_entry("t1", "i1", &content);
    store.put_trash(&first, &content).await.unwrap();
    assert_eq!(
        store.get_trash("i1", "t1").await.unwrap(),
        Some(TrashedFile {
            entry: first.clone(),
            content: content.clone()
        })
    );
    assert_eq!(store.get_trash("i2", "t1").await.unwrap(), None);
    assert_eq!(store.get_trash("i1", "nope").await.unwrap(), None);
    assert_eq!(store.list_trash("i1").await.unwrap(), vec![first]);
    assert_eq!(store.list_trash("i2").await.unwrap(), vec![]);
}

async fn identical_content_is_stored_once_and_listed_twice(store: Arc<dyn DynAuditStore>) {
    let content = b"same".to_vec();
    let first = trash_entry("t1", "i1", &content);
    let second = TrashEntry {
        reason: TrashReason::Overwritten,
        trashed_at: first.trashed_at + 1,
        ..trash_entry("t2", "i1", &content)
    };
    store.put_trash(&first, &content).await.unwrap();
    store.put_trash(&second, &content).await.unwrap();
    assert_eq!(
        store.list_trash("i1").await.unwrap(),
        vec![first, second.clone()]
    );
    assert_eq!(
        store
            .get_trash("i1", "t2")
            .await
            .unwrap()
            .map(|found| found.content),
        Some(content)
    );
}

async fn whole_store_listings_span_every_instance_in_order(store: Arc<dyn DynAuditStore>) {
    assert_eq!(store.list_all_audit().await.unwrap(), vec![]);
    assert_eq!(store.list_all_trash().await.unwrap(), vec![]);
    for (id, instance) in [("3", "i2"), ("1", "i1"), ("2", "i2")] {
        store
            .append_audit(&entry(id, instance, true))
            .await
            .unwrap();
    }
    let ids: Vec<(String, String)> = store
        .list_all_audit()
        .await
        .unwrap()
        .into_iter()
        .map(|entry| (entry.id, entry.instance_id))
        .collect();
    assert_eq!(
        ids,
        [
            ("3".to_owned(), "i2".to_owned()),
            ("1".to_owned(), "i1".to_owned()),
            ("2".to_owned(), "i2".to_owned())
        ],
        "insertion order across instances"
    );
    let later = TrashEntry {
        trashed_at: 1_700_000_000_500,
        ..trash_entry("a-later", "i1", b"one")
    };
    let earlier = trash_entry("b-earlier", "i2", b"two");
    let tied = trash_entry("c-tied", "i1", b"three");
    for (entry, content) in [
        (&later, &b"one"[..]),
        (&earlier, &b"two"[..]),
        (&tied, &b"three"[..]),
    ] {
        store.put_trash(entry, content).await.unwrap();
    }
    assert_eq!(
        store.list_all_trash().await.unwrap(),
        vec![earlier, tied, later],
        "by time trashed, then id"
    );
}

#[tokio::test]
async fn sqlite_keeps_the_audit_log_and_trash_across_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flue.db");
    {
        let store = SqliteStore::open(&path).unwrap();
        store.append_audit(&entry("a", "i1", true)).await.unwrap();
        store
            .put_trash(&trash_entry("t", "i1", b"x"), b"x")
            .await
            .unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        store.list_audit("i1").await.unwrap(),
        vec![entry("a", "i1", true)]
    );
    assert_eq!(
        store
            .get_trash("i1", "t")
            .await
            .unwrap()
            .map(|found| found.content),
        Some(b"x".to_vec())
    );
}

#[tokio::test]
async fn a_version_1_database_is_migrated_without_losing_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flue.db");
    {
        // The v1 schema, as a database written before the audit log existed.
        let raw = rusqlite::Connection::open(&path).unwrap();
        raw.execute_batch(
            "CREATE TABLE sessions (instance_id TEXT NOT NULL, session TEXT NOT NULL,
                version INTEGER NOT NULL, created_at INTEGER NOT NULL,
                updated_at INTEGER NOT NULL, PRIMARY KEY (instance_id, session)) WITHOUT ROWID;
             CREATE TABLE records (instance_id TEXT NOT NULL, session TEXT NOT NULL,
                idx INTEGER NOT NULL, record TEXT NOT NULL,
                PRIMARY KEY (instance_id, session, idx),
                FOREIGN KEY (instance_id, session) REFERENCES sessions (instance_id, session)
                    ON DELETE CASCADE) WITHOUT ROWID;
             INSERT INTO sessions VALUES ('i1', 'chat', 0, 1, 1);
             PRAGMA user_version = 1;",
        )
        .unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        store
            .list("i1")
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.session)
            .collect::<Vec<_>>(),
        ["chat"]
    );
    store.append_audit(&entry("a", "i1", true)).await.unwrap();
    assert_eq!(store.list_audit("i1").await.unwrap().len(), 1);
}

#[tokio::test]
async fn the_harness_hands_the_session_store_to_the_file_tools() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = Arc::new(SqliteStore::open(&dir.path().join("db/flue.db")).unwrap());
    let work = tempfile::tempdir().unwrap();
    let harness = Harness::builder(AgentConfig::new().with_name("coder"))
        .with_sandbox(Arc::new(LocalSandbox::new(work.path()).unwrap()))
        .with_store(sqlite.clone() as Arc<dyn DynSessionStore>)
        .with_instance_id("i1")
        .build()
        .await
        .unwrap();
    harness
        .audit_store()
        .append_audit(&entry("a", "i1", true))
        .await
        .unwrap();
    assert_eq!(sqlite.list_audit("i1").await.unwrap().len(), 1);
}
