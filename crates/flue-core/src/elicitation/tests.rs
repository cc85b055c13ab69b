//! Checking an elicitation's answer against the requested schema, and which records a running
//! call may add under the loop.

use pretty_assertions::assert_eq;
use serde_json::json;

use super::*;
use crate::steps::orphaned_live_actions;

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "version": {"type": "string"},
            "channel": {"type": "string", "enum": ["stable", "beta"], "default": "stable"},
            "count": {"type": "integer", "default": 1},
            "notify": {"type": "boolean", "default": true}
        },
        "required": ["version"]
    })
}

#[test]
fn an_answer_gets_the_defaults_of_the_fields_it_leaves_out_and_typed_values() {
    let values =
        check_elicitation_content(&schema(), &json!({"version": "1.0", "count": "3"})).unwrap();
    assert_eq!(
        Value::Object(values),
        json!({"version": "1.0", "channel": "stable", "count": 3, "notify": true})
    );
}

#[test]
fn a_bad_answer_names_every_problem() {
    let problem = check_elicitation_content(
        &schema(),
        &json!({"channel": "nightly", "count": 1.5, "extra": 1}),
    )
    .unwrap_err();
    assert_eq!(
        problem,
        "`channel` must be one of stable, beta, not \"nightly\"; `count` must be of type \
         integer, not 1.5; `extra` is not a requested field (the fields: channel, count, notify, \
         version); \
         `version` is required and has no default"
    );
    assert_eq!(
        check_elicitation_content(&schema(), &json!(["1.0"])).unwrap_err(),
        "the content must be a JSON object of the requested fields"
    );
}

#[test]
fn only_questions_and_their_decisions_count_as_live_records() {
    let question = Record::ActionRequired(PendingAction {
        action_id: "eli_1".into(),
        call_id: "c1".into(),
        tool_name: "mcp__s__t".into(),
        input: json!({}),
        kind: ActionKind::Elicitation,
        reason: String::new(),
        session: None,
        output_schema: None,
        idempotency_key: None,
    });
    let answer = Record::ActionResolved(ActionResolution::new("eli_1", ActionDecision::Cancel));
    let other = Record::ActionResolved(ActionResolution::new("act_c2", ActionDecision::Allow));
    assert!(is_live_record(&question, &[]));
    assert!(is_live_record(&answer, std::slice::from_ref(&question)));
    assert!(!is_live_record(&answer, &[]));
    assert!(!is_live_record(&other, std::slice::from_ref(&question)));
    // A question left pending is interrupted when an operation opens; an answered one is not.
    assert_eq!(
        orphaned_live_actions(std::slice::from_ref(&question)).len(),
        1
    );
    assert!(orphaned_live_actions(&[question, answer]).is_empty());
}

#[test]
fn durations_read_as_people_write_them() {
    assert_eq!(humanize(Duration::from_secs(600)), "10m");
    assert_eq!(humanize(Duration::from_secs(90)), "1m30s");
    assert_eq!(humanize(Duration::from_millis(400)), "400ms");
}
