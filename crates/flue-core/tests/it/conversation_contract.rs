//! The `ConversationStore` contract, run against every store (flue-store's tests include this
//! file and run it on SQLite and Postgres).
//!
//! `conversation_contract!` instantiates each contract test once per backend; a contract test is
//! a plain `async fn` taking the store.

use std::sync::Arc;
use std::time::Duration;

use flue_core::{
    BatchBody, ConversationKey, DeliveredMessage, DispatchOptions, DurabilityConfig, FlueError,
    Offset, Outcome, Record, Settlement, StoredRecord, UserMessage,
    store::{Acquire, Admission, DynConversationStore, Fence, FencedAppend, SessionKey},
    submission::SendCondition,
    submission::SubmissionState,
    submission::WhenBusy,
    util::{new_ulid, now_ms},
};
use pretty_assertions::assert_eq;
use tempfile::TempDir;

macro_rules! conversation_contract {
    ($backend:ident, $open:expr) => {
        mod $backend {
            $crate::conversation_contract::conversation_contract!(@tests $open;
                admission_numbers_batches_and_reads_are_exclusive,
                idempotent_admission_replays_and_conflicts,
                failed_send_conditions_store_nothing,
                busy_policy_refuses_without_storing,
                claims_are_fifo_and_settlement_is_written_once,
                a_live_owner_holds_and_a_replaced_owner_writes_nothing,
                release_is_refused_while_work_remains,
                abort_settles_queued_work_and_marks_the_running_one,
                plain_appends_to_a_managed_conversation_are_refused,
                the_input_append_marks_the_submission,
                a_waiting_submission_holds_the_line_until_a_decision_resumes_it,
                a_lone_waiting_submission_leaves_the_conversation_free,
                watchers_see_the_head_move,
                reads_of_unknown_conversations_and_past_the_head_fail,
                concurrent_writes_of_many_conversations_fail_alone,
                all_conversations_lists_every_agent_oldest_first,
                the_callers_trace_parent_is_stored_with_the_submission,
                deleting_is_refused_while_work_is_unsettled_then_removes_every_session,
                a_dispatchs_budget_is_stored_with_its_submission,
                conversation_state_is_seeded_changed_by_tools_and_read_back,
                listings_page_most_recent_first_with_the_summaries_writes_keep,
            );
        }
    };
    (@tests $open:expr; $($test:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                let backend: $crate::conversation_contract::Backend = ($open)();
                $crate::conversation_contract::$test(std::sync::Arc::clone(&backend.store)).await;
            }
        )*
    };
}

pub(crate) use conversation_contract;

/// A store under test, with the directory that holds its files.
pub(crate) struct Backend {
    pub(crate) store: Arc<dyn DynConversationStore>,
    pub(crate) _dir: Option<TempDir>,
}

const LEASE: Duration = Duration::from_secs(30);

fn key() -> ConversationKey {
    ConversationKey::new("agent", "conv-1")
}

fn admission(text: &str, options: DispatchOptions) -> Admission {
    Admission {
        key: key(),
        submission_id: new_ulid(),
        new_uid: new_ulid(),
        message: DeliveredMessage::user(text),
        accepted_at: now_ms(),
        options,
    }
}

async fn owned(store: &dyn DynConversationStore, owner_id: &str) -> Fence {
    match store.acquire(&key(), owner_id, LEASE).await.unwrap() {
        Acquire::Owned(fence) => fence,
        held => panic!("expected ownership, got {held:?}"),
    }
}

fn settlement(submission_id: &str, outcome: Outcome) -> Settlement {
    Settlement {
        submission_id: submission_id.to_owned(),
        outcome,
        text: Some("ok".into()),
        data: None,
        error: None,
        attempts: 1,
        settled_at: now_ms(),
    }
}

fn user_record(text: &str) -> StoredRecord {
    StoredRecord::new(Record::User(UserMessage::text(text)), now_ms())
}

async fn head(store: &dyn DynConversationStore) -> Offset {
    store.conversation(&key()).await.unwrap().unwrap().head
}

pub(crate) async fn admission_numbers_batches_and_reads_are_exclusive(
    store: Arc<dyn DynConversationStore>,
) {
    let first = store
        .admit(&admission("one", DispatchOptions::default()))
        .await
        .unwrap();
    let second = store
        .admit(&admission("two", DispatchOptions::default()))
        .await
        .unwrap();
    assert_eq!((first.offset, second.offset), (Offset(2), Offset(3)));
    assert_eq!(first.uid, second.uid);
    let page = store.read_stream(&key(), Offset::START, 10).await.unwrap();
    assert!(page.up_to_date);
    assert_eq!(page.next_offset, Offset(3));
    let offsets: Vec<u64> = page.batches.iter().map(|batch| batch.offset.0).collect();
    assert_eq!(offsets, vec![1, 2, 3]);
    assert!(matches!(&page.batches[0].body, BatchBody::Created { uid } if *uid == first.uid));
    assert!(matches!(
        &page.batches[1].body,
        BatchBody::Admitted { submission_id, .. } if *submission_id == first.submission_id
    ));
    let tail = store.read_stream(&key(), Offset(1), 1).await.unwrap();
    assert_eq!(tail.batches.len(), 1);
    assert_eq!(tail.batches[0].offset, Offset(2));
    assert!(!tail.up_to_date);
    assert_eq!(tail.next_offset, Offset(2));
    let info = store.conversation(&key()).await.unwrap().unwrap();
    assert_eq!(
        (info.head, info.unsettled, info.owner),
        (Offset(3), 2, None)
    );
    let found = store.conversations_with_id("conv-1").await.unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(store.pending_conversations().await.unwrap().len(), 1);
    let unsettled = store.unsettled(&key()).await.unwrap();
    let positions: Vec<u64> = unsettled.iter().map(|info| info.position).collect();
    assert_eq!(positions, vec![1, 2]);
}

