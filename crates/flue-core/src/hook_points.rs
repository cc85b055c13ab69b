//! Asking the agent's hooks at one point of a session's loop, and recording what they said.
//!
//! [`ask`] runs the hooks that handle an event one after the other (a rewrite feeds the next
//! hook), stops at the first decision that ends the asking, and returns the combined
//! [`Decided`] with one [`HookRecord`] per hook that answered. The loop stores those records
//! (with what they lead to, in the same append where it can) and then emits them as events
//! ([`announce`]). Before asking, [`stored`] looks for decisions already in the log for the
//! same point and subject (a call id): a decision stored before a pause or a crash is used
//! again, never asked for twice. Hook text is redacted like tool output before it is stored.

use flue_protocol::event::Event;
use flue_protocol::record::{HookRecord, Record, Usage};
use serde_json::Value;
use tracing::Span;

use crate::error::FlueError;
use crate::hook::NON_BLOCKING_PREFIX;
use crate::hook::{HookContext, HookEvent, HookFailure, HookModel, HookPoint, Verdict};
use crate::model::TurnSink;
use crate::operation::OperationContext;
use crate::shared::SessionShared;
use crate::tool::ToolState;

/// What the hooks at one point may do with the conversation's state.
#[derive(Clone, Copy, Debug)]
pub(crate) enum StateAccess<'a> {
    /// No state: a task session.
    None,
    /// Read only: the point's decisions are not stored (`SessionEnd`, `PreCompact`).
    Read(Option<&'a Value>),
    /// Read and write through the handle; the caller stores its change with the decisions
    /// (in the same append).
    Write(&'a ToolState),
}

impl StateAccess<'_> {
    /// The document as a hook sees it now.
    fn current(&self) -> Option<Value> {
        match self {
            Self::None => None,
            Self::Read(value) => Some(
                value
                    .cloned()
                    .unwrap_or_else(|| Value::Object(serde_json::Map::new())),
            ),
            Self::Write(state) => Some(state.get()),
        }
    }

    /// Applies a hook's new document; the error says why it was refused.
    fn write(&self, point: HookPoint, subject: Option<&str>, value: Value) -> Result<(), String> {
        let state = match self {
            Self::Write(state) => state,
            Self::None => {
                return Err(
                    "it wrote the state (`updatedState`), but a task session has no \
                     conversation state (only the root session's hooks may write it)"
                        .to_owned(),
                );
            }
            Self::Read(_) => {
                return Err(format!(
                    "it wrote the state (`updatedState`) at {}, whose decisions are not stored, \
                     so it cannot change the state (write it at another point)",
                    point.name()
                ));
            }
        };
        let call_id =
            subject.filter(|_| matches!(point, HookPoint::PreToolUse | HookPoint::PostToolUse));
        state
            .for_hook(point.name(), call_id)
            .set_checked(value)
            .map_err(|err| {
                format!("its new state (`updatedState`) was refused, nothing was written: {err}")
            })
    }
}

/// What the hooks at one point decided together.
#[derive(Debug, Default)]
pub(crate) struct Decided {
    /// The verdict that ends the asking, or the strongest one seen (`ask` over `allow`).
    pub(crate) verdict: Verdict,
    /// The reason of that verdict.
    pub(crate) reason: Option<String>,
    /// Who gave it.
    pub(crate) hook: String,
    /// The last replacement input (`PreToolUse`).
    pub(crate) updated_input: Option<Value>,
    /// The last replacement text.
    pub(crate) replacement: Option<String>,
    /// Every context added, in order.
    pub(crate) context: Vec<String>,
    /// A hook failed at a blocking point and does not fail open, or could not be started: the
    /// verdict is a refusal because of the failure, not a decision (at `PostToolUse`, the
    /// failure replaces the result).
    pub(crate) failed: bool,
    /// The records to store (empty when the decisions came from the log).
    pub(crate) records: Vec<Record>,
    /// `PermissionRequest` hooks answered the call's confirmation: it runs without asking.
    pub(crate) approved: bool,
}

impl Decided {
    /// The added context as one text, when there is any.
    pub(crate) fn context_text(&self) -> Option<String> {
        (!self.context.is_empty()).then(|| self.context.join("\n"))
    }

    /// The error that ends the operation for a tripwire (or a block where it blocks the
    /// operation), if the verdict is one.
    pub(crate) fn operation_error(&self, point: HookPoint) -> Option<FlueError> {
        let ends = match self.verdict {
            Verdict::Tripwire => true,
            Verdict::Block | Verdict::Deny => {
                matches!(
                    point,
                    HookPoint::UserPromptSubmit | HookPoint::BeforeModelCall
                )
            }
            _ => false,
        };
        if !ends {
            return None;
        }
        let reason = self.reason.clone().unwrap_or_default();
        Some(if self.failed {
            FlueError::HookFailed {
                event: point.name().to_owned(),
                hook: self.hook.clone(),
                message: reason,
            }
        } else {
            FlueError::GuardrailTripped {
                event: point.name().to_owned(),
                hook: self.hook.clone(),
                reason,
            }
        })
    }
}

