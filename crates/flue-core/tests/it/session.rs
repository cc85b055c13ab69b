//! The session loop end to end: prompts, tools, abort, busy, structured results, recovery.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use flue_core::{
    AgentConfig, AssistantContent, AssistantMessage, BoxFuture, Event, ExecOptions, FlueError,
    Harness, LocalSandbox, MemoryStore, ModelProvider, ModelRef, PromptOptions, ProviderRegistry,
    Record, StopReason, StoredRecord, ToolCall, ToolDefinition, ToolError, Usage, UserMessage,
    model::{ModelInfo, ModelPrice, ModelRequest, ModelTurn, TurnSink},
    store::{SessionKey, SessionStore},
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tokio::sync::Notify;

/// One scripted turn of the test provider.
#[derive(Clone)]
enum Turn {
    Text(&'static str),
    Calls(Vec<(&'static str, Value)>),
    Hang,
    /// Streams some text, then hangs (aborted mid-reply).
    HangAfterText(&'static str),
    Fail,
    /// Fails after the provider reported 7 input tokens (a mid-stream error).
    FailAfterInput,
}

/// A provider that plays `turns` in order and records every request it receives.
struct TestProvider {
    turns: Mutex<Vec<Turn>>,
    requests: Mutex<Vec<Vec<Record>>>,
    systems: Mutex<Vec<String>>,
    tool_names: Mutex<Vec<Vec<String>>>,
}

impl TestProvider {
    fn new(turns: Vec<Turn>) -> Arc<Self> {
        Arc::new(Self {
            turns: Mutex::new(turns.into_iter().rev().collect()),
            requests: Mutex::default(),
            systems: Mutex::default(),
            tool_names: Mutex::default(),
        })
    }

    fn requests(&self) -> Vec<Vec<Record>> {
        self.requests.lock().unwrap().clone()
    }
}

impl ModelProvider for TestProvider {
    fn id(&self) -> &str {
        "test"
    }

    fn model_info(&self, _model: &str) -> ModelInfo {
        ModelInfo {
            price: Some(ModelPrice {
                input: 1.0,
                output: 2.0,
                ..ModelPrice::default()
            }),
            ..ModelInfo::default()
        }
    }

    fn stream_turn<'a>(
        &'a self,
        request: ModelRequest<'a>,
        sink: &'a TurnSink,
    ) -> BoxFuture<'a, flue_core::Result<ModelTurn>> {
        self.requests
            .lock()
            .unwrap()
            .push(request.messages.to_vec());
        self.systems.lock().unwrap().push(request.system.to_owned());
        self.tool_names
            .lock()
            .unwrap()
            .push(request.tools.iter().map(|tool| tool.name.clone()).collect());
        let turn = self
            .turns
            .lock()
            .unwrap()
            .pop()
            .unwrap_or(Turn::Text("(script exhausted)"));
        let n_calls = request.messages.len();
        Box::pin(async move {
            let usage = Usage {
                input_tokens: 10,
                output_tokens: 5,
                ..Usage::default()
            };
            match turn {
                Turn::Text(text) => {
                    sink.text_delta(text);
                    Ok(ModelTurn {
                        content: vec![AssistantContent::Text { text: text.into() }],
                        usage,
                        stop_reason: StopReason::EndTurn,
                    })
                }
                Turn::Calls(calls) => Ok(ModelTurn {
                    content: calls
                        .into_iter()
                        .enumerate()
                        .map(|(idx, (name, input))| {
                            AssistantContent::ToolCall(ToolCall {
                                id: format!("call_{n_calls}_{idx}"),
                                name: name.into(),
                                input,
                            })
                        })
                        .collect(),
                    usage,
                    stop_reason: StopReason::ToolUse,
                }),
                Turn::Hang => std::future::pending().await,
                Turn::HangAfterText(text) => {
                    sink.text_delta(text);
                    std::future::pending().await
                }
                Turn::FailAfterInput => {
                    sink.text_delta("partial");
                    sink.failed_turn_usage(Usage {
                        input_tokens: 7,
                        ..Usage::default()
                    });
                    Err(FlueError::Provider {
                        provider: "test".into(),
                        message: "overloaded mid-stream".into(),
                        status: None,
                        retryable: true,
                        retry_after_ms: None,
                        source: None,
                    })
                }
                Turn::Fail => Err(FlueError::Provider {
                    provider: "test".into(),
                    message: "overloaded".into(),
                    status: None,
                    retryable: true,
                    retry_after_ms: None,
                    source: None,
                }),
            }
        })
    }
}

/// A test harness: a provider, a memory store and a local sandbox in a temp dir.
struct Fixture {
    harness: Harness,
    provider: Arc<TestProvider>,
    store: Arc<MemoryStore>,
    _dir: tempfile::TempDir,
}

async fn fixture(turns: Vec<Turn>, agent: AgentConfig) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("AGENTS.md"), "Workspace rule: be kind.").unwrap();
    fixture_in(dir, turns, agent, Arc::new(MemoryStore::new())).await
}

