//! The Postgres store between nodes: several `PostgresStore`s on one database stand for
//! several `flue serve` processes. Ownership cannot be double-claimed, a dead node's
//! conversations are free at once, a hung node's when its lease runs out, a stale node's
//! writes are refused by the fence, heads travel by NOTIFY, and a newer schema is refused.
//! (The generic store contracts run on Postgres in flue-core's tests.)

use std::sync::Arc;
use std::time::Duration;

use flue_core::{
    ConversationKey, DeliveredMessage, DispatchOptions, DurabilityConfig, FlueError, Offset,
    Record, StoredRecord, UserMessage,
    store::{Acquire, Admission, ConversationStore, FencedAppend, SessionKey, SessionStore},
    util::{new_ulid, now_ms},
};
use flue_store::{PostgresOptions, PostgresStore};

use crate::pg_server::{fresh_database, psql};

async fn node(url: &str) -> Arc<PostgresStore> {
    Arc::new(
        PostgresStore::connect(url, PostgresOptions::default())
            .await
            .unwrap(),
    )
}

fn key(id: &str) -> ConversationKey {
    ConversationKey::new("agent", id)
}

async fn admit(store: &PostgresStore, key: &ConversationKey, text: &str) -> Offset {
    store
        .admit(&Admission {
            key: key.clone(),
            submission_id: new_ulid(),
            new_uid: new_ulid(),
            message: DeliveredMessage::user(text),
            accepted_at: now_ms(),
            options: DispatchOptions::default(),
        })
        .await
        .unwrap()
        .offset
}

fn user_record(text: &str) -> StoredRecord {
    StoredRecord::new(Record::User(UserMessage::text(text)), now_ms())
}

