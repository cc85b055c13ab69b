//! Compaction: folds older history into a summary so a session keeps fitting its model's
//! context window.
//!
//! - **Estimate** ([`estimate_context`]): the usage the provider reported for the last model
//!   turn since the latest summary, plus a chars/4 estimate of every record after it (tool-call
//!   names and inputs count; an image counts [`IMAGE_TOKENS`]).
//! - **Budget** ([`Budget::new`]): reserve and keep-recent tokens from the agent's
//!   [`CompactionConfig`], or model-aware defaults. The threshold is window − reserve.
//! - **Cut** ([`plan_cut`]): the newest ~keep-recent tokens stay verbatim; the cut never falls
//!   between a tool call and its result; a turn the cut splits gets its own short summary.
//! - **Summary**: written by the session's model or `compaction.model` in fixed sections; a
//!   later compaction updates the previous summary instead of summarising it blindly. The
//!   files read and modified are listed by the runtime from the tool calls, not by the model.
//! - **Storage**: one [`Record::Compaction`] appended to the log. The full history stays in the
//!   store; `steps::model_view` shows the model the summary plus the kept records.
//!
//! [`Compactor`] runs compaction for the agent loop (the threshold check before each model
//! call, and once after a context overflow) and for `session.compact()` ([`run_manual`]).
//! Nothing is written unless the summary succeeded, so a failure or an abort leaves the
//! session unchanged.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use flue_protocol::ThinkingLevel;
use flue_protocol::event::{CompactionReason, Event};
use flue_protocol::record::{
    AssistantContent, CompactionSummary, Record, Usage, UserContent, UserMessage,
};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::config::{Compaction, CompactionConfig};
use crate::error::{FlueError, Result};
use crate::model::{ModelInfo, ModelProvider, ModelRequest, ModelSpec, ToolSchema, TurnSink};
use crate::operation::{OperationContext, redacted_info};
use crate::redact::Redactor;
use crate::shared::{SessionShared, SessionState};
use crate::spans;
use crate::steps::model_view;
use crate::tool::ToolSet;

/// The default reserve never exceeds this many tokens.
const MAX_DEFAULT_RESERVE_TOKENS: u64 = 20_000;
/// Default number of recent tokens kept verbatim.
const DEFAULT_KEEP_RECENT_TOKENS: u64 = 8_000;
/// What one image counts for in estimates.
pub(crate) const IMAGE_TOKENS: u64 = 1_200;
/// Longest tool or shell output the summary model sees for one record.
const MAX_OUTPUT_CHARS: usize = 2_000;
/// Heading of the file lists the runtime appends to every summary.
const FILES_HEADING: &str = "## Files Read and Modified";
/// Separates the history summary from the summary of a split turn's beginning.
const SPLIT_TURN_HEADING: &str = "**Turn context (split turn):**";
/// Stands for records left out of a summary request because they did not fit.
const OMITTED_MARKER: &str = "[... earlier messages omitted to fit the summary model ...]";

/// The system prompt of every summary request.
pub(crate) const SUMMARY_SYSTEM: &str = "You are a context summarization assistant. You read a \
conversation between a user and an AI agent and write a structured summary that another model \
will use to continue the work. Do not continue the conversation and do not answer questions in \
it. Output only the summary, in the requested format.";

/// The sections of a history summary.
const SUMMARY_FORMAT: &str = "## Goal
[What the user is trying to accomplish; several items if the session covers several tasks.]

