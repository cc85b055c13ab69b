//! A test model that answers each turn by a rule over what it is sent, and records every request.
//!
//! Skills, roles and tasks change what the model is sent (system prompt, tools, model, thinking)
//! and run several conversations at once, so these tests decide replies from the request
//! itself rather than from a queue.

use std::sync::{Arc, Mutex};

use flue_core::{
    AgentConfig, AssistantContent, BoxFuture, Harness, HarnessBuilder, LocalSandbox, MemoryStore,
    ModelProvider, ProviderRegistry, Record, StopReason, ThinkingLevel, ToolCall, Usage,
    model::{ModelRequest, ModelTurn, TurnSink},
    store::{SessionKey, SessionStore},
};
use serde_json::Value;

/// One request as the model saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub model: String,
    pub system: String,
    pub messages: Vec<Record>,
    pub tools: Vec<(String, String)>,
    pub thinking: ThinkingLevel,
}

impl Seen {
    pub fn tool_names(&self) -> Vec<&str> {
        self.tools.iter().map(|(name, _)| name.as_str()).collect()
    }

    /// The text of the first user message of the conversation.
    pub fn first_user_text(&self) -> String {
        self.messages
            .iter()
            .find_map(|record| match record {
                Record::User(message) => Some(message.joined_text()),
                _ => None,
            })
            .unwrap_or_default()
    }

    /// The last record, when it is a tool result.
    pub fn last_tool_result(&self) -> Option<&flue_core::ToolResult> {
        match self.messages.last() {
            Some(Record::ToolResult(result)) => Some(result),
            _ => None,
        }
    }
}

/// What the model answers.
pub enum Reply {
    Text(String),
    Calls(Vec<(&'static str, Value)>),
    Hang,
}

type Rule = dyn Fn(&Seen) -> Reply + Send + Sync;

pub struct RuleProvider {
    rule: Box<Rule>,
    seen: Mutex<Vec<Seen>>,
}

impl RuleProvider {
    pub fn new(rule: impl Fn(&Seen) -> Reply + Send + Sync + 'static) -> Arc<Self> {
        Arc::new(Self {
            rule: Box::new(rule),
            seen: Mutex::default(),
        })
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl ModelProvider for RuleProvider {
    fn id(&self) -> &str {
        "test"
    }

    /// Models whose name contains `vision` accept images; the others do not.
    fn model_info(&self, model: &str) -> flue_core::model::ModelInfo {
        flue_core::model::ModelInfo {
            image_input: model.contains("vision"),
            ..flue_core::model::ModelInfo::default()
        }
    }

    fn stream_turn<'a>(
        &'a self,
        request: ModelRequest<'a>,
        _sink: &'a TurnSink,
    ) -> BoxFuture<'a, flue_core::Result<ModelTurn>> {
        let seen = Seen {
            model: request.model.to_owned(),
            system: request.system.to_owned(),
            messages: request.messages.to_vec(),
            tools: request
                .tools
                .iter()
                .map(|tool| (tool.name.clone(), tool.description.clone()))
                .collect(),
            thinking: request.thinking,
        };
        let reply = (self.rule)(&seen);
        let n_messages = seen.messages.len();
        self.seen.lock().unwrap().push(seen);
        Box::pin(async move {
            let usage = Usage {
                input_tokens: 10,
                output_tokens: 5,
                ..Usage::default()
            };
            match reply {
                Reply::Text(text) => Ok(ModelTurn {
                    content: vec![AssistantContent::Text { text }],
                    usage,
                    stop_reason: StopReason::EndTurn,
                }),
                Reply::Calls(calls) => Ok(ModelTurn {
                    content: calls
                        .into_iter()
                        .enumerate()
                        .map(|(idx, (name, input))| {
                            AssistantContent::ToolCall(ToolCall {
                                id: format!("call_{n_messages}_{idx}"),
                                name: name.into(),
                                input,
                            })
                        })
                        .collect(),
                    usage,
                    stop_reason: StopReason::ToolUse,
                }),
                Reply::Hang => std::future::pending().await,
            }
        })
    }
}

/// A harness over a rule provider, a memory store and a local sandbox in a temp dir.
pub struct Fixture {
    pub harness: Harness,
    pub store: Arc<MemoryStore>,
    _dir: tempfile::TempDir,
}

pub const INSTANCE: &str = "instance-1";

/// Builds a fixture; `customize` adds roles, workspace skills, ... to the builder.
pub async fn fixture(
    agent: AgentConfig,
    provider: Arc<RuleProvider>,
    customize: impl FnOnce(HarnessBuilder) -> HarnessBuilder,
) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(MemoryStore::new());
    let builder = Harness::builder(agent)
        .with_instance_id(INSTANCE)
        .with_store(store.clone())
        .with_providers(ProviderRegistry::new().with_provider(provider.clone()))
        .with_sandbox(Arc::new(LocalSandbox::new(dir.path()).unwrap()))
        .with_workspace_context(None);
    let harness = customize(builder).build().await.unwrap();
    Fixture {
        harness,
        store,
        _dir: dir,
    }
}

impl Fixture {
    /// The names of the stored sessions, sorted.
    pub async fn session_names(&self) -> Vec<String> {
        self.store
            .list(INSTANCE)
            .await
            .unwrap()
            .into_iter()
            .map(|summary| summary.session)
            .collect()
    }

    /// The stored records of a session.
    pub async fn records(&self, session: &str) -> Vec<Record> {
        let key = SessionKey::new(INSTANCE, session);
        self.store
            .load(&key, 0)
            .await
            .unwrap()
            .unwrap()
            .records
            .into_iter()
            .map(|stored| stored.record)
            .collect()
    }
}

/// A short name for each record: `user`, `assistant`, `tool`, `tool_error:<kind>`.
pub fn kinds(records: &[Record]) -> Vec<String> {
    records
        .iter()
        .map(|record| match record {
            Record::User(_) => "user".to_owned(),
            Record::Assistant(_) => "assistant".to_owned(),
            Record::ToolResult(result) if result.is_error => {
                format!("tool_error:{}", result.error_kind.as_deref().unwrap_or("?"))
            }
            Record::ToolResult(_) => "tool".to_owned(),
            Record::ActionRequired(action) => format!("action_required:{}", action.tool_name),
            Record::ActionResolved(_) => "action_resolved".to_owned(),
            Record::ActionStarted(_) => "action_started".to_owned(),
            Record::ToolAttempt(attempt) => format!("attempt:{}", attempt.tool_name),
            _ => "other".to_owned(),
        })
        .collect()
}

/// The text of a user record.
pub fn user_text(record: &Record) -> String {
    match record {
        Record::User(message) => message.joined_text(),
        other => panic!("expected a user message, got {other:?}"),
    }
}
