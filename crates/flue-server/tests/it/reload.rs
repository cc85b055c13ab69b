//! Swapping the agent list of a serving `DurableRuntime` (what `flue dev` does on reload): the
//! router's list and its agent checks follow at once; conversations keep working.

use flue_core::AgentInfo;

use crate::host::{durable_runtime, fast_config, get, post_json, send, settled};

#[tokio::test]
async fn set_agents_changes_what_the_router_serves_at_once() {
    let runtime = durable_runtime().await;
    let app = flue_server::router(runtime.clone(), fast_config());
    let first = send(&app, "/agents/plain/c1", "before").await;
    settled(
        &app,
        "/agents/plain/c1",
        first["submissionId"].as_str().unwrap(),
    )
    .await;

    runtime.set_agents(vec![
        AgentInfo::new("plain").with_description(Some("reloaded".to_owned())),
    ]);
    let listed = get(&app, "/_flue/agents").await.json();
    assert_eq!(
        listed,
        serde_json::json!({"agents": [{"name": "plain", "description": "reloaded"}]})
    );
    assert_eq!(runtime.agents_len(), 1);
    let gone = post_json(&app, "/agents/tool/c1", r#"{"kind":"user","body":"hi"}"#).await;
    assert_eq!(gone.error_type(), "agent_not_found");
    let after = send(&app, "/agents/plain/c1", "after").await;
    let snapshot = settled(
        &app,
        "/agents/plain/c1",
        after["submissionId"].as_str().unwrap(),
    )
    .await;
    let outcomes: Vec<&str> = snapshot["settlements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|settlement| settlement["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["completed", "completed"], "{snapshot}");
    assert_eq!(runtime.unsettled_submissions().await, 0);
}
