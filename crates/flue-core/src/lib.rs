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

mod agent_loop;
mod call;
mod config;
mod error;
mod event;
mod harness;
mod model;
mod record;
mod sandbox;
mod session;
mod store;
mod tool;
mod util;

pub use agent_loop::{FINISH_TOOL, GIVE_UP_TOOL};
pub use call::{CallHandle, EventStream};
pub use config::{
    AgentConfig, AgentProfile, Compaction, CompactionConfig, DEFAULT_MAX_TURNS, DurabilityConfig,
    ResolvedAgent, Skill, ThinkingLevel,
};
pub use error::{BoxError, FlueError, Result, SandboxErrorReason};
pub use event::{ErrorInfo, Event, OperationKind, Outcome};
pub use harness::{DEFAULT_SESSION, Harness, HarnessBuilder, Sessions, TASK_SESSION_PREFIX};
pub use model::{
    AnthropicProvider, ApiKey, BuiltinProvider, MaxTokensField, ModelInfo, ModelPrice,
    ModelProvider, ModelRequest, ModelSpec, ModelTurn, OpenAiCompat, OpenAiProvider,
    ProviderConfig, ProviderRegistry, ReasoningParam, RetryPolicy, ScriptedProvider, ToolSchema,
    TurnSink, WireApi,
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
pub use session::{PromptOptions, PromptResponse, Session};
pub use store::{MemoryStore, SessionKey, SessionLog, SessionStore, SessionSummary, SqliteStore};
pub use tokio_util::sync::CancellationToken;
pub use tool::{
    BUILTIN_TOOL_NAMES, Ownership, Permission, Tool, ToolContext, ToolDefinition, ToolError,
    ToolMeta, ToolSet, builtin_tool, builtin_tools, render_output,
};
pub use util::{BoxFuture, new_ulid, new_uuid, now_ms, or_cancel};
