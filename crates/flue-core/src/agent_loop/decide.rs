//! Deciding each call of a batch: the `PreToolUse` hooks (asked for the whole batch and
//! stored before any call runs), then, call by call, whether it runs, waits for a decision (a
//! pause) or is answered at once (an unknown tool, unparsed arguments, a refusal).

use flue_protocol::record::{ActionKind, ActionStarted, PendingAction, Record, ToolCall};
use serde_json::Value;

use super::execute::{CallEnv, Cleared};
use super::tools::source_name;
use super::{Batch, Gate, RunMode, TurnLoop, hook_access};
use crate::error::{FlueError, Result};
use crate::hook::{HookEvent, HookPoint, Verdict};
use crate::hook_points;
use crate::shared::SessionState;
use crate::steps::action_id;
use crate::tool::{Permission, ToolDefinition, ToolError};

/// What the `PreToolUse` hooks of a batch decided, one slot per call.
pub(super) struct PreHooks {
    pub(super) decided: Vec<Option<hook_points::Decided>>,
    /// The first decision that ends the operation (once the batch is stored).
    pub(super) tripped: Option<FlueError>,
}

impl PreHooks {
    /// No hook decided anything for these `n` calls.
    pub(super) fn none(n: usize) -> Self {
        let mut decided = Vec::new();
        decided.resize_with(n, || None);
        Self {
            decided,
            tripped: None,
        }
    }
}

/// What becomes of one call.
enum Decision {
    /// It is answered at once with this error.
    Refuse(ToolError),
    /// It waits for a decision.
    Wait(PendingAction),
    /// It runs.
    Run(ToolDefinition),
}

/// Calls allowed by a decision were decided before the pause: each runs with the input its
/// hooks gave it.
pub(super) fn restore_hooked_inputs(log: &[Record], calls: &mut [ToolCall]) {
    for call in calls {
        if let Some(input) = hook_points::stored_input(log, &call.id) {
            call.input = input;
        }
    }
}

