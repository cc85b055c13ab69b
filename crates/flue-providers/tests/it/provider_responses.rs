//! The OpenAI Responses API against streams OpenAI really sent (tests/corpus/openai-responses,
//! see its PROVENANCE.md), replayed over loopback in irregular chunks through a real harness:
//! text, tool loops with encrypted reasoning sent back, parallel calls, refusals, incomplete
//! and failed responses, errors, cut streams, usage and cost, and every request body checked
//! against OpenAI's published schema for `POST /responses`.

use flue_core::{
    AssistantContent, AssistantMessage, FlueError, Record, StopReason, ThinkingLevel,
    ToolDefinition, ToolError, Usage,
};
use flue_providers::{ApiKey, ProviderConfig, WireApi};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::fake_http::{Recorded, Reply};
use crate::providers::{
    self, KEY, Outcome, RESPONSES_SCHEMA, failed_turns, fast_retry, operation_usage, roles,
    streamed, tool_results,
};

/// The corpus folder.
const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus/openai-responses");

/// A recorded stream, replayed in pieces of irregular sizes (the same every run).
fn recorded(name: &str) -> Reply {
    let body = std::fs::read(format!("{CORPUS}/{name}"))
        .unwrap_or_else(|err| panic!("corpus file {name}: {err}"));
    Reply::pieces(body, &[1, 7, 3, 61, 2, 293, 13, 5, 1024, 17])
}

/// The built-in `openai` provider with the test key and fast retries.
fn openai() -> ProviderConfig {
    ProviderConfig::builtin("openai")
        .unwrap()
        .with_api_key(ApiKey::new(KEY))
        .with_retry(fast_retry())
}

/// `calculator({a, b, op})`, the tool of the recorded tool loop.
fn calculator() -> ToolDefinition {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Input {
        a: f64,
        b: f64,
        op: String,
    }
    ToolDefinition::from_fn(
        "calculator",
        "A minimal calculator for basic arithmetic. Call it once per step.",
        |input: Input, _ctx| async move {
            let value = match input.op.as_str() {
                "add" => input.a + input.b,
                "subtract" => input.a - input.b,
                "multiply" => input.a * input.b,
                _ => input.a / input.b,
            };
            Ok::<_, ToolError>(json!(value))
        },
    )
    .unwrap()
}

/// `lookupVerificationCode({label})`, the tool of the recorded function call.
fn lookup_verification_code() -> ToolDefinition {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Input {
        label: String,
    }
    ToolDefinition::from_fn(
        "lookupVerificationCode",
        "Looks up the verification code of a label.",
        |input: Input, _ctx| async move {
            Ok::<_, ToolError>(json!({"label": input.label, "code": "blue-42"}))
        },
    )
    .unwrap()
}

/// Sends one prompt to `model` of `config` with `tools`, pointed at a server playing
/// `replies`; checks every request (OpenAI's schema among the checks).
async fn run(
    config: ProviderConfig,
    model: &str,
    thinking: ThinkingLevel,
    tools: Vec<ToolDefinition>,
    replies: Vec<Reply>,
) -> Outcome {
    let outcome = providers::run(config, model, thinking, tools, replies).await;
    for request in &outcome.requests {
        assert_responses_request(request);
    }
    outcome
}

