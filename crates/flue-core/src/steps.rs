//! Reading the log: what an operation needs next, and what the model sees.
//!
//! Pure functions of the stored records, with no I/O: [`next_step`] decides between a model
//! turn, tool runs and an answer; [`model_view`] cuts the log at the latest compaction
//! summary. Because the decision reads only the log, an operation that stopped mid-turn (a
//! crash, an abort, a pause for a tool confirmation) is picked up from the store alone.

use flue_protocol::record::{
    ActionDecision, ActionInfo, ActionKind, ActionResolution, AssistantContent, PendingAction,
    Record, ToolCall, ToolResult,
};
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use crate::error::FlueError;
use crate::tool::{ToolError, render_output};

/// What the log needs next.
#[derive(Debug, PartialEq)]
pub(crate) enum Step {
    /// Ask the model for a turn.
    CallModel,
    /// Classify and run these unanswered calls of the last assistant message: none of them
    /// waited for a decision yet.
    RunTools(Vec<ToolCall>),
    /// Run these confirmed calls (allowed, not started yet), each with its action id.
    RunConfirmed(Vec<(ToolCall, String)>),
    /// Append these tool results, which decisions (or a crash) settled without running
    /// anything more.
    Answer(Vec<ToolResult>),
    /// The operation waits for decisions on these actions.
    Paused(Vec<PendingAction>),
    /// The last assistant message answered without tool calls.
    Answered,
}

/// Every action the log holds, in order, with its decision.
pub(crate) fn actions(records: &[Record]) -> Vec<ActionInfo> {
    let mut list: Vec<ActionInfo> = Vec::new();
    for record in records {
        match record {
            Record::ActionRequired(action) => list.push(ActionInfo {
                action: action.clone(),
                decision: None,
            }),
            Record::ActionResolved(resolution) => {
                if let Some(state) = list.iter_mut().find(|state| {
                    state.action.action_id == resolution.action_id && state.decision.is_none()
                }) {
                    state.decision = Some(resolution.decision.clone());
                }
            }
            _ => {}
        }
    }
    list
}

/// The actions still waiting for a decision.
pub(crate) fn pending_actions(records: &[Record]) -> Vec<PendingAction> {
    actions(records)
        .into_iter()
        .filter(|state| state.decision.is_none())
        .map(|state| state.action)
        .collect()
}

/// What the agent loop asks about the whole log, kept up to date record by record, so that
/// opening an operation or taking a turn never reads the whole log: the tool call ids in use,
/// the calls answered, and the actions with their decisions. Every answer equals the function
/// of the records it stands for ([`actions`], [`pending_actions`], [`results_before_input`],
/// [`make_call_ids_unique`]); the tests hold them together.
#[derive(Clone, Debug, Default)]
pub(crate) struct LogIndex {
    /// Ids of the tool calls of assistant turns and of tool results.
    call_ids: HashSet<String>,
    /// Ids of the calls a tool result answers.
    answered: HashSet<String>,
    /// Every action, in order, with its decision (what [`actions`] returns).
    actions: Vec<ActionInfo>,
    /// Indices in `actions` of the actions without a decision, in order.
    open: Vec<usize>,
    /// Indices in `actions` of each call's actions, in order.
    by_call: HashMap<String, Vec<usize>>,
    /// The size of the records as stored (their JSON), for the log cache's byte bound.
    bytes: usize,
    /// The latest state document and its version (`None`: never written).
    state: Option<(serde_json::Value, u64)>,
    /// Attempts stored per replay-safe call ([`Record::ToolAttempt`]).
    attempts: HashMap<String, u32>,
    /// Whether the log holds a user message.
    has_user: bool,
}

impl LogIndex {
    /// The index of `records`.
    pub(crate) fn of(records: &[Record]) -> Self {
        let mut index = Self::default();
        index.extend(records);
        index
    }

