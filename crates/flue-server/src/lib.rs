//! Flue agents over HTTP: the TypeScript Flue 2.x conversation protocol as an embeddable axum
//! [`Router`](axum::Router), so its official client (`@flue/sdk`) works unchanged.
//!
//! Every conversation is a URL, `/agents/<agent>/<id>`: `POST` admits a message (202 with a
//! resume offset), `GET` reads a snapshot or the updates after an offset (plain, long-poll or
//! SSE), `POST .../abort` stops its work. The router renders what its one runtime, the
//! [`DurableRuntime`] over flue-core's [`AgentRuntime`](flue_core::AgentRuntime), hands it and
//! never reaches into sessions. The protocol and our additions are documented in
//! `docs/http-api.md`; the dev console's routes ([`console_routes`]) in `docs/dev.md`.
//!
//! ```no_run
//! # async fn demo(runtime: flue_core::AgentRuntime) -> std::io::Result<()> {
//! use flue_core::AgentInfo;
//! use flue_server::{DurableRuntime, ServeOptions, ServerConfig, router, serve};
//!
//! let runtime = DurableRuntime::new(runtime, vec![AgentInfo::new("hello")]);
//! let app = axum::Router::new().merge(router(runtime, ServerConfig::default()));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! serve(listener, app, ServeOptions::default(), std::future::pending()).await
//! # }
//! ```
//!
//! Main types: [`router`] and [`ServerConfig`]; [`serve`] with [`ServeOptions`] and the
//! [`RequestGuard`] (hosts, origins, request forms; `docs/security.md`); [`DurableRuntime`] (the runtime and the agents
//! it lists); [`console_routes`] with [`DevConsole`] and [`BuildStatus`]; the wire shapes in [`wire`]; [`McpAgents`] (the agents as
//! an MCP server over stdio or streamable HTTP, `docs/mcp.md`).

// Only the binaries write to the terminal: flue-cli's stdout is a JSON contract, and an
// embedding application owns its own output.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod backend;
mod chunks;
mod console;
mod durable;
mod error;
mod guard;
mod history;
mod live;
mod live_tasks;
mod mcp;
mod notes;
mod project;
mod prompts;
mod render;
mod router;
mod routes;
mod serve;
mod state;
mod tasks;
mod timeline;
mod turns;
pub mod wire;

pub use console::{
    AgentDetails, BuildStatus, CONSOLE_ROUTES, CONTENT_SECURITY_POLICY, ConsoleAccess, DevConsole,
    ErrorHint, PromptAssembly, SourceFile, SourceKind, ToolRun, ToolsFuture, console_app,
    console_routes,
};
pub use durable::DurableRuntime;
pub use error::ApiError;
pub use guard::{
    ConfigError, MAX_URI_BYTES, MIN_EXPOSED_TOKEN_BITS, RequestGuard, check_hosts, check_origins,
    check_token,
};
pub use mcp::{MAX_QUEUED_WRITES, MCP_PATH, McpAgents, McpServeError, McpSessionLimits};
pub use prompts::{PromptRecorder, RECORDED_BYTES, RECORDED_CALLS};
pub use router::{ROUTES, router};
pub use serve::{ServeOptions, bind, serve};
pub use state::ServerConfig;

#[cfg(test)]
mod tests;
