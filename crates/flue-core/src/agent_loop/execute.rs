//! Running the calls cleared to run: each one's context, their concurrent runs, and what an
//! abort leaves. A `task` call whose task paused waits like any other call.

use std::sync::Arc;

use flue_protocol::event::Event;
use flue_protocol::record::{ActionKind, PendingAction, Record, ToolAttempt, ToolCall, ToolResult};
use flue_protocol::task_session_parent;
use serde_json::Value;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, Span};

use super::{ABORT_GRACE, Batch, TASK_PAUSED, TurnLoop};
use crate::error::Result;
use crate::shared::SessionState;
use crate::steps::{action_id, error_result};
use crate::tool::{
    DataEmitter, InterruptBehavior, ToolContext, ToolDefinition, ToolError, ToolState,
    render_output,
};
use crate::util::WorkClock;

/// What a batch's calls run with.
pub(super) struct CallEnv {
    /// The batch's context, from which each call's is made; it collects the calls' sampling.
    pub(super) tool_ctx: ToolContext,
    /// The conversation's state as the batch's calls and hooks see it (`None` in a task
    /// session: the state lives in the root session).
    pub(super) tool_state: Option<ToolState>,
    /// The root session's key: live actions (MCP servers' questions) are listed and answered
    /// there, where a subagent's call's question names its task session.
    live_key: crate::store::SessionKey,
    /// This session, when it is a task session.
    task_session: Option<String>,
}

/// A call cleared to run.
pub(super) struct Cleared {
    pub(super) call_idx: usize,
    pub(super) tool: ToolDefinition,
    pub(super) input: Value,
    pub(super) ctx: ToolContext,
    pub(super) span: Span,
}

/// What one finished call returned.
type Output = std::result::Result<Value, ToolError>;

