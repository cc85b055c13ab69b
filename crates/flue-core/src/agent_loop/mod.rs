//! The agent loop: model turn, tool calls, results, repeat — driven by the stored log.
//!
//! Each iteration asks `steps::next_step` what the log needs next: a model turn (the log ends
//! with user input or answered tool calls), tool runs (the last assistant message has
//! unanswered calls) or nothing (the model answered). Because the decision reads only the log,
//! an operation that stopped mid-turn (a crash, a pause for a tool confirmation) can be picked
//! up from the store alone.
//!
//! The loop runs in named phases, in this order: [`prepare`] the operation (its model and
//! tools, then the opening writes), call the [`model`], [`decide`] each tool call, run it
//! ([`execute`]), [`record`] the batch, and [`settle`] the reply (the `Stop` hooks, a
//! structured result, paused tasks). [`TurnLoop::drive`] and [`TurnLoop::run_tools`] read as
//! the algorithm: where the hook points, pauses and budget checks come.
//!
//! Layering: the loop sits below the session API and tasks, and calls compaction as a step.
//! It knows nothing of tasks: a caller that lets the model delegate passes the `task` tool in
//! as a [`Delegation`].

mod decide;
mod execute;
mod held;
mod model;
mod prepare;
mod record;
mod settle;
mod tools;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flue_protocol::record::{
    ActionResolution, PendingAction, Record, StopReason, ToolCall, ToolResult, Usage, UserMessage,
};
use flue_protocol::{ThinkingLevel, WorkTiming};
use serde_json::Value;
use tracing::Span;

use crate::budget::BudgetCheck;
use crate::compaction::LoopCompaction;
use crate::error::{FlueError, Result};
use crate::hook_points;
use crate::model::{ModelProvider, ModelSpec};
use crate::operation::{OperationContext, PromptOptions, PromptResponse};
use crate::overlay::CallOverlay;
use crate::redact::Redactor;
use crate::scope::AgentScope;
use crate::shared::{SessionShared, SessionState};
use crate::spans;
use crate::steps::{Step, next_step};
use crate::tool::{DataEmitter, LiveTools, ToolDefinition, ToolError, ToolSet};
use crate::util::{BoxFuture, WorkClock};
use decide::{PreHooks, restore_hooked_inputs};
use tokio_util::sync::CancellationToken;
use tools::ResultOutcome;
pub(crate) use tools::listed_tools;

/// Name of the read-only preflight tool that tells which tools wait for a decision.
pub const PERMISSIONS_CHECK_TOOL: &str = "permissions_check";
/// Name of the tool that delivers a structured result.
pub const FINISH_TOOL: &str = "finish";
/// Name of the tool the model calls when it cannot produce a structured result.
pub const GIVE_UP_TOOL: &str = "give_up";
/// How many times the model may end a structured-result operation without a valid `finish`.
const MAX_RESULT_FOLLOW_UPS: u32 = 3;
/// How many times a `Stop` hook may block the final reply in one operation before the
/// operation ends with `guardrail_tripped`.
const MAX_STOP_BLOCKS: u32 = 3;
/// How many times in a row a paused turn (`pause_turn`) is continued before the operation
/// stops and says so.
const MAX_PAUSE_CONTINUATIONS: u32 = 5;
/// How long aborted tools get to stop on their own before their tasks are dropped.
const ABORT_GRACE: Duration = Duration::from_secs(3);

/// What an operation brings before its loop runs.
#[derive(Debug, Default)]
pub(crate) struct Opening {
    /// New input. Refused with [`FlueError::ActionsPending`] while actions wait for a decision
    /// (unless `decisions` answer them all, as an interrupt does).
    pub(crate) message: Option<UserMessage>,
    /// Decisions on pending actions, checked against the log and stored first.
    pub(crate) decisions: Vec<ActionResolution>,
    /// End after the opening writes, without a model call (an interrupt without a message).
    pub(crate) stop: bool,
    /// A task session run by a parent's `task` call: its calls may pause like the root's
    /// (the parent's call waits with them). Other task sessions (`session.task` from code)
    /// answer such calls `permission_required`.
    pub(crate) pausable_task: bool,
    /// Creation data (`initialData`): the conversation's first state, stored with `message`
    /// when it is the first message to reach the log and no state was written yet.
    pub(crate) seed_state: Option<Value>,
}

