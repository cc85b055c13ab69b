//! Known secret values never leave a tool: tool results and errors, bash output,
//! `session.shell` exchanges and MCP sampling exchanges reach the store, the events and the next model request redacted,
//! in every common transform.

use std::sync::{Arc, Mutex};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use flue_core::{
    AgentConfig, BoxFuture, Event, ExecOptions, Harness, LocalSandbox, MemoryStore, ModelProvider,
    PromptOptions, ProviderRegistry, Record, ScriptedProvider, ToolDefinition, ToolError, Usage,
    model::{ModelInfo, ModelRequest, ModelTurn, TurnSink},
    record::SampledMessage,
    record::SamplingExchange,
};
use serde_json::json;

/// The key the tools leak; it has characters URL and JSON encoding change.
const KEY: &str = "sk-ant-api03-Qx7Rt2+Lm9Vb4/Nc8Kd1Wz5=Yh3Pf6Gs0Ja";

/// Every way the tools print the key.
fn transforms() -> Vec<(&'static str, String)> {
    let (first, second) = KEY.split_at(KEY.len() / 2);
    vec![
        ("exact", KEY.to_owned()),
        ("upper", KEY.to_uppercase()),
        ("lower", KEY.to_lowercase()),
        ("base64", STANDARD.encode(KEY)),
        ("base64 offset by one", STANDARD.encode(format!("x{KEY}"))),
        (
            "base64 url, no padding",
            URL_SAFE_NO_PAD.encode(format!("ab{KEY}")),
        ),
        ("hex", hex::encode(KEY)),
        (
            "url",
            KEY.replace('+', "%2B")
                .replace('/', "%2F")
                .replace('=', "%3D"),
        ),
        ("reversed", KEY.chars().rev().collect()),
        ("halves", format!("{first}\n...\n{second}")),
    ]
}

/// Fails when `text` holds the key in any transform, or any 12-character piece of it.
#[track_caller]
fn assert_no_leak(place: &str, text: &str) {
    let lower = text.to_lowercase();
    for (name, form) in transforms() {
        for line in form.lines().filter(|line| line.len() > 3) {
            assert!(
                !lower.contains(&line.to_lowercase()),
                "{place} holds the key ({name}): {text}"
            );
        }
    }
    let chars: Vec<char> = KEY.chars().collect();
    for window in chars.windows(12) {
        let piece: String = window.iter().collect::<String>().to_lowercase();
        assert!(!lower.contains(&piece), "{place} holds {piece:?}: {text}");
    }
}

/// Records every request, then answers with the scripted provider.
struct Recording {
    inner: ScriptedProvider,
    requests: Mutex<Vec<String>>,
}

impl ModelProvider for Recording {
    fn id(&self) -> &str {
        self.inner.id()
    }

    fn model_info(&self, model: &str) -> ModelInfo {
        self.inner.model_info(model)
    }

    fn check_model<'a>(&'a self, model: &'a str) -> BoxFuture<'a, flue_core::Result<()>> {
        self.inner.check_model(model)
    }

    fn stream_turn<'a>(
        &'a self,
        request: ModelRequest<'a>,
        sink: &'a TurnSink,
    ) -> BoxFuture<'a, flue_core::Result<ModelTurn>> {
        let messages = serde_json::to_string(request.messages).unwrap();
        self.requests.lock().unwrap().push(messages);
        self.inner.stream_turn(request, sink)
    }
}

/// A tool that prints the key in every transform.
fn leak_tool() -> ToolDefinition {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Input {}
    ToolDefinition::from_fn("leak", "Prints things.", |_input: Input, _ctx| async move {
        let lines: Vec<String> = transforms()
            .into_iter()
            .map(|(name, form)| format!("{name}: {form}"))
            .collect();
        Ok(json!({"printed": lines.join("\n")}))
    })
    .unwrap()
}

/// A tool that fails with the key in its message.
fn failing_tool() -> ToolDefinition {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Input {}
    ToolDefinition::from_fn("fail", "Fails.", |_input: Input, _ctx| async move {
        Err::<serde_json::Value, _>(ToolError::new(
            "denied",
            format!("token {} rejected", KEY.to_uppercase()),
        ))
    })
    .unwrap()
}

