//! OpenAI Chat Completions over loopback: the documented stream shapes, tool calls in
//! fragments, retries, cut and malformed streams, and what ends up stored.

use std::time::{Duration, Instant};

use flue_core::{
    AssistantContent, Event, FlueError, ModelRef, Record, StopReason, ThinkingLevel, ToolCall,
    Usage,
};
use flue_providers::{ProviderConfig, StreamLimits, WireApi};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::fake_http::Reply;
use crate::providers::{
    Outcome, assert_openai_request, builtin, check, data, fast_retry, frames, roles, streamed,
    tool_results,
};

const MODEL: &str = "gpt-4.1";

/// A chunk with one choice.
fn chunk(delta: &Value, finish_reason: Option<&str>) -> String {
    data(&json!({
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }))
}

/// Text in pieces, a stop, the usage chunk and `[DONE]`.
fn text_stream(pieces: &[&str]) -> String {
    let mut out = vec![chunk(&json!({"role": "assistant", "content": ""}), None)];
    out.extend(
        pieces
            .iter()
            .map(|piece| chunk(&json!({"content": piece}), None)),
    );
    out.push(chunk(&json!({}), Some("stop")));
    out.push(usage(100, 10, 40));
    out.push("data: [DONE]\n\n".to_owned());
    frames(&out)
}

fn usage(prompt: u64, completion: u64, cached: u64) -> String {
    data(&json!({
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
        },
    }))
}

/// A tool-call fragment at `index`.
fn call_delta(index: u64, id: Option<&str>, name: Option<&str>, arguments: &str) -> String {
    let mut call = json!({"index": index, "function": {"arguments": arguments}});
    if let Some(id) = id {
        call["id"] = json!(id);
        call["type"] = json!("function");
    }
    if let Some(name) = name {
        call["function"]["name"] = json!(name);
    }
    chunk(&json!({"tool_calls": [call]}), None)
}

/// Tool calls whose arguments arrive split into pieces of `n_chars`.
fn tool_stream(calls: &[(&str, &str)], n_chars: usize) -> String {
    let mut out = vec![chunk(&json!({"role": "assistant", "content": null}), None)];
    for (index, (id, arguments)) in calls.iter().enumerate() {
        let index = index as u64;
        out.push(call_delta(index, Some(id), Some("lookup"), ""));
        let chars: Vec<char> = arguments.chars().collect();
        for piece in chars.chunks(n_chars) {
            out.push(call_delta(
                index,
                None,
                None,
                &piece.iter().collect::<String>(),
            ));
        }
    }
    out.push(chunk(&json!({}), Some("tool_calls")));
    out.push(usage(50, 20, 0));
    out.push("data: [DONE]\n\n".to_owned());
    frames(&out)
}

async fn run(replies: Vec<Reply>) -> Outcome {
    check(builtin("openai"), MODEL, ThinkingLevel::Off, replies).await
}

fn provider_error(outcome: &Outcome) -> (String, Option<u16>, bool, Option<u64>) {
    match &outcome.result {
        Err(FlueError::Provider {
            message,
            status,
            retryable,
            retry_after_ms,
            ..
        }) => (message.clone(), *status, *retryable, *retry_after_ms),
        other => panic!("expected a provider error, got {other:?}"),
    }
}

