//! MCP server declarations from an agent's `mcp` key: their types and shape validation.
//!
//! Only the shape is checked here; connecting to the servers is flue-connectors' job.

use std::collections::BTreeMap;

use gray_matter::Pod;

use crate::fields::{self, Report};

/// One MCP server an agent declares; its tools become `mcp__<server>__<tool>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum McpServerDecl {
    /// A server reached over HTTP (`url: ...`).
    Remote(RemoteMcpServer),
    /// A local process spoken to over stdio (`command: ...`).
    Stdio(StdioMcpServer),
}

/// An MCP server reached over HTTP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteMcpServer {
    /// `http://` or `https://` endpoint.
    pub url: String,
    /// Wire transport (default streamable HTTP).
    pub transport: McpTransport,
    /// Extra HTTP headers sent with every request.
    pub headers: BTreeMap<String, String>,
    /// OAuth settings (`oauth:`), when the server needs more than discovery gives.
    pub oauth: Option<McpOAuthDecl>,
    /// `sampling: true`: the server may ask the agent's model for completions.
    pub sampling: bool,
    /// `timeout_ms`: per-request timeout (flue-connectors' default when unset).
    pub timeout_ms: Option<u64>,
    /// `elicitation_timeout_ms`: how long a question of the server waits for an answer before
    /// it is declined (flue-connectors' default, 10 minutes, when unset).
    pub elicitation_timeout_ms: Option<u64>,
    /// `reset_timeout_on_progress: true`: a progress notification restarts the timeout.
    pub reset_timeout_on_progress: bool,
}

/// A remote server's `oauth` settings; `${VAR}` in `client_secret` is expanded when the
/// server is connected.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct McpOAuthDecl {
    /// A client id registered with the authorization server beforehand.
    pub client_id: Option<String>,
    /// Its secret (a confidential client).
    pub client_secret: Option<String>,
    /// The https url of a client ID metadata document to use as the client id.
    pub client_metadata_url: Option<String>,
    /// Scopes to ask for instead of the server's.
    pub scopes: Vec<String>,
    /// `client_credentials` for machine-to-machine tokens (needs `client_id` and
    /// `client_secret`); the default is the authorization-code flow.
    pub client_credentials: bool,
    /// `redirect: follow`: fetch the authorization url and read the code from the redirect
    /// (for authorization servers that approve without a person).
    pub follow_redirect: bool,
}

/// An MCP server run as a local process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StdioMcpServer {
    /// Program to run.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Environment variables set for it.
    pub env: BTreeMap<String, String>,
    /// Working directory, when not the default.
    pub cwd: Option<String>,
    /// `sampling: true`: the server may ask the agent's model for completions.
    pub sampling: bool,
    /// `timeout_ms`: per-request timeout (flue-connectors' default when unset).
    pub timeout_ms: Option<u64>,
    /// `elicitation_timeout_ms`: how long a question of the server waits for an answer before
    /// it is declined (flue-connectors' default, 10 minutes, when unset).
    pub elicitation_timeout_ms: Option<u64>,
    /// `reset_timeout_on_progress: true`: a progress notification restarts the timeout.
    pub reset_timeout_on_progress: bool,
}

impl McpServerDecl {
    /// Whether the server may ask the agent's model for completions (`sampling: true`).
    pub fn sampling(&self) -> bool {
        match self {
            Self::Remote(remote) => remote.sampling,
            Self::Stdio(stdio) => stdio.sampling,
        }
    }

    /// The per-request timeout in milliseconds (`timeout_ms`), when set.
    pub fn timeout_ms(&self) -> Option<u64> {
        match self {
            Self::Remote(remote) => remote.timeout_ms,
            Self::Stdio(stdio) => stdio.timeout_ms,
        }
    }

    /// How long a question of the server waits for an answer, in milliseconds
    /// (`elicitation_timeout_ms`), when set.
    pub fn elicitation_timeout_ms(&self) -> Option<u64> {
        match self {
            Self::Remote(remote) => remote.elicitation_timeout_ms,
            Self::Stdio(stdio) => stdio.elicitation_timeout_ms,
        }
    }

    /// Whether progress notifications restart a request's timeout
    /// (`reset_timeout_on_progress`).
    pub fn reset_timeout_on_progress(&self) -> bool {
        match self {
            Self::Remote(remote) => remote.reset_timeout_on_progress,
            Self::Stdio(stdio) => stdio.reset_timeout_on_progress,
        }
    }
}

/// How an HTTP MCP server is spoken to. May grow: match with a wildcard arm.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum McpTransport {
    /// `streamable-http`: the current MCP HTTP transport.
    #[default]
    StreamableHttp,
    /// `sse`: the legacy HTTP + server-sent events transport.
    Sse,
}

