//! The `NoteStore` contract (memory across conversations), run against every store
//! (flue-store's tests include this file and run it on SQLite and Postgres).
//!
//! `note_contract!` instantiates each contract test once per backend.

use std::sync::Arc;

use flue_core::store::{DynNoteStore, Note, NoteLimits, search_terms};
use pretty_assertions::assert_eq;
use tempfile::TempDir;

macro_rules! note_contract {
    ($backend:ident, $open:expr) => {
        mod $backend {
            $crate::note_contract::note_contract!(@tests $open;
                notes_are_scoped_to_agent_and_subject_and_found_by_their_words,
                bounds_are_checked_per_note_and_per_subject,
                delete_and_erase_remove_notes_and_the_index,
                a_conversation_is_bound_to_one_subject,
            );
        }
    };
    (@tests $open:expr; $($test:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                let backend: $crate::note_contract::Backend = ($open)();
                let store = std::sync::Arc::clone(&backend.store)
                    .note_store()
                    .expect("the store keeps notes");
                $crate::note_contract::$test(store).await;
            }
        )*
    };
}

pub(crate) use note_contract;

/// A store under test, with the directory that holds its files.
pub(crate) struct Backend {
    pub(crate) store: Arc<dyn flue_core::store::DynSessionStore>,
    pub(crate) _dir: Option<TempDir>,
}

fn note(id: &str, agent: &str, subject: &str, text: &str, at: u64) -> Note {
    Note {
        id: id.into(),
        agent: agent.into(),
        subject: subject.into(),
        text: text.into(),
        created_at: at,
    }
}

fn ids(notes: &[Note]) -> Vec<&str> {
    notes.iter().map(|note| note.id.as_str()).collect()
}

pub(crate) async fn notes_are_scoped_to_agent_and_subject_and_found_by_their_words(
    store: Arc<dyn DynNoteStore>,
) {
    let limits = NoteLimits::default();
    for (id, agent, subject, text, at) in [
        ("n1", "helper", "alice", "Prefers tea over coffee", 1),
        ("n2", "helper", "alice", "Lives in Lyon; works remotely", 2),
        ("n3", "helper", "bob", "Prefers coffee, black", 3),
        ("n4", "other", "alice", "Tea ceremony teacher", 4),
        (
            "n5",
            "helper",
            "alice",
            "Allergic to peanuts. Tea is fine.",
            5,
        ),
    ] {
        store
            .put_note(&note(id, agent, subject, text, at), &limits)
            .await
            .unwrap();
    }
    let found = store
        .search_notes("helper", "alice", &search_terms("TEA?"), 10)
        .await
        .unwrap();
    let mut found = ids(&found);
    found.sort_unstable();
    assert_eq!(found, vec!["n1", "n5"]);
    // Any word of the query; none of the other subject's or agent's notes.
    let found = store
        .search_notes("helper", "alice", &search_terms("coffee lyon"), 10)
        .await
        .unwrap();
    let mut found = ids(&found);
    found.sort_unstable();
    assert_eq!(found, vec!["n1", "n2"]);
    // A word inside another is not a match; query syntax is only words.
    let found = store
        .search_notes("helper", "alice", &search_terms("te\" OR *"), 10)
        .await
        .unwrap();
    assert_eq!(ids(&found), Vec::<&str>::new());
    // No terms: the newest first, at most `limit`.
    let found = store.search_notes("helper", "alice", &[], 2).await.unwrap();
    assert_eq!(ids(&found), vec!["n5", "n2"]);
    let listed = store.list_notes(None, Some("alice")).await.unwrap();
    assert_eq!(ids(&listed), vec!["n1", "n2", "n4", "n5"]);
    let listed = store.list_notes(Some("helper"), None).await.unwrap();
    assert_eq!(ids(&listed), vec!["n1", "n2", "n3", "n5"]);
    assert_eq!(
        listed[1],
        note("n2", "helper", "alice", "Lives in Lyon; works remotely", 2)
    );
}

