//! Actions: the model calls one like a tool; it runs in an isolated child scope with sessions
//! of its own, its input and output are checked with stable error kinds, and what it emits
//! reaches the caller's event stream.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use flue_core::{
    ActionContext, ActionDefinition, AgentConfig, Event, EventStream, PromptOptions, Record,
    ToolDefinition, ToolError, ToolResult,
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::rules::{Reply, RuleProvider, Seen, fixture};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Research {
    /// What to research.
    topic: String,
}

/// What the research action saw of its own scope, for the test to check afterwards.
#[derive(Debug, Default)]
struct Observed {
    /// The names `ctx.harness().sessions().list()` returned inside the action.
    own_sessions: Vec<String>,
    /// The kinds of the errors got when naming reserved session names.
    reserved_names: Vec<String>,
    /// The calling session's name, as the context reports it.
    calling_session: String,
}

/// An action that opens a session in its own scope (named like the caller's), prompts it and
/// returns the reply; it logs, emits progress data and records what it saw.
fn research(observed: Arc<Mutex<Observed>>) -> ActionDefinition {
    ActionDefinition::from_fn(
        "research",
        "Researches a topic in a session of its own.",
        move |input: Research, ctx: ActionContext| {
            let observed = Arc::clone(&observed);
            async move {
                ctx.logger().info(&format!("researching {}", input.topic));
                ctx.emit_data("research.progress", &json!({"topic": input.topic}))?;
                // Named like the caller's session, yet a session of the action's own scope:
                // the caller's `default` is busy with this very call, this one is not.
                let session = ctx.harness().session(ctx.calling_session()).await?;
                let reply = session
                    .prompt(
                        &format!("Research: {}", input.topic),
                        PromptOptions::default(),
                    )
                    .await?;
                let mut reserved = Vec::new();
                for name in ["task:default:x", "action:x:default"] {
                    let err = ctx.harness().session(name).await.unwrap_err();
                    reserved.push(err.kind().to_owned());
                }
                let listed = ctx.harness().sessions().list().await?;
                let mut seen = observed.lock().unwrap();
                seen.own_sessions = listed.into_iter().map(|s| s.session).collect();
                seen.reserved_names = reserved;
                seen.calling_session = ctx.calling_session().to_owned();
                Ok::<_, ToolError>(json!({"summary": reply.text}))
            }
        },
    )
    .unwrap()
}

/// The model calls `research` once with `input`; the action's own session answers research
/// prompts; once a tool result is there, the model repeats it.
fn research_model(input: Value) -> Arc<RuleProvider> {
    RuleProvider::new(move |seen: &Seen| {
        if let Some(topic) = seen.first_user_text().strip_prefix("Research: ") {
            return Reply::Text(format!("notes on {topic}"));
        }
        match seen.last_tool_result() {
            None => Reply::Calls(vec![("research", input.clone())]),
            Some(result) => Reply::Text(format!("model saw: {}", result.content)),
        }
    })
}

async fn drain(mut events: EventStream) -> Vec<Event> {
    let mut all = Vec::new();
    while let Some(event) = events.recv().await {
        all.push(event);
    }
    all
}

fn tool_results(records: &[Record]) -> Vec<ToolResult> {
    records
        .iter()
        .filter_map(|record| match record {
            Record::ToolResult(result) => Some(result.clone()),
            _ => None,
        })
        .collect()
}

