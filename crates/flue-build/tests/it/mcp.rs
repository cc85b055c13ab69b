//! The `mcp` key: server declarations and their shape.

use std::collections::BTreeMap;

use flue_build::{AgentFile, McpServerDecl, McpTransport, RemoteMcpServer, StdioMcpServer};

use crate::support::{MODEL, agent, at, check_agent, check_diagnostics};

fn file_with(mcp: &str) -> String {
    format!("---\nmodel: {MODEL}\nmcp:\n{mcp}---\nBody\n")
}

#[test]
fn remote_and_stdio_servers_are_read() {
    let mcp = r#"  docs: { url: "http://127.0.0.1:8931/mcp" }
  search:
    url: https://search.example/mcp
    transport: sse
    headers: { Authorization: Bearer token, X-Retries: 3 }
  files:
    command: npx
    args: [-y, server-filesystem, 8080]
    env: { DEBUG: true }
    cwd: /srv
"#;
    let expected = AgentFile {
        model: Some(MODEL.to_owned()),
        instructions: "Body".to_owned(),
        mcp: BTreeMap::from([
            (
                "docs".to_owned(),
                McpServerDecl::Remote(RemoteMcpServer {
                    url: "http://127.0.0.1:8931/mcp".to_owned(),
                    transport: McpTransport::StreamableHttp,
                    headers: BTreeMap::new(),
                }),
            ),
            (
                "files".to_owned(),
                McpServerDecl::Stdio(StdioMcpServer {
                    command: "npx".to_owned(),
                    args: vec![
                        "-y".to_owned(),
                        "server-filesystem".to_owned(),
                        "8080".to_owned(),
                    ],
                    env: BTreeMap::from([("DEBUG".to_owned(), "true".to_owned())]),
                    cwd: Some("/srv".to_owned()),
                }),
            ),
            (
                "search".to_owned(),
                McpServerDecl::Remote(RemoteMcpServer {
                    url: "https://search.example/mcp".to_owned(),
                    transport: McpTransport::Sse,
                    headers: BTreeMap::from([
                        ("Authorization".to_owned(), "Bearer token".to_owned()),
                        ("X-Retries".to_owned(), "3".to_owned()),
                    ]),
                }),
            ),
        ]),
        ..agent("a")
    };
    check_agent(&[("agents/a.md", file_with(mcp).as_str())], "a", &expected);
}

#[test]
fn bad_server_shapes_are_reported_at_their_lines() {
    let mcp = r#"  both: { url: "http://x", command: y }
  neither: { args: [a] }
  remote:
    url: ftp://files
    transport: websocket
    args: [a]
  local:
    command: ""
    env: { PORT: 1.5 }
  not_a_mapping: http://x
  bad.name: { url: "http://x" }
"#;
    check_diagnostics(
        &[("agents/a.md", file_with(mcp).as_str())],
        &[
            at(
                "agents/a.md",
                4,
                "mcp server `both` sets both `url` and `command`: keep one",
            ),
            at(
                "agents/a.md",
                5,
                "mcp server `neither` needs `url` (remote server) or `command` (local process)",
            ),
            at(
                "agents/a.md",
                7,
                "`mcp.remote.url` must be an http:// or https:// url, got `ftp://files`",
            ),
            at(
                "agents/a.md",
                8,
                "invalid mcp transport `websocket`: expected one of streamable-http, sse",
            ),
            at(
                "agents/a.md",
                9,
                "unknown key `args` in mcp server `remote` (a `url` server) (known keys: url, transport, headers)",
            ),
            at("agents/a.md", 11, "`mcp.local.command` must not be empty"),
            at(
                "agents/a.md",
                12,
                "`mcp.local.env.PORT` must be a string, got 1.5 (quote it)",
            ),
            at(
                "agents/a.md",
                13,
                "`mcp.not_a_mapping` must be a mapping with `url` (remote server) or `command` (local process), got \"http://x\"",
            ),
            at(
                "agents/a.md",
                14,
                "invalid mcp server name `bad.name`: use letters, digits, `-` and `_`",
            ),
        ],
    );
}

#[test]
fn mcp_must_be_a_mapping() {
    check_diagnostics(
        &[(
            "agents/a.md",
            &*format!("---\nmodel: {MODEL}\nmcp: [docs]\n---\nBody"),
        )],
        &[at(
            "agents/a.md",
            3,
            "`mcp` must be a mapping of server names to settings, like `docs: { url: \"http://...\" }`, got a list",
        )],
    );
}