#[tokio::test]
async fn text_streams_and_usage_is_priced() {
    let outcome = run(vec![Reply::sse(text_stream(&[
        "The answer ",
        "is ",
        "42.",
    ]))])
    .await;
    let response = outcome.result.as_ref().unwrap();
    assert_eq!(response.text, "The answer is 42.");
    assert_eq!(streamed(&outcome.events).0, "The answer is 42.");
    // gpt-4.1: $2 input, $8 output, $0.5 cached input per million tokens.
    let usage = Usage {
        input_tokens: 60,
        output_tokens: 10,
        cache_read_tokens: 40,
        cache_write_tokens: 0,
        cost_usd: Some((60.0 * 2.0 + 10.0 * 8.0 + 40.0 * 0.5) / 1_000_000.0),
    };
    assert_eq!(response.usage, usage);
    let Some(Record::Assistant(message)) = outcome.records.last() else {
        panic!("no assistant record: {:?}", outcome.records);
    };
    assert_eq!(
        (
            message.content.clone(),
            message.usage,
            message.stop_reason.clone()
        ),
        (
            vec![AssistantContent::Text {
                text: "The answer is 42.".into()
            }],
            usage,
            StopReason::EndTurn
        )
    );
    let [request] = outcome.requests.as_slice() else {
        panic!("expected one request: {:?}", outcome.requests);
    };
    assert_openai_request(request);
    let mut body = request.body.clone();
    let tools = body.as_object_mut().unwrap().remove("tools").unwrap();
    assert_eq!(
        body,
        json!({
            "model": MODEL,
            "messages": [
                {"role": "system", "content": "You answer questions."},
                {"role": "user", "content": "What is the answer?"},
            ],
            "stream": true,
            "stream_options": {"include_usage": true},
            "max_completion_tokens": 32_768,
        })
    );
    assert_eq!(tools[0]["function"]["name"], "lookup");
    assert_eq!(tools[0]["type"], "function");
}

