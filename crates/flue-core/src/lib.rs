//! flue-core: the Flue agent runtime — sessions, tasks, tools, models, sandboxes and stores.
//!
//! A [`Harness`] is an initialized agent (resolved configuration, sandbox, store, model
//! providers) for one agent instance id. It opens named [`Session`]s: append-only message logs
//! on which operations (`prompt`, `skill`, `task`, `shell`) run one at a time. Each operation
//! returns a [`CallHandle`] that can be awaited, aborted, and read as a stream of [`Event`]s.
//!
//! Map of the main types:
//! - configuration: [`AgentConfig`], [`AgentProfile`], [`ResolvedAgent`]
//! - runtime: [`Harness`], [`Session`], [`CallHandle`], [`PromptResponse`]
//! - call options: [`CallOptions`], shared by [`PromptOptions`], [`SkillOptions`] and
//!   [`TaskOptions`]
//! - skills, roles and tasks: [`Skill`], [`Role`]
//! - actions (Rust behaviour the model calls as a tool, run in an isolated child scope):
//!   [`ActionDefinition`], [`ActionContext`]
//! - wire formats: [`Record`] (session logs) and [`Event`] (operation streams)
//! - extension traits: [`ModelProvider`], [`Tool`], [`Sandbox`], [`SandboxFactory`],
//!   [`SessionStore`], [`AuditStore`] (the file tools' audit log and trash)
//! - sandboxes: [`VirtualSandbox`] (the default: in memory, no processes), [`LocalSandbox`]
//! - durable submissions: [`AgentRuntime`] (`dispatch`, `wait`, `read`, `abort`, stream reads),
//!   [`AgentRegistry`], [`ConversationStore`], [`DispatchReceipt`], [`StreamBatch`]
//! - errors: [`FlueError`], whose [`FlueError::kind`] is stable

mod action;
mod agent_loop;
mod call;
mod compaction;
mod config;
mod elicitation;
mod error;
mod harness;
mod initializer;
mod model;
mod operation;
mod overlay;
mod permission;
mod redact;
mod role;
mod sandbox;
mod scope;
mod session;
mod shared;
mod skill;
mod skill_ref;
mod spans;
mod steps;
pub mod store;
mod submission;
mod task;
mod tool;
mod util;

// The wire types live in flue-protocol; these aliases keep `crate::record::X` and
// `crate::event::X` paths working inside the runtime.
use flue_protocol::{event, record};

pub use action::{ActionContext, ActionDefinition, MAX_ACTION_DEPTH};
pub use agent_loop::{FINISH_TOOL, GIVE_UP_TOOL, PERMISSIONS_CHECK_TOOL};
pub use call::{CallHandle, EventStream};
pub use config::{
    AgentConfig, AgentProfile, Compaction, CompactionConfig, DEFAULT_MAX_TURNS, ResolvedAgent,
    Skill,
};
pub use elicitation::{
    ElicitationQuestion, check_elicitation_content, elicitation_defaults, elicitation_fields,
    elicitation_required, field_options, field_value,
};
pub use error::{BoxError, FlueError, McpErrorReason, Result, SandboxErrorReason};
pub use event::{CompactionReason, ErrorInfo, Event, OperationKind, Outcome};
pub use flue_protocol::{
    ACTION_SCOPE_PREFIX, DEFAULT_SESSION, DurabilityConfig, MAX_INSTANCE_ID_CHARS, ProtocolError,
    SPAN_TARGET, TASK_SESSION_PREFIX, ThinkingLevel, task_session_parent,
};
pub use harness::{Harness, HarnessBuilder, Sessions, check_instance_id};
pub use initializer::AgentInitializerContext;
pub use model::{
    ModelInfo, ModelPrice, ModelProvider, ModelRequest, ModelSpec, ModelTurn, ProviderRegistry,
    ScriptedProvider, ToolSchema, TurnSink,
};
pub use operation::{
    CallOptions, PromptOptions, PromptResponse, SkillExtra, SkillOptions, TaskExtra, TaskOptions,
};
pub use permission::{
    PermissionRule, PermissionSource, check_permission_pattern, decide_permission,
};
pub use record::{
    ActionDecision, ActionInfo, ActionKind, ActionResolution, ActionStarted, AssistantContent,
    AssistantMessage, CompactionSummary, EmittedData, Image, ModelRef, PendingAction,
    RECORD_FORMAT_VERSION, Record, SampledMessage, SamplingExchange, ShellExchange, StopReason,
    StoredRecord, ToolCall, ToolResult, Usage, UserContent, UserMessage,
};
pub use redact::Redactor;
pub use role::Role;
pub use sandbox::{
    CommandLauncher, ExecOptions, FileStat, LocalSandbox, MkdirOptions, RmOptions, Sandbox,
    SandboxFactory, ShellResult, TIMEOUT_EXIT_CODE, VIRTUAL_ROOT, VirtualLimits, VirtualSandbox,
    VirtualSandboxBuilder, check_protected, normalize_path, protected_name,
};
pub use session::Session;
pub use skill::LOAD_SKILL_TOOL;
pub use skill_ref::SkillRef;
pub use spans::traced_turn;
pub use store::{
    AUDIT_DIFF_LIMIT, AbortReport, Acquire, Admission, AuditEntry, AuditStore, Claim,
    ConversationStore, DynAuditStore, DynConversationStore, DynSessionStore, Fence, FencedAppend,
    HeadWatch, MemoryStore, OwnerRegistration, SessionKey, SessionLog, SessionStore,
    SessionSummary, TrashEntry, TrashReason, TrashedFile,
};
pub use submission::{
    AgentInfo, AgentRegistry, AgentRuntime, AgentRuntimeBuilder, BatchBody, ConversationInfo,
    ConversationKey, DeliveredMessage, DispatchOptions, DispatchReceipt, InterruptReceipt, Offset,
    ResolveReceipt, RuntimeEvent, SendCondition, Settlement, StaticAgents, StreamBatch, StreamPage,
    SubmissionInfo, SubmissionState, WhenBusy, check_conversation_id,
};
pub use task::{MAX_TASK_DEPTH, TASK_TOOL};
pub use tokio_util::sync::CancellationToken;
pub use tool::{
    BUILTIN_TOOL_NAMES, COMMAND_INPUT_VAR, CommandToolSpec, DEFAULT_COMMAND_OUTPUT_CHARS,
    DEFAULT_COMMAND_TIMEOUT_MS, Effects, FlueLogger, InterruptBehavior, MAX_COMMAND_TIMEOUT_MS,
    Ownership, Permission, READ_ONLY_TOOL_NAMES, Tool, ToolContext, ToolDefinition, ToolError,
    ToolMeta, ToolSet, ToolSource, builtin_tool, builtin_tools, check_variable_name, render_output,
};
pub use util::{BoxFuture, iso8601_ms, new_ulid, new_uuid, now_ms, or_cancel};

/// The examples of docs/library.md, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/library.md")]
struct LibraryGuide;