pub(crate) async fn idempotent_admission_replays_and_conflicts(
    store: Arc<dyn DynConversationStore>,
) {
    let options = DispatchOptions::default().with_idempotency_key("key");
    let first = store
        .admit(&admission("one", options.clone()))
        .await
        .unwrap();
    let replay = store
        .admit(&admission("one", options.clone()))
        .await
        .unwrap();
    assert!(replay.deduplicated);
    assert_eq!(replay.submission_id, first.submission_id);
    assert_eq!(replay.offset, first.offset);
    let err = store.admit(&admission("two", options)).await.unwrap_err();
    assert_eq!(err.kind(), "submission_conflict");
    assert_eq!(head(store.as_ref()).await, first.offset);
}

pub(crate) async fn failed_send_conditions_store_nothing(store: Arc<dyn DynConversationStore>) {
    let uid_condition =
        DispatchOptions::default().with_condition(SendCondition::Uid("missing".into()));
    let err = store
        .admit(&admission("x", uid_condition.clone()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "agent_instance_not_found");
    assert_eq!(store.conversation(&key()).await.unwrap(), None);
    let create = DispatchOptions::default().with_condition(SendCondition::Create);
    let created = store.admit(&admission("x", create.clone())).await.unwrap();
    let err = store.admit(&admission("y", create)).await.unwrap_err();
    assert!(
        matches!(&err, FlueError::AgentInstanceExists { uid, .. } if *uid == created.uid),
        "{err:?}"
    );
    let err = store
        .admit(&admission("y", uid_condition))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "agent_instance_not_found");
    assert_eq!(head(store.as_ref()).await, created.offset);
    let right = DispatchOptions::default().with_condition(SendCondition::Uid(created.uid.clone()));
    store.admit(&admission("y", right)).await.unwrap();
}

pub(crate) async fn busy_policy_refuses_without_storing(store: Arc<dyn DynConversationStore>) {
    let fail = DispatchOptions::default().with_when_busy(WhenBusy::Fail);
    // An idle (new) conversation accepts.
    let first = store.admit(&admission("one", fail.clone())).await.unwrap();
    let owner = store.register_owner().await.unwrap();
    let fence = owned(store.as_ref(), owner.owner_id()).await;
    let err = store
        .admit(&admission("two", fail.clone()))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, FlueError::ConversationBusy { owner: Some(owner_id), unsettled: 1, .. }
            if owner_id == owner.owner_id()),
        "{err:?}"
    );
    assert_eq!(err.kind(), "session_busy");
    assert_eq!(head(store.as_ref()).await, first.offset);
    let claim = store
        .claim_next(&fence, &DurabilityConfig::default())
        .await
        .unwrap()
        .unwrap();
    store
        .settle(
            &fence,
            &settlement(&claim.submission.submission_id, Outcome::Completed),
        )
        .await
        .unwrap();
    store.admit(&admission("two", fail)).await.unwrap();
}

pub(crate) async fn claims_are_fifo_and_settlement_is_written_once(
    store: Arc<dyn DynConversationStore>,
) {
    let first = store
        .admit(&admission("one", DispatchOptions::default()))
        .await
        .unwrap();
    let second = store
        .admit(&admission("two", DispatchOptions::default()))
        .await
        .unwrap();
    let owner = store.register_owner().await.unwrap();
    let fence = owned(store.as_ref(), owner.owner_id()).await;
    let durability = DurabilityConfig {
        max_attempts: 3,
        timeout_ms: 1000,
    };
    let claim = store
        .claim_next(&fence, &durability)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claim.submission.submission_id, first.submission_id);
    assert_eq!(claim.submission.state, SubmissionState::Running);
    assert_eq!(claim.submission.attempts, 1);
    assert_eq!(claim.durability, durability);
    // Claiming again without settling resumes the same one (a new attempt).
    let again = store
        .claim_next(&fence, &DurabilityConfig::default())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.submission.submission_id, first.submission_id);
    assert_eq!(again.submission.attempts, 2);
    assert_eq!(
        again.durability, durability,
        "limits stored at the first attempt"
    );
    let done = settlement(&first.submission_id, Outcome::Completed);
    assert!(store.settle(&fence, &done).await.unwrap());
    let head_after = head(store.as_ref()).await;
    let late = settlement(&first.submission_id, Outcome::Failed);
    assert!(
        !store.settle(&fence, &late).await.unwrap(),
        "first terminal state wins"
    );
    assert_eq!(head(store.as_ref()).await, head_after);
    let info = store
        .submission(&first.submission_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(info.state, SubmissionState::Settled);
    assert_eq!(info.settlement, Some(done));
    let next = store
        .claim_next(&fence, &durability)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(next.submission.submission_id, second.submission_id);
    store
        .settle(
            &fence,
            &settlement(&second.submission_id, Outcome::Completed),
        )
        .await
        .unwrap();
    assert_eq!(store.claim_next(&fence, &durability).await.unwrap(), None);
}

