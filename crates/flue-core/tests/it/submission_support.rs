//! Shared parts of the submission tests: a model that decides from the log alone, a tool that
//! records its side effects in a file, and agents built from them.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use flue_core::{
    AgentConfig, AgentRuntime, AssistantContent, BoxFuture, DurabilityConfig, FlueError, Harness,
    ModelProvider, ProviderRegistry, Record, StaticAgents, StopReason, ToolCall, ToolDefinition,
    ToolError, Usage, UserContent,
    model::{ModelRequest, ModelTurn, TurnSink},
    store::DynConversationStore,
};
use serde_json::json;

/// The agent name every submission test uses.
pub const AGENT: &str = "worker";

/// A model whose every turn follows from the last record it sees, so a resumed conversation
/// continues exactly as an uninterrupted one would:
///
/// - user `tools N` -> N parallel `side_effect` calls;
/// - user `delegate N` -> a `task` call giving the `helper` subagent `tools N`;
/// - user `hang` -> never answers (until aborted);
/// - user `fail` -> a non-retryable provider error;
/// - tool results -> `done (N results)`;
/// - any other user text `T` -> `echo: T`.
pub struct RuleModel {
    /// Sleep before each turn, to widen crash windows.
    pub turn_delay: Duration,
}

impl ModelProvider for RuleModel {
    fn id(&self) -> &str {
        "rule"
    }

    fn stream_turn<'a>(
        &'a self,
        request: ModelRequest<'a>,
        sink: &'a TurnSink,
    ) -> BoxFuture<'a, flue_core::Result<ModelTurn>> {
        let n_messages = request.messages.len();
        let last = request.messages.last().cloned();
        let delay = self.turn_delay;
        Box::pin(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let text = |text: String| {
                sink.text_delta(&text);
                Ok(ModelTurn {
                    content: vec![AssistantContent::Text { text }],
                    usage: Usage::default(),
                    stop_reason: StopReason::EndTurn,
                })
            };
            match last {
                Some(Record::User(message)) => {
                    let body: String = message
                        .content
                        .iter()
                        .filter_map(|part| match part {
                            UserContent::Text { text } => Some(text.as_str()),
                            _ => None,
                        })
                        .collect();
                    if let Some(n) = body.strip_prefix("delegate ") {
                        let call = ToolCall {
                            id: format!("call_{n_messages}_task"),
                            name: "task".into(),
                            input: json!({ "prompt": format!("tools {n}"), "agent": "helper" }),
                        };
                        return Ok(ModelTurn {
                            content: vec![AssistantContent::ToolCall(call)],
                            usage: Usage::default(),
                            stop_reason: StopReason::ToolUse,
                        });
                    }
                    if let Some(n) = body.strip_prefix("tools ") {
                        let n: usize = n.trim().parse().unwrap_or(1);
                        let calls = (0..n)
                            .map(|idx| {
                                let id = format!("call_{n_messages}_{idx}");
                                AssistantContent::ToolCall(ToolCall {
                                    id: id.clone(),
                                    name: "side_effect".into(),
                                    input: json!({ "call": id }),
                                })
                            })
                            .collect();
                        return Ok(ModelTurn {
                            content: calls,
                            usage: Usage::default(),
                            stop_reason: StopReason::ToolUse,
                        });
                    }
                    match body.as_str() {
                        "hang" => std::future::pending().await,
                        "fail" => Err(FlueError::Provider {
                            provider: "rule".into(),
                            message: "refused".into(),
                            status: Some(400),
                            retryable: false,
                            retry_after_ms: None,
                            source: None,
                        }),
                        _ => text(format!("echo: {body}")),
                    }
                }
                Some(Record::ToolResult(_)) => {
                    let n_results = request
                        .messages
                        .iter()
                        .rev()
                        .take_while(|record| matches!(record, Record::ToolResult(_)))
                        .count();
                    text(format!("done ({n_results} results)"))
                }
                _ => text("hello".into()),
            }
        })
    }
}

/// Runs right before a side-effect tool records its effect.
pub type BeforeEffect = Arc<dyn Fn() + Send + Sync>;