pub(crate) async fn bounds_are_checked_per_note_and_per_subject(store: Arc<dyn DynNoteStore>) {
    let limits = NoteLimits {
        max_note_bytes: 10,
        max_notes: 2,
        max_subject_bytes: 15,
    };
    let err = store
        .put_note(&note("big", "a", "s", "eleven byte", 1), &limits)
        .await
        .unwrap_err();
    assert_eq!(
        (err.kind(), err.to_string()),
        (
            "memory_limit_exceeded",
            "memory limit exceeded: note bytes (limit 10)".to_owned()
        )
    );
    store
        .put_note(&note("n1", "a", "s", "ten bytes!", 1), &limits)
        .await
        .unwrap();
    let err = store
        .put_note(&note("n2", "a", "s", "six b!", 2), &limits)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "memory limit exceeded: bytes per subject (limit 15)"
    );
    store
        .put_note(&note("n2", "a", "s", "five!", 2), &limits)
        .await
        .unwrap();
    let err = store
        .put_note(&note("n3", "a", "s", "x", 3), &limits)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "memory limit exceeded: notes per subject (limit 2)"
    );
    // A note stored already (a write run again after a crash) is not stored twice, and the
    // full subject does not refuse it.
    store
        .put_note(&note("n2", "a", "s", "five!", 2), &limits)
        .await
        .unwrap();
    // Another subject has bounds of its own.
    store
        .put_note(&note("n4", "a", "t", "x", 4), &limits)
        .await
        .unwrap();
    assert_eq!(
        ids(&store.list_notes(None, None).await.unwrap()),
        vec!["n1", "n2", "n4"]
    );
}

pub(crate) async fn delete_and_erase_remove_notes_and_the_index(store: Arc<dyn DynNoteStore>) {
    let limits = NoteLimits::default();
    for (id, agent, subject) in [
        ("n1", "a", "alice"),
        ("n2", "a", "alice"),
        ("n3", "b", "alice"),
        ("n4", "a", "bob"),
    ] {
        store
            .put_note(&note(id, agent, subject, "likes green tea", 1), &limits)
            .await
            .unwrap();
    }
    // Only within its agent and subject.
    assert!(!store.delete_note("a", "bob", "n1").await.unwrap());
    assert!(store.delete_note("a", "alice", "n1").await.unwrap());
    assert!(!store.delete_note("a", "alice", "n1").await.unwrap());
    let found = store
        .search_notes("a", "alice", &search_terms("tea"), 10)
        .await
        .unwrap();
    assert_eq!(ids(&found), vec!["n2"]);
    // Erasure of one agent's notes, then of the subject everywhere.
    store.bind_subject("a:c1", "alice").await.unwrap();
    assert_eq!(store.erase_notes(Some("a"), "alice").await.unwrap(), 1);
    assert_eq!(
        store.subject_of("a:c1").await.unwrap().as_deref(),
        Some("alice")
    );
    assert_eq!(store.erase_notes(None, "alice").await.unwrap(), 1);
    assert_eq!(store.subject_of("a:c1").await.unwrap(), None);
    assert_eq!(
        ids(&store.list_notes(None, None).await.unwrap()),
        vec!["n4"]
    );
    let found = store
        .search_notes("b", "alice", &search_terms("tea"), 10)
        .await
        .unwrap();
    assert_eq!(ids(&found), Vec::<&str>::new());
}

pub(crate) async fn a_conversation_is_bound_to_one_subject(store: Arc<dyn DynNoteStore>) {
    assert_eq!(store.subject_of("a:c1").await.unwrap(), None);
    store.bind_subject("a:c1", "alice").await.unwrap();
    store.bind_subject("a:c1", "alice").await.unwrap();
    let err = store.bind_subject("a:c1", "bob").await.unwrap_err();
    assert_eq!(
        (err.kind(), err.to_string()),
        (
            "memory_subject_conflict",
            "conversation a:c1 keeps the memory of subject \"alice\", not \"bob\"".to_owned()
        )
    );
    store.bind_subject("a:c2", "bob").await.unwrap();
    assert_eq!(
        store.subject_of("a:c1").await.unwrap().as_deref(),
        Some("alice")
    );
    assert_eq!(
        store.subject_of("a:c2").await.unwrap().as_deref(),
        Some("bob")
    );
}