/// The request goes to `/v1/responses` with the key, streams, stores nothing on OpenAI's side,
/// and answers every `function_call` exactly once, after it (the shared `run` checked it
/// against OpenAI's schema).
fn assert_responses_request(request: &Recorded) {
    assert_eq!(request.path, "/v1/responses");
    assert_eq!(
        request.headers.get("authorization").map(String::as_str),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(request.body["stream"], json!(true));
    assert_eq!(request.body["store"], json!(false));
    let mut calls = Vec::new();
    let mut answered = std::collections::HashSet::new();
    for item in request.body["input"].as_array().unwrap() {
        match item["type"].as_str().unwrap() {
            "function_call" => calls.push(item["call_id"].as_str().unwrap().to_owned()),
            "function_call_output" => {
                let id = item["call_id"].as_str().unwrap();
                assert!(calls.iter().any(|call| call == id), "{id} answers no call");
                assert!(answered.insert(id.to_owned()), "{id} answered twice");
            }
            _ => {}
        }
    }
    assert_eq!(answered.len(), calls.len(), "unanswered calls: {calls:?}");
}

fn assistants(records: &[Record]) -> Vec<&AssistantMessage> {
    records
        .iter()
        .filter_map(|record| match record {
            Record::Assistant(message) => Some(message),
            _ => None,
        })
        .collect()
}

/// The `data:` objects of a corpus file.
fn corpus_events(name: &str) -> Vec<Value> {
    std::fs::read_to_string(format!("{CORPUS}/{name}"))
        .unwrap()
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect()
}

/// The finished output item of type `kind` in a corpus file.
fn done_item(name: &str, kind: &str) -> Value {
    corpus_events(name)
        .into_iter()
        .filter(|event| event["type"] == "response.output_item.done")
        .map(|event| event["item"].clone())
        .find(|item| item["type"] == kind)
        .unwrap()
}

#[tokio::test]
async fn text_with_cached_input_is_priced_as_cached() {
    // gpt-5.1-codex is served only over the Responses API: the built-in provider sends it
    // there by itself.
    let outcome = run(
        openai(),
        "gpt-5.1-codex",
        ThinkingLevel::Off,
        Vec::new(),
        vec![recorded("text-cached-usage.sse")],
    )
    .await;
    let response = outcome.result.as_ref().unwrap();
    let first = "Got it — I’ll quickly check reliable, up-to-date sources for AI headlines";
    assert!(response.text.starts_with(first), "{}", response.text);
    assert!(
        response
            .text
            .ends_with("investor-grade morning brief with timestamps."),
        "{}",
        response.text
    );
    assert_eq!(streamed(&outcome.events).0, response.text);
    // 7112 input tokens of which 3072 cached, 463 output tokens (64 of them reasoning), at
    // gpt-5.1-codex's $1.25 / $10 / $0.125 per million.
    let usage = Usage {
        input_tokens: 7112 - 3072,
        output_tokens: 463,
        cache_read_tokens: 3072,
        cache_write_tokens: 0,
        cost_usd: Some((4040.0 * 1.25 + 463.0 * 10.0 + 3072.0 * 0.125) / 1_000_000.0),
    };
    assert_eq!(response.usage, usage);
    let [message] = assistants(&outcome.records)[..] else {
        panic!("{:?}", outcome.records)
    };
    assert_eq!(message.stop_reason, StopReason::EndTurn);
    assert_eq!(message.usage, usage);
    // Two message items, kept as two text parts.
    assert_eq!(message.content.len(), 2);
    let [request] = outcome.requests.as_slice() else {
        panic!()
    };
    let mut body = request.body.clone();
    body.as_object_mut().unwrap().remove("reasoning");
    assert_eq!(
        body,
        json!({
            "model": "gpt-5.1-codex",
            "instructions": "You answer questions.",
            "input": [{"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "What is the answer?"},
            ]}],
            "stream": true,
            "store": false,
            "include": ["reasoning.encrypted_content"],
            "max_output_tokens": 128_000,
        })
    );
    // This model cannot turn reasoning off: `off` leaves the effort to the model.
    assert_eq!(request.body["reasoning"], json!({"summary": "auto"}));
}

