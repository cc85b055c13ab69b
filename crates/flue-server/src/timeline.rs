//! A submission's timeline, as the dev console draws it (`GET /_flue/dev/timeline/...`): each
//! model call, tool call, task (its own steps nested), compaction, hook decision and pause of
//! one submission, with its start, duration, tokens and cost, and the slowest step marked.
//!
//! A pure function over the conversation's stored stream ([`timeline`]): the batches say which
//! submission wrote which records, and each record says when it was written (`at`) and, where
//! the runtime measured it, when its work began and how long it took (`started_at`,
//! `duration_ms`: model calls, tool runs, compactions). Records of logs written before that was
//! measured, and hook decisions, get a start estimated from the record before them in their
//! session (`estimated: true`), so old conversations still have a timeline.

use std::collections::{BTreeMap, HashMap};

use flue_core::{
    BatchBody, DEFAULT_SESSION, Record, StoredRecord, StreamBatch, Usage, record::ActionKind,
    util::task_session_parent,
};
use serde::Serialize;

/// One step of a submission's work.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Step {
    /// `model`, `failed_model`, `tool`, `task`, `compaction`, `hook`, `pause` or `sampling`.
    pub(crate) kind: &'static str,
    /// What ran: the model (`provider/id`), the tool, the hook point and decision.
    pub(crate) label: String,
    /// More about it: why the model stopped, a hook's name, what a pause waits for.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub(crate) detail: String,
    /// The session it ran in (`default`, or a task's `task:<parent>:<uuid>`).
    pub(crate) session: String,
    /// Its start, in ms after the submission was admitted.
    pub(crate) start: u64,
    /// How long it took, in ms (until now while it runs).
    pub(crate) duration_ms: u64,
    /// The tokens and cost of a model call (a task's: its steps' sum).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) usage: Option<Usage>,
    /// It failed (an error result, a failed model call, a denying hook).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) error: bool,
    /// Its start was not recorded and is estimated from the record before it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) estimated: bool,
    /// It has not ended yet.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) running: bool,
    /// The slowest step of the submission (tasks and pauses aside: they hold other steps or
    /// a person's time).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) slowest: bool,
    /// A task's own steps.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) children: Vec<Step>,
    /// A model call's record: its index in its session's log (what
    /// `GET /_flue/dev/prompt/...?session=S&index=I` shows the prompt of).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) index: Option<u64>,
    /// A running call's id (the console shows a running task's live progress under it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) call_id: Option<String>,
}

/// One submission's timeline.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Timeline {
    /// The submission.
    pub(crate) submission_id: String,
    /// The start of its message's text.
    pub(crate) message: String,
    /// When it was admitted, ms since the epoch: the timeline's zero.
    pub(crate) accepted_at: u64,
    /// When its first attempt started, in ms after admission.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) queued_ms: Option<u64>,
    /// Attempts started.
    pub(crate) attempts: u32,
    /// `completed`, `failed` or `aborted`; absent while it runs or waits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) outcome: Option<String>,
    /// From admission to settlement (or to now).
    pub(crate) duration_ms: u64,
    /// Every model call's tokens and cost, tasks included.
    pub(crate) usage: Usage,
    /// Model calls made, tasks included.
    pub(crate) model_calls: u32,
    /// The steps, in the order they began.
    pub(crate) steps: Vec<Step>,
}

/// A submission of the conversation, for the list the timeline is picked from.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SubmissionSummary {
    /// The submission.
    pub(crate) submission_id: String,
    /// The start of its message's text.
    pub(crate) message: String,
    /// When it was admitted, ms since the epoch.
    pub(crate) accepted_at: u64,
    /// How it settled, once it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) outcome: Option<String>,
}

/// The longest message text a timeline repeats.
const MESSAGE_CHARS: usize = 120;

/// The conversation's submissions in admission order.
pub(crate) fn submissions(batches: &[StreamBatch]) -> Vec<SubmissionSummary> {
    let mut list: Vec<SubmissionSummary> = Vec::new();
    for batch in batches {
        match &batch.body {
            BatchBody::Admitted {
                submission_id,
                message,
                accepted_at,
            } => list.push(SubmissionSummary {
                submission_id: submission_id.clone(),
                message: message_text(message),
                accepted_at: *accepted_at,
                outcome: None,
            }),
            BatchBody::Settled(settlement) => {
                if let Some(found) = list
                    .iter_mut()
                    .find(|item| item.submission_id == settlement.submission_id)
                {
                    found.outcome = Some(settlement.outcome.as_str().to_owned());
                }
            }
            _ => {}
        }
    }
    list
}

