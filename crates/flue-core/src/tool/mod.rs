//! Tools: definitions with JSON Schema input, runtime metadata, validation and assembly.
//!
//! A [`ToolDefinition`] wraps a [`Tool`] implementation with its compiled input (and optional
//! output) validator. The runtime validates every model-supplied input before `run`; invalid
//! input becomes a [`ToolError`] the model sees and can retry from. [`ToolSet::assemble`] builds
//! one operation's tool list and rejects name collisions.

mod builtin;
mod command;
mod emit;
mod extensions;
mod memory;
mod source;
mod state;

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};

use flue_protocol::record::{SamplingExchange, Usage};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::error::{FlueError, Result};
use crate::model::ToolSchema;
use crate::sandbox::Sandbox;
use crate::store::{DynAuditStore, MemoryStore};
use crate::util::BoxFuture;

use extensions::Extensions;

pub use builtin::{
    BUILTIN_TOOL_NAMES, READ_ONLY_TOOL_NAMES, STATE_TOOL_NAMES, builtin_tool, builtin_tools,
};
pub use command::{
    COMMAND_ATTEMPT_VAR, COMMAND_INPUT_VAR, COMMAND_KEY_VAR, COMMAND_STATE_FILE_VAR,
    COMMAND_STATE_VAR, CommandState, CommandToolSpec, DEFAULT_COMMAND_OUTPUT_CHARS,
    DEFAULT_COMMAND_TIMEOUT_MS, MAX_COMMAND_TIMEOUT_MS, check_variable_name,
};
pub use emit::FlueLogger;
pub(crate) use emit::{DataEmitter, attach_emitted};
pub use memory::MEMORY_TOOL_NAMES;
pub(crate) use memory::memory_tools;
pub(crate) use source::LiveTools;
pub use source::ToolSource;
pub use state::{ToolState, check_state, idempotency_key};

/// The suggested action of an input that does not match a built-in tool's schema.
const FIX_ARGUMENTS: &str = "Fix the arguments to match the tool's input schema and retry.";

/// Who fulfils a tool call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ownership {
    /// The runtime itself (built-in tools).
    Managed,
    /// An MCP server.
    Mcp,
    /// Application code.
    #[default]
    Custom,
}

/// Where a tool the model is offered comes from: the one naming `flue tools`,
/// `flue run --dry-run` and the dev console's Agent tab use (see [`ToolDefinition::origin`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ToolOrigin {
    /// A built-in file or shell tool.
    BuiltIn,
    /// A built-in tool over the conversation's state.
    State,
    /// A memory tool (`memory:`).
    Memory,
    /// A command tool of the agent file.
    Command,
    /// A custom tool: the application runs it and supplies the result.
    Custom,
    /// A tool the application's code defines and runs in process.
    Code,
    /// A tool of a tool source (an MCP server).
    Mcp,
    /// `load_skill`.
    Skills,
    /// `task`, which delegates to a subagent.
    Task,
    /// `finish` and `give_up` of a structured result.
    Result,
    /// A tool of the runtime's own (`permissions_check`).
    Runtime,
}

impl ToolOrigin {
    /// The origin's name: `built-in`, `state`, `memory`, `command`, `custom`, `code`, `mcp`,
    /// `skills`, `task`, `result` or `runtime`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::BuiltIn => "built-in",
            Self::State => "state",
            Self::Memory => "memory",
            Self::Command => "command",
            Self::Custom => "custom",
            Self::Code => "code",
            Self::Mcp => "mcp",
            Self::Skills => "skills",
            Self::Task => "task",
            Self::Result => "result",
            Self::Runtime => "runtime",
        }
    }
}

/// Whether a call needs confirmation before it runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Permission {
    /// Runs without asking.
    #[default]
    AlwaysAllow,
    /// Pauses the operation until confirmed.
    AlwaysAsk,
}

