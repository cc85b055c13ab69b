//! Compaction end to end with the scripted model and tiny context windows: the threshold
//! trigger, overflow recovery, `session.compact()`, summaries and their failures.
//!
//! Every model request goes through [`Recording`], so tests can check what each request
//! looked like (for example, that every tool result in it answers a call in it).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use flue_core::{
    AgentConfig, BoxFuture, Event, FlueError, Harness, LocalSandbox, MemoryStore, ModelProvider,
    PromptOptions, PromptResponse, ProviderRegistry, Record, ScriptedProvider, Session,
    ToolDefinition, Usage,
    config::Compaction,
    config::CompactionConfig,
    event::CompactionReason,
    model::{ModelInfo, ModelRequest, ModelTurn, TurnSink},
};
use pretty_assertions::assert_eq;
use serde_json::json;

/// The session's model.
const MODEL: &str = "scripted/script.json";

/// A summary reply for scripts: answers every summary request (they quote the conversation).
const SUMMARY_RULE: &str = r###"{"when": {"user_contains": "<conversation>"},
    "reply": {"text": "## Goal\nEcho every message.\n\n## Progress\n### Done\n- [x] Echoed earlier messages.\n\n## Next Steps\n1. Keep echoing."}}"###;

/// One model request as the provider received it.
#[derive(Clone, Debug)]
struct Request {
    model: String,
    system: String,
    messages: Vec<Record>,
}

impl Request {
    fn is_summary(&self) -> bool {
        self.system
            .starts_with("You are a context summarization assistant")
    }

    /// The text of the summary request's one user message.
    fn prompt(&self) -> String {
        match self.messages.as_slice() {
            [Record::User(message)] => message.joined_text(),
            other => panic!("a summary request has one user message, got {other:?}"),
        }
    }
}

/// The scripted provider, recording every request.
struct Recording {
    inner: ScriptedProvider,
    requests: Mutex<Vec<Request>>,
}

impl Recording {
    fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    fn summary_requests(&self) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(Request::is_summary)
            .collect()
    }

    fn main_requests(&self) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(|request| !request.is_summary())
            .collect()
    }
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
        self.requests.lock().unwrap().push(Request {
            model: request.model.to_owned(),
            system: request.system.to_owned(),
            messages: request.messages.to_vec(),
        });
        self.inner.stream_turn(request, sink)
    }
}

struct Fixture {
    harness: Harness,
    provider: Arc<Recording>,
    _dir: tempfile::TempDir,
}

impl Fixture {
    async fn session(&self) -> Session {
        self.harness.session("default").await.unwrap()
    }
}

/// A harness over `scripts` (file name, JSON) whose agent runs `script.json` with an `echo` tool.
async fn build(scripts: &[(&str, &str)], agent: AgentConfig) -> flue_core::Result<Fixture> {
    let dir = tempfile::tempdir().unwrap();
    for (name, script) in scripts {
        std::fs::write(dir.path().join(name), script).unwrap();
    }
    let provider = Arc::new(Recording {
        inner: ScriptedProvider::new(dir.path()),
        requests: Mutex::default(),
    });
    let harness = Harness::builder(agent.with_model(MODEL).with_tool(echo_tool()))
        .with_instance_id("instance-1")
        .with_store(Arc::new(MemoryStore::new()))
        .with_providers(ProviderRegistry::new().with_provider(provider.clone()))
        .with_sandbox(Arc::new(LocalSandbox::new(dir.path()).unwrap()))
        .with_workspace_context(None)
        .build()
        .await?;
    Ok(Fixture {
        harness,
        provider,
        _dir: dir,
    })
}

async fn fixture(script: &str, agent: AgentConfig) -> Fixture {
    build(&[("script.json", script)], agent).await.unwrap()
}

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

fn keep_recent(tokens: u64) -> Compaction {
    Compaction::Enabled(CompactionConfig {
        keep_recent_tokens: Some(tokens),
        ..CompactionConfig::default()
    })
}