## Constraints & Preferences
- [Constraints, preferences and requirements the user stated, or \"(none)\"]

## Progress
### Done
- [x] [Completed work]

### In Progress
- [ ] [Current work]

### Blocked
- [What prevents progress, or \"(none)\"]

## Key Decisions
- **[Decision]**: [Brief rationale]

## Next Steps
1. [What should happen next, in order]

## Critical Context
- [Data, examples and references needed to continue, or \"(none)\"]

Keep each section concise. Preserve exact file paths, function names and error messages. Do not \
list the files read or modified: they are added for you.";

/// Compaction settings resolved against one model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Budget {
    /// The model's context window.
    pub(crate) context_window: u64,
    /// Headroom kept free: compaction starts above `context_window - reserve_tokens`.
    pub(crate) reserve_tokens: u64,
    /// Recent tokens kept verbatim.
    pub(crate) keep_recent_tokens: u64,
}

impl Budget {
    /// Settings from `config` where given, otherwise model-aware defaults: the reserve is the
    /// model's output limit capped at 20000, or a third of the window when twice that would not
    /// fit; keep-recent is 8000, capped at half of what the reserve leaves, so that compaction
    /// can always make room in a small window.
    pub(crate) fn new(config: Option<&CompactionConfig>, info: &ModelInfo) -> Self {
        let context_window = info.context_window;
        let reserve_tokens = config
            .and_then(|config| config.reserve_tokens)
            .unwrap_or_else(|| default_reserve_tokens(info));
        let keep_recent_tokens = config
            .and_then(|config| config.keep_recent_tokens)
            .unwrap_or_else(|| {
                DEFAULT_KEEP_RECENT_TOKENS.min(context_window.saturating_sub(reserve_tokens) / 2)
            });
        Self {
            context_window,
            reserve_tokens,
            keep_recent_tokens,
        }
    }

    /// Compaction starts when the estimate exceeds this.
    pub(crate) fn threshold(&self) -> u64 {
        self.context_window.saturating_sub(self.reserve_tokens)
    }
}

fn default_reserve_tokens(info: &ModelInfo) -> u64 {
    let reserve = MAX_DEFAULT_RESERVE_TOKENS.min(info.max_output_tokens);
    if reserve.saturating_mul(2) > info.context_window {
        info.context_window / 3
    } else {
        reserve
    }
}

/// Estimated tokens one record takes in the context.
pub(crate) fn record_tokens(record: &Record) -> u64 {
    let mut n_chars = 0;
    let mut n_images = 0;
    match record {
        Record::User(message) => {
            for part in &message.content {
                match part {
                    UserContent::Text { text } => n_chars += char_count(text),
                    UserContent::Image(_) => n_images += 1,
                    _ => {}
                }
            }
        }
        Record::Assistant(message) => {
            n_chars = message.content.iter().map(content_chars).sum();
        }
        Record::ToolResult(result) => n_chars = char_count(&result.content),
        Record::Shell(shell) => {
            n_chars =
                char_count(&shell.command) + char_count(&shell.stdout) + char_count(&shell.stderr);
        }
        Record::Compaction(summary) => n_chars = char_count(&summary.summary),
        // Pause bookkeeping (action required, resolved, started) and sampling: the model never
        // sees it.
        _ => {}
    }
    chars_to_tokens(n_chars).saturating_add(IMAGE_TOKENS.saturating_mul(n_images))
}

/// Estimated context tokens of the next request: the provider-reported usage of the last model
/// turn since the latest summary plus an estimate of the records after it, or, when there is
/// no such turn, an estimate of the system prompt, the tools and the model's whole view.
pub(crate) fn estimate_context(records: &[Record], system: &str, tools: &[ToolSchema]) -> u64 {
    let since_summary = records
        .iter()
        .rposition(|record| matches!(record, Record::Compaction(_)))
        .map_or(0, |idx| idx + 1);
    let reported = records
        .iter()
        .enumerate()
        .skip(since_summary)
        .rev()
        .find_map(|(idx, record)| match record {
            Record::Assistant(message) if message.usage.context_tokens() > 0 => {
                Some((idx, message.usage.context_tokens()))
            }
            _ => None,
        });
    match reported {
        Some((idx, tokens)) => records
            .iter()
            .skip(idx + 1)
            .map(record_tokens)
            .fold(tokens, u64::saturating_add),
        None => model_view(records)
            .iter()
            .map(record_tokens)
            .fold(prompt_tokens(system, tools), u64::saturating_add),
    }
}

fn prompt_tokens(system: &str, tools: &[ToolSchema]) -> u64 {
    let tool_chars: usize = tools
        .iter()
        .map(|tool| {
            char_count(&tool.name)
                + char_count(&tool.description)
                + char_count(&tool.input_schema.to_string())
        })
        .sum();
    chars_to_tokens(char_count(system) + tool_chars)
}

/// Where a compaction cuts the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CutPlan {
    /// The first record no summary covers yet (the previous summary's `first_kept`, or 0).
    pub(crate) start: usize,
    /// Where the turn the cut splits begins, when it splits one.
    pub(crate) split_turn: Option<usize>,
    /// The first record kept verbatim.
    pub(crate) first_kept: usize,
}

impl CutPlan {
    /// The records folded into the history summary.
    pub(crate) fn history(&self) -> Range<usize> {
        self.start..self.split_turn.unwrap_or(self.first_kept)
    }

    /// The beginning of the split turn, summarised on its own.
    pub(crate) fn turn_prefix(&self) -> Option<Range<usize>> {
        self.split_turn.map(|split| split..self.first_kept)
    }
}

/// Plans a cut that keeps about `keep_recent_tokens` of the newest records. `None` when there
/// is nothing to compact: everything not yet summarised fits in the keep-recent budget, or no
/// cut point would fold anything.
pub(crate) fn plan_cut(records: &[Record], keep_recent_tokens: u64) -> Option<CutPlan> {
    let start = summarised_until(records);
    let cuts = cut_points(records, start);
    let mut kept_tokens = 0u64;
    let mut reached = None;
    for (idx, record) in records.iter().enumerate().skip(start).rev() {
        if matches!(record, Record::Compaction(_)) {
            continue;
        }
        kept_tokens = kept_tokens.saturating_add(record_tokens(record));
        if kept_tokens >= keep_recent_tokens {
            reached = Some(idx);
            break;
        }
    }
    let reached = reached?;
    // Keep at most the budget when a cut point allows it, else as little as the pairs allow.
    let first_kept = cuts
        .iter()
        .copied()
        .find(|&cut| cut >= reached)
        .or_else(|| cuts.last().copied())?;
    let folded = records.get(start..first_kept)?;
    if folded
        .iter()
        .all(|record| matches!(record, Record::Compaction(_)))
    {
        return None;
    }
    let split_turn = match records.get(first_kept) {
        Some(record) if is_turn_start(record) => None,
        _ => folded
            .iter()
            .rposition(is_turn_start)
            .map(|offset| start + offset),
    };
    Some(CutPlan {
        start,
        split_turn,
        first_kept,
    })
}

/// The latest summary's `first_kept`: records before it are summarised already.
fn summarised_until(records: &[Record]) -> usize {
    latest_summary(records).map_or(0, |summary| {
        usize::try_from(summary.first_kept)
            .unwrap_or(usize::MAX)
            .min(records.len())
    })
}

fn latest_summary(records: &[Record]) -> Option<&CompactionSummary> {
    records.iter().rev().find_map(|record| match record {
        Record::Compaction(summary) => Some(summary),
        _ => None,
    })
}

/// Indexes after `start` where the log may be cut: a user message, a model turn or a shell
/// exchange, with every tool call before it answered before it.
fn cut_points(records: &[Record], start: usize) -> Vec<usize> {
    let mut open_calls: HashSet<&str> = HashSet::new();
    let mut cuts = Vec::new();
    for (idx, record) in records.iter().enumerate().skip(start) {
        let kind_allows = matches!(
            record,
            Record::User(_) | Record::Assistant(_) | Record::Shell(_)
        );
        if idx > start && kind_allows && open_calls.is_empty() {
            cuts.push(idx);
        }
        match record {
            Record::Assistant(message) => {
                open_calls.extend(message.tool_calls().map(|call| call.id.as_str()));
            }
            Record::ToolResult(result) => {
                open_calls.remove(result.call_id.as_str());
            }
            _ => {}
        }
    }
    cuts
}

/// A user message or a shell exchange begins a turn.
fn is_turn_start(record: &Record) -> bool {
    matches!(record, Record::User(_) | Record::Shell(_))
}

/// The prompt asking for a history summary, updating `previous` when there is one.
pub(crate) fn history_prompt(conversation: &str, previous: Option<&str>) -> String {
    match previous {
        None => format!(
            "<conversation>\n{conversation}\n</conversation>\n\nThe messages above are a \
             conversation to summarize. Create a structured context checkpoint summary that \
             another model will use to continue the work.\n\nUse this exact format:\n\n\
             {SUMMARY_FORMAT}"
        ),
        Some(previous) => format!(
            "<previous-summary>\n{previous}\n</previous-summary>\n\n<conversation>\n\
             {conversation}\n</conversation>\n\nThe messages in <conversation> are new messages \
             to fold into the existing summary in <previous-summary>. Update the summary: keep \
             everything from it that still matters, add the new progress, decisions and \
             context, move items from \"In Progress\" to \"Done\" when they were completed, and \
             bring \"Next Steps\" up to date.\n\nUse this exact format:\n\n{SUMMARY_FORMAT}"
        ),
    }
}

/// The prompt asking for a summary of the beginning of a turn whose end is kept verbatim.
pub(crate) fn turn_prefix_prompt(conversation: &str) -> String {
    format!(
        "<conversation>\n{conversation}\n</conversation>\n\nThe messages above are the \
         beginning of a turn that is too long to keep; its end is kept verbatim after this \
         summary. Summarize the beginning so that the kept end makes sense:\n\n\
         ## Original Request\n[What the user asked for in this turn]\n\n\
         ## Early Progress\n- [Decisions made and work done so far in this turn]\n\n\
         ## Context for Suffix\n- [What is needed to understand the kept end]\n\n\
         Be concise. Preserve exact file paths, function names and error messages."
    )
}

/// The records as text for a summary request, newest last. When they exceed `max_chars`, the
/// oldest records are left out (the previous summary covers what came before them anyway).
pub(crate) fn render_conversation(records: &[Record], max_chars: usize) -> String {
    let rendered: Vec<String> = records.iter().filter_map(render_record).collect();
    let mut used = 0usize;
    let mut first = rendered.len();
    for (idx, text) in rendered.iter().enumerate().rev() {
        let cost = char_count(text) + 2;
        if used + cost > max_chars {
            break;
        }
        used += cost;
        first = idx;
    }
    let mut parts: Vec<&str> = Vec::with_capacity(rendered.len() - first + 1);
    if first > 0 {
        parts.push(OMITTED_MARKER);
    }
    parts.extend(rendered.iter().skip(first).map(String::as_str));
    parts.join("\n\n")
}

fn render_record(record: &Record) -> Option<String> {
    match record {
        Record::User(message) => {
            let mut text = format!("[User]: {}", message.joined_text());
            for part in &message.content {
                if let UserContent::Image(image) = part {
                    text.push_str(&format!(" [image {}]", image.mime_type));
                }
            }
            Some(text)
        }
        Record::Assistant(message) => {
            let parts: Vec<String> = message
                .content
                .iter()
                .filter_map(|part| match part {
                    AssistantContent::Text { text } => Some(format!("[Assistant]: {text}")),
                    AssistantContent::Thinking { text, .. } => {
                        Some(format!("[Assistant thinking]: {text}"))
                    }
                    AssistantContent::ToolCall(call) => Some(format!(
                        "[Assistant tool call]: {} {}",
                        call.name, call.input
                    )),
                    _ => None,
                })
                .collect();
            Some(parts.join("\n"))
        }
        Record::ToolResult(result) => {
            let label = if result.is_error {
                "Tool error"
            } else {
                "Tool result"
            };
            Some(format!(
                "[{label} {}]: {}",
                result.tool_name,
                truncate(&result.content, MAX_OUTPUT_CHARS)
            ))
        }
        Record::Shell(shell) => {
            let output = format!("{}{}", shell.stdout, shell.stderr);
            Some(format!(
                "[User shell]: $ {}\n{}\n(exit code {})",
                shell.command,
                truncate(&output, MAX_OUTPUT_CHARS),
                shell.exit_code
            ))
        }
        // The latest summary is passed separately; older ones are part of it. Pause
        // bookkeeping and sampling are not part of the conversation.
        _ => None,
    }
}

/// Files the session read and modified, as listed at the end of each summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FileLists {
    /// Paths read.
    pub(crate) read: BTreeSet<String>,
    /// Paths written, edited or deleted.
    pub(crate) modified: BTreeSet<String>,
}

