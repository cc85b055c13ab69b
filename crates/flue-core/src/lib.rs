//! flue-core: the Flue agent runtime — sessions, tasks, tools, models, sandboxes and stores.
//!
//! A [`Harness`] is an initialized agent (resolved configuration, sandbox, store, model
//! providers) for one agent instance id. It opens named [`Session`]s: append-only message logs
//! on which operations (`prompt`, `skill`, `task`, `shell`) run one at a time. Each operation
//! returns a [`CallHandle`] that can be awaited, aborted, and read as a stream of [`Event`]s.
//!
//! Map of the main types:
//! - configuration: [`AgentConfig`], [`AgentProfile`], [`config::ResolvedAgent`]
//! - runtime: [`Harness`], [`Session`], [`CallHandle`], [`PromptResponse`]
//! - call options: [`CallOptions`], shared by [`PromptOptions`], [`SkillOptions`] and
//!   [`TaskOptions`]
//! - skills, roles and tasks: [`Skill`], [`Role`]
//! - tools: [`ToolDefinition`] (a [`Tool`] with its schema), [`ToolContext`], [`ToolMeta`]
//! - actions (Rust behaviour the model calls as a tool, run in an isolated child scope):
//!   [`ActionDefinition`], [`ActionContext`]
//! - wire formats: [`Record`] (session logs) and [`Event`] (operation streams)
//! - sandboxes: [`VirtualSandbox`] (the default: in memory, no processes), [`LocalSandbox`]
//! - durable submissions: [`AgentRuntime`] (`dispatch`, `wait`, `read`, `abort`, stream reads),
//!   [`AgentRegistry`], [`submission::DispatchReceipt`], [`StreamBatch`]
//! - errors: [`FlueError`], whose [`FlueError::kind`] is stable
//!
//! The root holds what an application embedding the runtime uses. Whoever implements a backend
//! or a host finds the rest in named modules:
//! - [`store`]: the store traits ([`store::SessionStore`], [`store::ConversationStore`],
//!   [`store::AuditStore`]), their boxed companions the runtime holds
//!   ([`store::DynSessionStore`], ...), the rules every backend follows and the fencing and
//!   ownership protocol; [`MemoryStore`] (durable stores live in the flue-store crate)
//! - [`model`]: the [`ModelProvider`] trait's data ([`model::ModelRequest`],
//!   [`model::ModelTurn`], [`model::TurnSink`], [`model::ToolSchema`], [`model::ModelInfo`],
//!   [`model::ModelPrice`], [`model::ModelSpec`]); remote providers live in flue-providers
//! - [`sandbox`]: the [`Sandbox`] trait's data ([`sandbox::FileStat`],
//!   [`sandbox::MkdirOptions`], ...), [`sandbox::CommandLauncher`] and the path rules
//! - [`tool`]: everything about tools, including command tools' limits and output rendering
//! - [`permission`]: the permission policy's rules and its decision
//! - [`elicitation`]: the schema rules of an MCP elicitation
//! - [`spans`]: the tracing spans, and [`spans::traced_turn`] for model turns run outside an
//!   operation
//! - [`util`]: clocks, ids and cancellation shared with the sibling crates
//! - [`record`] and [`event`]: every wire type (flue-protocol's modules); [`submission`]: the
//!   durable runtime's receipts, states and builder; [`config`], [`operation`], [`error`]: the
//!   rest of the configuration, call options and error details
//! - [`fork`] and [`rewind`]: copying a conversation, and undoing the file changes of its turns
//! - [`view`]: the conversation list and a conversation's transcript, as every frontend reads
//!   them from a store
//!
//! Which crate a program embedding Flue needs, for what:
//! - flue-core (this crate): always — the runtime, tools, actions, hooks, the in-memory store,
//!   the scripted model, the durable submission runtime
//! - flue-providers: models behind an API (Anthropic, OpenAI and compatible servers, the
//!   OpenAI Responses API, Gemini) and the catalog of built-in models
//! - flue-store: conversations that outlive the process (SQLite, Postgres)
//! - flue-connectors: MCP servers, and sandboxes in a container or a remote service
//! - flue-host: a whole workspace as `flue` runs it (agent files, `flue.toml`, trust)
//! - flue-server: the HTTP API, as an axum `Router` to mount
//! - flue-protocol: the wire types alone (for a client)
//!
//! Two runnable programs show the paths: `examples/library` (scripted model, in-memory store,
//! an initializer, a tool and an action) and `examples/provider` (Anthropic from
//! flue-providers, the SQLite store from flue-store, and a hook).

