//! Tasks: delegated work in detached child sessions, from code (`session.task`) or from the
//! model (the built-in `task` tool).
//!
//! A task creates the session `task:<parent>:<uuid>` in the same harness — same store, same
//! sandbox — with a fresh history, runs one model operation in it and returns the final answer.
//! Its depth (levels below the root session) is checked before the session is created: at most
//! [`MAX_TASK_DEPTH`]. With a named subagent the child runs as that profile: its instructions,
//! tools, skills and subagents only (omitted means none), with model, thinking and compaction
//! inherited from the parent unless the profile sets them. Without one it runs with the
//! parent's configuration in a fresh context. The child's cancellation token is a child of the
//! parent's, so aborting the parent aborts its tasks. The parent's event stream gets
//! [`Event::TaskStart`] and [`Event::TaskEnd`] for the task and for every task nested in it.
//!
//! Child sessions are linked to their parent by name: [`task_session_parent`] recovers the
//! parent from a child's name, and deleting a session deletes its task sessions.

use std::sync::{Arc, Mutex};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::agent_loop::{self, Delegation, Opening};
use crate::config::ThinkingLevel;
use crate::error::{FlueError, Result};
use crate::event::{Event, OperationKind, Outcome};
use crate::model::TurnSink;
use crate::operation::{OperationContext, PromptOptions, PromptResponse, redacted_info};
use crate::overlay::CallOverlay;
use crate::record::{Image, Usage, UserContent, UserMessage};
use crate::sandbox::normalize_path;
use crate::scope::AgentScope;
use crate::shared::{HarnessShared, SessionShared};
use crate::skill::SkillCatalog;
use crate::spans;
use crate::store::{SessionKey, SessionLog};
use crate::tool::{Ownership, ToolContext, ToolDefinition, ToolError, ToolMeta};
use crate::util::new_uuid;

/// How many levels below the root session tasks may nest: a root session's task is at depth
/// 1, and a task at depth 4 cannot delegate further.
pub const MAX_TASK_DEPTH: u32 = 4;

/// Name of the built-in tool through which the model delegates.
pub const TASK_TOOL: &str = "task";

/// Options of `session.task`. Builder-lite: start from `default()`.
#[derive(Clone, Debug, Default)]
pub struct TaskOptions {
    /// Named subagent profile to run the task as (one the agent declares).
    pub agent: Option<String>,
    /// JSON Schema of a structured result: the task then returns validated `data`.
    pub result: Option<Value>,
    /// Extra tools for the task.
    pub tools: Vec<ToolDefinition>,
    /// Model specifier override for the task.
    pub model: Option<String>,
    /// Reasoning effort override for the task.
    pub thinking: Option<ThinkingLevel>,
    /// Working directory of the task inside the sandbox (default: the parent's).
    pub cwd: Option<String>,
    /// Role for the task's call (default: the subagent's own default role).
    pub role: Option<String>,
    /// Images attached to the task's first user message.
    pub images: Vec<Image>,
    /// An outside cancellation signal, merged with the handle's own.
    pub cancel: Option<CancellationToken>,
}

impl TaskOptions {
    /// Runs the task as the subagent `agent`.
    #[must_use]
    pub fn with_agent(mut self, agent: impl Into<String>) -> Self {
        self.agent = Some(agent.into());
        self
    }

    /// Requires a structured result matching `schema`.
    #[must_use]
    pub fn with_result(mut self, schema: Value) -> Self {
        self.result = Some(schema);
        self
    }

    /// Adds a tool for the task.
    #[must_use]
    pub fn with_tool(mut self, tool: ToolDefinition) -> Self {
        self.tools.push(tool);
        self
    }

    /// Sets the model override.
    #[must_use]
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Sets the thinking level override.
    #[must_use]
    pub fn with_thinking(mut self, thinking: ThinkingLevel) -> Self {
        self.thinking = Some(thinking);
        self
    }

    /// Sets the task's working directory.
    #[must_use]
    pub fn with_cwd(mut self, cwd: impl Into<String>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }

    /// Runs the task's call in `role`.
    #[must_use]
    pub fn with_role(mut self, role: impl Into<String>) -> Self {
        self.role = Some(role.into());
        self
    }

    /// Attaches an image.
    #[must_use]
    pub fn with_image(mut self, image: Image) -> Self {
        self.images.push(image);
        self
    }

    /// Merges an outside cancellation signal.
    #[must_use]
    pub fn with_cancel(mut self, cancel: CancellationToken) -> Self {
        self.cancel = Some(cancel);
        self
    }
}