impl Opening {
    /// An opening with new input only.
    pub(crate) fn message(message: Option<UserMessage>) -> Self {
        Self {
            message,
            ..Self::default()
        }
    }
}

/// The `task` tool of one call, the usage of the tasks it runs (counted in the response) and
/// how to resume a task that paused.
pub(crate) struct Delegation {
    pub(crate) tool: ToolDefinition,
    pub(crate) usage: Arc<Mutex<Usage>>,
    pub(crate) resume: ResumeTask,
    /// The tools that follow background tasks (a conversation's root session under the
    /// runtime; none elsewhere).
    pub(crate) background: Vec<ToolDefinition>,
}

/// The error kind with which the delegation tool reports that its task paused; the message is
/// the task session's name. The call then waits as an [`ActionKind::Task`] action.
pub(crate) const TASK_PAUSED: &str = "task_paused";

/// Resumes the paused task of a waiting `task` call (its [`ActionKind::Task`] action) from
/// the task session's log.
pub(crate) type ResumeTask = Arc<
    dyn Fn(PendingAction, CancellationToken) -> BoxFuture<'static, Result<TaskResumed>>
        + Send
        + Sync,
>;

/// Where a resumed task stands.
pub(crate) enum TaskResumed {
    /// It waits again, for these actions (of its session or of tasks below it).
    Waiting(Vec<PendingAction>),
    /// It ended: the `task` call's output.
    Answered(std::result::Result<Value, ToolError>),
}

/// The model of a call. Precedence: the call's, then the role's, then the agent's.
pub(crate) fn call_model(
    options: &PromptOptions,
    overlay: &CallOverlay,
    scope: &AgentScope,
) -> Result<String> {
    options
        .model
        .clone()
        .or_else(|| overlay.model())
        .or_else(|| scope.model.clone())
        .ok_or_else(|| FlueError::ModelNotConfigured {
            hint: Some("set `model` on the agent or pass a model for this call".into()),
        })
}

/// The thinking level of a call, with the same precedence as [`call_model`].
pub(crate) fn call_thinking(
    options: &PromptOptions,
    overlay: &CallOverlay,
    scope: &AgentScope,
) -> ThinkingLevel {
    options
        .thinking
        .or_else(|| overlay.thinking())
        .unwrap_or(scope.thinking)
}

/// Runs a model operation (`prompt`, `skill`, or a task's) to its end, as the session's agent
/// with the call's `overlay` (role, skill) on top.
///
/// With `message`, unanswered calls an earlier operation left behind are answered
/// `interrupted` and the message is appended before the first model call. Without one (a
/// submission resumed after a crash), the same repair happens and the loop continues from the
/// log alone: a stored final answer is returned at once, without a model call.
pub(crate) async fn run(
    shared: Arc<SessionShared>,
    opening: Opening,
    options: PromptOptions,
    overlay: CallOverlay,
    ctx: OperationContext,
    delegation: Option<Delegation>,
) -> Result<(PromptResponse, Usage)> {
    let stop = opening.stop;
    let prepared = prepare::prepare(&shared, &opening, &options, &overlay, delegation).await?;
    // Prompt hooks judge with the model this operation calls.
    let mut ctx = ctx;
    ctx.model = Some(format!(
        "{}/{}",
        prepared.spec.provider, prepared.spec.model
    ));
    let mut state = shared.state.lock().await;
    let budget = prepare::open(&shared, &mut state, opening, &prepared.tools, &ctx).await?;
    if stop {
        let response = PromptResponse {
            text: String::new(),
            data: None,
            usage: Usage::default(),
            model: prepared.spec.to_ref(),
            pending_actions: Vec::new(),
        };
        return Ok((response, Usage::default()));
    }
    let harness = &shared.harness;
    let mut turn = TurnLoop {
        shared: &shared,
        provider: prepared.provider.as_ref(),
        spec: &prepared.spec,
        tools: prepared.tools,
        live_tools: prepared.live_tools,
        removed_tools: BTreeSet::new(),
        system: overlay.system_prompt(&shared.scope, harness.workspace_context.as_deref()),
        thinking: prepared.thinking,
        ctx: &ctx,
        usage: Usage::default(),
        result_slot: prepared.result_slot,
        structured: options.result.is_some(),
        delegated_usage: prepared.delegated_usage,
        resume_task: prepared.resume_task,
        pausable: prepared.pausable,
        paused_turns: 0,
        budget,
        turn_context: None,
        held: held::HeldReply::new(shared.depth == 0 && harness.agent.hold_reply_until_stop),
    };
    let driven = turn.drive(&mut state).await;
    if hook_points::any(&shared) {
        prepare::session_end_hooks(&shared, &ctx, &state, &driven).await;
    }
    match driven {
        Ok(response) => {
            let usage = response.usage;
            Ok((response, usage))
        }
        Err(err) => {
            // A failed operation still reports what its turns and tasks used.
            *ctx.failed_usage
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = turn.spent();
            Err(err)
        }
    }
}