impl FileLists {
    /// Adds the paths of the successful calls in `records`: read-only tools read their paths,
    /// other tools modify them. A call's paths are its input's `path`, `file_path` or `paths`.
    pub(crate) fn collect(&mut self, records: &[Record], tools: &ToolSet) {
        let mut pending: HashMap<&str, (&str, &Value)> = HashMap::new();
        for record in records {
            match record {
                Record::Assistant(message) => {
                    for call in message.tool_calls() {
                        pending.insert(&call.id, (&call.name, &call.input));
                    }
                }
                Record::ToolResult(result) => {
                    let Some((name, input)) = pending.remove(result.call_id.as_str()) else {
                        continue;
                    };
                    let Some(tool) = tools.get(name) else {
                        continue;
                    };
                    if result.is_error {
                        continue;
                    }
                    let target = if tool.meta().read_only {
                        &mut self.read
                    } else {
                        &mut self.modified
                    };
                    target.extend(call_paths(input));
                }
                _ => {}
            }
        }
    }

    /// Splits a stored summary into its body and the file lists appended to it.
    pub(crate) fn split(summary: &str) -> (&str, Self) {
        let heading = format!("\n{FILES_HEADING}\n");
        let at = if summary.starts_with(&heading[1..]) {
            Some(0)
        } else {
            summary.rfind(&heading).map(|idx| idx + 1)
        };
        let Some(at) = at else {
            return (summary, Self::default());
        };
        let (body, trailer) = summary.split_at(at);
        let lists = Self {
            read: tagged_lines(trailer, "read-files"),
            modified: tagged_lines(trailer, "modified-files"),
        };
        (body.trim_end(), lists)
    }

