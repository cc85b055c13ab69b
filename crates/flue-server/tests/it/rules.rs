//! Standing approvals over HTTP: `allow_always` answers a confirmation and approves the
//! tool's later calls in the conversation without a pause, `GET .../rules` lists the rule,
//! `DELETE .../rules/<id>` revokes it, and a server with another approval key honours nothing.

use std::sync::Arc;

use flue_core::standing::ApprovalKey;
use flue_core::store::{SessionKey, SessionStore as _};
use flue_core::{DEFAULT_SESSION, MemoryStore, Record};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::host::{careful_app_keyed, delete, get, post_json, send, settled};

const URI: &str = "/agents/careful/always";

fn key(byte: u8) -> ApprovalKey {
    ApprovalKey::from_bytes(&[byte; 32]).unwrap()
}

/// Polls until `submission` waits or settles; returns its state.
async fn idle(app: &axum::Router, submission: &str) -> String {
    for _ in 0..500 {
        let status = get(app, &format!("{URI}/submissions/{submission}"))
            .await
            .json();
        let state = status["state"].as_str().unwrap_or_default().to_owned();
        if state == "waiting" || state == "settled" {
            return state;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("{submission} never paused or settled");
}

/// Sends `text`; returns the submission and what it came to (`waiting` or `settled`).
async fn message(app: &axum::Router, text: &str) -> (String, String) {
    let admitted = send(app, URI, text).await;
    let submission = admitted["submissionId"].as_str().unwrap().to_owned();
    let state = idle(app, &submission).await;
    (submission, state)
}

async fn pending_id(app: &axum::Router) -> String {
    let actions = get(app, &format!("{URI}/actions")).await.json();
    let pending: Vec<&Value> = actions["actions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|action| action["state"] == "pending")
        .collect();
    assert_eq!(pending.len(), 1, "{actions}");
    pending[0]["actionId"].as_str().unwrap().to_owned()
}

async fn decide(app: &axum::Router, action_id: &str, body: &str) -> u16 {
    let reply = post_json(app, &format!("{URI}/actions/{action_id}"), body).await;
    reply.status
}

#[tokio::test]
async fn always_over_http_approves_the_next_call_until_revoked() {
    let store = Arc::new(MemoryStore::new());
    let app = careful_app_keyed(Arc::clone(&store), Some(key(7))).await;

    let (first, state) = message(&app, "find a").await;
    assert_eq!(state, "waiting");
    let action_id = pending_id(&app).await;
    assert_eq!(
        decide(&app, &action_id, r#"{"decision":"allow_always"}"#).await,
        202
    );
    settled(&app, URI, &first).await;
    let rules = get(&app, &format!("{URI}/rules")).await.json();
    let rule_id = rules["rules"][0]["ruleId"].as_str().unwrap().to_owned();
    assert_eq!(
        rules,
        json!({"rules": [{
            "ruleId": rule_id, "toolName": "lookup", "actionId": action_id, "status": "active"
        }]})
    );

    // The second call runs unasked, and the transcript says why.
    let (second, state) = message(&app, "find b").await;
    assert_eq!(state, "settled");
    let snapshot = settled(&app, URI, &second).await;
    let text = snapshot.to_string();
    assert_eq!(text.matches("Final answer").count(), 2, "{text}");
    // The log says which rule approved the call.
    let log = store
        .load(&SessionKey::new("careful:always", DEFAULT_SESSION), 0)
        .await
        .unwrap()
        .unwrap();
    let approvals: Vec<(String, Option<String>)> = log
        .records
        .iter()
        .filter_map(|stored| match &stored.record {
            Record::Hook(hook) => Some((hook.event.clone(), hook.reason.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        approvals,
        vec![(
            "PermissionRequest".to_owned(),
            Some(format!("approved by standing rule {rule_id}"))
        )]
    );
    let actions = get(&app, &format!("{URI}/actions")).await.json();
    assert_eq!(actions["actions"].as_array().unwrap().len(), 1);

    // Revoked: the third call asks again.
    let revoked = delete(&app, &format!("{URI}/rules/{rule_id}")).await;
    assert_eq!(
        (revoked.status, revoked.json()["status"].clone()),
        (200, json!("revoked"))
    );
    let (_, state) = message(&app, "find c").await;
    assert_eq!(state, "waiting");
    let unknown = delete(&app, &format!("{URI}/rules/rule_nope")).await;
    assert_eq!(
        (unknown.status, unknown.error_type()),
        (400, "invalid_request".to_owned())
    );
}

#[tokio::test]
async fn a_store_written_with_another_key_answers_nothing() {
    let store = Arc::new(MemoryStore::new());
    let signer = careful_app_keyed(Arc::clone(&store), Some(key(1))).await;
    let (first, _) = message(&signer, "find a").await;
    let action_id = pending_id(&signer).await;
    assert_eq!(
        decide(&signer, &action_id, r#"{"decision":"allow_always"}"#).await,
        202
    );
    settled(&signer, URI, &first).await;

    // The same store served with another key: the rule is listed, unverified, and asks.
    let other = careful_app_keyed(Arc::clone(&store), Some(key(2))).await;
    let rules = get(&other, &format!("{URI}/rules")).await.json();
    assert_eq!(rules["rules"][0]["status"], "unverified");
    let (_, state) = message(&other, "find b").await;
    assert_eq!(state, "waiting");
}

#[tokio::test]
async fn without_a_key_always_is_refused_and_nothing_is_stored() {
    let app = careful_app_keyed(Arc::new(MemoryStore::new()), None).await;
    let (_, state) = message(&app, "find a").await;
    assert_eq!(state, "waiting");
    let action_id = pending_id(&app).await;
    let reply = post_json(
        &app,
        &format!("{URI}/actions/{action_id}"),
        r#"{"decision":"allow_always"}"#,
    )
    .await;
    assert_eq!(
        (reply.status, reply.error_type()),
        (400, "invalid_request".to_owned())
    );
    let rules = get(&app, &format!("{URI}/rules")).await.json();
    assert_eq!(rules, json!({"rules": []}));
}