    /// Takes in records appended to the log.
    pub(crate) fn extend<'a>(&mut self, records: impl IntoIterator<Item = &'a Record>) {
        for record in records {
            self.add(record);
        }
    }

    /// The size of the records taken in, as stored (their JSON): what a cached log holds.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    fn add(&mut self, record: &Record) {
        self.bytes = self
            .bytes
            .saturating_add(crate::store::rules::json_length(record));
        match record {
            Record::Assistant(message) => {
                self.call_ids
                    .extend(message.tool_calls().map(|call| call.id.clone()));
            }
            Record::ToolResult(result) => {
                self.call_ids.insert(result.call_id.clone());
                self.answered.insert(result.call_id.clone());
            }
            Record::ActionRequired(action) => {
                let idx = self.actions.len();
                self.by_call
                    .entry(action.call_id.clone())
                    .or_default()
                    .push(idx);
                self.open.push(idx);
                self.actions.push(ActionInfo {
                    action: action.clone(),
                    decision: None,
                });
            }
            Record::ActionResolved(resolution) => {
                // The first undecided action of that id takes the decision, as in `actions`.
                if let Some(pos) = self
                    .open
                    .iter()
                    .position(|&idx| self.actions[idx].action.action_id == resolution.action_id)
                {
                    let idx = self.open.remove(pos);
                    self.actions[idx].decision = Some(resolution.decision.clone());
                }
            }
            Record::State(change) => {
                self.state = Some((change.value.clone(), change.version));
            }
            Record::ToolAttempt(attempt) => {
                let seen = self.attempts.entry(attempt.call_id.clone()).or_default();
                *seen = (*seen).max(attempt.attempt);
            }
            Record::User(_) => self.has_user = true,
            _ => {}
        }
    }

    /// The latest state document and its version, when one was written.
    pub(crate) fn state(&self) -> Option<(&serde_json::Value, u64)> {
        self.state
            .as_ref()
            .map(|(value, version)| (value, *version))
    }

    /// Attempts stored for call `call_id` (0: none).
    pub(crate) fn attempts(&self, call_id: &str) -> u32 {
        self.attempts.get(call_id).copied().unwrap_or(0)
    }

    /// Whether the log holds a user message (input reached it before).
    pub(crate) fn has_user(&self) -> bool {
        self.has_user
    }

    /// The actions still waiting for a decision ([`pending_actions`] of the log).
    pub(crate) fn pending_actions(&self) -> Vec<PendingAction> {
        self.open
            .iter()
            .map(|&idx| self.actions[idx].action.clone())
            .collect()
    }

    /// The first decided action of `call_id`, with its decision.
    fn decided(&self, call_id: &str) -> Option<(&PendingAction, &ActionDecision)> {
        self.by_call.get(call_id)?.iter().find_map(|&idx| {
            let state = &self.actions[idx];
            Some((&state.action, state.decision.as_ref()?))
        })
    }
}

/// The action id of a call that waits for a decision.
pub(crate) fn action_id(call_id: &str) -> String {
    format!("act_{call_id}")
}

/// Decides the next step from the log alone.
pub(crate) fn next_step(records: &[Record]) -> Step {
    let mut answered = HashSet::new();
    let mut required: HashMap<&str, &PendingAction> = HashMap::new();
    let mut decided: HashMap<&str, &ActionDecision> = HashMap::new();
    let mut started: HashSet<&str> = HashSet::new();
    for record in records.iter().rev() {
        match record {
            Record::ToolResult(result) => {
                answered.insert(result.call_id.as_str());
            }
            // A live action (an MCP server's question during a call) never holds the call.
            Record::ActionRequired(action) if action.kind == ActionKind::Elicitation => {}
            Record::ActionRequired(action) => {
                required.insert(action.call_id.as_str(), action);
            }
            Record::ActionResolved(resolution) => {
                // Walking backwards: the earliest decision is seen last and wins.
                decided.insert(resolution.action_id.as_str(), &resolution.decision);
            }
            Record::ActionStarted(start) => {
                started.insert(start.action_id.as_str());
            }
            Record::Assistant(message) => {
                let unanswered: Vec<&ToolCall> = message
                    .tool_calls()
                    .filter(|call| !answered.contains(call.id.as_str()))
                    .collect();
                let has_calls = message.tool_calls().next().is_some();
                if !unanswered.is_empty() {
                    return unanswered_step(&unanswered, &required, &decided, &started);
                }
                return if !has_calls && answered.is_empty() {
                    Step::Answered
                } else {
                    Step::CallModel
                };
            }
            Record::User(_) | Record::Shell(_) | Record::Compaction(_) => return Step::CallModel,
            // Sampling: an exchange during a call, never holding it.
            _ => {}
        }
    }
    Step::CallModel
}

