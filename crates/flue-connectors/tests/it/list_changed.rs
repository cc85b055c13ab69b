//! A server whose tool list changes (`notifications/tools/list_changed`): the connection lists
//! the tools again when refreshed, and an agent sees the change from its next model turn.

use std::sync::{Arc, Mutex};

use flue_core::{
    AgentConfig, BoxFuture, Harness, LocalSandbox, ModelProvider, PromptOptions, ProviderRegistry,
    Record, ScriptedProvider, ToolDefinition,
    model::{ModelInfo, ModelRequest, ModelTurn, TurnSink},
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::support::{PyServer, Wire, call, tool};

/// The names of `tools`.
fn names(tools: &[ToolDefinition]) -> Vec<&str> {
    tools.iter().map(ToolDefinition::name).collect()
}

/// How the connection renders a tool's string result.
fn rendered(text: &str) -> String {
    format!("Structured content:\n{{\n  \"result\": \"{text}\"\n}}\n\n{text}")
}

const FIRST: [&str; 4] = [
    "mcp__changing__grow",
    "mcp__changing__reshape",
    "mcp__changing__shrink",
    "mcp__changing__clash",
];

/// The server whose tool list changes (tests/peers/changing_server.py), over `wire`.
async fn changing_server(wire: Wire) -> PyServer {
    PyServer::start_script("changing_server.py", wire, &[]).await
}

mod a_refresh_lists_the_tools_again_after_the_server_announced_a_change {
    use crate::support::Wire;

    #[tokio::test]
    async fn stdio() {
        super::a_refresh_lists_the_tools_again_after_the_server_announced_a_change(Wire::Stdio)
            .await;
    }

    #[tokio::test]
    async fn streamable_http() {
        super::a_refresh_lists_the_tools_again_after_the_server_announced_a_change(
            Wire::StreamableHttp,
        )
        .await;
    }

    #[tokio::test]
    async fn sse() {
        super::a_refresh_lists_the_tools_again_after_the_server_announced_a_change(Wire::Sse).await;
    }
}

async fn a_refresh_lists_the_tools_again_after_the_server_announced_a_change(wire: Wire) {
    let server = changing_server(wire).await;
    let connection = flue_connectors::connect_mcp_server("changing", server.options.clone())
        .await
        .unwrap();
    let source = connection.tool_source();
    assert_eq!(source.label(), "MCP server \"changing\"");
    assert_eq!(names(&source.tools()), FIRST);
    source.refresh().await;
    assert_eq!(names(&source.tools()), FIRST, "no change, no new list");

    // `grow` adds `echo` and announces it; the list changes only when refreshed.
    assert_eq!(
        call(&connection, "mcp__changing__grow", json!({})).await,
        Ok(rendered("added echo"))
    );
    assert_eq!(names(&source.tools()), FIRST);
    source.refresh().await;
    let mut grown = FIRST.to_vec();
    grown.push("mcp__changing__echo");
    assert_eq!(names(&source.tools()), grown);
    assert_eq!(names(&connection.tools()), grown);
    let echo = tool(&connection, "mcp__changing__echo");
    assert_eq!(
        echo.description(),
        "MCP tool \"echo\" from server \"changing\". Echoes the text back."
    );
    assert_eq!(
        call(&connection, "mcp__changing__echo", json!({"text": "hi"})).await,
        Ok(rendered("echo: hi"))
    );

    // `reshape` changes the description and the input schema of `echo`.
    call(&connection, "mcp__changing__reshape", json!({}))
        .await
        .unwrap();
    source.refresh().await;
    let echo = tool(&connection, "mcp__changing__echo");
    assert_eq!(
        echo.description(),
        "MCP tool \"echo\" from server \"changing\". Echoes the text back `times` times."
    );
    assert_eq!(echo.input_schema()["required"], json!(["text", "times"]));
    assert_eq!(
        call(
            &connection,
            "mcp__changing__echo",
            json!({"text": "hi", "times": 2})
        )
        .await,
        Ok(rendered("echo: hi echo: hi"))
    );

    // `shrink` removes it.
    call(&connection, "mcp__changing__shrink", json!({}))
        .await
        .unwrap();
    source.refresh().await;
    assert_eq!(names(&source.tools()), FIRST);

    // `clash` adds `echo.v2` and `echo_v2`, which both adapt to `echo_v2`: the first one
    // listed stays, the second is left out (with a warning) instead of failing the refresh.
    call(&connection, "mcp__changing__clash", json!({}))
        .await
        .unwrap();
    source.refresh().await;
    let mut clashed = FIRST.to_vec();
    clashed.push("mcp__changing__echo_v2");
    assert_eq!(names(&source.tools()), clashed);
    assert_eq!(
        call(&connection, "mcp__changing__echo_v2", json!({})).await,
        Ok(rendered("first"))
    );
    connection.close().await.unwrap();
}

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

// On the multi-threaded runtime `flue run` and `flue serve` use: the notification is counted on
// a task of its own while the tool call's answer travels on (over streamable HTTP, on another
// stream).
mod an_agent_is_offered_added_tools_at_its_next_turn_and_loses_removed_ones {
    use crate::support::Wire;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stdio() {
        super::an_agent_is_offered_added_tools_at_its_next_turn_and_loses_removed_ones(Wire::Stdio)
            .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn streamable_http() {
        super::an_agent_is_offered_added_tools_at_its_next_turn_and_loses_removed_ones(
            Wire::StreamableHttp,
        )
        .await;
    }
}

async fn an_agent_is_offered_added_tools_at_its_next_turn_and_loses_removed_ones(wire: Wire) {
    let dir = tempfile::tempdir().unwrap();
    let call_tool = |name: &str, input: Value| json!({"tool_calls": [{"name": format!("mcp__changing__{name}"), "input": input}]});
    let script = json!({"rules": [
        {"when": {"user_contains": "go"}, "reply": call_tool("grow", json!({}))},
        {"when": {"turn": 2}, "reply": call_tool("echo", json!({"text": "hi"}))},
        {"when": {"turn": 3}, "reply": call_tool("shrink", json!({}))},
        {"when": {"turn": 4}, "reply": call_tool("echo", json!({"text": "again"}))},
        {"when": {"turn": 5}, "reply": {"text": "done"}}
    ]});
    let provider = Arc::new(Recording {
        scripted: ScriptedProvider::new(dir.path())
            .with_script("changing.json", &script.to_string())
            .unwrap(),
        offered: Mutex::default(),
    });
    let server = changing_server(wire).await;
    let connection = flue_connectors::connect_mcp_server("changing", server.options.clone())
        .await
        .unwrap();
    let agent = AgentConfig::new()
        .with_model("scripted/changing.json")
        .with_tool_source(connection.tool_source())
        // The tool lists compared here are the server's alone.
        .with_task_tool(false);
    let harness = Harness::builder(agent)
        .with_providers(ProviderRegistry::new().with_provider(provider.clone()))
        .with_sandbox(Arc::new(LocalSandbox::new(dir.path()).unwrap()))
        .build()
        .await
        .unwrap();
    let session = harness.session("default").await.unwrap();
    let response = session
        .prompt("go", PromptOptions::default())
        .await
        .unwrap();
    assert_eq!(response.text, "done");

    let mut grown = FIRST.to_vec();
    grown.push("mcp__changing__echo");
    assert_eq!(
        *provider.offered.lock().unwrap(),
        [
            FIRST.to_vec(),
            grown.clone(),
            grown,
            FIRST.to_vec(),
            FIRST.to_vec()
        ]
    );
    let results: Vec<(String, bool, String)> = session
        .records()
        .await
        .into_iter()
        .filter_map(|record| match record {
            Record::ToolResult(result) => Some((result.tool_name, result.is_error, result.content)),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        [
            (
                "mcp__changing__grow".to_owned(),
                false,
                rendered("added echo")
            ),
            (
                "mcp__changing__echo".to_owned(),
                false,
                rendered("echo: hi")
            ),
            (
                "mcp__changing__shrink".to_owned(),
                false,
                rendered("removed echo")
            ),
            (
                "mcp__changing__echo".to_owned(),
                true,
                format!(
                    "the tool \"mcp__changing__echo\" is no longer available: its source (such \
                     as an MCP server) removed it after offering it; available tools: {}",
                    FIRST.join(", ")
                )
            ),
        ]
    );
    connection.close().await.unwrap();
}
