//! Actions: reusable finite behaviour written in Rust and offered to the model as a
//! framework-managed tool (the seed's `AgentProfile.actions`).
//!
//! An [`ActionDefinition`] has a name, a description, an input schema (an object), an optional
//! output schema and an async run function. When the model calls it, the runtime validates the
//! input (`action_input_validation`), opens an isolated child scope of the calling harness and
//! runs the function with an [`ActionContext`]: that scope's [`Harness`], the validated input,
//! the tool logger and `emit_data`. The function's output is serialized
//! (`action_output_serialization`), checked against the output schema
//! (`action_output_validation`) and returned to the model as the tool result.
//!
//! The child scope shares the configuration, sandbox, store, providers, roles, secrets and
//! permission rules of its caller, but every session it opens is stored under the prefix
//! `action:<invocation>:`, so no name reaches the caller's sessions. Not to be confused with
//! *pending actions* (`PendingAction`, `Session::actions`, `submission/actions.rs`): those are
//! tool calls paused for a decision; these are tools.

use std::future::Future;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::config::{AgentConfig, AgentProfile};
use crate::error::{FlueError, Result};
use crate::harness::Harness;
use crate::shared::Caller;
use crate::tool::{
    Effects, FlueLogger, Ownership, Permission, Tool, ToolContext, ToolDefinition, ToolError,
    ToolMeta, compile_schema, describe_errors,
};
use crate::util::BoxFuture;

/// How many action scopes may nest (an action whose session calls an action, ...).
pub const MAX_ACTION_DEPTH: u32 = 4;

/// A reusable action the model can call like a tool.
///
/// The run function gets the validated input (deserialized into `I`) and an
/// [`ActionContext`]; it returns any `Serialize` value or a [`ToolError`] (a
/// [`FlueError`] converts with `?`). Its default permission is `always_allow`, like every tool
/// built in code; the agent's permission rules apply to it by name like to any other tool.
///
/// ```
/// use flue_core::{ActionDefinition, AgentConfig, PromptOptions};
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Summarize {
///     /// The text to summarize.
///     text: String,
/// }
///
/// let summarize = ActionDefinition::from_fn(
///     "summarize",
///     "Summarizes a text in one sentence in a session of its own.",
///     |input: Summarize, ctx| async move {
///         let session = ctx.harness().session("summary").await?;
///         let reply = session
///             .prompt(&format!("Summarize: {}", input.text), PromptOptions::default())
///             .await?;
///         Ok(serde_json::json!({ "summary": reply.text }))
///     },
/// )
/// .unwrap();
/// let agent = AgentConfig::new().with_action(summarize);
/// assert_eq!(agent.resolve().unwrap().actions[0].name(), "summarize");
/// ```
#[derive(Clone)]
pub struct ActionDefinition {
    inner: Arc<ActionInner>,
}

#[derive(Clone)]
struct ActionInner {
    name: String,
    description: String,
    input_schema: Value,
    output_schema: Option<Value>,
    input_validator: Arc<jsonschema::Validator>,
    output_validator: Option<Arc<jsonschema::Validator>>,
    meta: ToolMeta,
    run: Arc<dyn ErasedRun>,
}

impl std::fmt::Debug for ActionDefinition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActionDefinition")
            .field("name", &self.inner.name)
            .finish_non_exhaustive()
    }
}