/// The step for the unanswered calls of the last turn: answers first (decisions that need no
/// run, confirmed calls a crash cut short), then confirmed runs, then calls never classified,
/// then the wait.
fn unanswered_step(
    unanswered: &[&ToolCall],
    required: &HashMap<&str, &PendingAction>,
    decided: &HashMap<&str, &ActionDecision>,
    started: &HashSet<&str>,
) -> Step {
    let mut answers = Vec::new();
    let mut confirmed = Vec::new();
    let mut unclassified = Vec::new();
    let mut waiting = Vec::new();
    for call in unanswered {
        let Some(action) = required.get(call.id.as_str()) else {
            unclassified.push((*call).clone());
            continue;
        };
        let id = action.action_id.as_str();
        match decided.get(id) {
            None => waiting.push((*action).clone()),
            Some(ActionDecision::Allow) if started.contains(id) => {
                answers.push(interrupted_result(call));
            }
            Some(ActionDecision::Allow) => confirmed.push(((*call).clone(), id.to_owned())),
            Some(decision) => answers.push(decided_result(call, action, decision)),
        }
    }
    if !answers.is_empty() {
        Step::Answer(answers)
    } else if !confirmed.is_empty() {
        Step::RunConfirmed(confirmed)
    } else if !unclassified.is_empty() {
        Step::RunTools(unclassified)
    } else {
        Step::Paused(waiting)
    }
}

/// The tool result a decision other than `allow` gives its call.
fn decided_result(
    call: &ToolCall,
    action: &PendingAction,
    decision: &ActionDecision,
) -> ToolResult {
    match decision {
        ActionDecision::Result { value, is_error } => ToolResult {
            call_id: call.id.clone(),
            tool_name: call.name.clone(),
            content: render_output(value),
            is_error: *is_error,
            error_kind: is_error.then(|| "custom_tool_error".to_owned()),
            data: Vec::new(),
        },
        ActionDecision::Deny { message } => {
            let what = match action.kind {
                ActionKind::Confirmation => "the user denied permission to run this tool call",
                // A custom tool, a task or an elicitation.
                _ => "the application declined this tool call",
            };
            let text = match message.as_deref().map(str::trim) {
                Some(message) if !message.is_empty() => format!("{what}: {message}"),
                _ => format!("{what}; do not retry it unchanged"),
            };
            error_result(call, &ToolError::new("permission_denied", text))
        }
        // Allow, interrupted, and an elicitation's accept, decline or cancel.
        _ => interrupted_result(call),
    }
}

fn interrupted_result(call: &ToolCall) -> ToolResult {
    error_result(
        call,
        &ToolError::new(
            "interrupted",
            "this tool call was interrupted before it finished; it may or may not have taken \
             effect",
        ),
    )
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
#[cfg(test)]
pub(crate) fn make_call_ids_unique(content: &mut [AssistantContent], records: &[Record]) {
    rename_repeated_calls(content, &LogIndex::of(records));
}

/// [`make_call_ids_unique`] against the log's index.
pub(crate) fn rename_repeated_calls(content: &mut [AssistantContent], index: &LogIndex) {
    // Ids this turn took, beyond those of the log.
    let mut taken: HashSet<String> = HashSet::new();
    let used =
        |id: &str, taken: &HashSet<String>| index.call_ids.contains(id) || taken.contains(id);
    for part in content {
        let AssistantContent::ToolCall(call) = part else {
            continue;
        };
        let blank = call.id.trim().is_empty();
        if !blank && !used(&call.id, &taken) {
            taken.insert(call.id.clone());
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
            if !used(&candidate, &taken) {
                break candidate;
            }
            n += 1;
        };
        taken.insert(fresh.clone());
        call.id = fresh;
    }
}

/// Whether the model sees a record at all: pause bookkeeping (pending actions, decisions,
/// starts) is for the runtime; the model sees the tool results they lead to.
fn seen_by_model(record: &Record) -> bool {
    !matches!(
        record,
        Record::ActionRequired(_)
            | Record::ActionResolved(_)
            | Record::ActionStarted(_)
            | Record::Sampling(_)
            | Record::FailedTurn(_)
            | Record::Hook(_)
            | Record::State(_)
            | Record::ToolAttempt(_)
            | Record::Rule(_)
    )
}

/// The records of a session the model sees when it is called after them: what a turn's
/// [`ModelRequest::messages`](crate::model::ModelRequest::messages) holds (the latest
/// compaction summary and the records it kept, without pause bookkeeping, hook decisions,
/// usage of failed turns and state changes).
pub fn model_view(records: &[Record]) -> Cow<'_, [Record]> {
    let latest = records
        .iter()
        .enumerate()
        .rev()
        .find_map(|(idx, record)| match record {
            Record::Compaction(summary) => Some((idx, summary)),
            _ => None,
        });
    let Some((summary_idx, summary)) = latest else {
        if records.iter().all(seen_by_model) {
            return Cow::Borrowed(records);
        }
        return Cow::Owned(
            records
                .iter()
                .filter(|record| seen_by_model(record))
                .cloned()
                .collect(),
        );
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
            .filter(|(idx, record)| {
                *idx != summary_idx
                    && !matches!(record, Record::Compaction(_))
                    && seen_by_model(record)
            })
            .map(|(_, record)| record.clone()),
    );
    Cow::Owned(view)
}

