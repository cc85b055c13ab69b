//! Recorded real streams replayed through the real HTTP path.
//!
//! Each file under `tests/corpus/<provider>/` holds the `data:` payloads of one stream a live
//! API sent, one JSON object a line, as the project that recorded it stored them (see
//! `tests/corpus/PROVENANCE.md`: repository, path, commit and license of every file, and the
//! single edit of each derived file). The replay frames them as the API does (Anthropic:
//! `event: <type>` + `data:`; Chat Completions: `data:`, then `data: [DONE]`), and a loopback
//! server sends the bytes in irregular pieces drawn from a seed, so lines, frames and UTF-8
//! characters are cut at arbitrary places. Each case runs one prompt through a real harness
//! and checks the text, tool calls, thinking, usage, stop reason, what is stored, the error a
//! refused or cut-off answer becomes, and the next request body of the tool loop, which must
//! also pass the documented request rules (`validate_anthropic`, `assert_openai_request`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use flue_core::{
    AssistantContent, Event, PromptOptions, Record, StopReason, ThinkingLevel, ToolDefinition,
    ToolError, Usage,
};
use flue_providers::WireApi;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::fake_http::Reply;
use crate::providers::{Outcome, assert_openai_request, builtin, run, streamed};

/// The seeds every case is replayed with: each cuts the stream differently.
const SEEDS: [u64; 2] = [0x5eed, 0xc0ffee];

/// The recorded payloads of `name` (`<provider>/<case>`).
fn recording(name: &str) -> Vec<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(format!("{name}.jsonl"));
    std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("{}: {err}", path.display()))
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

/// The stream `name` as its API frames it; `done` adds Chat Completions' `[DONE]` (Gemini
/// sends none).
fn framed(name: &str, api: WireApi, done: bool) -> Vec<u8> {
    let mut body = String::new();
    for line in recording(name) {
        if api == WireApi::AnthropicMessages {
            let value: Value = serde_json::from_str(&line).unwrap();
            body.push_str(&format!("event: {}\n", value["type"].as_str().unwrap()));
        }
        body.push_str(&format!("data: {line}\n\n"));
    }
    if done && matches!(api, WireApi::OpenAiCompletions) {
        body.push_str("data: [DONE]\n\n");
    }
    body.into_bytes()
}

/// A tool named `name` that takes any object and answers `{"answer": 42}`.
fn any_tool(name: &str) -> ToolDefinition {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Any {
        #[serde(flatten)]
        #[allow(dead_code, reason = "the input is accepted, not read")]
        rest: BTreeMap<String, Value>,
    }
    ToolDefinition::from_fn(
        name,
        "A tool of the recording.",
        |_input: Any, _ctx| async move { Ok::<_, ToolError>(json!({"answer": 42})) },
    )
    .unwrap()
}

/// One case: the provider, model, thinking level and tools of the recording, and the streams
/// the server sends to the successive requests.
struct Case<'a> {
    provider: &'a str,
    model: &'a str,
    thinking: ThinkingLevel,
    tools: &'a [&'a str],
    streams: &'a [&'a str],
    /// The last stream is cut off (no final chunk, no `[DONE]`).
    cut: bool,
}

impl Case<'_> {
    fn new<'a>(provider: &'a str, model: &'a str, streams: &'a [&'a str]) -> Case<'a> {
        Case {
            provider,
            model,
            thinking: ThinkingLevel::Off,
            tools: &["lookup"],
            streams,
            cut: false,
        }
    }

    /// Replays the case with `seed`.
    async fn replay(&self, seed: u64) -> Outcome {
        let api = builtin(self.provider).api;
        let replies = self
            .streams
            .iter()
            .enumerate()
            .map(|(idx, name)| {
                let last = idx + 1 == self.streams.len();
                Reply::seeded_pieces(
                    framed(name, api, !(last && self.cut)),
                    seed.wrapping_add(idx as u64),
                    last && self.cut,
                )
            })
            .collect();
        let tools = self.tools.iter().map(|name| any_tool(name)).collect();
        let outcome = run(
            builtin(self.provider),
            self.model,
            self.thinking,
            tools,
            replies,
        )
        .await;
        for request in &outcome.requests {
            match api {
                WireApi::AnthropicMessages => validate_anthropic(&request.body),
                WireApi::GoogleGenerativeAi => validate_gemini(request, self.model),
                _ => assert_openai_request(request),
            }
        }
        outcome
    }
}

/// The stored assistant turns.
fn turns(records: &[Record]) -> Vec<&flue_core::AssistantMessage> {
    records
        .iter()
        .filter_map(|record| match record {
            Record::Assistant(message) => Some(message),
            _ => None,
        })
        .collect()
}

/// Input, output, cache-read and cache-write tokens.
fn tokens(usage: &Usage) -> [u64; 4] {
    [
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
    ]
}

/// The `turn_stopped` events: (stop reason, refusal).
fn stops(events: &[Event]) -> Vec<(StopReason, Option<String>)> {
    events
        .iter()
        .filter_map(|event| match event {
            Event::TurnStopped {
                stop_reason,
                refusal,
                ..
            } => Some((stop_reason.clone(), refusal.clone())),
            _ => None,
        })
        .collect()
}

