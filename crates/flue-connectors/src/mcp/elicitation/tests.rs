//! Schema defaults and typed answers for elicitation requests.

use pretty_assertions::assert_eq;
use serde_json::json;

use super::*;
use flue_core::elicitation::field_value;

fn request(schema: Value) -> ElicitationRequest {
    ElicitationRequest::new("s", "please", schema)
}

#[test]
fn defaults_of_every_field_type_are_applied() {
    let request = request(json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "default": "John Doe"},
            "age": {"type": "integer", "default": 30},
            "score": {"type": "number", "default": 95.5},
            "status": {"type": "string", "enum": ["active", "inactive"], "default": "active"},
            "verified": {"type": "boolean", "default": true},
            "note": {"type": "string"},
            "bad": {"type": "integer", "default": "many"},
            "off_list": {"type": "string", "enum": ["a"], "default": "b"}
        }
    }));
    assert_eq!(
        request.accept_defaults(),
        ElicitationAnswer::Accept(
            json!({"name": "John Doe", "age": 30, "score": 95.5, "status": "active", "verified": true})
                .as_object()
                .unwrap()
                .clone()
        )
    );
}

#[test]
fn a_required_field_without_a_default_declines_naming_it() {
    let request = request(json!({
        "type": "object",
        "properties": {"email": {"type": "string"}, "n": {"type": "integer", "default": 1}},
        "required": ["email", "n"]
    }));
    assert_eq!(
        request.accept_defaults(),
        ElicitationAnswer::Decline {
            reason: "required fields without a default: email; answer on a terminal instead"
                .to_owned()
        }
    );
}

#[test]
fn typed_text_becomes_the_field_type() {
    let integer = json!({"type": "integer"});
    let boolean = json!({"type": "boolean"});
    let choice = json!({"type": "string", "oneOf": [{"const": "x"}, {"const": "y"}]});
    assert_eq!(field_value(&integer, &json!(" 42 ")), Some(json!(42)));
    assert_eq!(field_value(&integer, &json!("4.5")), None);
    assert_eq!(field_value(&boolean, &json!("yes")), Some(json!(true)));
    assert_eq!(field_value(&choice, &json!("y")), Some(json!("y")));
    assert_eq!(field_value(&choice, &json!("z")), None);
}

#[tokio::test]
async fn a_question_outside_a_call_or_a_session_is_declined_with_the_reason() {
    let mut asked = request(json!({"type": "object", "properties": {}}));
    assert_eq!(
        PendingActionElicitor.elicit(&asked).await,
        ElicitationAnswer::Decline {
            reason: "the server asked outside a tool call; there is no conversation to hold the \
                     question"
                .to_owned()
        }
    );
    // A context from `ToolContext::new` is not a session's call: nothing can hold the question.
    asked.caller = Some(ToolContext::new(std::sync::Arc::new(
        flue_core::VirtualSandbox::new(),
    )));
    let ElicitationAnswer::Decline { reason } = PendingActionElicitor.elicit(&asked).await else {
        panic!("not declined");
    };
    assert!(
        reason.starts_with("the question could not be recorded: "),
        "{reason}"
    );
}
