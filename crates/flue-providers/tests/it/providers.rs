//! Shared helpers of the wire-level provider tests: one prompt through a real harness (agent
//! loop, memory store, the test's tools) whose provider talks to a scripted loopback server
//! (`run`, used by every provider test file), OpenAI's published request schemas, and the
//! protocol invariants every recorded request must satisfy.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use flue_core::{
    AgentConfig, Event, FlueError, Harness, LocalSandbox, PromptOptions, PromptResponse,
    ProviderRegistry, Record, ThinkingLevel, ToolDefinition, ToolError, Usage, record::FailedTurn,
};
use flue_providers::{ApiKey, ProviderConfig, RetryPolicy, WireApi};
use serde_json::{Value, json};

use crate::fake_http::{FakeServer, Recorded, Reply};

/// Every call id is unique and answered by exactly one result (the same check as flue-core's
/// tool-call-id tests).
pub fn assert_one_result_per_call(records: &[Record]) {
    let calls: Vec<&str> = records
        .iter()
        .filter_map(|record| match record {
            Record::Assistant(message) => Some(message.tool_calls().map(|call| call.id.as_str())),
            _ => None,
        })
        .flatten()
        .collect();
    let mut answers: BTreeMap<&str, usize> = calls.iter().map(|id| (*id, 0)).collect();
    assert_eq!(answers.len(), calls.len(), "repeated call ids: {calls:?}");
    for record in records {
        if let Record::ToolResult(result) = record {
            *answers
                .get_mut(result.call_id.as_str())
                .unwrap_or_else(|| panic!("result {} answers no call", result.call_id)) += 1;
        }
    }
    assert!(answers.values().all(|n| *n == 1), "{answers:?}");
}

/// The key every test provider sends; it must never show up outside the request header.
pub const KEY: &str = "sk-test-SECRET-0123456789";

/// What one prompt left behind.
#[derive(Debug)]
pub struct Outcome {
    pub result: Result<PromptResponse, FlueError>,
    /// The session log after the operation.
    pub records: Vec<Record>,
    pub events: Vec<Event>,
    pub requests: Vec<Recorded>,
}

/// Retries fast enough for tests; `retry-after` above 5 s is not waited for.
pub fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        max_retries: 3,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
        max_retry_after: Duration::from_secs(5),
    }
}

/// The built-in provider `id` with the test key and fast retries (its base URL is replaced).
pub fn builtin(id: &str) -> ProviderConfig {
    ProviderConfig::builtin(id)
        .unwrap()
        .with_api_key(ApiKey::new(KEY))
        .with_retry(fast_retry())
}

/// Sends "What is the answer?" to `model` of `config` with the `lookup` tool, pointed at a
/// server playing `replies`.
pub async fn check(
    config: ProviderConfig,
    model: &str,
    thinking: ThinkingLevel,
    replies: Vec<Reply>,
) -> Outcome {
    run(config, model, thinking, vec![lookup_tool()], replies).await
}

/// Sends "What is the answer?" to `model` of `config` with `tools`, pointed at a server
/// playing `replies`, through a real harness: what it left behind. Every request body of an
/// OpenAI API is checked against OpenAI's published schema, and the key must stay in the
/// request headers.
pub async fn run(
    config: ProviderConfig,
    model: &str,
    thinking: ThinkingLevel,
    tools: Vec<ToolDefinition>,
    replies: Vec<Reply>,
) -> Outcome {
    run_prompt(
        config,
        model,
        thinking,
        tools,
        PromptOptions::default(),
        replies,
    )
    .await
}

/// [`run`] with the prompt's `options` (images, ...).
pub async fn run_prompt(
    config: ProviderConfig,
    model: &str,
    thinking: ThinkingLevel,
    tools: Vec<ToolDefinition>,
    options: PromptOptions,
    replies: Vec<Reply>,
) -> Outcome {
    let server = FakeServer::start(replies).await;
    let base_url = match config.api {
        WireApi::AnthropicMessages => server.url.clone(),
        WireApi::GoogleGenerativeAi => format!("{}/v1beta", server.url),
        _ => format!("{}/v1", server.url),
    };
    let provider_id = config.id.clone();
    let provider = config.with_base_url(base_url).build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut agent = AgentConfig::new()
        .with_model(format!("{provider_id}/{model}"))
        .with_instructions("You answer questions.")
        .with_thinking(thinking)
        // The requests compared here carry only the tools each test gives.
        .with_task_tool(false);
    for tool in tools {
        agent = agent.with_tool(tool);
    }
    let harness = Harness::builder(agent)
        .with_providers(ProviderRegistry::new().with_provider(provider))
        .with_sandbox(Arc::new(LocalSandbox::new(dir.path()).unwrap()))
        .with_workspace_context(None)
        .build()
        .await
        .unwrap();
    let session = harness.session("default").await.unwrap();
    let mut handle = session.prompt("What is the answer?", options);
    let mut stream = handle.take_events().unwrap();
    let result = handle.await;
    let mut events = Vec::new();
    while let Some(event) = stream.recv().await {
        events.push(event);
    }
    let outcome = Outcome {
        result,
        records: session.records().await,
        events,
        requests: server.requests(),
    };
    assert_key_stays_secret(&outcome);
    for request in &outcome.requests {
        match request.path.as_str() {
            "/v1/chat/completions" => CHAT_COMPLETIONS_SCHEMA.assert_valid(&request.body),
            "/v1/responses" => RESPONSES_SCHEMA.assert_valid(&request.body),
            _ => {}
        }
    }
    outcome
}