    /// `body` followed by the file lists (nothing is added when both are empty). A file both
    /// read and modified is listed as modified only.
    pub(crate) fn append_to(&self, body: &str) -> String {
        let mut out = body.trim_end().to_owned();
        let read: Vec<&str> = self
            .read
            .difference(&self.modified)
            .map(String::as_str)
            .collect();
        if read.is_empty() && self.modified.is_empty() {
            return out;
        }
        out.push_str("\n\n");
        out.push_str(FILES_HEADING);
        for (tag, paths) in [
            ("read-files", read),
            (
                "modified-files",
                self.modified.iter().map(String::as_str).collect(),
            ),
        ] {
            if paths.is_empty() {
                continue;
            }
            out.push_str(&format!("\n<{tag}>\n{}\n</{tag}>", paths.join("\n")));
        }
        out
    }
}

fn call_paths(input: &Value) -> Vec<String> {
    let mut paths = Vec::new();
    for key in ["path", "file_path"] {
        if let Some(path) = input.get(key).and_then(Value::as_str) {
            paths.push(path.to_owned());
        }
    }
    if let Some(list) = input.get("paths").and_then(Value::as_array) {
        paths.extend(list.iter().filter_map(Value::as_str).map(str::to_owned));
    }
    paths
}

fn tagged_lines(text: &str, tag: &str) -> BTreeSet<String> {
    let open = format!("<{tag}>\n");
    let close = format!("\n</{tag}>");
    let Some(after_open) = text.find(&open).map(|idx| &text[idx + open.len()..]) else {
        return BTreeSet::new();
    };
    let inner = after_open
        .find(&close)
        .map_or(after_open, |idx| &after_open[..idx]);
    inner
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Per-operation compaction state of the agent loop.
#[derive(Debug, Default)]
pub(crate) struct LoopCompaction {
    /// A threshold compaction failed in this operation: don't try the threshold again (overflow
    /// recovery still compacts).
    threshold_failed: bool,
}

/// Runs compaction on one session for one operation.
pub(crate) struct Compactor<'a> {
    /// The session.
    pub(crate) shared: &'a SessionShared,
    /// The operation's cancellation and events.
    pub(crate) ctx: &'a OperationContext,
    /// The provider of the model the session talks to: its window is what compaction fits.
    pub(crate) provider: &'a dyn ModelProvider,
    /// That model.
    pub(crate) spec: &'a ModelSpec,
    /// The system prompt of the session's turns (counted in estimates).
    pub(crate) system: &'a str,
    /// The tools of the session's turns (counted in estimates, and classifying file paths).
    pub(crate) tools: &'a ToolSet,
}