/// Runs one prompt; returns its result and every event it sent.
async fn prompt(session: &Session, text: &str) -> (flue_core::Result<PromptResponse>, Vec<Event>) {
    let mut handle = session.prompt(text, PromptOptions::default());
    let events = handle.take_events().unwrap();
    let result = handle.await;
    (result, drain(events).await)
}

/// Runs `session.compact()`; returns its result and every event it sent.
async fn compact(session: &Session) -> (flue_core::Result<()>, Vec<Event>) {
    let mut handle = session.compact();
    let events = handle.take_events().unwrap();
    let result = handle.await;
    (result, drain(events).await)
}

async fn drain(mut events: flue_core::EventStream) -> Vec<Event> {
    let mut out = Vec::new();
    while let Some(event) = events.recv().await {
        out.push(event);
    }
    out
}

/// The compaction events, with the duration zeroed.
fn compaction_events(events: &[Event]) -> Vec<Event> {
    events
        .iter()
        .filter_map(|event| match event {
            Event::CompactionStart { .. } => Some(event.clone()),
            Event::CompactionEnd {
                messages_before,
                messages_after,
                tokens_before,
                tokens_after,
                usage,
                error,
                ..
            } => Some(Event::CompactionEnd {
                messages_before: *messages_before,
                messages_after: *messages_after,
                tokens_before: *tokens_before,
                tokens_after: *tokens_after,
                duration_ms: 0,
                usage: *usage,
                error: error.clone(),
            }),
            _ => None,
        })
        .collect()
}

/// Reads events until a compaction starts; panics if the operation ends first.
async fn wait_for_compaction(events: &mut flue_core::EventStream) -> CompactionReason {
    while let Some(event) = events.recv().await {
        if let Event::CompactionStart { reason, .. } = event {
            return reason;
        }
    }
    panic!("the operation ended without compacting");
}

fn start_reasons(events: &[Event]) -> Vec<CompactionReason> {
    events
        .iter()
        .filter_map(|event| match event {
            Event::CompactionStart { reason, .. } => Some(*reason),
            _ => None,
        })
        .collect()
}

fn error_kinds(events: &[Event]) -> Vec<Option<String>> {
    events
        .iter()
        .filter_map(|event| match event {
            Event::CompactionEnd { error, .. } => {
                Some(error.as_ref().map(|error| error.kind.clone()))
            }
            _ => None,
        })
        .collect()
}

fn kinds(records: &[Record]) -> Vec<&'static str> {
    records
        .iter()
        .map(|record| match record {
            Record::User(_) => "user",
            Record::Assistant(_) => "assistant",
            Record::ToolResult(_) => "tool",
            Record::Shell(_) => "shell",
            Record::Compaction(_) => "compaction",
            _ => "other",
        })
        .collect()
}

/// (index, first_kept, summary) of every compaction record.
fn compactions(records: &[Record]) -> Vec<(usize, usize, String)> {
    records
        .iter()
        .enumerate()
        .filter_map(|(idx, record)| match record {
            Record::Compaction(summary) => Some((
                idx,
                usize::try_from(summary.first_kept).unwrap(),
                summary.summary.clone(),
            )),
            _ => None,
        })
        .collect()
}

/// Every tool result in a request answers a call made earlier in it, and every call is answered.
fn assert_pairs_intact(messages: &[Record]) {
    let mut calls = HashSet::new();
    let mut answered = HashSet::new();
    for record in messages {
        match record {
            Record::Assistant(message) => {
                calls.extend(message.tool_calls().map(|call| call.id.clone()));
            }
            Record::ToolResult(result) => {
                assert!(
                    calls.contains(&result.call_id),
                    "result {} answers no earlier call in {:?}",
                    result.call_id,
                    kinds(messages)
                );
                answered.insert(result.call_id.clone());
            }
            _ => {}
        }
    }
    assert_eq!(calls, answered, "unanswered calls in {:?}", kinds(messages));
}

