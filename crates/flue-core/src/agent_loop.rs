//! The agent loop: model turn, tool calls, results, repeat — driven by the stored log.
//!
//! Each iteration asks [`next_step`] what the log needs next: a model turn (the log ends with
//! user input or answered tool calls), tool runs (the last assistant message has unanswered
//! calls) or nothing (the model answered). Because the decision reads only the log, an
//! operation that stopped mid-turn — a crash, or later a pause for a tool confirmation — can
//! be picked up from the store alone.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::compaction::{Compactor, LoopCompaction};
use crate::error::{FlueError, Result};
use crate::event::{CompactionReason, Event};
use crate::model::{ModelProvider, ModelRequest, ModelSpec};
use crate::overlay::CallOverlay;
use crate::record::{
    AssistantContent, AssistantMessage, Record, ToolCall, ToolResult, Usage, UserMessage,
};
use crate::session::{
    OperationContext, PromptOptions, PromptResponse, SessionShared, SessionState,
};
use crate::tool::{
    Ownership, ToolContext, ToolDefinition, ToolError, ToolMeta, ToolSet, render_output,
};
use crate::util::or_cancel;
use crate::{skill, task};

/// Name of the tool that delivers a structured result.
pub const FINISH_TOOL: &str = "finish";
/// Name of the tool the model calls when it cannot produce a structured result.
pub const GIVE_UP_TOOL: &str = "give_up";
/// How many times the model may end a structured-result operation without a valid `finish`.
const MAX_RESULT_FOLLOW_UPS: u32 = 3;
/// How long aborted tools get to stop on their own before their tasks are dropped.
const ABORT_GRACE: Duration = Duration::from_secs(3);

/// What the log needs next.
#[derive(Debug, PartialEq)]
pub(crate) enum Step {
    /// Ask the model for a turn.
    CallModel,
    /// Run these unanswered calls of the last assistant message.
    RunTools(Vec<ToolCall>),
    /// The last assistant message answered without tool calls.
    Answered,
}

/// Decides the next step from the log alone.
pub(crate) fn next_step(records: &[Record]) -> Step {
    let mut answered = HashSet::new();
    for record in records.iter().rev() {
        match record {
            Record::ToolResult(result) => {
                answered.insert(result.call_id.as_str());
            }
            Record::Assistant(message) => {
                let pending: Vec<ToolCall> = message
                    .tool_calls()
                    .filter(|call| !answered.contains(call.id.as_str()))
                    .cloned()
                    .collect();
                let has_calls = message.tool_calls().next().is_some();
                return match (has_calls, pending.is_empty()) {
                    (false, _) if answered.is_empty() => Step::Answered,
                    (_, false) => Step::RunTools(pending),
                    _ => Step::CallModel,
                };
            }
            _ => return Step::CallModel,
        }
    }
    Step::CallModel
}

/// Gives every tool call of a new turn an id that no other call or result of the session
/// has, before the turn is stored.
///
/// Providers assign call ids, and not all keep them unique: OpenAI-compatible servers may
/// number calls per turn (`call_0` in every turn), repeat one id within a turn, or send none.
/// Two calls under one id would both run and their results could not be told apart, breaking
/// "every call has exactly one result". We rename rather than refuse the turn: the turn is
/// valid work that was paid for, a retry would likely bring the same ids again, and the ids
/// mean nothing to the provider beyond the request we send back, whose tool calls and tool
/// results are both built from the stored records, so the renamed pairs stay well-formed.
/// The renaming is deterministic: an empty (or blank) id becomes `call_<n>`, a repeated one
/// `<id>_<n>`, with the smallest `n` (from 1 for empty ids, from 2 for repeats) not yet used;
/// the suffix keeps ids within the `[A-Za-z0-9_-]` alphabet providers accept.
pub(crate) fn make_call_ids_unique(content: &mut [AssistantContent], records: &[Record]) {
    let mut used: HashSet<String> = HashSet::new();
    for record in records {
        match record {
            Record::Assistant(message) => {
                used.extend(message.tool_calls().map(|call| call.id.clone()));
            }
            Record::ToolResult(result) => {
                used.insert(result.call_id.clone());
            }
            _ => {}
        }
    }
    for part in content {
        let AssistantContent::ToolCall(call) = part else {
            continue;
        };
        let blank = call.id.trim().is_empty();
        if !blank && !used.contains(&call.id) {
            used.insert(call.id.clone());
            continue;
        }
        let (base, first) = if blank {
            ("call", 1_u64)
        } else {
            (call.id.as_str(), 2)
        };
        let mut n = first;
        let fresh = loop {
            let candidate = format!("{base}_{n}");
            if !used.contains(&candidate) {
                break candidate;
            }
            n += 1;
        };
        used.insert(fresh.clone());
        call.id = fresh;
    }
}