const REMOTE_KEYS: &[&str] = &[
    "url",
    "transport",
    "headers",
    "oauth",
    "sampling",
    "timeout_ms",
    "elicitation_timeout_ms",
    "reset_timeout_on_progress",
];
pub(crate) const OAUTH_KEYS: &[&str] = &[
    "client_id",
    "client_secret",
    "client_metadata_url",
    "scopes",
    "grant",
    "redirect",
];
/// `grant` values: is it the client credentials grant?
pub(crate) const GRANTS: &[(&str, bool)] =
    &[("authorization_code", false), ("client_credentials", true)];
/// `redirect` values: does flue follow the redirect itself?
pub(crate) const REDIRECTS: &[(&str, bool)] = &[("browser", false), ("follow", true)];
const STDIO_KEYS: &[&str] = &[
    "command",
    "args",
    "env",
    "cwd",
    "sampling",
    "timeout_ms",
    "elicitation_timeout_ms",
    "reset_timeout_on_progress",
];
pub(crate) const TRANSPORTS: &[(&str, McpTransport)] = &[
    ("streamable-http", McpTransport::StreamableHttp),
    ("sse", McpTransport::Sse),
];

/// The servers declared by the `mcp` value; bad entries are reported and left out.
pub(crate) fn parse(pod: &Pod, report: &mut Report<'_>) -> BTreeMap<String, McpServerDecl> {
    let expected = "a mapping of server names to settings, like `docs: { url: \"http://...\" }`";
    let Some(entries) = report.check(&["mcp"], fields::mapping("mcp", pod, expected)) else {
        return BTreeMap::new();
    };
    let mut servers = BTreeMap::new();
    for (name, settings) in entries {
        if let Some(server) = parse_server(name, settings, report) {
            servers.insert(name.clone(), server);
        }
    }
    servers
}

fn parse_server(name: &str, pod: &Pod, report: &mut Report<'_>) -> Option<McpServerDecl> {
    let here = ["mcp", name];
    if !is_server_name(name) {
        report.error(
            &here,
            format!("invalid mcp server name `{name}`: use letters, digits, `-` and `_`"),
        );
    }
    let expected = "a mapping with `url` (remote server) or `command` (local process)";
    let entries = report.check(
        &here,
        fields::mapping(&format!("mcp.{name}"), pod, expected),
    )?;
    let has = |key: &str| entries.iter().any(|(entry, _)| *entry == key);
    match (has("url"), has("command")) {
        (true, true) => {
            report.error(
                &here,
                format!("mcp server `{name}` sets both `url` and `command`: keep one"),
            );
            None
        }
        (false, false) => {
            report.error(
                &here,
                format!(
                    "mcp server `{name}` needs `url` (remote server) or `command` (local process)"
                ),
            );
            None
        }
        (true, false) => parse_remote(name, &entries, report).map(McpServerDecl::Remote),
        (false, true) => parse_stdio(name, &entries, report).map(McpServerDecl::Stdio),
    }
}

fn parse_remote(
    name: &str,
    entries: &[(&String, &Pod)],
    report: &mut Report<'_>,
) -> Option<RemoteMcpServer> {
    let mut server = RemoteMcpServer {
        url: String::new(),
        transport: McpTransport::default(),
        headers: BTreeMap::new(),
        oauth: None,
        sampling: false,
        timeout_ms: None,
        elicitation_timeout_ms: None,
        reset_timeout_on_progress: false,
    };
    let mut valid = true;
    for (key, value) in entries {
        let keys = ["mcp", name, key.as_str()];
        let dotted = format!("mcp.{name}.{key}");
        let ok = match key.as_str() {
            "url" => report
                .check(&keys, url(&dotted, value))
                .map(|url| server.url = url),
            "transport" => report
                .check(
                    &keys,
                    fields::one_of(&dotted, value, "mcp transport", TRANSPORTS),
                )
                .map(|transport| server.transport = transport),
            "headers" => report
                .check(&keys, fields::string_map(&dotted, value))
                .map(|headers| server.headers = headers),
            "oauth" => parse_oauth(name, value, report).map(|oauth| server.oauth = Some(oauth)),
            "sampling" => report
                .check(&keys, fields::boolean(&dotted, value))
                .map(|sampling| server.sampling = sampling),
            "timeout_ms" => report
                .check(&keys, fields::u64_at_least(&dotted, value, 1))
                .map(|timeout| server.timeout_ms = Some(timeout)),
            "elicitation_timeout_ms" => report
                .check(&keys, fields::u64_at_least(&dotted, value, 1))
                .map(|timeout| server.elicitation_timeout_ms = Some(timeout)),
            "reset_timeout_on_progress" => report
                .check(&keys, fields::boolean(&dotted, value))
                .map(|reset| server.reset_timeout_on_progress = reset),
            _ => {
                let place = format!(" in mcp server `{name}` (a `url` server)");
                report.unknown_key(&keys, &place, REMOTE_KEYS);
                None
            }
        };
        valid &= ok.is_some();
    }
    valid.then_some(server)
}