impl ActionDefinition {
    /// An action with an explicit JSON Schema for its input object; `run` gets the input
    /// deserialized into `I`. A bad name or a schema that is not an object fails with
    /// [`FlueError::InvalidTool`].
    pub fn new<I, O, F, Fut>(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
        run: F,
    ) -> Result<Self>
    where
        I: DeserializeOwned + Send + 'static,
        O: Serialize + Send + 'static,
        F: Fn(I, ActionContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<O, ToolError>> + Send + 'static,
    {
        let name = name.into();
        if let Err(reason) = crate::util::check_name(&name) {
            return Err(FlueError::InvalidTool {
                name,
                message: format!("action name {reason}"),
            });
        }
        if input_schema.get("type").and_then(Value::as_str) != Some("object") {
            return Err(FlueError::InvalidTool {
                name,
                message: "an action's input schema must describe an object (\"type\": \"object\")"
                    .into(),
            });
        }
        let input_validator = compile_schema(&name, &input_schema)?;
        Ok(Self {
            inner: Arc::new(ActionInner {
                name,
                description: description.into(),
                input_schema,
                output_schema: None,
                input_validator,
                output_validator: None,
                meta: ToolMeta {
                    ownership: Ownership::Managed,
                    permission: Permission::AlwaysAllow,
                    // It calls models; what else it touches depends on its sessions.
                    effects: Effects::NETWORK,
                    ..ToolMeta::default()
                },
                run: Arc::new(TypedRun {
                    run,
                    _types: std::marker::PhantomData::<fn(I) -> O>,
                }),
            }),
        })
    }

    /// An action whose input schema is derived from `I`.
    pub fn from_fn<I, O, F, Fut>(
        name: impl Into<String>,
        description: impl Into<String>,
        run: F,
    ) -> Result<Self>
    where
        I: JsonSchema + DeserializeOwned + Send + 'static,
        O: Serialize + Send + 'static,
        F: Fn(I, ActionContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<O, ToolError>> + Send + 'static,
    {
        let name = name.into();
        let schema = serde_json::to_value(schemars::schema_for!(I)).map_err(|err| {
            FlueError::InvalidTool {
                name: name.clone(),
                message: format!("cannot derive the input schema: {err}"),
            }
        })?;
        Self::new(name, description, schema, run)
    }

    /// Declares the output schema: output that does not match it fails the call with
    /// `action_output_validation`. An invalid schema fails with [`FlueError::InvalidTool`].
    pub fn with_output_schema(mut self, output_schema: Value) -> Result<Self> {
        let validator = compile_schema(&self.inner.name, &output_schema)?;
        let inner = Arc::make_mut(&mut self.inner);
        inner.output_schema = Some(output_schema);
        inner.output_validator = Some(validator);
        Ok(self)
    }

    /// Sets the runtime metadata the model's calls are judged by (permission, read-only,
    /// destructive, effects, interrupt behaviour); the ownership stays `managed`.
    #[must_use]
    pub fn with_meta(mut self, meta: ToolMeta) -> Self {
        Arc::make_mut(&mut self.inner).meta = ToolMeta {
            ownership: Ownership::Managed,
            ..meta
        };
        self
    }

    /// The action's name (the tool name the model calls).
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

    /// The tool the model sees and calls. The name and input schema were checked when the
    /// action was made.
    pub(crate) fn into_tool(self) -> ToolDefinition {
        let meta = self.inner.meta;
        ToolDefinition::from_checked(
            self.inner.name.clone(),
            self.inner.description.clone(),
            self.inner.input_schema.clone(),
            Arc::clone(&self.inner.input_validator),
            Arc::new(ActionTool { action: self }),
        )
        .with_meta(meta)
        .validated_by_implementation()
    }

    /// Validates the input, runs the action in a child scope of the calling harness and checks
    /// its output.
    async fn invoke(
        &self,
        input: Value,
        tool_ctx: &ToolContext,
    ) -> std::result::Result<Value, ToolError> {
        let action = &self.inner.name;
        let issues = describe_errors(&self.inner.input_validator, &input);
        if !issues.is_empty() {
            return Err(FlueError::ActionInputValidation {
                action: action.clone(),
                issues,
            }
            .into());
        }
        let Some(Caller {
            harness: parent,
            scope,
        }) = tool_ctx.extension::<Caller>()
        else {
            return Err(ToolError::new(
                "action_outside_session",
                format!("action {action:?} runs only as a tool call of a session"),
            ));
        };
        if parent.action_depth >= MAX_ACTION_DEPTH {
            return Err(FlueError::ActionDepthExceeded {
                action: action.clone(),
                max: MAX_ACTION_DEPTH,
            }
            .into());
        }
        // Everything the scope started stops when the action returns (or its call is aborted).
        let scope_cancel = tool_ctx.cancel.child_token();
        let _stop_scope = scope_cancel.clone().drop_guard();
        let harness = Harness::from_shared(Arc::new(
            parent.action_scope(Arc::clone(scope), scope_cancel.clone()),
        ));
        let ctx = ActionContext {
            harness,
            logger: tool_ctx.logger(),
            tool: tool_ctx.clone(),
            cancel: scope_cancel,
        };
        let output = match self.inner.run.run(input, ctx).await? {
            RunOutput::Output(output) => output,
            RunOutput::BadInput(message) => {
                return Err(FlueError::ActionInputValidation {
                    action: action.clone(),
                    issues: vec![message],
                }
                .into());
            }
            RunOutput::NotSerializable(message) => {
                return Err(FlueError::ActionOutputSerialization {
                    action: action.clone(),
                    message,
                }
                .into());
            }
        };
        if let Some(validator) = &self.inner.output_validator {
            let issues = describe_errors(validator, &output);
            if !issues.is_empty() {
                return Err(FlueError::ActionOutputValidation {
                    action: action.clone(),
                    issues,
                }
                .into());
            }
        }
        Ok(output)
    }
}

impl AgentProfile {
    /// Adds an action (stored as the tool the model calls, in
    /// [`AgentProfile::actions`](AgentProfile::actions)).
    #[must_use]
    pub fn with_action(mut self, action: ActionDefinition) -> Self {
        self.actions.push(action.into_tool());
        self
    }
}

impl AgentConfig {
    /// Adds an action (stored as the tool the model calls, in
    /// [`AgentConfig::actions`](AgentConfig::actions)).
    #[must_use]
    pub fn with_action(mut self, action: ActionDefinition) -> Self {
        self.actions.push(action.into_tool());
        self
    }
}

/// What an action's run function gets besides its input.
pub struct ActionContext {
    harness: Harness,
    logger: FlueLogger,
    tool: ToolContext,
    cancel: CancellationToken,
}

impl std::fmt::Debug for ActionContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActionContext")
            .field("harness", &self.harness)
            .field("call_id", &self.tool.call_id)
            .finish_non_exhaustive()
    }
}

