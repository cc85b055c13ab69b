//! Tool sources: a list that changes between turns is read again before each model turn.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use flue_core::{
    AgentConfig, BoxFuture, Harness, LocalSandbox, ModelProvider, Permission, PromptOptions,
    ProviderRegistry, Record, ScriptedProvider, ToolDefinition,
    model::{ModelInfo, ModelRequest, ModelTurn, TurnSink},
    record::ActionKind,
    tool::ToolSource,
};
use pretty_assertions::assert_eq;
use serde_json::json;

/// The scripted model, recording the tool names offered at each turn.
struct Recording {
    scripted: ScriptedProvider,
    offered: Mutex<Vec<Vec<String>>>,
}

impl ModelProvider for Recording {
    fn id(&self) -> &str {
        "scripted"
    }

    fn model_info(&self, model: &str) -> ModelInfo {
        self.scripted.model_info(model)
    }

    fn check_model<'a>(&'a self, model: &'a str) -> BoxFuture<'a, flue_core::Result<()>> {
        self.scripted.check_model(model)
    }

    fn stream_turn<'a>(
        &'a self,
        request: ModelRequest<'a>,
        sink: &'a TurnSink,
    ) -> BoxFuture<'a, flue_core::Result<ModelTurn>> {
        let names = request.tools.iter().map(|tool| tool.name.clone()).collect();
        self.offered.lock().unwrap().push(names);
        self.scripted.stream_turn(request, sink)
    }
}

/// A source whose list its own tools replace, counting its refreshes.
#[derive(Default)]
struct Swappable {
    tools: Mutex<Vec<ToolDefinition>>,
    refreshes: AtomicUsize,
}

impl Swappable {
    fn set(&self, tools: Vec<ToolDefinition>) {
        *self.tools.lock().unwrap() = tools;
    }
}

impl ToolSource for Swappable {
    fn label(&self) -> String {
        "the swappable source".to_owned()
    }

    fn tools(&self) -> Vec<ToolDefinition> {
        self.tools.lock().unwrap().clone()
    }

