//! Anthropic Messages over loopback: the documented event sequences (text, tool use with
//! input JSON deltas, thinking with signatures, pings, usage with cache), error events,
//! overload retries, and what ends up stored.

use flue_core::{AssistantContent, FlueError, Record, StopReason, ThinkingLevel, ToolCall, Usage};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::fake_http::Reply;
use crate::providers::{
    Outcome, assert_anthropic_request, builtin, check, failed_turns, frames, roles, streamed,
    tool_results,
};

const MODEL: &str = "claude-sonnet-4-5";

/// `event: <type>` and `data: <json>`.
fn event(value: &Value) -> String {
    format!(
        "event: {}\ndata: {value}\n\n",
        value["type"].as_str().unwrap()
    )
}

fn message_start(input: u64, cache_write: u64, cache_read: u64) -> String {
    event(&json!({
        "type": "message_start",
        "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "content": [],
            "model": MODEL, "stop_reason": null, "stop_sequence": null,
            "usage": {
                "input_tokens": input,
                "cache_creation_input_tokens": cache_write,
                "cache_read_input_tokens": cache_read,
                "output_tokens": 1,
            },
        },
    }))
}

fn block_start(index: u64, block: &Value) -> String {
    event(&json!({"type": "content_block_start", "index": index, "content_block": block}))
}

fn delta(index: u64, delta: &Value) -> String {
    event(&json!({"type": "content_block_delta", "index": index, "delta": delta}))
}

fn block_stop(index: u64) -> String {
    event(&json!({"type": "content_block_stop", "index": index}))
}

fn message_end(stop_reason: &str, output: u64) -> Vec<String> {
    vec![
        event(&json!({
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": null},
            "usage": {"output_tokens": output},
        })),
        event(&json!({"type": "message_stop"})),
    ]
}

fn ping() -> String {
    event(&json!({"type": "ping"}))
}

fn text_block(index: u64, pieces: &[&str]) -> Vec<String> {
    let mut out = vec![block_start(index, &json!({"type": "text", "text": ""}))];
    out.extend(
        pieces
            .iter()
            .map(|piece| delta(index, &json!({"type": "text_delta", "text": piece}))),
    );
    out.push(block_stop(index));
    out
}

fn tool_block(index: u64, id: &str, json_pieces: &[&str]) -> Vec<String> {
    let mut out = vec![block_start(
        index,
        &json!({"type": "tool_use", "id": id, "name": "lookup", "input": {}}),
    )];
    out.extend(json_pieces.iter().map(|piece| {
        delta(
            index,
            &json!({"type": "input_json_delta", "partial_json": piece}),
        )
    }));
    out.push(block_stop(index));
    out
}

fn text_reply(pieces: &[&str]) -> Reply {
    let mut out = vec![message_start(20, 0, 0), ping()];
    out.extend(text_block(0, pieces));
    out.extend(message_end("end_turn", 7));
    Reply::sse(frames(&out))
}

async fn run(thinking: ThinkingLevel, replies: Vec<Reply>) -> Outcome {
    check(builtin("anthropic"), MODEL, thinking, replies).await
}

#[tokio::test]
async fn text_streams_with_pings_and_cache_usage_is_priced() {
    let mut out = vec![message_start(100, 30, 50), ping()];
    out.extend(text_block(0, &["The answer", " is 42."]));
    out.push(ping());
    out.extend(message_end("end_turn", 12));
    let outcome = run(ThinkingLevel::Off, vec![Reply::sse(frames(&out))]).await;
    let response = outcome.result.as_ref().unwrap();
    assert_eq!(response.text, "The answer is 42.");
    assert_eq!(streamed(&outcome.events).0, "The answer is 42.");
    // claude-sonnet-4-5: $3 input, $15 output, $0.30 cache read, $3.75 cache write.
    assert_eq!(
        response.usage,
        Usage {
            input_tokens: 100,
            output_tokens: 12,
            cache_read_tokens: 50,
            cache_write_tokens: 30,
            cost_usd: Some((100.0 * 3.0 + 12.0 * 15.0 + 50.0 * 0.3 + 30.0 * 3.75) / 1_000_000.0),
        }
    );
    let [request] = outcome.requests.as_slice() else {
        panic!("expected one request: {:?}", outcome.requests);
    };
    assert_anthropic_request(request);
    let mut body = request.body.clone();
    let tools = body.as_object_mut().unwrap().remove("tools").unwrap();
    assert_eq!(
        body,
        json!({
            "model": MODEL,
            "max_tokens": 64_000,
            "stream": true,
            "system": [{"type": "text", "text": "You answer questions.", "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": "What is the answer?", "cache_control": {"type": "ephemeral"}},
            ]}],
        })
    );
    assert_eq!(tools[0]["name"], "lookup");
    assert_eq!(tools[0]["input_schema"]["type"], "object");
}

