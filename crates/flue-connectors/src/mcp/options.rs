//! How to reach an MCP server: [`McpServerOptions`] and its two endpoint kinds.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::elicitation::{DEFAULT_ELICITATION_TIMEOUT, McpElicitor};
use super::oauth::McpOAuth;
use super::sampling::McpSampler;

/// Default per-request timeout: 60 seconds.
pub const DEFAULT_MCP_TIMEOUT: Duration = Duration::from_secs(60);

/// How to connect to one MCP server: where it is, and how long to wait for each request.
///
/// ```
/// use std::time::Duration;
/// use flue_connectors::{McpHttpEndpoint, McpServerOptions, McpStdioCommand, McpTransport};
///
/// // A remote server over streamable HTTP (the default transport).
/// let docs = McpServerOptions::new(
///     McpHttpEndpoint::new("http://127.0.0.1:8931/mcp").with_header("Authorization", "Bearer t"),
/// );
/// // A legacy server over HTTP + server-sent events.
/// let legacy = McpServerOptions::new(
///     McpHttpEndpoint::new("http://127.0.0.1:3001/sse").with_transport(McpTransport::Sse),
/// );
/// // A local process spoken to over stdio, with a shorter timeout.
/// let files = McpServerOptions::new(
///     McpStdioCommand::new("npx").with_args(["-y", "@modelcontextprotocol/server-filesystem", "."]),
/// )
/// .with_timeout(Duration::from_secs(10));
/// # let _ = (docs, legacy, files);
/// ```
///
/// `Debug` shows header names and environment variable names, never their values.
#[derive(Clone)]
pub struct McpServerOptions {
    /// Where the server is.
    pub endpoint: McpEndpoint,
    /// How long one request may wait for its answer (default [`DEFAULT_MCP_TIMEOUT`]).
    pub timeout: Duration,
    /// Restart the timeout whenever the server reports progress on the request.
    pub reset_timeout_on_progress: bool,
    /// Who answers the server's elicitation requests; without one, flue does not announce
    /// elicitation and declines any request.
    pub elicitor: Option<Arc<dyn McpElicitor>>,
    /// How long one of the server's questions may wait for an answer before it is declined
    /// (default [`DEFAULT_ELICITATION_TIMEOUT`]). While a question waits, the timeout of the
    /// call that caused it stands still.
    pub elicitation_timeout: Duration,
    /// OAuth for a streamable-HTTP server (used when it answers 401). A server given an
    /// `Authorization` header does not use OAuth.
    pub oauth: McpOAuth,
    /// Who completes the server's sampling requests; without one (the default) sampling is
    /// not announced and requests fail.
    pub sampler: Option<Arc<dyn McpSampler>>,
}

/// Where an MCP server is. May grow: match with a wildcard arm.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum McpEndpoint {
    /// A server reached over HTTP.
    Http(McpHttpEndpoint),
    /// A local process spoken to over its stdin and stdout.
    Stdio(McpStdioCommand),
}

/// The wire transport of an HTTP server. May grow: match with a wildcard arm.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum McpTransport {
    /// Streamable HTTP, the current MCP transport (`POST` to the url).
    #[default]
    StreamableHttp,
    /// The legacy HTTP + server-sent events transport: `GET` the url for an event stream whose
    /// `endpoint` event names where to `POST` requests.
    Sse,
}

/// An MCP server reached over HTTP.
#[derive(Clone, PartialEq, Eq)]
pub struct McpHttpEndpoint {
    /// The endpoint: `http://` or `https://`.
    pub url: String,
    /// The wire transport (default streamable HTTP).
    pub transport: McpTransport,
    /// Headers sent with every request (for example `Authorization`).
    pub headers: BTreeMap<String, String>,
}

/// An MCP server run as a local process on the host (not inside an agent's sandbox).
///
/// The process gets a small allow-list of the host environment (`PATH`, `HOME`, `USER`,
/// `LOGNAME`, `SHELL`, `LANG`, `LC_ALL`, `LC_CTYPE`, `TZ`, `TERM`, `TMPDIR`) plus
/// [`McpStdioCommand::env`]; nothing else (such as API keys) leaks into it. It runs in its own
/// process group, which is killed when the connection closes.
#[derive(Clone, PartialEq, Eq)]
pub struct McpStdioCommand {
    /// The program; looked up on `PATH` when it has no `/`.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Environment variables set for it, over the allow-listed ones.
    pub env: BTreeMap<String, String>,
    /// Working directory; the caller's when unset.
    pub cwd: Option<PathBuf>,
}