#[tokio::test]
async fn a_200_turn_session_stays_under_the_window() {
    // Reserve 200 (the output limit), so compaction starts above 1800 tokens and keeps 900.
    let script = format!(
        r#"{{"model": {{"context_window": 2000, "max_output_tokens": 200}},
            "rules": [{SUMMARY_RULE},
              {{"when": {{"tool_result": "echo"}}, "reply": {{"text": "Noted: {{{{tool_result}}}}"}}}},
              {{"reply": {{"tool_calls": [{{"name": "echo", "input": {{"text": "{{{{user}}}}"}}}}]}}}}]}}"#
    );
    let f = fixture(&script, AgentConfig::new().with_instructions("You echo.")).await;
    let session = f.session().await;
    let mut n_compacted_prompts = 0;
    for n in 0..200 {
        let text = format!("message {n}: the quick brown fox jumps over the lazy dog again");
        let (result, events) = prompt(&session, &text).await;
        let response = result.unwrap();
        assert_eq!(response.text, format!("Noted: echo: {text}"));
        if !start_reasons(&events).is_empty() {
            assert_eq!(
                start_reasons(&events),
                vec![CompactionReason::Threshold],
                "prompt {n}"
            );
            assert_eq!(error_kinds(&events), vec![None], "prompt {n}");
            n_compacted_prompts += 1;
        }
    }

    let records = session.records().await;
    // The full history stays in the store: all 200 messages are there.
    let n_users = records
        .iter()
        .filter(|record| matches!(record, Record::User(_)))
        .count();
    assert_eq!(n_users, 200);
    let compactions = compactions(&records);
    assert!(
        compactions.len() >= 10,
        "only {} compactions",
        compactions.len()
    );
    assert_eq!(compactions.len(), n_compacted_prompts);
    for (idx, first_kept, _) in &compactions {
        assert!(first_kept < idx);
        assert!(
            !matches!(records[*first_kept], Record::ToolResult(_)),
            "a cut at {first_kept} separates a tool result from its call"
        );
    }
    // Every turn's input fit under window - reserve, and every request kept its pairs.
    let max_input = records
        .iter()
        .filter_map(|record| match record {
            Record::Assistant(message) => Some(message.usage.input_tokens),
            _ => None,
        })
        .max()
        .unwrap();
    assert!(max_input <= 1800, "a turn had {max_input} input tokens");
    for request in f.provider.main_requests() {
        assert_pairs_intact(&request.messages);
    }
    let last = f.provider.main_requests().pop().unwrap();
    assert!(matches!(last.messages[0], Record::Compaction(_)));
    assert!(f.provider.summary_requests().len() >= compactions.len());
}

/// A script for the manual tests: "first" is answered at once; "work" takes two tool rounds.
fn two_round_script(context_window: u64) -> String {
    format!(
        r###"{{"model": {{"context_window": {context_window}}},
            "rules": [
              {{"when": {{"user_contains": "## Original Request"}}, "reply": {{"text": "PREFIX SUMMARY"}}}},
              {{"when": {{"user_contains": "<previous-summary>"}}, "reply": {{"text": "SUMMARY TWO"}}}},
              {{"when": {{"user_contains": "<conversation>"}}, "reply": {{"text": "SUMMARY ONE"}}}},
              {{"when": {{"user_contains": "work"}}, "reply": {{"tool_calls": [{{"name": "echo", "input": {{"text": "{long}"}}}}]}}}},
              {{"when": {{"tool_result": "echo", "turn": 2}}, "reply": {{"tool_calls": [{{"name": "echo", "input": {{"text": "again"}}}}]}}}},
              {{"when": {{"tool_result": "echo"}}, "reply": {{"text": "worked"}}}},
              {{"reply": {{"text": "ok {{{{user}}}}"}}}}]}}"###,
        long = "x".repeat(400)
    )
}

