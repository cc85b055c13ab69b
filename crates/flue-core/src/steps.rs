//! Reading the log: what an operation needs next, and what the model sees.
//!
//! Pure functions of the stored records, with no I/O: [`next_step`] decides between a model
//! turn, tool runs and an answer; [`model_view`] cuts the log at the latest compaction
//! summary. Because the decision reads only the log, an operation that stopped mid-turn (a
//! crash, an abort, a pause for a tool confirmation) is picked up from the store alone.

use std::borrow::Cow;
use std::collections::HashSet;

use crate::record::{AssistantContent, Record, ToolCall, ToolResult};
use crate::tool::ToolError;

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

pub(crate) fn error_result(call: &ToolCall, error: &ToolError) -> ToolResult {
    ToolResult {
        call_id: call.id.clone(),
        tool_name: call.name.clone(),
        content: error.model_text(),
        is_error: true,
        error_kind: Some(error.kind.clone()),
    }
}

#[cfg(test)]
mod tests;