/// Runtime metadata of a tool: who fulfils it, whether a call asks first, and what it
/// touches. Built-in tools carry honest values; MCP tools take theirs from the server's
/// annotations; tools built in code start from [`ToolMeta::default`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolMeta {
    /// Who fulfils calls.
    pub ownership: Ownership,
    /// Confirmation policy: the tool's own default, which the agent's `permissions`
    /// override (see [`AgentConfig::with_permission`](crate::config::AgentConfig::with_permission)).
    pub permission: Permission,
    /// The tool changes nothing.
    pub read_only: bool,
    /// The tool may destroy data.
    pub destructive: bool,
    /// What a call touches.
    #[serde(default)]
    pub effects: Effects,
    /// What an abort does to a running call.
    #[serde(default)]
    pub interrupt: InterruptBehavior,
    /// A call cut off by a crash may run again, with the same idempotency key
    /// ([`ToolContext::idempotency_key`]): recovery runs it again instead of answering it
    /// `interrupted`. True for the built-in tools that only read; a tool with effects is
    /// replay-safe when it does each effect once per key.
    #[serde(default)]
    pub replay_safe: bool,
}

/// What a tool call touches: any of files, shell commands and the network. Serialized as a
/// list such as `["files", "shell"]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Effects(u8);

impl Effects {
    /// Touches nothing outside the runtime.
    pub const NONE: Self = Self(0);
    /// Reads or writes files of the sandbox.
    pub const FILES: Self = Self(1);
    /// Runs shell commands.
    pub const SHELL: Self = Self(2);
    /// Reaches the network (or an outside service).
    pub const NETWORK: Self = Self(4);

    /// Both sets of effects.
    #[must_use]
    pub const fn with(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// Whether every effect of `other` is in `self`.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// The effect names, in a fixed order.
    pub fn names(self) -> Vec<&'static str> {
        [
            (Self::FILES, "files"),
            (Self::SHELL, "shell"),
            (Self::NETWORK, "network"),
        ]
        .into_iter()
        .filter(|(effect, _)| self.contains(*effect))
        .map(|(_, name)| name)
        .collect()
    }
}

impl Serialize for Effects {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        self.names().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Effects {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Self, D::Error> {
        let names = Vec::<String>::deserialize(deserializer)?;
        names.iter().try_fold(Self::NONE, |effects, name| {
            let effect = match name.as_str() {
                "files" => Self::FILES,
                "shell" => Self::SHELL,
                "network" => Self::NETWORK,
                other => {
                    return Err(serde::de::Error::custom(format!(
                        "unknown effect `{other}` (expected files, shell or network)"
                    )));
                }
            };
            Ok(effects.with(effect))
        })
    }
}

/// What an abort does to a running call of the tool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InterruptBehavior {
    /// The call sees the cancellation and stops (commands are killed); whatever it did so far
    /// stays done, and its result is `aborted`.
    #[default]
    Cancel,
    /// The call is short and all-or-nothing (a file write): it finishes or fails within the
    /// abort grace period rather than stopping half-way.
    Complete,
}

/// Everything a running tool may use.
#[derive(Clone)]
pub struct ToolContext {
    /// The session's sandbox.
    pub sandbox: Arc<dyn Sandbox>,
    /// Fires when the operation is aborted; long-running tools should stop promptly.
    pub cancel: CancellationToken,
    /// Agent instance id.
    pub instance_id: String,
    /// Session name.
    pub session: String,
    /// Working directory of the session inside the sandbox.
    pub cwd: String,
    /// Agent name, recorded in audit entries.
    pub agent: String,
    /// Where the file tools append audit entries and keep the trash: the runtime's store,
    /// out of the sandbox's (and so the agent's) reach.
    pub audit: Arc<dyn DynAuditStore>,
    /// The call's data emitter; none outside a session's tool call.
    emitter: Option<emit::DataEmitter>,
    /// Model usage the call spends on the agent's behalf (an MCP server's sampling requests);
    /// the runtime adds it to the operation's usage when the operation ends.
    pub usage: Arc<Mutex<Usage>>,
    /// The id of the call being run (empty outside a session).
    pub call_id: String,
    /// Sampling exchanges the call's MCP server asked for; the runtime stores them as
    /// [`Record::Sampling`](flue_protocol::record::Record::Sampling) after the turn's tool results, redacted.
    pub sampling: Arc<Mutex<Vec<SamplingExchange>>>,
    /// What the runtime attaches to a session's tool call for its own tools (the log that
    /// holds live actions, the harness and scope an action opens its child scope from); empty
    /// outside a session's tool call.
    extensions: Extensions,
    /// The call's idempotency key: the same on every attempt of the call (a replay-safe call
    /// runs again after a crash with the same key), different for every other call. Empty
    /// outside a session's tool call.
    pub idempotency_key: String,
    /// Which attempt of the call this is: 1, or more when a replay-safe call runs again after
    /// a crash (0 outside a session's tool call).
    pub attempt: u32,
    /// The conversation's state, as this batch of calls sees it; `None` outside a root
    /// session's tool call (a task's calls have none).
    state: Option<ToolState>,
}