/// The script: all three tools in one turn, then a reply quoting the last result.
const SCRIPT: &str = r#"{"rules": [
  {"when": {"tool_result": "bash"}, "reply": {"text": "bash said: {{tool_result}}"}},
  {"reply": {"tool_calls": [
    {"name": "leak", "input": {}},
    {"name": "fail", "input": {}},
    {"name": "bash", "input": {"command": "k=$(cat key.txt); echo \"$k\"; printf %s \"$k\" | base64 -w0; echo; printf %s \"$k\" | rev; echo; printf %s \"$k\" | tr a-z A-Z"}}
  ]}}
]}"#;

#[tokio::test]
async fn tool_output_is_redacted_in_records_events_and_the_next_request() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("script.json"), SCRIPT).unwrap();
    std::fs::write(dir.path().join("key.txt"), KEY).unwrap();
    let provider = Arc::new(Recording {
        inner: ScriptedProvider::new(dir.path()),
        requests: Mutex::default(),
    });
    let agent = AgentConfig::new()
        .with_model("scripted/script.json")
        .with_tool(leak_tool())
        .with_tool(failing_tool())
        .with_tool(flue_core::tool::builtin_tool("bash").unwrap());
    let harness = Harness::builder(agent)
        .with_store(Arc::new(MemoryStore::new()))
        .with_providers(ProviderRegistry::new().with_provider(provider.clone()))
        .with_sandbox(Arc::new(LocalSandbox::new(dir.path()).unwrap()))
        .with_workspace_context(None)
        .with_secrets(["unrelated-value-0001", KEY])
        .build()
        .await
        .unwrap();
    assert_eq!(harness.redactor().len(), 2);
    let session = harness.session("default").await.unwrap();
    let mut handle = session.prompt("go", PromptOptions::default());
    let mut events = handle.take_events().unwrap();
    let response = handle.await.unwrap();
    let mut seen = Vec::new();
    while let Some(event) = events.recv().await {
        seen.push(event);
    }

    let records = session.records().await;
    let results: Vec<_> = records
        .iter()
        .filter_map(|record| match record {
            Record::ToolResult(result) => Some(result),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 3, "{records:?}");
    for result in &results {
        assert!(
            result.content.contains("[redacted]"),
            "{}: {}",
            result.tool_name,
            result.content
        );
    }
    assert!(results[1].is_error);
    assert_no_leak("the records", &serde_json::to_string(&records).unwrap());
    let tool_ends = seen
        .iter()
        .filter(|event| matches!(event, Event::ToolEnd { .. }))
        .count();
    assert_eq!(tool_ends, 3);
    assert_no_leak("the events", &serde_json::to_string(&seen).unwrap());
    let requests = provider.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 2);
    assert!(requests[1].contains("[redacted]"), "{}", requests[1]);
    assert_no_leak("the second request", &requests[1]);
    assert!(
        response.text.starts_with("bash said: "),
        "{}",
        response.text
    );
    assert_no_leak("the reply", &response.text);

    // `session.shell` records and returns its output redacted as well.
    let shell = session
        .shell(
            "cat key.txt; echo; base64 -w0 key.txt",
            ExecOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(shell.stdout, "[redacted]\n[redacted]");
    let records = session.records().await;
    assert!(matches!(records.last(), Some(Record::Shell(_))));
    assert_no_leak(
        "the shell record",
        &serde_json::to_string(&records).unwrap(),
    );
}

#[tokio::test]
async fn without_secrets_output_is_kept_as_printed() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("key.txt"), KEY).unwrap();
    let harness = Harness::builder(AgentConfig::new())
        .with_sandbox(Arc::new(LocalSandbox::new(dir.path()).unwrap()))
        .with_workspace_context(None)
        .build()
        .await
        .unwrap();
    assert!(harness.redactor().is_empty());
    let session = harness.session("default").await.unwrap();
    let shell = session
        .shell("cat key.txt", ExecOptions::default())
        .await
        .unwrap();
    assert_eq!(shell.stdout, KEY);
}

