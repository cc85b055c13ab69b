//! A test host: agents `plain` (answers), `tool` (calls `lookup`), `slow-tool` (calls a tool
//! that sleeps until cancelled or 30 s), `stream` (answers a piece every 80 ms), all on the
//! scripted model, served by the durable runtime (flue-core's `AgentRuntime`) over the memory
//! store.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, Response};
use flue_core::{
    AgentConfig, AgentInfo, AgentRuntime, FlueError, Harness, HarnessBuilder, LocalSandbox,
    MemoryStore, ProviderRegistry, ScriptedProvider, StaticAgents, ToolDefinition, ToolError,
};
use flue_server::{DurableRuntime, ServerConfig};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

const PLAIN: &str = r#"{"rules":[{"reply":{"text":"Hello from the fake model."}}]}"#;
/// Streams slowly: a piece of reasoning or text every 80 ms.
const STREAM: &str = r#"{"rules":[{"reply":{"thinking":"Thinking it over.","text":"Hello from the slow fake model.","chunk_delay_ms":80}}]}"#;
const TOOL: &str = r#"{"rules":[
  {"when":{"tool_result":"lookup"},"reply":{"text":"Final answer: {{tool_result}}"}},
  {"reply":{"text":"Looking up.","tool_calls":[{"name":"lookup","input":{"query":"{{user}}"}}]}}
]}"#;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Query {
    query: String,
}

pub(crate) struct TestHost {
    dir: tempfile::TempDir,
}

impl TestHost {
    pub(crate) fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }
}

impl TestHost {
    /// A harness builder factory for `agent`.
    fn builder(
        &self,
        agent: &str,
    ) -> Result<Arc<dyn Fn() -> HarnessBuilder + Send + Sync>, FlueError> {
        let script = match agent {
            "plain" => PLAIN,
            "stream" => STREAM,
            _ => TOOL,
        };
        let lookup = lookup_tool(agent == "slow-tool")?;
        let mut config = AgentConfig::new()
            .with_name(agent)
            .with_model("scripted/test.json")
            .with_instructions("Test agent.")
            .with_tool(lookup);
        if agent == "careful" {
            config = config.with_permission("look*", flue_core::Permission::AlwaysAsk);
        }
        let scripted = ScriptedProvider::new(self.dir.path()).with_script("test.json", script)?;
        let providers = ProviderRegistry::new().with_provider(Arc::new(scripted));
        let sandbox: Arc<dyn flue_core::Sandbox> = Arc::new(LocalSandbox::new(self.dir.path())?);
        Ok(Arc::new(move || {
            Harness::builder(config.clone())
                .with_providers(providers.clone())
                .with_sandbox(Arc::clone(&sandbox))
        }))
    }
}

fn lookup_tool(slow: bool) -> Result<ToolDefinition, FlueError> {
    ToolDefinition::from_fn(
        "lookup",
        "Looks a query up.",
        move |input: Query, ctx| async move {
            if slow {
                tokio::select! {
                    () = ctx.cancel.cancelled() => return Err(ToolError::new("aborted", "cancelled")),
                    () = tokio::time::sleep(Duration::from_secs(30)) => {}
                }
            }
            Ok::<_, ToolError>(json!({"query": input.query, "answer": 42}))
        },
    )
}

impl TestHost {
    /// The agents the test runtime serves.
    fn agents(&self) -> Vec<AgentInfo> {
        ["plain", "tool", "slow-tool", "stream"]
            .into_iter()
            .map(|name| {
                AgentInfo::new(name)
                    .with_description(Some(format!("the {name} agent")))
                    .with_model(Some("scripted/test.json".to_owned()))
            })
            .collect()
    }
}

/// A router over a fresh runtime.
pub(crate) async fn app(config: ServerConfig) -> Router {
    flue_server::router(durable_runtime().await, config)
}

/// A `DurableRuntime` over flue-core's `AgentRuntime` and an in-memory store, serving the
/// test agents.
pub(crate) async fn durable_runtime() -> DurableRuntime {
    let host = TestHost::new();
    let infos = host.agents();
    let mut agents = StaticAgents::new();
    for name in ["plain", "tool", "slow-tool", "stream"] {
        let builder = host.builder(name).unwrap();
        agents = agents.with_agent(name, move || builder.clone()());
    }
    let store = Arc::new(MemoryStore::new());
    let runtime = AgentRuntime::builder(store, Arc::new(agents))
        .with_poll_interval(Duration::from_millis(10))
        .start()
        .await
        .unwrap();
    // The temporary directory lives as long as the test process.
    std::mem::forget(host);
    DurableRuntime::new(runtime, infos)
}