/// The parent of a task session, read from its name (`task:<parent>:<uuid>`); `None` for a
/// session that is not a task.
///
/// ```
/// let child = "task:default:0b0e6b4c-3c1e-4d5e-9f1a-2b3c4d5e6f70";
/// assert_eq!(flue_core::task_session_parent(child), Some("default"));
/// let grandchild = format!("task:{child}:1c1e6b4c-3c1e-4d5e-9f1a-2b3c4d5e6f71");
/// assert_eq!(flue_core::task_session_parent(&grandchild), Some(child));
/// assert_eq!(flue_core::task_session_parent("default"), None);
/// ```
pub fn task_session_parent(name: &str) -> Option<&str> {
    let rest = name.strip_prefix(TASK_SESSION_PREFIX)?;
    let (parent, id) = rest.rsplit_once(':')?;
    let is_uuid = id.len() == 36 && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    (is_uuid && !parent.is_empty()).then_some(parent)
}

/// Prefix of framework-owned task session names.
pub const TASK_SESSION_PREFIX: &str = "task:";

/// Deletes every task session below `session` (its tasks, their tasks, ...).
pub(crate) async fn delete_task_sessions(harness: &HarnessShared, session: &str) -> Result<()> {
    let sessions = harness.store.list(&harness.instance_id).await?;
    for summary in sessions {
        if is_task_of(&summary.session, session) {
            let key = SessionKey::new(harness.instance_id.clone(), summary.session);
            harness.store.delete(&key).await?;
        }
    }
    Ok(())
}

/// Whether `name` is a task session below `ancestor`.
fn is_task_of(name: &str, ancestor: &str) -> bool {
    let mut current = name;
    while let Some(parent) = task_session_parent(current) {
        if parent == ancestor {
            return true;
        }
        current = parent;
    }
    false
}

/// Runs a model operation on `shared` through the agent loop, giving the model the `task` tool
/// when the session's agent declares subagents. Every model operation (`prompt`, `skill`, a
/// submission, a task's own) starts here, so delegation nests to any depth the limit allows.
pub(crate) async fn run_agent(
    shared: Arc<SessionShared>,
    opening: Opening,
    options: PromptOptions,
    overlay: CallOverlay,
    ctx: OperationContext,
) -> Result<(PromptResponse, Usage)> {
    let delegation = if shared.scope.subagents.is_empty() {
        None
    } else {
        let inherited = Inherited {
            model: Some(agent_loop::call_model(&options, &overlay, &shared.scope)?),
            thinking: agent_loop::call_thinking(&options, &overlay, &shared.scope),
        };
        let usage = Arc::new(Mutex::new(Usage::default()));
        let tool = task_tool(&shared, inherited, &ctx.sink, &usage)?;
        Some(Delegation { tool, usage })
    };
    agent_loop::run(shared, opening, options, overlay, ctx, delegation).await
}

/// What a task inherits from the call that starts it.
#[derive(Clone, Debug)]
pub(crate) struct Inherited {
    /// The parent's model, the default of a child that sets none.
    pub(crate) model: Option<String>,
    /// The parent's thinking level, likewise.
    pub(crate) thinking: ThinkingLevel,
}

impl Inherited {
    /// The defaults of `scope` (for `session.task`, which runs outside any model call).
    pub(crate) fn from_scope(scope: &AgentScope) -> Self {
        Self {
            model: scope.model.clone(),
            thinking: scope.thinking,
        }
    }
}

/// A finished task: the child session's name and the answer.
pub(crate) struct TaskOutcome {
    pub(crate) session: String,
    pub(crate) response: PromptResponse,
    pub(crate) usage: Usage,
}