pub(crate) async fn a_live_owner_holds_and_a_replaced_owner_writes_nothing(
    store: Arc<dyn DynConversationStore>,
) {
    let admitted = store
        .admit(&admission("one", DispatchOptions::default()))
        .await
        .unwrap();
    let first = store.register_owner().await.unwrap();
    let second = store.register_owner().await.unwrap();
    assert!(store.owner_alive(first.owner_id()).await.unwrap());
    let old_fence = owned(store.as_ref(), first.owner_id()).await;
    let claim = store
        .claim_next(&old_fence, &DurabilityConfig::default())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store
            .acquire(&key(), second.owner_id(), LEASE)
            .await
            .unwrap(),
        Acquire::Held {
            owner_id: first.owner_id().to_owned()
        }
    );
    // The first owner dies: the second takes over at once, without waiting for the lease.
    let first_id = first.owner_id().to_owned();
    drop(first);
    assert!(!store.owner_alive(&first_id).await.unwrap());
    let new_fence = owned(store.as_ref(), second.owner_id()).await;
    assert!(new_fence.epoch > old_fence.epoch);
    let before = head(store.as_ref()).await;
    let session = SessionKey::new(key().instance_id(), "default");
    let records = [user_record("late")];
    let results = [
        store
            .append_fenced(FencedAppend {
                fence: &old_fence,
                submission_id: Some(&admitted.submission_id),
                applies_input: true,
                resumes_waiting: false,
                session: &session,
                expected_version: 0,
                records: &records,
            })
            .await
            .map(|_| ()),
        store
            .settle(
                &old_fence,
                &settlement(&claim.submission.submission_id, Outcome::Completed),
            )
            .await
            .map(|_| ()),
        store
            .claim_next(&old_fence, &DurabilityConfig::default())
            .await
            .map(|_| ()),
        store.renew(&old_fence, LEASE).await,
        store.release(&old_fence).await.map(|_| ()),
    ];
    for result in results {
        assert_eq!(result.unwrap_err().kind(), "lease_lost");
    }
    assert_eq!(head(store.as_ref()).await, before);
    assert_eq!(store.load(&session, 0).await.unwrap().unwrap().version, 0);
    // The new owner resumes the interrupted submission as its next attempt.
    let resumed = store
        .claim_next(&new_fence, &DurabilityConfig::default())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(resumed.submission.submission_id, admitted.submission_id);
    assert_eq!(resumed.submission.attempts, 2);
}

pub(crate) async fn release_is_refused_while_work_remains(store: Arc<dyn DynConversationStore>) {
    let admitted = store
        .admit(&admission("one", DispatchOptions::default()))
        .await
        .unwrap();
    let owner = store.register_owner().await.unwrap();
    let fence = owned(store.as_ref(), owner.owner_id()).await;
    assert!(!store.release(&fence).await.unwrap());
    store.renew(&fence, LEASE).await.unwrap();
    store
        .claim_next(&fence, &DurabilityConfig::default())
        .await
        .unwrap();
    store
        .settle(
            &fence,
            &settlement(&admitted.submission_id, Outcome::Completed),
        )
        .await
        .unwrap();
    assert!(store.release(&fence).await.unwrap());
    assert_eq!(
        store.conversation(&key()).await.unwrap().unwrap().owner,
        None
    );
    // Anyone may take it now; the old fence is dead.
    let other = store.register_owner().await.unwrap();
    owned(store.as_ref(), other.owner_id()).await;
    assert_eq!(
        store.renew(&fence, LEASE).await.unwrap_err().kind(),
        "lease_lost"
    );
}

pub(crate) async fn abort_settles_queued_work_and_marks_the_running_one(
    store: Arc<dyn DynConversationStore>,
) {
    assert_eq!(
        store.request_abort(&key()).await.unwrap(),
        Default::default()
    );
    let running = store
        .admit(&admission("one", DispatchOptions::default()))
        .await
        .unwrap();
    let queued = store
        .admit(&admission("two", DispatchOptions::default()))
        .await
        .unwrap();
    let owner = store.register_owner().await.unwrap();
    let fence = owned(store.as_ref(), owner.owner_id()).await;
    store
        .claim_next(&fence, &DurabilityConfig::default())
        .await
        .unwrap();
    let report = store.request_abort(&key()).await.unwrap();
    assert_eq!(
        report.requested,
        vec![running.submission_id.clone(), queued.submission_id.clone()]
    );
    assert_eq!(report.settled, vec![queued.submission_id.clone()]);
    let queued_info = store
        .submission(&queued.submission_id)
        .await
        .unwrap()
        .unwrap();
    let queued_settlement = queued_info.settlement.unwrap();
    assert_eq!(queued_settlement.outcome, Outcome::Aborted);
    assert_eq!(
        queued_settlement.error.map(|error| error.kind),
        Some("submission_aborted".to_owned())
    );
    let running_info = store
        .submission(&running.submission_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(running_info.state, SubmissionState::Running);
    assert!(running_info.abort_requested);
    // The next claim (the owner's, or recovery's) sees the request.
    let claim = store
        .claim_next(&fence, &DurabilityConfig::default())
        .await
        .unwrap()
        .unwrap();
    assert!(claim.submission.abort_requested);
}

pub(crate) async fn plain_appends_to_a_managed_conversation_are_refused(
    store: Arc<dyn DynConversationStore>,
) {
    store
        .admit(&admission("one", DispatchOptions::default()))
        .await
        .unwrap();
    let session = SessionKey::new(key().instance_id(), "default");
    let err = store
        .append(&session, 0, &[user_record("sneaky")])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "lease_lost");
    assert_eq!(store.load(&session, 0).await.unwrap().unwrap().version, 0);
    // Sessions of other instances are unaffected.
    let other = SessionKey::new("plain", "default");
    store.create(&other).await.unwrap();
    store
        .append(&other, 0, &[user_record("fine")])
        .await
        .unwrap();
}