/// One of OpenAI's published request schemas (`tests/corpus/openai*/`, see the PROVENANCE
/// files there), compiled on first use.
pub struct OpenAiSchema {
    /// The file under `tests/corpus/`.
    file: &'static str,
    validator: OnceLock<jsonschema::Validator>,
}

/// The body of `POST /chat/completions` (`CreateChatCompletionRequest`).
pub static CHAT_COMPLETIONS_SCHEMA: OpenAiSchema =
    OpenAiSchema::new("openai/create-chat-completion.schema.json");

/// The body of `POST /responses` (`CreateResponse`).
pub static RESPONSES_SCHEMA: OpenAiSchema =
    OpenAiSchema::new("openai-responses/create-response.schema.json");

impl OpenAiSchema {
    const fn new(file: &'static str) -> Self {
        Self {
            file,
            validator: OnceLock::new(),
        }
    }

    /// The compiled schema.
    pub fn validator(&self) -> &jsonschema::Validator {
        self.validator.get_or_init(|| {
            let path = format!("{}/tests/corpus/{}", env!("CARGO_MANIFEST_DIR"), self.file);
            let text = std::fs::read_to_string(&path).unwrap();
            let schema: Value = serde_json::from_str(&text).unwrap();
            jsonschema::validator_for(&schema).unwrap()
        })
    }

    /// Fails, listing every violation, when `body` breaks the schema.
    pub fn assert_valid(&self, body: &Value) {
        let errors: Vec<String> = self
            .validator()
            .iter_errors(body)
            .map(|err| format!("{} at {}", err, err.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "the request breaks OpenAI's schema ({}): {errors:#?}\n{body:#}",
            self.file
        );
    }
}

/// `lookup({query})` answers `{"query": ..., "answer": 42}`.
pub fn lookup_tool() -> ToolDefinition {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Lookup {
        query: String,
    }
    ToolDefinition::from_fn(
        "lookup",
        "Looks up a fact.",
        |input: Lookup, _ctx| async move {
            Ok::<_, ToolError>(json!({"query": input.query, "answer": 42}))
        },
    )
    .unwrap()
}

/// The key appears in request headers only: not in errors, events or the session log.
fn assert_key_stays_secret(outcome: &Outcome) {
    let error = match &outcome.result {
        Ok(_) => String::new(),
        Err(err) => format!("{err} {err:?} {:?}", err.to_info()),
    };
    let events = serde_json::to_string(&outcome.events).unwrap();
    let records = serde_json::to_string(&outcome.records).unwrap();
    for (what, text) in [("error", error), ("events", events), ("records", records)] {
        assert!(
            !text.contains(KEY),
            "the key leaked into the {what}: {text}"
        );
    }
}

/// The roles of the stored records, in order.
pub fn roles(records: &[Record]) -> Vec<&'static str> {
    records
        .iter()
        .map(|record| match record {
            Record::User(_) => "user",
            Record::Assistant(_) => "assistant",
            Record::ToolResult(_) => "tool_result",
            Record::FailedTurn(_) => "failed_turn",
            _ => "other",
        })
        .collect()
}

/// The stored failed turns (usage a provider reported before the turn failed).
pub fn failed_turns(records: &[Record]) -> Vec<&FailedTurn> {
    records
        .iter()
        .filter_map(|record| match record {
            Record::FailedTurn(failed) => Some(failed),
            _ => None,
        })
        .collect()
}

/// The usage the operation's end event reports.
pub fn operation_usage(events: &[Event]) -> Usage {
    events
        .iter()
        .find_map(|event| match event {
            Event::OperationEnd { usage, .. } => Some(*usage),
            _ => None,
        })
        .unwrap()
}