/// `interrupted` decisions for the live actions of `records` still pending: at the opening of
/// an operation no call of the session runs, so nobody waits for them any more.
#[cfg(test)]
pub(crate) fn orphaned_live_actions(records: &[Record]) -> Vec<Record> {
    orphaned_live_actions_in(&LogIndex::of(records))
}

/// [`orphaned_live_actions`] of the log whose index is `index`.
pub(crate) fn orphaned_live_actions_in(index: &LogIndex) -> Vec<Record> {
    index
        .pending_actions()
        .into_iter()
        .filter(|action| action.kind == ActionKind::Elicitation)
        .map(|action| {
            Record::ActionResolved(ActionResolution::of(&action, ActionDecision::Interrupted))
        })
        .collect()
}

/// Results for calls an earlier operation left unanswered (a crash or an abort), so the log
/// stays well-formed before new input is appended. Calls that wait for a decision, or were
/// allowed and not started, are left alone: they are not unanswered, they are pending.
#[cfg(test)]
pub(crate) fn interrupted_results(records: &[Record]) -> Vec<Record> {
    interrupted_results_except(records, |_| false)
}

/// [`interrupted_results`], leaving alone the never-classified calls `replay` picks (calls of
/// replay-safe tools): those stay unanswered, so the loop runs them again.
pub(crate) fn interrupted_results_except(
    records: &[Record],
    replay: impl Fn(&ToolCall) -> bool,
) -> Vec<Record> {
    match next_step(records) {
        Step::RunTools(calls) => calls
            .iter()
            .filter(|call| !replay(call))
            .map(|call| Record::ToolResult(interrupted_result(call)))
            .collect(),
        Step::Answer(results) => results.into_iter().map(Record::ToolResult).collect(),
        Step::CallModel | Step::Answered | Step::RunConfirmed(_) | Step::Paused(_) => Vec::new(),
    }
}

/// Results that close the last turn before new input is appended: decided actions get their
/// answers, and every other unanswered call (never classified, or allowed and not run) is
/// answered `interrupted`: the conversation moves on, so it will not run any more.
pub(crate) fn results_before_input(records: &[Record]) -> Vec<ToolResult> {
    results_before_input_in(records, &LogIndex::of(records))
}

/// [`results_before_input`] with the log's index: reads the log back to its last assistant
/// turn only.
pub(crate) fn results_before_input_in(records: &[Record], index: &LogIndex) -> Vec<ToolResult> {
    let Some(message) = records.iter().rev().find_map(|record| match record {
        Record::Assistant(message) => Some(message),
        _ => None,
    }) else {
        return Vec::new();
    };
    message
        .tool_calls()
        .filter(|call| !index.answered.contains(call.id.as_str()))
        .map(|call| match index.decided(&call.id) {
            Some((action, decision)) if *decision != ActionDecision::Allow => {
                decided_result(call, action, decision)
            }
            _ => interrupted_result(call),
        })
        .collect()
}

