//! flue-core's store contract suites, run on each durable backend: SQLite in a file and in
//! memory, and Postgres (a fresh database on the test server).

use std::sync::Arc;

use flue_store::{PostgresOptions, PostgresStore, SqliteStore};
use tempfile::TempDir;

/// A store in a fresh SQLite file, with its directory.
fn sqlite_file() -> (Arc<SqliteStore>, Option<TempDir>) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("flue.db")).unwrap();
    (Arc::new(store), Some(dir))
}

fn sqlite_in_memory() -> (Arc<SqliteStore>, Option<TempDir>) {
    (Arc::new(SqliteStore::open_in_memory().unwrap()), None)
}

/// A fresh database on the test Postgres server.
fn postgres() -> (Arc<PostgresStore>, Option<TempDir>) {
    let url = crate::pg_server::fresh_database();
    let store = tokio::task::block_in_place(|| {
        tokio::runtime::Handle::current()
            .block_on(PostgresStore::connect(&url, PostgresOptions::default()))
    })
    .unwrap();
    (Arc::new(store), None)
}

/// The backends of one suite, each a `fn() -> Backend` of that suite's `Backend`.
macro_rules! backends {
    ($suite:ident) => {
        pub(crate) fn sqlite_file() -> crate::$suite::Backend {
            let (store, _dir) = super::sqlite_file();
            crate::$suite::Backend { store, _dir }
        }

        pub(crate) fn sqlite_in_memory() -> crate::$suite::Backend {
            let (store, _dir) = super::sqlite_in_memory();
            crate::$suite::Backend { store, _dir }
        }

        pub(crate) fn postgres() -> crate::$suite::Backend {
            let (store, _dir) = super::postgres();
            crate::$suite::Backend { store, _dir }
        }
    };
}

mod sessions {
    backends!(store_contract);
    crate::store_contract::store_contract!(sqlite_file, crate::contracts::sessions::sqlite_file);
    crate::store_contract::store_contract!(
        sqlite_in_memory,
        crate::contracts::sessions::sqlite_in_memory
    );
    crate::store_contract::store_contract!(postgres, crate::contracts::sessions::postgres);
}

mod conversations {
    backends!(conversation_contract);
    crate::conversation_contract::conversation_contract!(
        sqlite_file,
        crate::contracts::conversations::sqlite_file
    );
    crate::conversation_contract::conversation_contract!(
        sqlite_in_memory,
        crate::contracts::conversations::sqlite_in_memory
    );
    crate::conversation_contract::conversation_contract!(
        postgres,
        crate::contracts::conversations::postgres
    );
}

mod audit {
    backends!(audit_contract);
    crate::audit_contract::audit_contract!(sqlite_file, crate::contracts::audit::sqlite_file);
    crate::audit_contract::audit_contract!(
        sqlite_in_memory,
        crate::contracts::audit::sqlite_in_memory
    );
    crate::audit_contract::audit_contract!(postgres, crate::contracts::audit::postgres);
}

mod notes {
    backends!(note_contract);
    crate::note_contract::note_contract!(sqlite_file, crate::contracts::notes::sqlite_file);
    crate::note_contract::note_contract!(
        sqlite_in_memory,
        crate::contracts::notes::sqlite_in_memory
    );
    crate::note_contract::note_contract!(postgres, crate::contracts::notes::postgres);
}

/// Eval runs: stored whole, replaced under their id with the first creation time kept, listed
/// by id; on every backend, the in-memory one included.
mod eval_runs {
    use std::sync::Arc;

    use flue_core::store::{DynEvalRunStore, MemoryStore, SessionStore};

    async fn contract(store: Arc<dyn DynEvalRunStore>) {
        assert_eq!(store.eval_runs().await.unwrap(), vec![]);
        assert_eq!(store.eval_run("01B").await.unwrap(), None);
        store
            .put_eval_run("01B", r#"{"id":"01B","results":[]}"#)
            .await
            .unwrap();
        store.put_eval_run("01A", r#"{"id":"01A"}"#).await.unwrap();
        let first = store.eval_run("01B").await.unwrap().unwrap();
        // A finished case rewrites the run.
        store
            .put_eval_run("01B", r#"{"id":"01B","results":[1]}"#)
            .await
            .unwrap();
        let second = store.eval_run("01B").await.unwrap().unwrap();
        assert_eq!(second.run, r#"{"id":"01B","results":[1]}"#);
        assert_eq!(second.created_at, first.created_at);
        assert!(second.updated_at >= first.updated_at);
        let ids: Vec<String> = store
            .eval_runs()
            .await
            .unwrap()
            .into_iter()
            .map(|record| record.id)
            .collect();
        assert_eq!(ids, vec!["01A", "01B"]);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn sqlite_file() {
        let (store, _dir) = super::sqlite_file();
        contract(SessionStore::eval_run_store(store).unwrap()).await;
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn sqlite_in_memory() {
        let (store, _dir) = super::sqlite_in_memory();
        contract(SessionStore::eval_run_store(store).unwrap()).await;
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn postgres() {
        let (store, _dir) = super::postgres();
        contract(SessionStore::eval_run_store(store).unwrap()).await;
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn memory() {
        contract(SessionStore::eval_run_store(Arc::new(MemoryStore::new())).unwrap()).await;
    }
}