impl ToolContext {
    /// A context for calling tools outside a session: the sandbox's cwd, a fresh cancellation
    /// token, empty instance id and agent name, session `default`, and an in-memory audit store
    /// (set a durable one with [`ToolContext::with_audit`]).
    pub fn new(sandbox: Arc<dyn Sandbox>) -> Self {
        let cwd = sandbox.cwd().to_owned();
        Self {
            sandbox,
            cancel: CancellationToken::new(),
            instance_id: String::new(),
            session: "default".to_owned(),
            cwd,
            agent: String::new(),
            audit: Arc::new(MemoryStore::new()),
            emitter: None,
            usage: Arc::new(Mutex::new(Usage::default())),
            call_id: String::new(),
            sampling: Arc::new(Mutex::new(Vec::new())),
            extensions: Extensions::default(),
            idempotency_key: String::new(),
            attempt: 0,
            state: None,
        }
    }

    /// The conversation's state document (read it with [`ToolState::get`], change it with
    /// [`ToolState::set`] or [`ToolState::update`]); `None` outside a root session's tool call.
    /// A change is stored with the batch of tool results it belongs to: if a crash cuts the
    /// batch short, the change never happened.
    pub fn state(&self) -> Option<&ToolState> {
        self.state.as_ref()
    }

    /// Gives the context a state document (the runtime does for a root session's calls; a
    /// test or an embedder calling a tool directly may too).
    #[must_use]
    pub fn with_state(mut self, state: ToolState) -> Self {
        self.state = Some(state);
        self
    }

    /// The context of one call inside a session: the same context with the call's id and a
    /// data emitter that streams on `sink` and collects for the call's tool result.
    pub(crate) fn for_call(
        &self,
        call_id: &str,
        sink: &crate::model::TurnSink,
        redactor: &crate::redact::Redactor,
    ) -> (Self, emit::DataEmitter) {
        let emitter = emit::DataEmitter::new(call_id, sink, redactor);
        let mut ctx = self.clone();
        ctx.emitter = Some(emitter.clone());
        ctx.call_id = call_id.to_owned();
        (ctx, emitter)
    }

    /// Attaches a value of the runtime's to this context (see [`ToolContext::extension`]),
    /// replacing an earlier value of the same type.
    pub(crate) fn insert_extension<T: std::any::Any + Send + Sync>(&mut self, value: T) {
        self.extensions.insert(value);
    }

    /// The value of type `T` the runtime attached, when it did.
    pub(crate) fn extension<T: std::any::Any + Send + Sync>(&self) -> Option<&T> {
        self.extensions.get::<T>()
    }

    /// Emits trusted structured data for UI readers (the seed's `emitData`): streamed at once
    /// as [`flue_protocol::event::Event::Data`], stored with the call's tool result, served over HTTP as a
    /// `data-<name>` part, and never shown to the model. `name` is 1 to 64 letters, digits,
    /// `_`, `-` or `.`; `data` must serialize to JSON. Known secrets are redacted from it, but
    /// it is stored verbatim otherwise: keep raw images and personal data out. Outside a
    /// session's tool call (a context from [`ToolContext::new`]) the data goes nowhere.
    pub fn emit_data(&self, name: &str, data: &impl Serialize) -> Result<(), ToolError> {
        self.emit(name, data, None)
    }

    /// [`ToolContext::emit_data`] with an id, so a reader can replace an earlier part of the
    /// same name and id (a progress bar, a growing table).
    pub fn emit_data_with_id(
        &self,
        name: &str,
        data: &impl Serialize,
        id: &str,
    ) -> Result<(), ToolError> {
        self.emit(name, data, Some(id))
    }

    fn emit(&self, name: &str, data: &impl Serialize, id: Option<&str>) -> Result<(), ToolError> {
        match &self.emitter {
            Some(emitter) => emitter.emit(name, data, id),
            None => emit::DataEmitter::new(
                "",
                &crate::model::TurnSink::default(),
                &crate::redact::Redactor::default(),
            )
            .emit(name, data, id),
        }
    }