#[tokio::test]
async fn a_subagents_tool_output_is_redacted_in_its_session_and_in_the_task_result() {
    let script = r#"{"rules": [
      {"when": {"tool_result": "leak"}, "reply": {"text": "child saw: {{tool_result}}"}},
      {"when": {"tool_result": "task"}, "reply": {"text": "parent saw: {{tool_result}}"}},
      {"when": {"user_contains": "leak it"}, "reply": {"tool_calls": [{"name": "leak", "input": {}}]}},
      {"reply": {"tool_calls": [{"name": "task", "input": {"prompt": "leak it", "agent": "helper"}}]}}
    ]}"#;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("script.json"), script).unwrap();
    let store = Arc::new(MemoryStore::new());
    let agent = AgentConfig::new()
        .with_model("scripted/script.json")
        .with_subagent(
            flue_core::AgentProfile::new("helper")
                .with_description("Leaks")
                .with_tool(leak_tool()),
        );
    let harness = Harness::builder(agent)
        .with_instance_id("i1")
        .with_store(store.clone())
        .with_providers(
            ProviderRegistry::new().with_provider(Arc::new(ScriptedProvider::new(dir.path()))),
        )
        .with_sandbox(Arc::new(LocalSandbox::new(dir.path()).unwrap()))
        .with_workspace_context(None)
        .with_secrets([KEY])
        .build()
        .await
        .unwrap();
    let session = harness.session("default").await.unwrap();
    let mut handle = session.prompt("delegate", PromptOptions::default());
    let mut events = handle.take_events().unwrap();
    let response = handle.await.unwrap();
    let mut seen = Vec::new();
    while let Some(event) = events.recv().await {
        seen.push(event);
    }
    assert!(
        response.text.starts_with("parent saw: "),
        "{}",
        response.text
    );
    assert!(response.text.contains("[redacted]"), "{}", response.text);
    assert_no_leak("the reply", &response.text);
    assert_no_leak("the events", &serde_json::to_string(&seen).unwrap());
    // Every session of the conversation, the task's included.
    let sessions = flue_core::store::SessionStore::list(store.as_ref(), "i1")
        .await
        .unwrap();
    assert_eq!(sessions.len(), 2, "{sessions:?}");
    for summary in sessions {
        let key = flue_core::store::SessionKey::new("i1", summary.session.clone());
        let log = flue_core::store::SessionStore::load(store.as_ref(), &key, 0)
            .await
            .unwrap()
            .unwrap();
        let text = serde_json::to_string(&log.records).unwrap();
        assert!(text.contains("[redacted]"), "{}: {text}", summary.session);
        assert_no_leak(&summary.session, &text);
    }
}

/// A tool whose (MCP) server sampled the agent's model with the key in the conversation.
fn sampling_tool() -> ToolDefinition {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Input {}
    ToolDefinition::from_fn("sampled", "Samples.", |_input: Input, ctx| async move {
        let mut exchange = SamplingExchange::new(ctx.call_id.clone(), "docs", "scripted/x");
        exchange.system = Some(format!("you hold {KEY}"));
        exchange.messages = vec![SampledMessage {
            role: "user".to_owned(),
            text: format!("repeat {}", KEY.to_uppercase()),
        }];
        exchange.response = Some(format!("it is {KEY}"));
        exchange.usage = Usage {
            input_tokens: 1000,
            output_tokens: 100,
            ..Usage::default()
        };
        *ctx.usage.lock().unwrap() += exchange.usage;
        ctx.sampling.lock().unwrap().push(exchange);
        Ok(json!("done"))
    })
    .unwrap()
}

