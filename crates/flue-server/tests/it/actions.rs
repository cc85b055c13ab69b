//! Pending actions over HTTP: a paused conversation lists its actions, a POST resolves one
//! (202, first decision wins with 409 `action_already_resolved`), new messages are refused
//! with 409 `actions_pending`, and the stream and snapshot show the pause as a
//! `data-action-<id>` part.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::host::{careful_app, get, post_json, send, settled};

const URI: &str = "/agents/careful/c1";

/// Polls the actions until one is pending; returns the list.
async fn pending(app: &axum::Router) -> Vec<Value> {
    for _ in 0..500 {
        let reply = get(app, &format!("{URI}/actions")).await;
        if reply.status == 200 {
            let actions = reply.json()["actions"].as_array().unwrap().clone();
            if actions.iter().any(|action| action["state"] == "pending") {
                return actions;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("no action became pending");
}

#[tokio::test]
async fn a_paused_conversation_is_listed_resolved_once_and_shown_in_the_snapshot() {
    let app = careful_app().await;
    let admitted = send(&app, URI, "find x").await;
    let submission = admitted["submissionId"].as_str().unwrap().to_owned();
    let actions = pending(&app).await;
    assert_eq!(actions.len(), 1);
    let action_id = actions[0]["actionId"].as_str().unwrap().to_owned();
    assert_eq!(
        (
            &actions[0]["toolName"],
            &actions[0]["kind"],
            &actions[0]["input"]
        ),
        (
            &json!("lookup"),
            &json!("confirmation"),
            &json!({"query": "find x"})
        )
    );
    let status = get(&app, &format!("{URI}/submissions/{submission}"))
        .await
        .json();
    assert_eq!(status["state"], "waiting");

    let refused = post_json(&app, URI, r#"{"kind":"user","body":"more"}"#).await;
    assert_eq!(
        (refused.status, refused.error_type()),
        (409, "actions_pending".to_owned())
    );
    assert_eq!(
        refused.json()["error"]["meta"]["actions"],
        json!([action_id])
    );

    let snapshot = get(&app, URI).await.json();
    let part_type = format!("data-action-{action_id}");
    let part = |snapshot: &Value| {
        snapshot["messages"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|message| message["parts"].as_array().unwrap().clone())
            .find(|part| part["type"] == part_type.as_str())
            .unwrap_or_else(|| panic!("no {part_type} part in {snapshot}"))
    };
    assert_eq!(part(&snapshot)["data"]["state"], "pending");

    let bad = post_json(
        &app,
        &format!("{URI}/actions/{action_id}"),
        r#"{"decision":"maybe"}"#,
    )
    .await;
    assert_eq!(
        (bad.status, bad.error_type()),
        (400, "invalid_request".to_owned())
    );
    let missing = post_json(
        &app,
        &format!("{URI}/actions/act_nope"),
        r#"{"decision":"allow"}"#,
    )
    .await;
    assert_eq!(
        (missing.status, missing.error_type()),
        (404, "action_not_found".to_owned())
    );

    let resolved = post_json(
        &app,
        &format!("{URI}/actions/{action_id}"),
        r#"{"decision":"allow"}"#,
    )
    .await;
    assert_eq!(
        resolved.status,
        202,
        "{}",
        String::from_utf8_lossy(&resolved.body)
    );
    assert_eq!(resolved.json()["submissionId"], submission.as_str());
    assert!(resolved.header("stream-next-offset").is_some());
    let again = post_json(
        &app,
        &format!("{URI}/actions/{action_id}"),
        r#"{"decision":"deny","message":"no"}"#,
    )
    .await;
    assert_eq!(
        (again.status, again.error_type()),
        (409, "action_already_resolved".to_owned())
    );

    let snapshot = settled(&app, URI, &submission).await;
    assert_eq!(part(&snapshot)["data"]["state"], "allowed");
    assert_eq!(part(&snapshot)["data"]["toolName"], "lookup");
    let listed = get(&app, &format!("{URI}/actions")).await.json();
    assert_eq!(listed["actions"][0]["state"], "allowed");
    let settlement = &snapshot["settlements"][0];
    assert_eq!(settlement["outcome"], "completed");
}

#[tokio::test]
async fn a_denial_carries_its_message_and_actions_of_unknown_conversations_are_404() {
    let app = careful_app().await;
    let missing = get(&app, "/agents/careful/nobody/actions").await;
    assert_eq!(
        (missing.status, missing.error_type()),
        (404, "stream_not_found".to_owned())
    );
    let admitted = send(&app, URI, "find y").await;
    let submission = admitted["submissionId"].as_str().unwrap().to_owned();
    let action_id = pending(&app).await[0]["actionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let denied = post_json(
        &app,
        &format!("{URI}/actions/{action_id}"),
        r#"{"decision":"deny","message":"not this one"}"#,
    )
    .await;
    assert_eq!(denied.status, 202);
    settled(&app, URI, &submission).await;
    let listed = get(&app, &format!("{URI}/actions")).await.json();
    assert_eq!(
        (
            &listed["actions"][0]["state"],
            &listed["actions"][0]["message"]
        ),
        (&json!("denied"), &json!("not this one"))
    );
}
