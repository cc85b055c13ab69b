//! `session.delete()` called concurrently, from one handle or several: one deletion, shared.

use std::sync::Arc;

use flue_core::{AgentConfig, Harness, LocalSandbox, MemoryStore, store::SessionStore};

const TRIALS: usize = 100;
const CALLERS: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_deletes_share_one_deletion() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(MemoryStore::new());
    let harness = Harness::builder(AgentConfig::new())
        .with_instance_id("deleting")
        .with_store(store.clone())
        .with_sandbox(Arc::new(LocalSandbox::new(dir.path()).unwrap()))
        .with_workspace_context(None)
        .build()
        .await
        .unwrap();
    let mut failures = Vec::new();
    for trial in 0..TRIALS {
        let name = format!("s{trial}");
        let mut handles = Vec::new();
        for _ in 0..CALLERS {
            handles.push(harness.session(&name).await.unwrap());
        }
        let barrier = Arc::new(tokio::sync::Barrier::new(CALLERS));
        let tasks: Vec<_> = handles
            .into_iter()
            .map(|session| {
                let barrier = Arc::clone(&barrier);
                tokio::spawn(async move {
                    barrier.wait().await;
                    session.delete().await
                })
            })
            .collect();
        for task in tasks {
            if let Err(err) = task.await.unwrap() {
                failures.push(format!("trial {trial}: {}", err.kind()));
            }
        }
        let stored = store.list("deleting").await.unwrap();
        assert!(
            stored.iter().all(|summary| summary.session != name),
            "trial {trial}: {name} is still stored"
        );
    }
    assert_eq!(failures, Vec::<String>::new());
}