#[tokio::test]
async fn repeated_and_empty_tool_use_ids_are_made_unique_before_anything_is_stored() {
    let mut first = vec![message_start(40, 0, 0)];
    first.extend(tool_block(0, "toolu_1", &["{\"query\": \"one\"}"]));
    first.extend(tool_block(1, "toolu_1", &["{\"query\": \"two\"}"]));
    first.extend(tool_block(2, "", &["{\"query\": \"three\"}"]));
    first.extend(message_end("tool_use", 30));
    let outcome = run(
        ThinkingLevel::Off,
        vec![Reply::sse(frames(&first)), text_reply(&["All three."])],
    )
    .await;
    assert_eq!(outcome.result.as_ref().unwrap().text, "All three.");
    crate::providers::assert_one_result_per_call(&outcome.records);
    let ids: Vec<String> = tool_results(&outcome.records)
        .into_iter()
        .map(|(id, _, _)| id)
        .collect();
    assert_eq!(ids, ["toolu_1", "toolu_1_2", "call_1"]);
    assert_eq!(outcome.requests.len(), 2);
    for request in &outcome.requests {
        assert_anthropic_request(request);
    }
}

#[tokio::test]
async fn parallel_tool_uses_with_fragmented_input_round_trip() {
    let mut first = vec![message_start(40, 0, 0)];
    first.extend(text_block(0, &["Looking both up."]));
    first.extend(tool_block(1, "toolu_1", &["{\"que", "ry\": \"o", "ne\"}"]));
    first.extend(tool_block(2, "toolu_2", &["", "{\"query\": \"two\"}"]));
    first.extend(message_end("tool_use", 30));
    let outcome = run(
        ThinkingLevel::Off,
        vec![Reply::sse(frames(&first)), text_reply(&["Both are 42."])],
    )
    .await;
    assert_eq!(outcome.result.as_ref().unwrap().text, "Both are 42.");
    assert_eq!(
        roles(&outcome.records),
        [
            "user",
            "assistant",
            "tool_result",
            "tool_result",
            "assistant"
        ]
    );
    let Record::Assistant(call_turn) = &outcome.records[1] else {
        panic!()
    };
    let call = |id: &str, query: &str| {
        AssistantContent::ToolCall(ToolCall {
            id: id.into(),
            name: "lookup".into(),
            input: json!({"query": query}),
        })
    };
    assert_eq!(
        call_turn.content,
        vec![
            AssistantContent::Text {
                text: "Looking both up.".into()
            },
            call("toolu_1", "one"),
            call("toolu_2", "two"),
        ]
    );
    assert_eq!(call_turn.stop_reason, StopReason::ToolUse);
    for request in &outcome.requests {
        assert_anthropic_request(request);
    }
    let second = &outcome.requests[1].body["messages"];
    assert_eq!(
        second[2],
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "{\"answer\":42,\"query\":\"one\"}"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "{\"answer\":42,\"query\":\"two\"}",
             "cache_control": {"type": "ephemeral"}},
        ]})
    );
}