    /// A logger whose lines carry this call's instance, session and tool call id.
    pub fn logger(&self) -> FlueLogger {
        FlueLogger::new(&self.instance_id, &self.session, &self.call_id)
    }

    /// Sets the audit store.
    #[must_use]
    pub fn with_audit(mut self, audit: Arc<dyn DynAuditStore>) -> Self {
        self.audit = audit;
        self
    }

    /// Sets the agent instance id.
    #[must_use]
    pub fn with_instance_id(mut self, instance_id: impl Into<String>) -> Self {
        self.instance_id = instance_id.into();
        self
    }

    /// Sets the session name.
    #[must_use]
    pub fn with_session(mut self, session: impl Into<String>) -> Self {
        self.session = session.into();
        self
    }

    /// Sets the agent name.
    #[must_use]
    pub fn with_agent(mut self, agent: impl Into<String>) -> Self {
        self.agent = agent.into();
        self
    }

    /// Sets the working directory (a sandbox path).
    #[must_use]
    pub fn with_cwd(mut self, cwd: impl Into<String>) -> Self {
        self.cwd = cwd.into();
        self
    }

    /// Sets the cancellation token.
    #[must_use]
    pub fn with_cancel(mut self, cancel: CancellationToken) -> Self {
        self.cancel = cancel;
        self
    }
}

impl fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolContext")
            .field("instance_id", &self.instance_id)
            .field("session", &self.session)
            .field("agent", &self.agent)
            .field("cwd", &self.cwd)
            .finish_non_exhaustive()
    }
}

/// A failed tool call, shown to the model as an error result it can recover from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct ToolError {
    /// Stable kind (`invalid_input`, `not_found`, ...).
    pub kind: String,
    /// What went wrong, written for the model.
    pub message: String,
    /// What the model should do next, when the tool knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suggested_action: Option<String>,
}

impl ToolError {
    /// A tool error of `kind`.
    pub fn new(kind: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            message: message.into(),
            suggested_action: None,
        }
    }

    /// Sets the suggested action.
    #[must_use]
    pub fn with_suggested_action(mut self, action: impl Into<String>) -> Self {
        self.suggested_action = Some(action.into());
        self
    }

    /// The text the model sees: the message, or, when there is a suggested action, the
    /// envelope `{"ok": false, "error": {"kind", "message", "suggestedAction"}}` that the
    /// built-in file tools promise.
    pub fn model_text(&self) -> String {
        match &self.suggested_action {
            None => self.message.clone(),
            Some(action) => serde_json::json!({
                "ok": false,
                "error": {"kind": self.kind, "message": self.message, "suggestedAction": action},
            })
            .to_string(),
        }
    }

    /// Invalid input: the model should fix its arguments and retry.
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Self::new("invalid_input", message)
    }
}

impl From<FlueError> for ToolError {
    fn from(err: FlueError) -> Self {
        Self::new(err.kind(), err.to_string())
    }
}

/// A model-callable capability.
///
/// The runtime calls [`Tool::run`] with input already validated against the definition's input
/// schema. Return JSON data; a string is shown to the model as is, anything else as JSON.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a Flue tool",
    label = "implement `flue_core::Tool`, or build one with `ToolDefinition::from_fn`"
)]
pub trait Tool: Send + Sync {
    /// Runs one call.
    fn run<'a>(
        &'a self,
        input: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, std::result::Result<Value, ToolError>>;
}

/// A validated tool: name, description, schemas, metadata and the implementation.
///
/// ```
/// use flue_core::{ToolDefinition, ToolError};
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Add { a: i64, b: i64 }
/// let add = ToolDefinition::from_fn("add", "Adds two integers.", |input: Add, _ctx| async move {
///     Ok::<_, ToolError>(serde_json::json!(input.a + input.b))
/// })
/// .unwrap();
/// assert_eq!(add.name(), "add");
/// ```
#[derive(Clone)]
pub struct ToolDefinition {
    inner: Arc<ToolInner>,
}