impl TurnLoop<'_> {
    /// The context the batch's calls share.
    pub(super) fn call_env(&self, state: &SessionState) -> CallEnv {
        let harness = &self.shared.harness;
        let mut tool_ctx = ToolContext::new(Arc::clone(&harness.sandbox))
            .with_cancel(self.ctx.cancel.child_token())
            .with_instance_id(harness.instance_id.clone())
            .with_session(self.shared.key.session.clone())
            .with_cwd(self.shared.scope.cwd.clone())
            .with_agent(harness.agent.name.clone())
            .with_audit(Arc::clone(&harness.audit));
        tool_ctx.usage = Arc::clone(&self.delegated_usage);
        let tool_state = self.hook_state(state);
        if let Some(tool_state) = &tool_state {
            tool_ctx = tool_ctx.with_state(tool_state.clone());
        }
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
        CallEnv {
            tool_ctx,
            tool_state,
            live_key,
            task_session,
        }
    }

    /// The context of one call cleared to run, its data emitter, and the attempt record of a
    /// replay-safe tool that writes.
    pub(super) fn call_context(
        &self,
        state: &SessionState,
        call: &ToolCall,
        tool: &ToolDefinition,
        env: &CallEnv,
    ) -> (ToolContext, DataEmitter, Option<Record>) {
        let harness = &self.shared.harness;
        let (mut ctx, emitter) = env
            .tool_ctx
            .for_call(&call.id, &self.ctx.sink, &harness.redactor);
        ctx.insert_extension(crate::elicitation::LiveLog {
            store: Arc::clone(&harness.store),
            key: env.live_key.clone(),
            task_session: env.task_session.clone(),
            tool_name: call.name.clone(),
            redactor: harness.redactor.clone(),
            wake: harness.live_wake.subscribe(),
        });
        if tool.meta().interrupt == InterruptBehavior::Complete {
            // A short all-or-nothing call does not see the abort: it finishes within the
            // grace period below and its real result is stored.
            ctx.cancel = CancellationToken::new();
        }
        ctx.idempotency_key =
            crate::tool::idempotency_key(&harness.instance_id, &self.shared.key.session, &call.id);
        ctx.attempt = state.index.attempts(&call.id) + 1;
        if let Some(tool_state) = &env.tool_state {
            ctx = ctx.with_state(tool_state.for_call(&call.name, &call.id));
        }
        // Runs of tools that only read leave nothing to count: no record for them.
        let attempt = (tool.meta().replay_safe && !tool.meta().read_only).then(|| {
            Record::ToolAttempt(ToolAttempt {
                call_id: call.id.clone(),
                tool_name: call.name.clone(),
                attempt: ctx.attempt,
                idempotency_key: ctx.idempotency_key.clone(),
            })
        });
        (ctx, emitter, attempt)
    }

    /// Stores the attempts, then runs the cleared calls concurrently until they all finish or
    /// the operation is aborted. On abort, calls see the cancellation, except those whose
    /// interrupt behaviour is `complete`, which finish within [`ABORT_GRACE`] with their real
    /// result. Returns whether the operation was aborted.
    pub(super) async fn run_calls(
        &self,
        state: &mut SessionState,
        batch: &mut Batch,
        cleared: Vec<Cleared>,
        attempts: Vec<Record>,
    ) -> Result<bool> {
        // Every attempt at a replay-safe call is in the log before it runs.
        self.shared.append(state, attempts).await?;
        let mut running = JoinSet::new();
        for Cleared {
            call_idx,
            tool,
            input,
            ctx,
            span,
        } in cleared
        {
            batch.clocks[call_idx] = WorkClock::start();
            batch.spawned[call_idx] = true;
            running.spawn(async move { (call_idx, tool.call(input, &ctx).await) }.instrument(span));
        }
        let aborted = self.join_calls(batch, &mut running).await;
        if aborted {
            // Tools saw the cancel through their token; give them a moment to stop cleanly.
            let _ = tokio::time::timeout(ABORT_GRACE, self.join_all(batch, &mut running)).await;
            running.abort_all();
        }
        for (span, result) in batch.spans.iter().zip(&batch.results) {
            if result.is_none() {
                span.record(
                    "error.type",
                    if aborted { "aborted" } else { "tool_panicked" },
                );
            }
        }
        Ok(aborted)
    }

    /// Collects the calls' results as they finish; returns `true` when the operation is
    /// aborted first.
    async fn join_calls(&self, batch: &mut Batch, running: &mut JoinSet<(usize, Output)>) -> bool {
        loop {
            tokio::select! {
                biased;
                () = self.ctx.cancel.cancelled() => return true,
                joined = running.join_next() => match joined {
                    None => return false,
                    Some(Ok((call_idx, output))) => {
                        let call = &batch.calls[call_idx];
                        batch.timings[call_idx] = Some(batch.clocks[call_idx].stop());
                        match self.paused_task(call, &output) {
                            Some(session) => {
                                batch.waiting[call_idx] = Some(self.task_action(call, session));
                            }
                            None => {
                                let span = &batch.spans[call_idx];
                                batch.results[call_idx] = Some(self.finish_call(call, output, span));
                            }
                        }
                    }
                    // A panicking tool keeps no result; it is answered with `tool_panicked`
                    // when the batch is recorded.
                    Some(Err(_panicked)) => {}
                },
            }
        }
    }

    /// Collects the results of calls that finish after an abort.
    async fn join_all(&self, batch: &mut Batch, running: &mut JoinSet<(usize, Output)>) {
        while let Some(joined) = running.join_next().await {
            if let Ok((call_idx, output)) = joined {
                batch.timings[call_idx] = Some(batch.clocks[call_idx].stop());
                let call = &batch.calls[call_idx];
                batch.results[call_idx] =
                    Some(self.finish_call(call, output, &batch.spans[call_idx]));
            }
        }
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

    pub(super) fn send_tool_start(&self, call: &ToolCall) {
        self.ctx.sink.send(Event::ToolStart {
            call_id: call.id.clone(),
            name: call.name.clone(),
            input: call.input.clone(),
        });
    }

    /// Whether a call of a new turn runs now, waits for a decision, or is refused (a call
    pub(super) fn finish_call(
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
}
