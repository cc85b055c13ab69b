//! Turns a Flue workspace or bundle into runnable agents.
//!
//! flue-host is the assembly layer `flue run`, `flue chat`, `flue serve`, `flue dev` and
//! embedders share: it finds the workspace root, reads `.env` (without touching the process
//! environment), builds the model providers from flue.toml and the environment, and per
//! conversation opens the agent's sandbox and MCP servers and builds its
//! [`Harness`](flue_core::Harness) on the workspace's store (`.flue/flue.db`). An [`App`]
//! assembles a whole serving process from that. It closes what it opened on every path.
//!
//! ```no_run
//! # async fn example() -> Result<(), flue_host::HostError> {
//! use std::path::Path;
//! use flue_host::{AgentSet, Env, HarnessOptions, Host};
//!
//! let root = Path::new("my-agents");
//! let env = Env::for_root(std::env::vars(), root, None)?;
//! let host = Host::open(AgentSet::from_workspace(root, env)?)?;
//! for agent in host.agents().agents() {
//!     println!("{}: {:?}", agent.name, agent.description);
//! }
//! let opened = host.open_harness("hello", "conversation-1", &HarnessOptions::new()).await?;
//! let session = opened.harness().session("default").await?;
//! let reply = session.prompt("hi", Default::default()).await?;
//! println!("{}", reply.text);
//! drop(session);
//! opened.close().await; // MCP servers closed, a Daytona sandbox deleted
//! # Ok(())
//! # }
//! ```
//!
//! The main types:
//! - [`Env`]: the caller's variables over a `.env` file.
//! - [`AgentSet`]: one validated workspace or bundle with its providers; lists agents
//!   ([`AgentInfo`]) and opens an [`AgentHarness`] per (agent, conversation id).
//! - [`Host`]: the store plus the current agent set, swappable when a server reloads; the
//!   [`AgentRegistry`](flue_core::AgentRegistry) of a submission runtime
//!   ([`AgentRuntime`](flue_core::AgentRuntime)), with [`Host::preflight`] to check an agent
//!   before anything is admitted.
//! - [`App`] (built with [`AppBuilder`]): the serving assembly `flue run`, `flue chat`,
//!   `flue serve` and `flue dev` share: store ([`StoreChoice`]), host, preflight, the durable
//!   runtime with its recovery, the protocol's router, drain and close. [`DevApp`] adds
//!   `flue dev`'s console status and reload swap.
//! - [`HostError`]: what can go wrong before the first model call, with stable kinds.
//! - [`find_root`], [`resolve_root`], [`open_store`], [`DB_PATH`]: the workspace's layout.

// Only the binaries write to the terminal: flue-cli's stdout is a JSON contract, and an
// embedding application owns its own output.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod agents;
mod app;
mod approval_key;
mod dev;
mod env;
mod error;
mod hints;
mod host;
mod inspect;
mod mcp;
mod providers;
mod root;
mod sampling;
mod sandbox;
mod schedule;
mod store;
mod tokens;
mod trash;
mod trust;

pub use agents::{AgentHarness, AgentSet, HarnessOptions, agent_name_of_file};
pub use app::{AgentCheck, App, AppBuilder, Preflight, RuntimeMode};
pub use approval_key::{APPROVAL_KEY_VAR, approval_key};
pub use dev::{BuildProblem, DEV_DB_PATH, DevApp, WarningSink, serve_console, watched_files};
pub use env::Env;
pub use error::HostError;
pub use flue_connectors::{
    AcceptDefaults, DeclineElicitation, ElicitationAnswer, ElicitationRequest, McpElicitor,
    McpSamplingApprover, PendingActionElicitor, SamplingRequest, field_options, field_value,
};
pub use flue_core::AgentInfo;
pub use hints::connection_hint;
pub use host::Host;
pub use root::{DB_PATH, find_root, resolve_root, store_path};
pub use sandbox::ConversationSandboxes;
pub use store::{
    ServeStore, StoreChoice, open_inspect_store, open_serve_store, open_store, open_store_at,
};
pub use trash::{restore_from_trash, rewind_workspace};
pub use trust::{TrustItem, TrustKind, TrustManifest, TrustPolicy, TrustRecord, TrustStore};
