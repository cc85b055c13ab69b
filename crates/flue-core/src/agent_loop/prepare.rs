//! Preparing an operation: its model and tools, then the opening writes (decisions, the
//! repair of calls an earlier operation left unanswered, the seed state, the prompt's hooks,
//! the message) and its budget; and, when it ends, the `SessionEnd` hooks.

use std::sync::{Arc, Mutex};

use flue_protocol::ThinkingLevel;
use flue_protocol::event::Event;
use flue_protocol::record::{ActionResolution, Record, StateChange, Usage, UserMessage};

use super::tools::{ResultOutcome, offered_tools, result_tools, turn_tool_set};
use super::{
    Delegation, Opening, ResumeTask, call_model, call_thinking, hook_access, session_tool_state,
};
use crate::budget::BudgetCheck;
use crate::error::{FlueError, Result};
use crate::hook::{HookEvent, HookPoint, Verdict};
use crate::hook_points;
use crate::model::{ModelProvider, ModelSpec};
use crate::operation::{OperationContext, PromptOptions, PromptResponse};
use crate::overlay::CallOverlay;
use crate::shared::{SessionShared, SessionState};
use crate::steps::{check_decision, interrupted_results_except, results_before_input_in};
use crate::tool::{LiveTools, ToolError, ToolSet};

/// What an operation runs with, worked out before its session is locked.
pub(super) struct Prepared {
    pub(super) provider: Arc<dyn ModelProvider>,
    pub(super) spec: ModelSpec,
    pub(super) thinking: ThinkingLevel,
    /// The tools of the first turn.
    pub(super) tools: ToolSet,
    pub(super) live_tools: LiveTools,
    pub(super) result_slot: Arc<Mutex<Option<ResultOutcome>>>,
    pub(super) delegated_usage: Arc<Mutex<Usage>>,
    pub(super) resume_task: Option<(String, ResumeTask)>,
    /// Whether calls may pause here (the root, or a task run by a `task` call).
    pub(super) pausable: bool,
}

/// Resolves the call's model (checking it when it is not the agent's, and that it takes the
/// message's images) and assembles the tools of its first turn.
pub(super) async fn prepare(
    shared: &SessionShared,
    opening: &Opening,
    options: &PromptOptions,
    overlay: &CallOverlay,
    delegation: Option<Delegation>,
) -> Result<Prepared> {
    let harness = &shared.harness;
    let scope = &shared.scope;
    let model_spec = call_model(options, overlay, scope)?;
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
    let thinking = call_thinking(options, overlay, scope);
    let result_slot = Arc::new(Mutex::new(None));
    let (delegated_usage, task, resume_task, background) = match delegation {
        Some(delegation) => {
            let name = delegation.tool.name().to_owned();
            let resume = Some((name, delegation.resume));
            let tool = Some(delegation.tool);
            (delegation.usage, tool, resume, delegation.background)
        }
        None => (
            Arc::new(Mutex::new(Usage::default())),
            None,
            None,
            Vec::new(),
        ),
    };
    let pausable = shared.depth == 0 || opening.pausable_task;
    let mut result = match &options.result {
        Some(schema) => result_tools(schema, &result_slot)?,
        None => Vec::new(),
    };
    result.extend(background);
    let mut live_tools = offered_tools(scope, options.tools.clone(), task, result)?;
    let tools = turn_tool_set(live_tools.merged(), &harness.permissions, pausable)?;
    Ok(Prepared {
        provider,
        spec,
        thinking,
        tools,
        live_tools,
        result_slot,
        delegated_usage,
        resume_task,
        pausable,
    })
}