/// How the reason of a failure that refused ends (and how a stored one is recognised).
const FAILS_CLOSED: &str = "; the hook fails closed, so this is refused (set `onFailure: \
                            continue` on the hook to let it through)";

/// How the reason of a hook that could not be started ends: it refuses whatever its
/// `onFailure` (see `HookFailure::not_started`).
const NOT_STARTED_FAILS_CLOSED: &str = "; a hook that could not be started fails closed \
                                        whatever its `onFailure`, so this is refused";

/// Whether the session's agent has hooks at all (asking costs nothing otherwise).
pub(crate) fn any(shared: &SessionShared) -> bool {
    !shared.harness.agent.hooks.is_empty()
}

/// Asks the hooks that handle `event` (`subject`: the call id of a tool point) in the session
/// whose log is `log` (the hooks get it as a transcript). With [`StateAccess::Write`], a
/// hook's new state goes into the handle; the caller stores it.
pub(crate) async fn ask(
    shared: &SessionShared,
    ctx: &OperationContext,
    mut event: HookEvent,
    subject: Option<&str>,
    state: StateAccess<'_>,
    log: &[Record],
) -> Decided {
    let point = event.point();
    let mut decided = Decided::default();
    let hooks = &shared.harness.agent.hooks;
    if !hooks.iter().any(|hook| hook.handles(&event)) {
        return decided;
    }
    let transcript =
        crate::hook::render_transcript(log, &shared.harness.instance_id, shared.depth > 0);
    let mut hook_ctx = HookContext {
        instance_id: shared.harness.instance_id.clone(),
        session: shared.key.session.clone(),
        agent: shared.harness.agent.name.clone(),
        depth: shared.depth,
        cwd: shared.harness.agent.cwd.clone(),
        cancel: ctx.cancel.child_token(),
        state: None,
        transcript: Some(transcript.into()),
        model: Some(HookModel::new(
            shared.harness.providers.clone(),
            shared.harness.redactor.clone(),
            ctx.model.clone(),
        )),
    };
    let redactor = &shared.harness.redactor;
    let redact = |text: Option<String>| text.map(|text| redactor.redact(&text).into_owned());
    for hook in hooks {
        if !hook.handles(&event) {
            continue;
        }
        let name = hook.name();
        let mut record = HookRecord {
            event: point.name().to_owned(),
            hook: name.clone(),
            subject: subject.map(str::to_owned),
            decision: String::new(),
            reason: None,
            updated_input: None,
            replacement: None,
            additional_context: None,
            usage: None,
        };
        let span = crate::spans::hook(point.name(), &name);
        // Each hook sees the writes of the hooks (and calls) before it.
        hook_ctx.state = state.current();
        let outcome = {
            let _entered = span.enter();
            hook.decide(&event, &hook_ctx)
        }
        .await;
        record.usage = spent_by(&hook_ctx, ctx);
        let outcome = outcome.and_then(|mut decision| match decision.state.take() {
            None => Ok(decision),
            Some(value) => state
                .write(point, subject, value)
                .map(|()| decision)
                .map_err(|why| HookFailure::new(format!("hook {name}: {why}"))),
        });
        let decision = match outcome {
            Ok(decision) => decision,
            Err(failure) => {
                let mut message = redactor.redact(&failure.message).into_owned();
                let closed = if failure.not_started {
                    point != HookPoint::SessionEnd
                } else {
                    point.is_blocking() && !hook.fails_open()
                };
                if closed {
                    message.push_str(if failure.not_started {
                        NOT_STARTED_FAILS_CLOSED
                    } else {
                        FAILS_CLOSED
                    });
                }
                tracing::warn!(target: flue_protocol::SPAN_TARGET, "{message}");
                record.decision = "error".to_owned();
                record.reason = Some(message.clone());
                span_decision(&span, "error");
                decided.records.push(Record::Hook(record));
                if closed {
                    decided.failed = true;
                    decided.hook = name;
                    decided.verdict = match point {
                        HookPoint::PreToolUse => Verdict::Deny,
                        // The model sees the failure instead of the result the hook never saw.
                        HookPoint::PostToolUse => {
                            decided.replacement = Some(message.clone());
                            Verdict::Continue
                        }
                        _ => Verdict::Tripwire,
                    };
                    decided.reason = Some(message);
                    break;
                }
                continue;
            }
        };
        let non_blocking = decision.verdict == Verdict::Continue
            && decision
                .reason
                .as_deref()
                .is_some_and(|reason| reason.starts_with(NON_BLOCKING_PREFIX));
        record.decision = if non_blocking {
            "error".to_owned()
        } else {
            decision.verdict.name().to_owned()
        };
        record.reason = redact(decision.reason.clone());
        record.updated_input = decision.updated_input.clone();
        record.replacement = redact(decision.replacement.clone());
        record.additional_context = redact(decision.additional_context.clone());
        span_decision(&span, &record.decision);
        if let Some(context) = &record.additional_context {
            decided.context.push(context.clone());
        }
        if let Some(input) = &record.updated_input {
            decided.updated_input = Some(input.clone());
            if let HookEvent::PreToolUse { call } = &mut event {
                call.input = input.clone();
            }
        }
        if let Some(text) = &record.replacement {
            decided.replacement = Some(text.clone());
            match &mut event {
                HookEvent::PostToolUse { result, .. } => result.content = text.clone(),
                HookEvent::UserPromptSubmit { prompt } => *prompt = text.clone(),
                HookEvent::Stop { reply, .. } => *reply = text.clone(),
                _ => {}
            }
        }
        let verdict = decision.verdict;
        let reason = record.reason.clone();
        decided.records.push(Record::Hook(record));
        if verdict == Verdict::Continue || non_blocking {
            continue;
        }
        // `ask` outranks `allow`; anything else ends the asking.
        if verdict == Verdict::Allow && decided.verdict == Verdict::Ask {
            continue;
        }
        decided.verdict = verdict;
        decided.reason = reason;
        decided.hook = name;
        if matches!(verdict, Verdict::Deny | Verdict::Tripwire | Verdict::Block) {
            break;
        }
    }
    decided
}