#[tokio::test]
async fn thinking_and_its_signature_are_stored_and_sent_back() {
    let mut first = vec![
        message_start(40, 0, 0),
        block_start(0, &json!({"type": "thinking", "thinking": ""})),
        delta(
            0,
            &json!({"type": "thinking_delta", "thinking": "I should look "}),
        ),
        delta(0, &json!({"type": "thinking_delta", "thinking": "it up."})),
        delta(
            0,
            &json!({"type": "signature_delta", "signature": "EqQBCgIYAhIM"}),
        ),
        block_stop(0),
    ];
    first.extend(tool_block(1, "toolu_1", &["{\"query\": \"x\"}"]));
    first.extend(message_end("tool_use", 30));
    let outcome = run(
        ThinkingLevel::Medium,
        vec![Reply::sse(frames(&first)), text_reply(&["42."])],
    )
    .await;
    assert_eq!(outcome.result.as_ref().unwrap().text, "42.");
    assert_eq!(streamed(&outcome.events).1, "I should look it up.");
    let Record::Assistant(call_turn) = &outcome.records[1] else {
        panic!()
    };
    assert_eq!(
        call_turn.content[0],
        AssistantContent::Thinking {
            text: "I should look it up.".into(),
            signature: Some("EqQBCgIYAhIM".into()),
            id: None,
        }
    );
    for request in &outcome.requests {
        assert_anthropic_request(request);
        assert_eq!(
            request.body["thinking"],
            json!({"type": "enabled", "budget_tokens": 8192})
        );
    }
    assert_eq!(
        outcome.requests[1].body["messages"][1]["content"][0],
        json!({"type": "thinking", "thinking": "I should look it up.", "signature": "EqQBCgIYAhIM"})
    );
}

#[tokio::test]
async fn an_error_event_after_text_fails_the_turn_and_stores_nothing_of_it() {
    let mut out = vec![message_start(10, 0, 0)];
    out.extend(text_block(0, &["Half an"]));
    out.push(event(
        &json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    ));
    let outcome = run(ThinkingLevel::Off, vec![Reply::sse(frames(&out))]).await;
    match &outcome.result {
        Err(FlueError::Provider {
            message,
            retryable: true,
            status: None,
            ..
        }) => assert_eq!(message, "Overloaded"),
        other => panic!("expected a retryable provider error, got {other:?}"),
    }
    assert_eq!(outcome.requests.len(), 1);
    // No half turn is stored; the input `message_start` reported is (a failed turn).
    assert_eq!(roles(&outcome.records), ["user", "failed_turn"]);
    assert_eq!(failed_input(&outcome), 10);
}

#[tokio::test]
async fn overload_before_any_output_is_retried() {
    let overloaded_event = Reply::sse(frames(&[
        message_start(10, 0, 0),
        event(
            &json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ),
    ]));
    let overloaded_status = Reply::json(
        529,
        &json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    )
    .with_header("retry-after-ms", "1");
    let outcome = run(
        ThinkingLevel::Off,
        vec![
            overloaded_event,
            overloaded_status,
            text_reply(&["made it"]),
        ],
    )
    .await;
    assert_eq!(outcome.result.as_ref().unwrap().text, "made it");
    assert_eq!(outcome.requests.len(), 3);
    assert_eq!(roles(&outcome.records), ["user", "assistant"]);
}

#[tokio::test]
async fn a_prompt_too_long_is_a_context_overflow() {
    let outcome = run(
        ThinkingLevel::Off,
        vec![Reply::json(
            400,
            &json!({"type": "error", "error": {
                "type": "invalid_request_error",
                "message": "prompt is too long: 1000201 tokens > 1000000 maximum",
            }}),
        )],
    )
    .await;
    let error = outcome.result.unwrap_err();
    assert_eq!(error.kind(), "context_overflow");
    assert_eq!(
        error.to_string(),
        "model provider \"anthropic\": the conversation exceeds the model's context window: \
         prompt is too long: 1000201 tokens > 1000000 maximum; compact the session or use a \
         model with a larger context window"
    );
}

