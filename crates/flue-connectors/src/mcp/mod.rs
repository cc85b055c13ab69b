//! MCP servers as tool sources: connect, list and adapt tools, call them, close.
//!
//! [`connect_mcp_server`] speaks MCP over streamable HTTP and stdio through rmcp, and over the
//! legacy HTTP + server-sent events transport through this crate's own rmcp transport
//! (`sse.rs`). The rest of the code is shared by all three.

mod connection;
mod elicitation;
mod handler;
mod live;
mod naming;
mod oauth;
mod options;
mod render;
mod sampling;
mod sse;
mod stdio;

pub use connection::{McpServerConnection, connect_mcp_server};
pub use elicitation::{
    AcceptDefaults, DEFAULT_ELICITATION_TIMEOUT, DeclineElicitation, ElicitationAnswer,
    ElicitationRequest, McpElicitor, PendingActionElicitor,
};
pub use flue_core::elicitation::{field_options, field_value};
pub use oauth::{
    MAX_AUTHORIZATIONS, McpOAuth, McpOAuthGrant, McpOAuthRedirect, McpTokenStore, login_mcp_server,
};
pub use options::{
    DEFAULT_MCP_TIMEOUT, McpEndpoint, McpHttpEndpoint, McpServerOptions, McpStdioCommand,
    McpTransport,
};
pub use sampling::{McpSampler, McpSamplingApprover, SamplingRequest, SamplingResponse};