#[tokio::test]
async fn manual_compaction_summarises_history_and_the_split_turn() {
    // Keep 20 tokens: the cut lands on the second tool round of "work", splitting that turn.
    let f = fixture(
        &two_round_script(100_000),
        AgentConfig::new().with_compaction(keep_recent(20)),
    )
    .await;
    let session = f.session().await;
    prompt(&session, "first").await.0.unwrap();
    prompt(&session, "work").await.0.unwrap();
    let before = session.records().await;
    assert_eq!(
        kinds(&before),
        [
            "user",
            "assistant",
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant"
        ]
    );

    let (result, events) = compact(&session).await;
    result.unwrap();

    let records = session.records().await;
    assert_eq!(records[..8], before[..], "the history is kept in the store");
    assert_eq!(
        compactions(&records),
        vec![(
            8,
            5,
            "SUMMARY ONE\n\n---\n\n**Turn context (split turn):**\n\nPREFIX SUMMARY".to_owned()
        )]
    );
    // Two summary requests: the history before the split turn, and the turn's beginning.
    let prompts: Vec<String> = f
        .provider
        .summary_requests()
        .iter()
        .map(Request::prompt)
        .collect();
    assert_eq!(prompts.len(), 2);
    assert!(
        prompts[0]
            .starts_with("<conversation>\n[User]: first\n\n[Assistant]: ok first\n</conversation>")
    );
    assert!(prompts[1].starts_with("<conversation>\n[User]: work\n\n[Assistant tool call]: echo"));
    assert!(prompts[1].contains("## Original Request"));

    let summary_usage = match &compaction_events(&events)[1] {
        Event::CompactionEnd { usage, .. } => *usage,
        other => panic!("expected the end of compaction, got {other:?}"),
    };
    assert!(summary_usage.input_tokens > 0);
    let tokens_before = match &events[1] {
        Event::CompactionStart {
            estimated_tokens, ..
        } => *estimated_tokens,
        other => panic!("expected the start of compaction, got {other:?}"),
    };
    let tokens_after = match &compaction_events(&events)[1] {
        Event::CompactionEnd { tokens_after, .. } => *tokens_after,
        _ => unreachable!(),
    };
    assert!(tokens_after < tokens_before);
    assert_eq!(
        compaction_events(&events),
        vec![
            Event::CompactionStart {
                reason: CompactionReason::Manual,
                estimated_tokens: tokens_before,
            },
            Event::CompactionEnd {
                messages_before: 8,
                messages_after: 4,
                tokens_before,
                tokens_after,
                duration_ms: 0,
                usage: summary_usage,
                error: None,
            }
        ]
    );
    // The operation's usage is the summaries', and so is the stored record's (the
    // console's timeline shows it).
    match events.last() {
        Some(Event::OperationEnd { usage, error, .. }) => {
            assert_eq!((*usage, error.clone()), (summary_usage, None));
        }
        other => panic!("expected the end of the operation, got {other:?}"),
    }
    let stored_usage = records.iter().find_map(|record| match record {
        Record::Compaction(summary) => Some(summary.usage),
        _ => None,
    });
    assert_eq!(stored_usage, Some(Some(summary_usage)));

    // The next turn sees the summary, then the kept call with its result.
    prompt(&session, "next").await.0.unwrap();
    let request = f.provider.main_requests().pop().unwrap();
    assert_eq!(
        kinds(&request.messages),
        ["compaction", "assistant", "tool", "assistant", "user"]
    );
    assert_pairs_intact(&request.messages);
}

