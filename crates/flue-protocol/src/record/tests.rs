//! Unit tests of the session records: stop reason spellings and the new assistant content kinds.

use super::*;

#[test]
fn stop_reasons_are_stored_by_name_and_unknown_ones_are_kept_as_sent() {
    let known = [
        (StopReason::EndTurn, "end_turn"),
        (StopReason::ToolUse, "tool_use"),
        (StopReason::MaxTokens, "max_tokens"),
        (StopReason::Aborted, "aborted"),
        (StopReason::Refusal, "refusal"),
        (StopReason::ContentFilter, "content_filter"),
        (StopReason::PauseTurn, "pause_turn"),
        (StopReason::ContextWindowExceeded, "context_window_exceeded"),
    ];
    for (reason, name) in known {
        let json = serde_json::to_value(&reason).unwrap();
        assert_eq!(json, Value::String(name.to_owned()));
        assert_eq!(serde_json::from_value::<StopReason>(json).unwrap(), reason);
    }
    let future: StopReason = serde_json::from_str("\"model_got_bored\"").unwrap();
    assert_eq!(future, StopReason::Other("model_got_bored".to_owned()));
    assert!(!future.is_normal());
    assert_eq!(
        serde_json::to_string(&future).unwrap(),
        "\"model_got_bored\""
    );
}

#[test]
fn reasoning_that_goes_back_to_the_provider_round_trips_unchanged() {
    let content = vec![
        AssistantContent::Thinking {
            text: "summary".to_owned(),
            signature: Some("gAAAAB==".to_owned()),
            id: Some("rs_1".to_owned()),
        },
        AssistantContent::RedactedThinking {
            data: "EmwKAhgB".to_owned(),
        },
        AssistantContent::Refusal {
            text: "I can't help with that.".to_owned(),
        },
    ];
    let json = serde_json::to_value(&content).unwrap();
    assert_eq!(
        json,
        serde_json::json!([
            {"type": "thinking", "text": "summary", "signature": "gAAAAB==", "id": "rs_1"},
            {"type": "redacted_thinking", "data": "EmwKAhgB"},
            {"type": "refusal", "text": "I can't help with that."},
        ])
    );
    let back: Vec<AssistantContent> = serde_json::from_value(json).unwrap();
    assert_eq!(back, content);
}
