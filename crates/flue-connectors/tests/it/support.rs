//! Shared helpers: finding the test peers, starting HTTP servers, calling tools.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use flue_connectors::{
    McpHttpEndpoint, McpServerConnection, McpServerOptions, McpStdioCommand, McpTransport,
    connect_mcp_server,
};
use flue_core::{CancellationToken, LocalSandbox, ToolContext, ToolDefinition, ToolError};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// tests/peers/, where `tests/peers/install.sh` installs the servers.
pub fn peers() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/peers")
}

fn require(path: &Path, what: &str) -> String {
    assert!(
        path.exists(),
        "{what} is missing at {}: run `bash tests/peers/install.sh` \
         (`cargo xtask ci` runs it first)",
        path.display()
    );
    path.to_string_lossy().into_owned()
}

/// The entry point of `@modelcontextprotocol/server-everything`.
pub fn everything_js() -> String {
    require(
        &peers().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js"),
        "@modelcontextprotocol/server-everything",
    )
}

/// The Node preload that binds test servers to loopback on a free port.
pub fn loopback_cjs() -> String {
    require(&peers().join("loopback.cjs"), "tests/peers/loopback.cjs")
}

/// The Python of the test virtualenv, which has the `mcp` package.
pub fn python() -> String {
    require(
        &peers().join(".venv/bin/python"),
        "the tests/peers virtualenv",
    )
}

/// A test peer script under tests/peers/.
pub fn script(name: &str) -> String {
    require(&peers().join(name), name)
}

/// How to reach a server-everything instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    Stdio,
    StreamableHttp,
    Sse,
}

/// A server process listening on loopback; killed when dropped.
pub struct HttpPeer {
    _child: Child,
    pub port: u16,
}

impl HttpPeer {
    /// Starts `program args` and waits for its `listening on <port>` line on stderr.
    pub async fn start(program: &str, args: &[&str], envs: &[(&str, &str)]) -> Self {
        let mut child = Command::new(program)
            .args(args)
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|err| panic!("cannot start {program}: {err}"));
        let stderr = child.stderr.take().unwrap();
        let mut lines = BufReader::new(stderr).lines();
        let port = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if let Some(port) = line.strip_prefix("listening on ") {
                    return port.trim().parse::<u16>().unwrap();
                }
            }
            panic!("{program} exited before listening");
        })
        .await
        .unwrap_or_else(|_| panic!("{program} did not start listening within 60 s"));
        // Keep draining stderr so the server never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Self {
            _child: child,
            port,
        }
    }
}

/// A running server-everything reachable over `wire`, and the options to reach it.
pub struct Everything {
    pub options: McpServerOptions,
    _peer: Option<HttpPeer>,
}

impl Everything {
    pub async fn start(wire: Wire) -> Self {
        let js = everything_js();
        match wire {
            Wire::Stdio => Self {
                options: McpServerOptions::new(
                    McpStdioCommand::new("node").with_args([js.as_str(), "stdio"]),
                ),
                _peer: None,
            },
            Wire::StreamableHttp | Wire::Sse => {
                let (mode, path, transport) = if wire == Wire::Sse {
                    ("sse", "sse", McpTransport::Sse)
                } else {
                    ("streamableHttp", "mcp", McpTransport::StreamableHttp)
                };
                let peer =
                    HttpPeer::start("node", &["--require", &loopback_cjs(), &js, mode], &[]).await;
                let url = format!("http://127.0.0.1:{}/{path}", peer.port);
                Self {
                    options: McpServerOptions::new(
                        McpHttpEndpoint::new(url).with_transport(transport),
                    ),
                    _peer: Some(peer),
                }
            }
        }
    }

    pub async fn connect(&self) -> McpServerConnection {
        connect_mcp_server("everything", self.options.clone())
            .await
            .unwrap()
    }
}