#[tokio::test]
async fn a_later_compaction_updates_the_previous_summary() {
    // Keep 4 tokens: each cut lands on the newest user message.
    let f = fixture(
        &two_round_script(100_000),
        AgentConfig::new().with_compaction(keep_recent(4)),
    )
    .await;
    let session = f.session().await;
    prompt(&session, "first").await.0.unwrap();
    prompt(&session, "second").await.0.unwrap();
    compact(&session).await.0.unwrap();
    prompt(&session, "third").await.0.unwrap();
    compact(&session).await.0.unwrap();
    prompt(&session, "fourth").await.0.unwrap();

    let records = session.records().await;
    assert_eq!(
        compactions(&records),
        vec![
            (4, 2, "SUMMARY ONE".to_owned()),
            (7, 5, "SUMMARY TWO".to_owned())
        ]
    );
    let prompts: Vec<String> = f
        .provider
        .summary_requests()
        .iter()
        .map(Request::prompt)
        .collect();
    assert_eq!(prompts.len(), 2);
    // The update carries the previous summary and only what it did not cover.
    assert!(
        prompts[1].starts_with(
            "<previous-summary>\nSUMMARY ONE\n</previous-summary>\n\n<conversation>\n\
             [User]: second\n\n[Assistant]: ok second\n</conversation>\n\nThe messages in \
             <conversation> are new messages to fold into the existing summary"
        ),
        "{}",
        prompts[1]
    );
    assert!(!prompts[1].contains("first"));
    let request = f.provider.main_requests().pop().unwrap();
    assert_eq!(
        kinds(&request.messages),
        ["compaction", "user", "assistant", "user"]
    );
    assert_eq!(compactions(&request.messages)[0].2, "SUMMARY TWO");
}

#[tokio::test]
async fn nothing_to_compact_resolves_without_work() {
    let f = fixture(&two_round_script(100_000), AgentConfig::new()).await;
    let session = f.session().await;
    // An empty session, then a short one: both fit the default keep-recent budget.
    let (result, events) = compact(&session).await;
    result.unwrap();
    assert_eq!(compaction_events(&events), vec![]);
    prompt(&session, "first").await.0.unwrap();
    let before = session.records().await;
    let (result, events) = compact(&session).await;
    result.unwrap();
    assert_eq!(compaction_events(&events), vec![]);
    assert_eq!(session.records().await, before);
    assert_eq!(f.provider.summary_requests().len(), 0);
}

#[tokio::test]
async fn compact_is_busy_while_another_operation_runs() {
    let script = r#"{"rules": [{"reply": {"text": "slow", "delay_ms": 60000}}]}"#;
    let f = fixture(script, AgentConfig::new()).await;
    let session = f.session().await;
    let running = session.prompt("hello", PromptOptions::default());
    let busy = session.compact().await;
    assert_eq!(
        busy.map_err(|err| err.kind()),
        Err("session_busy"),
        "compact must not run beside a prompt"
    );
    running.abort();
    assert_eq!(running.await.map_err(|err| err.kind()), Err("aborted"));
}

#[tokio::test]
async fn compaction_false_turns_off_only_the_threshold() {
    // A window whose threshold (667) is passed on the fourth prompt and overflowed on the seventh.
    let script = format!(
        r#"{{"model": {{"context_window": 1000}}, "rules": [{SUMMARY_RULE}, {{"reply": {{"text": "ok"}}}}]}}"#
    );
    // Without the `task` tool, whose schema would count towards the window.
    let f = fixture(
        &script,
        AgentConfig::new()
            .with_compaction(Compaction::Disabled)
            .with_task_tool(false),
    )
    .await;
    let session = f.session().await;
    let mut reasons = Vec::new();
    for n in 0..8 {
        let text = format!("{n} {}", "y".repeat(600));
        let (result, events) = prompt(&session, &text).await;
        assert_eq!(result.unwrap().text, "ok");
        reasons.push(start_reasons(&events));
    }
    // No threshold compaction, but the overflow was recovered.
    let n_overflows = reasons
        .iter()
        .filter(|reasons| **reasons == [CompactionReason::Overflow])
        .count();
    assert_eq!(n_overflows, 1, "{reasons:?}");
    assert!(reasons.iter().all(|reasons| reasons.len() <= 1));
    // Manual compaction still works.
    let (result, events) = compact(&session).await;
    result.unwrap();
    assert_eq!(start_reasons(&events), [CompactionReason::Manual]);
    assert_eq!(compactions(&session.records().await).len(), 2);
}