impl Compactor<'_> {
    /// Before a model call: compacts when the estimate exceeds the threshold, unless the agent
    /// has `compaction: false`. A failed threshold compaction is reported in its
    /// [`Event::CompactionEnd`] and the turn goes on (an overflow would still be recovered);
    /// only an abort stops the operation.
    pub(crate) async fn before_turn(
        &self,
        state: &mut SessionState,
        loop_state: &mut LoopCompaction,
        usage: &mut Usage,
    ) -> Result<()> {
        let Compaction::Enabled(config) = &self.shared.scope.compaction else {
            return Ok(());
        };
        if loop_state.threshold_failed {
            return Ok(());
        }
        let budget = Budget::new(Some(config), &self.provider.model_info(&self.spec.model));
        let estimate = estimate_context(&state.records, self.system, &self.tools.schemas());
        if estimate <= budget.threshold() {
            return Ok(());
        }
        match self
            .compact(state, CompactionReason::Threshold, usage)
            .await
        {
            Ok(_) => Ok(()),
            Err(FlueError::Aborted) => Err(FlueError::Aborted),
            Err(_reported) => {
                loop_state.threshold_failed = true;
                Ok(())
            }
        }
    }

    /// Compacts now. `Ok(false)` when there was nothing to compact (no events are sent);
    /// `Ok(true)` once the summary is durable. Usage of the summary calls is added to `usage`
    /// whether or not they succeeded.
    pub(crate) async fn compact(
        &self,
        state: &mut SessionState,
        reason: CompactionReason,
        usage: &mut Usage,
    ) -> Result<bool> {
        let config = match &self.shared.scope.compaction {
            Compaction::Enabled(config) => Some(config),
            Compaction::Disabled => None,
        };
        let budget = Budget::new(config, &self.provider.model_info(&self.spec.model));
        let Some(plan) = plan_cut(&state.records, budget.keep_recent_tokens) else {
            return Ok(false);
        };
        if crate::hook_points::any(self.shared) {
            // Reported, not stored: nothing a PreCompact hook says changes the log.
            let event = crate::hook::HookEvent::PreCompact {
                trigger: compaction_trigger(reason).to_owned(),
            };
            let access = if self.shared.depth == 0 {
                crate::hook_points::StateAccess::Read(state.index.state().map(|(value, _)| value))
            } else {
                crate::hook_points::StateAccess::None
            };
            let decided =
                crate::hook_points::ask(self.shared, self.ctx, event, None, access, &state.records)
                    .await;
            crate::hook_points::announce(&self.ctx.sink, &decided.records);
            if let Some(err) = decided.operation_error(crate::hook::HookPoint::PreCompact) {
                return Err(err);
            }
        }
        let started = Instant::now();
        let clock = crate::util::WorkClock::start();
        let schemas = self.tools.schemas();
        let tokens_before = estimate_context(&state.records, self.system, &schemas);
        let messages_before = count(model_view(&state.records).len());
        self.ctx.sink.send(Event::CompactionStart {
            reason,
            estimated_tokens: tokens_before,
        });
        let mut spent = Usage::default();
        let result = self
            .summarise_and_store(state, plan, tokens_before, budget, &mut spent, clock)
            .await;
        *usage += spent;
        let (messages_after, tokens_after, error) = match &result {
            Ok(()) => (
                count(model_view(&state.records).len()),
                estimate_context(&state.records, self.system, &schemas),
                None,
            ),
            Err(err) => (
                messages_before,
                tokens_before,
                Some(redacted_info(&self.shared.harness.redactor, err)),
            ),
        };
        self.ctx.sink.send(Event::CompactionEnd {
            messages_before,
            messages_after,
            tokens_before,
            tokens_after,
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            usage: spent,
            error,
        });
        if result.is_ok() {
            self.post_compact_hooks(state, reason).await;
        }
        result.map(|()| true)
    }

    /// Reports the compaction to the `PostCompact` hooks; their decisions are reported, not
    /// stored (nothing is left for them to change).
    async fn post_compact_hooks(&self, state: &SessionState, reason: CompactionReason) {
        if !crate::hook_points::any(self.shared) {
            return;
        }
        let Some(summary) = latest_summary(&state.records) else {
            return;
        };
        let event = crate::hook::HookEvent::PostCompact {
            trigger: compaction_trigger(reason).to_owned(),
            summary: summary.summary.clone(),
        };
        let access = crate::hook_points::StateAccess::None;
        let decided =
            crate::hook_points::ask(self.shared, self.ctx, event, None, access, &state.records)
                .await;
        crate::hook_points::announce(&self.ctx.sink, &decided.records);
    }

    /// Writes the summary (or the two, for a split turn) and appends the compaction record.
    async fn summarise_and_store(
        &self,
        state: &mut SessionState,
        plan: CutPlan,
        tokens_before: u64,
        budget: Budget,
        spent: &mut Usage,
        clock: crate::util::WorkClock,
    ) -> Result<()> {
        let summary_model = match &self.shared.scope.compaction {
            Compaction::Enabled(CompactionConfig {
                model: Some(model), ..
            }) => Some(self.shared.harness.providers.resolve(model)?),
            Compaction::Enabled(_) | Compaction::Disabled => None,
        };
        let (provider, spec) = match &summary_model {
            Some((provider, spec)) => (provider.as_ref(), spec),
            None => (self.provider, self.spec),
        };
        let summariser = Summariser {
            provider,
            spec,
            info: provider.model_info(&spec.model),
            cancel: &self.ctx.cancel,
            redactor: &self.shared.harness.redactor,
        };

        let records = &state.records;
        let (previous, mut files) = match latest_summary(records) {
            Some(summary) => FileLists::split(&summary.summary),
            None => ("", FileLists::default()),
        };
        let previous = Some(previous).filter(|text| !text.trim().is_empty());
        if let Some(folded) = records.get(plan.start..plan.first_kept) {
            files.collect(folded, self.tools);
        }
        let history = records.get(plan.history()).unwrap_or_default();
        let has_history = history
            .iter()
            .any(|record| !matches!(record, Record::Compaction(_)));
        let prefix = plan
            .turn_prefix()
            .and_then(|range| records.get(range))
            .unwrap_or_default();

        let history_max = (budget.reserve_tokens.saturating_mul(4) / 5).max(1);
        let prefix_max = (budget.reserve_tokens / 2).max(1);
        let history_summary = async {
            if !has_history {
                return None;
            }
            Some(
                summariser
                    .summarise(history_max, |max_chars| {
                        history_prompt(&render_conversation(history, max_chars), previous)
                    })
                    .await,
            )
        };
        let prefix_summary = async {
            if prefix.is_empty() {
                return None;
            }
            Some(
                summariser
                    .summarise(prefix_max, |max_chars| {
                        turn_prefix_prompt(&render_conversation(prefix, max_chars))
                    })
                    .await,
            )
        };
        let (history_summary, prefix_summary) = tokio::join!(history_summary, prefix_summary);
        let mut take = |result: Option<Result<(String, Usage)>>| -> Result<Option<String>> {
            match result {
                None => Ok(None),
                Some(Ok((text, usage))) => {
                    *spent += usage;
                    Ok(Some(text))
                }
                Some(Err(err)) => Err(err),
            }
        };
        let history_text = take(history_summary);
        let prefix_text = take(prefix_summary)?;
        let history_text = history_text?
            .or_else(|| previous.map(str::to_owned))
            .unwrap_or_else(|| "No earlier history.".to_owned());
        let body = match prefix_text {
            Some(prefix_text) => {
                format!("{history_text}\n\n---\n\n{SPLIT_TURN_HEADING}\n\n{prefix_text}")
            }
            None => history_text,
        };
        let record = Record::Compaction(CompactionSummary {
            summary: files.append_to(&body),
            first_kept: u64::try_from(plan.first_kept).unwrap_or(u64::MAX),
            tokens_before,
            usage: Some(*spent),
        });
        let timing = clock.stop();
        self.shared
            .append_timed(state, vec![record], |_| Some(timing))
            .await
    }
}

