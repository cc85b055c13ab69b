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
//! A task started by a `task` call survives a crash: the call is replay-safe, and its task
//! session is named after the call's idempotency key, so the call run again on recovery finds
//! its session and continues it from its own log (cut-off calls there answered or run again
//! by the same rules as a root conversation's), and the parent gets the task's real answer.
//! The same holds at every depth, and for every call of a parallel batch.
//!
//! Child sessions are linked to their parent by name: [`task_session_parent`](flue_protocol::task_session_parent) recovers the
//! parent from a child's name, and deleting a session deletes its task sessions.
//!
//! A task the model started can pause: its pending action stays in its own log, the parent's
//! `task` call waits as an [`ActionKind::Task`] action naming the child, decisions made
//! through the root are routed to the child's log, and the parent's loop resumes the child
//! from that log alone (see ARCHITECTURE.md, "Pauses inside tasks").

use std::sync::{Arc, Mutex};

use flue_protocol::event::{Event, OperationKind};
use flue_protocol::record::{
    ActionDecision, ActionInfo, ActionKind, ActionResolution, PendingAction, Record, StoredRecord,
    Usage,
};
use flue_protocol::{TASK_SESSION_PREFIX, ThinkingLevel, task_session_parent};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::agent_loop::{self, Delegation, Opening, ResumeTask, TASK_PAUSED, TaskResumed};
use crate::error::{FlueError, Result};
use crate::model::TurnSink;
use crate::operation::{
    OperationContext, PromptOptions, PromptResponse, TaskExtra, TaskOptions, settle, user_message,
};
use crate::overlay::CallOverlay;
use crate::sandbox::normalize_path;
use crate::scope::AgentScope;
use crate::shared::{HarnessShared, SessionShared};
use crate::skill::SkillCatalog;
use crate::spans;
use crate::steps;
use crate::store::{DynSessionStore, SessionKey, SessionLog};
use crate::tool::{Ownership, ToolContext, ToolDefinition, ToolError, ToolMeta};
use crate::util::{new_uuid, now_ms};

/// How many levels below the root session tasks may nest: a root session's task is at depth
/// 1, and a task at depth 4 cannot delegate further.
pub const MAX_TASK_DEPTH: u32 = 4;

