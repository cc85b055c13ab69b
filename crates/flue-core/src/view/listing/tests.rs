//! The listing over the memory store: statuses from real store writes (admission, attempts,
//! pauses, settlements), search, order and bounds, and the index reading again what moved.

use std::sync::Arc;
use std::time::Duration;

use flue_protocol::DurabilityConfig;
use flue_protocol::event::Outcome;
use flue_protocol::submission::{ConversationKey, DeliveredMessage, DispatchOptions, Settlement};

use crate::store::{Acquire, Admission, DynConversationStore, MemoryStore};
use crate::util::{new_ulid, now_ms};

use super::{ConversationIndex, ConversationQuery, ConversationStatus, FIRST_MESSAGE_CHARS};

/// Waits for the clock to reach the next millisecond, so that what is written next is
/// strictly more recent than what was written before.
async fn next_ms() {
    let now = now_ms();
    while now_ms() == now {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn admit(store: &dyn DynConversationStore, agent: &str, id: &str, text: &str) -> String {
    next_ms().await;
    let receipt = store
        .admit(&Admission {
            key: ConversationKey::new(agent, id),
            submission_id: new_ulid(),
            new_uid: new_ulid(),
            message: DeliveredMessage::user(text),
            accepted_at: now_ms(),
            options: DispatchOptions::default(),
        })
        .await
        .unwrap();
    receipt.submission_id
}

/// Claims the conversation's next submission, then settles it with `outcome`, or pauses it
/// when `outcome` is `None`.
async fn finish(store: &dyn DynConversationStore, agent: &str, id: &str, outcome: Option<Outcome>) {
    next_ms().await;
    let key = ConversationKey::new(agent, id);
    let Acquire::Owned(fence) = store
        .acquire(&key, "owner", Duration::from_secs(30))
        .await
        .unwrap()
    else {
        panic!("not owned");
    };
    let claim = store
        .claim_next(&fence, &DurabilityConfig::default())
        .await
        .unwrap()
        .unwrap();
    let submission_id = claim.submission.submission_id;
    match outcome {
        Some(outcome) => {
            let settlement = Settlement {
                submission_id,
                outcome,
                text: None,
                data: None,
                error: None,
                attempts: 1,
                settled_at: now_ms(),
            };
            assert!(store.settle(&fence, &settlement).await.unwrap());
        }
        None => assert!(
            store
                .wait(&fence, &submission_id, &["action-1".to_owned()])
                .await
                .unwrap()
        ),
    }
}

fn query(text: &str, agent: Option<&str>, limit: usize) -> ConversationQuery {
    ConversationQuery::new(
        (!text.is_empty()).then(|| text.to_owned()),
        agent.map(str::to_owned),
        limit,
    )
}

#[tokio::test]
async fn rows_carry_status_first_message_and_most_recent_first() {
    let store: Arc<dyn DynConversationStore> = Arc::new(MemoryStore::new());
    let store = store.as_ref();
    admit(store, "helper", "done", "summarize the release notes").await;
    finish(store, "helper", "done", Some(Outcome::Completed)).await;
    admit(store, "helper", "broken", "call the flaky API").await;
    finish(store, "helper", "broken", Some(Outcome::Failed)).await;
    admit(store, "reviewer", "paused", "delete the old branch").await;
    finish(store, "reviewer", "paused", None).await;
    admit(store, "reviewer", "queued", &"word ".repeat(100)).await;

    let index = ConversationIndex::new();
    let page = index.search(store, &query("", None, 10)).await.unwrap();
    assert_eq!((page.total, page.matched), (4, 4));
    let seen: Vec<(&str, ConversationStatus)> = page
        .conversations
        .iter()
        .map(|row| (row.id.as_str(), row.status))
        .collect();
    assert_eq!(
        seen,
        [
            ("queued", ConversationStatus::Running),
            ("paused", ConversationStatus::Waiting),
            ("broken", ConversationStatus::Failed),
            ("done", ConversationStatus::Settled),
        ],
        "most recently active first, each with its status"
    );
    let first = page.conversations[0].first_message.as_deref().unwrap();
    assert_eq!(
        first.chars().count(),
        FIRST_MESSAGE_CHARS + 1,
        "cut, with an ellipsis"
    );
    assert_eq!(
        page.conversations[3].first_message.as_deref(),
        Some("summarize the release notes")
    );
    assert_eq!(page.conversations[0].pending, 1);
}

#[tokio::test]
async fn search_matches_every_word_in_agent_id_or_first_message_and_is_bounded() {
    let store: Arc<dyn DynConversationStore> = Arc::new(MemoryStore::new());
    let store = store.as_ref();
    for n in 0..30 {
        let agent = if n % 3 == 0 { "reviewer" } else { "helper" };
        let text = if n % 5 == 0 {
            format!("Review the Invoice number {n}")
        } else {
            format!("hello {n}")
        };
        admit(store, agent, &format!("c{n}"), &text).await;
    }
    let index = ConversationIndex::new();

    let page = index
        .search(store, &query("invoice", None, 100))
        .await
        .unwrap();
    assert_eq!(page.matched, 6, "case-insensitive, in the first message");
    let page = index
        .search(store, &query("INVOICE review", Some("reviewer"), 100))
        .await
        .unwrap();
    let ids: Vec<&str> = page
        .conversations
        .iter()
        .map(|row| row.id.as_str())
        .collect();
    assert_eq!(ids, ["c15", "c0"], "every word, of that agent only");
    let page = index.search(store, &query("c2", None, 100)).await.unwrap();
    assert_eq!(page.matched, 11, "the id matches too: c2 and c20 to c29");
    let page = index.search(store, &query("", None, 5)).await.unwrap();
    assert_eq!(
        (page.conversations.len(), page.matched, page.total),
        (5, 5, 30)
    );
    // Page after page through the cursors: every conversation once, most recent first.
    let mut seen = Vec::new();
    let mut before = None;
    loop {
        let page = index
            .search(store, &query("", None, 7).with_before(before.take()))
            .await
            .unwrap();
        seen.extend(page.conversations.iter().map(|row| row.id.clone()));
        match page.next {
            Some(next) => before = Some(next),
            None => break,
        }
    }
    let expected: Vec<String> = (0..30).rev().map(|n| format!("c{n}")).collect();
    assert_eq!(seen, expected);
    let page = index
        .search(store, &query("", None, 100_000))
        .await
        .unwrap();
    assert_eq!(
        page.conversations.len(),
        30,
        "the limit is capped, not an error"
    );
}

#[tokio::test]
async fn the_index_reads_again_what_moved_and_forgets_what_was_deleted() {
    let store: Arc<dyn DynConversationStore> = Arc::new(MemoryStore::new());
    let store = store.as_ref();
    admit(store, "helper", "a", "first").await;
    admit(store, "helper", "b", "second").await;
    let index = ConversationIndex::new();
    let page = index.search(store, &query("", None, 10)).await.unwrap();
    assert_eq!(page.conversations[0].status, ConversationStatus::Running);

    finish(store, "helper", "a", Some(Outcome::Completed)).await;
    let page = index.search(store, &query("", None, 10)).await.unwrap();
    let a = page.conversations.iter().find(|row| row.id == "a").unwrap();
    assert_eq!(
        a.status,
        ConversationStatus::Settled,
        "read again at its new head"
    );

    store
        .delete_conversation(&ConversationKey::new("helper", "a"))
        .await
        .unwrap();
    let page = index.search(store, &query("", None, 10)).await.unwrap();
    assert_eq!((page.total, page.conversations.len()), (1, 1));
}
