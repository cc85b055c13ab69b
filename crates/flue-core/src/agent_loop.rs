//! The agent loop: model turn, tool calls, results, repeat — driven by the stored log.
//!
//! Each iteration asks `steps::next_step` what the log needs next: a model turn (the log ends
//! with user input or answered tool calls), tool runs (the last assistant message has
//! unanswered calls) or nothing (the model answered). Because the decision reads only the log,
//! an operation that stopped mid-turn (a crash, a pause for a tool confirmation) can be picked
//! up from the store alone.
//!
//! Layering: the loop sits below the session API and tasks, and calls compaction as a step.
//! It knows nothing of tasks: a caller that lets the model delegate passes the `task` tool in
//! as a [`Delegation`].

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flue_protocol::{ThinkingLevel, WorkTiming, task_session_parent};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::task::JoinSet;
use tracing::{Instrument, Span};

use crate::budget::BudgetCheck;
use crate::compaction::{Compactor, LoopCompaction};
use crate::error::{FlueError, Result};
use crate::event::{CompactionReason, Event};
use crate::hook::{HookEvent, HookPoint, Verdict};
use crate::hook_points;
use crate::model::{ModelProvider, ModelRequest, ModelSpec};
use crate::operation::{OperationContext, PromptOptions, PromptResponse};
use crate::overlay::CallOverlay;
use crate::permission::PermissionSource;
use crate::record::{
    ActionDecision, ActionKind, ActionResolution, ActionStarted, AssistantContent,
    AssistantMessage, FailedTurn, PendingAction, Record, StateChange, StopReason, ToolAttempt,
    ToolCall, ToolResult, Usage, UserMessage,
};
use crate::scope::AgentScope;
use crate::shared::{SessionShared, SessionState};
use crate::skill;
use crate::spans;
use crate::steps::{
    Step, action_id, check_decision, error_result, interrupted_results_except, model_view,
    next_step, rename_repeated_calls, results_before_input_in,
};
use crate::tool::{
    InterruptBehavior, LiveTools, Ownership, Permission, ToolContext, ToolDefinition, ToolError,
    ToolMeta, ToolSet, render_output,
};
use crate::util::{BoxFuture, WorkClock, or_cancel};
use tokio_util::sync::CancellationToken;

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

/// Checks `decisions` against the log and stores them in one append, then emits them.
async fn apply_decisions(
    shared: &SessionShared,
    state: &mut SessionState,
    decisions: &[ActionResolution],
    ctx: &OperationContext,
) -> Result<()> {
    if decisions.is_empty() {
        return Ok(());
    }
    let mut records = Vec::with_capacity(decisions.len());
    for decision in decisions {
        let action = check_decision(
            &state.records,
            &shared.key.session,
            &decision.action_id,
            &decision.decision,
        )?;
        records.push(Record::ActionResolved(ActionResolution::of(
            &action,
            decision.decision.clone(),
        )));
    }
    shared.append(state, records).await?;
    for decision in decisions {
        ctx.sink.send(Event::ActionResolved {
            action_id: decision.action_id.clone(),
            decision: decision.decision.clone(),
        });
    }
    Ok(())
}

/// The `task` tool of one call, the usage of the tasks it runs (counted in the response) and
/// how to resume a task that paused.
pub(crate) struct Delegation {
    pub(crate) tool: ToolDefinition,
    pub(crate) usage: Arc<Mutex<Usage>>,
    pub(crate) resume: ResumeTask,
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
    let harness = Arc::clone(&shared.harness);
    let scope = Arc::clone(&shared.scope);
    let model_spec = call_model(&options, &overlay, &scope)?;
    let (provider, spec) = harness.providers.resolve(&model_spec)?;
    if harness.agent.model.as_deref() != Some(model_spec.as_str()) {
        provider.check_model(&spec.model).await?;
    }
    if opening
        .message
        .as_ref()
        .is_some_and(crate::model::has_images)
        && !provider.model_info(&spec.model).image_input
    {
        return Err(FlueError::ImageInputUnsupported { model: model_spec });
    }
    let thinking = call_thinking(&options, &overlay, &scope);
    let result_slot = Arc::new(Mutex::new(None));
    // The call's tools and the runtime's come after the agent's and its sources'.
    let mut tools: Vec<ToolDefinition> = options.tools.clone();
    if !scope.skills.is_empty() {
        tools.push(skill::load_skill_tool(scope.skills.clone())?);
    }
    let (delegated_usage, resume_task) = match delegation {
        Some(delegation) => {
            let name = delegation.tool.name().to_owned();
            tools.push(delegation.tool);
            (delegation.usage, Some((name, delegation.resume)))
        }
        None => (Arc::new(Mutex::new(Usage::default())), None),
    };
    let pausable = shared.depth == 0 || opening.pausable_task;
    if let Some(schema) = &options.result {
        tools.extend(result_tools(schema, &result_slot)?);
    }
    let mut live_tools = LiveTools::new(
        scope.tools.clone(),
        scope.tool_sources.clone(),
        tools,
        &[PERMISSIONS_CHECK_TOOL],
    );
    let tools = turn_tool_set(live_tools.merged(), &harness.permissions, pausable)?;

    let mut state = shared.state.lock().await;
    shared.sync(&mut state).await?;
    // Live actions (MCP servers' questions) left pending by a call that no longer runs.
    let orphaned = crate::steps::orphaned_live_actions_in(&state.index);
    shared.append(&mut state, orphaned).await?;
    apply_decisions(&shared, &mut state, &opening.decisions, &ctx).await?;
    let pending = state.index.pending_actions();
    let mut records: Vec<Record> = match &opening.message {
        Some(_) if !pending.is_empty() => {
            return Err(FlueError::ActionsPending {
                session: shared.key.session.clone(),
                actions: pending.into_iter().map(|action| action.action_id).collect(),
            });
        }
        Some(_) => results_before_input_in(&state.records, &state.index)
            .into_iter()
            .map(Record::ToolResult)
            .collect(),
        // After a crash: calls of replay-safe tools stay unanswered and run again (with the
        // same idempotency key); every other cut-off call is answered `interrupted`.
        None => interrupted_results_except(&state.records, |call| {
            tools
                .get(&call.name)
                .is_some_and(|tool| tool.meta().replay_safe)
        }),
    };
    if hook_points::any(&shared) {
        denied_before_the_crash(&state.records, &mut records);
    }
    let opens = opening.message.is_some();
    let mut message = opening.message;
    let seed = match (&message, opening.seed_state) {
        (Some(_), Some(seed)) if state.index.state().is_none() && !state.index.has_user() => {
            crate::tool::check_state(&seed)?;
            Some(seed)
        }
        _ => None,
    };
    let mut hook_records = Vec::new();
    // The prompt's hooks see the state the message opens with (its seed included); what they
    // write is stored with their decisions and the message, or (when they refuse the message)
    // not at all.
    let hook_state = (shared.depth == 0).then(|| match &seed {
        Some(seed) => crate::tool::ToolState::new(Some(seed.clone()), 1),
        None => session_tool_state(&state),
    });
    if let Some(message) = &mut message
        && hook_points::any(&shared)
    {
        let prompt_hooks =
            prompt_hooks(&shared, &ctx, &state.records, message, hook_state.as_ref()).await;
        hook_records = prompt_hooks.records;
        if let Some(err) = prompt_hooks.error {
            records.extend(hook_records.iter().cloned());
            shared.append(&mut state, records).await?;
            hook_points::announce(&ctx.sink, &hook_records);
            return Err(err);
        }
    }
    if let Some(seed) = seed {
        records.push(Record::State(StateChange {
            value: seed,
            version: 1,
            source: "initial_data".to_owned(),
            call_id: None,
        }));
    }
    records.extend(hook_records.iter().cloned());
    records.extend(hook_state.as_ref().and_then(crate::tool::ToolState::record));
    records.extend(message.map(Record::User));
    shared.append(&mut state, records).await?;
    hook_points::announce(&ctx.sink, &hook_records);
    // Budgets bind a root session's operations: a submission (or a library call) and its
    // conversation. A task's spending counts in its root's figures.
    let budget = if shared.depth == 0 {
        let budget = ctx.budget.unwrap_or_default().or(harness.agent.budget);
        let opened_at = opens.then(|| state.records.len().saturating_sub(1));
        BudgetCheck::start(&harness, &state.records, opened_at, budget).await?
    } else {
        None
    };
    if opening.stop {
        let response = PromptResponse {
            text: String::new(),
            data: None,
            usage: Usage::default(),
            model: spec.to_ref(),
            pending_actions: Vec::new(),
        };
        return Ok((response, Usage::default()));
    }

