//! flue-connectors: third-party integrations for Flue.
//!
//! Connectors change often; flue-core changes carefully. This crate holds:
//!
//! - the MCP client: [`connect_mcp_server`] turns an MCP server's tools into
//!   [`flue_core::ToolDefinition`]s that an agent uses like any other tool;
//! - [`IsolatedSandbox`]: a host directory whose commands run in Linux namespaces
//!   (bubblewrap, or `unshare`): the host read-only, only the workspace writable, a private
//!   `/tmp`, no network unless enabled;
//! - [`DaytonaSandbox`]: a remote Daytona sandbox, driven through its REST API.
//!
//! Both sandboxes implement [`flue_core::Sandbox`], so agent code never knows which one it
//! runs in.
//!
//! The durable stores (SQLite, Postgres) live in flue-store.
//!
//! ```no_run
//! use flue_connectors::{McpHttpEndpoint, McpServerOptions, connect_mcp_server};
//! use flue_core::AgentConfig;
//!
//! # async fn example() -> flue_core::Result<()> {
//! let docs = connect_mcp_server(
//!     "docs",
//!     McpServerOptions::new(McpHttpEndpoint::new("http://127.0.0.1:8931/mcp")),
//! )
//! .await?;
//! // The tools are named `mcp__docs__<tool>`; the agent follows changes to the server's list.
//! let config = AgentConfig::new()
//!     .with_model("anthropic/claude-sonnet-4-6")
//!     .with_tool_source(docs.tool_source());
//! // ... build a harness from `config` and run sessions; the connection must stay open ...
//! # let _ = config;
//! docs.close().await?;
//! # Ok(())
//! # }
//! ```
//!
//! ## Tool names
//!
//! A server's tool `t` becomes `mcp__<server>__<t>`. In both parts, characters outside
//! `[A-Za-z0-9_-]` become `_`, leading and trailing `_` are trimmed, and an empty part becomes
//! `unnamed`. Two tools of one server that end up with the same name are an error. Names longer
//! than 64 characters (the most models accept) keep their first 55 characters and end in `_`
//! and eight hex digits of a hash of the full name.
//!
//! ## A changing tool list
//!
//! A server may change its tools while it runs and say so with
//! `notifications/tools/list_changed`. The connection notes it, and lists the tools again the
//! next time its [`flue_core::tool::ToolSource`] is refreshed: the agent loop does that before each
//! model turn, so the model sees added, changed and removed tools from its next turn on. In a
//! changed list, a tool that cannot be adapted (a name clash, an invalid schema) is left out
//! with a warning; if listing fails, the previous list stays.
//!
//! ## Map of the main types
//!
//! - [`connect_mcp_server`] and [`McpServerConnection`] (its tools, its live
//!   [`flue_core::tool::ToolSource`] and `close`)
//! - [`McpServerOptions`]: an [`McpEndpoint`] ([`McpHttpEndpoint`] with its [`McpTransport`], or
//!   [`McpStdioCommand`]), the per-request timeout and whether progress resets it
//! - failures are [`flue_core::FlueError::Mcp`] with a [`flue_core::error::McpErrorReason`]
//! - sandboxes: [`IsolatedSandbox`] ([`IsolationBackend`]), [`DaytonaSandbox`] ([`DaytonaConfig`])

// Only the binaries write to the terminal: flue-cli's stdout is a JSON contract, and an
// embedding application owns its own output.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod daytona;
mod isolated;
mod mcp;

/// Installs ring as the process's default rustls crypto provider, unless one is installed
/// already (an embedder's choice is kept). reqwest is built without a provider of its own (one
/// TLS library in the binary), so every HTTP client this crate builds (MCP over HTTP and SSE,
/// OAuth, Daytona) calls this first; rmcp builds its own default client too.
pub(crate) fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another thread installing one is fine: a provider is installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

pub use daytona::{DEFAULT_DAYTONA_API_URL, DaytonaConfig, DaytonaSandbox};
pub use isolated::{IsolatedSandbox, IsolatedSandboxBuilder, IsolationBackend};
pub use mcp::{
    AcceptDefaults, DEFAULT_ELICITATION_TIMEOUT, DEFAULT_MCP_TIMEOUT, DeclineElicitation,
    ElicitationAnswer, ElicitationRequest, MAX_AUTHORIZATIONS, McpElicitor, McpEndpoint,
    McpHttpEndpoint, McpOAuth, McpOAuthGrant, McpOAuthRedirect, McpSampler, McpSamplingApprover,
    McpServerConnection, McpServerOptions, McpStdioCommand, McpTokenStore, McpTransport,
    PendingActionElicitor, SamplingRequest, SamplingResponse, connect_mcp_server, field_options,
    field_value, login_mcp_server,
};