/// The text and thinking deltas, concatenated by kind.
pub fn streamed(events: &[Event]) -> (String, String) {
    let mut text = String::new();
    let mut thinking = String::new();
    for event in events {
        match event {
            Event::TextDelta { text: delta } => text.push_str(delta),
            Event::ThinkingDelta { text: delta } => thinking.push_str(delta),
            _ => {}
        }
    }
    (text, thinking)
}

/// The tool results of the log: (call id, content, error kind).
pub fn tool_results(records: &[Record]) -> Vec<(String, String, Option<String>)> {
    records
        .iter()
        .filter_map(|record| match record {
            Record::ToolResult(result) => Some((
                result.call_id.clone(),
                result.content.clone(),
                result.error_kind.clone(),
            )),
            _ => None,
        })
        .collect()
}

/// Chat Completions invariants: every tool message answers a call of an earlier assistant
/// message, the system prompt comes first, and the request streams with usage.
pub fn assert_openai_request(request: &Recorded) {
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(
        request.headers.get("authorization").map(String::as_str),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(
        request.headers.get("content-type").map(String::as_str),
        Some("application/json")
    );
    assert_eq!(request.body["stream"], json!(true));
    let messages = request.body["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "system");
    let mut calls = Vec::new();
    let mut answered = std::collections::HashSet::new();
    for message in messages {
        match message["role"].as_str().unwrap() {
            "assistant" => {
                for call in message["tool_calls"].as_array().into_iter().flatten() {
                    let id = call["id"].as_str().unwrap().to_owned();
                    assert!(
                        !id.is_empty() && !calls.contains(&id),
                        "call id {id:?} is empty or repeated"
                    );
                    calls.push(id);
                }
                assert!(
                    !message["content"].is_null() || message.get("tool_calls").is_some(),
                    "an empty assistant message: {message}"
                );
            }
            "tool" => {
                let id = message["tool_call_id"].as_str().unwrap();
                assert!(
                    calls.iter().any(|call| call == id),
                    "tool result {id} answers no earlier call"
                );
                assert!(answered.insert(id.to_owned()), "call {id} answered twice");
            }
            "system" | "user" => {}
            other => panic!("unexpected role {other}"),
        }
    }
}

/// Messages invariants: headers, alternating roles starting with the user, and every
/// `tool_result` answering a `tool_use` of the assistant message just before it.
pub fn assert_anthropic_request(request: &Recorded) {
    assert_eq!(request.path, "/v1/messages");
    assert_eq!(
        request.headers.get("x-api-key").map(String::as_str),
        Some(KEY)
    );
    assert_eq!(
        request.headers.get("anthropic-version").map(String::as_str),
        Some("2023-06-01")
    );
    assert_eq!(request.headers.get("authorization"), None);
    assert_eq!(request.body["stream"], json!(true));
    let messages = request.body["messages"].as_array().unwrap();
    let mut previous_uses: Vec<String> = Vec::new();
    let mut all_uses = std::collections::HashSet::new();
    let mut answered = std::collections::HashSet::new();
    for (idx, message) in messages.iter().enumerate() {
        let role = message["role"].as_str().unwrap();
        assert_eq!(role, if idx % 2 == 0 { "user" } else { "assistant" });
        let blocks = message["content"].as_array().unwrap();
        assert!(!blocks.is_empty(), "an empty message: {message}");
        let mut uses = Vec::new();
        for block in blocks {
            match block["type"].as_str().unwrap() {
                "tool_use" => {
                    let id = block["id"].as_str().unwrap().to_owned();
                    // Messages refuses a request whose tool_use ids repeat anywhere in it.
                    assert!(
                        !id.is_empty() && all_uses.insert(id.clone()),
                        "tool_use id {id:?} is empty or repeated"
                    );
                    uses.push(id);
                }
                "tool_result" => {
                    let id = block["tool_use_id"].as_str().unwrap();
                    assert!(
                        previous_uses.iter().any(|use_id| use_id == id),
                        "tool result {id} answers no tool_use of the previous message"
                    );
                    assert!(
                        answered.insert(id.to_owned()),
                        "tool_use {id} answered twice"
                    );
                }
                "text" => assert!(!block["text"].as_str().unwrap().is_empty()),
                _ => {}
            }
        }
        previous_uses = uses;
    }
}

/// The JSON of a text SSE frame list, for building bodies.
pub fn frames(frames: &[String]) -> String {
    frames.concat()
}

/// `data: <json>\n\n`.
pub fn data(value: &Value) -> String {
    format!("data: {value}\n\n")
}