#[tokio::test]
async fn a_stateless_tool_loop_sends_reasoning_back_unchanged() {
    let outcome = run(
        openai().with_api(WireApi::OpenAiResponses),
        "gpt-5.1-codex-max",
        ThinkingLevel::High,
        vec![calculator()],
        (1..=4)
            .map(|turn| recorded(&format!("reasoning-tool-loop.{turn}.sse")))
            .collect(),
    )
    .await;
    let response = outcome.result.as_ref().unwrap();
    assert_eq!(response.text, "The final result is **570**.");
    assert_eq!(
        roles(&outcome.records),
        [
            "user",
            "assistant",
            "tool_result",
            "assistant",
            "tool_result",
            "assistant",
            "tool_result",
            "assistant"
        ]
    );
    // (12 + 7) * 3 * 10, one call at a time.
    let results: Vec<String> = tool_results(&outcome.records)
        .into_iter()
        .map(|(id, content, error)| {
            assert_eq!(error, None);
            format!("{id}={content}")
        })
        .collect();
    assert_eq!(
        results,
        [
            "call_AB6AaRZ1FYZB2RwS6A5vbdqn=19.0",
            "call_Q6pW65MUgW9vF59BmItYGos3=57.0",
            "call_Zl5vIMnD7dVAjgU6FkhmiCZh=570.0"
        ]
    );
    // The reasoning item is stored as it finished: its summary, its id, and the encrypted
    // content of `output_item.done` (not the partial one of `added`).
    let reasoning = done_item("reasoning-tool-loop.1.sse", "reasoning");
    let summary = reasoning["summary"][0]["text"].as_str().unwrap();
    let first_turn = assistants(&outcome.records)[0];
    assert_eq!(
        first_turn.content[0],
        AssistantContent::Thinking {
            text: summary.to_owned(),
            signature: Some(reasoning["encrypted_content"].as_str().unwrap().to_owned()),
            id: Some(reasoning["id"].as_str().unwrap().to_owned()),
        }
    );
    assert_eq!(first_turn.stop_reason, StopReason::ToolUse);
    assert_eq!(first_turn.usage.input_tokens, 134);
    assert_eq!(first_turn.usage.output_tokens, 28);
    // The summary streamed as thinking.
    assert_eq!(streamed(&outcome.events).1, summary);
    // Every later request carries the reasoning item unchanged, before its call, and each
    // call's output paired by call_id.
    assert_eq!(outcome.requests.len(), 4);
    let first_request = &outcome.requests[0].body;
    assert_eq!(
        first_request["reasoning"],
        json!({"effort": "high", "summary": "auto"})
    );
    let second = outcome.requests[1].body["input"].as_array().unwrap();
    assert_eq!(
        second[1..],
        [
            json!({
                "type": "reasoning",
                "id": reasoning["id"],
                "summary": reasoning["summary"],
                "encrypted_content": reasoning["encrypted_content"],
            }),
            json!({
                "type": "function_call",
                "call_id": "call_AB6AaRZ1FYZB2RwS6A5vbdqn",
                "name": "calculator",
                "arguments": r#"{"a":12,"b":7,"op":"add"}"#,
            }),
            json!({
                "type": "function_call_output",
                "call_id": "call_AB6AaRZ1FYZB2RwS6A5vbdqn",
                "output": "19.0",
            }),
        ]
    );
    let last = outcome.requests[3].body["input"].as_array().unwrap();
    assert_eq!(last[1], second[1]);
    let kinds: Vec<&str> = last
        .iter()
        .map(|item| item["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "message",
            "reasoning",
            "function_call",
            "function_call_output",
            "function_call",
            "function_call_output",
            "function_call",
            "function_call_output"
        ]
    );
}