impl TurnLoop<'_> {
    /// Asks each call's `PreToolUse` hooks (or reads their stored decisions) and applies the
    /// input they give it; their decisions and writes are stored in one append before any
    /// call runs.
    pub(super) async fn pre_tool_hooks(
        &mut self,
        state: &mut SessionState,
        calls: &mut [ToolCall],
    ) -> Result<PreHooks> {
        let mut pre = PreHooks::none(calls.len());
        let mut stored_now = Vec::new();
        let hook_state = self.hook_state(state);
        for (call_idx, call) in calls.iter_mut().enumerate() {
            if self.tools.get(&call.name).is_none() || unparsed_arguments(call).is_some() {
                continue;
            }
            let point = HookPoint::PreToolUse;
            let decided = match hook_points::stored(&state.records, point, Some(&call.id)) {
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
                        &state.records,
                    )
                    .await
                }
            };
            if let Some(input) = &decided.updated_input {
                call.input = input.clone();
            }
            if pre.tripped.is_none() {
                pre.tripped = decided.operation_error(point);
            }
            stored_now.extend(decided.records.iter().cloned());
            let mut decided = decided;
            if self.needs_confirmation(call, decided.verdict) {
                let answered = self.permission_request(state, call).await;
                stored_now.extend(answered.records.iter().cloned());
                answer_confirmation(&mut decided, answered);
            }
            pre.decided[call_idx] = Some(decided);
        }
        stored_now.extend(hook_state.as_ref().and_then(crate::tool::ToolState::record));
        self.shared.append(state, stored_now.clone()).await?;
        hook_points::announce(&self.ctx.sink, &stored_now);
        Ok(pre)
    }

    /// Whether `call` (whose `PreToolUse` hooks decided `verdict`) would wait for a person's
    /// confirmation: its hooks asked for one, or the permission rules do.
    fn needs_confirmation(&self, call: &ToolCall, verdict: Verdict) -> bool {
        let Some(tool) = self.tools.get(&call.name) else {
            return false;
        };
        if tool.is_external()
            || matches!(verdict, Verdict::Deny | Verdict::Block | Verdict::Tripwire)
        {
            return false;
        }
        let permissions = &self.shared.harness.permissions;
        verdict == Verdict::Ask
            || permissions.decide(&call.name, tool.meta().permission).0 != Permission::AlwaysAllow
    }

    /// Asks the `PermissionRequest` hooks about `call`'s confirmation, or reads their stored
    /// answer.
    async fn permission_request(
        &self,
        state: &SessionState,
        call: &ToolCall,
    ) -> hook_points::Decided {
        let point = HookPoint::PermissionRequest;
        if let Some(decided) = hook_points::stored(&state.records, point, Some(&call.id)) {
            return decided;
        }
        if let Some(decided) = self.standing_approval(state, call) {
            return decided;
        }
        let event = HookEvent::PermissionRequest { call: call.clone() };
        let access = hook_points::StateAccess::None;
        hook_points::ask(
            self.shared,
            self.ctx,
            event,
            Some(&call.id),
            access,
            &state.records,
        )
        .await
    }

    /// Whether the session's log holds standing rules this loop could honour.
    pub(super) fn has_standing_rules(&self, state: &SessionState) -> bool {
        self.shared.depth == 0
            && self.shared.harness.approval_key.is_some()
            && state
                .records
                .iter()
                .any(|record| matches!(record, Record::Rule(_)))
    }

    /// The approval of a verified standing rule of the conversation ("always" answered
    /// earlier), stored like a `PermissionRequest` hook's allow so a replay reads it back.
    fn standing_approval(
        &self,
        state: &SessionState,
        call: &ToolCall,
    ) -> Option<hook_points::Decided> {
        if self.shared.depth > 0 {
            return None;
        }
        let key = self.shared.harness.approval_key.as_ref();
        let rule = crate::standing::approving(&state.records, Some(key?), &call.name)?;
        let reason = format!("approved by standing rule {}", rule.rule_id);
        let record = Record::Hook(flue_protocol::record::HookRecord {
            event: HookPoint::PermissionRequest.name().to_owned(),
            hook: format!("standing rule {}", rule.rule_id),
            subject: Some(call.id.clone()),
            decision: "allow".to_owned(),
            reason: Some(reason.clone()),
            updated_input: None,
            replacement: None,
            additional_context: None,
            usage: None,
        });
        Some(hook_points::Decided {
            verdict: Verdict::Allow,
            reason: Some(reason),
            hook: format!("standing rule {}", rule.rule_id),
            records: vec![record],
            ..hook_points::Decided::default()
        })
    }

    /// Stores the starts of calls a decision allowed before they run, so a crash mid-run
    /// answers them `interrupted` instead of running them twice.
    pub(super) async fn store_starts(
        &self,
        state: &mut SessionState,
        action_ids: &[String],
    ) -> Result<()> {
        let starts = action_ids
            .iter()
            .map(|action_id| {
                Record::ActionStarted(ActionStarted {
                    action_id: action_id.clone(),
                })
            })
            .collect();
        self.shared.append(state, starts).await
    }

    /// Decides each call in call order. One answered at once gets its start and end events,
    /// one that waits its pending action; one cleared to run gets its start event and its
    /// context, and (a replay-safe tool that writes) an attempt record to store before it
    /// runs. Returns the cleared calls and the attempts.
    pub(super) fn decide_calls(
        &self,
        state: &SessionState,
        batch: &mut Batch,
        mode: &RunMode,
        env: &CallEnv,
    ) -> (Vec<Cleared>, Vec<Record>) {
        let mut cleared = Vec::with_capacity(batch.calls.len());
        let mut attempts = Vec::new();
        for call_idx in 0..batch.calls.len() {
            let call = &batch.calls[call_idx];
            let span = &batch.spans[call_idx];
            match self.decide_call(call, batch.pre[call_idx].as_ref(), mode) {
                Decision::Refuse(error) => {
                    self.send_tool_start(call);
                    batch.results[call_idx] = Some(self.finish_call(call, Err(error), span));
                }
                Decision::Wait(action) => batch.waiting[call_idx] = Some(action),
                Decision::Run(tool) => {
                    self.send_tool_start(call);
                    let (ctx, emitter, attempt) = self.call_context(state, call, &tool, env);
                    batch.emitted.push(emitter);
                    attempts.extend(attempt);
                    cleared.push(Cleared {
                        call_idx,
                        tool,
                        input: call.input.clone(),
                        ctx,
                        span: span.clone(),
                    });
                }
            }
        }
        (cleared, attempts)
    }

    /// Whether `call` runs, waits or is refused: an unknown tool, unparsed arguments and a
    /// hook's refusal are answered at once; a hook's `ask` waits for a confirmation; a call
    /// of a new turn then goes by its tool's policy.
    fn decide_call(
        &self,
        call: &ToolCall,
        pre: Option<&hook_points::Decided>,
        mode: &RunMode,
    ) -> Decision {
        let Some(tool) = self.tools.get(&call.name).cloned() else {
            return Decision::Refuse(self.unknown_tool(call));
        };
        if let Some(error) = unparsed_arguments(call) {
            return Decision::Refuse(error);
        }
        let hook_verdict = pre.map(|decided| decided.verdict);
        let hook_reason = pre.and_then(|decided| decided.reason.clone());
        if matches!(
            hook_verdict,
            Some(Verdict::Deny | Verdict::Block | Verdict::Tripwire)
        ) {
            let reason = hook_reason.unwrap_or_else(|| "a hook refused this call".to_owned());
            return Decision::Refuse(ToolError::new("hook_denied", reason));
        }
        if pre.is_some_and(|decided| decided.approved) {
            // A `PermissionRequest` hook answered the confirmation.
            return Decision::Run(tool);
        }
        if hook_verdict == Some(Verdict::Ask) && !tool.is_external() {
            let reason =
                hook_reason.unwrap_or_else(|| format!("a hook asks to confirm `{}`", call.name));
            return match self.wait_or_refuse(call, ActionKind::Confirmation, reason, None) {
                Gate::Wait(action) => Decision::Wait(action),
                Gate::Run | Gate::Refuse(_) => Decision::Refuse(ToolError::new(
                    "permission_required",
                    "a hook asks to confirm this call, and a task cannot pause to ask",
                )),
            };
        }
        if matches!(mode, RunMode::Classify) {
            match self.gate(call, &tool) {
                Gate::Run => {}
                Gate::Wait(action) => return Decision::Wait(action),
                Gate::Refuse(error) => return Decision::Refuse(error),
            }
        }
        Decision::Run(tool)
    }

    /// The error of a call to a tool the turn does not offer: one its source removed, or one
    /// that never existed.
    fn unknown_tool(&self, call: &ToolCall) -> ToolError {
        let missing = if self.removed_tools.contains(&call.name) {
            format!(
                "the tool {:?} is no longer available: its source (such as an MCP server) \
                 removed it after offering it",
                call.name
            )
        } else {
            format!("there is no tool named {:?}", call.name)
        };
        ToolError::new(
            "unknown_tool",
            format!(
                "{missing}; available tools: {}",
                self.tools.names().join(", ")
            ),
        )
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

/// What a `PermissionRequest` answer does to the call's decision: `allow` lets it run without
/// the confirmation; `deny` (or a block) refuses it with the hook's message. A failure or no
/// answer leaves the confirmation to the person.
fn answer_confirmation(decided: &mut hook_points::Decided, answered: hook_points::Decided) {
    match answered.verdict {
        Verdict::Allow if !answered.failed => decided.approved = true,
        Verdict::Deny | Verdict::Block | Verdict::Tripwire if !answered.failed => {
            decided.verdict = Verdict::Deny;
            decided.reason = answered.reason;
            decided.hook = answered.hook;
        }
        _ => {}
    }
}