const LEASE: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_takeovers_from_many_nodes_have_exactly_one_winner() {
    let url = fresh_database();
    let nodes = [node(&url).await, node(&url).await, node(&url).await];
    let mut owners = Vec::new();
    for node in &nodes {
        for _ in 0..3 {
            owners.push((Arc::clone(node), node.register_owner().await.unwrap()));
        }
    }
    let trials = 20;
    for trial in 0..trials {
        let key = key(&format!("race-{trial}"));
        admit(&nodes[0], &key, "hi").await;
        let contenders = owners.iter().map(|(node, registration)| {
            let node = Arc::clone(node);
            let key = key.clone();
            let owner_id = registration.owner_id().to_owned();
            tokio::spawn(async move { node.acquire(&key, &owner_id, LEASE).await.unwrap() })
        });
        let results = futures::future::join_all(contenders).await;
        let winners: Vec<_> = results
            .into_iter()
            .map(Result::unwrap)
            .filter_map(|result| match result {
                Acquire::Owned(fence) => Some(fence),
                Acquire::Held { .. } => None,
            })
            .collect();
        assert_eq!(winners.len(), 1, "trial {trial}: {winners:?}");
        let info = nodes[2].conversation(&key).await.unwrap().unwrap();
        assert_eq!(info.owner.as_deref(), Some(winners[0].owner_id.as_str()));
        assert_eq!(info.epoch, winners[0].epoch);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_nodes_conversation_is_taken_at_once_and_its_writes_are_refused() {
    let url = fresh_database();
    let (a, b) = (node(&url).await, node(&url).await);
    let key = key("crash");
    admit(&a, &key, "one").await;
    let a_owner = a.register_owner().await.unwrap();
    let b_owner = b.register_owner().await.unwrap();
    let Acquire::Owned(stale) = a.acquire(&key, a_owner.owner_id(), LEASE).await.unwrap() else {
        panic!("a should own it");
    };
    let claim = a
        .claim_next(&stale, &DurabilityConfig::default())
        .await
        .unwrap()
        .unwrap();
    // Alive and within its lease: B must leave it alone, and the scan skips it.
    assert!(matches!(
        b.acquire(&key, b_owner.owner_id(), LEASE).await.unwrap(),
        Acquire::Held { .. }
    ));
    assert!(
        b.orphaned_conversations(b_owner.owner_id())
            .await
            .unwrap()
            .is_empty()
    );
    assert!(b.owner_alive(a_owner.owner_id()).await.unwrap());

    // A dies: its liveness connection closes, and B may take over without waiting the lease.
    drop(a_owner);
    let mut alive = true;
    for _ in 0..100 {
        alive = b.owner_alive(&stale.owner_id).await.unwrap();
        if !alive {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!alive, "the dead owner's lock should be gone");
    let orphaned = b.orphaned_conversations(b_owner.owner_id()).await.unwrap();
    assert_eq!(orphaned.len(), 1);
    let Acquire::Owned(fence) = b.acquire(&key, b_owner.owner_id(), LEASE).await.unwrap() else {
        panic!("b should take the dead owner's conversation");
    };
    assert_eq!(fence.epoch, stale.epoch + 1);

    // The stale node (a process that lost its connection but not its memory) writes nothing.
    let session = SessionKey::new(key.instance_id(), "default");
    let head = b.conversation(&key).await.unwrap().unwrap().head;
    let refused = a
        .append_fenced(FencedAppend {
            fence: &stale,
            submission_id: Some(&claim.submission.submission_id),
            applies_input: true,
            resumes_waiting: false,
            session: &session,
            expected_version: 0,
            records: &[user_record("from the stale node")],
        })
        .await
        .unwrap_err();
    assert!(
        matches!(refused, FlueError::LeaseLost { .. }),
        "{refused:?}"
    );
    assert!(matches!(
        a.renew(&stale, LEASE).await.unwrap_err(),
        FlueError::LeaseLost { .. }
    ));
    assert!(matches!(
        a.claim_next(&stale, &DurabilityConfig::default())
            .await
            .unwrap_err(),
        FlueError::LeaseLost { .. }
    ));
    assert_eq!(b.conversation(&key).await.unwrap().unwrap().head, head);
    assert_eq!(b.load(&session, 0).await.unwrap().unwrap().version, 0);

    // The new owner resumes the interrupted submission (its second attempt) and writes.
    let resumed = b
        .claim_next(&fence, &DurabilityConfig::default())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        resumed.submission.submission_id,
        claim.submission.submission_id
    );
    assert_eq!(resumed.submission.attempts, 2);
    b.append_fenced(FencedAppend {
        fence: &fence,
        submission_id: Some(&resumed.submission.submission_id),
        applies_input: true,
        resumes_waiting: false,
        session: &session,
        expected_version: 0,
        records: &[user_record("from the new owner")],
    })
    .await
    .unwrap();
    drop(b_owner);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_owner_keeps_its_conversation_until_the_lease_runs_out() {
    let url = fresh_database();
    let (a, b) = (node(&url).await, node(&url).await);
    let key = key("hung");
    admit(&a, &key, "one").await;
    let a_owner = a.register_owner().await.unwrap();
    let b_owner = b.register_owner().await.unwrap();
    let lease = Duration::from_millis(600);
    let Acquire::Owned(stale) = a.acquire(&key, a_owner.owner_id(), lease).await.unwrap() else {
        panic!("a should own it");
    };
    assert!(matches!(
        b.acquire(&key, b_owner.owner_id(), lease).await.unwrap(),
        Acquire::Held { .. }
    ));
    // A stays connected (alive) but stops renewing; the database clock ends its lease.
    tokio::time::sleep(lease + Duration::from_millis(200)).await;
    assert!(b.owner_alive(a_owner.owner_id()).await.unwrap());
    assert_eq!(
        b.orphaned_conversations(b_owner.owner_id())
            .await
            .unwrap()
            .len(),
        1
    );
    let Acquire::Owned(fence) = b.acquire(&key, b_owner.owner_id(), lease).await.unwrap() else {
        panic!("b should take an expired lease");
    };
    assert!(fence.epoch > stale.epoch);
    assert!(matches!(
        a.settle(
            &stale,
            &flue_core::Settlement {
                submission_id: "anything".into(),
                outcome: flue_core::Outcome::Completed,
                text: None,
                data: None,
                error: None,
                attempts: 1,
                settled_at: now_ms(),
            }
        )
        .await
        .unwrap_err(),
        FlueError::LeaseLost { .. }
    ));
    // Graceful release gives it up at once, with no work left.
    drop(a_owner);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_moves_reach_watchers_on_other_nodes() {
    let url = fresh_database();
    let (a, b) = (node(&url).await, node(&url).await);
    let key = key("notify");
    let first = admit(&a, &key, "create it").await;
    let mut watch = b.watch_head(&key);
    for round in 0..5 {
        let offset = admit(&a, &key, &format!("message {round}")).await;
        assert!(offset > first);
        // Woken by NOTIFY (B never wrote to this conversation); bounded, not timed.
        tokio::time::timeout(Duration::from_secs(10), async {
            while *watch.borrow_and_update() < offset {
                watch.changed().await.unwrap();
            }
        })
        .await
        .unwrap_or_else(|_| panic!("round {round}: node B never heard of offset {offset}"));
    }
}

#[tokio::test]
async fn a_database_migrated_by_a_newer_flue_is_refused() {
    let url = fresh_database();
    let store = node(&url).await;
    assert_eq!(
        store.schema_version().await.unwrap(),
        PostgresStore::supported_schema_version()
    );
    drop(store);
    // Opening again is a no-op: every migration is recorded once.
    let again = node(&url).await;
    drop(again);
    assert_eq!(
        psql(&url, "SELECT COUNT(*) FROM flue_schema_migrations"),
        PostgresStore::supported_schema_version().to_string()
    );
    psql(
        &url,
        "INSERT INTO flue_schema_migrations (version, description) VALUES (999, 'from the future')",
    );
    let err = PostgresStore::connect(&url, PostgresOptions::default())
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(message.contains("schema version 999"), "{message}");
    assert!(message.contains("upgrade flue"), "{message}");
}

#[tokio::test]
async fn a_version_1_database_keeps_its_submissions_with_no_trace_parent() {
    let url = fresh_database();
    let store = node(&url).await;
    admit(&store, &key("old"), "from before").await;
    drop(store);
    // Back to the version-1 schema, as an older flue left it.
    psql(
        &url,
        "ALTER TABLE flue_submissions DROP COLUMN trace_parent; \
         DROP TABLE flue_memory_notes; DROP TABLE flue_memory_subjects; \
         ALTER TABLE flue_conversations DROP COLUMN last_activity, DROP COLUMN summary, \
             DROP COLUMN search_text; \
         ALTER TABLE flue_sessions DROP COLUMN managed; \
         DELETE FROM flue_schema_migrations WHERE version > 1",
    );
    let store = node(&url).await;
    assert_eq!(
        store.schema_version().await.unwrap(),
        PostgresStore::supported_schema_version()
    );
    let unsettled = store.unsettled(&key("old")).await.unwrap();
    let stored: Vec<(DeliveredMessage, Option<String>)> = unsettled
        .into_iter()
        .map(|info| (info.message, info.trace_parent))
        .collect();
    assert_eq!(stored, vec![(DeliveredMessage::user("from before"), None)]);
    // Migration 4 summarized it from its rows: listed, with its message, and found by it.
    let query = flue_core::store::listing::ListingQuery::new(10).with_text(Some("BEFORE"));
    let listed = store.list_conversations(&query).await.unwrap();
    let seen: Vec<(&str, u64, Option<&str>)> = listed
        .iter()
        .map(|row| {
            (
                row.key.id.as_str(),
                row.pending,
                row.summary.first_message.as_deref(),
            )
        })
        .collect();
    assert_eq!(seen, vec![("old", 1, Some("from before"))]);
    assert!(listed[0].last_activity > 0);
}

#[tokio::test]
async fn an_unreachable_server_is_a_store_error_without_the_password() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = PostgresStore::connect(
        &format!("postgres://flue:hunter2-secret@127.0.0.1:{port}/flue"),
        PostgresOptions {
            acquire_timeout: Duration::from_secs(2),
            ..PostgresOptions::default()
        },
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), "store_error");
    let message = format!("{err} {err:?}");
    assert!(message.contains("flue@127.0.0.1"), "{message}");
    assert!(!message.contains("hunter2"), "{message}");
}

/// An admitted message is stored once, in its submission: the `admitted` batch refers to it,
/// and a stream read puts the message back. A batch as stores before this one wrote it (the
/// message inside) still reads the same.
#[tokio::test]
async fn an_admitted_batch_refers_to_its_submission_and_an_older_one_still_reads() {
    use flue_core::BatchBody;

    let url = fresh_database();
    let store = node(&url).await;
    let text = "a message stored once ".repeat(1000);
    let offset = admit(&store, &key("once"), &text).await;
    let page = store
        .read_stream(&key("once"), Offset::START, 10)
        .await
        .unwrap();
    let admitted = page
        .batches
        .iter()
        .find(|batch| batch.offset == offset)
        .unwrap()
        .clone();
    let BatchBody::Admitted {
        message,
        submission_id,
        accepted_at,
    } = &admitted.body
    else {
        panic!("not an admitted batch: {admitted:?}");
    };
    assert_eq!(message, &DeliveredMessage::user(text.clone()));
    let copies = psql(
        &url,
        &format!(
            "SELECT 'stream' FROM flue_stream WHERE strpos(body, '{text}') > 0 UNION ALL \
             SELECT 'submissions' FROM flue_submissions WHERE strpos(message, '{text}') > 0"
        ),
    );
    assert_eq!(copies, "submissions", "where the message is stored");

    // The admitted batch as an older flue wrote it: the whole body, message included.
    let old = serde_json::to_string(&BatchBody::Admitted {
        submission_id: submission_id.clone(),
        message: message.clone(),
        accepted_at: *accepted_at,
    })
    .unwrap();
    psql(
        &url,
        &format!(
            "UPDATE flue_stream SET body = '{}' WHERE seq = {}",
            old.replace('\'', "''"),
            offset.0
        ),
    );
    drop(store);
    let store = node(&url).await;
    assert_eq!(
        store
            .read_stream(&key("once"), Offset::START, 10)
            .await
            .unwrap(),
        page
    );
}