/// Checks a decision on `action_id` against the log: the action must exist and wait, and
/// the decision must fit its kind.
pub(crate) fn check_decision(
    records: &[Record],
    session: &str,
    action_id: &str,
    decision: &ActionDecision,
) -> crate::error::Result<PendingAction> {
    let list = actions(records);
    let Some(state) = list
        .iter()
        .find(|state| state.action.action_id == action_id)
    else {
        return Err(FlueError::ActionNotFound {
            action_id: action_id.to_owned(),
            session: session.to_owned(),
            pending: list
                .iter()
                .filter(|state| state.decision.is_none())
                .map(|state| state.action.action_id.clone())
                .collect(),
        });
    };
    if state.decision.is_some() {
        return Err(FlueError::ActionAlreadyResolved {
            action_id: action_id.to_owned(),
        });
    }
    let elicitation_answer = matches!(
        decision,
        ActionDecision::Accept { .. } | ActionDecision::Decline { .. } | ActionDecision::Cancel
    );
    let misfit = match (state.action.kind, decision) {
        (
            ActionKind::Elicitation,
            ActionDecision::Accept { .. }
            | ActionDecision::Decline { .. }
            | ActionDecision::Cancel
            | ActionDecision::Interrupted,
        ) => None,
        (ActionKind::Elicitation, _) => Some(
            "an MCP server's question is answered with accept (and its content), decline or \
             cancel",
        ),
        (_, _) if elicitation_answer => Some(
            "accept, decline and cancel answer an MCP server's question; a tool call is \
             answered with allow, deny or a result",
        ),
        (_, ActionDecision::AllowAlways) => Some(
            "allow_always is decided through `AgentRuntime::resolve`, which signs the standing \
             rule with its approval key; answer allow here",
        ),
        (ActionKind::Confirmation, ActionDecision::Result { .. }) => {
            Some("a confirmation is answered with allow or deny, not a result")
        }
        (ActionKind::Task, decision) if *decision != ActionDecision::Interrupted => Some(
            "this `task` call waits for its subagent: decide the subagent's own pending actions \
             (listed with their session) instead",
        ),
        (ActionKind::CustomTool, ActionDecision::Allow) => Some(
            "a custom tool is answered with its result (or a denial); the runtime cannot run it",
        ),
        _ => None,
    };
    if let Some(message) = misfit {
        return Err(FlueError::InvalidDecision {
            action_id: action_id.to_owned(),
            message: message.to_owned(),
        });
    }
    // A custom tool's result must match its declared output schema (an error result is the
    // application's own message and is not checked).
    if let (
        ActionKind::CustomTool,
        ActionDecision::Result {
            value,
            is_error: false,
        },
        Some(schema),
    ) = (state.action.kind, decision, &state.action.output_schema)
    {
        let problems =
            crate::tool::schema_problems(schema, value).unwrap_or_else(|problem| vec![problem]);
        if !problems.is_empty() {
            return Err(FlueError::InvalidDecision {
                action_id: action_id.to_owned(),
                message: format!(
                    "the result of `{}` does not match its output schema: {}; fix `value` and \
                     post it again (the call is still pending)",
                    state.action.tool_name,
                    problems.join("; ")
                ),
            });
        }
    }
    Ok(state.action.clone())
}

/// `decision` as it is stored for `action`: an elicitation's accepted content checked against
/// the requested schema, with its defaults filled in ([`FlueError::InvalidDecision`] naming
/// the fields when it does not fit); anything else unchanged.
pub(crate) fn normalize_decision(
    action: &PendingAction,
    decision: ActionDecision,
) -> crate::error::Result<ActionDecision> {
    match (action.kind, decision) {
        (ActionKind::Elicitation, ActionDecision::Accept { content }) => {
            let schema = action
                .input
                .get("requestedSchema")
                .cloned()
                .unwrap_or(serde_json::Value::Null);
            crate::elicitation::check_elicitation_content(&schema, &content)
                .map(|values| ActionDecision::Accept {
                    content: serde_json::Value::Object(values),
                })
                .map_err(|problem| FlueError::InvalidDecision {
                    action_id: action.action_id.clone(),
                    message: format!(
                        "the content does not fit the requested schema: {problem}; the question \
                         is still pending"
                    ),
                })
        }
        (_, decision) => Ok(decision),
    }
}

pub(crate) fn error_result(call: &ToolCall, error: &ToolError) -> ToolResult {
    ToolResult {
        call_id: call.id.clone(),
        tool_name: call.name.clone(),
        content: error.model_text(),
        is_error: true,
        error_kind: Some(error.kind.clone()),
        data: Vec::new(),
    }
}

#[cfg(test)]
mod tests;
