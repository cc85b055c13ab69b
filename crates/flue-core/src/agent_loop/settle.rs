//! Settling: what ends an operation or keeps it going once the model answered or a batch
//! left calls waiting: the `Stop` hooks, a structured result (or a reminder to deliver one),
//! results that decisions settled, and paused tasks resumed.

use flue_protocol::event::Event;
use flue_protocol::record::{
    ActionDecision, ActionKind, ActionResolution, PendingAction, Record, ToolResult, UserMessage,
};
use serde_json::Value;

use super::tools::ResultOutcome;
use super::{FINISH_TOOL, GIVE_UP_TOOL, MAX_RESULT_FOLLOW_UPS, MAX_STOP_BLOCKS, TaskResumed};
use super::{TurnLoop, hook_access};
use crate::error::{FlueError, Result};
use crate::hook::{HookEvent, HookPoint, Verdict};
use crate::hook_points;
use crate::operation::PromptResponse;
use crate::shared::SessionState;

impl TurnLoop<'_> {
    /// Asks the `Stop` (in a task: `SubagentStop`) hooks about the final reply, or reads
    /// their stored decisions. Returns whether the model answers again: a block stores the
    /// reason as a user message, at most [`MAX_STOP_BLOCKS`] times; a replacement is stored
    /// and becomes the reply.
    pub(super) async fn stop_hooks(
        &mut self,
        state: &mut SessionState,
        n_blocks: &mut u32,
    ) -> Result<bool> {
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
                hook_points::ask(self.shared, self.ctx, event, None, access, &state.records).await
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

    /// Reminds the model of a structured-result operation that ended without a valid
    /// `finish` to deliver one, at most [`MAX_RESULT_FOLLOW_UPS`] times.
    pub(super) async fn remind_to_finish(
        &mut self,
        state: &mut SessionState,
        n_follow_ups: &mut u32,
    ) -> Result<()> {
        if *n_follow_ups >= MAX_RESULT_FOLLOW_UPS {
            return Err(FlueError::ResultUnavailable {
                reason: format!(
                    "the model did not deliver a valid result after {n_follow_ups} reminders"
                ),
            });
        }
        *n_follow_ups += 1;
        let reminder = UserMessage::text(format!(
            "Deliver your answer by calling the `{FINISH_TOOL}` tool with input that matches its \
             schema. If you cannot, call `{GIVE_UP_TOOL}` with the reason."
        ));
        self.shared
            .append(state, vec![Record::User(reminder)])
            .await
    }

    /// Resumes the paused tasks among `actions` from their logs. A task that waits again
    /// lists its own actions in place of its `task` call; one that ended answers its call (an
    /// [`ActionDecision::Result`] stored in this log). Returns what still waits and whether
    /// any task ended (then the loop goes on).
    pub(super) async fn resume_tasks(
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

    /// Appends results that decisions (or a crash) settled, as a tool run would: redacted,
    /// with their end events.
    pub(super) async fn answer(
        &mut self,
        state: &mut SessionState,
        results: Vec<ToolResult>,
    ) -> Result<()> {
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

    /// The result a `finish` or `give_up` call delivered in the last batch, if any.
    pub(super) fn take_result(&self) -> Option<ResultOutcome> {
        self.result_slot
            .lock()
            .ok()
            .and_then(|mut slot| slot.take())
    }

    pub(super) fn finish_structured(
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

    /// The response of an operation that waits for decisions on `waiting`.
    pub(super) fn waiting(
        &self,
        state: &SessionState,
        waiting: Vec<PendingAction>,
    ) -> PromptResponse {
        let mut response = self.response(state, None);
        response.pending_actions = waiting;
        response
    }

    pub(super) fn response(&self, state: &SessionState, data: Option<Value>) -> PromptResponse {
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
