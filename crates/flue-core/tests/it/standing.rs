//! Standing approvals are the conversation's, not a turn's: a fork at any turn keeps every
//! rule record, granted or revoked after the fork point included.

use flue_core::fork::fork_conversation;
use flue_core::record::{RuleChange, StandingRule};
use flue_core::store::{SessionKey, SessionStore as _};
use flue_core::{DEFAULT_SESSION, MemoryStore, Record, StoredRecord, UserMessage};
use pretty_assertions::assert_eq;

fn rule(rule_id: &str, change: RuleChange) -> Record {
    Record::Rule(StandingRule {
        rule_id: rule_id.to_owned(),
        tool_name: "bash".to_owned(),
        change,
        action_id: None,
        signature: Some("00".to_owned()),
    })
}

#[tokio::test]
async fn a_fork_keeps_the_rules_granted_after_its_turn() {
    let store = MemoryStore::new();
    let key = SessionKey::new("echo:a", DEFAULT_SESSION);
    store.create(&key).await.unwrap();
    let records: Vec<StoredRecord> = [
        Record::User(UserMessage::text("one")),
        rule("rule_1", RuleChange::Grant),
        Record::User(UserMessage::text("two")),
        rule("rule_2", RuleChange::Grant),
        rule("rule_1", RuleChange::Revoke),
    ]
    .into_iter()
    .map(|record| StoredRecord::new(record, 1))
    .collect();
    store.append(&key, 0, &records).await.unwrap();

    fork_conversation(&store, "echo:a", 2, "echo:b")
        .await
        .unwrap();
    let forked = store
        .load(&SessionKey::new("echo:b", DEFAULT_SESSION), 0)
        .await
        .unwrap()
        .unwrap();
    let kept: Vec<Record> = forked
        .records
        .into_iter()
        .map(|stored| stored.record)
        .collect();
    assert_eq!(
        kept,
        vec![
            Record::User(UserMessage::text("one")),
            rule("rule_1", RuleChange::Grant),
            rule("rule_2", RuleChange::Grant),
            rule("rule_1", RuleChange::Revoke),
        ]
    );
}