/// A tool that appends `<instance id> <call>` to `path` (one line per run, flushed), then
/// sleeps `delay` (abortable).
pub fn side_effect_tool(path: &Path, delay: Duration) -> ToolDefinition {
    side_effect_tool_with(path, delay, None)
}

/// [`side_effect_tool`], calling `before` first on each run.
pub fn side_effect_tool_with(
    path: &Path,
    delay: Duration,
    before: Option<BeforeEffect>,
) -> ToolDefinition {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Input {
        call: String,
    }
    let path = path.to_owned();
    ToolDefinition::from_fn(
        "side_effect",
        "Records that it ran.",
        move |input: Input, ctx| {
            let path = path.clone();
            if let Some(before) = &before {
                before();
            }
            async move {
                let line = format!("{} {}\n", ctx.instance_id, input.call);
                let written = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .and_then(|mut file| {
                        file.write_all(line.as_bytes())?;
                        file.sync_data()
                    });
                if let Err(err) = written {
                    return Err(ToolError::new("io", err.to_string()));
                }
                if !delay.is_zero() {
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = ctx.cancel.cancelled() => {
                            return Err(ToolError::new("aborted", "cancelled"));
                        }
                    }
                }
                Ok(json!("ran"))
            }
        },
    )
    .unwrap()
}

/// Settings of the test agent.
#[derive(Clone)]
pub struct AgentSettings {
    pub side_effects: PathBuf,
    pub turn_delay: Duration,
    pub tool_delay: Duration,
    pub durability: DurabilityConfig,
    /// Whether `side_effect` calls wait for a confirmation (`always_ask`).
    pub ask: bool,
    /// Whether the agent declares the `helper` subagent (which has the side-effect tool).
    pub delegate: bool,
    /// Called by the side-effect tool right before it records its effect.
    pub before_effect: Option<BeforeEffect>,
}

impl AgentSettings {
    pub fn new(dir: &Path) -> Self {
        Self {
            side_effects: dir.join("side_effects.txt"),
            turn_delay: Duration::ZERO,
            tool_delay: Duration::ZERO,
            durability: DurabilityConfig::default(),
            ask: false,
            delegate: false,
            before_effect: None,
        }
    }
}

/// A registry serving [`AGENT`] with the rule model and the side-effect tool.
pub fn agents(settings: &AgentSettings) -> Arc<StaticAgents> {
    let settings = settings.clone();
    Arc::new(StaticAgents::new().with_agent(AGENT, move || {
        let model = Arc::new(RuleModel {
            turn_delay: settings.turn_delay,
        });
        let mut agent = AgentConfig::new()
            .with_model("rule/any")
            .with_tool(side_effect_tool_with(
                &settings.side_effects,
                settings.tool_delay,
                settings.before_effect.clone(),
            ))
            .with_durability(settings.durability.clone());
        if settings.delegate {
            agent = agent.with_subagent(flue_core::AgentProfile::new("helper").with_tool(
                side_effect_tool(&settings.side_effects, settings.tool_delay),
            ));
        }
        if settings.ask {
            agent = agent.with_permission("side_effect", flue_core::Permission::AlwaysAsk);
        }
        Harness::builder(agent)
            .with_providers(ProviderRegistry::new().with_provider(model))
            .with_workspace_context(None)
    }))
}

/// A started runtime on `store` with fast polls and scans.
pub async fn runtime(
    store: Arc<dyn DynConversationStore>,
    settings: &AgentSettings,
) -> AgentRuntime {
    AgentRuntime::builder(store, agents(settings))
        .with_poll_interval(Duration::from_millis(10))
        .with_reconcile_interval(Some(Duration::from_millis(100)))
        .start()
        .await
        .unwrap()
}

/// Side-effect lines per call (`<instance> <call>` -> count).
pub fn side_effect_counts(path: &Path) -> std::collections::BTreeMap<String, usize> {
    let mut counts = std::collections::BTreeMap::new();
    if let Ok(text) = std::fs::read_to_string(path) {
        for line in text.lines().filter(|line| !line.is_empty()) {
            *counts.entry(line.to_owned()).or_insert(0) += 1;
        }
    }
    counts
}