/// Name of the built-in tool through which the model delegates.
pub const TASK_TOOL: &str = "task";

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
/// unless the session's agent withholds it (`task: false`). Every model operation (`prompt`, `skill`, a
/// submission, a task's own) starts here, so delegation nests to any depth the limit allows.
pub(crate) async fn run_agent(
    shared: Arc<SessionShared>,
    opening: Opening,
    options: PromptOptions,
    overlay: CallOverlay,
    ctx: OperationContext,
) -> Result<(PromptResponse, Usage)> {
    let opening = route_to_tasks(&shared, opening, &ctx).await?;
    let delegation = if !shared.scope.task_tool {
        None
    } else {
        let inherited = Inherited {
            model: Some(agent_loop::call_model(&options, &overlay, &shared.scope)?),
            thinking: agent_loop::call_thinking(&options, &overlay, &shared.scope),
        };
        let usage = Arc::new(Mutex::new(Usage::default()));
        let tool = task_tool(&shared, inherited.clone(), &ctx.sink, &usage)?;
        let resume = resume_tool(&shared, inherited, &ctx.sink, &usage);
        let background = match background_link(&shared) {
            Some(link) => crate::background::background_tools(Some(link))?,
            None => Vec::new(),
        };
        Some(Delegation {
            tool,
            usage,
            resume,
            background,
        })
    };
    let result = agent_loop::run(
        Arc::clone(&shared),
        opening,
        options,
        overlay,
        ctx,
        delegation,
    )
    .await;
    match result {
        // Name what the user decides: a waiting `task` call's subagent actions.
        Err(FlueError::ActionsPending { session, actions }) => {
            let list = {
                let state = shared.state.lock().await;
                steps::actions(&state.records)
            };
            let harness = &shared.harness;
            let named: Vec<String> =
                with_task_actions(harness.store.as_ref(), &harness.instance_id, list)
                    .await?
                    .into_iter()
                    .filter(|info| info.decision.is_none())
                    .map(|info| info.action.action_id)
                    .collect();
            Err(FlueError::ActionsPending {
                session,
                actions: if named.is_empty() { actions } else { named },
            })
        }
        other => other,
    }
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

/// Runs one task of `parent` in a new child session `task:<parent>:<uuid>`: checks the
/// subagent and the depth, creates the child session, runs the model operation in it and
/// reports start and end on `sink`.
pub(crate) async fn run_task(
    parent: &Arc<SessionShared>,
    text: &str,
    options: TaskOptions,
    inherited: &Inherited,
    cancel: &CancellationToken,
    sink: &TurnSink,
    pausable: bool,
) -> Result<TaskOutcome> {
    let spec = TaskSpec {
        session: format!("{TASK_SESSION_PREFIX}{}:{}", parent.key.session, new_uuid()),
        text,
        options,
        pausable,
        call_id: None,
    };
    match run_task_in(parent, spec, inherited, cancel, sink).await? {
        TaskRun::Finished(outcome) => Ok(*outcome),
        TaskRun::AbortedByUser { .. } => Err(FlueError::Aborted),
    }
}

/// How one task run ended.
enum TaskRun {
    /// It answered (or paused); boxed, the outcome is large.
    Finished(Box<TaskOutcome>),
    /// A user aborted it alone ([`crate::Harness::abort_task`]); its parent goes on.
    AbortedByUser { session: String },
}

/// Kind of the tool error a `task` call answers when a user aborted its task alone.
pub(crate) const TASK_ABORTED: &str = "task_aborted";

/// The `task` call's answer to the parent when a user aborted the task `session` alone.
fn aborted_by_user(session: &str) -> ToolError {
    ToolError::new(
        TASK_ABORTED,
        format!(
            "the task was aborted by the user; what it did so far is in session {session}. \
             Do not start it again unless the user asks."
        ),
    )
}

/// What one task runs: where, what and how.
struct TaskSpec<'a> {
    /// The child session's name.
    session: String,
    /// The task's prompt.
    text: &'a str,
    options: TaskOptions,
    /// Whether the child's calls may pause (a task run by a `task` call).
    pausable: bool,
    /// The parent's `task` call that runs it (none for `session.task`).
    call_id: Option<String>,
}

/// Runs one task of `parent` in the session `spec.session`. A session that already holds the
/// task's prompt (a `task` call run again after a crash) is continued from its log, as a
/// root conversation is after a crash: its cut-off calls are run again (replay-safe tools) or
/// answered `interrupted`, and its loop goes on from there. Otherwise the session is created
/// (when missing) and the prompt starts it.
async fn run_task_in(
    parent: &Arc<SessionShared>,
    spec: TaskSpec<'_>,
    inherited: &Inherited,
    cancel: &CancellationToken,
    sink: &TurnSink,
) -> Result<TaskRun> {
    let harness = Arc::clone(&parent.harness);
    let (prompt_options, TaskExtra { agent, cwd }) = spec.options.split();
    let cwd = match &cwd {
        Some(cwd) => normalize_path(&parent.scope.cwd, cwd)?,
        None => parent.scope.cwd.clone(),
    };
    let scope = child_scope(&parent.scope, agent.as_deref(), inherited, cwd)?;
    let depth = parent.depth + 1;
    if depth > MAX_TASK_DEPTH {
        return Err(FlueError::DelegationDepthExceeded {
            depth,
            max: MAX_TASK_DEPTH,
        });
    }
    let role = prompt_options.role.clone().or_else(|| scope.role.clone());
    let overlay = CallOverlay::resolve(&harness.roles, role, None)?;

    let name = spec.session;
    let key = SessionKey::new(harness.instance_id.clone(), name.clone());
    let started = open_task_session(harness.store.as_ref(), &key).await?;
    let child = Arc::new(SessionShared::new_task(
        Arc::clone(&harness),
        key,
        empty_log(),
        Arc::new(scope),
        depth,
    ));
    // Cancellation comes from the parent's token (`cancel`), not the options' own.
    let message = (!started).then(|| user_message(spec.text.to_owned(), &prompt_options.images));
    let opening = Opening {
        pausable_task: spec.pausable,
        ..Opening::message(message)
    };
    let run = ChildRun {
        parent,
        child,
        agent,
        call_id: spec.call_id,
        cancel,
        sink,
    };
    let Some((response, usage)) = run.run(opening, prompt_options, overlay).await? else {
        return Ok(TaskRun::AbortedByUser { session: name });
    };
    Ok(TaskRun::Finished(Box::new(TaskOutcome {
        session: name,
        response,
        usage,
    })))
}