#[tokio::test]
async fn a_stream_without_message_stop_stores_no_half_message() {
    let mut out = vec![message_start(10, 0, 0)];
    out.extend(text_block(0, &["Never finished"]));
    let outcome = run(
        ThinkingLevel::Off,
        vec![Reply::sse(frames(&out)), text_reply(&["unused"])],
    )
    .await;
    match &outcome.result {
        Err(FlueError::Provider { message, .. }) => assert_eq!(
            message,
            "the response stream ended before the model finished its turn"
        ),
        other => panic!("expected a provider error, got {other:?}"),
    }
    // Text was shown, so the turn is not repeated.
    assert_eq!(outcome.requests.len(), 1);
    // No half turn is stored; the input `message_start` reported is (a failed turn).
    assert_eq!(roles(&outcome.records), ["user", "failed_turn"]);
    assert_eq!(failed_input(&outcome), 10);
}

#[tokio::test]
async fn malformed_tool_input_becomes_a_tool_error() {
    let mut first = vec![message_start(10, 0, 0)];
    first.extend(tool_block(0, "toolu_1", &["{\"query\": "]));
    first.extend(message_end("tool_use", 5));
    let outcome = run(
        ThinkingLevel::Off,
        vec![Reply::sse(frames(&first)), text_reply(&["Sorry."])],
    )
    .await;
    assert_eq!(outcome.result.as_ref().unwrap().text, "Sorry.");
    let results = tool_results(&outcome.records);
    assert_eq!(results[0].2.as_deref(), Some("invalid_input"));
    for request in &outcome.requests {
        assert_anthropic_request(request);
    }
    // The call goes back with an empty input object; the result explains.
    assert_eq!(
        outcome.requests[1].body["messages"][1]["content"][0]["input"],
        json!({})
    );
}

#[tokio::test]
async fn a_200_mb_answer_is_refused_at_the_default_limit_and_stores_nothing_of_it() {
    let piece = "x".repeat(64 * 1024);
    let prefix = frames(&[
        message_start(20, 0, 0),
        block_start(0, &json!({"type": "text", "text": ""})),
    ]);
    let outcome = run(
        ThinkingLevel::Off,
        vec![Reply::Endless {
            prefix,
            frame: delta(0, &json!({"type": "text_delta", "text": piece})),
            total_bytes: 200 * 1024 * 1024,
        }],
    )
    .await;
    let Err(FlueError::Provider {
        message, retryable, ..
    }) = &outcome.result
    else {
        panic!("expected a provider error, got {:?}", outcome.result);
    };
    assert!(message.contains("max_turn_bytes"), "{message}");
    assert!(!retryable);
    assert_eq!(outcome.requests.len(), 1);
    // No half turn is stored; the input `message_start` reported is (a failed turn).
    assert_eq!(roles(&outcome.records), ["user", "failed_turn"]);
    assert_eq!(failed_input(&outcome), 20);
}

#[tokio::test]
async fn a_stream_that_stalls_mid_answer_fails_and_stores_nothing_of_it() {
    let mut partial = vec![message_start(20, 0, 0)];
    partial.push(block_start(0, &json!({"type": "text", "text": ""})));
    partial.push(delta(0, &json!({"type": "text_delta", "text": "Half an"})));
    let config = builtin("anthropic").with_limits(
        flue_providers::StreamLimits::default()
            .with_idle_timeout(std::time::Duration::from_millis(300)),
    );
    let outcome = check(
        config,
        MODEL,
        ThinkingLevel::Off,
        vec![Reply::Stall {
            body: frames(&partial),
        }],
    )
    .await;
    let Err(FlueError::Provider {
        message, retryable, ..
    }) = &outcome.result
    else {
        panic!("expected a provider error, got {:?}", outcome.result);
    };
    assert!(message.contains("idle_timeout_ms"), "{message}");
    assert!(retryable);
    assert_eq!(outcome.requests.len(), 1);
    // No half turn is stored; the input `message_start` reported is (a failed turn).
    assert_eq!(roles(&outcome.records), ["user", "failed_turn"]);
    assert_eq!(failed_input(&outcome), 20);
}

/// The input tokens of the stored failed turn.
fn failed_input(outcome: &Outcome) -> u64 {
    failed_turns(&outcome.records)[0].usage.input_tokens
}
