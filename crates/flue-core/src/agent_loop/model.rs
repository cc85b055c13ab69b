//! Calling the model: the `BeforeModelCall` hooks, the tool sources read again, compaction
//! around the turn, the turn itself and what its stop reason means for the operation.

use flue_protocol::WorkTiming;
use flue_protocol::event::{CompactionReason, Event};
use flue_protocol::record::{
    AssistantContent, AssistantMessage, FailedTurn, Record, StopReason, Usage,
};

use super::tools::turn_tool_set;
use super::{MAX_PAUSE_CONTINUATIONS, TurnLoop, hook_access};
use crate::compaction::{Compactor, LoopCompaction};
use crate::error::{FlueError, Result};
use crate::hook::{HookEvent, HookPoint};
use crate::hook_points;
use crate::model::ModelRequest;
use crate::shared::SessionState;
use crate::spans;
use crate::steps::{model_view, rename_repeated_calls};
use crate::util::{WorkClock, or_cancel};

impl TurnLoop<'_> {
    /// Asks the `BeforeModelCall` hooks (or reads their stored decisions) before turn
    /// `turn`: a block ends the operation, added context goes into this call's system prompt.
    pub(super) async fn before_model_call(
        &mut self,
        state: &mut SessionState,
        turn: u32,
    ) -> Result<()> {
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
                hook_points::ask(self.shared, self.ctx, event, None, access, &state.records).await
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

    /// A model turn with compaction around it: the threshold check before the call and, when
    /// the provider reports a context overflow, one compaction and one retry. The failed turn
    /// stored nothing, so there is nothing to drop from the log.
    pub(super) async fn compacting_model_turn(
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
    pub(super) async fn refresh_tools(&mut self) -> Result<()> {
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

    /// One model turn: the request from the log, the streamed call and the stored turn. A
    /// failed call stores the usage it reported before the error is returned.
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
        let turn_sink = self.held.turn_sink(&self.ctx.sink);
        let (sink, failed_usage) = turn_sink.noting_failed_usage();
        let (sink, streamed) = sink.noting_streamed_text();
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
                self.held.discard();
                let usage = *failed_usage
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let timing = clock.stop();
                if let Err(store_err) = self.count_failed_turn(state, usage, &err, timing).await {
                    // The turn's own failure is what the caller needs to see.
                    tracing::warn!("cannot store the usage of a failed model turn: {store_err}");
                }
                if matches!(err, FlueError::Aborted) {
                    let text = std::mem::take(
                        &mut *streamed
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner),
                    );
                    if let Err(store_err) = self.keep_interrupted(state, text).await {
                        tracing::warn!("cannot store an interrupted reply: {store_err}");
                    }
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
        self.held.turn_ended(has_calls, &self.ctx.sink);
        let refusal = refusal_text(&content);
        let stop_reason = model_turn.stop_reason;
        let message = AssistantMessage {
            content,
            model: self.spec.to_ref(),
            usage,
            stop_reason: stop_reason.clone(),
            interrupted: false,
        };
        self.shared
            .append_timed(state, vec![Record::Assistant(message)], |_| Some(timing))
            .await?;
        self.ctx.sink.send(Event::TurnEnd {
            model: self.spec.to_ref(),
            usage,
            stop_reason: stop_reason.clone(),
        });
        self.after_stop(stop_reason, has_calls, refusal)
    }

    /// What a stored turn's stop reason means: the operation goes on, a paused turn is
    /// continued (at most [`MAX_PAUSE_CONTINUATIONS`] times in a row), or it ends.
    fn after_stop(
        &mut self,
        stop_reason: StopReason,
        has_calls: bool,
        refusal: Option<String>,
    ) -> Result<()> {
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

    /// Stores what an aborted turn streamed of its reply as an interrupted assistant message
    /// (nothing when it streamed no text), so the conversation keeps what was shown.
    async fn keep_interrupted(&mut self, state: &mut SessionState, text: String) -> Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        let message = AssistantMessage {
            content: vec![AssistantContent::Text { text }],
            model: self.spec.to_ref(),
            usage: Usage::default(),
            stop_reason: StopReason::Aborted,
            interrupted: true,
        };
        self.shared
            .append(state, vec![Record::Assistant(message)])
            .await
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