/// Makes sure the task session `key` exists; whether its prompt already reached its log (the
/// task started before, and goes on from its log).
async fn open_task_session(store: &dyn DynSessionStore, key: &SessionKey) -> Result<bool> {
    if let Some(log) = store.load(key, 0).await? {
        return Ok(log
            .records
            .iter()
            .any(|stored| matches!(stored.record, Record::User(_))));
    }
    match store.create(key).await {
        // Another writer created it in between: it holds no prompt yet, or the load above
        // would have seen it.
        Ok(()) | Err(FlueError::SessionAlreadyExists { .. }) => Ok(false),
        Err(err) => Err(err),
    }
}

/// The task session a `task` call of `parent` with idempotency key `key` runs in: the same on
/// every attempt of the call (a call run again after a crash finds its task and continues it),
/// different for every other call. A call without a key (outside a session) gets a new one.
fn task_session_for_call(parent: &str, key: &str) -> String {
    if key.is_empty() {
        return format!("{TASK_SESSION_PREFIX}{parent}:{}", new_uuid());
    }
    let digest = Sha256::digest(key.as_bytes());
    let hex: String = digest[..16]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    format!(
        "{TASK_SESSION_PREFIX}{parent}:{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// One run of a task session: from a new message or resumed from its log.
struct ChildRun<'a> {
    parent: &'a SessionShared,
    child: Arc<SessionShared>,
    agent: Option<String>,
    call_id: Option<String>,
    cancel: &'a CancellationToken,
    sink: &'a TurnSink,
}

impl ChildRun<'_> {
    /// Runs the model operation in the child session and reports start and end on the
    /// parent's sink (a paused task ends with [`flue_protocol::event::Outcome::RequiresAction`]). `None` when
    /// a user aborted this task alone (its parent was not aborted).
    async fn run(
        self,
        opening: Opening,
        prompt_options: PromptOptions,
        overlay: CallOverlay,
    ) -> Result<Option<(PromptResponse, Usage)>> {
        let Self {
            parent,
            child,
            agent,
            call_id,
            cancel,
            sink,
        } = self;
        let _guard = child.begin()?;
        let name = child.key.session.clone();
        let depth = child.depth;
        let harness = Arc::clone(&child.harness);
        sink.send(Event::TaskStart {
            session: name.clone(),
            parent: parent.key.session.clone(),
            agent: agent.clone(),
            depth,
            call_id,
        });
        let (child_sink, forwarder) = forward_task_events(sink, &name, depth);
        let own_cancel = cancel.child_token();
        let registration =
            harness
                .running_tasks
                .register(&harness.instance_id, &name, own_cancel.clone());
        let ctx = OperationContext::new(own_cancel, child_sink);
        let failed_usage = std::sync::Arc::clone(&ctx.failed_usage);
        let span = spans::operation(
            OperationKind::Task,
            agent.as_deref().unwrap_or(&harness.agent.name),
            &harness.instance_id,
            &name,
            depth,
        );
        let result = run_agent(Arc::clone(&child), opening, prompt_options, overlay, ctx)
            .instrument(span.clone())
            .await;
        // The child's sink is gone with its context: let the forwarder drain nested task events
        // before this task's own end.
        let _ = forwarder.await;
        let failed_usage = *failed_usage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (outcome, usage, error) = settle(&result, failed_usage, &harness.redactor, &span);
        drop(span);
        sink.send(Event::TaskEnd {
            session: name.clone(),
            agent,
            depth,
            outcome,
            usage,
            error,
        });
        let registration_aborted = registration.aborted_by_user();
        drop(registration);
        match result {
            Err(FlueError::Aborted) if !cancel.is_cancelled() && registration_aborted => Ok(None),
            other => other.map(Some),
        }
    }
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
        model: if profile.model_per_call {
            profile.model.clone()
        } else {
            profile.model.clone().or_else(|| inherited.model.clone())
        },
        thinking: profile.thinking.unwrap_or(inherited.thinking),
        compaction: profile
            .compaction
            .clone()
            .unwrap_or_else(|| parent.compaction.clone()),
        tools: crate::scope::tools_and_actions(&profile.tools, &profile.actions),
        tool_sources: profile.tool_sources.clone(),
        skills: SkillCatalog::new(profile.skills.iter().cloned())?,
        subagents: profile.subagents.clone(),
        task_tool: profile.task_tool.unwrap_or(true),
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

/// A sink for a child operation that passes its events on to `parent` as they happen, and the
/// forwarding task, which ends once the child's sink is dropped. Task starts and ends, and the
/// activity of nested tasks (already labelled), pass as they are; the child's own activity is
/// wrapped in [`Event::TaskActivity`] labelled with `session` (the child) and `depth`.
fn forward_task_events(
    parent: &TurnSink,
    session: &str,
    depth: u32,
) -> (TurnSink, tokio::task::JoinHandle<()>) {
    let (events_tx, mut events_rx) = mpsc::unbounded_channel();
    let parent = parent.clone();
    let session = session.to_owned();
    let forwarder = tokio::spawn(async move {
        while let Some(event) = events_rx.recv().await {
            match event {
                // Pauses pass as they are: the root's reply lists a task's pending actions.
                Event::TaskStart { .. }
                | Event::TaskEnd { .. }
                | Event::TaskActivity { .. }
                | Event::ActionRequired { .. }
                | Event::CustomToolUse { .. }
                | Event::ActionResolved { .. } => {
                    parent.send(event);
                }
                Event::TextDelta { .. }
                | Event::ThinkingDelta { .. }
                | Event::ToolStart { .. }
                | Event::ToolEnd { .. }
                | Event::Data { .. }
                | Event::TurnEnd { .. }
                | Event::CompactionStart { .. }
                | Event::CompactionEnd { .. }
                | Event::ProviderRetry { .. } => parent.send(Event::TaskActivity {
                    session: session.clone(),
                    depth,
                    event: Box::new(event),
                }),
                // The task's own operation and submission lifecycle stay with the task.
                _ => {}
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
    /// Run it in the background: the call returns a `task_id` at once, the task's result
    /// arrives later as a `task_result` message, and `task_status`, `task_wait` and
    /// `task_cancel` follow it.
    #[serde(default)]
    background: bool,
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
                if input.background {
                    return start_background(&parent, input, &ctx).await;
                }
                let agent = input.agent.clone();
                let options = TaskOptions {
                    role: input.role,
                    extra: TaskExtra {
                        agent: input.agent,
                        cwd: None,
                    },
                    ..TaskOptions::default()
                };
                let spec = TaskSpec {
                    session: task_session_for_call(&parent.key.session, &ctx.idempotency_key),
                    text: &input.prompt,
                    options,
                    pausable: true,
                    call_id: (!ctx.call_id.is_empty()).then(|| ctx.call_id.clone()),
                };
                let run = run_task_in(&parent, spec, &inherited, &ctx.cancel, &sink)
                    .await
                    .map_err(ToolError::from)?;
                let outcome = match run {
                    TaskRun::Finished(outcome) => *outcome,
                    TaskRun::AbortedByUser { session } => return Err(aborted_by_user(&session)),
                };
                if let Ok(mut total) = usage.lock() {
                    *total += outcome.usage;
                }
                if !outcome.response.pending_actions.is_empty() {
                    // The loop holds this call as a waiting `task` action.
                    return Err(ToolError::new(TASK_PAUSED, outcome.session));
                }
                Ok(json!({
                    "session": outcome.session,
                    "agent": agent,
                    "text": outcome.response.text,
                }))
            }
        },
    )?;
    Ok(task_tool_meta(tool))
}

/// The runtime link through which a session starts background tasks: a conversation's root
/// session only (a task session's or an action's results would have no conversation of
/// their own to arrive in).
fn background_link(shared: &SessionShared) -> Option<&crate::background::BackgroundHandle> {
    let harness = &shared.harness;
    let root = shared.depth == 0 && harness.session_prefix.is_empty();
    root.then_some(harness.background.as_ref()).flatten()
}

/// The `task` tool's background flag: starts the task as its own conversation's submission
/// (named after the call's idempotency key, so a call run again after a crash finds it).
async fn start_background(
    parent: &SessionShared,
    input: TaskInput,
    ctx: &ToolContext,
) -> std::result::Result<serde_json::Value, ToolError> {
    let Some(link) = background_link(parent) else {
        return Err(ToolError::new(
            "background_unavailable",
            "background tasks start only from a conversation's own session served by the \
             runtime (flue serve, flue run); call `task` without `background`",
        ));
    };
    if let Some(agent) = &input.agent
        && !parent
            .scope
            .subagents
            .iter()
            .any(|profile| profile.name.as_deref() == Some(agent.as_str()))
    {
        return Err(ToolError::from(FlueError::SubagentNotDeclared {
            agent: agent.clone(),
            declared: parent.scope.subagent_names(),
        }));
    }
    let options = crate::background::BackgroundTaskOptions {
        agent: input.agent,
        role: input.role,
        idempotency_key: (!ctx.idempotency_key.is_empty()).then(|| ctx.idempotency_key.clone()),
    };
    link.start(input.prompt, options).await
}

fn task_tool_meta(tool: ToolDefinition) -> ToolDefinition {
    tool.with_meta(ToolMeta {
        ownership: Ownership::Managed,
        // A call cut off by a crash runs again with its key, which names its task session:
        // the task continues from its own log instead of starting over (see
        // `task_session_for_call`).
        replay_safe: true,
        ..ToolMeta::default()
    })
    .with_origin(crate::tool::ToolOrigin::Task)
}

/// The `task` tool as the model of a session with `scope` sees it, for listings: it never
/// runs (the tool itself is built per call by [`task_tool`], with this description and input).
pub(crate) fn listed_task_tool(
    scope: &AgentScope,
    harness: &HarnessShared,
) -> Result<ToolDefinition> {
    let tool = ToolDefinition::from_fn(
        TASK_TOOL,
        task_tool_description(scope, harness),
        |_input: TaskInput, _ctx: ToolContext| async {
            Err::<serde_json::Value, _>(ToolError::new(
                "internal",
                "the task tool of a listing does not run",
            ))
        },
    )?;
    Ok(task_tool_meta(tool))
}

fn task_tool_description(scope: &AgentScope, harness: &HarnessShared) -> String {
    let mut text = String::from(
        "Delegate a self-contained piece of work to a subagent. It runs in a fresh conversation \
         (it does not see this one) in the same workspace, and its final answer comes back as \
         this tool's result, with the name of the session holding its transcript. Write \
         `prompt` as a complete instruction. With `background: true` the call returns a \
         `task_id` at once and the answer arrives later as a `task_result` message.",
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

/// How the parent of one call resumes its paused tasks (see [`ResumeTask`]).
fn resume_tool(
    parent: &Arc<SessionShared>,
    inherited: Inherited,
    sink: &TurnSink,
    usage: &Arc<Mutex<Usage>>,
) -> ResumeTask {
    let parent = Arc::clone(parent);
    let sink = sink.clone();
    let usage = Arc::clone(usage);
    Arc::new(move |action: PendingAction, cancel: CancellationToken| {
        let parent = Arc::clone(&parent);
        let inherited = inherited.clone();
        let sink = sink.clone();
        let usage = Arc::clone(&usage);
        Box::pin(
            async move { resume_task(&parent, &inherited, action, &cancel, &sink, &usage).await },
        )
    })
}

/// Resumes the task session of a waiting `task` call from its log alone: the subagent's
/// scope is rebuilt from the call's input (`agent`, `role`) as the call first built it, and
/// the child's loop takes over where its log stands (decided actions first).
async fn resume_task(
    parent: &Arc<SessionShared>,
    inherited: &Inherited,
    action: PendingAction,
    cancel: &CancellationToken,
    sink: &TurnSink,
    usage: &Mutex<Usage>,
) -> Result<TaskResumed> {
    let Some(name) = action.session.clone() else {
        return Ok(TaskResumed::Answered(Err(ToolError::new(
            "task_lost",
            "the task's session is not recorded; run the task again",
        ))));
    };
    let input: TaskInput = match serde_json::from_value(action.input.clone()) {
        Ok(input) => input,
        Err(err) => {
            return Ok(TaskResumed::Answered(Err(ToolError::invalid_input(
                format!("the stored `task` input does not parse: {err}"),
            ))));
        }
    };
    let harness = Arc::clone(&parent.harness);
    let scope = child_scope(
        &parent.scope,
        input.agent.as_deref(),
        inherited,
        parent.scope.cwd.clone(),
    )?;
    let role = input.role.clone().or_else(|| scope.role.clone());
    let overlay = CallOverlay::resolve(&harness.roles, role, None)?;
    let key = SessionKey::new(harness.instance_id.clone(), name.clone());
    let child = Arc::new(SessionShared::new_task(
        harness,
        key,
        empty_log(),
        Arc::new(scope),
        parent.depth + 1,
    ));
    let prompt_options = PromptOptions {
        role: input.role,
        ..PromptOptions::default()
    };
    let opening = Opening {
        pausable_task: true,
        ..Opening::default()
    };
    let agent = input.agent;
    let run = ChildRun {
        parent,
        child,
        agent: agent.clone(),
        call_id: Some(action.call_id.clone()),
        cancel,
        sink,
    };
    match run.run(opening, prompt_options, overlay).await {
        Err(FlueError::Aborted) => Err(FlueError::Aborted),
        Err(err) => Ok(TaskResumed::Answered(Err(ToolError::from(err)))),
        Ok(None) => Ok(TaskResumed::Answered(Err(aborted_by_user(&name)))),
        Ok(Some((response, used))) => {
            if let Ok(mut total) = usage.lock() {
                *total += used;
            }
            if response.pending_actions.is_empty() {
                Ok(TaskResumed::Answered(Ok(json!({
                    "session": name,
                    "agent": agent,
                    "text": response.text,
                }))))
            } else {
                Ok(TaskResumed::Waiting(response.pending_actions))
            }
        }
    }
}

/// Stores the decisions of `opening` that concern actions of task sessions below `shared`
/// in those sessions' logs (checked there: the first decision wins), and keeps the rest for
/// the loop. Interrupting a waiting `task` call also interrupts its task's pending actions.
async fn route_to_tasks(
    shared: &SessionShared,
    mut opening: Opening,
    ctx: &OperationContext,
) -> Result<Opening> {
    if opening.decisions.is_empty() {
        return Ok(opening);
    }
    let records = {
        let mut state = shared.state.lock().await;
        shared.sync(&mut state).await?;
        state.records.clone()
    };
    let store = shared.harness.store.as_ref();
    let instance = shared.harness.instance_id.as_str();
    let own = steps::actions(&records);
    let mut kept = Vec::with_capacity(opening.decisions.len());
    for decision in std::mem::take(&mut opening.decisions) {
        let mine = own
            .iter()
            .find(|state| state.action.action_id == decision.action_id);
        if let Some(state) = mine {
            if state.action.kind == ActionKind::Task
                && decision.decision == ActionDecision::Interrupted
                && let Some(session) = &state.action.session
            {
                interrupt_task(store, instance, session).await?;
            }
            kept.push(decision);
            continue;
        }
        match locate_action(store, instance, &records, &decision.action_id).await? {
            Some(key) => {
                decide_in(store, &key, &decision).await?;
                ctx.sink.send(Event::ActionResolved {
                    action_id: decision.action_id.clone(),
                    decision: decision.decision.clone(),
                });
            }
            None => kept.push(decision),
        }
    }
    opening.decisions = kept;
    Ok(opening)
}

fn records_of(log: SessionLog) -> Vec<Record> {
    log.records
        .into_iter()
        .map(|stored| stored.record)
        .collect()
}

/// The task sessions whose `task` calls wait in `records`.
fn waiting_tasks(records: &[Record]) -> Vec<String> {
    steps::pending_actions(records)
        .into_iter()
        .filter(|action| action.kind == ActionKind::Task)
        .filter_map(|action| action.session)
        .collect()
}

/// The task session (below the session holding `records`, through its `task` calls, waiting
/// or answered: a late second decision then finds the first) that holds the action
/// `action_id`.
pub(crate) async fn locate_action(
    store: &dyn DynSessionStore,
    instance: &str,
    records: &[Record],
    action_id: &str,
) -> Result<Option<SessionKey>> {
    let task_sessions = |records: &[Record]| -> Vec<String> {
        steps::actions(records)
            .into_iter()
            .filter(|state| state.action.kind == ActionKind::Task)
            .filter_map(|state| state.action.session)
            .collect()
    };
    let mut frontier = task_sessions(records);
    while let Some(name) = frontier.pop() {
        let key = SessionKey::new(instance.to_owned(), name);
        let Some(log) = store.load(&key, 0).await? else {
            continue;
        };
        let records = records_of(log);
        if steps::actions(&records)
            .iter()
            .any(|state| state.action.action_id == action_id)
        {
            return Ok(Some(key));
        }
        frontier.extend(task_sessions(&records));
    }
    Ok(None)
}

/// Checks `decision` against the log of `key` and appends it there. A writer that raced us
/// is seen on the retry: a decision already stored is [`FlueError::ActionAlreadyResolved`].
pub(crate) async fn decide_in(
    store: &dyn DynSessionStore,
    key: &SessionKey,
    decision: &ActionResolution,
) -> Result<()> {
    let mut tries = 0;
    loop {
        tries += 1;
        let log = store
            .load(key, 0)
            .await?
            .ok_or_else(|| FlueError::SessionNotFound {
                session: key.session.clone(),
            })?;
        let version = log.version;
        let action = steps::check_decision(
            &records_of(log),
            &key.session,
            &decision.action_id,
            &decision.decision,
        )?;
        let stored = [StoredRecord::new(
            Record::ActionResolved(ActionResolution::of(&action, decision.decision.clone())),
            now_ms(),
        )];
        match store.append(key, version, &stored).await {
            Ok(_) => return Ok(()),
            Err(err) if tries >= 3 => return Err(err),
            Err(_) => {}
        }
    }
}

/// Answers every pending action of the task session `session`, and of the tasks it waits
/// for, as interrupted.
pub(crate) async fn interrupt_task(
    store: &dyn DynSessionStore,
    instance: &str,
    session: &str,
) -> Result<()> {
    let mut frontier = vec![session.to_owned()];
    while let Some(name) = frontier.pop() {
        let key = SessionKey::new(instance.to_owned(), name);
        let Some(log) = store.load(&key, 0).await? else {
            continue;
        };
        let version = log.version;
        let records = records_of(log);
        frontier.extend(waiting_tasks(&records));
        let at = now_ms();
        let stored: Vec<StoredRecord> = steps::pending_actions(&records)
            .iter()
            .map(|action| {
                let resolution = ActionResolution::of(action, ActionDecision::Interrupted);
                StoredRecord::new(Record::ActionResolved(resolution), at)
            })
            .collect();
        if !stored.is_empty() {
            store.append(&key, version, &stored).await?;
        }
    }
    Ok(())
}

/// `list` with every `task` call's action replaced by the actions of its task session (and
/// theirs, to any depth). The task's pending actions are listed only while its call waits.
pub(crate) async fn with_task_actions(
    store: &dyn DynSessionStore,
    instance: &str,
    list: Vec<ActionInfo>,
) -> Result<Vec<ActionInfo>> {
    let mut out = Vec::with_capacity(list.len());
    // (entry, whether the task call above it still waits)
    let mut stack: Vec<(ActionInfo, bool)> = list.into_iter().rev().map(|i| (i, true)).collect();
    while let Some((info, live)) = stack.pop() {
        if !live && info.decision.is_none() {
            continue;
        }
        let (ActionKind::Task, Some(session)) = (info.action.kind, &info.action.session) else {
            out.push(info);
            continue;
        };
        let key = SessionKey::new(instance.to_owned(), session.clone());
        if let Some(log) = store.load(&key, 0).await? {
            let live = live && info.decision.is_none();
            let nested = steps::actions(&records_of(log));
            stack.extend(nested.into_iter().rev().map(|i| (i, live)));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