#[tokio::test]
async fn an_overflow_is_recovered_by_compacting_and_retrying_the_turn() {
    let script = format!(
        r#"{{"model": {{"context_window": 1000}}, "rules": [{SUMMARY_RULE}, {{"reply": {{"text": "ok"}}}}]}}"#
    );
    // Without the `task` tool, whose schema would count towards the window.
    let f = fixture(
        &script,
        AgentConfig::new()
            .with_compaction(Compaction::Disabled)
            .with_task_tool(false),
    )
    .await;
    let session = f.session().await;
    // Each prompt adds about 150 tokens: the seventh no longer fits.
    for n in 0..6 {
        let text = format!("{n} {}", "y".repeat(600));
        let (result, events) = prompt(&session, &text).await;
        result.unwrap();
        assert_eq!(compaction_events(&events), vec![], "prompt {n}");
    }
    let (result, events) = prompt(&session, &format!("6 {}", "y".repeat(600))).await;
    let response = result.unwrap();
    assert_eq!(response.text, "ok");
    assert_eq!(start_reasons(&events), [CompactionReason::Overflow]);
    // The failed turn stored nothing: the log holds the new message, the summary and the reply.
    let records = session.records().await;
    assert_eq!(
        kinds(&records[records.len() - 3..]),
        ["user", "compaction", "assistant"]
    );
    // The overflowing request and its retry, with the summary request between them.
    let requests = f.provider.requests();
    let last_three: Vec<bool> = requests[requests.len() - 3..]
        .iter()
        .map(Request::is_summary)
        .collect();
    assert_eq!(last_three, [false, true, false]);
    // The operation's usage includes the summary.
    let summary_usage = match compaction_events(&events).pop() {
        Some(Event::CompactionEnd { usage, .. }) => usage,
        other => panic!("expected the end of compaction, got {other:?}"),
    };
    let turn_usage = match records.last() {
        Some(Record::Assistant(message)) => message.usage,
        other => panic!("expected the reply, got {other:?}"),
    };
    let mut expected = turn_usage;
    expected += summary_usage;
    assert_eq!(response.usage, expected);
}

#[tokio::test]
async fn overflow_recovery_is_tried_once_per_turn() {
    let script = format!(
        r#"{{"rules": [{SUMMARY_RULE},
            {{"when": {{"user_contains": "huge"}}, "reply": {{"error": {{"kind": "context_overflow", "message": "prompt is too long"}}}}}},
            {{"reply": {{"text": "ok"}}}}]}}"#
    );
    let f = fixture(&script, AgentConfig::new().with_compaction(keep_recent(1))).await;
    let session = f.session().await;

    // With nothing to compact, the overflow is reported at once.
    let (result, events) = prompt(&session, "huge").await;
    assert_eq!(
        result.map(|_| ()).map_err(|err| err.to_string()),
        Err("model provider \"scripted\": the conversation exceeds the model's context window: prompt is too long; compact the session or use a model with a larger context window".into())
    );
    assert_eq!(compaction_events(&events), vec![]);
    assert_eq!(f.provider.requests().len(), 1);

    prompt(&session, "hello").await.0.unwrap();
    let n_before = f.provider.requests().len();
    // Compaction works, the retry overflows again, and the operation fails with it.
    let (result, events) = prompt(&session, "huge again").await;
    assert_eq!(
        result.map(|_| ()).map_err(|err| err.kind()),
        Err("context_overflow")
    );
    assert_eq!(start_reasons(&events), [CompactionReason::Overflow]);
    let requests = f.provider.requests();
    let attempts: Vec<bool> = requests[n_before..]
        .iter()
        .map(Request::is_summary)
        .collect();
    assert_eq!(attempts, [false, true, false]);
    // The summary stays: it is durable progress.
    let records = session.records().await;
    assert_eq!(
        kinds(&records),
        ["user", "user", "assistant", "user", "compaction"]
    );
}

