//! flue-core: the Flue agent runtime — sessions, tasks, tools, models, sandboxes and stores.
//!
//! A [`Harness`] is an initialized agent (resolved configuration, sandbox, store, model
//! providers) for one agent instance id. It opens named [`Session`]s: append-only message logs
//! on which operations (`prompt`, `shell`, ...) run one at a time. Each operation returns a
//! [`CallHandle`] that can be awaited, aborted, and read as a stream of [`Event`]s.
//!
//! Map of the main types:
//! - configuration: [`AgentConfig`], [`AgentProfile`], [`ResolvedAgent`]
//! - runtime: [`Harness`], [`Session`], [`CallHandle`], [`PromptOptions`], [`PromptResponse`]
//! - wire formats: [`Record`] (session logs) and [`Event`] (operation streams)
//! - extension traits: [`ModelProvider`], [`Tool`], [`Sandbox`], [`SessionStore`]
//! - errors: [`FlueError`], whose [`FlueError::kind`] is stable

mod config;
mod error;
mod event;
mod model;
mod record;
mod sandbox;
mod store;
mod tool;
mod util;

pub use config::{
    AgentConfig, AgentProfile, Compaction, CompactionConfig, DEFAULT_MAX_TURNS, DurabilityConfig,
    ResolvedAgent, Skill, ThinkingLevel,
};
pub use error::{BoxError, FlueError, Result, SandboxErrorReason};
pub use event::{ErrorInfo, Event, OperationKind, Outcome};
pub use model::{
    ModelInfo, ModelPrice, ModelProvider, ModelRequest, ModelSpec, ModelTurn, ProviderRegistry,
    ScriptedProvider, ToolSchema, TurnSink,
};
pub use record::{
    AssistantContent, AssistantMessage, CompactionSummary, Image, ModelRef, RECORD_FORMAT_VERSION,
    Record, ShellExchange, StopReason, StoredRecord, ToolCall, ToolResult, Usage, UserContent,
    UserMessage,
};
pub use sandbox::{
    ExecOptions, FileStat, LocalSandbox, MkdirOptions, RmOptions, Sandbox, ShellResult,
    TIMEOUT_EXIT_CODE, normalize_path,
};
pub use store::{MemoryStore, SessionKey, SessionLog, SessionStore, SessionSummary, SqliteStore};
pub use tool::{
    BUILTIN_TOOL_NAMES, Ownership, Permission, Tool, ToolContext, ToolDefinition, ToolError,
    ToolMeta, ToolSet, builtin_tool, builtin_tools, render_output,
};
pub use util::{BoxFuture, new_ulid, new_uuid, now_ms, or_cancel};