    let mut turn = TurnLoop {
        shared: &shared,
        provider: provider.as_ref(),
        spec: &spec,
        tools,
        live_tools,
        removed_tools: BTreeSet::new(),
        system: overlay.system_prompt(&scope, harness.workspace_context.as_deref()),
        thinking,
        ctx: &ctx,
        usage: Usage::default(),
        result_slot,
        structured: options.result.is_some(),
        delegated_usage,
        resume_task,
        pausable,
        paused_turns: 0,
        budget,
        turn_context: None,
    };
    let driven = turn.drive(&mut state).await;
    if hook_points::any(&shared) {
        let reason = match &driven {
            Ok(response) if !response.pending_actions.is_empty() => "requires_action",
            Ok(_) => "completed",
            Err(FlueError::Aborted) => "aborted",
            Err(_) => "failed",
        };
        let event = HookEvent::SessionEnd {
            reason: reason.to_owned(),
        };
        // Nothing is left to decide: the decisions are reported, not stored.
        let access = if shared.depth == 0 {
            hook_points::StateAccess::Read(state.index.state().map(|(value, _)| value))
        } else {
            hook_points::StateAccess::None
        };
        let decided = hook_points::ask(&shared, &ctx, event, None, access).await;
        hook_points::announce(&ctx.sink, &decided.records);
    }
    let response = match driven {
        Ok(response) => response,
        Err(err) => {
            // A failed operation still reports what its turns and tasks used.
            *ctx.failed_usage
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = turn.spent();
            return Err(err);
        }
    };
    let usage = response.usage;
    Ok((response, usage))
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
}