impl ActionContext {
    /// The action's own harness: the caller's configuration, sandbox and store, with sessions
    /// of its own. `session("default")` here is not the caller's `default`; the caller's
    /// sessions cannot be opened from it.
    pub fn harness(&self) -> &Harness {
        &self.harness
    }

    /// The tool logger of the call (`tracing` target `flue::tool`, with the instance, the
    /// calling session and the tool call id as fields).
    pub fn logger(&self) -> &FlueLogger {
        &self.logger
    }

    /// The calling conversation's state document (see [`ToolContext::state`]): read and
    /// changed like a tool's, stored with the batch of tool results the action's call belongs
    /// to. `None` when the caller is not a root session's tool call.
    pub fn state(&self) -> Option<&crate::tool::ToolState> {
        self.tool.state()
    }

    /// The calling tool call's idempotency key (see [`ToolContext::idempotency_key`]).
    pub fn idempotency_key(&self) -> &str {
        &self.tool.idempotency_key
    }

    /// Emits structured data for UI readers on the calling operation's stream, stored with
    /// the action's tool result, never shown to the model (see [`ToolContext::emit_data`]).
    pub fn emit_data(
        &self,
        name: &str,
        data: &impl Serialize,
    ) -> std::result::Result<(), ToolError> {
        self.tool.emit_data(name, data)
    }

    /// [`ActionContext::emit_data`] with an id, so a reader can replace an earlier part.
    pub fn emit_data_with_id(
        &self,
        name: &str,
        data: &impl Serialize,
        id: &str,
    ) -> std::result::Result<(), ToolError> {
        self.tool.emit_data_with_id(name, data, id)
    }

    /// Fires when the calling operation is aborted or the action returns; operations on the
    /// action's sessions are cancelled with it.
    pub fn cancel(&self) -> &CancellationToken {
        &self.cancel
    }

    /// The id of the tool call running the action.
    pub fn call_id(&self) -> &str {
        &self.tool.call_id
    }

    /// The session that called the action (its stored name).
    pub fn calling_session(&self) -> &str {
        &self.tool.session
    }
}

/// The tool an action is exposed as.
struct ActionTool {
    action: ActionDefinition,
}

impl Tool for ActionTool {
    fn run<'a>(
        &'a self,
        input: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, std::result::Result<Value, ToolError>> {
        Box::pin(self.action.invoke(input, ctx))
    }
}

/// The result of a run function, before the action's checks.
enum RunOutput {
    Output(Value),
    /// The input matched the schema but not the function's input type.
    BadInput(String),
    /// The output did not serialize to JSON.
    NotSerializable(String),
}

trait ErasedRun: Send + Sync {
    fn run(
        &self,
        input: Value,
        ctx: ActionContext,
    ) -> BoxFuture<'static, std::result::Result<RunOutput, ToolError>>;
}

struct TypedRun<F, I, O> {
    run: F,
    _types: std::marker::PhantomData<fn(I) -> O>,
}

impl<I, O, F, Fut> ErasedRun for TypedRun<F, I, O>
where
    I: DeserializeOwned + Send + 'static,
    O: Serialize + Send + 'static,
    F: Fn(I, ActionContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = std::result::Result<O, ToolError>> + Send + 'static,
{
    fn run(
        &self,
        input: Value,
        ctx: ActionContext,
    ) -> BoxFuture<'static, std::result::Result<RunOutput, ToolError>> {
        let typed: I = match serde_json::from_value(input) {
            Ok(typed) => typed,
            Err(err) => return Box::pin(async move { Ok(RunOutput::BadInput(err.to_string())) }),
        };
        let future = (self.run)(typed, ctx);
        Box::pin(async move {
            let output = future.await?;
            Ok(match serde_json::to_value(&output) {
                Ok(value) => RunOutput::Output(value),
                Err(err) => RunOutput::NotSerializable(err.to_string()),
            })
        })
    }
}
