//! The `mcp` key: server declarations and their shape.

use std::collections::BTreeMap;

use flue_build::{
    AgentFile, McpOAuthDecl, McpServerDecl, McpTransport, RemoteMcpServer, StdioMcpServer,
};

use crate::support::{MODEL, agent, at, check_agent, check_diagnostics, load};

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
    timeout_ms: 5000
    elicitation_timeout_ms: 120000
    reset_timeout_on_progress: true
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
                    oauth: None,
                    sampling: false,
                    timeout_ms: None,
                    elicitation_timeout_ms: None,
                    reset_timeout_on_progress: false,
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
                    sampling: false,
                    timeout_ms: Some(5000),
                    elicitation_timeout_ms: Some(120_000),
                    reset_timeout_on_progress: true,
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
                    oauth: None,
                    sampling: false,
                    timeout_ms: None,
                    elicitation_timeout_ms: None,
                    reset_timeout_on_progress: false,
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
                "unknown key `args` in mcp server `remote` (a `url` server) (known keys: url, transport, headers, oauth, sampling, timeout_ms, elicitation_timeout_ms, reset_timeout_on_progress)",
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

#[test]
fn flue_toml_servers_are_read_and_agents_add_or_replace_them() {
    let flue_toml = r#"
[mcp.docs]
url = "http://127.0.0.1:8931/mcp"
transport = "sse"
headers = { Authorization = "Bearer ${DOCS_TOKEN}" }
timeout_ms = 90000
elicitation_timeout_ms = 300000
reset_timeout_on_progress = true

[mcp.files]
command = "npx"
args = ["-y", "server-filesystem"]
env = { ROOT = "${HOME}/src" }
cwd = "tools"
"#;
    let agent_file = format!(
        "---\nmodel: {MODEL}\nmcp:\n  docs: {{ url: \"http://127.0.0.1:9000/mcp\" }}\n---\nBody\n"
    );
    let workspace = load(&[
        ("flue.toml", flue_toml),
        ("agents/a.md", agent_file.as_str()),
        ("agents/b.md", &format!("---\nmodel: {MODEL}\n---\nBody\n")),
    ]);
    let docs = McpServerDecl::Remote(RemoteMcpServer {
        url: "http://127.0.0.1:8931/mcp".to_owned(),
        transport: McpTransport::Sse,
        headers: BTreeMap::from([(
            "Authorization".to_owned(),
            "Bearer ${DOCS_TOKEN}".to_owned(),
        )]),
        oauth: None,
        sampling: false,
        timeout_ms: Some(90_000),
        elicitation_timeout_ms: Some(300_000),
        reset_timeout_on_progress: true,
    });
    let files = McpServerDecl::Stdio(StdioMcpServer {
        command: "npx".to_owned(),
        args: vec!["-y".to_owned(), "server-filesystem".to_owned()],
        env: BTreeMap::from([("ROOT".to_owned(), "${HOME}/src".to_owned())]),
        cwd: Some("tools".to_owned()),
        sampling: false,
        timeout_ms: None,
        elicitation_timeout_ms: None,
        reset_timeout_on_progress: false,
    });
    assert_eq!(
        workspace.config.mcp,
        BTreeMap::from([
            ("docs".to_owned(), docs.clone()),
            ("files".to_owned(), files.clone())
        ])
    );
    let agent_docs = McpServerDecl::Remote(RemoteMcpServer {
        url: "http://127.0.0.1:9000/mcp".to_owned(),
        transport: McpTransport::StreamableHttp,
        headers: BTreeMap::new(),
        oauth: None,
        sampling: false,
        timeout_ms: None,
        elicitation_timeout_ms: None,
        reset_timeout_on_progress: false,
    });
    assert_eq!(
        workspace.mcp_servers("a").unwrap(),
        BTreeMap::from([
            ("docs".to_owned(), agent_docs),
            ("files".to_owned(), files.clone())
        ])
    );
    assert_eq!(
        workspace.mcp_servers("b").unwrap(),
        BTreeMap::from([("docs".to_owned(), docs), ("files".to_owned(), files)])
    );
    assert_eq!(
        workspace.mcp_servers("nobody").unwrap_err().kind(),
        "invalid_config"
    );
}