#[derive(Clone)]
struct ToolInner {
    name: String,
    description: String,
    input_schema: Value,
    output_schema: Option<Value>,
    input_validator: Arc<jsonschema::Validator>,
    output_validator: Option<Arc<jsonschema::Validator>>,
    meta: ToolMeta,
    tool: Arc<dyn Tool>,
    /// Declared with [`ToolDefinition::custom`]: the application runs its calls.
    external: bool,
    /// The implementation validates its input itself and reports its own error kinds (an
    /// action's `action_input_validation`); `call` does not check the input schema first.
    validates_itself: bool,
    /// Where the runtime says the tool comes from, when its meta and name do not tell.
    origin: Option<ToolOrigin>,
}

impl fmt::Debug for ToolDefinition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolDefinition")
            .field("name", &self.inner.name)
            .field("meta", &self.inner.meta)
            .finish_non_exhaustive()
    }
}

impl ToolDefinition {
    /// A custom tool the application fulfils: the model sees it like any other, but the
    /// runtime does not run its calls. A call is recorded as a pending action, an
    /// [`Event::CustomToolUse`](flue_protocol::event::Event::CustomToolUse) is emitted, the operation pauses
    /// with the outcome `requires_action`, and the application supplies the result with
    /// [`Session::resolve`](crate::session::Session::resolve) and
    /// [`ActionDecision::Result`](flue_protocol::record::ActionDecision::Result).
    ///
    /// ```
    /// use flue_core::{tool::Ownership, ToolDefinition};
    /// let lookup = ToolDefinition::custom(
    ///     "lookup_order",
    ///     "Looks an order up in the shop's back office.",
    ///     serde_json::json!({"type": "object", "properties": {"id": {"type": "string"}}}),
    /// )
    /// .unwrap();
    /// assert!(lookup.is_external());
    /// assert_eq!(lookup.meta().ownership, Ownership::Custom);
    /// ```
    pub fn custom(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
    ) -> Result<Self> {
        let mut tool = Self::new(name, description, input_schema, Arc::new(ExternalTool))?;
        let inner = Arc::make_mut(&mut tool.inner);
        inner.external = true;
        inner.meta = ToolMeta {
            ownership: Ownership::Custom,
            effects: Effects::NETWORK,
            ..ToolMeta::default()
        };
        Ok(tool)
    }

    /// Marks the implementation as validating its own input (see `ToolInner::validates_itself`).
    pub(crate) fn validated_by_implementation(mut self) -> Self {
        Arc::make_mut(&mut self.inner).validates_itself = true;
        self
    }

    /// Whether the application fulfils this tool's calls (see [`ToolDefinition::custom`]).
    pub fn is_external(&self) -> bool {
        self.inner.external
    }

    /// Where the tool comes from: what the runtime declared for its own tools (command,
    /// memory, `load_skill`, `task`, `finish`/`give_up`, `permissions_check`); else a custom
    /// tool, an MCP server's, a built-in one (managed, by name), or the application's code.
    pub fn origin(&self) -> ToolOrigin {
        let inner = &self.inner;
        if let Some(origin) = inner.origin {
            return origin;
        }
        let managed = inner.meta.ownership == Ownership::Managed;
        if inner.external {
            ToolOrigin::Custom
        } else if inner.meta.ownership == Ownership::Mcp {
            ToolOrigin::Mcp
        } else if managed && STATE_TOOL_NAMES.contains(&inner.name.as_str()) {
            ToolOrigin::State
        } else if managed && BUILTIN_TOOL_NAMES.contains(&inner.name.as_str()) {
            ToolOrigin::BuiltIn
        } else {
            ToolOrigin::Code
        }
    }

    /// Declares where the tool comes from (see [`ToolDefinition::origin`]).
    pub(crate) fn with_origin(mut self, origin: ToolOrigin) -> Self {
        Arc::make_mut(&mut self.inner).origin = Some(origin);
        self
    }

