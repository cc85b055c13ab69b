//! Live actions: a running tool call asks a question (`ToolContext::ask_elicitation`, what an
//! MCP server's elicitation becomes in served agents); the question is listed with the
//! conversation's actions while the call waits, any runtime on the same database answers it
//! (checked against the schema, first answer wins), the call goes on with the answer; nobody
//! answering declines it after the timeout; `Session::answer` does the same for a harness.

use std::sync::Arc;
use std::time::Duration;

use flue_core::{
    ActionDecision, AgentConfig, AgentProfile, AgentRuntime, AssistantContent, BoxFuture,
    ConversationKey, DeliveredMessage, DispatchOptions, Harness, MemoryStore, ModelProvider,
    ProviderRegistry, Record, StaticAgents, StopReason, ToolCall, ToolDefinition, ToolError, Usage,
    elicitation::ElicitationQuestion,
    model::{ModelRequest, ModelTurn, TurnSink},
    record::ActionKind,
};
use flue_store::SqliteStore;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

/// User text `delegate` -> a `task` call giving the `helper` subagent `go`; other user text ->
/// one `ask` call; a tool result -> `got: <result>`.
struct AskModel;

impl ModelProvider for AskModel {
    fn id(&self) -> &str {
        "ask"
    }

    fn stream_turn<'a>(
        &'a self,
        request: ModelRequest<'a>,
        _sink: &'a TurnSink,
    ) -> BoxFuture<'a, flue_core::Result<ModelTurn>> {
        let last = request.messages.last().cloned();
        let n = request.messages.len();
        Box::pin(async move {
            let content = match last {
                Some(Record::ToolResult(result)) => vec![AssistantContent::Text {
                    text: format!("got: {}", result.content),
                }],
                Some(Record::User(message)) if message.joined_text() == "delegate" => {
                    vec![AssistantContent::ToolCall(ToolCall {
                        id: format!("call_{n}"),
                        name: "task".into(),
                        input: json!({"prompt": "go", "agent": "helper"}),
                    })]
                }
                _ => vec![AssistantContent::ToolCall(ToolCall {
                    id: format!("call_{n}"),
                    name: "ask".into(),
                    input: json!({}),
                })],
            };
            let stop_reason = match content.first() {
                Some(AssistantContent::ToolCall(_)) => StopReason::ToolUse,
                _ => StopReason::EndTurn,
            };
            Ok(ModelTurn {
                content,
                usage: Usage::default(),
                stop_reason,
            })
        })
    }
}

/// A tool that asks for a version (required) and a channel (default `stable`) and returns the
/// decision it got, waiting at most `timeout`.
fn ask_tool(timeout: Duration) -> ToolDefinition {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Input {}
    ToolDefinition::from_fn("ask", "Asks a question.", move |_: Input, ctx| async move {
        let question = ElicitationQuestion::new(
            "docs",
            "Which version?",
            json!({
                "type": "object",
                "properties": {
                    "version": {"type": "string"},
                    "channel": {"type": "string", "enum": ["stable", "beta"], "default": "stable"}
                },
                "required": ["version"]
            }),
        );
        let decision = ctx
            .ask_elicitation(&question, timeout)
            .await
            .map_err(|err| ToolError::new("ask", err.to_string()))?;
        serde_json::to_value(decision).map_err(|err| ToolError::new("ask", err.to_string()))
    })
    .unwrap()
}

fn agent(timeout: Duration) -> AgentConfig {
    AgentConfig::new()
        .with_model("ask/any")
        .with_tool(ask_tool(timeout))
        .with_subagent(AgentProfile::new("helper").with_tool(ask_tool(timeout)))
}

fn agents(timeout: Duration) -> Arc<StaticAgents> {
    Arc::new(StaticAgents::new().with_agent("asker", move || {
        Harness::builder(agent(timeout))
            .with_providers(ProviderRegistry::new().with_provider(Arc::new(AskModel)))
            .with_workspace_context(None)
    }))
}

async fn runtime(path: &std::path::Path, timeout: Duration) -> AgentRuntime {
    AgentRuntime::builder(Arc::new(SqliteStore::open(path).unwrap()), agents(timeout))
        .with_poll_interval(Duration::from_millis(10))
        .start()
        .await
        .unwrap()
}