/// Runs one task of `parent`: checks the subagent and the depth, creates the child session,
/// runs the model operation in it and reports start and end on `sink`.
pub(crate) async fn run_task(
    parent: &Arc<SessionShared>,
    text: &str,
    options: TaskOptions,
    inherited: &Inherited,
    cancel: &CancellationToken,
    sink: &TurnSink,
) -> Result<TaskOutcome> {
    let harness = Arc::clone(&parent.harness);
    let cwd = match &options.cwd {
        Some(cwd) => normalize_path(&parent.scope.cwd, cwd)?,
        None => parent.scope.cwd.clone(),
    };
    let scope = child_scope(&parent.scope, options.agent.as_deref(), inherited, cwd)?;
    let depth = parent.depth + 1;
    if depth > MAX_TASK_DEPTH {
        return Err(FlueError::DelegationDepthExceeded {
            depth,
            max: MAX_TASK_DEPTH,
        });
    }
    let role = options.role.clone().or_else(|| scope.role.clone());
    let overlay = CallOverlay::resolve(&harness.roles, role, None)?;

    let name = format!("{TASK_SESSION_PREFIX}{}:{}", parent.key.session, new_uuid());
    let key = SessionKey::new(harness.instance_id.clone(), name.clone());
    harness.store.create(&key).await?;
    let child = Arc::new(SessionShared::new_task(
        Arc::clone(&harness),
        key,
        empty_log(),
        Arc::new(scope),
        depth,
    ));
    let _guard = child.begin()?;

    let agent = options.agent.clone();
    sink.send(Event::TaskStart {
        session: name.clone(),
        parent: parent.key.session.clone(),
        agent: agent.clone(),
        depth,
    });
    let (child_sink, forwarder) = forward_task_events(sink);
    let mut content = vec![UserContent::Text {
        text: text.to_owned(),
    }];
    content.extend(options.images.iter().cloned().map(UserContent::Image));
    // Images are already in the message; cancellation comes from the parent's token.
    let prompt_options = PromptOptions {
        model: options.model,
        thinking: options.thinking,
        tools: options.tools,
        result: options.result,
        role: options.role,
        ..PromptOptions::default()
    };
    let ctx = OperationContext {
        cancel: cancel.child_token(),
        sink: child_sink,
    };
    let span = spans::operation(
        OperationKind::Task,
        agent.as_deref().unwrap_or(&harness.agent.name),
        &harness.instance_id,
        &name,
        depth,
    );
    let result = run_agent(
        Arc::clone(&child),
        Opening::message(Some(UserMessage { content })),
        prompt_options,
        overlay,
        ctx,
    )
    .instrument(span.clone())
    .await;
    // The child's sink is gone with its context: let the forwarder drain nested task events
    // before this task's own end.
    let _ = forwarder.await;
    let (outcome, usage, error) = match &result {
        Ok((_, usage)) => (Outcome::Completed, *usage, None),
        Err(FlueError::Aborted) => (Outcome::Aborted, Usage::default(), None),
        Err(err) => (
            Outcome::Failed,
            Usage::default(),
            Some(redacted_info(&harness.redactor, err)),
        ),
    };
    spans::record_usage(&span, &usage);
    spans::record_outcome(
        &span,
        outcome,
        error.as_ref().map(|info| info.kind.as_str()),
    );
    drop(span);
    sink.send(Event::TaskEnd {
        session: name.clone(),
        agent,
        depth,
        outcome,
        usage,
        error,
    });
    let (response, usage) = result?;
    Ok(TaskOutcome {
        session: name,
        response,
        usage,
    })
}

/// The scope of a child of `parent`: the subagent `agent`'s, or the parent's own.
fn child_scope(
    parent: &AgentScope,
    agent: Option<&str>,
    inherited: &Inherited,
    cwd: String,
) -> Result<AgentScope> {
    let Some(agent) = agent else {
        return Ok(AgentScope {
            model: inherited.model.clone(),
            thinking: inherited.thinking,
            cwd,
            ..parent.clone()
        });
    };
    let profile = parent
        .subagents
        .iter()
        .find(|profile| profile.name.as_deref() == Some(agent))
        .ok_or_else(|| FlueError::SubagentNotDeclared {
            agent: agent.to_owned(),
            declared: parent.subagent_names(),
        })?;
    Ok(AgentScope {
        instructions: profile.instructions.clone().unwrap_or_default(),
        model: profile.model.clone().or_else(|| inherited.model.clone()),
        thinking: profile.thinking.unwrap_or(inherited.thinking),
        compaction: profile
            .compaction
            .clone()
            .unwrap_or_else(|| parent.compaction.clone()),
        tools: profile.tools.clone(),
        skills: SkillCatalog::new(profile.skills.iter().cloned())?,
        subagents: profile.subagents.clone(),
        max_turns: parent.max_turns,
        cwd,
        role: profile.role.clone(),
    })
}

fn empty_log() -> SessionLog {
    SessionLog {
        version: 0,
        records: Vec::new(),
        created_at: 0,
        updated_at: 0,
    }
}