impl McpServerOptions {
    /// Options for the server at `endpoint`, with the default timeout.
    pub fn new(endpoint: impl Into<McpEndpoint>) -> Self {
        Self {
            endpoint: endpoint.into(),
            timeout: DEFAULT_MCP_TIMEOUT,
            reset_timeout_on_progress: false,
            elicitor: None,
            elicitation_timeout: DEFAULT_ELICITATION_TIMEOUT,
            oauth: McpOAuth::default(),
            sampler: None,
        }
    }

    /// Lets the server sample: `sampler` completes its requests.
    #[must_use]
    pub fn with_sampler(mut self, sampler: Arc<dyn McpSampler>) -> Self {
        self.sampler = Some(sampler);
        self
    }

    /// Sets the OAuth settings of a remote server.
    #[must_use]
    pub fn with_oauth(mut self, oauth: McpOAuth) -> Self {
        self.oauth = oauth;
        self
    }

    /// Sets how long a question of the server waits for an answer.
    #[must_use]
    pub fn with_elicitation_timeout(mut self, timeout: Duration) -> Self {
        self.elicitation_timeout = timeout;
        self
    }

    /// Sets who answers the server's elicitation requests.
    #[must_use]
    pub fn with_elicitor(mut self, elicitor: Arc<dyn McpElicitor>) -> Self {
        self.elicitor = Some(elicitor);
        self
    }

    /// Sets the per-request timeout.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Restarts a request's timeout whenever the server reports progress on it, so a slow tool
    /// that keeps reporting is not cut off.
    #[must_use]
    pub fn with_reset_timeout_on_progress(mut self) -> Self {
        self.reset_timeout_on_progress = true;
        self
    }

    /// Header and environment values: never shown in errors.
    pub(crate) fn secret_values(&self) -> Vec<String> {
        let values = match &self.endpoint {
            McpEndpoint::Http(http) => http.headers.values(),
            McpEndpoint::Stdio(stdio) => stdio.env.values(),
        };
        values
            .chain(self.oauth.client_secret.iter())
            .filter(|value| value.trim().len() >= MIN_REDACTED_LEN)
            .cloned()
            .collect()
    }
}

/// Values shorter than this are not redacted from messages (they would mangle ordinary words).
const MIN_REDACTED_LEN: usize = 4;

impl McpHttpEndpoint {
    /// A streamable-HTTP server at `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            transport: McpTransport::default(),
            headers: BTreeMap::new(),
        }
    }

    /// Sets the wire transport.
    #[must_use]
    pub fn with_transport(mut self, transport: McpTransport) -> Self {
        self.transport = transport;
        self
    }

    /// Adds a header sent with every request.
    #[must_use]
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }
}

impl McpStdioCommand {
    /// The program `command`, without arguments.
    pub fn new(command: impl Into<String>) -> Self {
        Self {
            command: command.into(),
            args: Vec::new(),
            env: BTreeMap::new(),
            cwd: None,
        }
    }

    /// Appends arguments.
    #[must_use]
    pub fn with_args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets an environment variable for the process.
    #[must_use]
    pub fn with_env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(name.into(), value.into());
        self
    }

    /// Sets the working directory.
    #[must_use]
    pub fn with_cwd(mut self, cwd: impl Into<PathBuf>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }
}

impl From<McpHttpEndpoint> for McpEndpoint {
    fn from(endpoint: McpHttpEndpoint) -> Self {
        Self::Http(endpoint)
    }
}

impl From<McpStdioCommand> for McpEndpoint {
    fn from(command: McpStdioCommand) -> Self {
        Self::Stdio(command)
    }
}

impl fmt::Debug for McpServerOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpServerOptions")
            .field("endpoint", &self.endpoint)
            .field("timeout", &self.timeout)
            .field("reset_timeout_on_progress", &self.reset_timeout_on_progress)
            .field("elicitor", &self.elicitor.is_some())
            .field("oauth", &self.oauth)
            .field("sampler", &self.sampler.is_some())
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for McpHttpEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpHttpEndpoint")
            .field("url", &self.url)
            .field("transport", &self.transport)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl fmt::Debug for McpStdioCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpStdioCommand")
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("cwd", &self.cwd)
            .finish()
    }
}