/// The timeline of submission `submission_id` from the conversation's stream `batches` (in
/// offset order), `now` (ms since the epoch) ending what still runs. `None` when the stream
/// holds no such submission.
pub(crate) fn timeline(batches: &[StreamBatch], submission_id: &str, now: u64) -> Option<Timeline> {
    let summary = submissions(batches)
        .into_iter()
        .find(|item| item.submission_id == submission_id)?;
    let zero = summary.accepted_at;
    let mut first_start = None;
    let mut attempts = 0;
    let mut settled_at = None;
    // Every decision on an action, whoever wrote it: a pause ends when its action is decided.
    let mut decided: HashMap<(String, String), u64> = HashMap::new();
    // This submission's records, by session, in the order written.
    let mut sessions: BTreeMap<String, Vec<(u64, &StoredRecord)>> = BTreeMap::new();
    let mut session_order: Vec<String> = Vec::new();
    for batch in batches {
        let ours = batch.submission_id.as_deref() == Some(submission_id);
        match &batch.body {
            BatchBody::Started {
                submission_id: started,
                attempt,
            } if started == submission_id => {
                first_start.get_or_insert(batch.at);
                attempts = attempts.max(*attempt);
            }
            BatchBody::Settled(settlement) if settlement.submission_id == submission_id => {
                settled_at = Some(settlement.settled_at);
            }
            BatchBody::Records {
                session,
                records,
                first_index,
            } => {
                for stored in records {
                    if let Record::ActionResolved(resolution) = &stored.record {
                        decided
                            .entry((session.clone(), resolution.action_id.clone()))
                            .or_insert(stored.at);
                    }
                }
                if ours {
                    if !sessions.contains_key(session) {
                        session_order.push(session.clone());
                    }
                    sessions
                        .entry(session.clone())
                        .or_default()
                        .extend((*first_index..).zip(records));
                }
            }
            _ => {}
        }
    }
    let end = settled_at.unwrap_or(now).max(zero);
    let context = Context {
        zero,
        end,
        running: settled_at.is_none(),
        decided: &decided,
    };
    let mut built: HashMap<String, SessionSteps> = session_order
        .iter()
        .map(|name| {
            let records = sessions.get(name).map_or(&[][..], Vec::as_slice);
            (name.clone(), session_steps(name, records, &context))
        })
        .collect();
    let root = root_session(&session_order);
    let mut steps = assemble(&root, &mut built, &session_order);
    mark_slowest(&mut steps);
    let mut usage = Usage::default();
    let mut model_calls = 0;
    total(&steps, &mut usage, &mut model_calls);
    Some(Timeline {
        submission_id: summary.submission_id,
        message: summary.message,
        accepted_at: zero,
        queued_ms: first_start.map(|at: u64| at.saturating_sub(zero)),
        attempts,
        outcome: summary.outcome,
        duration_ms: end - zero,
        usage,
        model_calls,
        steps,
    })
}

/// What every session's steps are measured against.
struct Context<'a> {
    /// The submission's admission (ms since the epoch).
    zero: u64,
    /// Its settlement, or now.
    end: u64,
    /// It has not settled.
    running: bool,
    /// When each `(session, action)` was decided.
    decided: &'a HashMap<(String, String), u64>,
}

impl Context<'_> {
    /// A step from `from` to `to` (ms since the epoch), placed on the timeline.
    fn step(&self, kind: &'static str, session: &str, from: u64, to: u64) -> Step {
        let from = from.max(self.zero);
        Step {
            kind,
            label: String::new(),
            detail: String::new(),
            session: session.to_owned(),
            start: from - self.zero,
            duration_ms: to.saturating_sub(from),
            usage: None,
            error: false,
            estimated: false,
            running: false,
            slowest: false,
            children: Vec::new(),
            index: None,
            call_id: None,
        }
    }
}

/// One session's steps, and which of them are `task` calls waiting for their task's steps.
struct SessionSteps {
    steps: Vec<Step>,
    /// (index in `steps`, the task session it ran, when its result names it).
    tasks: Vec<(usize, Option<String>)>,
}