/// A sink for a child operation that passes its task events (and only those) on to `parent`,
/// and the forwarding task, which ends once the child's sink is dropped.
fn forward_task_events(parent: &TurnSink) -> (TurnSink, tokio::task::JoinHandle<()>) {
    let (events_tx, mut events_rx) = mpsc::unbounded_channel();
    let parent = parent.clone();
    let forwarder = tokio::spawn(async move {
        while let Some(event) = events_rx.recv().await {
            if matches!(event, Event::TaskStart { .. } | Event::TaskEnd { .. }) {
                parent.send(event);
            }
        }
    });
    (TurnSink::new(events_tx), forwarder)
}

/// Input of the `task` tool.
#[derive(Debug, Deserialize, JsonSchema)]
struct TaskInput {
    /// The work to do, as a complete instruction: the task starts from an empty conversation
    /// and sees nothing of this one.
    prompt: String,
    /// The subagent to delegate to, one of those listed in the description; omit it to
    /// delegate to a fresh copy of yourself.
    agent: Option<String>,
    /// A role for the task to act in (optional).
    role: Option<String>,
}

/// The `task` tool of one call on `parent`. Usage of the tasks it runs is added to `usage`.
pub(crate) fn task_tool(
    parent: &Arc<SessionShared>,
    inherited: Inherited,
    sink: &TurnSink,
    usage: &Arc<Mutex<Usage>>,
) -> Result<ToolDefinition> {
    let description = task_tool_description(&parent.scope, &parent.harness);
    let parent = Arc::clone(parent);
    let sink = sink.clone();
    let usage = Arc::clone(usage);
    let tool = ToolDefinition::from_fn(
        TASK_TOOL,
        description,
        move |input: TaskInput, ctx: ToolContext| {
            let parent = Arc::clone(&parent);
            let inherited = inherited.clone();
            let sink = sink.clone();
            let usage = Arc::clone(&usage);
            async move {
                let agent = input.agent.clone();
                let options = TaskOptions {
                    agent: input.agent,
                    role: input.role,
                    ..TaskOptions::default()
                };
                let outcome = run_task(
                    &parent,
                    &input.prompt,
                    options,
                    &inherited,
                    &ctx.cancel,
                    &sink,
                )
                .await
                .map_err(ToolError::from)?;
                if let Ok(mut total) = usage.lock() {
                    *total += outcome.usage;
                }
                Ok(json!({
                    "session": outcome.session,
                    "agent": agent,
                    "text": outcome.response.text,
                }))
            }
        },
    )?;
    Ok(tool.with_meta(ToolMeta {
        ownership: Ownership::Managed,
        ..ToolMeta::default()
    }))
}

/// The `task` tool as the model of a session with `scope` sees it (for listings; the tool
/// itself is built per call by [`task_tool`]).
pub(crate) fn task_tool_schema(
    scope: &AgentScope,
    harness: &HarnessShared,
) -> Result<crate::model::ToolSchema> {
    let input_schema = serde_json::to_value(schemars::schema_for!(TaskInput)).map_err(|err| {
        FlueError::InvalidTool {
            name: TASK_TOOL.into(),
            message: err.to_string(),
        }
    })?;
    Ok(crate::model::ToolSchema {
        name: TASK_TOOL.to_owned(),
        description: task_tool_description(scope, harness),
        input_schema,
    })
}

fn task_tool_description(scope: &AgentScope, harness: &HarnessShared) -> String {
    let mut text = String::from(
        "Delegate a self-contained piece of work to a subagent. It runs in a fresh conversation \
         (it does not see this one) in the same workspace, and its final answer comes back as \
         this tool's result, with the name of the session holding its transcript. Write \
         `prompt` as a complete instruction.",
    );
    if scope.subagents.is_empty() {
        text.push_str(
            "\n\nNo subagents are declared: omit `agent` to delegate to a fresh copy of yourself.",
        );
    } else {
        text.push_str("\n\nSubagents (`agent`):");
        for profile in &scope.subagents {
            let name = profile.name.as_deref().unwrap_or_default();
            match profile.description.as_deref() {
                Some(description) => text.push_str(&format!("\n- {name}: {description}")),
                None => text.push_str(&format!("\n- {name}")),
            }
        }
        text.push_str("\nOmit `agent` to delegate to a fresh copy of yourself.");
    }
    let roles: Vec<String> = harness
        .roles
        .iter()
        .map(|role| format!("\n- {}: {}", role.name, role.description))
        .collect();
    if !roles.is_empty() {
        text.push_str("\n\nRoles (`role`, optional):");
        text.push_str(&roles.concat());
    }
    text
}

#[cfg(test)]
mod tests;