/// Makes summary requests to one model.
struct Summariser<'a> {
    provider: &'a dyn ModelProvider,
    spec: &'a ModelSpec,
    info: ModelInfo,
    cancel: &'a CancellationToken,
    redactor: &'a Redactor,
}

impl Summariser<'_> {
    /// Asks for a summary of at most `max_output_tokens`. `prompt` builds the request from the
    /// number of characters of conversation that fit the summary model's window.
    async fn summarise(
        &self,
        max_output_tokens: u64,
        prompt: impl Fn(usize) -> String,
    ) -> Result<(String, Usage)> {
        let max_output_tokens = max_output_tokens.min(self.info.max_output_tokens).max(1);
        let fixed_tokens = chars_to_tokens(char_count(SUMMARY_SYSTEM) + char_count(&prompt(0)));
        let room = self
            .info
            .context_window
            .saturating_sub(max_output_tokens)
            .saturating_sub(fixed_tokens);
        let max_chars = usize::try_from(room.saturating_mul(4)).unwrap_or(usize::MAX);
        let messages = [Record::User(UserMessage::text(prompt(max_chars)))];
        let request = ModelRequest {
            model: &self.spec.model,
            system: SUMMARY_SYSTEM,
            messages: &messages,
            tools: &[],
            thinking: ThinkingLevel::Off,
            max_output_tokens,
        };
        // The summary is not part of the conversation, so its deltas are not streamed.
        let sink = TurnSink::discard();
        let turn = spans::traced_turn(
            self.provider,
            self.spec,
            request,
            &sink,
            self.cancel,
            self.redactor,
        )
        .await?;
        let usage = turn.usage;
        let text: String = turn
            .content
            .iter()
            .filter_map(|part| match part {
                AssistantContent::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        let text = text.trim();
        if text.is_empty() {
            return Err(FlueError::Provider {
                provider: self.spec.provider.clone(),
                message: format!(
                    "model {:?} returned an empty summary; retry, or set `compaction.model` to \
                     a model that follows the summary prompt",
                    self.spec.model
                ),
                status: None,
                retryable: true,
                retry_after_ms: None,
                source: None,
            });
        }
        Ok((text.to_owned(), usage))
    }
}

/// Runs `session.compact()`: compacts now with the agent's model (or `compaction.model`).
pub(crate) async fn run_manual(
    shared: Arc<SessionShared>,
    ctx: OperationContext,
) -> Result<((), Usage)> {
    let harness = Arc::clone(&shared.harness);
    let agent = &shared.scope;
    let summary_model = match &agent.compaction {
        Compaction::Enabled(config) => config.model.clone(),
        Compaction::Disabled => None,
    };
    let model =
        agent
            .model
            .clone()
            .or(summary_model)
            .ok_or_else(|| FlueError::ModelNotConfigured {
                hint: Some("set `model` or `compaction.model` on the agent to compact".into()),
            })?;
    let (provider, spec) = harness.providers.resolve(&model)?;
    let tools = ToolSet::assemble(
        crate::tool::LiveTools::new(
            agent.tools.clone(),
            agent.tool_sources.clone(),
            Vec::new(),
            &[],
        )
        .merged(),
    )?;
    let system = harness.system_prompt();
    let mut state = shared.state.lock().await;
    shared.sync(&mut state).await?;
    let compactor = Compactor {
        shared: &shared,
        ctx: &ctx,
        provider: provider.as_ref(),
        spec: &spec,
        system: &system,
        tools: &tools,
    };
    let mut usage = Usage::default();
    compactor
        .compact(&mut state, CompactionReason::Manual, &mut usage)
        .await?;
    Ok(((), usage))
}

fn content_chars(part: &AssistantContent) -> usize {
    match part {
        AssistantContent::Text { text } | AssistantContent::Thinking { text, .. } => {
            char_count(text)
        }
        AssistantContent::ToolCall(call) => {
            char_count(&call.name) + char_count(&call.input.to_string())
        }
        _ => 0,
    }
}

fn truncate(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((idx, _)) => format!(
            "{}\n[... {} more characters]",
            &text[..idx],
            char_count(&text[idx..])
        ),
        None => text.to_owned(),
    }
}

fn char_count(text: &str) -> usize {
    text.chars().count()
}

fn chars_to_tokens(n_chars: usize) -> u64 {
    u64::try_from(n_chars.div_ceil(4)).unwrap_or(u64::MAX)
}

fn count(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// The `trigger` hooks see for a compaction's reason.
fn compaction_trigger(reason: CompactionReason) -> &'static str {
    match reason {
        CompactionReason::Threshold => "auto",
        CompactionReason::Overflow => "overflow",
        _ => "manual",
    }
}

#[cfg(test)]
mod tests;