fn session_steps(
    session: &str,
    records: &[(u64, &StoredRecord)],
    context: &Context<'_>,
) -> SessionSteps {
    let mut steps = Vec::new();
    let mut tasks = Vec::new();
    // Where the next step's estimated start is: the last record written in this session.
    let mut cursor = records
        .first()
        .map_or(context.zero, |(_, stored)| stored.at);
    // Calls of the last model turn not answered yet: when the turn was stored.
    let mut open_calls: Vec<(String, String, u64)> = Vec::new();
    for &(index, stored) in records {
        let (from, to, estimated) = match stored.timing() {
            Some(timing) => (
                timing.started_at,
                timing.started_at.saturating_add(timing.duration_ms),
                false,
            ),
            None => (cursor, stored.at, true),
        };
        match &stored.record {
            Record::Assistant(message) => {
                let mut step = context.step("model", session, from, to);
                step.label = message.model.to_string();
                let calls: Vec<&str> = message
                    .tool_calls()
                    .map(|call| call.name.as_str())
                    .collect();
                step.detail = if calls.is_empty() {
                    message.stop_reason.to_string()
                } else {
                    format!("{} → {}", message.stop_reason, calls.join(", "))
                };
                step.usage = Some(message.usage);
                step.estimated = estimated;
                step.index = Some(index);
                steps.push(step);
                open_calls = message
                    .tool_calls()
                    .map(|call| (call.id.clone(), call.name.clone(), stored.at))
                    .collect();
            }
            Record::FailedTurn(failed) => {
                let mut step = context.step("failed_model", session, from, to);
                step.label = failed.model.to_string();
                step.detail.clone_from(&failed.error_kind);
                step.usage = Some(failed.usage);
                step.error = true;
                step.estimated = estimated;
                step.index = Some(index);
                steps.push(step);
            }
            Record::ToolResult(result) => {
                let asked = open_calls
                    .iter()
                    .position(|(id, _, _)| *id == result.call_id)
                    .map(|idx| open_calls.remove(idx).2);
                let (from, estimated) = match (stored.timing(), asked) {
                    (Some(_), _) => (from, false),
                    (None, Some(asked)) => (asked, true),
                    (None, None) => (from, true),
                };
                let task = result.tool_name == flue_core::TASK_TOOL;
                let mut step = context.step(if task { "task" } else { "tool" }, session, from, to);
                step.label.clone_from(&result.tool_name);
                step.error = result.is_error;
                step.detail = result.error_kind.clone().unwrap_or_default();
                step.estimated = estimated;
                if task {
                    tasks.push((steps.len(), task_session_of(&result.content)));
                }
                steps.push(step);
            }
            Record::Compaction(summary) => {
                let mut step = context.step("compaction", session, from, to);
                step.label = "compaction".to_owned();
                step.detail = format!("{} tokens before", summary.tokens_before);
                step.usage = summary.usage;
                step.estimated = estimated;
                steps.push(step);
            }
            Record::Hook(hook) => {
                let mut step = context.step("hook", session, from, to);
                step.label = format!("{}: {}", hook.event, hook.decision);
                step.detail.clone_from(&hook.hook);
                step.usage = hook.usage;
                step.error = matches!(
                    hook.decision.as_str(),
                    "deny" | "block" | "tripwire" | "error"
                );
                step.estimated = true;
                steps.push(step);
            }
            Record::Sampling(exchange) => {
                let mut step = context.step("sampling", session, from, to);
                step.label = format!("sampling for {}", exchange.server);
                step.detail.clone_from(&exchange.model);
                step.usage = Some(exchange.usage);
                step.error = exchange.error.is_some();
                step.estimated = true;
                steps.push(step);
            }
            Record::ActionRequired(action) => {
                // The call waits instead of running: it is not a running call, and when it
                // runs after the decision its start is estimated from the records then.
                open_calls.retain(|(id, _, _)| *id != action.call_id);
                if action.kind == ActionKind::Task {
                    // A task that waits: its own pause is in its session.
                    cursor = cursor.max(stored.at);
                    continue;
                }
                let key = (session.to_owned(), action.action_id.clone());
                let until = context.decided.get(&key).copied();
                let mut step =
                    context.step("pause", session, stored.at, until.unwrap_or(context.end));
                step.label = format!("{} waits", action.tool_name);
                step.detail = match action.kind {
                    ActionKind::CustomTool => "for its result".to_owned(),
                    ActionKind::Elicitation => "for an answer to a server's question".to_owned(),
                    _ => "for a decision".to_owned(),
                };
                step.running = until.is_none() && context.running;
                steps.push(step);
            }
            _ => {}
        }
        cursor = cursor.max(stored.at);
    }
    // Calls still running when the submission has not settled.
    if context.running {
        for (call_id, name, asked) in open_calls {
            let task = name == flue_core::TASK_TOOL;
            let mut step = context.step(
                if task { "task" } else { "tool" },
                session,
                asked,
                context.end,
            );
            step.label = name;
            step.running = true;
            step.estimated = true;
            step.call_id = Some(call_id);
            if task {
                tasks.push((steps.len(), None));
            }
            steps.push(step);
        }
    }
    SessionSteps { steps, tasks }
}

/// The task session a `task` call's result names (`{"session": ...}`), if it does.
fn task_session_of(content: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(content).ok()?;
    value.get("session")?.as_str().map(str::to_owned)
}

/// The root of the submission's sessions: `default`, or the one whose parent is not among
/// them (a submission always runs in its conversation's root session).
fn root_session(order: &[String]) -> String {
    if order.iter().any(|name| name == DEFAULT_SESSION) || order.is_empty() {
        return DEFAULT_SESSION.to_owned();
    }
    order
        .iter()
        .find(|name| {
            task_session_parent(name).is_none_or(|parent| !order.iter().any(|n| n == parent))
        })
        .cloned()
        .unwrap_or_else(|| DEFAULT_SESSION.to_owned())
}