/// The records the model sees: the latest compaction summary, then the records it kept.
pub(crate) fn model_view(records: &[Record]) -> Cow<'_, [Record]> {
    let latest = records
        .iter()
        .enumerate()
        .rev()
        .find_map(|(idx, record)| match record {
            Record::Compaction(summary) => Some((idx, summary)),
            _ => None,
        });
    let Some((summary_idx, summary)) = latest else {
        return Cow::Borrowed(records);
    };
    let first_kept = usize::try_from(summary.first_kept)
        .unwrap_or(usize::MAX)
        .min(records.len());
    let mut view = Vec::with_capacity(records.len().saturating_sub(first_kept) + 1);
    view.push(Record::Compaction(summary.clone()));
    view.extend(
        records
            .iter()
            .enumerate()
            .skip(first_kept)
            .filter(|(idx, record)| *idx != summary_idx && !matches!(record, Record::Compaction(_)))
            .map(|(_, record)| record.clone()),
    );
    Cow::Owned(view)
}

/// Results for calls an earlier operation left unanswered (crash or abort), so the log stays
/// well-formed before new input is appended.
pub(crate) fn interrupted_results(records: &[Record]) -> Vec<Record> {
    match next_step(records) {
        Step::RunTools(calls) => calls
            .into_iter()
            .map(|call| {
                Record::ToolResult(error_result(
                    &call,
                    &ToolError::new(
                        "interrupted",
                        "this tool call was interrupted before it finished; it may or may not \
                         have taken effect",
                    ),
                ))
            })
            .collect(),
        Step::CallModel | Step::Answered => Vec::new(),
    }
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
    message: Option<UserMessage>,
    options: PromptOptions,
    overlay: CallOverlay,
    ctx: OperationContext,
) -> Result<(PromptResponse, Usage)> {
    let harness = Arc::clone(&shared.harness);
    let scope = Arc::clone(&shared.scope);
    // Model precedence: the call's, then the role's, then the agent's.
    let model_spec = options
        .model
        .clone()
        .or_else(|| overlay.model())
        .or_else(|| scope.model.clone())
        .ok_or_else(|| FlueError::ModelNotConfigured {
            hint: Some("set `model` on the agent or pass a model for this call".into()),
        })?;
    let (provider, spec) = harness.providers.resolve(&model_spec)?;
    if harness.agent.model.as_deref() != Some(model_spec.as_str()) {
        provider.check_model(&spec.model).await?;
    }
    if message.as_ref().is_some_and(crate::model::has_images)
        && !provider.model_info(&spec.model).image_input
    {
        return Err(FlueError::ImageInputUnsupported { model: model_spec });
    }
    let thinking = options
        .thinking
        .or_else(|| overlay.thinking())
        .unwrap_or(scope.thinking);
    let result_slot = Arc::new(Mutex::new(None));
    let delegated_usage = Arc::new(Mutex::new(Usage::default()));
    let mut tools: Vec<ToolDefinition> = scope.tools.clone();
    tools.extend(options.tools.iter().cloned());
    if !scope.skills.is_empty() {
        tools.push(skill::load_skill_tool(scope.skills.clone())?);
    }
    if !scope.subagents.is_empty() {
        let inherited = task::Inherited {
            model: Some(model_spec.clone()),
            thinking,
        };
        tools.push(task::task_tool(
            &shared,
            inherited,
            &ctx.sink,
            &delegated_usage,
        )?);
    }
    if let Some(schema) = &options.result {
        tools.extend(result_tools(schema, &result_slot)?);
    }
    let tools = ToolSet::assemble(tools)?;

    let mut state = shared.state.lock().await;
    shared.sync(&mut state).await?;
    let mut opening = interrupted_results(&state.records);
    opening.extend(message.map(Record::User));
    shared.append(&mut state, opening).await?;

    let mut turn = TurnLoop {
        shared: &shared,
        provider: provider.as_ref(),
        spec: &spec,
        tools: &tools,
        system: overlay.system_prompt(&scope, harness.workspace_context.as_deref()),
        thinking,
        ctx: &ctx,
        usage: Usage::default(),
        result_slot,
        structured: options.result.is_some(),
        delegated_usage,
    };
    let response = turn.drive(&mut state).await?;
    let usage = response.usage;
    Ok((response, usage))
}