#[tokio::test]
async fn a_tool_call_in_many_fragments_round_trips() {
    let outcome = run(vec![
        Reply::sse(tool_stream(&[("call_a", r#"{"query": "the answer"}"#)], 3)),
        Reply::sse(text_stream(&["It is 42."])),
    ])
    .await;
    assert_eq!(outcome.result.as_ref().unwrap().text, "It is 42.");
    assert_eq!(
        roles(&outcome.records),
        ["user", "assistant", "tool_result", "assistant"]
    );
    let Record::Assistant(call_turn) = &outcome.records[1] else {
        panic!()
    };
    assert_eq!(
        call_turn.content,
        vec![AssistantContent::ToolCall(ToolCall {
            id: "call_a".into(),
            name: "lookup".into(),
            input: json!({"query": "the answer"}),
        })]
    );
    assert_eq!(call_turn.stop_reason, StopReason::ToolUse);
    assert_eq!(
        tool_results(&outcome.records),
        [(
            "call_a".to_owned(),
            r#"{"answer":42,"query":"the answer"}"#.to_owned(),
            None
        )]
    );
    assert_eq!(outcome.requests.len(), 2);
    for request in &outcome.requests {
        assert_openai_request(request);
    }
    let second = &outcome.requests[1].body["messages"];
    assert_eq!(
        second[2],
        json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": "call_a", "type": "function",
            "function": {"name": "lookup", "arguments": r#"{"query":"the answer"}"#},
        }]})
    );
    assert_eq!(
        second[3],
        json!({"role": "tool", "tool_call_id": "call_a", "content": r#"{"answer":42,"query":"the answer"}"#})
    );
}

#[tokio::test]
async fn parallel_tool_calls_interleaved_by_index_all_run() {
    // Two calls whose fragments interleave, as servers stream parallel calls.
    let body = frames(&[
        call_delta(0, Some("call_1"), Some("lookup"), ""),
        call_delta(1, Some("call_2"), Some("lookup"), ""),
        call_delta(0, None, None, r#"{"query":"#),
        call_delta(1, None, None, r#"{"query":"#),
        call_delta(1, None, None, r#""two"}"#),
        call_delta(0, None, None, r#""one"}"#),
        chunk(&json!({}), Some("tool_calls")),
        "data: [DONE]\n\n".to_owned(),
    ]);
    let outcome = run(vec![Reply::sse(body), Reply::sse(text_stream(&["Both."]))]).await;
    assert_eq!(outcome.result.as_ref().unwrap().text, "Both.");
    assert_eq!(
        tool_results(&outcome.records),
        [
            (
                "call_1".to_owned(),
                r#"{"answer":42,"query":"one"}"#.to_owned(),
                None
            ),
            (
                "call_2".to_owned(),
                r#"{"answer":42,"query":"two"}"#.to_owned(),
                None
            ),
        ]
    );
    for request in &outcome.requests {
        assert_openai_request(request);
    }
}

#[tokio::test]
async fn repeated_and_missing_call_ids_are_made_unique_before_anything_is_stored() {
    // Two calls under one id and one without an id (named `call_2` by its index), then, in
    // the next turn, the numbering such servers restart every turn.
    let first = frames(&[
        call_delta(0, Some("call_1"), Some("lookup"), r#"{"query":"one"}"#),
        call_delta(1, Some("call_1"), Some("lookup"), r#"{"query":"two"}"#),
        call_delta(2, None, Some("lookup"), r#"{"query":"three"}"#),
        chunk(&json!({}), Some("tool_calls")),
        "data: [DONE]\n\n".to_owned(),
    ]);
    let second = tool_stream(&[("call_1", r#"{"query":"four"}"#)], 100);
    let outcome = run(vec![
        Reply::sse(first),
        Reply::sse(second),
        Reply::sse(text_stream(&["All four."])),
    ])
    .await;
    assert_eq!(outcome.result.as_ref().unwrap().text, "All four.");
    crate::providers::assert_one_result_per_call(&outcome.records);
    let answered: Vec<(String, String)> = tool_results(&outcome.records)
        .into_iter()
        .map(|(id, content, _)| (id, content))
        .collect();
    let answer = |id: &str, query: &str| {
        (
            id.to_owned(),
            format!(r#"{{"answer":42,"query":"{query}"}}"#),
        )
    };
    assert_eq!(
        answered,
        [
            answer("call_1", "one"),
            answer("call_1_2", "two"),
            answer("call_2", "three"),
            answer("call_1_3", "four"),
        ]
    );
    // Every request pairs each call with exactly one result, under ids that never repeat.
    assert_eq!(outcome.requests.len(), 3);
    for request in &outcome.requests {
        assert_openai_request(request);
    }
    let last = &outcome.requests[2].body["messages"];
    let ids: Vec<&str> = last
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|message| message["tool_call_id"].as_str())
        .collect();
    assert_eq!(ids, ["call_1", "call_1_2", "call_2", "call_1_3"]);
}

#[tokio::test]
async fn malformed_tool_arguments_become_a_tool_error_the_model_retries_from() {
    let outcome = run(vec![
        Reply::sse(tool_stream(
            &[("call_bad", r#"{"query": "unterminated"#)],
            5,
        )),
        Reply::sse(tool_stream(&[("call_good", r#"{"query": "fixed"}"#)], 5)),
        Reply::sse(text_stream(&["Fixed it."])),
    ])
    .await;
    assert_eq!(outcome.result.as_ref().unwrap().text, "Fixed it.");
    let results = tool_results(&outcome.records);
    assert_eq!(results.len(), 2);
    assert_eq!(
        (results[0].0.as_str(), results[0].2.as_deref()),
        ("call_bad", Some("invalid_input"))
    );
    assert!(
        results[0].1.contains(r#"{"query": "unterminated"#),
        "the error quotes the arguments: {}",
        results[0].1
    );
    assert_eq!(results[1].2, None);
    // The broken arguments go back verbatim, answered by the tool error.
    let second = &outcome.requests[1].body["messages"];
    assert_eq!(
        second[2]["tool_calls"][0]["function"]["arguments"],
        json!(r#"{"query": "unterminated"#)
    );
    for request in &outcome.requests {
        assert_openai_request(request);
    }
}

#[tokio::test]
async fn reasoning_text_becomes_thinking_and_effort_is_sent() {
    let body = frames(&[
        chunk(&json!({"reasoning_content": "Let me think. "}), None),
        chunk(&json!({"reasoning_content": "Done."}), None),
        chunk(&json!({"content": "42"}), Some("stop")),
        usage(10, 5, 0),
        "data: [DONE]\n\n".to_owned(),
    ]);
    let outcome = check(
        builtin("openai"),
        "o4-mini",
        ThinkingLevel::High,
        vec![Reply::sse(body)],
    )
    .await;
    assert_eq!(
        streamed(&outcome.events),
        ("42".to_owned(), "Let me think. Done.".to_owned())
    );
    let Some(Record::Assistant(message)) = outcome.records.last() else {
        panic!()
    };
    assert_eq!(
        message.content,
        vec![
            AssistantContent::Thinking {
                text: "Let me think. Done.".into(),
                signature: None,
                id: None,
            },
            AssistantContent::Text { text: "42".into() },
        ]
    );
    assert_eq!(outcome.requests[0].body["reasoning_effort"], "high");
}

#[tokio::test]
async fn an_error_chunk_mid_stream_fails_the_turn_and_stores_nothing() {
    let body = frames(&[
        chunk(&json!({"content": "Half an ans"}), None),
        data(&json!({"error": {"message": "upstream model crashed", "type": "server_error"}})),
    ]);
    let outcome = run(vec![Reply::sse(body)]).await;
    let (message, status, retryable, _) = provider_error(&outcome);
    assert_eq!(
        (message.as_str(), status, retryable),
        ("upstream model crashed", None, true)
    );
    // Text had reached the caller, so the turn is not repeated; only the user message stays.
    assert_eq!(outcome.requests.len(), 1);
    assert_eq!(roles(&outcome.records), ["user"]);
}

#[tokio::test]
async fn rate_limits_are_retried_after_the_wait_the_server_asks() {
    let limited = Reply::json(
        429,
        &json!({"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}),
    )
    .with_header("retry-after", "0");
    let outcome = run(vec![limited, Reply::sse(text_stream(&["ok"]))]).await;
    assert_eq!(outcome.result.as_ref().unwrap().text, "ok");
    assert_eq!(outcome.requests.len(), 2);
    assert_eq!(outcome.requests[0].body, outcome.requests[1].body);
    // Every event reader (the CLI, the console) hears of the retry, with its cause.
    let retries: Vec<&Event> = outcome
        .events
        .iter()
        .filter(|event| matches!(event, Event::ProviderRetry { .. }))
        .collect();
    assert_eq!(
        retries,
        [&Event::ProviderRetry {
            provider: "openai".into(),
            attempt: 1,
            max_retries: 3,
            delay_ms: 0,
            message: "Rate limit reached".into(),
        }]
    );
}

#[tokio::test]
async fn a_wait_longer_than_the_policy_allows_is_returned_not_slept() {
    let limited = Reply::json(429, &json!({"error": {"message": "Try again in a minute"}}))
        .with_header("retry-after", "120");
    let outcome = run(vec![limited]).await;
    assert_eq!(
        provider_error(&outcome),
        (
            "Try again in a minute".to_owned(),
            Some(429),
            true,
            Some(120_000)
        )
    );
    assert_eq!(outcome.requests.len(), 1);
}

#[tokio::test]
async fn server_errors_and_resets_are_retried_then_succeed() {
    let outcome = run(vec![
        Reply::json(500, &json!({"error": {"message": "internal"}})),
        Reply::Close,
        Reply::sse(text_stream(&["recovered"])),
    ])
    .await;
    assert_eq!(outcome.result.as_ref().unwrap().text, "recovered");
    assert_eq!(outcome.requests.len(), 3);
    assert_eq!(roles(&outcome.records), ["user", "assistant"]);
}

#[tokio::test]
async fn retries_stop_after_three() {
    let unavailable = Reply::json(503, &json!({"error": {"message": "unavailable"}}));
    let outcome = run(vec![unavailable; 5]).await;
    assert_eq!(
        provider_error(&outcome),
        ("unavailable".to_owned(), Some(503), true, None)
    );
    assert_eq!(outcome.requests.len(), 4);
}

#[tokio::test]
async fn client_errors_are_not_retried_and_carry_the_providers_message() {
    let outcome = run(vec![Reply::json(
        400,
        &json!({"error": {"message": "Invalid value for 'model'", "type": "invalid_request_error"}}),
    )])
    .await;
    assert_eq!(
        provider_error(&outcome),
        (
            "Invalid value for 'model'".to_owned(),
            Some(400),
            false,
            None
        )
    );
    assert_eq!(outcome.requests.len(), 1);
    assert_eq!(
        outcome.result.unwrap_err().to_string(),
        "model provider \"openai\" failed (HTTP 400): Invalid value for 'model'"
    );
}

#[tokio::test]
async fn a_rejected_key_echoed_by_the_server_is_redacted() {
    // Servers quote the key they refused; the check helper asserts it leaks nowhere.
    let outcome = run(vec![Reply::json(
        401,
        &json!({"error": {"message": format!("Incorrect API key provided: {}", crate::providers::KEY), "code": "invalid_api_key"}}),
    )])
    .await;
    assert_eq!(
        provider_error(&outcome),
        (
            "Incorrect API key provided: [redacted]".to_owned(),
            Some(401),
            false,
            None
        )
    );
}

#[tokio::test]
async fn a_context_overflow_is_its_own_error() {
    let outcome = run(vec![Reply::json(
        400,
        &json!({"error": {
            "message": "This model's maximum context length is 1047576 tokens. However, your messages resulted in 2000000 tokens.",
            "type": "invalid_request_error",
            "code": "context_length_exceeded",
        }}),
    )])
    .await;
    let error = outcome.result.unwrap_err();
    assert_eq!(error.kind(), "context_overflow");
    assert!(
        matches!(&error, FlueError::ContextOverflow { provider, .. } if provider == "openai"),
        "{error:?}"
    );
    assert_eq!(outcome.requests.len(), 1);
}

#[tokio::test]
async fn a_stream_cut_mid_response_stores_no_half_message() {
    let partial = frames(&[
        chunk(&json!({"content": "This answer will never"}), None),
        chunk(&json!({"content": " finish"}), None),
    ]);
    let outcome = run(vec![Reply::Cut { body: partial }]).await;
    let (message, _, retryable, _) = provider_error(&outcome);
    assert!(
        message.starts_with("the response stream was cut"),
        "{message}"
    );
    assert!(retryable);
    assert_eq!(roles(&outcome.records), ["user"]);
    assert_eq!(outcome.requests.len(), 1);
}

#[tokio::test]
async fn a_stream_that_ends_early_is_retried_when_nothing_was_shown() {
    // Closed cleanly before any content and without a finish: nothing was shown, so retry.
    let outcome = run(vec![
        Reply::sse(chunk(&json!({"role": "assistant"}), None)),
        Reply::sse(text_stream(&["second try"])),
    ])
    .await;
    assert_eq!(outcome.result.as_ref().unwrap().text, "second try");
    assert_eq!(outcome.requests.len(), 2);
}

#[tokio::test]
async fn a_malformed_frame_fails_without_storing_anything() {
    let body = frames(&[
        chunk(&json!({"content": "fine so far"}), None),
        "data: {\"choices\": [oops\n\n".to_owned(),
    ]);
    let outcome = run(vec![Reply::sse(body)]).await;
    let (message, _, retryable, _) = provider_error(&outcome);
    assert!(
        message.starts_with("malformed chunk in the event stream"),
        "{message}"
    );
    assert!(!retryable);
    assert_eq!(roles(&outcome.records), ["user"]);
}

#[tokio::test]
async fn a_missing_key_fails_before_any_request_and_names_the_variable() {
    let config = ProviderConfig::builtin("openai").unwrap();
    let provider = config.build().unwrap();
    let error = provider.check_model(MODEL).await.unwrap_err();
    assert_eq!(error.kind(), "missing_api_key");
    assert_eq!(
        error.to_string(),
        "model provider \"openai\" needs an API key: set OPENAI_API_KEY in the environment or in .env"
    );
}

#[tokio::test]
async fn a_compatible_server_without_key_or_catalog_works_with_defaults() {
    let config = ProviderConfig::new("local", WireApi::OpenAiCompletions, "http://unused")
        .with_header("x-team", "docs")
        .with_retry(fast_retry());
    let outcome = check(
        config,
        "some-model",
        ThinkingLevel::High,
        vec![Reply::sse(text_stream(&["hi"]))],
    )
    .await;
    assert_eq!(outcome.result.as_ref().unwrap().text, "hi");
    let request = &outcome.requests[0];
    assert_eq!(request.headers.get("authorization"), None);
    assert_eq!(
        request.headers.get("x-team").map(String::as_str),
        Some("docs")
    );
    // Conservative defaults: 8192 output tokens, no reasoning effort, no price.
    assert_eq!(request.body["max_completion_tokens"], 8192);
    assert_eq!(request.body.get("reasoning_effort"), None);
    let Some(Record::Assistant(message)) = outcome.records.last() else {
        panic!()
    };
    assert_eq!(
        (message.model.clone(), message.usage.cost_usd),
        (
            ModelRef {
                provider: "local".into(),
                id: "some-model".into()
            },
            None
        )
    );
}

/// Timeouts short enough for tests.
fn short_timeouts() -> StreamLimits {
    StreamLimits::default()
        .with_first_byte_timeout(Duration::from_millis(300))
        .with_idle_timeout(Duration::from_millis(300))
}

async fn run_with(limits: StreamLimits, replies: Vec<Reply>) -> Outcome {
    check(
        builtin("openai").with_limits(limits),
        MODEL,
        ThinkingLevel::Off,
        replies,
    )
    .await
}

#[tokio::test]
async fn a_server_that_does_not_answer_in_time_is_retried() {
    // A first-byte timeout long enough for the answering server to make it on a busy machine.
    let outcome = run_with(
        short_timeouts().with_first_byte_timeout(Duration::from_millis(1500)),
        vec![
            Reply::Silent,
            Reply::Silent,
            Reply::sse(text_stream(&["at last"])),
        ],
    )
    .await;
    assert_eq!(outcome.result.as_ref().unwrap().text, "at last");
    assert_eq!(outcome.requests.len(), 3);
}

#[tokio::test]
async fn a_server_that_never_answers_fails_retryable_and_stores_nothing() {
    let started = Instant::now();
    let outcome = run_with(short_timeouts(), vec![Reply::Silent; 4]).await;
    let (message, status, retryable, _) = provider_error(&outcome);
    assert!(message.contains("first_byte_timeout_ms"), "{message}");
    assert_eq!((status, retryable), (None, true));
    assert_eq!(roles(&outcome.records), ["user"]);
    // The first attempt and three retries, each cut at its timeout.
    assert_eq!(outcome.requests.len(), 4);
    // Not waiting for ever (a generous bound: a busy machine is slow).
    assert!(started.elapsed() < Duration::from_secs(60));
}

#[tokio::test]
async fn a_stream_that_stalls_before_any_output_is_retried() {
    let opening = frames(&[chunk(&json!({"role": "assistant", "content": ""}), None)]);
    // A first-byte timeout long enough for the second server to make it on a busy machine.
    let outcome = run_with(
        short_timeouts().with_first_byte_timeout(Duration::from_millis(1500)),
        vec![
            Reply::Stall { body: opening },
            Reply::sse(text_stream(&["second try"])),
        ],
    )
    .await;
    assert_eq!(outcome.result.as_ref().unwrap().text, "second try");
    assert_eq!(outcome.requests.len(), 2);
}

#[tokio::test]
async fn a_stream_that_stalls_mid_answer_fails_and_stores_nothing() {
    let partial = frames(&[
        chunk(&json!({"role": "assistant", "content": ""}), None),
        chunk(&json!({"content": "Half an answer"}), None),
    ]);
    let outcome = run_with(short_timeouts(), vec![Reply::Stall { body: partial }]).await;
    let (message, _, retryable, _) = provider_error(&outcome);
    assert!(message.contains("idle_timeout_ms"), "{message}");
    // Retryable in kind, but not retried: part of the turn was already shown.
    assert!(retryable);
    assert_eq!(outcome.requests.len(), 1);
    assert_eq!(roles(&outcome.records), ["user"]);
}

#[tokio::test]
async fn a_200_mb_answer_is_refused_at_the_default_limit_and_stores_nothing() {
    let piece = "x".repeat(64 * 1024);
    let outcome = run(vec![Reply::Endless {
        prefix: frames(&[chunk(&json!({"role": "assistant", "content": ""}), None)]),
        frame: chunk(&json!({"content": piece}), None),
        total_bytes: 200 * 1024 * 1024,
    }])
    .await;
    let (message, _, retryable, _) = provider_error(&outcome);
    assert!(message.contains("max_turn_bytes"), "{message}");
    assert!(!retryable);
    assert_eq!(outcome.requests.len(), 1);
    assert_eq!(roles(&outcome.records), ["user"]);
}

#[tokio::test]
async fn tool_call_arguments_count_toward_the_turn_limit() {
    let piece = "y".repeat(16 * 1024);
    let outcome = run_with(
        StreamLimits::default().with_max_turn_bytes(1024 * 1024),
        vec![Reply::Endless {
            prefix: call_delta(0, Some("call_big"), Some("lookup"), "{\"query\": \""),
            frame: call_delta(0, None, None, &piece),
            total_bytes: 8 * 1024 * 1024,
        }],
    )
    .await;
    let (message, _, retryable, _) = provider_error(&outcome);
    assert!(message.contains("exceeded 1048576 bytes"), "{message}");
    assert!(!retryable);
    assert_eq!(roles(&outcome.records), ["user"]);
}

#[tokio::test]
async fn a_connection_that_is_never_accepted_times_out_retryable() {
    // A loopback listener whose accept queue is full: the kernel drops further connection
    // attempts, so connecting hangs until the connect timeout.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(1).unwrap();
    let address = listener.local_addr().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..4 {
        if let Ok(Ok(stream)) = tokio::time::timeout(
            Duration::from_millis(200),
            tokio::net::TcpStream::connect(address),
        )
        .await
        {
            fillers.push(stream);
        }
    }
    let provider = builtin("openai")
        .with_limits(StreamLimits::default().with_connect_timeout(Duration::from_millis(300)))
        .with_base_url(format!("http://{address}/v1"))
        .build()
        .unwrap();
    let started = Instant::now();
    let err = provider
        .stream_turn(
            flue_core::model::ModelRequest {
                model: MODEL,
                system: "You answer.",
                messages: &[],
                tools: &[],
                thinking: ThinkingLevel::Off,
                max_output_tokens: 100,
            },
            &flue_core::model::TurnSink::discard(),
        )
        .await
        .unwrap_err();
    let FlueError::Provider { retryable, .. } = &err else {
        panic!("expected a provider error, got {err:?}");
    };
    assert!(*retryable, "{err}");
    assert!(err.to_string().contains("cannot reach"), "{err}");
    eprintln!("CONNECT ERR: {err}");
    // Four attempts, each cut at 300 ms, and short retry delays (a generous bound: a busy
    // machine is slow).
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    drop(listener);
}

#[tokio::test]
async fn a_stream_kept_alive_forever_ends_at_the_turn_timeout() {
    let started = Instant::now();
    // Only the turn timeout is short: a busy machine may well hold a keep-alive or the first
    // byte back longer than a short idle or first-byte timeout.
    let outcome = run_with(
        StreamLimits::default().with_turn_timeout(Duration::from_millis(800)),
        vec![Reply::Trickle {
            prefix: frames(&[chunk(&json!({"role": "assistant", "content": ""}), None)]),
            // A keep-alive comment well within the idle timeout, forever.
            frame: ": keep-alive\n\n".to_owned(),
            every: Duration::from_millis(50),
        }],
    )
    .await;
    let (message, _, retryable, _) = provider_error(&outcome);
    assert!(message.contains("turn_timeout_ms"), "{message}");
    assert!(!retryable);
    assert_eq!(outcome.requests.len(), 1);
    assert_eq!(roles(&outcome.records), ["user"]);
    assert!(started.elapsed() < Duration::from_secs(60));
}