// Only the binaries write to the terminal: flue-cli's stdout is a JSON contract, and an
// embedding application owns its own output.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod action;
mod agent_loop;
mod background;
mod budget;
mod call;
mod compaction;
pub mod config;
pub mod elicitation;
pub mod error;
pub mod fork;
mod harness;
pub mod hook;
mod hook_points;
mod initializer;
mod log_cache;
pub mod model;
pub mod operation;
mod overlay;
pub mod permission;
mod redact;
pub mod rewind;
mod role;
mod running_tasks;
pub mod sandbox;
mod scope;
mod session;
mod shared;
mod skill;
mod skill_ref;
pub mod spans;
pub mod standing;
mod steps;
pub mod store;
pub mod submission;
mod task;
pub mod tool;
pub mod util;
pub mod view;

// The embedder's API: what an application embedding the runtime names. Everything here also
// has a home in a module (or in flue-protocol); the rest lives only in the public modules.
// At most 100 names (tidy: `flue_core_root_exports_at_most_100_names`).

// The wire formats, as modules: `flue_core::record::X` and `flue_core::event::X`.
pub use flue_protocol::{event, record};

// Harness, sessions and operations.
pub use background::BackgroundTaskOptions;
pub use call::{CallHandle, EventStream};
pub use harness::{Harness, HarnessBuilder, Sessions, check_instance_id};
pub use initializer::AgentInitializerContext;
pub use operation::{CallOptions, PromptOptions, PromptResponse, SkillOptions, TaskOptions};
pub use session::Session;

// Configuration: agents, skills, roles.
pub use config::{AgentConfig, AgentProfile, Skill};
pub use flue_protocol::{Budget, BudgetLimits, DEFAULT_SESSION, DurabilityConfig, ThinkingLevel};
pub use redact::Redactor;
pub use role::Role;
pub use skill_ref::SkillRef;
// Standing approvals ("always" for a conversation) and the key that signs them.
// What a model call is given of a session's records (the dev console's prompt view).
pub use steps::model_view;

// Tools and actions, and the names of the runtime's own tools.
pub use action::{ActionContext, ActionDefinition, MAX_ACTION_DEPTH};
pub use agent_loop::{FINISH_TOOL, GIVE_UP_TOOL, PERMISSIONS_CHECK_TOOL};
pub use skill::LOAD_SKILL_TOOL;
pub use task::{MAX_TASK_DEPTH, TASK_TOOL};
pub use tool::{Permission, Tool, ToolContext, ToolDefinition, ToolError, ToolMeta};
pub use util::BoxFuture;

// Records and events (the wire formats, from flue-protocol); the rest in `record` and `event`.
pub use event::{ErrorInfo, Event, Outcome};
pub use record::{
    ActionDecision, AssistantContent, AssistantMessage, Image, ModelRef, Record, StopReason,
    StoredRecord, ToolCall, ToolResult, Usage, UserContent, UserMessage,
};

// Errors.
pub use error::{FlueError, Result};

// Durable submissions; the rest in `submission`.
pub use submission::{
    AgentInfo, AgentRegistry, AgentRuntime, BatchBody, ConversationKey, DeliveredMessage,
    DispatchOptions, MessageOptions, Offset, Settlement, StaticAgents, StreamBatch,
};

// Models, sandboxes and the in-memory store.
pub use model::{ModelProvider, ProviderRegistry, ScriptedProvider};
pub use sandbox::{ExecOptions, LocalSandbox, Sandbox, VirtualSandbox};
pub use store::MemoryStore;

pub use tokio_util::sync::CancellationToken;

/// The examples of docs/library.md, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/library.md")]
struct LibraryGuide;

/// The examples of docs/hooks.md, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/hooks.md")]
struct HooksGuide;
