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

/// The Rust API of memory: `with_memory` gives the agent the tools, the note store binds the
/// conversation to a subject, and a note the model writes with a known secret is stored
/// redacted (the loop redacts a model turn before its tools run; the tool redacts again) and
/// found by a later conversation of the same subject.
#[tokio::test]
async fn memory_tools_write_redacted_notes_found_by_another_conversation() {
    use flue_core::store::{NoteLimits, NoteStore};
    const SECRET: &str = "sk-memory-secret-0123456789";
    let dir = tempfile::tempdir().unwrap();
    let script = serde_json::json!({"rules": [
        {"when": {"tool_result": "memory_write"}, "reply": {"text": "stored"}},
        {"when": {"tool_result": "memory_search"},
         "reply": {"text": "{{tool_result.data.notes.0.text}}|{{tool_result.error.kind}}"}},
        {"when": {"user_matches": "remember"}, "reply": {"tool_calls": [
            {"name": "memory_write", "input": {"text": format!("Uses key {SECRET} for deploys")}}
        ]}},
        {"reply": {"tool_calls": [{"name": "memory_search", "input": {"query": "deploys"}}]}}
    ]});
    std::fs::write(dir.path().join("script.json"), script.to_string()).unwrap();
    let store = Arc::new(flue_core::MemoryStore::new());
    let harness = |id: &'static str| {
        let store = store.clone();
        let root = dir.path().to_owned();
        async move {
            Harness::builder(
                AgentConfig::new()
                    .with_name("helper")
                    .with_model("scripted/script.json")
                    .with_memory(NoteLimits::default()),
            )
            .with_instance_id(id)
            .with_store(store as Arc<dyn DynSessionStore>)
            .with_providers(
                flue_core::ProviderRegistry::new()
                    .with_provider(Arc::new(flue_core::ScriptedProvider::new(&root))),
            )
            .with_workspace_context(None)
            .with_secrets([SECRET])
            .build()
            .await
            .unwrap()
        }
    };
    store.bind_subject("helper:a", "alice").await.unwrap();
    store.bind_subject("helper:b", "alice").await.unwrap();
    let prompt = |harness: Harness, text: &'static str| async move {
        let session = harness.session("default").await.unwrap();
        session
            .prompt(text, flue_core::PromptOptions::default())
            .await
            .unwrap()
            .text
    };
    assert_eq!(
        prompt(harness("helper:a").await, "remember this").await,
        "stored"
    );
    let found = prompt(harness("helper:b").await, "what deploys?").await;
    assert_eq!(found, "Uses key [redacted] for deploys|");
    let notes = store
        .list_notes(Some("helper"), Some("alice"))
        .await
        .unwrap();
    assert_eq!(notes.len(), 1);
    assert!(!notes[0].text.contains(SECRET), "{}", notes[0].text);
    // A conversation without a subject gets a tool error, not another's notes.
    let unbound = prompt(harness("helper:c").await, "what deploys?").await;
    assert_eq!(unbound, "|memory_unavailable");
}