async fn fixture_in(
    dir: tempfile::TempDir,
    turns: Vec<Turn>,
    agent: AgentConfig,
    store: Arc<MemoryStore>,
) -> Fixture {
    let provider = TestProvider::new(turns);
    let harness = Harness::builder(agent.with_model("test/model"))
        .with_instance_id("instance-1")
        .with_store(store.clone())
        .with_providers(ProviderRegistry::new().with_provider(provider.clone()))
        .with_sandbox(Arc::new(LocalSandbox::new(dir.path()).unwrap()))
        .build()
        .await
        .unwrap();
    Fixture {
        harness,
        provider,
        store,
        _dir: dir,
    }
}

/// A tool that echoes its `text` input.
fn echo_tool() -> ToolDefinition {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Input {
        text: String,
    }
    ToolDefinition::from_fn("echo", "Echoes text.", |input: Input, _ctx| async move {
        Ok(json!(format!("echo: {}", input.text)))
    })
    .unwrap()
}

/// A tool that blocks until `release` is notified, and reports when it started.
fn gate_tool(name: &str, started: Arc<Notify>, release: Arc<Notify>) -> ToolDefinition {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Input {}
    ToolDefinition::from_fn(name, "Waits.", move |_input: Input, ctx| {
        let started = started.clone();
        let release = release.clone();
        async move {
            started.notify_one();
            tokio::select! {
                () = release.notified() => Ok(json!("released")),
                () = ctx.cancel.cancelled() => Err(ToolError::new("aborted", "cancelled")),
            }
        }
    })
    .unwrap()
}

fn kinds(records: &[Record]) -> Vec<&'static str> {
    records
        .iter()
        .map(|record| match record {
            Record::User(_) => "user",
            Record::Assistant(_) => "assistant",
            Record::ToolResult(result) if result.is_error => "tool_error",
            Record::ToolResult(_) => "tool",
            Record::Shell(_) => "shell",
            Record::Compaction(_) => "compaction",
            Record::FailedTurn(_) => "failed_turn",
            _ => "other",
        })
        .collect()
}