fn user_texts(records: &[Record]) -> Vec<String> {
    records
        .iter()
        .filter_map(|record| match record {
            Record::User(message) => Some(message.joined_text()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn an_action_prompts_a_session_of_its_own_and_its_result_returns_to_the_model() {
    let observed = Arc::new(Mutex::new(Observed::default()));
    let provider = research_model(json!({"topic": "tides"}));
    let f = fixture(
        AgentConfig::new()
            .with_model("test/m")
            .with_task_tool(false)
            .with_action(research(Arc::clone(&observed))),
        provider.clone(),
        |builder| builder,
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let mut handle = session.prompt("look into tides", PromptOptions::default());
    let events = handle.take_events().unwrap();
    let reply = handle.await.unwrap();
    let events = drain(events).await;

    assert_eq!(reply.text, r#"model saw: {"summary":"notes on tides"}"#);
    // The action is offered to the model as a tool with its description.
    assert_eq!(
        provider.seen()[0].tools,
        [(
            "research".to_owned(),
            "Researches a topic in a session of its own.".to_owned()
        )]
    );
    // What it emitted reaches the caller's stream, tied to the call.
    let data: Vec<(String, Value)> = events
        .iter()
        .filter_map(|event| match event {
            Event::Data { name, data, .. } => Some((name.clone(), data.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        data,
        [("research.progress".to_owned(), json!({"topic": "tides"}))]
    );

    // Two sessions in the store: the caller's and the action's, under the action prefix.
    let names = f.session_names().await;
    assert_eq!(names.len(), 2, "{names:?}");
    assert_eq!(names[1], "default");
    let action_session = &names[0];
    assert!(
        action_session.starts_with("action:") && action_session.ends_with(":default"),
        "{action_session}"
    );
    // The caller's log holds only its own conversation; the research prompt went to the
    // action's session.
    assert_eq!(user_texts(&f.records("default").await), ["look into tides"]);
    assert_eq!(
        user_texts(&f.records(action_session).await),
        ["Research: tides"]
    );
    let results = tool_results(&f.records("default").await);
    assert_eq!(results.len(), 1);
    assert!(!results[0].is_error);
    assert_eq!(results[0].data.len(), 1);

    let observed = observed.lock().unwrap();
    assert_eq!(observed.own_sessions, ["default"]);
    assert_eq!(observed.calling_session, "default");
    assert_eq!(
        observed.reserved_names,
        ["invalid_session_name", "invalid_session_name"]
    );
}

#[tokio::test]
async fn input_failing_the_schema_is_a_tool_error_the_model_recovers_from() {
    let observed = Arc::new(Mutex::new(Observed::default()));
    let f = fixture(
        AgentConfig::new()
            .with_model("test/m")
            .with_action(research(observed)),
        research_model(json!({"topic": 5})),
        |builder| builder,
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let reply = session
        .prompt("look into tides", PromptOptions::default())
        .await
        .unwrap();
    let results = tool_results(&f.records("default").await);
    assert_eq!(results.len(), 1);
    assert!(results[0].is_error);
    assert_eq!(
        results[0].error_kind.as_deref(),
        Some("action_input_validation")
    );
    assert!(
        results[0].content.contains("\"research\"") && results[0].content.contains("/topic"),
        "{}",
        results[0].content
    );
    assert!(
        reply
            .text
            .starts_with("model saw: invalid input for action \"research\"")
    );
    // The action never ran: no session of its own was opened.
    assert_eq!(f.session_names().await, ["default"]);
}

/// Runs one call of `action` (whose input is `{}`) and returns the stored tool result.
async fn run_once(action: ActionDefinition) -> ToolResult {
    let provider = RuleProvider::new(|seen: &Seen| match seen.last_tool_result() {
        None => Reply::Calls(vec![("shape", json!({}))]),
        Some(_) => Reply::Text("done".into()),
    });
    let f = fixture(
        AgentConfig::new().with_model("test/m").with_action(action),
        provider,
        |builder| builder,
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let reply = session
        .prompt("go", PromptOptions::default())
        .await
        .unwrap();
    assert_eq!(reply.text, "done");
    tool_results(&f.records("default").await).remove(0)
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Empty {}

#[tokio::test]
async fn output_failing_the_output_schema_is_action_output_validation() {
    let action = ActionDefinition::from_fn("shape", "Shapes.", |_input: Empty, _ctx| async {
        Ok::<_, ToolError>(json!({"count": "three"}))
    })
    .unwrap()
    .with_output_schema(json!({
        "type": "object",
        "properties": {"count": {"type": "integer"}},
        "required": ["count"],
    }))
    .unwrap();
    let result = run_once(action).await;
    assert!(result.is_error);
    assert_eq!(
        result.error_kind.as_deref(),
        Some("action_output_validation")
    );
    assert!(
        result.content.contains("\"shape\"") && result.content.contains("/count"),
        "{}",
        result.content
    );
}

#[tokio::test]
async fn output_that_cannot_become_json_is_action_output_serialization() {
    // A map keyed by pairs has no JSON form: serde_json refuses non-string keys.
    let action = ActionDefinition::from_fn("shape", "Shapes.", |_input: Empty, _ctx| async {
        let grid: BTreeMap<(u8, u8), u8> = BTreeMap::from([((0, 0), 1)]);
        Ok::<_, ToolError>(grid)
    })
    .unwrap();
    let result = run_once(action).await;
    assert!(result.is_error);
    assert_eq!(
        result.error_kind.as_deref(),
        Some("action_output_serialization")
    );
    assert!(
        result.content.contains("\"shape\"") && result.content.contains("key must be a string"),
        "{}",
        result.content
    );
}

#[tokio::test]
async fn an_action_named_like_a_tool_fails_resolve_and_build() {
    let tool = ToolDefinition::from_fn("research", "A tool.", |_input: Empty, _ctx| async {
        Ok::<_, ToolError>(json!("ok"))
    })
    .unwrap();
    let observed = Arc::new(Mutex::new(Observed::default()));
    let agent = AgentConfig::new()
        .with_model("test/m")
        .with_tool(tool)
        .with_action(research(Arc::clone(&observed)))
        .with_action(research(observed));
    let err = agent.clone().resolve().unwrap_err();
    assert_eq!(err.kind(), "invalid_config");
    let message = err.to_string();
    assert!(
        message.contains("duplicate action \"research\"")
            && message.contains("action \"research\" has the name of a tool"),
        "{message}"
    );
    let built = flue_core::Harness::builder(agent).build().await;
    assert_eq!(built.unwrap_err().kind(), "invalid_config");
}

#[tokio::test]
async fn actions_calling_actions_stop_at_the_depth_limit() {
    // Every session, the action's own included, calls `dig` once, then reports what it saw.
    let provider = RuleProvider::new(|seen: &Seen| match seen.last_tool_result() {
        None => Reply::Calls(vec![("dig", json!({}))]),
        Some(result) => Reply::Text(format!("[{}]", result.content)),
    });
    let dig = ActionDefinition::from_fn("dig", "Digs deeper.", |_input: Empty, ctx| async move {
        let session = ctx.harness().session("default").await?;
        let reply = session.prompt("dig", PromptOptions::default()).await?;
        Ok::<_, ToolError>(reply.text)
    })
    .unwrap();
    let f = fixture(
        AgentConfig::new().with_model("test/m").with_action(dig),
        provider,
        |builder| builder,
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let reply = session
        .prompt("dig", PromptOptions::default())
        .await
        .unwrap();
    let depth = flue_core::MAX_ACTION_DEPTH as usize;
    assert!(
        reply.text.starts_with(&"[".repeat(depth + 1))
            && reply.text.contains("actions nest at most 4 levels deep"),
        "{}",
        reply.text
    );
    // The root session and one session per level.
    assert_eq!(f.session_names().await.len(), depth + 1);
}

#[tokio::test]
async fn an_action_runs_inside_a_durable_submission_and_its_writes_are_fenced() {
    use flue_core::{
        AgentRuntime, BatchBody, ConversationKey, DeliveredMessage, DispatchOptions, Harness,
        Offset, ProviderRegistry, StaticAgents,
        store::{ConversationStore, SessionStore},
    };
    use flue_store::SqliteStore;

    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(&dir.path().join("flue.db")).unwrap());
    let agents = Arc::new(StaticAgents::new().with_agent("researcher", || {
        let observed = Arc::new(Mutex::new(Observed::default()));
        Harness::builder(
            AgentConfig::new()
                .with_model("test/m")
                .with_action(research(observed)),
        )
        .with_providers(
            ProviderRegistry::new().with_provider(research_model(json!({"topic": "tides"}))),
        )
        .with_workspace_context(None)
    }));
    let runtime = AgentRuntime::builder(store.clone(), agents)
        .with_poll_interval(std::time::Duration::from_millis(10))
        .start()
        .await
        .unwrap();
    let key = ConversationKey::new("researcher", "c1");
    let receipt = runtime
        .dispatch(
            &key,
            DeliveredMessage::user("look into tides"),
            DispatchOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        runtime.read(&receipt.submission_id).await.unwrap(),
        r#"model saw: {"summary":"notes on tides"}"#
    );
    // The action's session lives in the conversation beside the root session ...
    let names: Vec<String> = store
        .list(&key.instance_id())
        .await
        .unwrap()
        .into_iter()
        .map(|summary| summary.session)
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names[0].starts_with("action:"), "{names:?}");
    // ... and its records went through the owner's fence, tagged with the submission.
    let page = store.read_stream(&key, Offset::START, 100).await.unwrap();
    let action_batches: Vec<_> = page
        .batches
        .iter()
        .filter(|batch| {
            matches!(&batch.body, BatchBody::Records { session, .. } if *session == names[0])
        })
        .collect();
    assert!(!action_batches.is_empty());
    assert!(
        action_batches
            .iter()
            .all(|batch| batch.submission_id.as_deref() == Some(receipt.submission_id.as_str()))
    );
    runtime.shutdown().await.unwrap();
}

#[tokio::test]
async fn aborting_the_caller_aborts_what_the_action_runs() {
    let provider = RuleProvider::new(|seen: &Seen| match seen.first_user_text().as_str() {
        "slow" => Reply::Hang,
        _ => Reply::Calls(vec![("wait", json!({}))]),
    });
    let child_error: Arc<Mutex<Option<String>>> = Arc::default();
    let recorded = Arc::clone(&child_error);
    let wait = ActionDefinition::from_fn("wait", "Waits.", move |_input: Empty, ctx| {
        let recorded = Arc::clone(&recorded);
        async move {
            let session = ctx.harness().session("default").await?;
            ctx.emit_data("started", &json!(true))?;
            let result = session.prompt("slow", PromptOptions::default()).await;
            *recorded.lock().unwrap() = result.as_ref().err().map(|err| err.kind().to_owned());
            Ok::<_, ToolError>(result?.text)
        }
    })
    .unwrap();
    let f = fixture(
        AgentConfig::new().with_model("test/m").with_action(wait),
        provider,
        |builder| builder,
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let mut handle = session.prompt("go", PromptOptions::default());
    let mut events = handle.take_events().unwrap();
    while let Some(event) = events.recv().await {
        if matches!(event, Event::Data { .. }) {
            break;
        }
    }
    handle.abort();
    let outcome = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        std::future::IntoFuture::into_future(handle),
    )
    .await
    .expect("the aborted call did not finish");
    assert_eq!(outcome.unwrap_err().kind(), "aborted");
    // The operation the action started on its own session was cancelled with the caller.
    assert_eq!(child_error.lock().unwrap().as_deref(), Some("aborted"));
}

#[tokio::test]
async fn a_subagents_action_runs_as_that_subagent() {
    let provider = RuleProvider::new(|seen: &Seen| {
        match (seen.first_user_text().as_str(), seen.last_tool_result()) {
            ("inside", _) => Reply::Text("noted".into()),
            ("use note", None) => Reply::Calls(vec![("note", json!({}))]),
            ("lead", None) => Reply::Calls(vec![(
                "task",
                json!({"prompt": "use note", "agent": "helper"}),
            )]),
            (_, Some(result)) => Reply::Text(format!("[{}]", result.content)),
            (_, None) => Reply::Text("?".into()),
        }
    });
    let note =
        ActionDefinition::from_fn("note", "Takes a note.", |_input: Empty, ctx| async move {
            let session = ctx.harness().session("notes").await?;
            let reply = session.prompt("inside", PromptOptions::default()).await?;
            Ok::<_, ToolError>(reply.text)
        })
        .unwrap();
    let f = fixture(
        AgentConfig::new().with_model("test/m").with_subagent(
            flue_core::AgentProfile::new("helper")
                .with_instructions("You are the helper.")
                .with_action(note),
        ),
        provider.clone(),
        |builder| builder,
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let reply = session
        .prompt("lead", PromptOptions::default())
        .await
        .unwrap();
    assert!(reply.text.contains("[noted]"), "{}", reply.text);
    let seen = provider.seen();
    let tools_of = |first: &str| {
        seen.iter()
            .find(|seen| seen.first_user_text() == first)
            .map(|seen| (seen.tool_names().join(","), seen.system.clone()))
            .unwrap()
    };
    // The root offers `task` only; the helper's task and the action's own session run as the
    // helper: its action, its instructions (and `task`, offered to every agent by default).
    assert_eq!(tools_of("lead").0, "task");
    assert_eq!(tools_of("use note").0, "note,task");
    let (inside_tools, inside_system) = tools_of("inside");
    assert_eq!(inside_tools, "note,task");
    assert!(
        inside_system.contains("You are the helper."),
        "{inside_system}"
    );
}

#[tokio::test]
async fn an_always_ask_rule_pauses_an_action_before_it_runs() {
    let observed = Arc::new(Mutex::new(Observed::default()));
    let f = fixture(
        AgentConfig::new()
            .with_model("test/m")
            .with_action(research(Arc::clone(&observed)))
            .with_permission("research", flue_core::Permission::AlwaysAsk),
        research_model(json!({"topic": "tides"})),
        |builder| builder,
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let paused = session
        .prompt("look into tides", PromptOptions::default())
        .await
        .unwrap();
    assert!(paused.requires_action());
    let pending = paused.pending_actions[0].clone();
    assert_eq!(pending.tool_name, "research");
    // Nothing ran yet: no session of the action's own.
    assert_eq!(f.session_names().await, ["default"]);
    let done = session
        .resolve(&pending.action_id, flue_core::ActionDecision::Allow)
        .await
        .unwrap();
    assert_eq!(done.text, r#"model saw: {"summary":"notes on tides"}"#);
    assert_eq!(f.session_names().await.len(), 2);
}