struct TurnLoop<'a> {
    shared: &'a SessionShared,
    provider: &'a dyn ModelProvider,
    spec: &'a ModelSpec,
    tools: &'a ToolSet,
    system: String,
    thinking: crate::config::ThinkingLevel,
    ctx: &'a OperationContext,
    usage: Usage,
    result_slot: Arc<Mutex<Option<ResultOutcome>>>,
    structured: bool,
    /// Usage of the tasks this call's `task` tool ran, counted in the response.
    delegated_usage: Arc<Mutex<Usage>>,
}

impl TurnLoop<'_> {
    async fn drive(&mut self, state: &mut SessionState) -> Result<PromptResponse> {
        let max_turns = self.shared.scope.max_turns;
        let mut n_turns = 0u32;
        let mut n_follow_ups = 0u32;
        let mut compaction = LoopCompaction::default();
        loop {
            match next_step(&state.records) {
                Step::CallModel => {
                    if n_turns >= max_turns {
                        return Err(FlueError::MaxTurnsExceeded { max_turns });
                    }
                    n_turns += 1;
                    self.compacting_model_turn(state, &mut compaction).await?;
                }
                Step::RunTools(calls) => {
                    self.run_tools(state, calls).await?;
                    if let Some(outcome) = self.take_result() {
                        return self.finish_structured(state, outcome);
                    }
                }
                Step::Answered => {
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

    fn compactor(&self) -> Compactor<'_> {
        Compactor {
            shared: self.shared,
            ctx: self.ctx,
            provider: self.provider,
            spec: self.spec,
            system: &self.system,
            tools: self.tools,
        }
    }

    async fn model_turn(&mut self, state: &mut SessionState) -> Result<()> {
        let info = self.provider.model_info(&self.spec.model);
        let schemas = self.tools.schemas();
        let view = model_view(&state.records);
        let request = ModelRequest {
            model: &self.spec.model,
            system: &self.system,
            messages: &view,
            tools: &schemas,
            thinking: self.thinking,
            max_output_tokens: info.max_output_tokens,
        };
        let model_turn = or_cancel(
            self.provider.stream_turn(request, &self.ctx.sink),
            &self.ctx.cancel,
        )
        .await??;
        let mut usage = model_turn.usage;
        if usage.cost_usd.is_none() {
            usage.cost_usd = info.price.map(|price| price.cost(&usage));
        }
        self.usage += usage;
        let mut content = model_turn.content;
        make_call_ids_unique(&mut content, &state.records);
        let message = AssistantMessage {
            content,
            model: self.spec.to_ref(),
            usage,
            stop_reason: model_turn.stop_reason,
        };
        self.shared
            .append(state, vec![Record::Assistant(message)])
            .await?;
        self.ctx.sink.send(Event::TurnEnd {
            model: self.spec.to_ref(),
            usage,
            stop_reason: model_turn.stop_reason,
        });
        Ok(())
    }

    /// Runs calls concurrently and appends their results in call order. On abort, calls that
    /// did not finish get an `aborted` result so the log stays well-formed.
    async fn run_tools(&mut self, state: &mut SessionState, calls: Vec<ToolCall>) -> Result<()> {
        let harness = &self.shared.harness;
        let tool_ctx = ToolContext::new(Arc::clone(&harness.sandbox))
            .with_cancel(self.ctx.cancel.child_token())
            .with_instance_id(harness.instance_id.clone())
            .with_session(self.shared.key.session.clone())
            .with_cwd(self.shared.scope.cwd.clone())
            .with_agent(harness.agent.name.clone())
            .with_audit(Arc::clone(&harness.audit));
        let mut results: Vec<Option<ToolResult>> = vec![None; calls.len()];
        // What each call emits with `emit_data`, stored with its result.
        let mut emitted = Vec::with_capacity(calls.len());
        let mut running = JoinSet::new();
        for (call_idx, call) in calls.iter().enumerate() {
            self.ctx.sink.send(Event::ToolStart {
                call_id: call.id.clone(),
                name: call.name.clone(),
                input: call.input.clone(),
            });
            let Some(tool) = self.tools.get(&call.name).cloned() else {
                let error = ToolError::new(
                    "unknown_tool",
                    format!(
                        "there is no tool named {:?}; available tools: {}",
                        call.name,
                        self.tools.names().join(", ")
                    ),
                );
                results[call_idx] = Some(self.finish_call(call, Err(error)));
                continue;
            };
            if let Some(error) = unparsed_arguments(call) {
                results[call_idx] = Some(self.finish_call(call, Err(error)));
                continue;
            }
            let input = call.input.clone();
            let (ctx, emitter) = tool_ctx.for_call(&call.id, &self.ctx.sink, &harness.redactor);
            emitted.push((call_idx, emitter));
            running.spawn(async move { (call_idx, tool.call(input, &ctx).await) });
        }
        let aborted = loop {
            tokio::select! {
                biased;
                () = self.ctx.cancel.cancelled() => break true,
                joined = running.join_next() => match joined {
                    None => break false,
                    Some(Ok((call_idx, output))) => {
                        results[call_idx] = Some(self.finish_call(&calls[call_idx], output));
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
                        results[call_idx] = Some(self.finish_call(&calls[call_idx], output));
                    }
                }
            })
            .await;
            running.abort_all();
        }
        let records = calls
            .iter()
            .zip(results)
            .map(|(call, result)| {
                Record::ToolResult(result.unwrap_or_else(|| {
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
                    error_result(call, &error)
                }))
            })
            .collect::<Vec<Record>>();
        let records = crate::tool::attach_emitted(records, &emitted);
        self.shared.append(state, records).await?;
        if aborted {
            return Err(FlueError::Aborted);
        }
        Ok(())
    }

    fn finish_call(
        &self,
        call: &ToolCall,
        output: std::result::Result<Value, ToolError>,
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
        let text = state
            .records
            .iter()
            .rev()
            .find_map(|record| match record {
                Record::Assistant(message) => Some(message.text()),
                _ => None,
            })
            .unwrap_or_default();
        let mut usage = self.usage;
        if let Ok(delegated) = self.delegated_usage.lock() {
            usage += *delegated;
        }
        PromptResponse {
            text,
            data,
            usage,
            model: self.spec.to_ref(),
        }
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

fn error_result(call: &ToolCall, error: &ToolError) -> ToolResult {
    ToolResult {
        call_id: call.id.clone(),
        tool_name: call.name.clone(),
        content: error.model_text(),
        is_error: true,
        error_kind: Some(error.kind.clone()),
        data: Vec::new(),
    }
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

#[cfg(test)]
mod tests;