pub(crate) async fn the_input_append_marks_the_submission(store: Arc<dyn DynConversationStore>) {
    let admitted = store
        .admit(&admission("one", DispatchOptions::default()))
        .await
        .unwrap();
    let owner = store.register_owner().await.unwrap();
    let fence = owned(store.as_ref(), owner.owner_id()).await;
    store
        .claim_next(&fence, &DurabilityConfig::default())
        .await
        .unwrap();
    let session = SessionKey::new(key().instance_id(), "default");
    let records = [user_record("one")];
    let version = store
        .append_fenced(FencedAppend {
            fence: &fence,
            submission_id: Some(&admitted.submission_id),
            applies_input: true,
            resumes_waiting: false,
            session: &session,
            expected_version: 0,
            records: &records,
        })
        .await
        .unwrap();
    assert_eq!(version, 1);
    let info = store
        .submission(&admitted.submission_id)
        .await
        .unwrap()
        .unwrap();
    assert!(info.input_applied);
    let page = store.read_stream(&key(), Offset::START, 100).await.unwrap();
    let last = page.batches.last().unwrap();
    assert_eq!(
        last.submission_id.as_deref(),
        Some(admitted.submission_id.as_str())
    );
    assert!(matches!(
        &last.body,
        BatchBody::Records { session, first_index: 0, records } if session == "default" && records.len() == 1
    ));
    // A stale session version writes nothing, fence or not.
    let err = store
        .append_fenced(FencedAppend {
            fence: &fence,
            submission_id: None,
            applies_input: false,
            resumes_waiting: false,
            session: &session,
            expected_version: 0,
            records: &records,
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "version_conflict");
    assert_eq!(head(store.as_ref()).await, last.offset);
}

pub(crate) async fn a_waiting_submission_holds_the_line_until_a_decision_resumes_it(
    store: Arc<dyn DynConversationStore>,
) {
    let first = store
        .admit(&admission("one", DispatchOptions::default()))
        .await
        .unwrap();
    let owner = store.register_owner().await.unwrap();
    let fence = owned(store.as_ref(), owner.owner_id()).await;
    let claim = store
        .claim_next(&fence, &DurabilityConfig::default())
        .await
        .unwrap()
        .unwrap();
    let started_at = claim.submission.first_started_at.unwrap();
    let actions = ["act_1".to_owned()];
    assert!(
        store
            .wait(&fence, &first.submission_id, &actions)
            .await
            .unwrap()
    );
    assert!(
        !store
            .wait(&fence, &first.submission_id, &actions)
            .await
            .unwrap(),
        "only a running submission starts waiting"
    );
    let page = store.read_stream(&key(), Offset::START, 100).await.unwrap();
    assert!(matches!(
        &page.batches.last().unwrap().body,
        BatchBody::Waiting { submission_id, actions } if submission_id == &first.submission_id && actions == &["act_1"]
    ));
    // Waiting needs no work: not pending, not counted, nothing behind it runs, release works.
    store
        .admit(&admission("two", DispatchOptions::default()))
        .await
        .unwrap();
    assert_eq!(store.pending_conversations().await.unwrap().len(), 1);
    let info = store
        .submission(&first.submission_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(info.state, SubmissionState::Waiting);
    assert!(
        store
            .claim_next(&fence, &DurabilityConfig::default())
            .await
            .unwrap()
            .is_none(),
        "the submission behind a waiting one waits too"
    );
    assert_eq!(
        store.conversation(&key()).await.unwrap().unwrap().unsettled,
        1
    );
    tokio::time::sleep(Duration::from_millis(30)).await;

    // A decision resumes it: queued again, the attempt given back, the waiting time off the clock.
    let session = SessionKey::new(key().instance_id(), "default");
    let records = [user_record("decision")];
    store
        .append_fenced(FencedAppend {
            fence: &fence,
            submission_id: Some(&first.submission_id),
            applies_input: false,
            resumes_waiting: true,
            session: &session,
            expected_version: 0,
            records: &records,
        })
        .await
        .unwrap();
    let resumed = store
        .submission(&first.submission_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (resumed.state, resumed.attempts),
        (SubmissionState::Queued, 0)
    );
    assert!(resumed.first_started_at.unwrap() >= started_at + 30);
    let claim = store
        .claim_next(&fence, &DurabilityConfig::default())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            claim.submission.submission_id.as_str(),
            claim.submission.attempts
        ),
        (first.submission_id.as_str(), 1)
    );
}

pub(crate) async fn a_lone_waiting_submission_leaves_the_conversation_free(
    store: Arc<dyn DynConversationStore>,
) {
    let admitted = store
        .admit(&admission("one", DispatchOptions::default()))
        .await
        .unwrap();
    let owner = store.register_owner().await.unwrap();
    let fence = owned(store.as_ref(), owner.owner_id()).await;
    store
        .claim_next(&fence, &DurabilityConfig::default())
        .await
        .unwrap();
    assert!(
        store
            .wait(&fence, &admitted.submission_id, &[])
            .await
            .unwrap()
    );
    assert!(store.pending_conversations().await.unwrap().is_empty());
    assert_eq!(
        store.conversation(&key()).await.unwrap().unwrap().unsettled,
        0
    );
    assert!(store.release(&fence).await.unwrap());
    // An abort settles it at once, like a queued one.
    let report = store.request_abort(&key()).await.unwrap();
    assert_eq!(
        report.settled,
        std::slice::from_ref(&admitted.submission_id)
    );
}

pub(crate) async fn watchers_see_the_head_move(store: Arc<dyn DynConversationStore>) {
    let mut watch = store.watch_head(&key());
    let admitted = store
        .admit(&admission("one", DispatchOptions::default()))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(60), watch.changed())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(*watch.borrow(), admitted.offset);
}

pub(crate) async fn reads_of_unknown_conversations_and_past_the_head_fail(
    store: Arc<dyn DynConversationStore>,
) {
    let err = store
        .read_stream(&key(), Offset::START, 10)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "agent_instance_not_found");
    assert_eq!(store.submission("nope").await.unwrap(), None);
    let admitted = store
        .admit(&admission("one", DispatchOptions::default()))
        .await
        .unwrap();
    let err = store
        .read_stream(&key(), Offset(admitted.offset.0 + 1), 10)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "offset_out_of_range");
    let page = store
        .read_stream(&key(), admitted.offset, 10)
        .await
        .unwrap();
    assert!(page.batches.is_empty() && page.up_to_date);
    assert_eq!(page.next_offset, admitted.offset);
}

