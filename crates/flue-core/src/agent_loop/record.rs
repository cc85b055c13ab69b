//! Recording a batch: the `PostToolUse` hooks over the finished calls, then one append with
//! the results in call order, what the calls emitted and sampled, the pending actions, the
//! hooks' decisions and the state the calls changed; then the pending actions' events.

use std::collections::HashMap;

use flue_protocol::WorkTiming;
use flue_protocol::event::Event;
use flue_protocol::record::{ActionKind, PendingAction, Record, ToolResult};

use super::execute::CallEnv;
use super::{Batch, TurnLoop, hook_access};
use crate::error::Result;
use crate::hook::{HookEvent, HookPoint, Verdict};
use crate::hook_points;
use crate::redact::Redactor;
use crate::shared::SessionState;
use crate::steps::error_result;
use crate::tool::{ToolContext, ToolError, ToolState};

impl TurnLoop<'_> {
    /// Asks each finished call's `PostToolUse` hooks about its result (a call refused by a
    /// hook or unknown is not asked about); what they replace or add goes into the result the
    /// model sees. Returns their records, stored with the batch.
    pub(super) async fn post_tool_hooks(
        &self,
        batch: &mut Batch,
        tool_state: Option<&ToolState>,
        log: &[Record],
    ) -> Vec<Record> {
        let mut post_records = Vec::new();
        for (call_idx, (call, slot)) in batch.calls.iter().zip(&mut batch.results).enumerate() {
            let Some(result) = slot else { continue };
            if let Some(context) = batch.pre[call_idx]
                .as_ref()
                .and_then(hook_points::Decided::context_text)
            {
                annotate(result, &context);
            }
            let hook_denied = result.error_kind.as_deref() == Some("hook_denied");
            if hook_denied || result.error_kind.as_deref() == Some("unknown_tool") {
                continue;
            }
            // A failed call's `PostToolUseFailure` hooks come after its `PostToolUse` ones.
            let failed = result.is_error;
            for point in [HookPoint::PostToolUse, HookPoint::PostToolUseFailure] {
                let (asked, result_now) = (call.clone(), result.clone());
                let duration_ms = batch.timings[call_idx].map(|timing| timing.duration_ms);
                let event = match point {
                    HookPoint::PostToolUse => HookEvent::PostToolUse {
                        call: asked,
                        result: result_now,
                        duration_ms,
                    },
                    _ if failed => HookEvent::PostToolUseFailure {
                        call: asked,
                        result: result_now,
                        duration_ms,
                    },
                    _ => continue,
                };
                // Their writes join the batch's: stored with its results, in one record.
                let access = hook_access(tool_state);
                let decided =
                    hook_points::ask(self.shared, self.ctx, event, Some(&call.id), access, log)
                        .await;
                apply_post_decision(result, &decided);
                if batch.tripped.is_none() {
                    batch.tripped = decided.operation_error(point);
                }
                post_records.extend(decided.records);
            }
        }
        post_records
    }

    /// Stores the batch in one append, each result with its timing. Returns the actions that
    /// wait for a decision.
    pub(super) async fn record_batch(
        &self,
        state: &mut SessionState,
        mut batch: Batch,
        env: &CallEnv,
        post_records: &[Record],
        aborted: bool,
    ) -> Result<Vec<PendingAction>> {
        let timing_of = timings(&batch);
        let (mut records, pending) = results_in_order(&mut batch, aborted);
        crate::tool::attach_emitted(&mut records, &batch.emitted);
        records.extend(sampled(&env.tool_ctx, &self.shared.harness.redactor));
        records.extend(pending.iter().cloned().map(Record::ActionRequired));
        records.extend(post_records.iter().cloned());
        // The calls' change of the state is stored with their results, or not at all.
        records.extend(env.tool_state.as_ref().and_then(ToolState::record));
        self.shared
            .append_timed(state, records, |record| match record {
                Record::ToolResult(result) => timing_of.get(result.call_id.as_str()).copied(),
                _ => None,
            })
            .await?;
        Ok(pending)
    }

    /// Announces the actions a batch left waiting.
    pub(super) fn announce_pending(&self, pending: Vec<PendingAction>) {
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
    }
}

/// How long each call of a batch ran: a call that never ran (refused, unknown) took no time;
/// one cut short ran until now.
fn timings(batch: &Batch) -> HashMap<String, WorkTiming> {
    (0..batch.calls.len())
        .map(|idx| {
            let timing = match (batch.timings[idx], batch.spawned[idx]) {
                (Some(timing), _) => timing,
                (None, true) => batch.clocks[idx].stop(),
                (None, false) => batch.clocks[idx].at_start(),
            };
            (batch.calls[idx].id.clone(), timing)
        })
        .collect()
}

/// The batch's results in call order, and the actions that wait. A call without a result
/// that does not wait is answered `aborted` (after an abort, when nothing waits) or
/// `tool_panicked`.
fn results_in_order(batch: &mut Batch, aborted: bool) -> (Vec<Record>, Vec<PendingAction>) {
    let results = std::mem::take(&mut batch.results);
    let waiting = std::mem::take(&mut batch.waiting);
    let mut records: Vec<Record> = Vec::with_capacity(batch.calls.len());
    let mut pending: Vec<PendingAction> = Vec::new();
    for ((call, result), wait) in batch.calls.iter().zip(results).zip(waiting) {
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
    (records, pending)
}

/// The sampling exchanges (MCP servers' model requests) the batch's calls made, redacted.
fn sampled(tool_ctx: &ToolContext, redactor: &Redactor) -> Vec<Record> {
    let sampled = std::mem::take(
        &mut *tool_ctx
            .sampling
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    sampled
        .into_iter()
        .map(|mut exchange| {
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
        })
        .collect()
}

/// Adds hook text to a tool result the model sees.
fn annotate(result: &mut ToolResult, text: &str) {
    if !result.content.is_empty() {
        result.content.push_str("\n\n");
    }
    result.content.push_str(text);
}

/// What a `PostToolUse` (or `PostToolUseFailure`) decision does to the result the model sees:
/// a replacement, a failure, a block's reason and added context.
fn apply_post_decision(result: &mut ToolResult, decided: &hook_points::Decided) {
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
}