#[tokio::test]
async fn reasoning_without_a_summary_still_goes_back_with_its_call() {
    let outcome = run(
        openai().with_api(WireApi::OpenAiResponses),
        "gpt-5.2",
        ThinkingLevel::Medium,
        vec![lookup_verification_code()],
        vec![
            recorded("function-call.1.sse"),
            recorded("function-call.2.sse"),
        ],
    )
    .await;
    let response = outcome.result.as_ref().unwrap();
    assert_eq!(
        response.text,
        "Verification code for issue-11239 is blue-42."
    );
    let reasoning = done_item("function-call.1.sse", "reasoning");
    let call_turn = assistants(&outcome.records)[0];
    assert_eq!(
        call_turn.content[0],
        AssistantContent::Thinking {
            text: String::new(),
            signature: Some(reasoning["encrypted_content"].as_str().unwrap().to_owned()),
            id: Some(reasoning["id"].as_str().unwrap().to_owned()),
        }
    );
    let (_, output, _) = &tool_results(&outcome.records)[0];
    let second = outcome.requests[1].body["input"].as_array().unwrap();
    assert_eq!(
        second[1],
        json!({"type": "reasoning", "id": reasoning["id"], "summary": [],
               "encrypted_content": reasoning["encrypted_content"]})
    );
    assert_eq!(
        second[2..],
        [
            json!({"type": "function_call", "call_id": "call_wMUhph1s1bedjPJraJvGw62X",
                   "name": "lookupVerificationCode", "arguments": r#"{"label":"issue-11239"}"#}),
            json!({"type": "function_call_output", "call_id": "call_wMUhph1s1bedjPJraJvGw62X",
                   "output": output}),
        ]
    );
    assert_eq!(outcome.requests[1].body["reasoning"]["effort"], "medium");
}

#[tokio::test]
async fn parallel_calls_all_run_and_go_back_paired() {
    let outcome = run(
        openai().with_api(WireApi::OpenAiResponses),
        "gpt-5.1-codex-max",
        ThinkingLevel::High,
        vec![calculator()],
        vec![
            recorded("parallel-calls.sse"),
            recorded("reasoning-tool-loop.4.sse"),
        ],
    )
    .await;
    assert_eq!(
        outcome.result.as_ref().unwrap().text,
        "The final result is **570**."
    );
    let results: Vec<(String, String)> = tool_results(&outcome.records)
        .into_iter()
        .map(|(id, content, _)| (id, content))
        .collect();
    assert_eq!(
        results,
        [
            (
                "call_Q6pW65MUgW9vF59BmItYGos3".to_owned(),
                "57.0".to_owned()
            ),
            (
                "call_Zl5vIMnD7dVAjgU6FkhmiCZh".to_owned(),
                "570.0".to_owned()
            ),
        ]
    );
    let second = outcome.requests[1].body["input"].as_array().unwrap();
    let items: Vec<(String, String)> = second[1..]
        .iter()
        .map(|item| {
            (
                item["type"].as_str().unwrap().to_owned(),
                item["call_id"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        items,
        [
            (
                "function_call".into(),
                "call_Q6pW65MUgW9vF59BmItYGos3".into()
            ),
            (
                "function_call".into(),
                "call_Zl5vIMnD7dVAjgU6FkhmiCZh".into()
            ),
            (
                "function_call_output".into(),
                "call_Q6pW65MUgW9vF59BmItYGos3".into()
            ),
            (
                "function_call_output".into(),
                "call_Zl5vIMnD7dVAjgU6FkhmiCZh".into()
            ),
        ]
    );
}

/// The last assistant message of an outcome that succeeded.
fn last_turn(outcome: &Outcome) -> &AssistantMessage {
    outcome.result.as_ref().unwrap();
    assistants(&outcome.records).pop().unwrap()
}

#[tokio::test]
async fn a_refusal_is_stored_as_a_refusal_with_its_own_stop_reason() {
    let outcome = run(
        openai().with_api(WireApi::OpenAiResponses),
        "gpt-4.1",
        ThinkingLevel::Off,
        Vec::new(),
        vec![recorded("refusal.sse")],
    )
    .await;
    // A refusal fails the operation with the model's words; the stored turn keeps them.
    match &outcome.result {
        Err(FlueError::ModelStopped {
            reason: StopReason::Refusal,
            refusal: Some(refusal),
            ..
        }) => assert_eq!(refusal, "Verification code for issue-11239 is blue-42."),
        other => panic!("expected a refusal, got {other:?}"),
    }
    let message = assistants(&outcome.records).pop().unwrap();
    assert_eq!(
        message.content,
        vec![AssistantContent::Refusal {
            text: "Verification code for issue-11239 is blue-42.".into()
        }]
    );
    assert_eq!(message.stop_reason, StopReason::Refusal);
    // No reasoning fields for a model that does not reason.
    assert!(outcome.requests[0].body.get("reasoning").is_none());
}

#[tokio::test]
async fn incomplete_responses_say_why() {
    for (file, reason) in [
        ("incomplete-max-output-tokens.sse", StopReason::MaxTokens),
        ("incomplete-content-filter.sse", StopReason::ContentFilter),
    ] {
        let outcome = run(
            openai().with_api(WireApi::OpenAiResponses),
            "gpt-4.1",
            ThinkingLevel::Off,
            Vec::new(),
            vec![recorded(file)],
        )
        .await;
        // An answer cut at the limit completes (noted as cut); a filtered one fails.
        let as_expected = match (&reason, &outcome.result) {
            (StopReason::MaxTokens, result) => result.is_ok(),
            (StopReason::ContentFilter, result) => matches!(
                result,
                Err(FlueError::ModelStopped {
                    reason: StopReason::ContentFilter,
                    ..
                })
            ),
            _ => false,
        };
        assert!(as_expected, "{file}: {:?}", outcome.result);
        let message = assistants(&outcome.records).pop().unwrap();
        assert_eq!(message.stop_reason, reason, "{file}");
        assert_eq!(
            message.text(),
            "Verification code for issue-11239 is blue-42.",
            "{file}"
        );
        assert_eq!(message.usage.input_tokens, 146, "{file}");
    }
}

fn provider_error(outcome: &Outcome) -> (String, bool) {
    match &outcome.result {
        Err(FlueError::Provider {
            message, retryable, ..
        }) => (message.clone(), *retryable),
        other => panic!("expected a provider error, got {other:?}"),
    }
}

#[tokio::test]
async fn error_events_and_failed_responses_fail_with_the_providers_message() {
    let quota = "You exceeded your current quota, please check your plan and billing details. \
                 For more information on this error, read the docs: \
                 https://platform.openai.com/docs/guides/error-codes/api-errors.";
    for file in ["error-insufficient-quota.sse", "failed.sse"] {
        let outcome = run(
            openai().with_api(WireApi::OpenAiResponses),
            "gpt-5-nano",
            ThinkingLevel::Low,
            Vec::new(),
            vec![recorded(file)],
        )
        .await;
        // A spent quota is not retried, and nothing of the turn is stored.
        assert_eq!(
            provider_error(&outcome),
            (quota.to_owned(), false),
            "{file}"
        );
        assert_eq!(outcome.requests.len(), 1, "{file}");
        assert_eq!(roles(&outcome.records), ["user"], "{file}");
    }
}

#[tokio::test]
async fn the_usage_of_a_failed_response_is_counted_priced_and_stored() {
    // `response.failed` with the usage OpenAI reported for the failed response.
    let outcome = run(
        openai().with_api(WireApi::OpenAiResponses),
        "gpt-5-nano",
        ThinkingLevel::Low,
        Vec::new(),
        vec![recorded("failed-with-usage.sse")],
    )
    .await;
    assert!(!provider_error(&outcome).1);
    assert_eq!(roles(&outcome.records), ["user", "failed_turn"]);
    let failed = failed_turns(&outcome.records)[0];
    assert_eq!(
        (failed.usage.input_tokens, failed.usage.output_tokens),
        (37, 0)
    );
    // gpt-5-nano: $0.05 per million input tokens.
    let cost = failed.usage.cost_usd.unwrap();
    assert!((cost - 37.0 * 0.05 / 1e6).abs() < 1e-12, "{cost}");
    assert_eq!(failed.error_kind, "provider_error");
    assert!(failed.message.contains("exceeded your current quota"));
    assert_eq!(operation_usage(&outcome.events), failed.usage);
}

#[tokio::test]
async fn context_length_errors_are_context_overflow_in_the_stream_and_before_it() {
    let message = "Your input exceeds the context window of this model. Please adjust your \
                   input and try again.";
    let http_error = Reply::json(
        400,
        &json!({"error": {"message": message, "type": "invalid_request_error",
                          "param": "input", "code": "context_length_exceeded"}}),
    );
    for reply in [recorded("error-context-length.sse"), http_error] {
        let outcome = run(
            openai().with_api(WireApi::OpenAiResponses),
            "gpt-5-nano",
            ThinkingLevel::Low,
            Vec::new(),
            vec![reply],
        )
        .await;
        match &outcome.result {
            Err(FlueError::ContextOverflow {
                provider,
                message: got,
            }) => assert_eq!((provider.as_str(), got.as_str()), ("openai", message)),
            other => panic!("expected a context overflow, got {other:?}"),
        }
        assert_eq!(outcome.requests.len(), 1);
    }
}

#[tokio::test]
async fn a_cut_stream_is_retried_while_nothing_was_shown() {
    // `function-call.2.sse` cut after `response.created`, twice, then whole.
    let whole = std::fs::read_to_string(format!("{CORPUS}/function-call.2.sse")).unwrap();
    let cut = whole[..whole.find("event: response.output_item.added").unwrap()].to_owned();
    let pieces = |body: &str| Reply::pieces(body.as_bytes(), &[3, 100, 7]);
    let outcome = run(
        openai().with_api(WireApi::OpenAiResponses),
        "gpt-4.1",
        ThinkingLevel::Off,
        Vec::new(),
        vec![pieces(&cut), pieces(&cut), pieces(&whole)],
    )
    .await;
    assert_eq!(
        outcome.result.as_ref().unwrap().text,
        "Verification code for issue-11239 is blue-42."
    );
    assert_eq!(outcome.requests.len(), 3);
    assert_eq!(roles(&outcome.records), ["user", "assistant"]);
}

#[tokio::test]
async fn a_recording_cut_before_its_terminal_event_fails_and_stores_nothing() {
    // The recording ends after its finished items but before any terminal event. Its text
    // was shown (from the finished item), so the turn is not repeated.
    let outcome = run(
        openai().with_api(WireApi::OpenAiResponses),
        "o3",
        ThinkingLevel::Medium,
        Vec::new(),
        vec![recorded("cut-after-text.sse")],
    )
    .await;
    let (message, retryable) = provider_error(&outcome);
    assert!(
        message.contains("ended before the model finished"),
        "{message}"
    );
    assert!(retryable);
    assert_eq!(outcome.requests.len(), 1);
    assert_eq!(roles(&outcome.records), ["user"]);
}

#[tokio::test]
async fn a_stream_cut_after_text_was_shown_is_not_repeated() {
    // The same recording with its terminal event left out after deltas went out.
    let mut body = std::fs::read_to_string(format!("{CORPUS}/function-call.2.sse")).unwrap();
    let cut = body.find("event: response.completed").unwrap();
    body.truncate(cut);
    let outcome = run(
        openai().with_api(WireApi::OpenAiResponses),
        "gpt-4.1",
        ThinkingLevel::Off,
        Vec::new(),
        vec![Reply::pieces(body, &[5, 300, 11])],
    )
    .await;
    let (message, _) = provider_error(&outcome);
    assert!(
        message.contains("ended before the model finished"),
        "{message}"
    );
    assert_eq!(outcome.requests.len(), 1);
    assert_eq!(roles(&outcome.records), ["user"]);
    assert_eq!(
        streamed(&outcome.events).0,
        "Verification code for issue-11239 is blue-42."
    );
}

#[tokio::test]
async fn whole_items_without_deltas_still_reach_the_screen() {
    // The cut recording's message came as a finished item only; with a terminal event added
    // (the one of `function-call.2.sse`), its text is shown and stored.
    let mut body = std::fs::read_to_string(format!("{CORPUS}/cut-after-text.sse")).unwrap();
    let completed = std::fs::read_to_string(format!("{CORPUS}/function-call.2.sse")).unwrap();
    let terminal = completed.find("event: response.completed").unwrap();
    body.push_str(&completed[terminal..]);
    let outcome = run(
        openai().with_api(WireApi::OpenAiResponses),
        "o3",
        ThinkingLevel::Medium,
        Vec::new(),
        vec![Reply::pieces(body, &[9, 2, 700])],
    )
    .await;
    let text = outcome.result.as_ref().unwrap().text.clone();
    assert!(
        text.starts_with("Rain doesn’t have to cancel your plans"),
        "{text}"
    );
    assert_eq!(streamed(&outcome.events).0, text);
    let message = last_turn(&outcome);
    assert!(matches!(
        &message.content[0],
        AssistantContent::Thinking { text, signature: Some(_), id: Some(_) } if text.is_empty()
    ));
}

#[tokio::test]
async fn overload_before_any_output_is_retried() {
    let overloaded = Reply::json(
        500,
        &json!({"error": {"message": "The server had an error while processing your request.",
                          "type": "server_error", "code": null}}),
    );
    let outcome = run(
        openai().with_api(WireApi::OpenAiResponses),
        "gpt-4.1",
        ThinkingLevel::Off,
        Vec::new(),
        vec![overloaded, recorded("function-call.2.sse")],
    )
    .await;
    assert_eq!(
        outcome.result.as_ref().unwrap().text,
        "Verification code for issue-11239 is blue-42."
    );
    assert_eq!(outcome.requests.len(), 2);
    assert_eq!(outcome.requests[0].body, outcome.requests[1].body);
}

#[test]
fn the_schema_refuses_bodies_openai_refuses() {
    // The checks above can fail: OpenAI's schema rejects an image without `detail`, a call
    // without its name, an unknown item type and a mistyped limit.
    let valid = json!({"model": "gpt-4.1", "input": [
        {"type": "message", "role": "user", "content": [
            {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "auto"}]},
    ]});
    assert!(RESPONSES_SCHEMA.validator().is_valid(&valid));
    for bad in [
        json!({"model": "gpt-4.1", "input": [{"type": "message", "role": "user", "content": [
            {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}]}),
        json!({"model": "gpt-4.1", "input": [
            {"type": "function_call", "call_id": "call_1", "arguments": "{}"}]}),
        json!({"model": "gpt-4.1", "input": [{"type": "thinking", "text": "hmm"}]}),
        json!({"model": "gpt-4.1", "input": "hi", "max_output_tokens": "many"}),
    ] {
        assert!(
            !RESPONSES_SCHEMA.validator().is_valid(&bad),
            "accepted: {bad}"
        );
    }
}

#[tokio::test]
async fn tokens_written_to_the_cache_are_counted_apart_from_input() {
    // Bedrock's (and Copilot's) Responses endpoints report `cache_write_tokens` inside
    // `input_tokens`, as `cached_tokens` is.
    let outcome = run(
        openai(),
        "gpt-5.1-codex",
        ThinkingLevel::Off,
        Vec::new(),
        vec![recorded("cache-write-usage.sse")],
    )
    .await;
    let usage = outcome.result.unwrap().usage;
    assert_eq!(
        [
            usage.input_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
            usage.output_tokens
        ],
        [7112 - 3072 - 43, 3072, 43, 463]
    );
}

#[tokio::test]
async fn raw_reasoning_is_thinking_and_goes_back_whole_in_the_tool_loop() {
    // LM Studio (glm-4.7-flash) streams its reasoning raw, as `reasoning_text` parts, where
    // OpenAI streams summaries; the item goes back with its raw text as it came.
    let info = flue_core::model::ModelInfo {
        reasoning: true,
        ..flue_core::model::ModelInfo::default()
    };
    let config = ProviderConfig::new("lmstudio", WireApi::OpenAiResponses, "http://unused/v1")
        .with_api_key(ApiKey::new(KEY))
        .with_retry(fast_retry())
        .with_model("zai-org/glm-4.7-flash", info);
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Input {
        location: String,
    }
    let weather = ToolDefinition::from_fn(
        "weather",
        "Get the weather in a location",
        |input: Input, _ctx| async move {
            Ok::<_, ToolError>(json!({"location": input.location, "temperature": 18}))
        },
    )
    .unwrap();
    let outcome = run(
        config,
        "zai-org/glm-4.7-flash",
        ThinkingLevel::Medium,
        vec![weather],
        vec![
            recorded("raw-reasoning-tool-call.sse"),
            recorded("raw-reasoning-answer.sse"),
        ],
    )
    .await;
    outcome.result.unwrap();
    let reasoning = done_item("raw-reasoning-tool-call.sse", "reasoning");
    let raw = reasoning["content"][0]["text"].as_str().unwrap();
    assert!(raw.starts_with("The user is asking for the weather in San Francisco."));
    assert_eq!(streamed(&outcome.events).1, raw);
    let first = assistants(&outcome.records)[0];
    assert_eq!(
        first.content[0],
        AssistantContent::Thinking {
            text: raw.to_owned(),
            signature: None,
            id: None
        }
    );
    assert_eq!(first.stop_reason, StopReason::ToolUse);
    let input = outcome.requests[1].body["input"].as_array().unwrap();
    assert_eq!(
        input[1],
        json!({"type": "reasoning", "id": "rs_3yo6zy4vu4hq6iegqwhn1", "summary": [],
               "content": [{"type": "reasoning_text", "text": raw}]})
    );
    assert_eq!(input[2]["role"], "assistant");
    assert_eq!(input[3]["type"], "function_call");
    assert_eq!(input[3]["call_id"], "call_2025306790300011");
    assert_eq!(input[4]["type"], "function_call_output");
}