/// Writes of many conversations at once (which a store may commit together): a failing
/// fencing or version check rejects that write alone and leaves the others whole.
pub(crate) async fn concurrent_writes_of_many_conversations_fail_alone(
    store: Arc<dyn DynConversationStore>,
) {
    const CONVERSATIONS: usize = 40;
    let owner = store.register_owner().await.unwrap();
    let keys: Vec<ConversationKey> = (0..CONVERSATIONS)
        .map(|n| ConversationKey::new("agent", format!("many-{n}")))
        .collect();
    let mut admissions = Vec::new();
    for key in &keys {
        let store = Arc::clone(&store);
        let admission = Admission {
            key: key.clone(),
            ..admission("hello", DispatchOptions::default())
        };
        admissions.push(tokio::spawn(async move { store.admit(&admission).await }));
    }
    for admitted in admissions {
        admitted.await.unwrap().unwrap();
    }
    let mut fences = Vec::new();
    for key in &keys {
        match store.acquire(key, owner.owner_id(), LEASE).await.unwrap() {
            Acquire::Owned(fence) => fences.push(fence),
            held => panic!("expected ownership, got {held:?}"),
        }
    }
    let mut writes = Vec::new();
    for fence in &fences {
        // Two racing appends at the same session version, and one under a wrong epoch.
        for (text, epoch) in [
            ("a", fence.epoch),
            ("b", fence.epoch),
            ("stale", fence.epoch + 1),
        ] {
            let store = Arc::clone(&store);
            let fence = Fence {
                epoch,
                ..fence.clone()
            };
            writes.push(tokio::spawn(async move {
                let session = SessionKey::new(fence.key.instance_id(), "default");
                let records = [user_record(text)];
                let result = store
                    .append_fenced(FencedAppend {
                        fence: &fence,
                        submission_id: None,
                        applies_input: false,
                        resumes_waiting: false,
                        session: &session,
                        expected_version: 0,
                        records: &records,
                    })
                    .await;
                (fence.key.clone(), text, result)
            }));
        }
    }
    let mut won = std::collections::HashMap::new();
    for write in writes {
        let (key, text, result) = write.await.unwrap();
        match (text, result) {
            ("stale", result) => assert_eq!(result.unwrap_err().kind(), "lease_lost"),
            (_, Ok(version)) => {
                assert_eq!(version, 1);
                let first = won.insert(key.instance_id(), text);
                assert!(first.is_none(), "two appends at version 0 won");
            }
            (_, Err(err)) => assert_eq!(err.kind(), "version_conflict"),
        }
    }
    assert_eq!(won.len(), CONVERSATIONS);
    for key in &keys {
        let page = store.read_stream(key, Offset::START, 100).await.unwrap();
        let appended: Vec<_> = page
            .batches
            .iter()
            .filter_map(|batch| match &batch.body {
                BatchBody::Records { records, .. } => Some(records.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(appended.len(), 1, "{key}: one append stored");
        assert_eq!(appended[0].len(), 1);
        assert_eq!(
            appended[0][0].record,
            user_record(won[&key.instance_id()]).record
        );
        assert!(page.up_to_date);
    }
}

pub(crate) async fn all_conversations_lists_every_agent_oldest_first(
    store: Arc<dyn DynConversationStore>,
) {
    assert!(store.all_conversations().await.unwrap().is_empty());
    let keys = [
        ConversationKey::new("writer", "z-first"),
        ConversationKey::new("agent", "second"),
        ConversationKey::new("agent", "third"),
    ];
    for (idx, key) in keys.iter().enumerate() {
        let accepted_at = 1_700_000_000_000 + u64::try_from(idx).unwrap();
        for _ in 0..=idx {
            store
                .admit(&Admission {
                    key: key.clone(),
                    accepted_at,
                    ..admission("hi", DispatchOptions::default())
                })
                .await
                .unwrap();
        }
        // Distinct creation times on every backend (they come from the clock).
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    let all = store.all_conversations().await.unwrap();
    let listed: Vec<(ConversationKey, u64)> = all
        .iter()
        .map(|info| (info.key.clone(), info.unsettled))
        .collect();
    assert_eq!(
        listed,
        [
            (keys[0].clone(), 1),
            (keys[1].clone(), 2),
            (keys[2].clone(), 3)
        ]
    );
    for info in &all {
        assert_eq!(
            Some(info),
            store.conversation(&info.key).await.unwrap().as_ref(),
            "the same view as conversation()"
        );
    }
}

pub(crate) async fn the_callers_trace_parent_is_stored_with_the_submission(
    store: Arc<dyn DynConversationStore>,
) {
    let trace_parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let traced = store
        .admit(&admission(
            "one",
            DispatchOptions::default().with_trace_parent(trace_parent),
        ))
        .await
        .unwrap();
    let untraced = store
        .admit(&admission("two", DispatchOptions::default()))
        .await
        .unwrap();
    let stored = |info: Option<flue_core::submission::SubmissionInfo>| info.unwrap().trace_parent;
    assert_eq!(
        stored(store.submission(&traced.submission_id).await.unwrap()).as_deref(),
        Some(trace_parent)
    );
    assert_eq!(
        stored(store.submission(&untraced.submission_id).await.unwrap()),
        None
    );
    let unsettled: Vec<Option<String>> = store
        .unsettled(&key())
        .await
        .unwrap()
        .into_iter()
        .map(|info| info.trace_parent)
        .collect();
    assert_eq!(unsettled, vec![Some(trace_parent.to_owned()), None]);
    // What an attempt, in whichever process, starts from.
    let owner = store.register_owner().await.unwrap();
    let fence = owned(store.as_ref(), owner.owner_id()).await;
    let claim = store
        .claim_next(&fence, &DurabilityConfig::default())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claim.submission.submission_id, traced.submission_id);
    assert_eq!(claim.submission.trace_parent.as_deref(), Some(trace_parent));
    assert!(
        store
            .settle(
                &fence,
                &settlement(&traced.submission_id, Outcome::Completed)
            )
            .await
            .unwrap()
    );
    let next = store
        .claim_next(&fence, &DurabilityConfig::default())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(next.submission.submission_id, untraced.submission_id);
    assert_eq!(next.submission.trace_parent, None);
}

/// Deleting a conversation (and a plain delete of one of its sessions, the library's path) is
/// refused while a submission is queued or running and deletes nothing; once everything is
/// settled it removes the stream, the submissions and every session of the instance (its task
/// sessions too), and leaves other conversations alone. The key can then start afresh.
pub(crate) async fn deleting_is_refused_while_work_is_unsettled_then_removes_every_session(
    store: Arc<dyn DynConversationStore>,
) {
    let first = store
        .admit(&admission("one", DispatchOptions::default()))
        .await
        .unwrap();
    let uid = store.conversation(&key()).await.unwrap().unwrap().uid;
    let other = ConversationKey::new("agent", "conv-2");
    store
        .admit(&Admission {
            key: other.clone(),
            ..admission("elsewhere", DispatchOptions::default())
        })
        .await
        .unwrap();
    let root = SessionKey::new(key().instance_id(), "default");
    // Queued: refused, nothing deleted.
    let err = store.delete_conversation(&key()).await.unwrap_err();
    assert_eq!(err.kind(), "session_busy");
    assert!(
        matches!(&err, FlueError::ConversationBusy { unsettled: 1, .. }),
        "{err:?}"
    );
    assert_eq!(
        store.delete(&root).await.map_err(|err| err.kind()),
        Err("session_busy")
    );
    assert!(store.load(&root, 0).await.unwrap().is_some());
    // Running, with a task session written beside the root: still refused.
    let owner = store.register_owner().await.unwrap();
    let fence = owned(store.as_ref(), owner.owner_id()).await;
    store
        .claim_next(&fence, &DurabilityConfig::default())
        .await
        .unwrap()
        .unwrap();
    let task = SessionKey::new(key().instance_id(), "task:default:1");
    store.create(&task).await.unwrap();
    store
        .append_fenced(FencedAppend {
            fence: &fence,
            submission_id: Some(&first.submission_id),
            applies_input: false,
            resumes_waiting: false,
            session: &task,
            expected_version: 0,
            records: &[user_record("sub")],
        })
        .await
        .unwrap();
    assert_eq!(
        store
            .delete_conversation(&key())
            .await
            .map_err(|err| err.kind()),
        Err("session_busy")
    );
    assert_eq!(
        store.delete(&task).await.map_err(|err| err.kind()),
        Err("session_busy")
    );
    // Settled: deleted, with every session of the instance.
    let done = settlement(&first.submission_id, Outcome::Completed);
    assert!(store.settle(&fence, &done).await.unwrap());
    assert!(store.delete_conversation(&key()).await.unwrap());
    assert!(store.conversation(&key()).await.unwrap().is_none());
    assert!(
        store
            .submission(&first.submission_id)
            .await
            .unwrap()
            .is_none()
    );
    assert!(store.load(&root, 0).await.unwrap().is_none());
    assert!(store.load(&task, 0).await.unwrap().is_none());
    assert!(store.list(&key().instance_id()).await.unwrap().is_empty());
    // Deleting again finds nothing, and is no error.
    assert!(!store.delete_conversation(&key()).await.unwrap());
    // The other conversation is untouched.
    assert!(store.conversation(&other).await.unwrap().is_some());
    // The key starts a new conversation, with a new uid.
    store
        .admit(&admission("again", DispatchOptions::default()))
        .await
        .unwrap();
    let fresh = store.conversation(&key()).await.unwrap().unwrap();
    assert_ne!(fresh.uid, uid);
    assert_eq!(fresh.head, Offset(2));
}

/// A dispatch's budgets are stored with the submission (inside its stored message, no column of
/// their own) and read back by every store; the message itself reads back unchanged.
pub(crate) async fn a_dispatchs_budget_is_stored_with_its_submission(
    store: Arc<dyn DynConversationStore>,
) {
    let budget = flue_core::Budget {
        max_cost_usd: Some(0.25),
        max_turns: Some(7),
        conversation: flue_core::BudgetLimits {
            max_cost_usd: Some(3.5),
            max_turns: None,
        },
    };
    let options = DispatchOptions::default()
        .with_idempotency_key("k")
        .with_budget(budget);
    let first = store
        .admit(&admission("one", options.clone()))
        .await
        .unwrap();
    let plain = store
        .admit(&admission("two", DispatchOptions::default()))
        .await
        .unwrap();
    let info = store
        .submission(&first.submission_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(info.budget, Some(budget));
    assert_eq!(info.message, DeliveredMessage::user("one"));
    let other = store
        .submission(&plain.submission_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(other.budget, None);
    // The same key, message and budget is the same delivery.
    let again = store.admit(&admission("one", options)).await.unwrap();
    assert!(again.deduplicated);
    assert_eq!(again.submission_id, first.submission_id);
    // What a claim hands the driver carries it too.
    let owner = store.register_owner().await.unwrap();
    let fence = owned(store.as_ref(), owner.owner_id()).await;
    let claim = store
        .claim_next(&fence, &DurabilityConfig::default())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claim.submission.budget, Some(budget));
}

/// The script of the state tests' agent: `write` -> `state_write`, `count` -> two `count`
/// calls at once, `big` -> a write over the limit, tool results -> `ok`.
const STATE_SCRIPT: &str = r#"{"rules": [
  {"when": {"tool_result": "state_write"}, "reply": {"text": "ok"}},
  {"when": {"tool_result": "count"}, "reply": {"text": "ok"}},
  {"when": {"user_matches": "^write"}, "reply": {"tool_calls": [
    {"name": "state_write", "input": {"patch": {"seen": true, "gone": null}}}]}},
  {"when": {"user_matches": "^count"}, "reply": {"tool_calls": [
    {"name": "count", "input": {}}, {"name": "count", "input": {}}]}},
  {"when": {"user_matches": "^big"}, "reply": {"tool_calls": [
    {"name": "state_write", "input": {"patch": {"big": "BIG"}}}]}}
]}"#;

/// A runtime on `store` serving agent `keeper`: the state tools and `count`, a Rust tool that
/// adds one to the state's `count` through `ToolContext::state`.
async fn state_runtime(store: Arc<dyn DynConversationStore>) -> flue_core::AgentRuntime {
    let big = "x".repeat(flue_core::record::MAX_STATE_BYTES);
    let script = STATE_SCRIPT.replace("BIG", &big);
    let agents = flue_core::StaticAgents::new().with_agent("keeper", move || {
        let count =
            flue_core::ToolDefinition::from_fn(
                "count",
                "Adds one to the state's count",
                |_input: serde_json::Map<String, serde_json::Value>,
                 ctx: flue_core::ToolContext| async move {
                    let state = ctx.state().expect("a root session's call has the state");
                    state.update(|object| {
                        let n = object
                            .get("count")
                            .and_then(serde_json::Value::as_u64)
                            .unwrap_or(0);
                        object.insert("count".into(), (n + 1).into());
                    })?;
                    Ok(serde_json::Value::String(ctx.idempotency_key.clone()))
                },
            )
            .unwrap();
        let provider = flue_core::ScriptedProvider::new(".")
            .with_script("s.json", &script)
            .unwrap();
        let agent = flue_core::AgentConfig::new()
            .with_model("scripted/s.json")
            .with_tools(
                flue_core::tool::builtin_tools(&["state_read".into(), "state_write".into()])
                    .unwrap(),
            )
            .with_tool(count);
        flue_core::Harness::builder(agent)
            .with_providers(flue_core::ProviderRegistry::new().with_provider(Arc::new(provider)))
            .with_workspace_context(None)
    });
    flue_core::AgentRuntime::builder(store, Arc::new(agents))
        .with_poll_interval(Duration::from_millis(10))
        .with_reconcile_interval(Some(Duration::from_millis(100)))
        .start()
        .await
        .unwrap()
}

/// The conversation's state: seeded by the first message's `initialData` (a later message's
/// is ignored), changed by tools with their batch (two calls of one batch compose their
/// updates into one record), refused over its limit (nothing stored), and read back by
/// another runtime on the same store.
pub(crate) async fn conversation_state_is_seeded_changed_by_tools_and_read_back(
    store: Arc<dyn DynConversationStore>,
) {
    let runtime = state_runtime(Arc::clone(&store)).await;
    let key = ConversationKey::new("keeper", "state-1");
    let send = |text: &str, data: Option<serde_json::Value>| {
        let mut message = DeliveredMessage::user(text);
        if let Some(data) = data {
            message = message.with_initial_data(data);
        }
        runtime.dispatch(&key, message, DispatchOptions::default())
    };
    // Not an object: refused before anything is admitted.
    let refused = send("write", Some(serde_json::json!([1])))
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), "invalid_state", "{refused}");
    assert!(runtime.conversation(&key).await.unwrap().is_none());

    let first = send("write", Some(serde_json::json!({"issue": 7, "gone": 1})))
        .await
        .unwrap();
    let settled = runtime.wait(&first.submission_id).await.unwrap();
    assert_eq!(settled.outcome, Outcome::Completed, "{settled:?}");
    let state = runtime.state(&key).await.unwrap().unwrap();
    assert_eq!(state.value, serde_json::json!({"issue": 7, "seen": true}));
    assert_eq!(
        (state.version, state.source.as_str()),
        (2, "tool:state_write")
    );

    let second = send("count", Some(serde_json::json!({"issue": 8})))
        .await
        .unwrap();
    runtime.wait(&second.submission_id).await.unwrap();
    let big = send("big", None).await.unwrap();
    runtime.wait(&big.submission_id).await.unwrap();
    runtime.shutdown().await.unwrap();

    // Another runtime on the same store reads what the first stored.
    let other = state_runtime(Arc::clone(&store)).await;
    let state = other.state(&key).await.unwrap().unwrap();
    assert_eq!(
        state.value,
        serde_json::json!({"issue": 7, "seen": true, "count": 2})
    );
    assert_eq!(state.version, 3);
    let log = store
        .load(&SessionKey::new(key.instance_id(), "default"), 0)
        .await
        .unwrap()
        .unwrap();
    let mut versions = Vec::new();
    let mut keys = Vec::new();
    let mut refusals = Vec::new();
    for stored in &log.records {
        match &stored.record {
            Record::State(change) => versions.push((change.version, change.source.clone())),
            Record::ToolResult(result) if result.tool_name == "count" => {
                keys.push(result.content.clone());
            }
            Record::ToolResult(result) if result.is_error => {
                refusals.push(result.error_kind.clone());
            }
            _ => {}
        }
    }
    assert_eq!(
        versions,
        [
            (1, "initial_data".to_owned()),
            (2, "tool:state_write".to_owned()),
            (3, "tool:count".to_owned())
        ]
    );
    // Each call has its own idempotency key.
    assert_eq!(keys.len(), 2);
    assert_ne!(keys[0], keys[1]);
    assert_eq!(refusals, [Some("state_too_large".to_owned())]);
    other.shutdown().await.unwrap();
}

