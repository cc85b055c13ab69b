//! The store contract suites on the memory store (flue-store runs the same suites on SQLite and
//! Postgres), and how a harness hands its store to the file tools.

use std::sync::Arc;

use flue_core::{
    AgentConfig, Harness, LocalSandbox,
    store::{DynAuditStore, DynSessionStore},
};
use flue_store::SqliteStore;

use crate::audit_contract::entry;

/// The memory store as one suite's `Backend`.
macro_rules! memory {
    ($suite:ident) => {
        pub(crate) fn memory() -> crate::$suite::Backend {
            crate::$suite::Backend {
                store: std::sync::Arc::new(flue_core::MemoryStore::new()),
                _dir: None,
            }
        }
    };
}

mod sessions {
    memory!(store_contract);
    crate::store_contract::store_contract!(memory, crate::stores::sessions::memory);
}

mod conversations {
    memory!(conversation_contract);
    crate::conversation_contract::conversation_contract!(
        memory,
        crate::stores::conversations::memory
    );
}

mod audit {
    memory!(audit_contract);
    crate::audit_contract::audit_contract!(memory, crate::stores::audit::memory);
}

mod notes {
    memory!(note_contract);
    crate::note_contract::note_contract!(memory, crate::stores::notes::memory);
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