struct TurnLoop<'a> {
    shared: &'a SessionShared,
    provider: &'a dyn ModelProvider,
    spec: &'a ModelSpec,
    /// The tools of the current turn.
    tools: ToolSet,
    /// Where the tools come from, read again before each model turn.
    live_tools: LiveTools,
    /// Tools offered earlier in this operation that their source has removed since.
    removed_tools: BTreeSet<String>,
    system: String,
    thinking: ThinkingLevel,
    ctx: &'a OperationContext,
    usage: Usage,
    result_slot: Arc<Mutex<Option<ResultOutcome>>>,
    structured: bool,
    /// Usage of the tasks this call's `task` tool ran, counted in the response.
    delegated_usage: Arc<Mutex<Usage>>,
    /// The delegation tool's name and how to resume its paused tasks (when the model may
    /// delegate).
    resume_task: Option<(String, ResumeTask)>,
    /// Whether calls may pause here (the root, or a task run by a `task` call).
    pausable: bool,
    /// Paused turns (`pause_turn`) continued in a row; reset by any other turn.
    paused_turns: u32,
    /// The budgets checked before each model call (a root session's operation with budgets).
    budget: Option<BudgetCheck>,
    /// Context a `BeforeModelCall` hook added to the system prompt of the coming model call.
    turn_context: Option<String>,
    /// The reply held back until the `Stop` hooks pass (`hold_reply_until_stop`).
    held: held::HeldReply,
}

/// What an operation counted so far.
#[derive(Default)]
struct Counts {
    /// Model calls made.
    turns: u32,
    /// Reminders to deliver a structured result.
    follow_ups: u32,
    /// Final replies a `Stop` hook blocked.
    stop_blocks: u32,
}