#[test]
fn bad_flue_toml_servers_are_all_reported_at_their_lines() {
    let flue_toml = r#"[mcp.both]
url = "http://x"
command = "y"

[mcp.neither]
args = ["a"]

[mcp.remote]
url = "ftp://files"

[mcp.transport]
url = "http://x"
transport = "websocket"

[mcp.mixed]
url = "http://x"
env = { A = "b" }

[mcp.local]
command = " "

[mcp."bad.name"]
url = "http://x"
"#;
    check_diagnostics(
        &[("flue.toml", flue_toml)],
        &[
            at(
                "flue.toml",
                1,
                "mcp server `both` sets both `url` and `command`: keep one",
            ),
            at(
                "flue.toml",
                5,
                "mcp server `neither` needs `url` (remote server) or `command` (local process)",
            ),
            at(
                "flue.toml",
                9,
                "`mcp.remote.url` must be an http:// or https:// url, got `ftp://files`",
            ),
            at(
                "flue.toml",
                13,
                "invalid mcp transport `websocket`: expected one of streamable-http, sse",
            ),
            at(
                "flue.toml",
                15,
                "`env` in mcp server `mixed` only applies to `command` servers: remove it",
            ),
            at("flue.toml", 20, "`mcp.local.command` must not be empty"),
            at(
                "flue.toml",
                22,
                "invalid mcp server name `bad.name`: use letters, digits, `-` and `_`",
            ),
        ],
    );
}

#[test]
fn an_unknown_key_in_a_flue_toml_server_is_reported_with_a_suggestion() {
    check_diagnostics(
        &[("flue.toml", "[mcp.docs]\nurl = \"http://x\"\nheader = {}\n")],
        &[at(
            "flue.toml",
            3,
            "unknown key `header` (did you mean `headers`?)",
        )],
    );
}

#[test]
fn oauth_and_sampling_settings_are_read_from_agent_files_and_flue_toml() {
    let mcp = r#"  tracker:
    url: https://mcp.tracker.example/mcp
    sampling: true
    oauth:
      client_id: flue
      client_secret: "${SECRET}"
      client_metadata_url: https://acme.example/client.json
      scopes: [read, write]
      grant: client_credentials
      redirect: follow
"#;
    let flue_toml = "[mcp.m2m]\nurl = \"https://m2m.example/mcp\"\n[mcp.m2m.oauth]\nclient_id = \"a\"\nscopes = [\"x\"]\nredirect = \"browser\"\n[mcp.local]\ncommand = \"srv\"\nsampling = true\n";
    let workspace = load(&[
        ("flue.toml", flue_toml),
        ("agents/a.md", file_with(mcp).as_str()),
    ]);
    let servers = workspace.mcp_servers("a").unwrap();
    let McpServerDecl::Remote(tracker) = &servers["tracker"] else {
        panic!("{servers:?}");
    };
    assert_eq!(
        tracker.oauth,
        Some(McpOAuthDecl {
            client_id: Some("flue".to_owned()),
            client_secret: Some("${SECRET}".to_owned()),
            client_metadata_url: Some("https://acme.example/client.json".to_owned()),
            scopes: vec!["read".to_owned(), "write".to_owned()],
            client_credentials: true,
            follow_redirect: true,
        })
    );
    assert!(servers["tracker"].sampling());
    let McpServerDecl::Remote(m2m) = &servers["m2m"] else {
        panic!("{servers:?}");
    };
    assert_eq!(
        m2m.oauth,
        Some(McpOAuthDecl {
            client_id: Some("a".to_owned()),
            scopes: vec!["x".to_owned()],
            ..McpOAuthDecl::default()
        })
    );
    assert!(!servers["m2m"].sampling());
    assert!(servers["local"].sampling());
}

#[test]
fn bad_oauth_settings_are_reported_at_their_lines() {
    let mcp = r#"  a:
    url: https://a.example/mcp
    sampling: yes
    oauth:
      grant: implicit
      redirect: popup
      tenant: x
  b:
    url: https://b.example/mcp
    oauth: { grant: client_credentials, client_id: only }
"#;
    check_diagnostics(
        &[("agents/a.md", file_with(mcp).as_str())],
        &[
            at(
                "agents/a.md",
                6,
                "`mcp.a.sampling` must be true or false, got \"yes\"",
            ),
            at(
                "agents/a.md",
                8,
                "invalid oauth grant `implicit`: expected one of authorization_code, client_credentials",
            ),
            at(
                "agents/a.md",
                9,
                "invalid oauth redirect `popup`: expected one of browser, follow",
            ),
            at(
                "agents/a.md",
                10,
                "unknown key `tenant` in the oauth settings of mcp server `a` (known keys: client_id, client_secret, client_metadata_url, scopes, grant, redirect)",
            ),
            at(
                "agents/a.md",
                13,
                "mcp server `b`: `grant: client_credentials` needs `client_id` and `client_secret`",
            ),
        ],
    );
}