/// Waits for the clock to reach the next millisecond, so that what is written next is
/// strictly more recent than what was written before.
async fn next_ms() {
    let now = now_ms();
    while now_ms() == now {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn listed_ids(rows: &[flue_core::store::listing::ListedConversation]) -> Vec<String> {
    rows.iter().map(|row| row.key.id.clone()).collect()
}

pub(crate) async fn listings_page_most_recent_first_with_the_summaries_writes_keep(
    store: Arc<dyn DynConversationStore>,
) {
    use flue_core::store::listing::{ListedStatus, ListingQuery};
    use flue_core::{AssistantContent, AssistantMessage, ModelRef, StopReason, Usage};

    let texts = [
        ("conv-1", "Plan the invoice export"),
        ("conv-2", "hello there"),
        ("conv-3", "Review the  invoice totals"),
    ];
    let mut submissions = Vec::new();
    for (id, text) in texts {
        next_ms().await;
        let receipt = store
            .admit(&Admission {
                key: ConversationKey::new("agent", id),
                ..admission(text, DispatchOptions::default())
            })
            .await
            .unwrap();
        submissions.push(receipt.submission_id);
    }
    // conv-1 runs a turn and fails: its summary follows the writes.
    next_ms().await;
    let owner = store.register_owner().await.unwrap();
    let fence = owned(store.as_ref(), owner.owner_id()).await;
    store
        .claim_next(&fence, &DurabilityConfig::default())
        .await
        .unwrap();
    let reply = StoredRecord::new(
        Record::Assistant(AssistantMessage {
            content: vec![AssistantContent::Text {
                text: "Done:   exported".into(),
            }],
            interrupted: false,
            model: ModelRef {
                provider: "scripted".into(),
                id: "m".into(),
            },
            usage: Usage {
                input_tokens: 100,
                output_tokens: 7,
                cost_usd: Some(0.25),
                ..Usage::default()
            },
            stop_reason: StopReason::EndTurn,
        }),
        now_ms(),
    );
    store
        .append_fenced(FencedAppend {
            fence: &fence,
            submission_id: Some(&submissions[0]),
            applies_input: true,
            resumes_waiting: false,
            session: &SessionKey::new(key().instance_id(), "default"),
            expected_version: 0,
            records: &[user_record("Plan the invoice export"), reply],
        })
        .await
        .unwrap();
    assert!(
        store
            .settle(&fence, &settlement(&submissions[0], Outcome::Failed))
            .await
            .unwrap()
    );

    let rows = store
        .list_conversations(&ListingQuery::new(10))
        .await
        .unwrap();
    assert_eq!(listed_ids(&rows), ["conv-1", "conv-3", "conv-2"]);
    let first = &rows[0];
    assert_eq!(
        (first.status, first.pending, first.summary.messages),
        (ListedStatus::Failed, 0, 2)
    );
    assert_eq!(
        (
            first.summary.usage.input_tokens,
            first.summary.usage.output_tokens,
            first.summary.usage.cost_usd,
            first.summary.model_turns
        ),
        (100, 7, Some(0.25), 1)
    );
    assert_eq!(
        (
            first.summary.first_message.as_deref(),
            first.summary.last_message.as_deref()
        ),
        (Some("Plan the invoice export"), Some("Done: exported"))
    );
    assert!(first.last_activity >= rows[1].last_activity);
    assert_eq!(
        (rows[1].status, rows[1].pending),
        (ListedStatus::Running, 1)
    );
    assert_eq!(
        rows[1].summary.first_message.as_deref(),
        Some("Review the invoice totals")
    );
    assert_eq!(store.count_conversations().await.unwrap(), 3);

    // A page, then the page after it from its last row's cursor.
    let page = store
        .list_conversations(&ListingQuery::new(2))
        .await
        .unwrap();
    assert_eq!(listed_ids(&page), ["conv-1", "conv-3"]);
    let rest = store
        .list_conversations(&ListingQuery::new(2).with_before(Some(page[1].cursor())))
        .await
        .unwrap();
    assert_eq!(listed_ids(&rest), ["conv-2"]);

    // Searches: every word, case-insensitive, in the agent, id or first message.
    let search = |text: &'static str| {
        let store = Arc::clone(&store);
        async move {
            let query = ListingQuery::new(10).with_text(Some(text));
            listed_ids(&store.list_conversations(&query).await.unwrap())
        }
    };
    assert_eq!(search("INVOICE").await, ["conv-1", "conv-3"]);
    assert_eq!(search("invoice review").await, ["conv-3"]);
    assert_eq!(search("v-2").await, ["conv-2"]);
    assert_eq!(search("2").await, ["conv-2"]);
    assert_eq!(search("invoice nowhere").await, Vec::<String>::new());
    let other = ListingQuery::new(10).with_agent(Some("other".into()));
    assert!(store.list_conversations(&other).await.unwrap().is_empty());

    // A root session no conversation manages yet (a fork before its first message) is
    // listed too, by its session's last write.
    next_ms().await;
    let forked = SessionKey::new("agent:forked", "default");
    store.create(&forked).await.unwrap();
    store
        .append(&forked, 0, &[user_record("copied turn")])
        .await
        .unwrap();
    let rows = store
        .list_conversations(&ListingQuery::new(2))
        .await
        .unwrap();
    assert_eq!(listed_ids(&rows), ["forked", "conv-1"]);
    assert_eq!(
        (rows[0].status, rows[0].pending, rows[0].summary.messages),
        (ListedStatus::Settled, 0, 1)
    );
    let rest = store
        .list_conversations(&ListingQuery::new(10).with_before(Some(rows[0].cursor())))
        .await
        .unwrap();
    assert_eq!(listed_ids(&rest), ["conv-1", "conv-3", "conv-2"]);
    assert_eq!(search("fork").await, ["forked"]);
}