/// The opening writes, in one append after the decisions: the answers to calls an earlier
/// operation left unanswered, the seed state, the prompt hooks' decisions and writes, and the
/// message. Returns the budgets the operation's model calls are checked against.
pub(super) async fn open(
    shared: &SessionShared,
    state: &mut SessionState,
    opening: Opening,
    tools: &ToolSet,
    ctx: &OperationContext,
) -> Result<Option<BudgetCheck>> {
    shared.sync(state).await?;
    // Live actions (MCP servers' questions) left pending by a call that no longer runs.
    let orphaned = crate::steps::orphaned_live_actions_in(&state.index);
    shared.append(state, orphaned).await?;
    apply_decisions(shared, state, &opening.decisions, ctx).await?;
    let mut records = repairs(shared, state, opening.message.is_some(), tools)?;
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
        None => session_tool_state(state),
    });
    if let Some(message) = &mut message
        && hook_points::any(shared)
    {
        let prompt_hooks =
            prompt_hooks(shared, ctx, &state.records, message, hook_state.as_ref()).await;
        hook_records = prompt_hooks.records;
        if let Some(err) = prompt_hooks.error {
            records.extend(hook_records.iter().cloned());
            shared.append(state, records).await?;
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
    shared.append(state, records).await?;
    hook_points::announce(&ctx.sink, &hook_records);
    // Budgets bind a root session's operations: a submission (or a library call) and its
    // conversation. A task's spending counts in its root's figures.
    if shared.depth != 0 {
        return Ok(None);
    }
    let budget = ctx
        .budget
        .unwrap_or_default()
        .or(shared.harness.agent.budget);
    let opened_at = opens.then(|| state.records.len().saturating_sub(1));
    BudgetCheck::start(&shared.harness, &state.records, opened_at, budget).await
}

/// The answers to calls an earlier operation left unanswered. New input (`opens`) is refused
/// while actions wait for a decision.
fn repairs(
    shared: &SessionShared,
    state: &SessionState,
    opens: bool,
    tools: &ToolSet,
) -> Result<Vec<Record>> {
    let pending = state.index.pending_actions();
    let mut records: Vec<Record> = match opens {
        true if !pending.is_empty() => {
            return Err(FlueError::ActionsPending {
                session: shared.key.session.clone(),
                actions: pending.into_iter().map(|action| action.action_id).collect(),
            });
        }
        true => results_before_input_in(&state.records, &state.index)
            .into_iter()
            .map(Record::ToolResult)
            .collect(),
        // After a crash: calls of replay-safe tools stay unanswered and run again (with the
        // same idempotency key); every other cut-off call is answered `interrupted`.
        false => interrupted_results_except(&state.records, |call| {
            tools
                .get(&call.name)
                .is_some_and(|tool| tool.meta().replay_safe)
        }),
    };
    if hook_points::any(shared) {
        denied_before_the_crash(&state.records, &mut records);
    }
    Ok(records)
}

/// Asks the `SessionEnd` hooks how the operation ended. Nothing is left to decide: the
/// decisions are reported, not stored.
pub(super) async fn session_end_hooks(
    shared: &SessionShared,
    ctx: &OperationContext,
    state: &SessionState,
    driven: &Result<PromptResponse>,
) {
    let reason = match driven {
        Ok(response) if !response.pending_actions.is_empty() => "requires_action",
        Ok(_) => "completed",
        Err(FlueError::Aborted) => "aborted",
        Err(_) => "failed",
    };
    let event = HookEvent::SessionEnd {
        reason: reason.to_owned(),
    };
    let access = if shared.depth == 0 {
        hook_points::StateAccess::Read(state.index.state().map(|(value, _)| value))
    } else {
        hook_points::StateAccess::None
    };
    let decided = hook_points::ask(shared, ctx, event, None, access, &state.records).await;
    hook_points::announce(&ctx.sink, &decided.records);
    // The root session's pause is the one a person sees (a task's pause pauses it too).
    if shared.depth == 0
        && let Ok(response) = driven
        && let Some(event) = notification(&response.pending_actions)
    {
        let access = hook_points::StateAccess::None;
        let decided = hook_points::ask(shared, ctx, event, None, access, &state.records).await;
        hook_points::announce(&ctx.sink, &decided.records);
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

/// The `Notification` of an operation that paused for a person: a confirmation (of a call of
/// its own or a subagent's) or a question. A custom tool's call waits for the application,
/// not a person: no notification.
fn notification(pending: &[flue_protocol::record::PendingAction]) -> Option<HookEvent> {
    use flue_protocol::record::ActionKind;
    let mut asked: Vec<String> = Vec::new();
    let mut question = None;
    for action in pending {
        match action.kind {
            ActionKind::Confirmation => {
                asked.push(crate::hook::claude_tool_name(&action.tool_name).to_owned());
            }
            ActionKind::Task => asked.push("a subagent's tool".to_owned()),
            ActionKind::Elicitation => question = Some(action.reason.clone()),
            _ => {}
        }
    }
    asked.dedup();
    let (message, notification_type) = match (asked.is_empty(), question) {
        (false, _) => (
            format!(
                "the agent needs your permission to use {}",
                asked.join(", ")
            ),
            "permission_prompt",
        ),
        (true, Some(question)) => (
            format!("the agent asks you: {question}"),
            "elicitation_dialog",
        ),
        (true, None) => return None,
    };
    Some(HookEvent::Notification {
        message,
        notification_type: notification_type.to_owned(),
    })
}

/// What the `SessionStart` and `UserPromptSubmit` hooks made of an arriving message.
struct PromptHooks {
    /// Their decisions, to store before the message.
    records: Vec<Record>,
    /// The error that ends the operation instead (a tripped guardrail, a failed hook).
    error: Option<FlueError>,
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
        if shared.depth > 0 {
            points.push(HookEvent::SubagentStart);
        }
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
                hook_points::ask(shared, ctx, event, subject.as_deref(), access, log).await
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
                .retain(|part| !matches!(part, flue_protocol::record::UserContent::Text { .. }));
            message.content.insert(
                0,
                flue_protocol::record::UserContent::Text { text: text.clone() },
            );
        }
        context.extend(decided.context_text());
    }
    if !context.is_empty() {
        message
            .content
            .push(flue_protocol::record::UserContent::Text {
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