impl TurnLoop<'_> {
    async fn drive(&mut self, state: &mut SessionState) -> Result<PromptResponse> {
        let max_turns = self.shared.scope.max_turns;
        let mut n_turns = 0u32;
        let mut n_follow_ups = 0u32;
        let mut n_stop_blocks = 0u32;
        let mut compaction = LoopCompaction::default();
        loop {
            match next_step(&state.records) {
                Step::CallModel => {
                    if n_turns >= max_turns {
                        return Err(FlueError::MaxTurnsExceeded { max_turns });
                    }
                    self.check_budget(n_turns)?;
                    n_turns += 1;
                    self.refresh_tools().await?;
                    self.before_model_call(state, n_turns).await?;
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
                    if settled {
                        continue;
                    }
                    let mut response = self.response(state, None);
                    response.pending_actions = waiting;
                    return Ok(response);
                }
                Step::Answered => {
                    if self.paused_turns > 0 && last_turn_paused(&state.records) {
                        // The provider paused a long turn: sending the conversation back, the
                        // paused turn last, lets the model go on where it stopped.
                        if n_turns >= max_turns {
                            return Err(FlueError::MaxTurnsExceeded { max_turns });
                        }
                        self.check_budget(n_turns)?;
                        n_turns += 1;
                        self.refresh_tools().await?;
                        self.compacting_model_turn(state, &mut compaction).await?;
                        continue;
                    }
                    if hook_points::any(self.shared)
                        && self.stop_hooks(state, &mut n_stop_blocks).await?
                    {
                        continue;
                    }
                    if !self.structured {
                        return Ok(self.response(state, None));
                    }
                    if n_follow_ups >= MAX_RESULT_FOLLOW_UPS {
                        return Err(FlueError::ResultUnavailable {
                            reason: format!(
                                "the model did not deliver a valid result after {n_follow_ups} \
                                 reminders"
                            ),
                        });
                    }
                    n_follow_ups += 1;
                    let reminder = UserMessage::text(format!(
                        "Deliver your answer by calling the `{FINISH_TOOL}` tool with input that \
                         matches its schema. If you cannot, call `{GIVE_UP_TOOL}` with the reason."
                    ));
                    self.shared
                        .append(state, vec![Record::User(reminder)])
                        .await?;
                }
            }
        }
    }

    /// Asks the `BeforeModelCall` hooks (or reads their stored decisions) before turn
    /// `turn`: a block ends the operation, added context goes into this call's system prompt.
    async fn before_model_call(&mut self, state: &mut SessionState, turn: u32) -> Result<()> {
        if !hook_points::any(self.shared) {
            return Ok(());
        }
        let point = HookPoint::BeforeModelCall;
        let hook_state = self.hook_state(state);
        let decided = match hook_points::stored(&state.records, point, None) {
            Some(decided) => decided,
            None => {
                let event = HookEvent::BeforeModelCall {
                    turn,
                    model: self.spec.to_ref().to_string(),
                };
                let access = hook_access(hook_state.as_ref());
                hook_points::ask(self.shared, self.ctx, event, None, access).await
            }
        };
        let mut records = decided.records.clone();
        records.extend(hook_state.as_ref().and_then(crate::tool::ToolState::record));
        self.shared.append(state, records).await?;
        hook_points::announce(&self.ctx.sink, &decided.records);
        if let Some(err) = decided.operation_error(point) {
            return Err(err);
        }
        self.turn_context = decided.context_text();
        Ok(())
    }

    /// Asks the `Stop` (in a task: `SubagentStop`) hooks about the final reply, or reads
    /// their stored decisions. Returns whether the model answers again: a block stores the
    /// reason as a user message, at most [`MAX_STOP_BLOCKS`] times; a replacement is stored
    /// and becomes the reply.
    async fn stop_hooks(&mut self, state: &mut SessionState, n_blocks: &mut u32) -> Result<bool> {
        let subagent = self.shared.depth > 0;
        let point = if subagent {
            HookPoint::SubagentStop
        } else {
            HookPoint::Stop
        };
        let hook_state = self.hook_state(state);
        let decided = match hook_points::stored(&state.records, point, None) {
            Some(decided) => decided,
            None => {
                let event = HookEvent::Stop {
                    reply: reply_text(&state.records),
                    stop_hook_active: *n_blocks > 0,
                    subagent,
                };
                let access = hook_access(hook_state.as_ref());
                hook_points::ask(self.shared, self.ctx, event, None, access).await
            }
        };
        let mut records = decided.records.clone();
        records.extend(hook_state.as_ref().and_then(crate::tool::ToolState::record));
        let mut again = false;
        if decided.verdict == Verdict::Block {
            if *n_blocks >= MAX_STOP_BLOCKS {
                self.shared.append(state, records).await?;
                hook_points::announce(&self.ctx.sink, &decided.records);
                return Err(FlueError::GuardrailTripped {
                    event: point.name().to_owned(),
                    hook: decided.hook.clone(),
                    reason: format!(
                        "the reply was blocked {} times; last reason: {}",
                        *n_blocks + 1,
                        decided.reason.clone().unwrap_or_default()
                    ),
                });
            }
            *n_blocks += 1;
            let reason = decided
                .reason
                .clone()
                .unwrap_or_else(|| "a hook blocked the reply: try again".to_owned());
            records.push(Record::User(UserMessage::text(reason)));
            again = true;
        }
        self.shared.append(state, records).await?;
        hook_points::announce(&self.ctx.sink, &decided.records);
        if let Some(err) = decided.operation_error(point) {
            return Err(err);
        }
        Ok(again)
    }

    /// A model turn with compaction around it: the threshold check before the call and, when
    /// the provider reports a context overflow, one compaction and one retry. The failed turn
    /// stored nothing, so there is nothing to drop from the log.
    async fn compacting_model_turn(
        &mut self,
        state: &mut SessionState,
        compaction: &mut LoopCompaction,
    ) -> Result<()> {
        let mut usage = Usage::default();
        let checked = self
            .compactor()
            .before_turn(state, compaction, &mut usage)
            .await;
        self.usage += usage;
        checked?;
        match self.model_turn(state).await {
            Err(FlueError::ContextOverflow { provider, message }) => {
                let mut usage = Usage::default();
                let compacted = self
                    .compactor()
                    .compact(state, CompactionReason::Overflow, &mut usage)
                    .await;
                self.usage += usage;
                if !compacted? {
                    return Err(FlueError::ContextOverflow { provider, message });
                }
                self.model_turn(state).await
            }
            other => other,
        }
    }

    /// Reads the tool sources again before a model turn, so the model sees their current
    /// tools from this turn on. Tools that went away are remembered: a later call to one gets
    /// an error that says so.
    async fn refresh_tools(&mut self) -> Result<()> {
        if !self.live_tools.is_live() {
            return Ok(());
        }
        or_cancel(self.live_tools.refresh(), &self.ctx.cancel).await?;
        let Some(tools) = self.live_tools.changed() else {
            return Ok(());
        };
        let tools = turn_tool_set(tools, &self.shared.harness.permissions, self.pausable)?;
        for name in self.tools.names() {
            if tools.get(name).is_none() {
                self.removed_tools.insert(name.clone());
            }
        }
        for name in tools.names() {
            self.removed_tools.remove(name);
        }
        self.tools = tools;
        Ok(())
    }

    fn compactor(&self) -> Compactor<'_> {
        Compactor {
            shared: self.shared,
            ctx: self.ctx,
            provider: self.provider,
            spec: self.spec,
            system: &self.system,
            tools: &self.tools,
        }
    }

    async fn model_turn(&mut self, state: &mut SessionState) -> Result<()> {
        let info = self.provider.model_info(&self.spec.model);
        let schemas = self.tools.schemas();
        let view = model_view(&state.records);
        let system = match self.turn_context.take() {
            Some(context) => format!("{}\n\n{context}", self.system),
            None => self.system.clone(),
        };
        let request = ModelRequest {
            model: &self.spec.model,
            system: &system,
            messages: &view,
            tools: &schemas,
            thinking: self.thinking,
            max_output_tokens: info.max_output_tokens,
        };
        let (sink, failed_usage) = self.ctx.sink.noting_failed_usage();
        let clock = WorkClock::start();
        let traced = spans::traced_turn(
            self.provider,
            self.spec,
            request,
            &sink,
            &self.ctx.cancel,
            &self.shared.harness.redactor,
        )
        .await;
        let model_turn = match traced {
            Ok(model_turn) => model_turn,
            Err(err) => {
                let usage = *failed_usage
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let timing = clock.stop();
                if let Err(store_err) = self.count_failed_turn(state, usage, &err, timing).await {
                    // The turn's own failure is what the caller needs to see.
                    tracing::warn!("cannot store the usage of a failed model turn: {store_err}");
                }
                return Err(err);
            }
        };
        let timing = clock.stop();
        let usage = model_turn.usage;
        self.usage += usage;
        let mut content = model_turn.content;
        rename_repeated_calls(&mut content, &state.index);
        let has_calls = content
            .iter()
            .any(|part| matches!(part, AssistantContent::ToolCall(_)));
        let refusal = refusal_text(&content);
        let stop_reason = model_turn.stop_reason;
        let message = AssistantMessage {
            content,
            model: self.spec.to_ref(),
            usage,
            stop_reason: stop_reason.clone(),
        };
        self.shared
            .append_timed(state, vec![Record::Assistant(message)], |_| Some(timing))
            .await?;
        self.ctx.sink.send(Event::TurnEnd {
            model: self.spec.to_ref(),
            usage,
            stop_reason: stop_reason.clone(),
        });
        if stop_reason.is_normal() || stop_reason == StopReason::Aborted {
            self.paused_turns = 0;
            return Ok(());
        }
        self.ctx.sink.send(Event::TurnStopped {
            model: self.spec.to_ref(),
            stop_reason: stop_reason.clone(),
            refusal: refusal.clone(),
        });
        if has_calls {
            // The calls run; the model sees their results and answers again.
            self.paused_turns = 0;
            return Ok(());
        }
        match stop_reason {
            // A cut-off answer is still the answer asked for; the event and the stored turn
            // say it was cut off.
            StopReason::MaxTokens => {
                self.paused_turns = 0;
                Ok(())
            }
            StopReason::PauseTurn if self.paused_turns < MAX_PAUSE_CONTINUATIONS => {
                self.paused_turns += 1;
                Ok(())
            }
            reason => Err(FlueError::ModelStopped {
                model: self.spec.to_ref().to_string(),
                reason,
                refusal,
            }),
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
        let hooked = hook_points::any(self.shared);
        // What each call's `PreToolUse` hooks decided (stored before any call runs).
        let mut pre: Vec<Option<hook_points::Decided>> = Vec::new();
        pre.resize_with(calls.len(), || None);
        let mut tripped: Option<FlueError> = None;
        if hooked {
            match &mode {
                RunMode::Classify => {
                    let mut stored_now = Vec::new();
                    let hook_state = self.hook_state(state);
                    for (call_idx, call) in calls.iter_mut().enumerate() {
                        if self.tools.get(&call.name).is_none()
                            || unparsed_arguments(call).is_some()
                        {
                            continue;
                        }
                        let point = HookPoint::PreToolUse;
                        let decided =
                            match hook_points::stored(&state.records, point, Some(&call.id)) {
                                Some(decided) => decided,
                                None => {
                                    let event = HookEvent::PreToolUse { call: call.clone() };
                                    let access = hook_access(hook_state.as_ref());
                                    hook_points::ask(
                                        self.shared,
                                        self.ctx,
                                        event,
                                        Some(&call.id),
                                        access,
                                    )
                                    .await
                                }
                            };
                        if let Some(input) = &decided.updated_input {
                            call.input = input.clone();
                        }
                        if tripped.is_none() {
                            tripped = decided.operation_error(point);
                        }
                        stored_now.extend(decided.records.iter().cloned());
                        pre[call_idx] = Some(decided);
                    }
                    stored_now.extend(hook_state.as_ref().and_then(crate::tool::ToolState::record));
                    self.shared.append(state, stored_now.clone()).await?;
                    hook_points::announce(&self.ctx.sink, &stored_now);
                }
                RunMode::Confirmed(_) => {
                    // Decided before the pause: the call runs with the input its hooks gave it.
                    for call in &mut calls {
                        if let Some(input) = hook_points::stored_input(&state.records, &call.id) {
                            call.input = input;
                        }
                    }
                }
            }
        }
        if let RunMode::Confirmed(action_ids) = &mode {
            let starts = action_ids
                .iter()
                .map(|action_id| {
                    Record::ActionStarted(ActionStarted {
                        action_id: action_id.clone(),
                    })
                })
                .collect();
            self.shared.append(state, starts).await?;
        }
        let harness = &self.shared.harness;
        let mut tool_ctx = ToolContext::new(Arc::clone(&harness.sandbox))
            .with_cancel(self.ctx.cancel.child_token())
            .with_instance_id(harness.instance_id.clone())
            .with_session(self.shared.key.session.clone())
            .with_cwd(self.shared.scope.cwd.clone())
            .with_agent(harness.agent.name.clone())
            .with_audit(Arc::clone(&harness.audit));
        tool_ctx.usage = Arc::clone(&self.delegated_usage);
        // The conversation's state lives in its root session: a task's calls have none.
        let tool_state = self.hook_state(state);
        if let Some(tool_state) = &tool_state {
            tool_ctx = tool_ctx.with_state(tool_state.clone());
        }
        // Live actions (MCP servers' questions) are listed and answered in the root session,
        // where a subagent's call's question names its task session.
        let mut root = self.shared.key.session.as_str();
        while let Some(parent) = task_session_parent(root) {
            root = parent;
        }
        let live_key = crate::store::SessionKey::new(self.shared.key.instance_id.clone(), root);
        let task_session =
            (root != self.shared.key.session).then(|| self.shared.key.session.clone());
        tool_ctx.insert_extension(crate::shared::Caller {
            harness: Arc::clone(harness),
            scope: Arc::clone(&self.shared.scope),
        });
        let mut results: Vec<Option<ToolResult>> = vec![None; calls.len()];
        // When each call began to run (or was answered without running), and how long it ran.
        let mut clocks: Vec<WorkClock> = vec![WorkClock::start(); calls.len()];
        let mut timings: Vec<Option<WorkTiming>> = vec![None; calls.len()];
        let mut spawned = vec![false; calls.len()];
        let mut waiting: Vec<Option<PendingAction>> = vec![None; calls.len()];
        // What each call emits with `emit_data`, stored with its result.
        let mut emitted = Vec::with_capacity(calls.len());
        let mut running = JoinSet::new();
        // Calls cleared to run, spawned once the attempts of replay-safe ones are stored.
        let mut to_run = Vec::with_capacity(calls.len());
        let mut attempts = Vec::new();
        let redactor = &harness.redactor;
        let tool_spans: Vec<Span> = calls
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
        for (call_idx, call) in calls.iter().enumerate() {
            let span = &tool_spans[call_idx];
            let Some(tool) = self.tools.get(&call.name).cloned() else {
                self.send_tool_start(call);
                let missing = if self.removed_tools.contains(&call.name) {
                    format!(
                        "the tool {:?} is no longer available: its source (such as an MCP \
                         server) removed it after offering it",
                        call.name
                    )
                } else {
                    format!("there is no tool named {:?}", call.name)
                };
                let error = ToolError::new(
                    "unknown_tool",
                    format!(
                        "{missing}; available tools: {}",
                        self.tools.names().join(", ")
                    ),
                );
                results[call_idx] = Some(self.finish_call(call, Err(error), span));
                continue;
            };
            if let Some(error) = unparsed_arguments(call) {
                self.send_tool_start(call);
                results[call_idx] = Some(self.finish_call(call, Err(error), span));
                continue;
            }
            let hook_verdict = pre[call_idx].as_ref().map(|decided| decided.verdict);
            if matches!(
                hook_verdict,
                Some(Verdict::Deny | Verdict::Block | Verdict::Tripwire)
            ) {
                self.send_tool_start(call);
                let reason = pre[call_idx]
                    .as_ref()
                    .and_then(|decided| decided.reason.clone())
                    .unwrap_or_else(|| "a hook refused this call".to_owned());
                let error = ToolError::new("hook_denied", reason);
                results[call_idx] = Some(self.finish_call(call, Err(error), span));
                continue;
            }
            if hook_verdict == Some(Verdict::Ask) && !tool.is_external() {
                let reason = pre[call_idx]
                    .as_ref()
                    .and_then(|decided| decided.reason.clone())
                    .unwrap_or_else(|| format!("a hook asks to confirm `{}`", call.name));
                match self.wait_or_refuse(call, ActionKind::Confirmation, reason, None) {
                    Gate::Wait(action) => waiting[call_idx] = Some(action),
                    Gate::Run | Gate::Refuse(_) => {
                        let error = ToolError::new(
                            "permission_required",
                            "a hook asks to confirm this call, and a task cannot pause to ask",
                        );
                        self.send_tool_start(call);
                        results[call_idx] = Some(self.finish_call(call, Err(error), span));
                    }
                }
                continue;
            }
            if matches!(mode, RunMode::Classify) {
                match self.gate(call, &tool) {
                    Gate::Run => {}
                    Gate::Wait(action) => {
                        waiting[call_idx] = Some(action);
                        continue;
                    }
                    Gate::Refuse(error) => {
                        self.send_tool_start(call);
                        results[call_idx] = Some(self.finish_call(call, Err(error), span));
                        continue;
                    }
                }
            }
            self.send_tool_start(call);
            let input = call.input.clone();
            let (mut ctx, emitter) = tool_ctx.for_call(&call.id, &self.ctx.sink, &harness.redactor);
            ctx.insert_extension(crate::elicitation::LiveLog {
                store: Arc::clone(&harness.store),
                key: live_key.clone(),
                task_session: task_session.clone(),
                tool_name: call.name.clone(),
                redactor: harness.redactor.clone(),
                wake: harness.live_wake.subscribe(),
            });
            emitted.push(emitter);
            if tool.meta().interrupt == InterruptBehavior::Complete {
                // A short all-or-nothing call does not see the abort: it finishes within the
                // grace period below and its real result is stored.
                ctx.cancel = CancellationToken::new();
            }
            ctx.idempotency_key = crate::tool::idempotency_key(
                &harness.instance_id,
                &self.shared.key.session,
                &call.id,
            );
            ctx.attempt = state.index.attempts(&call.id) + 1;
            if let Some(tool_state) = &tool_state {
                ctx = ctx.with_state(tool_state.for_call(&call.name, &call.id));
            }
            // Runs of tools that only read leave nothing to count: no record for them.
            if tool.meta().replay_safe && !tool.meta().read_only {
                attempts.push(Record::ToolAttempt(ToolAttempt {
                    call_id: call.id.clone(),
                    tool_name: call.name.clone(),
                    attempt: ctx.attempt,
                    idempotency_key: ctx.idempotency_key.clone(),
                }));
            }
            to_run.push((call_idx, tool, input, ctx, span.clone()));
        }
        // Every attempt at a replay-safe call is in the log before it runs.
        self.shared.append(state, attempts).await?;
        for (call_idx, tool, input, ctx, span) in to_run {
            clocks[call_idx] = WorkClock::start();
            spawned[call_idx] = true;
            running.spawn(async move { (call_idx, tool.call(input, &ctx).await) }.instrument(span));
        }
        let aborted = loop {
            tokio::select! {
                biased;
                () = self.ctx.cancel.cancelled() => break true,
                joined = running.join_next() => match joined {
                    None => break false,
                    Some(Ok((call_idx, output))) => {
                        let call = &calls[call_idx];
                        timings[call_idx] = Some(clocks[call_idx].stop());
                        match self.paused_task(call, &output) {
                            Some(session) => waiting[call_idx] = Some(self.task_action(call, session)),
                            None => results[call_idx] = Some(self.finish_call(call, output, &tool_spans[call_idx])),
                        }
                    }
                    // A panicking tool keeps no result; it is answered with `tool_panicked` below.
                    Some(Err(_panicked)) => {}
                },
            }
        };
        if aborted {
            // Tools saw the cancel through their token; give them a moment to stop cleanly.
            let _ = tokio::time::timeout(ABORT_GRACE, async {
                while let Some(joined) = running.join_next().await {
                    if let Ok((call_idx, output)) = joined {
                        timings[call_idx] = Some(clocks[call_idx].stop());
                        results[call_idx] =
                            Some(self.finish_call(&calls[call_idx], output, &tool_spans[call_idx]));
                    }
                }
            })
            .await;
            running.abort_all();
        }
        for (span, result) in tool_spans.iter().zip(&results) {
            if result.is_none() {
                span.record(
                    "error.type",
                    if aborted { "aborted" } else { "tool_panicked" },
                );
            }
        }
        let mut post_records = Vec::new();
        if hooked && !aborted {
            for (call_idx, (call, slot)) in calls.iter().zip(results.iter_mut()).enumerate() {
                let Some(result) = slot else { continue };
                if let Some(context) = pre[call_idx]
                    .as_ref()
                    .and_then(hook_points::Decided::context_text)
                {
                    annotate(result, &context);
                }
                let hook_denied = result.error_kind.as_deref() == Some("hook_denied");
                if hook_denied || result.error_kind.as_deref() == Some("unknown_tool") {
                    continue;
                }
                let point = HookPoint::PostToolUse;
                let event = HookEvent::PostToolUse {
                    call: call.clone(),
                    result: result.clone(),
                };
                // Their writes join the batch's: stored with its results, in one record.
                let access = hook_access(tool_state.as_ref());
                let decided =
                    hook_points::ask(self.shared, self.ctx, event, Some(&call.id), access).await;
                if let Some(text) = &decided.replacement {
                    result.content.clone_from(text);
                }
                if decided.failed {
                    result.is_error = true;
                    result.error_kind = Some("hook_failed".to_owned());
                }
                if decided.verdict == Verdict::Block
                    && let Some(reason) = &decided.reason
                {
                    annotate(result, reason);
                }
                if let Some(context) = decided.context_text() {
                    annotate(result, &context);
                }
                if tripped.is_none() {
                    tripped = decided.operation_error(point);
                }
                post_records.extend(decided.records);
            }
        }
        // A call that never ran (refused, unknown) took no time; one cut short ran until now.
        let timing_of: std::collections::HashMap<&str, WorkTiming> = (0..calls.len())
            .map(|idx| {
                let timing = match (timings[idx], spawned[idx]) {
                    (Some(timing), _) => timing,
                    (None, true) => clocks[idx].stop(),
                    (None, false) => clocks[idx].at_start(),
                };
                (calls[idx].id.as_str(), timing)
            })
            .collect();
        let mut records: Vec<Record> = Vec::with_capacity(calls.len());
        let mut pending: Vec<PendingAction> = Vec::new();
        for ((call, result), wait) in calls.iter().zip(results).zip(waiting) {
            match (result, wait) {
                (Some(result), _) => records.push(Record::ToolResult(result)),
                // After an abort nothing waits: the call is answered like any unfinished one.
                (None, Some(action)) if !aborted => pending.push(action),
                (None, _) => {
                    let error = if aborted {
                        ToolError::new(
                            "aborted",
                            "the operation was aborted before this call finished",
                        )
                    } else {
                        ToolError::new(
                            "tool_panicked",
                            "the tool failed unexpectedly (it panicked)",
                        )
                    };
                    records.push(Record::ToolResult(error_result(call, &error)));
                }
            }
        }
        crate::tool::attach_emitted(&mut records, &emitted);
        let sampled = std::mem::take(
            &mut *tool_ctx
                .sampling
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let redactor = &self.shared.harness.redactor;
        records.extend(sampled.into_iter().map(|mut exchange| {
            if let Some(system) = &mut exchange.system {
                redactor.redact_in_place(system);
            }
            for message in &mut exchange.messages {
                redactor.redact_in_place(&mut message.text);
            }
            if let Some(response) = &mut exchange.response {
                redactor.redact_in_place(response);
            }
            if let Some(error) = &mut exchange.error {
                redactor.redact_in_place(error);
            }
            Record::Sampling(exchange)
        }));
        records.extend(pending.iter().cloned().map(Record::ActionRequired));
        records.extend(post_records.iter().cloned());
        // The calls' change of the state is stored with their results, or not at all.
        records.extend(tool_state.as_ref().and_then(crate::tool::ToolState::record));
        self.shared
            .append_timed(state, records, |record| match record {
                Record::ToolResult(result) => timing_of.get(result.call_id.as_str()).copied(),
                _ => None,
            })
            .await?;
        hook_points::announce(&self.ctx.sink, &post_records);
        for action in pending {
            if action.kind == ActionKind::Task {
                // The task's own actions were announced as it paused.
                continue;
            }
            if action.kind == ActionKind::CustomTool {
                self.ctx.sink.send(Event::CustomToolUse {
                    action_id: action.action_id.clone(),
                    call_id: action.call_id.clone(),
                    name: action.tool_name.clone(),
                    input: action.input.clone(),
                });
            }
            self.ctx.sink.send(Event::ActionRequired { action });
        }
        if aborted {
            return Err(FlueError::Aborted);
        }
        if let Some(err) = tripped {
            return Err(err);
        }
        Ok(())
    }

    /// Resumes the paused tasks among `actions` from their logs. A task that waits again
    /// lists its own actions in place of its `task` call; one that ended answers its call (an
    /// [`ActionDecision::Result`] stored in this log). Returns what still waits and whether
    /// any task ended (then the loop goes on).
    async fn resume_tasks(
        &mut self,
        state: &mut SessionState,
        actions: Vec<PendingAction>,
    ) -> Result<(Vec<PendingAction>, bool)> {
        let mut waiting = Vec::new();
        let mut answers = Vec::new();
        for action in actions {
            let (ActionKind::Task, Some((_, resume))) = (action.kind, &self.resume_task) else {
                waiting.push(action);
                continue;
            };
            match resume(action.clone(), self.ctx.cancel.clone()).await? {
                TaskResumed::Waiting(nested) => waiting.extend(nested),
                TaskResumed::Answered(output) => {
                    let (value, is_error) = match output {
                        Ok(value) => (value, false),
                        Err(error) => (Value::String(error.model_text()), true),
                    };
                    answers.push(Record::ActionResolved(ActionResolution::of(
                        &action,
                        ActionDecision::Result { value, is_error },
                    )));
                }
            }
        }
        let settled = !answers.is_empty();
        self.shared.append(state, answers).await?;
        Ok((waiting, settled))
    }

    /// The action of a `task` call whose task paused in `session`.
    fn task_action(&self, call: &ToolCall, session: String) -> PendingAction {
        PendingAction {
            action_id: action_id(&call.id),
            call_id: call.id.clone(),
            tool_name: call.name.clone(),
            input: call.input.clone(),
            kind: ActionKind::Task,
            reason: format!("the task in session `{session}` waits for decisions"),
            session: Some(session),
            output_schema: None,
            idempotency_key: None,
        }
    }

    /// Whether a finished call is the delegation tool reporting that its task paused.
    fn paused_task(
        &self,
        call: &ToolCall,
        output: &std::result::Result<Value, ToolError>,
    ) -> Option<String> {
        match output {
            Err(error)
                if error.kind == TASK_PAUSED
                    && self
                        .resume_task
                        .as_ref()
                        .is_some_and(|(name, _)| *name == call.name) =>
            {
                Some(error.message.clone())
            }
            _ => None,
        }
    }

    fn send_tool_start(&self, call: &ToolCall) {
        self.ctx.sink.send(Event::ToolStart {
            call_id: call.id.clone(),
            name: call.name.clone(),
            input: call.input.clone(),
        });
    }

    /// Whether a call of a new turn runs now, waits for a decision, or is refused (a call
    /// that would wait in a task session, which cannot pause).
    fn gate(&self, call: &ToolCall, tool: &ToolDefinition) -> Gate {
        let meta = tool.meta();
        let (kind, reason) = if tool.is_external() {
            (
                ActionKind::CustomTool,
                format!("`{}` is a custom tool: the application runs it", call.name),
            )
        } else {
            let (permission, rule) = self
                .shared
                .harness
                .permissions
                .decide(&call.name, meta.permission);
            if permission == Permission::AlwaysAllow {
                return Gate::Run;
            }
            let reason = match rule {
                Some(rule) => format!(
                    "`{}` needs confirmation (rule `{}: always_ask` from {})",
                    call.name,
                    rule.pattern,
                    source_name(rule.source)
                ),
                None => format!("`{}` needs confirmation (the tool's own policy)", call.name),
            };
            (ActionKind::Confirmation, reason)
        };
        let output_schema = tool
            .is_external()
            .then(|| tool.output_schema().cloned())
            .flatten();
        self.wait_or_refuse(call, kind, reason, output_schema)
    }

    /// A call that must wait for a decision: its pending action (with the output schema of a
    /// custom tool's result), or a refusal in a task session that cannot pause.
    fn wait_or_refuse(
        &self,
        call: &ToolCall,
        kind: ActionKind,
        reason: String,
        output_schema: Option<Value>,
    ) -> Gate {
        if !self.pausable {
            return Gate::Refuse(ToolError::new(
                "permission_required",
                format!(
                    "{reason}, and a task cannot pause to ask; do the work without this tool \
                     or report back so the parent conversation can run it"
                ),
            ));
        }
        // In a task session the id also names the session: ids stay unique across the
        // conversation, where the root lists them all.
        let action_id = match self.shared.depth {
            0 => action_id(&call.id),
            _ => {
                let session = &self.shared.key.session;
                let tail = session
                    .get(session.len().saturating_sub(8)..)
                    .unwrap_or(session);
                format!("{}_{tail}", action_id(&call.id))
            }
        };
        Gate::Wait(PendingAction {
            action_id,
            call_id: call.id.clone(),
            tool_name: call.name.clone(),
            input: call.input.clone(),
            kind,
            reason,
            session: (self.shared.depth > 0).then(|| self.shared.key.session.clone()),
            output_schema,
            idempotency_key: Some(crate::tool::idempotency_key(
                &self.shared.harness.instance_id,
                &self.shared.key.session,
                &call.id,
            )),
        })
    }

    /// Appends results that decisions (or a crash) settled, as a tool run would: redacted,
    /// with their end events.
    async fn answer(&mut self, state: &mut SessionState, results: Vec<ToolResult>) -> Result<()> {
        let mut records = Vec::with_capacity(results.len());
        for mut result in results {
            self.shared
                .harness
                .redactor
                .redact_in_place(&mut result.content);
            self.ctx.sink.send(Event::ToolEnd {
                call_id: result.call_id.clone(),
                name: result.tool_name.clone(),
                is_error: result.is_error,
                output: result.content.clone(),
            });
            records.push(Record::ToolResult(result));
        }
        self.shared.append(state, records).await
    }

    fn finish_call(
        &self,
        call: &ToolCall,
        output: std::result::Result<Value, ToolError>,
        span: &Span,
    ) -> ToolResult {
        let mut result = match output {
            Ok(value) => ToolResult {
                call_id: call.id.clone(),
                tool_name: call.name.clone(),
                content: render_output(&value),
                is_error: false,
                error_kind: None,
                data: Vec::new(),
            },
            Err(error) => error_result(call, &error),
        };
        // The one place tool output enters the log, the events and the model's view.
        self.shared
            .harness
            .redactor
            .redact_in_place(&mut result.content);
        if !span.is_disabled() {
            if result.is_error {
                span.record(
                    "error.type",
                    result.error_kind.as_deref().unwrap_or("tool_error"),
                );
            }
            span.record("gen_ai.tool.call.result", result.content.as_str());
        }
        self.ctx.sink.send(Event::ToolEnd {
            call_id: call.id.clone(),
            name: call.name.clone(),
            is_error: result.is_error,
            output: result.content.clone(),
        });
        result
    }

    fn take_result(&self) -> Option<ResultOutcome> {
        self.result_slot
            .lock()
            .ok()
            .and_then(|mut slot| slot.take())
    }

    /// Counts and stores the usage a failed turn reported (a provider's `message_start`
    /// before a mid-stream error, a cut stream, retried attempts): priced at the model's price
    /// when it has no cost, added to the operation's usage, stored as a `failed_turn` record.
    async fn count_failed_turn(
        &mut self,
        state: &mut SessionState,
        mut usage: Usage,
        err: &FlueError,
        timing: WorkTiming,
    ) -> Result<()> {
        if usage == Usage::default() {
            return Ok(());
        }
        if usage.cost_usd.is_none() {
            let price = self.provider.model_info(&self.spec.model).price;
            usage.cost_usd = price.map(|price| price.cost(&usage));
        }
        self.usage += usage;
        let failed = FailedTurn {
            model: self.spec.to_ref(),
            usage,
            error_kind: err.kind().to_owned(),
            message: err.to_string(),
        };
        self.shared
            .append_timed(state, vec![Record::FailedTurn(failed)], |_| Some(timing))
            .await
    }

    /// The budgets before a model call, `turns` calls made by this operation so far.
    /// The conversation's state for this session's hooks and tool calls: a handle over the
    /// stored document, or `None` in a task session (the state lives in the root session).
    fn hook_state(&self, state: &SessionState) -> Option<crate::tool::ToolState> {
        (self.shared.depth == 0).then(|| session_tool_state(state))
    }

    fn check_budget(&self, turns: u32) -> Result<()> {
        match &self.budget {
            Some(budget) => budget.check(turns, &self.spent()),
            None => Ok(()),
        }
    }

    /// What the operation spent so far: its turns (failed ones included) and its tasks.
    fn spent(&self) -> Usage {
        let mut usage = self.usage;
        if let Ok(delegated) = self.delegated_usage.lock() {
            usage += *delegated;
        }
        usage
    }

    fn finish_structured(
        &self,
        state: &SessionState,
        outcome: ResultOutcome,
    ) -> Result<PromptResponse> {
        match outcome {
            ResultOutcome::Finished(data) => Ok(self.response(state, Some(data))),
            ResultOutcome::GaveUp(reason) => Err(FlueError::ResultUnavailable {
                reason: format!("the model gave up: {reason}"),
            }),
        }
    }

    fn response(&self, state: &SessionState, data: Option<Value>) -> PromptResponse {
        let text = reply_text(&state.records);
        PromptResponse {
            text,
            data,
            usage: self.spent(),
            model: self.spec.to_ref(),
            pending_actions: Vec::new(),
        }
    }
}

/// The final reply: the last assistant turn's text, or what a `Stop` hook stored after it
/// replaced it with.
fn reply_text(records: &[Record]) -> String {
    let mut replaced = None;
    for record in records.iter().rev() {
        match record {
            Record::Hook(hook)
                if replaced.is_none()
                    && (hook.event == HookPoint::Stop.name()
                        || hook.event == HookPoint::SubagentStop.name()) =>
            {
                replaced.clone_from(&hook.replacement);
            }
            Record::Assistant(message) => return replaced.unwrap_or_else(|| message.text()),
            _ => {}
        }
    }
    String::new()
}

/// What the `SessionStart` and `UserPromptSubmit` hooks made of an arriving message.
struct PromptHooks {
    /// Their decisions, to store before the message.
    records: Vec<Record>,
    /// The error that ends the operation instead (a tripped guardrail, a failed hook).
    error: Option<FlueError>,
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

/// Asks the `SessionStart` hooks (when the session has no turn yet) and the
/// `UserPromptSubmit` hooks about `message`, or reads their stored decisions; applies a
/// replaced prompt and added context to `message`.
async fn prompt_hooks(
    shared: &SessionShared,
    ctx: &OperationContext,
    log: &[Record],
    message: &mut UserMessage,
    state: Option<&crate::tool::ToolState>,
) -> PromptHooks {
    let mut records = Vec::new();
    let mut context = Vec::new();
    let mut points = Vec::new();
    if log.iter().all(|record| matches!(record, Record::Hook(_))) {
        points.push(HookEvent::SessionStart {
            source: "startup".to_owned(),
        });
    }
    points.push(HookEvent::UserPromptSubmit {
        prompt: message.joined_text(),
    });
    for event in points {
        let point = event.point();
        // A prompt's decision is found again by the prompt it was about: a new message after
        // a blocked one is asked about afresh.
        let subject = match &event {
            HookEvent::UserPromptSubmit { prompt } => Some(hook_points::prompt_subject(prompt)),
            _ => None,
        };
        let decided = match hook_points::stored(log, point, subject.as_deref()) {
            Some(decided) => decided,
            None => {
                let access = hook_access(state);
                hook_points::ask(shared, ctx, event, subject.as_deref(), access).await
            }
        };
        records.extend(decided.records.iter().cloned());
        if let Some(error) = decided.operation_error(point) {
            return PromptHooks {
                records,
                error: Some(error),
            };
        }
        if let Some(text) = &decided.replacement {
            message
                .content
                .retain(|part| !matches!(part, crate::record::UserContent::Text { .. }));
            message
                .content
                .insert(0, crate::record::UserContent::Text { text: text.clone() });
        }
        context.extend(decided.context_text());
    }
    if !context.is_empty() {
        message.content.push(crate::record::UserContent::Text {
            text: context.join("\n"),
        });
    }
    PromptHooks {
        records,
        error: None,
    }
}

/// Calls a crash (or new input) left unanswered are answered `interrupted`; one a
/// `PreToolUse` hook had refused before is answered with that refusal instead, as it would
/// have been: the stored decision stands and its hook is not asked again.
fn denied_before_the_crash(log: &[Record], repairs: &mut [Record]) {
    for record in repairs {
        let Record::ToolResult(result) = record else {
            continue;
        };
        if result.error_kind.as_deref() != Some("interrupted") {
            continue;
        }
        let Some(decided) = hook_points::stored(log, HookPoint::PreToolUse, Some(&result.call_id))
        else {
            continue;
        };
        if matches!(
            decided.verdict,
            Verdict::Deny | Verdict::Block | Verdict::Tripwire
        ) {
            let reason = decided
                .reason
                .unwrap_or_else(|| "a hook refused this call".to_owned());
            result.content = ToolError::new("hook_denied", reason).model_text();
            result.error_kind = Some("hook_denied".to_owned());
        }
    }
}

/// Adds hook text to a tool result the model sees.
fn annotate(result: &mut ToolResult, text: &str) {
    if !result.content.is_empty() {
        result.content.push_str("\n\n");
    }
    result.content.push_str(text);
}

/// Whether the last record is an assistant turn the provider paused (`pause_turn`).
fn last_turn_paused(records: &[Record]) -> bool {
    matches!(
        records.last(),
        Some(Record::Assistant(message)) if message.stop_reason == StopReason::PauseTurn
    )
}

/// The refusal parts of a turn as one text, when it has any.
fn refusal_text(content: &[AssistantContent]) -> Option<String> {
    let parts: Vec<&str> = content
        .iter()
        .filter_map(|part| match part {
            AssistantContent::Refusal { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join("\n"))
}

/// The tool set of a turn: `tools`, and `permissions_check` when some of them pause.
fn turn_tool_set(
    tools: Vec<ToolDefinition>,
    policy: &crate::permission::PermissionPolicy,
    pausable: bool,
) -> Result<ToolSet> {
    let check = permissions_check_tool(&tools, policy, pausable)?;
    ToolSet::assemble(tools.into_iter().chain(check))
}

/// The `permissions_check` tool of a call whose tools include some that wait for a decision
/// (none otherwise, and none in tasks, which cannot pause): a read-only preflight that tells
/// the model which tools will pause for a confirmation or the application before it calls
/// them.
fn permissions_check_tool(
    tools: &[ToolDefinition],
    policy: &crate::permission::PermissionPolicy,
    pausable: bool,
) -> Result<Option<ToolDefinition>> {
    #[derive(Deserialize, schemars::JsonSchema)]
    struct Input {
        /// Tool names to check; omit to list every tool that pauses.
        tools: Option<Vec<String>>,
    }
    let verdicts: Vec<(String, &'static str, String)> = tools
        .iter()
        .map(|tool| {
            if tool.is_external() {
                return (
                    tool.name().to_owned(),
                    "application",
                    "a custom tool: the application runs it and supplies the result".to_owned(),
                );
            }
            let (permission, rule) = policy.decide(tool.name(), tool.meta().permission);
            let why = match rule {
                Some(rule) => format!("rule `{}` from {}", rule.pattern, source_name(rule.source)),
                None => "the tool's own default".to_owned(),
            };
            let verdict = match permission {
                Permission::AlwaysAsk => "confirmation",
                Permission::AlwaysAllow => "runs",
            };
            (tool.name().to_owned(), verdict, why)
        })
        .collect();
    if !pausable || verdicts.iter().all(|(_, verdict, _)| *verdict == "runs") {
        return Ok(None);
    }
    let verdicts = Arc::new(verdicts);
    let tool = ToolDefinition::from_fn(
        PERMISSIONS_CHECK_TOOL,
        "Tell which of your tools pause before running: `confirmation` (a person must allow \
         the call first; the conversation waits) or `application` (the application runs it \
         and answers later). Use it before a call you would rather not leave waiting.",
        move |input: Input, _ctx: ToolContext| {
            let verdicts = Arc::clone(&verdicts);
            async move {
                let listed: Vec<Value> = verdicts
                    .iter()
                    .filter(|(name, verdict, _)| match &input.tools {
                        Some(names) => names.iter().any(|wanted| wanted == name),
                        None => *verdict != "runs",
                    })
                    .map(|(name, verdict, why)| json!({"tool": name, "when_called": verdict, "why": why}))
                    .collect();
                Ok::<_, ToolError>(json!({ "tools": listed }))
            }
        },
    )?;
    Ok(Some(tool.with_meta(ToolMeta {
        ownership: Ownership::Managed,
        read_only: true,
        ..ToolMeta::default()
    })))
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

fn source_name(source: PermissionSource) -> &'static str {
    match source {
        PermissionSource::Defaults => "the workspace defaults",
        PermissionSource::AgentFile => "the agent file",
        PermissionSource::Code => "the agent's configuration",
    }
}

/// Providers keep arguments that are not valid JSON as a JSON string; such a call is answered
/// with `invalid_input` quoting them, so the model can retry.
fn unparsed_arguments(call: &ToolCall) -> Option<ToolError> {
    const QUOTED_CHARS: usize = 2000;
    let Value::String(raw) = &call.input else {
        return None;
    };
    let quoted: String = raw.chars().take(QUOTED_CHARS).collect();
    Some(ToolError::invalid_input(format!(
        "the arguments for {} are not a JSON object: {quoted}. Send the arguments as one JSON \
         object that matches the tool's schema and retry.",
        call.name
    )))
}

/// How a structured-result operation ended from the model's side.
enum ResultOutcome {
    Finished(Value),
    GaveUp(String),
}

/// The `finish` and `give_up` tools of a structured-result operation.
fn result_tools(
    schema: &Value,
    slot: &Arc<Mutex<Option<ResultOutcome>>>,
) -> Result<Vec<ToolDefinition>> {
    let is_object = schema.get("type").and_then(Value::as_str) == Some("object");
    let input_schema = if is_object {
        schema.clone()
    } else {
        json!({"type": "object", "properties": {"result": schema}, "required": ["result"]})
    };
    let meta = ToolMeta {
        ownership: Ownership::Managed,
        read_only: true,
        ..ToolMeta::default()
    };
    let finish_slot = Arc::clone(slot);
    let finish = ToolDefinition::new(
        FINISH_TOOL,
        "Deliver the final result of this task. Call it exactly once, when you are done, with \
         input that matches the schema; the conversation ends when it is accepted.",
        input_schema,
        Arc::new(SlotTool {
            fill: move |input: Value| {
                let data = if is_object {
                    input
                } else {
                    input.get("result").cloned().unwrap_or(Value::Null)
                };
                ResultOutcome::Finished(data)
            },
            slot: finish_slot,
            reply: "Result accepted.",
        }),
    )?
    .with_meta(meta);
    let give_up = ToolDefinition::new(
        GIVE_UP_TOOL,
        "Call this only if you cannot produce the requested result; explain why in `reason`.",
        json!({"type": "object", "properties": {"reason": {"type": "string"}}, "required": ["reason"]}),
        Arc::new(SlotTool {
            fill: |input: Value| {
                #[derive(Deserialize)]
                struct GiveUp {
                    reason: String,
                }
                let reason = serde_json::from_value::<GiveUp>(input)
                    .map_or_else(|_| "no reason given".to_owned(), |give_up| give_up.reason);
                ResultOutcome::GaveUp(reason)
            },
            slot: Arc::clone(slot),
            reply: "Understood.",
        }),
    )?
    .with_meta(meta);
    Ok(vec![finish, give_up])
}

/// A tool that stores its (validated) input into the operation's result slot.
struct SlotTool<F> {
    fill: F,
    slot: Arc<Mutex<Option<ResultOutcome>>>,
    reply: &'static str,
}

impl<F> crate::tool::Tool for SlotTool<F>
where
    F: Fn(Value) -> ResultOutcome + Send + Sync,
{
    fn run<'a>(
        &'a self,
        input: Value,
        _ctx: &'a ToolContext,
    ) -> crate::util::BoxFuture<'a, std::result::Result<Value, ToolError>> {
        Box::pin(async move {
            let outcome = (self.fill)(input);
            let mut slot = self.slot.lock().map_err(|_| {
                ToolError::new("internal", "the result slot is unavailable; try again")
            })?;
            slot.get_or_insert(outcome);
            Ok(Value::String(self.reply.to_owned()))
        })
    }
}
