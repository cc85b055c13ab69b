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
        AssistantContent::ProviderData {
            data: serde_json::json!({"type": "reasoning.encrypted", "data": "EjQK", "index": 0}),
        },
    ];
    let json = serde_json::to_value(&content).unwrap();
    assert_eq!(
        json,
        serde_json::json!([
            {"type": "thinking", "text": "summary", "signature": "gAAAAB==", "id": "rs_1"},
            {"type": "redacted_thinking", "data": "EmwKAhgB"},
            {"type": "refusal", "text": "I can't help with that."},
            {"type": "provider_data", "data": {"type": "reasoning.encrypted", "data": "EjQK", "index": 0}},
        ])
    );
    let back: Vec<AssistantContent> = serde_json::from_value(json).unwrap();
    assert_eq!(back, content);
}

#[test]
fn a_record_without_timing_reads_as_before_and_timing_round_trips() {
    // A record as every earlier version wrote it: no `started_at`, no `duration_ms`; it is
    // written back unchanged.
    let old = r#"{"v":1,"at":1700000000500,"type":"tool_result","call_id":"c1","tool_name":"bash","content":"ok","is_error":false}"#;
    let stored: StoredRecord = serde_json::from_str(old).unwrap();
    assert_eq!(stored.timing(), None);
    assert_eq!(serde_json::to_string(&stored).unwrap(), old);
    let timing = WorkTiming {
        started_at: 1_700_000_000_100,
        duration_ms: 350,
    };
    let timed = stored.with_timing(Some(timing));
    let json = serde_json::to_value(&timed).unwrap();
    assert_eq!(json["started_at"], 1_700_000_000_100_u64);
    assert_eq!(json["duration_ms"], 350);
    let back: StoredRecord = serde_json::from_value(json).unwrap();
    assert_eq!(back.timing(), Some(timing));
    assert_eq!(back, timed);
}