/// Waits for the conversation's pending question.
async fn pending(
    runtime: &AgentRuntime,
    key: &ConversationKey,
) -> flue_core::record::PendingAction {
    for _ in 0..1000 {
        if let Ok(actions) = runtime.actions(key).await
            && let Some(info) = actions.into_iter().find(|info| info.decision.is_none())
        {
            return info.action;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no question became pending");
}

#[tokio::test]
async fn another_runtime_on_the_database_answers_the_question_once_and_the_call_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("flue.db");
    let holder = runtime(&db, Duration::from_secs(60)).await;
    // Another process's runtime: its writes reach the holder through the store alone.
    let other = runtime(&db, Duration::from_secs(60)).await;
    let key = ConversationKey::new("asker", "c1");
    let receipt = holder
        .dispatch(
            &key,
            DeliveredMessage::user("go"),
            DispatchOptions::default(),
        )
        .await
        .unwrap();
    let question = pending(&other, &key).await;
    assert_eq!(
        (
            question.kind,
            question.tool_name.as_str(),
            &question.input["defaults"]
        ),
        (
            ActionKind::Elicitation,
            "ask",
            &json!({"channel": "stable"})
        )
    );
    // A wrong answer is refused and changes nothing.
    let bad = other
        .resolve(
            &key,
            &question.action_id,
            ActionDecision::Accept {
                content: json!({"channel": "nightly"}),
            },
        )
        .await
        .unwrap_err();
    assert_eq!(bad.kind(), "invalid_decision");
    assert!(bad.to_string().contains("`version` is required"), "{bad}");
    let wrong_kind = other
        .resolve(&key, &question.action_id, ActionDecision::Allow)
        .await
        .unwrap_err();
    assert_eq!(wrong_kind.kind(), "invalid_decision");
    assert_eq!(pending(&other, &key).await.action_id, question.action_id);

    let resolved = other
        .resolve(
            &key,
            &question.action_id,
            ActionDecision::Accept {
                content: json!({"version": "2.0"}),
            },
        )
        .await
        .unwrap();
    assert_eq!(
        resolved.submission_id.as_deref(),
        Some(receipt.submission_id.as_str())
    );
    let again = holder
        .resolve(&key, &question.action_id, ActionDecision::Cancel)
        .await
        .unwrap_err();
    assert_eq!(again.kind(), "action_already_resolved");
    let info = holder.wait_idle(&receipt.submission_id).await.unwrap();
    let text = info.settlement.unwrap().text.unwrap();
    let answer: Value = serde_json::from_str(text.trim_start_matches("got: ")).unwrap();
    assert_eq!(
        answer,
        json!({"decision": "accept", "content": {"version": "2.0", "channel": "stable"}})
    );
    holder.shutdown().await.unwrap();
    other.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_unanswered_question_is_declined_after_its_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = runtime(&dir.path().join("flue.db"), Duration::from_millis(200)).await;
    let key = ConversationKey::new("asker", "late");
    let receipt = runtime
        .dispatch(
            &key,
            DeliveredMessage::user("go"),
            DispatchOptions::default(),
        )
        .await
        .unwrap();
    let info = runtime.wait_idle(&receipt.submission_id).await.unwrap();
    assert!(
        info.settlement
            .unwrap()
            .text
            .unwrap()
            .contains("no answer within 200ms; the question was declined")
    );
    let actions = runtime.actions(&key).await.unwrap();
    assert_eq!(
        actions[0].decision,
        Some(ActionDecision::Decline {
            message: Some("no answer within 200ms; the question was declined".into())
        })
    );
    runtime.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_sessions_question_is_answered_with_session_answer() {
    let harness = Harness::builder(agent(Duration::from_secs(60)))
        .with_providers(ProviderRegistry::new().with_provider(Arc::new(AskModel)))
        .with_store(Arc::new(MemoryStore::new()))
        .with_workspace_context(None)
        .build()
        .await
        .unwrap();
    let session = harness.session("default").await.unwrap();
    let call = session.prompt("go", Default::default());
    let question = loop {
        if let Some(action) = session.pending_actions().await.unwrap().into_iter().next() {
            break action;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let refused = session
        .answer(
            &question.action_id,
            ActionDecision::Accept { content: json!({}) },
        )
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), "invalid_decision");
    session
        .answer(
            &question.action_id,
            ActionDecision::Decline {
                message: Some("not now".into()),
            },
        )
        .await
        .unwrap();
    let reply = call.await.unwrap();
    assert_eq!(
        reply.text,
        r#"got: {"decision":"decline","message":"not now"}"#
    );
    assert!(session.pending_actions().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_subagents_question_is_listed_and_answered_in_the_root_session() {
    let harness = Harness::builder(agent(Duration::from_secs(60)))
        .with_providers(ProviderRegistry::new().with_provider(Arc::new(AskModel)))
        .with_store(Arc::new(MemoryStore::new()))
        .with_workspace_context(None)
        .build()
        .await
        .unwrap();
    let session = harness.session("default").await.unwrap();
    let call = session.prompt("delegate", Default::default());
    let question = loop {
        if let Some(action) = session.pending_actions().await.unwrap().into_iter().next() {
            break action;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let task_session = question.session.clone().unwrap();
    assert!(task_session.starts_with("task:default:"), "{task_session}");
    session
        .answer(
            &question.action_id,
            ActionDecision::Accept {
                content: json!({"version": "3"}),
            },
        )
        .await
        .unwrap();
    let reply = call.await.unwrap();
    assert!(
        reply
            .text
            .contains(r#"got: {\"content\":{\"channel\":\"stable\",\"version\":\"3\"},\"decision\":\"accept\"}"#),
        "{}",
        reply.text
    );
}