#[tokio::test]
async fn a_failing_summariser_leaves_the_session_unchanged() {
    let script = r#"{"model": {"context_window": 1000}, "rules": [
        {"when": {"user_contains": "<conversation>"}, "reply": {"error": {"message": "summary model down"}}},
        {"reply": {"text": "ok"}}]}"#;
    let f = fixture(script, AgentConfig::new().with_compaction(keep_recent(1))).await;
    let session = f.session().await;
    prompt(&session, "first").await.0.unwrap();
    prompt(&session, "second").await.0.unwrap();
    let (records, version) = (session.records().await, session.version().await);

    let (result, events) = compact(&session).await;
    assert_eq!(
        result.map_err(|err| err.to_string()),
        Err("model provider \"scripted\" failed: summary model down".into())
    );
    assert_eq!(session.records().await, records);
    assert_eq!(session.version().await, version);
    let compaction = compaction_events(&events);
    let estimated = match &compaction[0] {
        Event::CompactionStart {
            estimated_tokens, ..
        } => *estimated_tokens,
        other => panic!("expected the start of compaction, got {other:?}"),
    };
    assert_eq!(
        compaction,
        vec![
            Event::CompactionStart {
                reason: CompactionReason::Manual,
                estimated_tokens: estimated,
            },
            Event::CompactionEnd {
                messages_before: 4,
                messages_after: 4,
                tokens_before: estimated,
                tokens_after: estimated,
                duration_ms: 0,
                usage: Usage::default(),
                error: Some(flue_core::ErrorInfo {
                    kind: "provider_error".into(),
                    message: "model provider \"scripted\" failed: summary model down".into(),
                }),
            }
        ]
    );
}

#[tokio::test]
async fn a_failed_threshold_compaction_lets_the_operation_go_on() {
    // Above 667 tokens the threshold fires; the summary fails; the turns still fit the window.
    let script = r#"{"model": {"context_window": 1000}, "rules": [
        {"when": {"user_contains": "<conversation>"}, "reply": {"error": {"message": "summary model down"}}},
        {"when": {"user_contains": "work"}, "reply": {"tool_calls": [{"name": "echo", "input": {"text": "a"}}]}},
        {"when": {"tool_result": "echo", "turn": 2}, "reply": {"tool_calls": [{"name": "echo", "input": {"text": "b"}}]}},
        {"when": {"tool_result": "echo"}, "reply": {"text": "worked"}},
        {"reply": {"text": "ok"}}]}"#;
    let f = fixture(script, AgentConfig::new().with_compaction(keep_recent(1))).await;
    let session = f.session().await;
    prompt(&session, &"z".repeat(2_400)).await.0.unwrap();
    let (result, events) = prompt(&session, "work").await;
    assert_eq!(result.unwrap().text, "worked");
    // Tried once before the first turn, reported, and not again in this operation.
    assert_eq!(start_reasons(&events), [CompactionReason::Threshold]);
    assert_eq!(error_kinds(&events), [Some("provider_error".to_owned())]);
    assert_eq!(compactions(&session.records().await), vec![]);
}

#[tokio::test]
async fn aborting_a_compaction_leaves_the_session_unchanged() {
    let script = r#"{"model": {"context_window": 1000}, "rules": [
        {"when": {"user_contains": "<conversation>"}, "reply": {"text": "late", "delay_ms": 60000}},
        {"reply": {"text": "ok"}}]}"#;
    let f = fixture(script, AgentConfig::new().with_compaction(keep_recent(1))).await;
    let session = f.session().await;
    prompt(&session, "first").await.0.unwrap();
    prompt(&session, "second").await.0.unwrap();
    let records = session.records().await;

    // Manual: abort once the summary is under way.
    let mut handle = session.compact();
    let mut events = handle.take_events().unwrap();
    assert_eq!(
        wait_for_compaction(&mut events).await,
        CompactionReason::Manual
    );
    handle.abort();
    assert_eq!(handle.await.map_err(|err| err.kind()), Err("aborted"));
    assert_eq!(
        error_kinds(&drain(events).await),
        [Some("aborted".to_owned())]
    );
    assert_eq!(session.records().await, records);

    // Threshold, inside a prompt: the acknowledged message stays, nothing else is written.
    let mut handle = session.prompt(&"z".repeat(2_600), PromptOptions::default());
    let mut events = handle.take_events().unwrap();
    assert_eq!(
        wait_for_compaction(&mut events).await,
        CompactionReason::Threshold
    );
    handle.abort();
    assert_eq!(handle.await.map_err(|err| err.kind()), Err("aborted"));
    let after = session.records().await;
    assert_eq!(after[..records.len()], records[..]);
    assert_eq!(kinds(&after[records.len()..]), ["user"]);
}