/// `session`'s steps with each task's own steps nested under its `task` call (a task named by
/// its result first; the others in the order they began). A task that began with no call to
/// hold it (its call runs on) is listed after the session's steps.
fn assemble(
    session: &str,
    built: &mut HashMap<String, SessionSteps>,
    order: &[String],
) -> Vec<Step> {
    let Some(SessionSteps { mut steps, tasks }) = built.remove(session) else {
        return Vec::new();
    };
    let children: Vec<String> = order
        .iter()
        .filter(|name| task_session_parent(name) == Some(session))
        .cloned()
        .collect();
    let named: Vec<&String> = tasks.iter().filter_map(|(_, name)| name.as_ref()).collect();
    let mut unnamed = children
        .iter()
        .filter(|child| !named.contains(child))
        .cloned()
        .collect::<Vec<_>>()
        .into_iter();
    for (idx, name) in tasks {
        let child = name
            .filter(|name| children.contains(name))
            .or_else(|| unnamed.next());
        if let (Some(child), Some(step)) = (child, steps.get_mut(idx)) {
            step.detail = short_session(&child);
            step.children = assemble(&child, built, order);
            let mut usage = Usage::default();
            let mut calls = 0;
            total(&step.children, &mut usage, &mut calls);
            step.usage = Some(usage);
        }
    }
    for child in unnamed {
        let nested = assemble(&child, built, order);
        let Some(first) = nested.first() else {
            continue;
        };
        let start = first.start;
        let end = nested
            .iter()
            .map(|step| step.start + step.duration_ms)
            .max()
            .unwrap_or(start);
        let mut usage = Usage::default();
        let mut calls = 0;
        total(&nested, &mut usage, &mut calls);
        steps.push(Step {
            kind: "task",
            label: flue_core::TASK_TOOL.to_owned(),
            detail: short_session(&child),
            session: session.to_owned(),
            start,
            duration_ms: end - start,
            usage: Some(usage),
            error: false,
            estimated: true,
            running: true,
            slowest: false,
            children: nested,
            index: None,
            call_id: None,
        });
    }
    steps.sort_by_key(|step| step.start);
    steps
}

/// A task session's own part (`task:<parent>:<uuid>` -> `task <first 8 of uuid>`).
fn short_session(session: &str) -> String {
    let tail = session.rsplit(':').next().unwrap_or(session);
    format!("task {}", tail.chars().take(8).collect::<String>())
}

/// Marks the longest step that is not a task or a pause (nested steps included).
fn mark_slowest(steps: &mut [Step]) {
    fn longest(steps: &[Step], best: &mut Option<(u64, Vec<usize>)>, path: &mut Vec<usize>) {
        for (idx, step) in steps.iter().enumerate() {
            path.push(idx);
            if !matches!(step.kind, "task" | "pause")
                && best.as_ref().is_none_or(|(ms, _)| step.duration_ms > *ms)
            {
                *best = Some((step.duration_ms, path.clone()));
            }
            longest(&step.children, best, path);
            path.pop();
        }
    }
    let mut best = None;
    longest(steps, &mut best, &mut Vec::new());
    let Some((ms, path)) = best else { return };
    if ms == 0 {
        return;
    }
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut level = steps;
    for idx in parents {
        level = match level.get_mut(*idx) {
            Some(step) => &mut step.children,
            None => return,
        };
    }
    if let Some(step) = level.get_mut(*last) {
        step.slowest = true;
    }
}

/// Adds up the usage of the model calls, MCP sampling and compaction summaries (tasks'
/// nested calls included, once).
fn total(steps: &[Step], usage: &mut Usage, calls: &mut u32) {
    for step in steps {
        match step.kind {
            "model" | "failed_model" => {
                *calls += 1;
                if let Some(used) = step.usage {
                    *usage += used;
                }
            }
            "sampling" | "compaction" => {
                if let Some(used) = step.usage {
                    *usage += used;
                }
            }
            _ => total(&step.children, usage, calls),
        }
    }
}

fn message_text(message: &flue_core::DeliveredMessage) -> String {
    let text = match message {
        flue_core::DeliveredMessage::User { body, .. } => body.clone(),
        flue_core::DeliveredMessage::Signal {
            signal_type, body, ..
        } => format!("signal {signal_type}: {body}"),
        _ => String::new(),
    };
    let mut short: String = text.chars().take(MESSAGE_CHARS).collect();
    if text.chars().count() > MESSAGE_CHARS {
        short.push('…');
    }
    short
}

#[cfg(test)]
mod tests;