/// A tool context over a scratch directory.
pub fn context() -> ToolContext {
    let dir = std::env::temp_dir();
    ToolContext::new(Arc::new(LocalSandbox::new(&dir).unwrap()))
        .with_cancel(CancellationToken::new())
        .with_instance_id("test")
        .with_session("default")
        .with_cwd("/")
}

/// The tool called `name` of `connection`.
pub fn tool(connection: &McpServerConnection, name: &str) -> ToolDefinition {
    let tools = connection.tools();
    let found = tools.iter().find(|tool| tool.name() == name).cloned();
    found.unwrap_or_else(|| {
        let names: Vec<&str> = tools.iter().map(ToolDefinition::name).collect();
        panic!("no tool {name}; tools: {names:?}")
    })
}

/// Calls the tool `name` with `input` as the runtime would (input validated first).
pub async fn call(
    connection: &McpServerConnection,
    name: &str,
    input: Value,
) -> Result<String, ToolError> {
    let output = tool(connection, name).call(input, &context()).await?;
    Ok(output.as_str().unwrap().to_owned())
}

/// A running test server built with the Python SDK (tests/peers/py_server.py).
pub struct PyServer {
    pub options: McpServerOptions,
    _peer: Option<HttpPeer>,
}

impl PyServer {
    /// Starts the server for `wire`; `envs` go to the server process.
    pub async fn start(wire: Wire, envs: &[(&str, &str)]) -> Self {
        Self::start_script("py_server.py", wire, envs).await
    }

    /// Starts the Python SDK server `name` (under tests/peers/) for `wire`.
    pub async fn start_script(name: &str, wire: Wire, envs: &[(&str, &str)]) -> Self {
        let script = script(name);
        match wire {
            Wire::Stdio => {
                let mut command =
                    McpStdioCommand::new(python()).with_args([script.as_str(), "stdio"]);
                for (name, value) in envs {
                    command = command.with_env(*name, *value);
                }
                Self {
                    options: McpServerOptions::new(command),
                    _peer: None,
                }
            }
            Wire::StreamableHttp | Wire::Sse => {
                let (mode, path, transport) = if wire == Wire::Sse {
                    ("sse", "sse", McpTransport::Sse)
                } else {
                    ("streamable-http", "mcp", McpTransport::StreamableHttp)
                };
                let peer = HttpPeer::start(&python(), &[&script, mode], envs).await;
                let url = format!("http://127.0.0.1:{}/{path}", peer.port);
                Self {
                    options: McpServerOptions::new(
                        McpHttpEndpoint::new(url).with_transport(transport),
                    ),
                    _peer: Some(peer),
                }
            }
        }
    }
}

/// Options for the misbehaving stdio server in `scenario`.
pub fn raw_server(scenario: &str) -> McpServerOptions {
    McpServerOptions::new(
        McpStdioCommand::new(python()).with_args([script("raw_server.py").as_str(), scenario]),
    )
}

/// Calls `name` on `connection` until it gets an answer other than a timeout, at most 20 times.
///
/// For a check that a connection is still usable after a short per-request timeout fired: a
/// machine busy with other work may take longer than that timeout to answer even this call,
/// which says nothing about the connection. Any other error, or 20 timeouts, is returned.
pub async fn call_until_answered(
    connection: &McpServerConnection,
    name: &str,
    input: Value,
) -> Result<String, ToolError> {
    let mut result = call(connection, name, input.clone()).await;
    for _ in 1..20 {
        match &result {
            Err(err) if err.kind == "mcp_timeout" => {
                result = call(connection, name, input.clone()).await;
            }
            _ => break,
        }
    }
    result
}

/// The error of a connection that must fail.
pub async fn connect_error(name: &str, options: McpServerOptions) -> flue_core::FlueError {
    match connect_mcp_server(name, options).await {
        Ok(connection) => panic!("connected to {name}: {connection:?}"),
        Err(err) => err,
    }
}

/// `(kind, message)` of an error, for whole-value comparisons.
pub fn kind_and_message(err: &flue_core::FlueError) -> (&'static str, String) {
    (err.kind(), err.to_string())
}