impl TurnLoop<'_> {
    /// The operation, step by step as the log asks. Before each model call: the turn limit
    /// and the budgets, the tool sources read again, the `BeforeModelCall` hooks. A turn's
    /// calls go through [`TurnLoop::run_tools`]; paused tasks are resumed; a final reply goes
    /// past the `Stop` hooks and, in a structured-result operation, must come as `finish`.
    async fn drive(&mut self, state: &mut SessionState) -> Result<PromptResponse> {
        let mut counts = Counts::default();
        let mut compaction = LoopCompaction::default();
        loop {
            match next_step(&state.records) {
                Step::CallModel => {
                    self.count_turn(&mut counts)?;
                    self.refresh_tools().await?;
                    self.before_model_call(state, counts.turns).await?;
                    self.compacting_model_turn(state, &mut compaction).await?;
                }
                Step::Answered if self.paused_turns > 0 && last_turn_paused(&state.records) => {
                    // The provider paused a long turn: sending the conversation back, the
                    // paused turn last, lets the model go on where it stopped.
                    self.count_turn(&mut counts)?;
                    self.refresh_tools().await?;
                    self.compacting_model_turn(state, &mut compaction).await?;
                }
                Step::RunTools(calls) => {
                    self.run_tools(state, calls, RunMode::Classify).await?;
                    if let Some(outcome) = self.take_result() {
                        return self.finish_structured(state, outcome);
                    }
                }
                Step::RunConfirmed(confirmed) => {
                    let (calls, action_ids) = confirmed.into_iter().unzip();
                    self.run_tools(state, calls, RunMode::Confirmed(action_ids))
                        .await?;
                    if let Some(outcome) = self.take_result() {
                        return self.finish_structured(state, outcome);
                    }
                }
                Step::Answer(results) => self.answer(state, results).await?,
                Step::Paused(actions) => {
                    let (waiting, settled) = self.resume_tasks(state, actions).await?;
                    if !settled {
                        return Ok(self.waiting(state, waiting));
                    }
                }
                Step::Answered => {
                    if hook_points::any(self.shared)
                        && self.stop_hooks(state, &mut counts.stop_blocks).await?
                    {
                        // A blocked reply is never shown.
                        self.held.discard();
                        continue;
                    }
                    if !self.structured {
                        let response = self.response(state, None);
                        self.held.release(&self.ctx.sink, Some(&response.text));
                        return Ok(response);
                    }
                    self.held.release(&self.ctx.sink, None);
                    self.remind_to_finish(state, &mut counts.follow_ups).await?;
                }
            }
        }
    }

    /// Runs calls concurrently and appends their results in call order. With
    /// [`RunMode::Classify`] (calls of a new turn) each call's policy is read first: a call
    /// that must wait for a decision (an `always_ask` tool, a custom tool) does not run; its
    /// pending action is stored with the other calls' results, in the same append. With
    /// [`RunMode::Confirmed`] the calls were allowed: their starts are stored before they
    /// run, so a crash mid-run answers them `interrupted` instead of running them twice. On
    /// abort, calls see the cancellation, except those whose interrupt behaviour is
    /// `complete`, which finish within [`ABORT_GRACE`] with their real result; calls that did
    /// not finish get an `aborted` result so the log stays well-formed.
    async fn run_tools(
        &mut self,
        state: &mut SessionState,
        mut calls: Vec<ToolCall>,
        mode: RunMode,
    ) -> Result<()> {
        // A standing approval answers confirmations where a `PermissionRequest` hook would.
        let hooked = hook_points::any(self.shared) || self.has_standing_rules(state);
        let pre = match &mode {
            RunMode::Classify if hooked => self.pre_tool_hooks(state, &mut calls).await?,
            RunMode::Confirmed(_) if hooked => {
                restore_hooked_inputs(&state.records, &mut calls);
                PreHooks::none(calls.len())
            }
            RunMode::Classify | RunMode::Confirmed(_) => PreHooks::none(calls.len()),
        };
        if let RunMode::Confirmed(action_ids) = &mode {
            self.store_starts(state, action_ids).await?;
        }
        let env = self.call_env(state);
        let mut batch = Batch::new(calls, pre, &self.shared.harness.redactor);
        let (cleared, attempts) = self.decide_calls(state, &mut batch, &mode, &env);
        let aborted = self.run_calls(state, &mut batch, cleared, attempts).await?;
        let post_records = if hooked && !aborted {
            self.post_tool_hooks(&mut batch, env.tool_state.as_ref(), &state.records)
                .await
        } else {
            Vec::new()
        };
        let tripped = batch.tripped.take();
        let pending = self
            .record_batch(state, batch, &env, &post_records, aborted)
            .await?;
        hook_points::announce(&self.ctx.sink, &post_records);
        self.announce_pending(pending);
        if aborted {
            return Err(FlueError::Aborted);
        }
        tripped.map_or(Ok(()), Err)
    }

    /// Counts a model call, after checking the turn limit and the budgets.
    fn count_turn(&self, counts: &mut Counts) -> Result<()> {
        let max_turns = self.shared.scope.max_turns;
        if counts.turns >= max_turns {
            return Err(FlueError::MaxTurnsExceeded { max_turns });
        }
        self.check_budget(counts.turns)?;
        counts.turns += 1;
        Ok(())
    }

    /// The budgets before a model call, `turns` calls made by this operation so far.
    fn check_budget(&self, turns: u32) -> Result<()> {
        match &self.budget {
            Some(budget) => budget.check(turns, &self.spent()),
            None => Ok(()),
        }
    }

    /// What the operation spent so far: its turns (failed ones included), its tasks and its
    /// prompt hooks.
    fn spent(&self) -> Usage {
        let mut usage = self.usage;
        if let Ok(delegated) = self.delegated_usage.lock() {
            usage += *delegated;
        }
        if let Ok(hooks) = self.ctx.hook_usage.lock() {
            usage += *hooks;
        }
        usage
    }

    /// The conversation's state for this session's hooks and tool calls: a handle over the
    /// stored document, or `None` in a task session (the state lives in the root session).
    fn hook_state(&self, state: &SessionState) -> Option<crate::tool::ToolState> {
        (self.shared.depth == 0).then(|| session_tool_state(state))
    }
}