fn parse_oauth(name: &str, pod: &Pod, report: &mut Report<'_>) -> Option<McpOAuthDecl> {
    let here = ["mcp", name, "oauth"];
    let expected = "a mapping like `{ client_id: \"...\", scopes: [read] }`";
    let entries = report.check(
        &here,
        fields::mapping(&format!("mcp.{name}.oauth"), pod, expected),
    )?;
    let mut oauth = McpOAuthDecl::default();
    let mut valid = true;
    for (key, value) in entries {
        let keys = ["mcp", name, "oauth", key.as_str()];
        let dotted = format!("mcp.{name}.oauth.{key}");
        let ok = match key.as_str() {
            "client_id" => report
                .check(&keys, non_empty_string(&dotted, value))
                .map(|id| oauth.client_id = Some(id)),
            "client_secret" => report
                .check(&keys, non_empty_string(&dotted, value))
                .map(|secret| oauth.client_secret = Some(secret)),
            "client_metadata_url" => report
                .check(&keys, url(&dotted, value))
                .map(|url| oauth.client_metadata_url = Some(url)),
            "scopes" => report
                .check(&keys, fields::string_list(&dotted, value))
                .map(|scopes| oauth.scopes = scopes),
            "grant" => report
                .check(&keys, fields::one_of(&dotted, value, "oauth grant", GRANTS))
                .map(|client_credentials| oauth.client_credentials = client_credentials),
            "redirect" => report
                .check(
                    &keys,
                    fields::one_of(&dotted, value, "oauth redirect", REDIRECTS),
                )
                .map(|follow| oauth.follow_redirect = follow),
            _ => {
                let place = format!(" in the oauth settings of mcp server `{name}`");
                report.unknown_key(&keys, &place, OAUTH_KEYS);
                None
            }
        };
        valid &= ok.is_some();
    }
    if valid
        && oauth.client_credentials
        && (oauth.client_id.is_none() || oauth.client_secret.is_none())
    {
        report.error(
            &here,
            format!("mcp server `{name}`: `grant: client_credentials` needs `client_id` and `client_secret`"),
        );
        valid = false;
    }
    valid.then_some(oauth)
}

fn parse_stdio(
    name: &str,
    entries: &[(&String, &Pod)],
    report: &mut Report<'_>,
) -> Option<StdioMcpServer> {
    let mut server = StdioMcpServer {
        command: String::new(),
        args: Vec::new(),
        env: BTreeMap::new(),
        cwd: None,
        sampling: false,
        timeout_ms: None,
        elicitation_timeout_ms: None,
        reset_timeout_on_progress: false,
    };
    let mut valid = true;
    for (key, value) in entries {
        let keys = ["mcp", name, key.as_str()];
        let dotted = format!("mcp.{name}.{key}");
        let ok = match key.as_str() {
            "command" => report
                .check(&keys, non_empty_string(&dotted, value))
                .map(|command| server.command = command),
            "args" => report
                .check(&keys, fields::string_list(&dotted, value))
                .map(|args| server.args = args),
            "env" => report
                .check(&keys, fields::string_map(&dotted, value))
                .map(|env| server.env = env),
            "cwd" => report
                .check(&keys, non_empty_string(&dotted, value))
                .map(|cwd| server.cwd = Some(cwd)),
            "sampling" => report
                .check(&keys, fields::boolean(&dotted, value))
                .map(|sampling| server.sampling = sampling),
            "timeout_ms" => report
                .check(&keys, fields::u64_at_least(&dotted, value, 1))
                .map(|timeout| server.timeout_ms = Some(timeout)),
            "elicitation_timeout_ms" => report
                .check(&keys, fields::u64_at_least(&dotted, value, 1))
                .map(|timeout| server.elicitation_timeout_ms = Some(timeout)),
            "reset_timeout_on_progress" => report
                .check(&keys, fields::boolean(&dotted, value))
                .map(|reset| server.reset_timeout_on_progress = reset),
            _ => {
                let place = format!(" in mcp server `{name}` (a `command` server)");
                report.unknown_key(&keys, &place, STDIO_KEYS);
                None
            }
        };
        valid &= ok.is_some();
    }
    valid.then_some(server)
}

fn url(key: &str, pod: &Pod) -> Result<String, String> {
    let url = fields::string(key, pod)?;
    check_url(key, &url)?;
    Ok(url)
}

/// An `http://` or `https://` url with something after the scheme.
pub(crate) fn check_url(key: &str, url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    if rest.is_none_or(str::is_empty) {
        return Err(format!(
            "`{key}` must be an http:// or https:// url, got `{url}`"
        ));
    }
    Ok(())
}

fn non_empty_string(key: &str, pod: &Pod) -> Result<String, String> {
    let text = fields::string(key, pod)?;
    if text.trim().is_empty() {
        return Err(format!("`{key}` must not be empty"));
    }
    Ok(text)
}

/// Server names: letters, digits, `-` and `_`.
pub(crate) fn is_server_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}