    /// A tool from an implementation and a JSON Schema for its input object.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
        tool: Arc<dyn Tool>,
    ) -> Result<Self> {
        let name = name.into();
        if let Err(reason) = crate::util::check_name(&name) {
            return Err(FlueError::InvalidTool {
                name,
                message: format!("name {reason}"),
            });
        }
        if input_schema.get("type").and_then(Value::as_str) != Some("object") {
            return Err(FlueError::InvalidTool {
                name,
                message: "the input schema must describe an object (\"type\": \"object\")".into(),
            });
        }
        let input_validator = compile_schema(&name, &input_schema)?;
        Ok(Self::from_checked(
            name,
            description.into(),
            input_schema,
            input_validator,
            tool,
        ))
    }

    /// A tool from parts already checked: a valid name and an object input schema compiled
    /// into `input_validator` (an action's, see `ActionDefinition::into_tool`).
    pub(crate) fn from_checked(
        name: String,
        description: String,
        input_schema: Value,
        input_validator: Arc<jsonschema::Validator>,
        tool: Arc<dyn Tool>,
    ) -> Self {
        Self {
            inner: Arc::new(ToolInner {
                name,
                description,
                input_schema,
                output_schema: None,
                input_validator,
                output_validator: None,
                meta: ToolMeta::default(),
                external: false,
                validates_itself: false,
                origin: None,
                tool,
            }),
        }
    }

    /// A tool whose input schema is derived from `I` and whose body is an async closure.
    pub fn from_fn<I, F, Fut>(
        name: impl Into<String>,
        description: impl Into<String>,
        run: F,
    ) -> Result<Self>
    where
        I: JsonSchema + DeserializeOwned + Send + 'static,
        F: Fn(I, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<Value, ToolError>> + Send + 'static,
    {
        let schema = serde_json::to_value(schemars::schema_for!(I)).map_err(|err| {
            FlueError::InvalidTool {
                name: "?".into(),
                message: err.to_string(),
            }
        })?;
        let tool = FnTool {
            run,
            _input: std::marker::PhantomData::<fn(I)>,
        };
        Self::new(name, description, schema, Arc::new(tool))
    }

    /// Adds an output schema; results that do not match it become tool errors.
    pub fn with_output_schema(mut self, output_schema: Value) -> Result<Self> {
        let validator = compile_schema(&self.inner.name, &output_schema)?;
        let inner = Arc::make_mut(&mut self.inner);
        inner.output_schema = Some(output_schema);
        inner.output_validator = Some(validator);
        Ok(self)
    }

    /// Sets the runtime metadata.
    #[must_use]
    pub fn with_meta(mut self, meta: ToolMeta) -> Self {
        Arc::make_mut(&mut self.inner).meta = meta;
        self
    }

    /// The tool name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The description shown to the model.
    pub fn description(&self) -> &str {
        &self.inner.description
    }

    /// The input JSON Schema.
    pub fn input_schema(&self) -> &Value {
        &self.inner.input_schema
    }

    /// The output JSON Schema, when declared.
    pub fn output_schema(&self) -> Option<&Value> {
        self.inner.output_schema.as_ref()
    }

    /// The runtime metadata.
    pub fn meta(&self) -> ToolMeta {
        self.inner.meta
    }

    /// Whether `a` and `b` are the very same definition (clones of one another).
    pub(crate) fn same(a: &Self, b: &Self) -> bool {
        Arc::ptr_eq(&a.inner, &b.inner)
    }

    /// The tool as the model sees it.
    pub fn schema(&self) -> ToolSchema {
        ToolSchema {
            name: self.inner.name.clone(),
            description: self.inner.description.clone(),
            input_schema: self.inner.input_schema.clone(),
        }
    }

    /// Validates `input`, runs the tool and validates its output.
    pub async fn call(
        &self,
        input: Value,
        ctx: &ToolContext,
    ) -> std::result::Result<Value, ToolError> {
        let input_problems = if self.inner.validates_itself {
            Vec::new()
        } else {
            describe_errors(&self.inner.input_validator, &input)
        };
        if !input_problems.is_empty() {
            let error = ToolError::invalid_input(format!(
                "invalid input for {}: {}. Fix the arguments to match the tool's schema and retry.",
                self.inner.name,
                input_problems.join("; ")
            ));
            // The built-in tools promise a suggested action with every error.
            return Err(match self.inner.meta.ownership {
                Ownership::Managed => error.with_suggested_action(FIX_ARGUMENTS),
                Ownership::Mcp | Ownership::Custom => error,
            });
        }
        let output = self.inner.tool.run(input, ctx).await?;
        if let Some(validator) = &self.inner.output_validator {
            let problems = describe_errors(validator, &output);
            if !problems.is_empty() {
                return Err(ToolError::new(
                    "invalid_output",
                    format!(
                        "{} returned invalid output: {}",
                        self.inner.name,
                        problems.join("; ")
                    ),
                ));
            }
        }
        Ok(output)
    }
}