/// A batch of calls on its way through the phases of [`TurnLoop::run_tools`], one slot per
/// call in call order.
struct Batch {
    calls: Vec<ToolCall>,
    /// What each call's `PreToolUse` hooks decided (stored before any call runs).
    pre: Vec<Option<hook_points::Decided>>,
    /// The first hook decision that ends the operation once the batch is stored.
    tripped: Option<FlueError>,
    results: Vec<Option<ToolResult>>,
    /// The actions of calls that wait for a decision.
    waiting: Vec<Option<PendingAction>>,
    /// When each call began to run (or was answered without running), and how long it ran.
    clocks: Vec<WorkClock>,
    timings: Vec<Option<WorkTiming>>,
    spawned: Vec<bool>,
    spans: Vec<Span>,
    /// What each call emits with `emit_data`, stored with its result.
    emitted: Vec<DataEmitter>,
}

impl Batch {
    fn new(calls: Vec<ToolCall>, pre: PreHooks, redactor: &Redactor) -> Self {
        let n = calls.len();
        let spans = calls
            .iter()
            .map(|call| {
                let span = spans::execute_tool(&call.name, &call.id);
                span.record(
                    "gen_ai.tool.call.arguments",
                    tracing::field::display(spans::RedactedJson {
                        redactor,
                        value: &call.input,
                    }),
                );
                span
            })
            .collect();
        Self {
            calls,
            pre: pre.decided,
            tripped: pre.tripped,
            results: vec![None; n],
            waiting: vec![None; n],
            clocks: vec![WorkClock::start(); n],
            timings: vec![None; n],
            spawned: vec![false; n],
            spans,
            emitted: Vec::with_capacity(n),
        }
    }
}

/// How [`TurnLoop::run_tools`] treats its calls.
enum RunMode {
    /// Calls of a new turn: read each one's policy first.
    Classify,
    /// Calls allowed by a decision, with their action ids.
    Confirmed(Vec<String>),
}

/// What a call's policy says.
enum Gate {
    Run,
    Wait(PendingAction),
    Refuse(ToolError),
}

/// The conversation's state as stored in `state`'s log, as a handle that buffers writes.
fn session_tool_state(state: &SessionState) -> crate::tool::ToolState {
    let (value, version) = state
        .index
        .state()
        .map_or((None, 0), |(value, version)| (Some(value.clone()), version));
    crate::tool::ToolState::new(value, version)
}

/// What hooks may do with the state: write through `state`, or (a task session) nothing.
fn hook_access(state: Option<&crate::tool::ToolState>) -> hook_points::StateAccess<'_> {
    state.map_or(
        hook_points::StateAccess::None,
        hook_points::StateAccess::Write,
    )
}

/// Whether the last record is an assistant turn the provider paused (`pause_turn`).
fn last_turn_paused(records: &[Record]) -> bool {
    matches!(
        records.last(),
        Some(Record::Assistant(message)) if message.stop_reason == StopReason::PauseTurn
    )
}
