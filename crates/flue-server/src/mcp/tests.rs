//! What an MCP client's answer to a confirmation decides.

use serde_json::json;

use super::*;

fn confirmation() -> PendingAction {
    PendingAction {
        action_id: "act_1".to_owned(),
        call_id: "call_1".to_owned(),
        tool_name: "bash".to_owned(),
        input: json!({}),
        kind: ActionKind::Confirmation,
        reason: "asks".to_owned(),
        session: None,
        output_schema: None,
        idempotency_key: None,
    }
}

#[test]
fn the_always_box_grants_a_standing_rule_and_only_with_allow() {
    let action = confirmation();
    let decide = |content: serde_json::Value| decision_of(&action, Some(&content));
    assert_eq!(decide(json!({})), ActionDecision::Allow);
    assert_eq!(
        decide(json!({"allow": true, "always": true})),
        ActionDecision::AllowAlways
    );
    assert!(matches!(
        decide(json!({"allow": false, "always": true})),
        ActionDecision::Deny { .. }
    ));
    let schema = serde_json::to_value(
        match elicitation(&ConversationKey::new("echo", "c1"), &action) {
            ElicitRequestParams::FormElicitationParams {
                requested_schema, ..
            } => requested_schema,
            _ => panic!("a confirmation asks with a form"),
        },
    )
    .unwrap();
    assert_eq!(schema["properties"]["always"]["type"], "boolean");
}