    fn refresh(&self) -> BoxFuture<'_, ()> {
        self.refreshes.fetch_add(1, Ordering::Relaxed);
        Box::pin(std::future::ready(()))
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoInput {}

/// A tool that answers `answer`.
fn answering(name: &str, answer: &'static str) -> ToolDefinition {
    ToolDefinition::from_fn(
        name,
        format!("Answers {answer}."),
        move |_: NoInput, _| async move { Ok(json!(answer)) },
    )
    .unwrap()
}

/// `swap`: replaces the source's list with `second` (and a tool named like a fixed one).
fn swap_tool(source: &Arc<Swappable>) -> ToolDefinition {
    let source = Arc::clone(source);
    ToolDefinition::from_fn("swap", "Swaps the source's tools.", move |_: NoInput, _| {
        let source = Arc::clone(&source);
        async move {
            source.set(vec![
                answering("second", "from second"),
                answering("fixed", "from the source"),
            ]);
            Ok(json!("swapped"))
        }
    })
    .unwrap()
}

/// A harness for `agent` whose model plays `script`, and the recording provider.
async fn harness(
    agent: AgentConfig,
    script: &serde_json::Value,
) -> (Harness, Arc<Recording>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let provider = Arc::new(Recording {
        scripted: ScriptedProvider::new(dir.path())
            .with_script("tools.json", &script.to_string())
            .unwrap(),
        offered: Mutex::default(),
    });
    let harness = Harness::builder(agent.with_model("scripted/tools.json"))
        .with_providers(ProviderRegistry::new().with_provider(provider.clone()))
        .with_sandbox(Arc::new(LocalSandbox::new(dir.path()).unwrap()))
        .build()
        .await
        .unwrap();
    (harness, provider, dir)
}

/// The names `harness` lists for its root sessions.
fn listed(harness: &Harness) -> Vec<String> {
    let tools = harness.tool_schemas().unwrap();
    tools.into_iter().map(|tool| tool.name).collect()
}

/// The tool results of `records`, as (tool, error kind, content).
fn results(records: &[Record]) -> Vec<(String, Option<String>, String)> {
    records
        .iter()
        .filter_map(|record| match record {
            Record::ToolResult(result) => Some((
                result.tool_name.clone(),
                result.error_kind.clone(),
                result.content.clone(),
            )),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_changed_source_is_offered_from_the_next_turn_and_its_removed_tools_answer_an_error() {
    let script = json!({"rules": [
        {"when": {"user_contains": "go"},
         "reply": {"tool_calls": [{"name": "first"}, {"name": "swap"}]}},
        {"when": {"turn": 2},
         "reply": {"tool_calls": [{"name": "second"}, {"name": "fixed"}, {"name": "first"}]}},
        {"when": {"turn": 3}, "reply": {"text": "done"}}
    ]});
    let source = Arc::new(Swappable::default());
    source.set(vec![answering("first", "from first")]);
    // Without the default `task` tool, so that the lists are the sources' alone.
    let agent = AgentConfig::new()
        .with_task_tool(false)
        .with_tool(answering("fixed", "from the agent"))
        .with_tool(swap_tool(&source))
        .with_tool_source(Arc::clone(&source) as Arc<dyn ToolSource>);
    let (harness, provider, _dir) = harness(agent, &script).await;
    assert_eq!(listed(&harness), ["fixed", "swap", "first"]);

    let session = harness.session("default").await.unwrap();
    let response = session
        .prompt("go", PromptOptions::default())
        .await
        .unwrap();
    assert_eq!(response.text, "done");
    assert_eq!(
        *provider.offered.lock().unwrap(),
        [
            vec!["fixed", "swap", "first"],
            // `second` is new; the source's `fixed` is left out, the agent's own stays.
            vec!["fixed", "swap", "second"],
            vec!["fixed", "swap", "second"],
        ]
    );
    assert_eq!(source.refreshes.load(Ordering::Relaxed), 3, "once per turn");
    let some = |kind: &str| Some(kind.to_owned());
    assert_eq!(
        results(&session.records().await),
        [
            ("first".to_owned(), None, "from first".to_owned()),
            ("swap".to_owned(), None, "swapped".to_owned()),
            ("second".to_owned(), None, "from second".to_owned()),
            ("fixed".to_owned(), None, "from the agent".to_owned()),
            (
                "first".to_owned(),
                some("unknown_tool"),
                "the tool \"first\" is no longer available: its source (such as \
                 an MCP server) removed it after offering it; available tools: fixed, swap, \
                 second"
                    .to_owned()
            ),
        ]
    );
    assert_eq!(listed(&harness), ["fixed", "swap", "second"]);
}

#[tokio::test]
async fn permission_rules_apply_to_tools_a_source_adds() {
    let script = json!({"rules": [
        {"when": {"user_contains": "go"}, "reply": {"tool_calls": [{"name": "swap"}]}},
        {"when": {"turn": 2}, "reply": {"tool_calls": [{"name": "second"}]}}
    ]});
    let source = Arc::new(Swappable::default());
    let agent = AgentConfig::new()
        .with_task_tool(false)
        .with_tool(swap_tool(&source))
        .with_tool_source(Arc::clone(&source) as Arc<dyn ToolSource>)
        .with_permission("second", Permission::AlwaysAsk);
    let (harness, provider, _dir) = harness(agent, &script).await;
    let session = harness.session("default").await.unwrap();
    let response = session
        .prompt("go", PromptOptions::default())
        .await
        .unwrap();
    // Once `second` exists, a tool pauses: the preflight tool joins the list.
    assert_eq!(
        *provider.offered.lock().unwrap(),
        [
            vec!["swap"],
            vec!["swap", "second", "fixed", "permissions_check"]
        ]
    );
    let waiting: Vec<(&str, ActionKind)> = response
        .pending_actions
        .iter()
        .map(|action| (action.tool_name.as_str(), action.kind))
        .collect();
    assert_eq!(waiting, [("second", ActionKind::Confirmation)]);
}