/// Anthropic's documented request rules: roles alternate starting with the user; every
/// `tool_use` is answered by a `tool_result` at the start of the next (user) message, and
/// only there; with thinking on, the budget is at least 1024 and below `max_tokens`, and an
/// assistant turn that called tools starts with its thinking (or redacted thinking) block;
/// at most four cache breakpoints.
fn validate_anthropic(body: &Value) {
    let messages = body["messages"].as_array().unwrap();
    assert!(!messages.is_empty());
    let mut breakpoints = body["system"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|block| block.get("cache_control").is_some())
        .count();
    let thinking_on =
        body["thinking"]["type"] == "enabled" || body["thinking"]["type"] == "adaptive";
    if body["thinking"]["type"] == "enabled" {
        let budget = body["thinking"]["budget_tokens"].as_u64().unwrap();
        let max_tokens = body["max_tokens"].as_u64().unwrap();
        assert!(
            (1024..max_tokens).contains(&budget),
            "thinking budget {budget} outside 1024..{max_tokens}"
        );
    }
    for (idx, message) in messages.iter().enumerate() {
        let role = message["role"].as_str().unwrap();
        assert_eq!(role, if idx % 2 == 0 { "user" } else { "assistant" });
        let blocks = message["content"].as_array().unwrap();
        assert!(!blocks.is_empty(), "an empty message: {message}");
        breakpoints += blocks
            .iter()
            .filter(|block| block.get("cache_control").is_some())
            .count();
        let uses: Vec<&str> = blocks
            .iter()
            .filter(|block| block["type"] == "tool_use")
            .map(|block| block["id"].as_str().unwrap())
            .collect();
        if role == "user" {
            let previous_uses: Vec<&str> = idx
                .checked_sub(1)
                .map(|prev| {
                    messages[prev]["content"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .filter(|block| block["type"] == "tool_use")
                        .map(|block| block["id"].as_str().unwrap())
                        .collect()
                })
                .unwrap_or_default();
            let results: Vec<&str> = blocks
                .iter()
                .take_while(|block| block["type"] == "tool_result")
                .map(|block| block["tool_use_id"].as_str().unwrap())
                .collect();
            assert_eq!(
                results, previous_uses,
                "the tool results must open the message, one per tool_use, in order"
            );
            assert_eq!(
                blocks
                    .iter()
                    .filter(|block| block["type"] == "tool_result")
                    .count(),
                results.len(),
                "a tool_result after other blocks: {message}"
            );
        }
        if role == "assistant" && !uses.is_empty() {
            assert!(
                messages.get(idx + 1).is_some(),
                "a tool_use left unanswered: {message}"
            );
            if thinking_on && idx + 2 == messages.len() {
                let first = blocks[0]["type"].as_str().unwrap();
                assert!(
                    first == "thinking" || first == "redacted_thinking",
                    "with thinking on, the tool loop's assistant turn must start with its \
                     thinking: {message}"
                );
            }
        }
    }
    assert!(breakpoints <= 4, "{breakpoints} cache breakpoints");
}

/// Gemini's documented request rules: the model in the path with `alt=sse`, the key in
/// `x-goog-api-key` only; contents start with the user and alternate; every
/// `functionResponse` answers, by id and name, a `functionCall` of the model content just
/// before it, and every call is answered; on Gemini 3 the first call of each model content
/// carries a thought signature (Gemini refuses the request otherwise).
fn validate_gemini(request: &crate::fake_http::Recorded, model: &str) {
    assert_eq!(
        request.path,
        format!("/v1beta/models/{model}:streamGenerateContent?alt=sse")
    );
    assert_eq!(
        request.headers.get("x-goog-api-key").map(String::as_str),
        Some(crate::providers::KEY)
    );
    assert_eq!(request.headers.get("authorization"), None);
    let contents = request.body["contents"].as_array().unwrap();
    let mut previous_calls: Vec<(String, String)> = Vec::new();
    for (idx, content) in contents.iter().enumerate() {
        let role = content["role"].as_str().unwrap();
        assert_eq!(role, if idx % 2 == 0 { "user" } else { "model" });
        let parts = content["parts"].as_array().unwrap();
        assert!(!parts.is_empty(), "an empty content: {content}");
        let call_of = |part: &Value, key: &str| {
            part.get(key).map(|call| {
                (
                    call["id"].as_str().unwrap().to_owned(),
                    call["name"].as_str().unwrap().to_owned(),
                )
            })
        };
        let answers: Vec<(String, String)> = parts
            .iter()
            .filter_map(|part| call_of(part, "functionResponse"))
            .collect();
        if role == "user" {
            assert_eq!(
                answers, previous_calls,
                "every call answered once, in order"
            );
        }
        let calls: Vec<(String, String)> = parts
            .iter()
            .filter_map(|part| call_of(part, "functionCall"))
            .collect();
        if model.starts_with("gemini-3")
            && let Some(first) = parts.iter().find(|part| part.get("functionCall").is_some())
        {
            assert!(
                first.get("thoughtSignature").is_some(),
                "Gemini 3 needs the signature of the first call: {content}"
            );
        }
        previous_calls = calls;
    }
}

// ---- Anthropic ----

#[tokio::test]
async fn anthropic_text() {
    for seed in SEEDS {
        let out = Case::new("anthropic", "claude-sonnet-4-5", &["anthropic/text"])
            .replay(seed)
            .await;
        let response = out.result.unwrap();
        let expected = "Hello! I'm doing well, thank you for asking. How are you doing today? \
                        Is there anything I can help you with?";
        assert_eq!(response.text, expected);
        assert_eq!(streamed(&out.events).0, expected);
        assert_eq!(tokens(&response.usage), [12, 30, 0, 0]);
        assert_eq!(turns(&out.records)[0].stop_reason, StopReason::EndTurn);
        assert!(stops(&out.events).is_empty());
    }
}

#[tokio::test]
async fn anthropic_refusal_fails_with_the_explanation_and_is_stored() {
    for seed in SEEDS {
        let out = Case::new("anthropic", "claude-sonnet-4-5", &["anthropic/refusal"])
            .replay(seed)
            .await;
        let err = out.result.unwrap_err();
        assert_eq!(err.kind(), "model_refusal");
        assert!(err.to_string().contains("violative cyber content"), "{err}");
        let turn = turns(&out.records)[0];
        assert_eq!(turn.stop_reason, StopReason::Refusal);
        assert_eq!(tokens(&turn.usage), [18, 5, 0, 0]);
        let [AssistantContent::Refusal { text }] = turn.content.as_slice() else {
            panic!("{:?}", turn.content);
        };
        assert!(text.contains("(category: cyber)"), "{text}");
        assert_eq!(
            stops(&out.events),
            [(StopReason::Refusal, Some(text.clone()))]
        );
    }
}

#[tokio::test]
async fn anthropic_thinking_with_signature() {
    let mut case = Case::new("anthropic", "claude-sonnet-4-5", &["anthropic/thinking"]);
    case.thinking = ThinkingLevel::Medium;
    for seed in SEEDS {
        let out = case.replay(seed).await;
        assert_eq!(out.result.unwrap().text, "925 ÷ 5 = 185");
        let turn = turns(&out.records)[0];
        let AssistantContent::Thinking {
            text, signature, ..
        } = &turn.content[0]
        else {
            panic!("{:?}", turn.content);
        };
        assert_eq!(
            text,
            "The previous result was 925. Now I need to divide that by 5.\n\n925 ÷ 5 = 185"
        );
        assert!(
            signature
                .as_deref()
                .unwrap()
                .starts_with("EvQBCkYICxgCKkAx")
        );
        assert_eq!(&streamed(&out.events).1, text);
    }
}

#[tokio::test]
async fn anthropic_thinking_goes_back_verbatim_in_the_tool_loop() {
    let mut case = Case::new(
        "anthropic",
        "claude-sonnet-4-5",
        &["anthropic/thinking-tool-use", "anthropic/text"],
    );
    case.thinking = ThinkingLevel::High;
    for seed in SEEDS {
        let out = case.replay(seed).await;
        out.result.unwrap();
        let recorded = recording("anthropic/thinking");
        let signature: String = recorded
            .iter()
            .filter_map(|line| {
                let value: Value = serde_json::from_str(line).unwrap();
                value["delta"]["signature"].as_str().map(str::to_owned)
            })
            .collect();
        let second = &out.requests[1].body;
        let assistant = &second["messages"][1]["content"];
        assert_eq!(assistant[0]["type"], "thinking");
        assert_eq!(assistant[0]["signature"], json!(signature));
        assert_eq!(
            assistant[1],
            json!({"type": "tool_use", "id": "toolu_01KFbKqPYSuAKujiL6mTfzYA", "name": "lookup",
                   "input": {"query": "925 ÷ 5"}})
        );
        assert_eq!(
            second["messages"][2]["content"][0]["tool_use_id"],
            "toolu_01KFbKqPYSuAKujiL6mTfzYA"
        );
    }
}

#[tokio::test]
async fn anthropic_redacted_thinking_is_kept_and_sent_back_unchanged() {
    let mut case = Case::new(
        "anthropic",
        "claude-sonnet-4-5",
        &["anthropic/redacted-thinking-tool-use", "anthropic/text"],
    );
    case.thinking = ThinkingLevel::High;
    case.tools = &["json"];
    for seed in SEEDS {
        let out = case.replay(seed).await;
        out.result.unwrap();
        let first = recording("anthropic/redacted-thinking-tool-use");
        let block: Value = serde_json::from_str(&first[1]).unwrap();
        let data = block["content_block"]["data"].as_str().unwrap();
        let turn = turns(&out.records)[0];
        assert_eq!(
            turn.content[0],
            AssistantContent::RedactedThinking {
                data: data.to_owned()
            }
        );
        assert_eq!(turn.stop_reason, StopReason::ToolUse);
        let assistant = &out.requests[1].body["messages"][1]["content"];
        assert_eq!(
            assistant[0],
            json!({"type": "redacted_thinking", "data": data})
        );
        assert_eq!(assistant[1]["type"], "tool_use");
        assert_eq!(
            assistant[1]["input"],
            json!({"elements": [{"location": "San Francisco", "temperature": 58, "condition": "sunny"}]})
        );
    }
}

#[tokio::test]
async fn anthropic_text_then_a_tool_call_without_arguments() {
    let mut case = Case::new(
        "anthropic",
        "claude-sonnet-4-5",
        &["anthropic/text-and-tool-no-args", "anthropic/text"],
    );
    case.tools = &["updateIssueList"];
    let out = case.replay(SEEDS[0]).await;
    out.result.unwrap();
    let turn = turns(&out.records)[0];
    assert_eq!(turn.text(), "I'll update the issue list for you.");
    let call = turn.tool_calls().next().unwrap();
    assert_eq!(call.input, json!({}));
    assert_eq!(tokens(&turn.usage), [565, 48, 0, 0]);
}

#[tokio::test]
async fn anthropic_max_tokens_completes_but_says_it_was_cut() {
    let out = Case::new("anthropic", "claude-sonnet-4-5", &["anthropic/max-tokens"])
        .replay(SEEDS[1])
        .await;
    assert!(out.result.is_ok());
    assert_eq!(turns(&out.records)[0].stop_reason, StopReason::MaxTokens);
    assert_eq!(stops(&out.events), [(StopReason::MaxTokens, None)]);
}

#[tokio::test]
async fn anthropic_paused_turn_is_sent_back_and_continued() {
    let out = Case::new(
        "anthropic",
        "claude-sonnet-4-5",
        &["anthropic/pause-turn", "anthropic/text"],
    )
    .replay(SEEDS[0])
    .await;
    out.result.unwrap();
    let stored = turns(&out.records);
    assert_eq!(stored.len(), 2);
    assert_eq!(stored[0].stop_reason, StopReason::PauseTurn);
    assert_eq!(stored[1].stop_reason, StopReason::EndTurn);
    // The continuation request ends with the paused turn, as Anthropic documents.
    let messages = out.requests[1].body["messages"].as_array().unwrap().clone();
    let last = messages.last().unwrap();
    assert_eq!(last["role"], "assistant");
    assert!(
        last["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("Hello!")
    );
}

#[tokio::test]
async fn anthropic_paused_web_search_goes_back_as_it_came() {
    // A turn paused after a server-side web search: the continuation carries the paused
    // turn's `server_tool_use` and `web_search_tool_result` blocks unchanged, in their place,
    // as Anthropic documents for `pause_turn`.
    let out = Case::new(
        "anthropic",
        "claude-sonnet-4-5",
        &["anthropic/web-search-pause-turn", "anthropic/text"],
    )
    .replay(SEEDS[1])
    .await;
    out.result.unwrap();
    let recorded: Vec<Value> = recording("anthropic/web-search-pause-turn")
        .iter()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let result_block = recorded
        .iter()
        .find(|event| event["content_block"]["type"] == "web_search_tool_result")
        .map(|event| event["content_block"].clone())
        .unwrap();
    let stored = turns(&out.records);
    assert_eq!(stored[0].stop_reason, StopReason::PauseTurn);
    assert_eq!(tokens(&stored[0].usage), [15665, 795, 0, 0]);
    let messages = out.requests[1].body["messages"].as_array().unwrap().clone();
    let paused = &messages.last().unwrap()["content"];
    assert_eq!(
        paused[0],
        json!({"type": "server_tool_use", "id": "srvtoolu_01Bj5uzzLcYG5hfueSLcDH8k",
               "name": "web_search", "input": {"query": "tech news today September 26 2025"}})
    );
    assert_eq!(paused[1], result_block);
    assert_eq!(paused[2]["type"], "text");
    assert_eq!(
        paused.as_array().unwrap().len(),
        2 + paused
            .as_array()
            .unwrap()
            .iter()
            .filter(|block| block["type"] == "text")
            .count()
    );
}

#[tokio::test]
async fn anthropic_full_context_window_and_unknown_reasons_fail_as_themselves() {
    for (stream, kind, reason) in [
        (
            "anthropic/context-window-exceeded",
            "context_window_exceeded",
            StopReason::ContextWindowExceeded,
        ),
        (
            "anthropic/unknown-stop",
            "model_stopped",
            StopReason::Other("compaction".to_owned()),
        ),
    ] {
        let out = Case::new("anthropic", "claude-sonnet-4-5", &[stream])
            .replay(SEEDS[0])
            .await;
        assert_eq!(out.result.unwrap_err().kind(), kind);
        assert_eq!(turns(&out.records)[0].stop_reason, reason);
        assert_eq!(stops(&out.events), [(reason, None)]);
    }
}

// ---- OpenAI Chat Completions ----

#[tokio::test]
async fn openai_text_with_usage() {
    for seed in SEEDS {
        let out = Case::new("openai", "gpt-4.1-nano", &["openai/text"])
            .replay(seed)
            .await;
        let response = out.result.unwrap();
        assert!(response.text.starts_with("**Holiday"), "{}", response.text);
        assert!(response.text.ends_with("respect."));
        assert_eq!(tokens(&response.usage), [16, 300, 0, 0]);
        let body = &out.requests[0].body;
        assert_eq!(body["stream_options"], json!({"include_usage": true}));
        assert!(body.get("max_completion_tokens").is_some());
    }
}

#[tokio::test]
async fn openai_refusal_fails_and_is_stored_as_a_refusal() {
    for seed in SEEDS {
        let out = Case::new("openai", "gpt-4.1-nano", &["openai/refusal"])
            .replay(seed)
            .await;
        let err = out.result.unwrap_err();
        assert_eq!(err.kind(), "model_refusal");
        assert!(
            streamed(&out.events).0.is_empty(),
            "a refusal is not answer text"
        );
        let turn = turns(&out.records)[0];
        assert_eq!(turn.stop_reason, StopReason::Refusal);
        let [AssistantContent::Refusal { text }] = turn.content.as_slice() else {
            panic!("{:?}", turn.content);
        };
        assert!(text.starts_with("**Holiday") && text.ends_with("respect."));
        assert!(err.to_string().contains(text.as_str()));
    }
}

#[tokio::test]
async fn openai_content_filter_fails_as_content_filter() {
    let out = Case::new("openai", "gpt-4.1-nano", &["openai/content-filter"])
        .replay(SEEDS[0])
        .await;
    assert_eq!(out.result.unwrap_err().kind(), "content_filter");
    let turn = turns(&out.records)[0];
    assert_eq!(turn.stop_reason, StopReason::ContentFilter);
    assert!(turn.text().starts_with("**Holiday"));
}

#[tokio::test]
async fn openai_cut_stream_fails_after_its_text() {
    let mut case = Case::new("openai", "gpt-4.1-nano", &["openai/cut"]);
    case.cut = true;
    let out = case.replay(SEEDS[0]).await;
    let err = out.result.unwrap_err();
    assert_eq!(err.kind(), "provider_error", "{err}");
    // Text had reached the caller: the turn is not retried.
    assert_eq!(out.requests.len(), 1);
    assert!(turns(&out.records).is_empty());
}

#[tokio::test]
async fn openai_reasoning_tokens_are_inside_completion_tokens() {
    let out = Case::new("openai", "gpt-5-nano", &["openai/azure-filter-results"])
        .replay(SEEDS[0])
        .await;
    let response = out.result.unwrap();
    assert_eq!(response.text, "Capital of Denmark.");
    assert_eq!(response.usage.output_tokens, 78);
}

// ---- DeepSeek ----

#[tokio::test]
async fn deepseek_tool_call_reasoning_goes_back_in_the_tool_loop() {
    let mut case = Case::new(
        "deepseek",
        "deepseek-reasoner",
        &["deepseek/reasoning-tool-call", "deepseek/text"],
    );
    case.tools = &["weather"];
    for seed in SEEDS {
        let out = case.replay(seed).await;
        // The second recording ends at its output limit (`length`): a completed, cut answer.
        out.result.unwrap();
        let stored = turns(&out.records);
        assert_eq!(stored[1].stop_reason, StopReason::MaxTokens);
        let first = stored[0];
        assert_eq!(tokens(&first.usage), [19, 83, 320, 0]);
        let call = first.tool_calls().next().unwrap();
        assert_eq!(call.id, "call_00_ioIn7yN9p1ZOMNpDLwd4MgAF");
        assert_eq!(call.input, json!({"location": "San Francisco"}));
        let thinking = streamed(&out.events).1;
        assert!(thinking.starts_with("The user is asking for the weather"));
        let body = &out.requests[1].body;
        assert!(body.get("max_tokens").is_some() && body.get("max_completion_tokens").is_none());
        let assistant = &body["messages"][2];
        assert_eq!(assistant["role"], "assistant");
        assert_eq!(assistant["reasoning_content"], json!(thinking));
        assert_eq!(
            assistant["tool_calls"][0]["function"]["arguments"],
            "{\"location\":\"San Francisco\"}"
        );
    }
}

#[tokio::test]
async fn deepseek_reasoning_then_answer() {
    let out = Case::new("deepseek", "deepseek-reasoner", &["deepseek/reasoning"])
        .replay(SEEDS[1])
        .await;
    let response = out.result.unwrap();
    let (text, thinking) = streamed(&out.events);
    assert_eq!(response.text, text);
    assert!(!thinking.is_empty() && !text.is_empty());
}

// ---- OpenRouter ----

/// The JSON file `name` under `tests/corpus/`.
fn corpus_json(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

#[tokio::test]
async fn openrouter_gemini_3_thought_signature_goes_back_with_its_tool_call() {
    // Gemini 3 through OpenRouter signs its tool call with an encrypted reasoning detail
    // (Gemini's thought signature) even with no reasoning asked for; OpenRouter refuses the
    // next request (HTTP 400) unless the detail comes back on the assistant message.
    let mut case = Case::new(
        "openrouter",
        "google/gemini-3.1-flash-lite-preview",
        &[
            "openrouter/gemini-3-tool-call",
            "openrouter/gemini-3-answer",
        ],
    );
    case.tools = &["weather"];
    for seed in SEEDS {
        let out = case.replay(seed).await;
        let response = out.result.unwrap();
        assert_eq!(
            response.text,
            "The current weather in Florence, Italy, is 40°C."
        );
        let assistant = &out.requests[1].body["messages"][2];
        assert_eq!(assistant["role"], "assistant");
        assert_eq!(
            assistant["tool_calls"][0]["id"],
            "tool_weather_nNBvDVuJXrZZDwEjuOoj"
        );
        // What fantasy sent back on its second request, which OpenRouter accepted.
        assert_eq!(
            assistant["reasoning_details"],
            corpus_json("openrouter/gemini-3-details-sent.json")
        );
        // The answer's own signature is kept for the turns after it.
        let answer = turns(&out.records)[1];
        let AssistantContent::ProviderData { data } = &answer.content[0] else {
            panic!("{:?}", answer.content);
        };
        assert_eq!(data["format"], "google-gemini-v1");
    }
}

#[tokio::test]
async fn openrouter_claude_signed_reasoning_goes_back_merged_by_index() {
    // Claude through OpenRouter streams its reasoning as `reasoning.text` pieces of index 0,
    // the signature in the last one; the next request carries the one merged entry.
    let mut case = Case::new(
        "openrouter",
        "anthropic/claude-haiku-4.5",
        &[
            "openrouter/claude-reasoning-tool-call",
            "openrouter/claude-answer",
        ],
    );
    case.tools = &["weather"];
    case.thinking = ThinkingLevel::Medium;
    for seed in SEEDS {
        let out = case.replay(seed).await;
        out.result.unwrap();
        let thinking = streamed(&out.events).1;
        assert!(thinking.starts_with("The user is asking for weather information"));
        let first = turns(&out.records)[0];
        assert_eq!(first.stop_reason, StopReason::ToolUse);
        let assistant = &out.requests[1].body["messages"][2];
        let sent = corpus_json("openrouter/claude-details-sent.json");
        assert_eq!(assistant["reasoning_details"], sent);
        assert_eq!(sent[0]["text"], json!(thinking));
        assert!(
            sent[0]["signature"]
                .as_str()
                .unwrap()
                .starts_with("Eq0ECkgIDRABGAIqQM")
        );
        assert_eq!(
            assistant["tool_calls"][0]["id"],
            "toolu_bdrk_01N8hD5cYDw4WfvnjKXAkA2W"
        );
    }
}

// ---- Google Gemini ----

/// The parts of the `model` content of a request.
fn model_parts(body: &Value) -> Value {
    body["contents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|content| content["role"] == "model")
        .map(|content| content["parts"].clone())
        .unwrap()
}

#[tokio::test]
async fn gemini_3_parallel_calls_go_back_with_their_signature() {
    // Gemini 3 signs the first of two parallel calls; the next request carries the model turn
    // exactly as fantasy sent it and Google accepted it.
    let mut case = Case::new(
        "google",
        "gemini-3-pro-preview",
        &[
            "google/pro-3-parallel-calls",
            "google/pro-3-parallel-answer",
        ],
    );
    case.tools = &["add", "multiply"];
    for seed in SEEDS {
        let out = case.replay(seed).await;
        let response = out.result.unwrap();
        assert_eq!(
            response.text,
            "The sum of 2 and 3 is 5, and their product is 6."
        );
        let stored = turns(&out.records);
        assert_eq!(stored[0].stop_reason, StopReason::ToolUse);
        // Thoughts are billed as output beside the candidates.
        assert_eq!(tokens(&stored[0].usage), [157, 32 + 438, 0, 0]);
        let ids: Vec<&str> = stored[0]
            .tool_calls()
            .map(|call| call.id.as_str())
            .collect();
        assert_eq!(ids, ["8hd01vsf", "k0srpqrc"]);
        let second = &out.requests[1].body;
        assert_eq!(
            model_parts(second),
            corpus_json("google/pro-3-parallel-model-turn-sent.json")["parts"]
        );
        assert_eq!(
            second["contents"][2]["parts"][1]["functionResponse"],
            json!({"name": "multiply", "id": "k0srpqrc", "response": {"output": "{\"answer\":42}"}})
        );
        // The answer's closing signature (an empty signed part) is kept as it came.
        let recorded = recording("google/pro-3-parallel-answer");
        let last: Value = serde_json::from_str(recorded.last().unwrap()).unwrap();
        assert_eq!(
            stored[1].content.last().unwrap(),
            &AssistantContent::ProviderData {
                data: last["candidates"][0]["content"]["parts"][0].clone()
            }
        );
    }
}

#[tokio::test]
async fn gemini_2_5_thoughts_are_thinking_and_the_signed_call_goes_back() {
    let mut case = Case::new(
        "google",
        "gemini-2.5-flash",
        &[
            "google/flash-thinking-tool-call",
            "google/flash-thinking-answer",
        ],
    );
    case.tools = &["weather"];
    case.thinking = ThinkingLevel::Medium;
    for seed in SEEDS {
        let out = case.replay(seed).await;
        let response = out.result.unwrap();
        assert_eq!(response.text, "The weather in Florence, Italy is 40 C.");
        let thinking = streamed(&out.events).1;
        assert!(thinking.starts_with("**Determining the Weather Inquiry**"));
        let first = &out.requests[0].body;
        assert_eq!(
            first["generationConfig"]["thinkingConfig"],
            json!({"includeThoughts": true, "thinkingBudget": 8192})
        );
        // Gemini 2.5 gave the call no id: flue names it, and the result answers that name.
        let call = turns(&out.records)[0].tool_calls().next().unwrap().clone();
        let mut sent = corpus_json("google/flash-thinking-model-turn-sent.json")["parts"].clone();
        sent[0]["functionCall"]["id"] = json!(call.id);
        assert_eq!(model_parts(&out.requests[1].body), sent);
        assert_eq!(tokens(&response.usage), [54 + 146, 14 + 62 + 12, 0, 0]);
    }
}

#[tokio::test]
async fn gemini_text_keeps_its_closing_signature() {
    let out = Case::new(
        "google",
        "gemini-3-pro-preview",
        &["google/text-signed-end"],
    )
    .replay(SEEDS[0])
    .await;
    let response = out.result.unwrap();
    assert_eq!(
        response.text,
        "There are **3** \"r\"s in strawberry.\n\nst**r**awbe**rr**y"
    );
    assert_eq!(tokens(&response.usage), [9, 23 + 185, 0, 0]);
    let turn = turns(&out.records)[0];
    let AssistantContent::ProviderData { data } = &turn.content[1] else {
        panic!("{:?}", turn.content);
    };
    assert_eq!(data["text"], "");
    assert!(
        data["thoughtSignature"]
            .as_str()
            .unwrap()
            .starts_with("EqsFCqgFAb4")
    );
}

#[tokio::test]
async fn gemini_blocks_and_empty_answers_fail_clearly() {
    // A safety stop after some text: the content filter, what arrived stored.
    let out = Case::new("google", "gemini-3-pro-preview", &["google/safety"])
        .replay(SEEDS[0])
        .await;
    let err = out.result.unwrap_err();
    assert_eq!(err.kind(), "content_filter");
    assert_eq!(
        turns(&out.records)[0].stop_reason,
        StopReason::ContentFilter
    );
    // A blocked prompt: no candidates at all; not retried.
    let out = Case::new("google", "gemini-3-pro-preview", &["google/blocked-prompt"])
        .replay(SEEDS[0])
        .await;
    let err = out.result.unwrap_err();
    assert_eq!(err.kind(), "provider_error");
    assert!(err.to_string().contains("blockReason SAFETY"), "{err}");
    assert_eq!(out.requests.len(), 1);
    // `STOP` with nothing in it is no answer: retried, then a failure, never an empty success.
    let out = Case::new("google", "gemini-3-pro-preview", &["google/empty-stop"; 4])
        .replay(SEEDS[0])
        .await;
    let err = out.result.unwrap_err();
    assert!(err.to_string().contains("without any text"), "{err}");
    assert_eq!(out.requests.len(), 4);
    assert!(turns(&out.records).is_empty());
}

#[tokio::test]
async fn gemini_openai_compatible_thought_signatures_go_back_on_their_calls() {
    // Gemini's OpenAI-compatible endpoint signs a call in `extra_content.google`; the call
    // goes back with it, the unsigned call without.
    let config = flue_providers::ProviderConfig::new(
        "gemini-openai",
        WireApi::OpenAiCompletions,
        "http://unused/v1",
    )
    .with_api_key(flue_providers::ApiKey::new(crate::providers::KEY))
    .with_retry(crate::providers::fast_retry());
    let replies = ["openai/extra-content-tool-calls", "openai/text"]
        .iter()
        .map(|name| Reply::seeded_pieces(framed(name, WireApi::OpenAiCompletions, true), 3, false))
        .collect();
    let out = run(
        config,
        "gemini-3-pro-preview",
        ThinkingLevel::Off,
        vec![any_tool("GetWeatherArgs"), any_tool("get_stock_price")],
        replies,
    )
    .await;
    out.result.unwrap();
    let calls = out.requests[1].body["messages"][2]["tool_calls"].clone();
    assert_eq!(
        calls[0]["extra_content"],
        json!({"google": {"thought_signature": "EpEBCo4BAb4+9vueD6qXh+z6U+4AqU940Oj5Cdxb85BS4kZ2qdo"}})
    );
    assert_eq!(calls[0]["id"], "call_JMW1whyEaYG438VE1OIflxA2");
    assert_eq!(calls[1].get("extra_content"), None);
    assert_eq!(
        out.requests[1].body["messages"][2].get("reasoning_details"),
        None
    );
}

// ---- Mistral ----

#[tokio::test]
async fn mistral_reasoning_content_parts() {
    for seed in SEEDS {
        let out = Case::new(
            "mistral",
            "magistral-medium-2507",
            &["mistral/reasoning-parts"],
        )
        .replay(seed)
        .await;
        let response = out.result.unwrap();
        assert_eq!(response.text, "2 + 2 = 4");
        assert_eq!(
            streamed(&out.events).1,
            "The user is asking for 2+2. This is basic arithmetic. 2+2=4."
        );
        assert_eq!(tokens(&response.usage), [10, 46, 0, 0]);
        let body = &out.requests[0].body;
        assert!(body.get("stream_options").is_none());
        assert!(body.get("max_tokens").is_some());
    }
}

#[tokio::test]
async fn mistral_whole_and_incremental_tool_calls() {
    let mut case = Case::new(
        "mistral",
        "mistral-small-latest",
        &["mistral/tool-call", "mistral/text"],
    );
    case.tools = &["weather"];
    let out = case.replay(SEEDS[0]).await;
    out.result.unwrap();
    let body = &out.requests[1].body;
    assert_eq!(body["messages"][3]["role"], "tool");
    assert_eq!(body["messages"][3]["tool_call_id"], "gSIMJiOkT");

    let mut case = Case::new(
        "mistral",
        "mistral-small-latest",
        &["mistral/incremental-tool-call", "mistral/text"],
    );
    case.tools = &["webSearchTool"];
    let out = case.replay(SEEDS[1]).await;
    out.result.unwrap();
    let call = turns(&out.records)[0].tool_calls().next().unwrap().clone();
    assert_eq!(call.name, "webSearchTool");
    assert_eq!(call.input, json!({"query": "current Berlin weather"}));
}

// ---- xAI ----

#[tokio::test]
async fn xai_output_tokens_include_the_reasoning_it_bills() {
    for seed in SEEDS {
        let out = Case::new("xai", "grok-3-mini", &["xai/text"])
            .replay(seed)
            .await;
        let response = out.result.unwrap();
        // completion_tokens 2 + reasoning_tokens 340 (total_tokens 354 = 12 + 2 + 340).
        assert_eq!(tokens(&response.usage), [1, 342, 11, 0]);
    }
}

#[tokio::test]
async fn xai_reasoning_tool_call_round_trip() {
    let mut case = Case::new(
        "xai",
        "grok-3-mini",
        &["xai/reasoning-tool-call", "xai/text"],
    );
    case.tools = &["weather"];
    let out = case.replay(SEEDS[0]).await;
    out.result.unwrap();
    let first = turns(&out.records)[0];
    assert_eq!(tokens(&first.usage), [1, 253, 306, 0]);
    let assistant = &out.requests[1].body["messages"][2];
    assert_eq!(assistant["tool_calls"][0]["id"], "call_79382389");
    assert!(
        assistant.get("reasoning_content").is_none(),
        "xAI takes no reasoning back"
    );
}

// ---- Groq ----

#[tokio::test]
async fn groq_tool_call_round_trip() {
    let mut case = Case::new(
        "groq",
        "llama-3.3-70b-versatile",
        &["groq/tool-call", "groq/text"],
    );
    case.tools = &["weather"];
    let out = case.replay(SEEDS[1]).await;
    out.result.unwrap();
    let first = turns(&out.records)[0];
    assert_eq!(tokens(&first.usage), [210, 15, 0, 0]);
    assert_eq!(
        out.requests[1].body["messages"][3]["tool_call_id"],
        "tk85n1k4m"
    );
}

/// The `provider_retry` events: (attempt, message).
fn retries(events: &[Event]) -> Vec<(u32, String)> {
    events
        .iter()
        .filter_map(|event| match event {
            Event::ProviderRetry {
                attempt, message, ..
            } => Some((*attempt, message.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn openai_parallel_tool_calls_both_run_and_go_back_in_order() {
    let mut case = Case::new(
        "openai",
        "gpt-4o",
        &["openai/parallel-tool-calls", "openai/text"],
    );
    case.tools = &["GetWeatherArgs", "get_stock_price"];
    let weather = "call_JMW1whyEaYG438VE1OIflxA2";
    let stock = "call_DNYTawLBoN8fj3KN6qU9N1Ou";
    for seed in SEEDS {
        let out = case.replay(seed).await;
        out.result.unwrap();
        let first = turns(&out.records)[0];
        assert_eq!(first.stop_reason, StopReason::ToolUse);
        let calls: Vec<(&str, &str, &Value)> = first
            .tool_calls()
            .map(|call| (call.id.as_str(), call.name.as_str(), &call.input))
            .collect();
        assert_eq!(
            calls,
            [
                (
                    weather,
                    "GetWeatherArgs",
                    &json!({"city": "Edinburgh", "country": "GB", "units": "c"})
                ),
                (
                    stock,
                    "get_stock_price",
                    &json!({"ticker": "AAPL", "exchange": "NASDAQ"})
                ),
            ]
        );
        assert_eq!(tokens(&first.usage), [149, 60, 0, 0]);
        assert_eq!(
            crate::providers::roles(&out.records),
            [
                "user",
                "assistant",
                "tool_result",
                "tool_result",
                "assistant"
            ]
        );
        // The next request: the assistant message with both calls, then both answers, in the
        // order the calls came.
        let messages = out.requests[1].body["messages"].as_array().unwrap();
        let sent: Vec<&str> = messages[2]["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|call| call["id"].as_str().unwrap())
            .collect();
        assert_eq!(sent, [weather, stock]);
        assert_eq!(
            [&messages[3]["tool_call_id"], &messages[4]["tool_call_id"]],
            [weather, stock]
        );
    }
}

#[tokio::test]
async fn anthropic_overload_after_message_start_is_retried_and_its_input_counted() {
    for seed in SEEDS {
        let out = Case::new(
            "anthropic",
            "claude-sonnet-4-5",
            &["anthropic/overloaded-after-start", "anthropic/text"],
        )
        .replay(seed)
        .await;
        let response = out.result.unwrap();
        assert!(response.text.starts_with("Hello! I'm doing well"));
        // Nothing was shown before the error: the same request again, announced once.
        assert_eq!(out.requests.len(), 2);
        assert_eq!(out.requests[0].body, out.requests[1].body);
        assert_eq!(retries(&out.events), [(1, "Overloaded".to_owned())]);
        // The failed attempt's `message_start` (12 in, 1 out) counts with the turn.
        let turn = turns(&out.records)[0];
        assert_eq!(tokens(&turn.usage), [24, 31, 0, 0]);
        assert_eq!(tokens(&response.usage), [24, 31, 0, 0]);
        assert!(crate::providers::failed_turns(&out.records).is_empty());
    }
}

#[tokio::test]
async fn anthropic_overload_that_persists_fails_and_stores_the_tokens_it_used() {
    let streams = ["anthropic/overloaded-after-start"; 4];
    let out = Case::new("anthropic", "claude-sonnet-4-5", &streams)
        .replay(SEEDS[0])
        .await;
    let err = out.result.unwrap_err();
    assert_eq!(err.kind(), "provider_error");
    assert!(err.to_string().contains("Overloaded"), "{err}");
    // The first attempt and three retries, each after `message_start` reported 12 + 1.
    assert_eq!(out.requests.len(), 4);
    assert_eq!(retries(&out.events).len(), 3);
    assert_eq!(
        crate::providers::roles(&out.records),
        ["user", "failed_turn"]
    );
    let failed = crate::providers::failed_turns(&out.records)[0];
    assert_eq!(tokens(&failed.usage), [48, 4, 0, 0]);
    assert!(failed.usage.cost_usd.is_some_and(|cost| cost > 0.0));
    assert_eq!(failed.error_kind, "provider_error");
    assert_eq!(crate::providers::operation_usage(&out.events), failed.usage);
}

#[tokio::test]
async fn anthropic_overload_mid_answer_keeps_the_shown_text_out_of_the_log_but_counts_it() {
    for seed in SEEDS {
        let out = Case::new(
            "anthropic",
            "claude-sonnet-4-5",
            &["anthropic/overloaded-mid-text"],
        )
        .replay(seed)
        .await;
        let err = out.result.unwrap_err();
        assert_eq!(err.kind(), "provider_error");
        // The user saw the start of the answer; it is not repeated and not stored as a turn.
        assert_eq!(
            streamed(&out.events).0,
            "Hello! I'm doing well, thank you for asking"
        );
        assert_eq!(out.requests.len(), 1);
        assert!(retries(&out.events).is_empty());
        assert!(turns(&out.records).is_empty());
        let failed = crate::providers::failed_turns(&out.records)[0];
        assert_eq!(tokens(&failed.usage), [12, 1, 0, 0]);
    }
}

#[tokio::test]
async fn openai_error_object_mid_answer_fails_without_a_retry() {
    for seed in SEEDS {
        let out = Case::new("openai", "gpt-4.1-nano", &["openai/error-mid-stream"])
            .replay(seed)
            .await;
        let err = out.result.unwrap_err();
        assert_eq!(err.kind(), "provider_error");
        assert!(
            err.to_string()
                .contains("The server had an error while processing your request"),
            "{err}"
        );
        assert!(streamed(&out.events).0.starts_with("**Holiday"));
        assert_eq!(out.requests.len(), 1);
        assert!(retries(&out.events).is_empty());
        // Chat Completions reports usage only at the end: nothing to count, nothing stored.
        assert_eq!(crate::providers::roles(&out.records), ["user"]);
    }
}

#[tokio::test]
async fn openai_error_object_before_any_text_is_retried() {
    for seed in SEEDS {
        let out = Case::new(
            "openai",
            "gpt-4.1-nano",
            &["openai/error-before-text", "openai/text"],
        )
        .replay(seed)
        .await;
        let response = out.result.unwrap();
        assert!(response.text.starts_with("**Holiday"));
        assert_eq!(out.requests.len(), 2);
        assert_eq!(retries(&out.events).len(), 1);
        assert_eq!(tokens(&response.usage), [16, 300, 0, 0]);
        assert_eq!(crate::providers::roles(&out.records), ["user", "assistant"]);
    }
}

#[tokio::test]
async fn every_compatible_dialect_sends_bodies_openai_s_schema_accepts() {
    // Text, an image, tools, a tool loop with two results and a thinking level, through each
    // built-in Chat Completions provider (the shared `run` checks each body against OpenAI's
    // `CreateChatCompletionRequest`).
    let image = flue_core::Image {
        data: "iVBORw0KGgo=".to_owned(),
        mime_type: "image/png".to_owned(),
    };
    let info = flue_core::model::ModelInfo {
        reasoning: true,
        image_input: true,
        ..flue_core::model::ModelInfo::default()
    };
    for provider in [
        "openai",
        "openrouter",
        "groq",
        "deepseek",
        "together",
        "mistral",
        "xai",
        "ollama",
    ] {
        let replies = ["openai/parallel-tool-calls", "openai/text"]
            .iter()
            .map(|name| {
                Reply::seeded_pieces(framed(name, WireApi::OpenAiCompletions, true), 7, false)
            })
            .collect();
        let out = crate::providers::run_prompt(
            builtin(provider).with_model("vision-reasoner", info.clone()),
            "vision-reasoner",
            ThinkingLevel::High,
            vec![any_tool("GetWeatherArgs"), any_tool("get_stock_price")],
            PromptOptions::default().with_image(image.clone()),
            replies,
        )
        .await;
        out.result.unwrap();
        assert_eq!(out.requests.len(), 2, "{provider}");
        for request in &out.requests {
            assert_openai_request(request);
        }
        let body = &out.requests[1].body;
        let limit = ["max_tokens", "max_completion_tokens"]
            .iter()
            .filter(|field| body.get(**field).is_some())
            .count();
        assert_eq!(limit, 1, "{provider}: one output limit field: {body}");
        assert_eq!(
            body["messages"][1]["content"][1]["image_url"]["url"],
            "data:image/png;base64,iVBORw0KGgo=",
            "{provider}"
        );
    }
}

#[test]
fn the_chat_schema_refuses_bodies_openai_refuses() {
    // The schema checks above can fail: OpenAI's schema rejects an image part without its
    // URL, a tool message without the call it answers, a mistyped limit, a reasoning effort
    // it does not know and stream options of the wrong type.
    let schema = crate::providers::CHAT_COMPLETIONS_SCHEMA.validator();
    let valid = json!({"model": "gpt-4o", "messages": [
        {"role": "user", "content": [
            {"type": "text", "text": "hi"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
        {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "lookup", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "42"}],
        "stream": true, "stream_options": {"include_usage": true},
        "max_completion_tokens": 100, "reasoning_effort": "low"});
    assert!(schema.is_valid(&valid));
    let user = json!({"role": "user", "content": "hi"});
    for bad in [
        json!({"model": "gpt-4o", "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"detail": "auto"}}]}]}),
        json!({"model": "gpt-4o", "messages": [user, {"role": "tool", "content": "42"}]}),
        json!({"model": "gpt-4o", "messages": [user], "max_completion_tokens": "many"}),
        json!({"model": "gpt-4o", "messages": [user], "reasoning_effort": "extreme"}),
        json!({"model": "gpt-4o", "messages": [user], "stream_options": {"include_usage": "yes"}}),
    ] {
        assert!(!schema.is_valid(&bad), "accepted: {bad}");
    }
}