#[tokio::test]
async fn sampling_exchanges_are_recorded_redacted_and_counted_in_the_operation() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("script.json"),
        r#"{"rules": [
          {"when": {"tool_result": "sampled"}, "reply": {"text": "finished"}},
          {"reply": {"tool_calls": [{"name": "sampled", "input": {}}]}}
        ]}"#,
    )
    .unwrap();
    let agent = AgentConfig::new()
        .with_model("scripted/script.json")
        .with_tool(sampling_tool());
    let harness = Harness::builder(agent)
        .with_store(Arc::new(MemoryStore::new()))
        .with_providers(
            ProviderRegistry::new().with_provider(Arc::new(ScriptedProvider::new(dir.path()))),
        )
        .with_sandbox(Arc::new(LocalSandbox::new(dir.path()).unwrap()))
        .with_workspace_context(None)
        .with_secrets([KEY])
        .build()
        .await
        .unwrap();
    let session = harness.session("default").await.unwrap();
    let response = session
        .prompt("go", PromptOptions::default())
        .await
        .unwrap();
    assert_eq!(response.text, "finished");

    let records = session.records().await;
    let kinds: Vec<&str> = records
        .iter()
        .map(|record| match record {
            Record::User(_) => "user",
            Record::Assistant(_) => "assistant",
            Record::ToolResult(_) => "tool",
            Record::Sampling(_) => "sampling",
            _ => "other",
        })
        .collect();
    assert_eq!(
        kinds,
        ["user", "assistant", "tool", "sampling", "assistant"]
    );
    let Some(Record::Sampling(exchange)) = records.get(3) else {
        panic!("{records:?}");
    };
    let Some(Record::ToolResult(result)) = records.get(2) else {
        panic!("{records:?}");
    };
    assert_eq!(exchange.call_id, result.call_id);
    assert_eq!(exchange.server, "docs");
    assert!(
        exchange.response.as_deref().unwrap().contains("[redacted]"),
        "{exchange:?}"
    );
    assert_no_leak(
        "the sampling record",
        &serde_json::to_string(&records).unwrap(),
    );

    let turns: u64 = records
        .iter()
        .filter_map(|record| match record {
            Record::Assistant(message) => Some(message.usage.input_tokens),
            _ => None,
        })
        .sum();
    assert_eq!(response.usage.input_tokens, turns + 1000);
}

/// A message quoting a key is stored redacted as its submission too (what the HTTP snapshot
/// and stream serve), not only as its session record: an embedder's `StaticAgents` registry
/// gives the runtime the secrets of the agent's harness builder.
#[tokio::test]
async fn a_message_quoting_a_key_is_admitted_redacted() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("script.json"),
        r#"{"rules": [{"reply": {"text": "Noted."}}]}"#,
    )
    .unwrap();
    let scripts = dir.path().to_path_buf();
    let agents = flue_core::StaticAgents::new().with_agent("talker", move || {
        Harness::builder(AgentConfig::new().with_model("scripted/script.json"))
            .with_providers(
                ProviderRegistry::new().with_provider(Arc::new(ScriptedProvider::new(&scripts))),
            )
            .with_workspace_context(None)
            .with_secrets([KEY])
    });
    let store = Arc::new(MemoryStore::new());
    let runtime = flue_core::AgentRuntime::builder(store, Arc::new(agents))
        .start()
        .await
        .unwrap();
    let key = flue_core::ConversationKey::new("talker", "c1");
    let mut attributes = std::collections::BTreeMap::new();
    attributes.insert("token".to_owned(), KEY.to_owned());
    let messages = [
        flue_core::DeliveredMessage::user(format!("my key is {KEY}, keep it")),
        flue_core::DeliveredMessage::Signal {
            signal_type: "deploy".to_owned(),
            body: format!("deployed with {}", KEY.to_lowercase()),
            attributes,
            tag_name: None,
            initial_data: None,
            options: Box::default(),
        },
    ];
    for message in messages {
        let receipt = runtime
            .dispatch(&key, message, flue_core::DispatchOptions::default())
            .await
            .unwrap();
        runtime.wait(&receipt.submission_id).await.unwrap();
        let stored = runtime.status(&receipt.submission_id).await.unwrap();
        let text = serde_json::to_string(&stored.message).unwrap();
        assert!(text.contains("[redacted]"), "{text}");
        assert_no_leak("the stored submission", &text);
    }
    runtime.shutdown().await.unwrap();
}