#[tokio::test]
async fn compaction_model_writes_the_summaries() {
    let summary_script = r#"{"rules": [{"reply": {"text": "FROM THE SUMMARY MODEL"}}]}"#;
    let agent = AgentConfig::new().with_compaction(Compaction::Enabled(CompactionConfig {
        keep_recent_tokens: Some(3),
        model: Some("scripted/summary.json".into()),
        ..CompactionConfig::default()
    }));
    let f = build(
        &[
            ("script.json", r#"{"rules": [{"reply": {"text": "ok"}}]}"#),
            ("summary.json", summary_script),
        ],
        agent.clone(),
    )
    .await
    .unwrap();
    let session = f.session().await;
    prompt(&session, "first").await.0.unwrap();
    prompt(&session, "second").await.0.unwrap();
    compact(&session).await.0.unwrap();
    let models: Vec<(String, bool)> = f
        .provider
        .requests()
        .iter()
        .map(|request| (request.model.clone(), request.is_summary()))
        .collect();
    assert_eq!(
        models,
        [
            ("script.json".to_owned(), false),
            ("script.json".to_owned(), false),
            ("summary.json".to_owned(), true)
        ]
    );
    assert_eq!(
        compactions(&session.records().await),
        vec![(4, 2, "FROM THE SUMMARY MODEL".to_owned())]
    );

    // A compaction model that cannot be used fails when the harness is built.
    let missing = build(
        &[("script.json", r#"{"rules": [{"reply": {"text": "ok"}}]}"#)],
        agent,
    )
    .await
    .map(|_| ());
    assert_eq!(missing.map_err(|err| err.kind()), Err("script_error"));
}

#[test]
fn compaction_events_are_tagged_snake_case() {
    let start = Event::CompactionStart {
        reason: CompactionReason::Overflow,
        estimated_tokens: 1200,
    };
    assert_eq!(
        serde_json::to_value(&start).unwrap(),
        json!({"type": "compaction_start", "reason": "overflow", "estimated_tokens": 1200})
    );
    let end = Event::CompactionEnd {
        messages_before: 40,
        messages_after: 9,
        tokens_before: 1200,
        tokens_after: 300,
        duration_ms: 15,
        usage: Usage {
            input_tokens: 1000,
            output_tokens: 80,
            ..Usage::default()
        },
        error: None,
    };
    assert_eq!(
        serde_json::to_value(&end).unwrap(),
        json!({
            "type": "compaction_end", "messages_before": 40, "messages_after": 9,
            "tokens_before": 1200, "tokens_after": 300, "duration_ms": 15,
            "usage": {"input_tokens": 1000, "output_tokens": 80, "cache_read_tokens": 0,
                      "cache_write_tokens": 0}
        })
    );
    assert_eq!(
        serde_json::from_value::<Event>(serde_json::to_value(&end).unwrap()).unwrap(),
        end
    );
}

#[test]
fn context_overflow_has_a_stable_kind() {
    let error = FlueError::ContextOverflow {
        provider: "anthropic".into(),
        message: "prompt is too long".into(),
    };
    assert_eq!(
        (error.kind(), error.to_string()),
        (
            "context_overflow",
            "model provider \"anthropic\": the conversation exceeds the model's context window: prompt is too long; compact the session or use a model with a larger context window"
                .to_owned()
        )
    );
}