/// A durable router serving `careful`: the `tool` agent whose `lookup` asks first.
pub(crate) async fn careful_app() -> Router {
    let host = TestHost::new();
    let builder = host.builder("careful").unwrap();
    let agents = StaticAgents::new().with_agent("careful", move || builder.clone()());
    let runtime = AgentRuntime::builder(Arc::new(MemoryStore::new()), Arc::new(agents))
        .with_poll_interval(Duration::from_millis(10))
        .start()
        .await
        .unwrap();
    std::mem::forget(host);
    let infos = vec![AgentInfo::new("careful")];
    flue_server::router(DurableRuntime::new(runtime, infos), fast_config())
}

/// [`careful_app`] over `store`, signing standing approvals with `key`.
pub(crate) async fn careful_app_keyed(
    store: Arc<MemoryStore>,
    key: Option<flue_core::standing::ApprovalKey>,
) -> Router {
    let host = TestHost::new();
    let builder = host.builder("careful").unwrap();
    let agents = StaticAgents::new().with_agent("careful", move || builder.clone()());
    let mut runtime = AgentRuntime::builder(store, Arc::new(agents))
        .with_poll_interval(Duration::from_millis(10));
    if let Some(key) = key {
        runtime = runtime.with_approval_key(key);
    }
    let runtime = runtime.start().await.unwrap();
    std::mem::forget(host);
    let infos = vec![AgentInfo::new("careful")];
    flue_server::router(DurableRuntime::new(runtime, infos), fast_config())
}

/// Quick timings for tests.
pub(crate) fn fast_config() -> ServerConfig {
    ServerConfig {
        long_poll_timeout: Duration::from_millis(300),
        heartbeat_interval: Duration::from_millis(200),
        control_interval: Duration::from_millis(500),
        ..ServerConfig::default()
    }
}

/// One response, its body read whole.
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: axum::http::HeaderMap,
    pub(crate) body: Vec<u8>,
}

impl Reply {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|err| {
            panic!("not JSON ({err}): {}", String::from_utf8_lossy(&self.body))
        })
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|value| value.to_str().unwrap())
    }

    /// The error type of an envelope.
    pub(crate) fn error_type(&self) -> String {
        self.json()["error"]["type"].as_str().unwrap().to_owned()
    }
}

pub(crate) async fn call(app: &Router, request: Request<Body>) -> Reply {
    let response: Response<Body> = app.clone().oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .to_vec();
    Reply {
        status,
        headers,
        body,
    }
}

pub(crate) async fn get(app: &Router, uri: &str) -> Reply {
    call(app, Request::get(uri).body(Body::empty()).unwrap()).await
}

pub(crate) async fn delete(app: &Router, uri: &str) -> Reply {
    call(
        app,
        Request::delete(uri)
            .header("host", "test.local")
            .body(Body::empty())
            .unwrap(),
    )
    .await
}

pub(crate) async fn post_json(app: &Router, uri: &str, body: &str) -> Reply {
    call(
        app,
        Request::post(uri)
            .header("content-type", "application/json")
            .header("host", "test.local")
            .body(Body::from(body.to_owned()))
            .unwrap(),
    )
    .await
}

/// Sends a user message; returns the admission.
pub(crate) async fn send(app: &Router, uri: &str, text: &str) -> Value {
    let reply = post_json(app, uri, &json!({"kind": "user", "body": text}).to_string()).await;
    assert_eq!(
        reply.status,
        202,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    reply.json()
}

/// Polls the snapshot until `submission` settled; returns the snapshot.
pub(crate) async fn settled(app: &Router, uri: &str, submission: &str) -> Value {
    for _ in 0..500 {
        let snapshot = get(app, uri).await.json();
        if snapshot["settlements"]
            .as_array()
            .unwrap()
            .iter()
            .any(|settlement| settlement["submissionId"] == submission)
        {
            return snapshot;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{submission} never settled");
}
