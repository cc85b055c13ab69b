//! The `AuditStore` contract (audit log and trash), run against every store (flue-store's tests
//! include this file and run it on SQLite and Postgres).
//!
//! `audit_contract!` instantiates each contract test once per backend, so adding a backend is
//! one macro line.

use std::sync::Arc;

use flue_core::store::{AuditEntry, DynAuditStore, TrashEntry, TrashReason, TrashedFile};
use pretty_assertions::assert_eq;
use tempfile::TempDir;

macro_rules! audit_contract {
    ($backend:ident, $open:expr) => {
        mod $backend {
            $crate::audit_contract::audit_contract!(@tests $open;
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
                let backend: $crate::audit_contract::Backend = ($open)();
                $crate::audit_contract::$test(std::sync::Arc::clone(&backend.store)).await;
            }
        )*
    };
}

pub(crate) use audit_contract;

/// A store under test, with the directory that holds its files.
pub(crate) struct Backend {
    pub(crate) store: Arc<dyn DynAuditStore>,
    pub(crate) _dir: Option<TempDir>,
}

pub(crate) fn entry(id: &str, instance_id: &str, ok: bool) -> AuditEntry {
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

pub(crate) fn trash_entry(id: &str, instance_id: &str, content: &[u8]) -> TrashEntry {
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

pub(crate) async fn audit_entries_list_in_order_per_instance(store: Arc<dyn DynAuditStore>) {
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

pub(crate) async fn audit_entries_round_trip_every_field(store: Arc<dyn DynAuditStore>) {
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

pub(crate) async fn trash_round_trips_content_per_instance(store: Arc<dyn DynAuditStore>) {
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

pub(crate) async fn identical_content_is_stored_once_and_listed_twice(
    store: Arc<dyn DynAuditStore>,
) {
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

pub(crate) async fn whole_store_listings_span_every_instance_in_order(
    store: Arc<dyn DynAuditStore>,
) {
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