/// The tools of one operation, by name, with collisions rejected.
#[derive(Clone, Debug, Default)]
pub struct ToolSet {
    tools: BTreeMap<String, ToolDefinition>,
    order: Vec<String>,
}

impl ToolSet {
    /// Assembles tools in order; a repeated name is a [`FlueError::ToolNameCollision`].
    pub fn assemble(tools: impl IntoIterator<Item = ToolDefinition>) -> Result<Self> {
        let mut set = Self::default();
        for tool in tools {
            let name = tool.name().to_owned();
            if set.tools.contains_key(&name) {
                return Err(FlueError::ToolNameCollision { name });
            }
            set.order.push(name.clone());
            set.tools.insert(name, tool);
        }
        Ok(set)
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&ToolDefinition> {
        self.tools.get(name)
    }

    /// The tools as the model sees them, in assembly order.
    pub fn schemas(&self) -> Vec<ToolSchema> {
        self.order
            .iter()
            .filter_map(|name| self.tools.get(name))
            .map(ToolDefinition::schema)
            .collect()
    }

    /// Tool names in assembly order.
    pub fn names(&self) -> &[String] {
        &self.order
    }

    /// True when there are no tools.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

/// Renders a tool's JSON output as the text the model sees.
pub fn render_output(output: &Value) -> String {
    match output {
        Value::String(text) => text.clone(),
        Value::Null => "null".to_owned(),
        other => other.to_string(),
    }
}

struct FnTool<F, I> {
    run: F,
    _input: std::marker::PhantomData<fn(I)>,
}

impl<I, F, Fut> Tool for FnTool<F, I>
where
    I: DeserializeOwned + Send + 'static,
    F: Fn(I, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = std::result::Result<Value, ToolError>> + Send + 'static,
{
    fn run<'a>(
        &'a self,
        input: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, std::result::Result<Value, ToolError>> {
        Box::pin(async move {
            let typed: I = serde_json::from_value(input)
                .map_err(|err| ToolError::invalid_input(err.to_string()))?;
            (self.run)(typed, ctx.clone()).await
        })
    }
}

/// The implementation of a custom tool: its calls never reach it (the loop pauses on them),
/// but a direct [`ToolDefinition::call`] gets a clear error.
struct ExternalTool;

impl Tool for ExternalTool {
    fn run<'a>(
        &'a self,
        _input: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, std::result::Result<Value, ToolError>> {
        Box::pin(async {
            Err(ToolError::new(
                "custom_tool",
                "this custom tool is fulfilled by the application, not run by the runtime",
            ))
        })
    }
}

/// Checks that `schema` is a JSON Schema the runtime can validate with (a result schema, a
/// tool's output schema); the error says why not.
pub fn check_schema(schema: &Value) -> std::result::Result<(), String> {
    if !schema.is_object() && !schema.is_boolean() {
        return Err(format!(
            "a JSON Schema must be an object (like {{\"type\": \"object\"}}), got {}",
            match schema {
                Value::Null => "null",
                Value::String(_) => "a string",
                Value::Number(_) => "a number",
                Value::Array(_) => "a list",
                _ => "something else",
            }
        ));
    }
    jsonschema::validator_for(schema)
        .map(|_| ())
        .map_err(|err| format!("invalid JSON Schema: {err}"))
}

/// The problems of `value` against `schema` (at most 8, each with its JSON pointer), or the
/// schema's own problem.
pub fn schema_problems(schema: &Value, value: &Value) -> std::result::Result<Vec<String>, String> {
    let validator =
        jsonschema::validator_for(schema).map_err(|err| format!("invalid JSON Schema: {err}"))?;
    Ok(describe_errors(&validator, value))
}

pub(crate) fn compile_schema(name: &str, schema: &Value) -> Result<Arc<jsonschema::Validator>> {
    jsonschema::validator_for(schema)
        .map(Arc::new)
        .map_err(|err| FlueError::InvalidTool {
            name: name.to_owned(),
            message: format!("invalid JSON Schema: {err}"),
        })
}

pub(crate) fn describe_errors(validator: &jsonschema::Validator, value: &Value) -> Vec<String> {
    validator
        .iter_errors(value)
        .take(8)
        .map(|err| {
            let path = err.instance_path().to_string();
            if path.is_empty() {
                err.to_string()
            } else {
                format!("{path}: {err}")
            }
        })
        .collect()
}