fn tool_result_contents(records: &[Record]) -> Vec<(String, bool)> {
    records
        .iter()
        .filter_map(|record| match record {
            Record::ToolResult(result) => Some((result.content.clone(), result.is_error)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_tool_round_trip_is_stored_and_streamed() {
    let f = fixture(
        vec![
            Turn::Calls(vec![("echo", json!({"text": "hi"}))]),
            Turn::Text("done"),
        ],
        AgentConfig::new()
            .with_instructions("You echo.")
            .with_tool(echo_tool()),
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let mut handle = session.prompt("please echo", PromptOptions::default());
    let mut events = handle.take_events().unwrap();
    let response = handle.await.unwrap();

    assert_eq!(response.text, "done");
    assert_eq!(
        response.model,
        ModelRef {
            provider: "test".into(),
            id: "model".into()
        }
    );
    assert_eq!(response.usage.input_tokens, 20);
    assert_eq!(response.usage.output_tokens, 10);
    assert_eq!(
        response.usage.cost_usd,
        Some((20.0 * 1.0 + 10.0 * 2.0) / 1e6)
    );

    let records = session.records().await;
    assert_eq!(
        kinds(&records),
        vec!["user", "assistant", "tool", "assistant"]
    );
    assert_eq!(
        tool_result_contents(&records),
        vec![("echo: hi".to_owned(), false)]
    );

    let mut names = Vec::new();
    while let Some(event) = events.recv().await {
        names.push(match event {
            Event::OperationStart { .. } => "start",
            Event::TextDelta { .. } => "text",
            Event::ToolStart { .. } => "tool_start",
            Event::ToolEnd { .. } => "tool_end",
            Event::TurnEnd { .. } => "turn_end",
            Event::OperationEnd { .. } => "end",
            _ => "other",
        });
    }
    assert_eq!(
        names,
        vec![
            "start",
            "turn_end",
            "tool_start",
            "tool_end",
            "text",
            "turn_end",
            "end"
        ]
    );

    // Durable: the store holds exactly what the session reports.
    let key = SessionKey::new("instance-1", "default");
    let stored = f.store.load(&key, 0).await.unwrap().unwrap();
    assert_eq!(stored.version, 4);
    let stored: Vec<Record> = stored.records.into_iter().map(|r| r.record).collect();
    assert_eq!(stored, records);
}

#[tokio::test]
async fn the_system_prompt_is_instructions_then_workspace_context() {
    let f = fixture(
        vec![Turn::Text("ok")],
        AgentConfig::new().with_instructions("Be brief."),
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    session
        .prompt("hi", PromptOptions::default())
        .await
        .unwrap();
    assert_eq!(
        f.provider.systems.lock().unwrap().clone(),
        vec!["Be brief.\n\nWorkspace rule: be kind.".to_owned()]
    );
}

#[tokio::test]
async fn a_second_prompt_sees_the_first_conversation() {
    let f = fixture(
        vec![Turn::Text("first"), Turn::Text("second")],
        AgentConfig::new(),
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    session
        .prompt("one", PromptOptions::default())
        .await
        .unwrap();
    session
        .prompt("two", PromptOptions::default())
        .await
        .unwrap();
    let requests = f.provider.requests();
    assert_eq!(kinds(&requests[1]), vec!["user", "assistant", "user"]);
}

#[tokio::test]
async fn a_reopened_harness_continues_from_the_store() {
    let store = Arc::new(MemoryStore::new());
    let first = fixture_in(
        tempfile::tempdir().unwrap(),
        vec![Turn::Text("a")],
        AgentConfig::new(),
        store.clone(),
    )
    .await;
    first
        .harness
        .session("default")
        .await
        .unwrap()
        .prompt("one", PromptOptions::default())
        .await
        .unwrap();
    let second = fixture_in(
        tempfile::tempdir().unwrap(),
        vec![Turn::Text("b")],
        AgentConfig::new(),
        store,
    )
    .await;
    let session = second.harness.session("default").await.unwrap();
    session
        .prompt("two", PromptOptions::default())
        .await
        .unwrap();
    assert_eq!(
        kinds(&second.provider.requests()[0]),
        vec!["user", "assistant", "user"]
    );
}

#[tokio::test]
async fn an_open_session_picks_up_records_written_elsewhere() {
    let store = Arc::new(MemoryStore::new());
    let dir = tempfile::tempdir().unwrap();
    let f = fixture_in(
        dir,
        vec![Turn::Text("seen")],
        AgentConfig::new(),
        store.clone(),
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    // Another process appends to the same session.
    let key = SessionKey::new("instance-1", "default");
    let outside = StoredRecord::new(Record::User(UserMessage::text("from elsewhere")), 0);
    store.append(&key, 0, &[outside]).await.unwrap();
    session
        .prompt("mine", PromptOptions::default())
        .await
        .unwrap();
    assert_eq!(kinds(&f.provider.requests()[0]), vec!["user", "user"]);
    assert_eq!(session.version().await, 3);
}

#[tokio::test]
async fn several_tool_calls_run_concurrently() {
    let (a_started, b_started) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    // Each tool releases the other: run one after the other, they would wait forever.
    let agent = AgentConfig::new()
        .with_tool(gate_tool("a", a_started.clone(), b_started.clone()))
        .with_tool(gate_tool("b", b_started, a_started));
    let f = fixture(
        vec![
            Turn::Calls(vec![("a", json!({})), ("b", json!({}))]),
            Turn::Text("both ran"),
        ],
        agent,
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let handle = session.prompt("go", PromptOptions::default());
    let response = tokio::time::timeout(Duration::from_secs(120), handle)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(response.text, "both ran");
    let results = tool_result_contents(&session.records().await);
    assert_eq!(
        results,
        vec![
            ("released".to_owned(), false),
            ("released".to_owned(), false)
        ]
    );
}

#[tokio::test]
async fn invalid_tool_input_becomes_a_tool_error_the_model_can_retry_from() {
    let f = fixture(
        vec![
            Turn::Calls(vec![("echo", json!({"txt": 1}))]),
            Turn::Calls(vec![("echo", json!({"text": "fixed"}))]),
            Turn::Text("ok"),
        ],
        AgentConfig::new().with_tool(echo_tool()),
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    session
        .prompt("go", PromptOptions::default())
        .await
        .unwrap();
    let records = session.records().await;
    assert_eq!(
        kinds(&records),
        vec![
            "user",
            "assistant",
            "tool_error",
            "assistant",
            "tool",
            "assistant"
        ]
    );
    let Record::ToolResult(first) = &records[2] else {
        panic!("expected a tool result")
    };
    assert_eq!(first.error_kind.as_deref(), Some("invalid_input"));
    assert!(
        first.content.contains("\"text\" is a required property"),
        "{}",
        first.content
    );
}

#[tokio::test]
async fn an_unknown_tool_is_answered_with_an_error() {
    let f = fixture(
        vec![Turn::Calls(vec![("nope", json!({}))]), Turn::Text("sorry")],
        AgentConfig::new().with_tool(echo_tool()),
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    session
        .prompt("go", PromptOptions::default())
        .await
        .unwrap();
    let results = tool_result_contents(&session.records().await);
    assert_eq!(
        results,
        vec![(
            "there is no tool named \"nope\"; available tools: echo, task".to_owned(),
            true
        )]
    );
}

#[tokio::test]
async fn a_second_operation_on_a_busy_session_fails_at_once() {
    let (started, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let f = fixture(
        vec![Turn::Calls(vec![("gate", json!({}))]), Turn::Text("done")],
        AgentConfig::new().with_tool(gate_tool("gate", started.clone(), release.clone())),
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let first = session.prompt("one", PromptOptions::default());
    started.notified().await;
    // Another handle to the same session shares its busy state.
    let same = f.harness.session("default").await.unwrap();
    let second = same.prompt("two", PromptOptions::default()).await;
    assert!(
        matches!(second, Err(FlueError::SessionBusy { .. })),
        "{second:?}"
    );
    let shell = same.shell("true", ExecOptions::new()).await;
    assert!(
        matches!(shell, Err(FlueError::SessionBusy { .. })),
        "{shell:?}"
    );
    assert!(matches!(
        same.delete().await,
        Err(FlueError::SessionBusy { .. })
    ));
    // Other sessions are independent.
    let other = f.harness.session("other").await.unwrap();
    assert_eq!(other.records().await, vec![]);
    release.notify_one();
    assert_eq!(first.await.unwrap().text, "done");
    // Free again once the operation ended.
    assert!(same.shell("true", ExecOptions::new()).await.is_ok());
}

/// A short all-or-nothing tool (interrupt behaviour `complete`): signals `started`, then
/// takes `millis` and counts its runs; it ignores cancellation by design.
fn complete_tool(
    started: Arc<Notify>,
    runs: Arc<std::sync::atomic::AtomicUsize>,
) -> ToolDefinition {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Input {}
    ToolDefinition::from_fn("write", "Writes.", move |_input: Input, ctx| {
        let started = started.clone();
        let runs = runs.clone();
        async move {
            started.notify_one();
            // Wait long enough for the abort to land, unless the call saw it.
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(200)) => {}
                () = ctx.cancel.cancelled() => {
                    return Err(ToolError::new("aborted", "stopped half-way"));
                }
            }
            runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(json!("written"))
        }
    })
    .unwrap()
    .with_meta(flue_core::ToolMeta {
        interrupt: flue_core::tool::InterruptBehavior::Complete,
        ..flue_core::ToolMeta::default()
    })
}

#[tokio::test]
async fn an_abort_lets_a_complete_call_finish_and_cancels_the_others() {
    let (started, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let write_started = Arc::new(Notify::new());
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let f = fixture(
        vec![
            Turn::Calls(vec![("gate", json!({})), ("write", json!({}))]),
            Turn::Text("after"),
        ],
        AgentConfig::new()
            .with_tool(gate_tool("gate", started.clone(), release))
            .with_tool(complete_tool(write_started.clone(), runs.clone())),
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let handle = session.prompt("go", PromptOptions::default());
    started.notified().await;
    write_started.notified().await;
    handle.abort();
    assert!(matches!(handle.await, Err(FlueError::Aborted)));
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 1);
    let records = session.records().await;
    assert_eq!(
        kinds(&records),
        vec!["user", "assistant", "tool_error", "tool"]
    );
    let (Record::ToolResult(gate), Record::ToolResult(write)) = (&records[2], &records[3]) else {
        panic!("expected tool results")
    };
    assert_eq!(gate.error_kind.as_deref(), Some("aborted"));
    assert_eq!(write.content, "written");
}

#[tokio::test]
async fn aborting_during_a_tool_leaves_every_call_answered() {
    let (started, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let f = fixture(
        vec![
            Turn::Calls(vec![("gate", json!({})), ("echo", json!({"text": "x"}))]),
            Turn::Text("after"),
        ],
        AgentConfig::new()
            .with_tool(gate_tool("gate", started.clone(), release))
            .with_tool(echo_tool()),
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let mut handle = session.prompt("go", PromptOptions::default());
    let mut events = handle.take_events().unwrap();
    started.notified().await;
    handle.abort();
    assert!(matches!(handle.await, Err(FlueError::Aborted)));
    let records = session.records().await;
    assert_eq!(
        kinds(&records),
        vec!["user", "assistant", "tool_error", "tool"]
    );
    let Record::ToolResult(gate) = &records[2] else {
        panic!("expected a tool result")
    };
    assert_eq!(gate.error_kind.as_deref(), Some("aborted"));
    let mut last = None;
    while let Some(event) = events.recv().await {
        last = Some(event);
    }
    assert!(matches!(
        last,
        Some(Event::OperationEnd {
            outcome: flue_core::Outcome::Aborted,
            ..
        })
    ));
    // The session is usable afterwards and the model sees a well-formed log.
    assert_eq!(
        session
            .prompt("again", PromptOptions::default())
            .await
            .unwrap()
            .text,
        "after"
    );
}

#[tokio::test]
async fn aborting_the_model_stream_keeps_the_user_message_only() {
    let f = fixture(vec![Turn::Hang, Turn::Text("later")], AgentConfig::new()).await;
    let session = f.harness.session("default").await.unwrap();
    let handle = session.prompt("hello?", PromptOptions::default());
    let cancel = handle.cancel_token();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        cancel.cancel();
    });
    assert!(matches!(handle.await, Err(FlueError::Aborted)));
    assert_eq!(kinds(&session.records().await), vec!["user"]);
    session
        .prompt("still there?", PromptOptions::default())
        .await
        .unwrap();
    assert_eq!(
        kinds(&session.records().await),
        vec!["user", "user", "assistant"]
    );
}

#[tokio::test]
async fn aborting_a_streaming_reply_keeps_its_text_marked_interrupted() {
    let f = fixture(
        vec![Turn::HangAfterText("Half an ans"), Turn::Text("later")],
        AgentConfig::new(),
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let handle = session.prompt("hello?", PromptOptions::default());
    let cancel = handle.cancel_token();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        cancel.cancel();
    });
    assert!(matches!(handle.await, Err(FlueError::Aborted)));
    let records = session.records().await;
    assert_eq!(kinds(&records), vec!["user", "assistant"]);
    let Some(Record::Assistant(kept)) = records.last() else {
        panic!("no assistant message: {records:?}");
    };
    assert!(kept.interrupted);
    assert_eq!(kept.text(), "Half an ans");
    // Stored with the flag; a reply that was not cut off serializes without it.
    let json = serde_json::to_value(kept).unwrap();
    assert_eq!(json["interrupted"], true);
    // The next message goes on from it: the model sees what it had said.
    session
        .prompt("go on", PromptOptions::default())
        .await
        .unwrap();
    let records = session.records().await;
    assert_eq!(
        kinds(&records),
        vec!["user", "assistant", "user", "assistant"]
    );
    let Some(Record::Assistant(answer)) = records.last() else {
        panic!("no answer: {records:?}");
    };
    assert!(
        serde_json::to_value(answer)
            .unwrap()
            .get("interrupted")
            .is_none()
    );
}

#[tokio::test]
async fn an_outside_cancel_token_aborts_the_operation() {
    let f = fixture(vec![Turn::Hang], AgentConfig::new()).await;
    let session = f.harness.session("default").await.unwrap();
    let outside = tokio_util_token();
    let handle = session.prompt("x", PromptOptions::default().with_cancel(outside.clone()));
    outside.cancel();
    assert!(matches!(handle.await, Err(FlueError::Aborted)));
}

fn tokio_util_token() -> flue_core::CancellationToken {
    flue_core::CancellationToken::new()
}

#[tokio::test]
async fn a_provider_failure_keeps_the_acknowledged_user_message() {
    let f = fixture(vec![Turn::Fail], AgentConfig::new()).await;
    let session = f.harness.session("default").await.unwrap();
    let err = session
        .prompt("hi", PromptOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "provider_error");
    assert_eq!(kinds(&session.records().await), vec!["user"]);
}

#[tokio::test]
async fn a_failed_turn_counts_what_it_used_and_the_model_never_sees_it() {
    let f = fixture(
        vec![
            Turn::Calls(vec![("echo", json!({"text": "hi"}))]),
            Turn::FailAfterInput,
            Turn::Text("done"),
        ],
        AgentConfig::new().with_tool(echo_tool()),
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let mut handle = session.prompt("please echo", PromptOptions::default());
    let mut events = handle.take_events().unwrap();
    let err = handle.await.unwrap_err();
    assert_eq!(err.kind(), "provider_error");
    let records = session.records().await;
    assert_eq!(
        kinds(&records),
        vec!["user", "assistant", "tool", "failed_turn"]
    );
    let Some(Record::FailedTurn(failed)) = records.last() else {
        panic!("{records:?}");
    };
    // Priced like a turn; the message names the failure.
    assert_eq!(failed.usage.input_tokens, 7);
    assert_eq!(failed.usage.cost_usd, Some(7.0 / 1e6));
    assert_eq!(failed.error_kind, "provider_error");
    assert!(failed.message.contains("overloaded mid-stream"));
    // The failed operation reports its turns, the failed one included.
    let mut end_usage = None;
    while let Some(event) = events.recv().await {
        if let Event::OperationEnd { usage, .. } = event {
            end_usage = Some(usage);
        }
    }
    let end_usage = end_usage.unwrap();
    assert_eq!((end_usage.input_tokens, end_usage.output_tokens), (17, 5));
    let cost = end_usage.cost_usd.unwrap();
    assert!((cost - (17.0 + 5.0 * 2.0) / 1e6).abs() < 1e-12, "{cost}");
    // The next request leaves the failed turn out.
    let response = session
        .prompt("again", PromptOptions::default())
        .await
        .unwrap();
    assert_eq!(response.text, "done");
    let last_request = f.provider.requests().pop().unwrap();
    assert!(
        !last_request
            .iter()
            .any(|record| matches!(record, Record::FailedTurn(_))),
        "{last_request:?}"
    );
}

#[tokio::test]
async fn calls_left_unanswered_by_a_crash_are_closed_before_new_input() {
    let store = Arc::new(MemoryStore::new());
    let key = SessionKey::new("instance-1", "default");
    store.create(&key).await.unwrap();
    let dangling = AssistantMessage {
        content: vec![AssistantContent::ToolCall(ToolCall {
            id: "c1".into(),
            name: "echo".into(),
            input: json!({"text": "x"}),
        })],
        model: ModelRef::default(),
        usage: Usage::default(),
        stop_reason: StopReason::ToolUse,
        interrupted: false,
    };
    let records = [
        Record::User(UserMessage::text("before crash")),
        Record::Assistant(dangling),
    ]
    .map(|record| StoredRecord::new(record, 0));
    store.append(&key, 0, &records).await.unwrap();
    let f = fixture_in(
        tempfile::tempdir().unwrap(),
        vec![Turn::Text("recovered")],
        AgentConfig::new().with_tool(echo_tool()),
        store,
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    session
        .prompt("after crash", PromptOptions::default())
        .await
        .unwrap();
    assert_eq!(
        kinds(&session.records().await),
        vec!["user", "assistant", "tool_error", "user", "assistant"]
    );
}

#[tokio::test]
async fn the_turn_limit_stops_a_looping_model() {
    let calls = (0..5)
        .map(|_| Turn::Calls(vec![("echo", json!({"text": "again"}))]))
        .collect();
    let f = fixture(
        calls,
        AgentConfig::new().with_tool(echo_tool()).with_max_turns(3),
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let err = session
        .prompt("loop", PromptOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, FlueError::MaxTurnsExceeded { max_turns: 3 }),
        "{err:?}"
    );
    // The log ends with answered calls: well-formed for the next operation.
    assert_eq!(kinds(&session.records().await).last(), Some(&"tool"));
}

#[tokio::test]
async fn tool_name_collisions_are_rejected_when_assembling() {
    let f = fixture(
        vec![Turn::Text("x")],
        AgentConfig::new().with_tool(echo_tool()),
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let err = session
        .prompt("x", PromptOptions::default().with_tool(echo_tool()))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, FlueError::ToolNameCollision { name } if name == "echo"),
        "{err:?}"
    );
    assert_eq!(
        session.records().await,
        vec![],
        "nothing is written for a rejected operation"
    );
}

#[tokio::test]
async fn duplicate_agent_tools_fail_at_build() {
    let provider = TestProvider::new(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let err = Harness::builder(
        AgentConfig::new()
            .with_model("test/m")
            .with_tool(echo_tool())
            .with_tool(echo_tool()),
    )
    .with_providers(ProviderRegistry::new().with_provider(provider))
    .with_sandbox(Arc::new(LocalSandbox::new(dir.path()).unwrap()))
    .build()
    .await
    .unwrap_err();
    assert_eq!(err.to_string(), "agent: duplicate tool \"echo\"");
}

#[tokio::test]
async fn an_unknown_provider_fails_at_build() {
    let dir = tempfile::tempdir().unwrap();
    let err = Harness::builder(AgentConfig::new().with_model("nowhere/m"))
        .with_sandbox(Arc::new(LocalSandbox::new(dir.path()).unwrap()))
        .build()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "unknown_provider");
}

#[tokio::test]
async fn a_structured_result_returns_validated_data() {
    let schema = json!({"type": "object", "properties": {"score": {"type": "integer"}}, "required": ["score"]});
    let f = fixture(
        vec![
            Turn::Text("I think 7"),
            Turn::Calls(vec![("finish", json!({"score": "seven"}))]),
            Turn::Calls(vec![("finish", json!({"score": 7}))]),
        ],
        AgentConfig::new(),
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let response = session
        .prompt("rate it", PromptOptions::default().with_result(schema))
        .await
        .unwrap();
    assert_eq!(response.data, Some(json!({"score": 7})));
    assert_eq!(
        kinds(&session.records().await),
        vec![
            "user",
            "assistant",
            "user",
            "assistant",
            "tool_error",
            "assistant",
            "tool"
        ]
    );
    assert_eq!(
        f.provider.tool_names.lock().unwrap()[0],
        vec!["task", "finish", "give_up"]
    );
}

#[tokio::test]
async fn a_non_object_result_schema_is_wrapped() {
    let f = fixture(
        vec![Turn::Calls(vec![("finish", json!({"result": ["a", "b"]}))])],
        AgentConfig::new(),
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let schema = json!({"type": "array", "items": {"type": "string"}});
    let response = session
        .prompt("list", PromptOptions::default().with_result(schema))
        .await
        .unwrap();
    assert_eq!(response.data, Some(json!(["a", "b"])));
}

#[tokio::test]
async fn giving_up_or_never_finishing_is_result_unavailable() {
    let schema = json!({"type": "object"});
    let f = fixture(
        vec![Turn::Calls(vec![("give_up", json!({"reason": "no data"}))])],
        AgentConfig::new(),
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let err = session
        .prompt("x", PromptOptions::default().with_result(schema.clone()))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "result unavailable: the model gave up: no data"
    );

    let chatty = (0..10).map(|_| Turn::Text("just text")).collect();
    let f = fixture(chatty, AgentConfig::new()).await;
    let session = f.harness.session("default").await.unwrap();
    let err = session
        .prompt("x", PromptOptions::default().with_result(schema))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "result_unavailable");
    assert_eq!(
        f.provider.requests().len(),
        4,
        "one answer plus three reminders"
    );
}

#[tokio::test]
async fn a_model_is_required() {
    let dir = tempfile::tempdir().unwrap();
    let harness = Harness::builder(AgentConfig::new())
        .with_sandbox(Arc::new(LocalSandbox::new(dir.path()).unwrap()))
        .build()
        .await
        .unwrap();
    let session = harness.session("default").await.unwrap();
    let err = session
        .prompt("x", PromptOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "model_not_configured");
}

#[tokio::test]
async fn session_management_errors_are_typed() {
    let f = fixture(vec![], AgentConfig::new()).await;
    let sessions = f.harness.sessions();
    assert!(matches!(
        sessions.get("missing").await,
        Err(FlueError::SessionNotFound { .. })
    ));
    sessions.create("fresh").await.unwrap();
    assert!(matches!(
        sessions.create("fresh").await,
        Err(FlueError::SessionAlreadyExists { .. })
    ));
    assert!(matches!(
        f.harness.session("task:x:y").await,
        Err(FlueError::InvalidSessionName { .. })
    ));
    assert!(matches!(
        sessions.create("").await,
        Err(FlueError::InvalidSessionName { .. })
    ));
    let names: Vec<String> = sessions
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.session)
        .collect();
    assert_eq!(names, vec!["fresh"]);
    sessions.delete("fresh").await.unwrap();
    sessions.delete("fresh").await.unwrap();
    assert!(matches!(
        sessions.get("fresh").await,
        Err(FlueError::SessionNotFound { .. })
    ));
}

#[tokio::test]
async fn a_deleted_session_handle_is_unusable_and_the_name_starts_fresh() {
    let f = fixture(vec![Turn::Text("a"), Turn::Text("b")], AgentConfig::new()).await;
    let session = f.harness.session("default").await.unwrap();
    session
        .prompt("one", PromptOptions::default())
        .await
        .unwrap();
    session.delete().await.unwrap();
    let err = session
        .prompt("two", PromptOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "session_not_found");
    let fresh = f.harness.session("default").await.unwrap();
    assert_eq!(fresh.records().await, vec![]);
}

#[tokio::test]
async fn shell_records_the_exchange_without_env_values() {
    let f = fixture(vec![], AgentConfig::new()).await;
    let session = f.harness.session("default").await.unwrap();
    let result = session
        .shell(
            "echo \"$TOKEN\" | wc -c; exit 3",
            ExecOptions::new().with_env("TOKEN", "s3cret"),
        )
        .await
        .unwrap();
    assert_eq!((result.stdout.trim(), result.exit_code), ("7", 3));
    let records = session.records().await;
    let Record::Shell(exchange) = &records[0] else {
        panic!("expected a shell record")
    };
    assert_eq!(exchange.env_keys, vec!["TOKEN"]);
    assert_eq!(exchange.exit_code, 3);
    let stored = serde_json::to_string(&records).unwrap();
    assert!(!stored.contains("s3cret"));
    // harness.shell records nothing.
    f.harness
        .shell("echo hi", ExecOptions::new())
        .await
        .unwrap();
    assert_eq!(session.records().await.len(), 1);
}