/// What the hook just asked of the model (a prompt hook's judgement), added to the
/// operation's usage; `None` when it asked nothing.
fn spent_by(hook_ctx: &HookContext, ctx: &OperationContext) -> Option<Usage> {
    let spent = hook_ctx.model.as_ref()?.take_spent();
    if spent == Usage::default() {
        return None;
    }
    *ctx.hook_usage
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) += spent;
    Some(spent)
}

fn span_decision(span: &Span, decision: &str) {
    if !span.is_disabled() {
        span.record("flue.hook.decision", decision);
        if decision == "error" {
            span.record("error.type", "hook_failed");
        }
    }
}

/// The decisions stored for `point` and `subject` since the log's last turn boundary (for
/// tool points: since the turn that made the call), as a [`Decided`] without records to
/// store; `None` when none is stored.
pub(crate) fn stored(
    records: &[Record],
    point: HookPoint,
    subject: Option<&str>,
) -> Option<Decided> {
    let mut found = Vec::new();
    for record in records.iter().rev() {
        match record {
            Record::Hook(hook)
                if hook.event == point.name() && hook.subject.as_deref() == subject =>
            {
                found.push(hook);
            }
            Record::Assistant(_) | Record::User(_) | Record::Shell(_) | Record::Compaction(_) => {
                break;
            }
            _ => {}
        }
    }
    if found.is_empty() {
        return None;
    }
    found.reverse();
    let mut decided = Decided::default();
    for hook in found {
        if let Some(context) = &hook.additional_context {
            decided.context.push(context.clone());
        }
        if let Some(input) = &hook.updated_input {
            decided.updated_input = Some(input.clone());
        }
        if let Some(text) = &hook.replacement {
            decided.replacement = Some(text.clone());
        }
        let verdict = match hook.decision.as_str() {
            "allow" => Verdict::Allow,
            "deny" => Verdict::Deny,
            "ask" => Verdict::Ask,
            "block" => Verdict::Block,
            "tripwire" => Verdict::Tripwire,
            _ => Verdict::Continue,
        };
        let failed_closed = hook.decision == "error"
            && hook.reason.as_deref().is_some_and(|reason| {
                reason.ends_with(FAILS_CLOSED) || reason.ends_with(NOT_STARTED_FAILS_CLOSED)
            });
        if verdict == Verdict::Continue && !failed_closed {
            continue;
        }
        decided.hook = hook.hook.clone();
        decided.reason = hook.reason.clone();
        decided.failed = failed_closed;
        decided.verdict = if failed_closed && point == HookPoint::PreToolUse {
            Verdict::Deny
        } else if failed_closed {
            Verdict::Tripwire
        } else {
            verdict
        };
    }
    Some(decided)
}

/// The input a stored `PreToolUse` decision gave call `call_id` (a confirmed call runs with
/// it after its pause).
pub(crate) fn stored_input(records: &[Record], call_id: &str) -> Option<Value> {
    records.iter().rev().find_map(|record| match record {
        Record::Hook(hook)
            if hook.event == HookPoint::PreToolUse.name()
                && hook.subject.as_deref() == Some(call_id) =>
        {
            hook.updated_input.clone()
        }
        _ => None,
    })
}

/// The subject of a `UserPromptSubmit` decision: `prompt:` and a hash of the prompt (FNV-1a),
/// so that the decision on one message is not taken for another's.
pub(crate) fn prompt_subject(prompt: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in prompt.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("prompt:{hash:016x}")
}

/// Emits the stored hook decisions among `records` as events.
pub(crate) fn announce(sink: &TurnSink, records: &[Record]) {
    for record in records {
        if let Record::Hook(hook) = record {
            sink.send(Event::HookDecision { hook: hook.clone() });
        }
    }
}
