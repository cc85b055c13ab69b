//! Renders an operation's events as human-readable activity, and streams the model's text.
//!
//! Everything written goes through [`Output::stderr_text`]: known secrets are redacted and
//! control characters escaped. Text and thinking are written as their deltas arrive; only a
//! tail that could be the start of a secret (see [`flue_core::Redactor::releasable`]) is held
//! back until more text comes, so a secret split over several deltas is still found whole.
//! Thinking is one running block, `(thinking) ...`, ended by the next other output. The
//! model's text goes to [`Target::Stdout`] when the caller says stdout is a terminal (the
//! reply then is not printed again), else with the activity to stderr. A tool call's result
//! shows as one line (its file, size, exit code: see [`summary`]). With `-v` each model turn
//! shows its time, tokens and cost, and each tool call its time and its whole result; a
//! provider's retry is shown always.
//!
//! Where the stream is coloured ([`crate::term`]), the reply's markdown is redrawn styled as
//! each line completes ([`crate::term::markdown`]), thinking is dimmed and activity lines are
//! coloured by their state; on a terminal a status line shows while the work runs
//! ([`crate::term::status`]). Without colour the bytes are exactly the plain text.

use std::collections::HashMap;
use std::io::{IsTerminal as _, Write};
use std::time::Instant;

use flue_core::{Event, Outcome, Usage, event::CompactionReason};

use crate::term::markdown::LineStyler;
use crate::term::status::{self, Status};
use crate::term::{self as term_style, Style};
use crate::terminal::Output;

mod summary;

/// How many lines of a tool's result `-v` shows before folding the rest.
const VERBOSE_LINES: usize = 12;

/// Where a piece of rendered output goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    Stdout,
    Stderr,
}

impl Target {
    /// Where the model's text streams: stdout when it is a terminal (a person reads it as it
    /// is written, and the reply is not printed again), else stderr (stdout then gets exactly
    /// the reply, or the `--json` object, once).
    pub(crate) fn for_text(json: bool) -> Self {
        if !json && std::io::stdout().is_terminal() {
            Self::Stdout
        } else {
            Self::Stderr
        }
    }
}

/// What is being streamed now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Streaming {
    Nothing,
    Text,
    Thinking,
}

pub(crate) struct Renderer {
    output: Output,
    /// Where the model's text goes.
    text_target: Target,
    /// Output rendered and not yet written.
    written: Vec<(Target, String)>,
    /// Where the last output went (a line ending goes there too).
    last_target: Target,
    at_line_start: bool,
    /// What the deltas now arriving belong to.
    streaming: Streaming,
    /// Streamed text or thinking held back (it may begin a secret).
    pending: String,
    /// All text the current (or last) model turn streamed.
    last_text: String,
    /// The next text delta starts a new turn's text.
    text_ended: bool,
    /// Show timings, tokens and cost (`-v`).
    verbose: bool,
    /// When the current model turn started (the operation's start, or the last turn's end).
    turn_started: Instant,
    /// When each running tool call started, by call id.
    tool_started: HashMap<String, Instant>,
    /// The file each running tool call named (its input's `path`), by call id.
    tool_paths: HashMap<String, String>,
    /// Colour on stdout and on stderr.
    colors: (bool, bool),
    /// Styles the reply's lines when its target is coloured.
    styler: LineStyler,
    /// The edits of an `edit_file` call starting, shown as a diff below its line.
    edit_diff: Option<Vec<(char, String)>>,
    /// The tool of each pending action, by action id.
    action_tools: HashMap<String, String>,
    /// The reply's current line as shown raw (redrawn styled once complete).
    text_line: String,
    /// The rows of the table being streamed, as written, and the screen rows they take.
    table: Vec<String>,
    table_rows: usize,
    /// The status line, on a terminal.
    status: Option<Status>,
}

impl Renderer {
    pub(crate) fn new(output: Output, verbose: bool, text_target: Target) -> Self {
        Self {
            output,
            text_target,
            written: Vec::new(),
            last_target: Target::Stderr,
            at_line_start: true,
            streaming: Streaming::Nothing,
            pending: String::new(),
            last_text: String::new(),
            text_ended: false,
            verbose,
            turn_started: Instant::now(),
            tool_started: HashMap::new(),
            tool_paths: HashMap::new(),
            colors: (term_style::stdout_colored(), term_style::stderr_colored()),
            styler: LineStyler::default(),
            text_line: String::new(),
            table: Vec::new(),
            table_rows: 0,
            edit_diff: None,
            action_tools: HashMap::new(),
            status: None,
        }
    }

    /// Shows a status line while the work runs (stderr is a terminal).
    pub(crate) fn with_status(mut self) -> Self {
        self.status = Some(Status::new());
        self
    }

    /// Makes the status line name `/abort N` while tasks run (the chat reads it meanwhile).
    pub(crate) fn with_abort_command(mut self) -> Self {
        self.status = self.status.map(Status::with_abort_command);
        self
    }

    /// Draws the status line's next frame, when nothing is being written mid-line.
    pub(crate) fn tick(&mut self) {
        if !self.at_line_start || !self.pending.is_empty() {
            return;
        }
        let colored = self.colors.1;
        if let Some(status) = &mut self.status {
            let frame = format!("{}{}", status::ERASE, status.next_frame(colored));
            status.shown = true;
            self.written.push((Target::Stderr, frame));
        }
    }

    /// Whether `target` is coloured.
    fn colored(&self, target: Target) -> bool {
        match target {
            Target::Stdout => self.colors.0,
            Target::Stderr => self.colors.1,
        }
    }

    /// The text the last model turn streamed, as the model wrote it.
    pub(crate) fn last_text(&self) -> &str {
        &self.last_text
    }

    /// Writes what was rendered so far to stdout and stderr, and flushes them. A closed
    /// stream leaves nothing to report to; the operation goes on regardless.
    pub(crate) fn write_out(&mut self) {
        for (target, text) in std::mem::take(&mut self.written) {
            match target {
                Target::Stdout => {
                    let mut stdout = std::io::stdout().lock();
                    let _ = stdout.write_all(text.as_bytes());
                    let _ = stdout.flush();
                }
                Target::Stderr => {
                    let mut stderr = std::io::stderr().lock();
                    let _ = stderr.write_all(text.as_bytes());
                    let _ = stderr.flush();
                }
            }
        }
    }

    /// Ends what streams (writes the text held back) and the current line.
    pub(crate) fn finish(&mut self) {
        self.line_start();
        if let Some(status) = self.status.as_mut().filter(|status| status.shown) {
            status.shown = false;
            self.written
                .push((Target::Stderr, status::ERASE.to_owned()));
        }
    }

    /// Renders one event.
    pub(crate) fn render(&mut self, event: &Event) {
        match event {
            Event::TextDelta { text } => {
                if self.text_ended {
                    self.last_text.clear();
                    self.text_ended = false;
                }
                self.last_text.push_str(text);
                if let Some(status) = &mut self.status {
                    status.streamed(text.chars().count());
                }
                self.stream(Streaming::Text, text);
                return;
            }
            Event::ThinkingDelta { text } => {
                self.stream(Streaming::Thinking, text);
                return;
            }
            _ => {}
        }
        self.render_activity(event);
    }

    /// Streams a delta of text or thinking: writes what cannot begin a secret now.
    fn stream(&mut self, kind: Streaming, text: &str) {
        if text.is_empty() {
            return;
        }
        if self.streaming != kind {
            self.line_start();
            self.streaming = kind;
            if kind == Streaming::Thinking {
                let label = Style::DIM.paint("(thinking) ", self.colors.1);
                self.push(Target::Stderr, label);
                self.at_line_start = false;
            }
        }
        self.pending.push_str(text);
        let mut release = self.output.releasable(&self.pending);
        // CR stays only before LF: wait for the next character.
        if self.pending[..release].ends_with('\r') {
            release -= 1;
        }
        if release == 0 {
            return;
        }
        let rest = self.pending.split_off(release);
        let released = std::mem::replace(&mut self.pending, rest);
        self.write_streamed(&released);
    }

    /// Writes streamed text or thinking where it goes.
    fn write_streamed(&mut self, text: &str) {
        let target = match self.streaming {
            Streaming::Text => self.text_target,
            _ => Target::Stderr,
        };
        self.at_line_start = text.ends_with('\n');
        let shown = self.output.stderr_text(text);
        let shown = match self.streaming {
            Streaming::Text if self.colored(target) => self.markdown(&shown),
            Streaming::Thinking => Style::DIM.paint(&shown, self.colors.1),
            _ => shown,
        };
        self.push(target, shown);
    }

    /// Streamed reply text as written now: raw as it comes, each completed line redrawn
    /// styled.
    fn markdown(&mut self, shown: &str) -> String {
        let mut out = String::with_capacity(shown.len());
        for piece in shown.split_inclusive('\n') {
            match piece.strip_suffix('\n') {
                Some(rest) => {
                    out.push_str(rest);
                    self.text_line.push_str(rest);
                    out.push_str(&self.redraw_line());
                    out.push('\n');
                }
                None => {
                    out.push_str(piece);
                    self.text_line.push_str(piece);
                }
            }
        }
        out
    }

    /// What replaces the completed raw line on the screen by its styled form (nothing when
    /// styling changes nothing); the line is done with. A line that ends a table first
    /// redraws the table above it with its columns aligned.
    fn redraw_line(&mut self) -> String {
        let line = std::mem::take(&mut self.text_line);
        let line = line.strip_suffix('\r').unwrap_or(&line);
        let is_row = self.styler.is_table_row(line);
        let styled = self.styler.render(line);
        let width = term_style::width();
        // The rows the raw line took.
        let raw_rows = unicode_width::UnicodeWidthStr::width(line).saturating_sub(1) / width + 1;
        if is_row {
            let shown = crate::term::markdown::visible(&styled);
            self.table.push(line.to_owned());
            self.table_rows +=
                unicode_width::UnicodeWidthStr::width(shown.as_str()).saturating_sub(1) / width + 1;
        } else if let Some(table) = self.aligned_table(width) {
            let up = raw_rows - 1 + self.table_rows;
            self.table_rows = 0;
            return format!("\x1b[{up}A\r\x1b[J{table}{styled}");
        }
        if styled == line {
            return String::new();
        }
        // Back to the raw line's first row, erased, drawn again.
        let up = if raw_rows > 1 {
            format!("\x1b[{}A", raw_rows - 1)
        } else {
            String::new()
        };
        format!("{up}\r\x1b[J{styled}")
    }

    /// The streamed table's rows aligned, each with its line end, when they fit the screen;
    /// the table is done with either way.
    fn aligned_table(&mut self, width: usize) -> Option<String> {
        if self.table.is_empty() {
            return None;
        }
        let lines = std::mem::take(&mut self.table);
        // Rows scrolled off the top cannot be redrawn.
        if self.table_rows + 2 > term_style::height() {
            self.table_rows = 0;
            return None;
        }
        let Some(aligned) = crate::term::markdown::aligned_table(&lines, width) else {
            self.table_rows = 0;
            return None;
        };
        Some(aligned.iter().map(|row| format!("{row}\n")).collect())
    }

    /// Redraws a table the reply ended with, aligned (the cursor is at the start of the line
    /// below it).
    fn end_table(&mut self) {
        let rows = self.table_rows;
        if let Some(table) = self.aligned_table(term_style::width()) {
            self.table_rows = 0;
            self.push(self.text_target, format!("\x1b[{rows}A\r\x1b[J{table}"));
        }
    }

    /// A tool call's result as shown: its one-line summary, or with `-v` the result itself,
    /// its first line on the call's line and the next ones below it, folded after
    /// [`VERBOSE_LINES`] lines (`... N more lines`); redacted and escaped either way.
    fn tool_result(&self, name: &str, path: Option<&str>, is_error: bool, output: &str) -> String {
        if !self.verbose {
            return self
                .output
                .stderr_text(&summary::summary(name, path, is_error, output));
        }
        let lines: Vec<&str> = output.trim().lines().collect();
        let mut shown: Vec<String> = lines
            .iter()
            .take(VERBOSE_LINES)
            .map(|line| self.output.stderr_text(line))
            .collect();
        if lines.len() > VERBOSE_LINES {
            shown.push(format!("... {} more lines", lines.len() - VERBOSE_LINES));
        }
        shown.join("\n   ")
    }

    fn push(&mut self, target: Target, text: String) {
        if !text.is_empty() {
            if let Some(status) = self.status.as_mut().filter(|status| status.shown) {
                status.shown = false;
                self.written
                    .push((Target::Stderr, status::ERASE.to_owned()));
            }
            self.last_target = target;
            self.written.push((target, text));
        }
    }

    /// Keeps the status line's list of running tasks up to date.
    fn track_tasks(&mut self, event: &Event) {
        let Some(status) = &mut self.status else {
            return;
        };
        match event {
            Event::TaskStart { session, agent, .. } => {
                status.task_started(session, agent.as_deref());
            }
            Event::TaskEnd { session, .. } => status.task_ended(session),
            Event::TaskActivity { session, event, .. } => match event.as_ref() {
                Event::ToolStart { name, .. } => status.task_doing(session, name),
                Event::ToolEnd { .. } | Event::ThinkingDelta { .. } => {
                    status.task_doing(session, "thinking");
                }
                Event::TextDelta { .. } => status.task_doing(session, "writing"),
                Event::TurnEnd { usage, .. } => status.task_turn_ended(
                    session,
                    usage.input_tokens + usage.output_tokens,
                    usage.cost_usd,
                ),
                _ => {}
            },
            _ => {}
        }
    }

    /// The task sessions the status line lists now, numbered from 1 (empty without one).
    pub(crate) fn running_tasks(&self) -> Vec<String> {
        self.status
            .as_ref()
            .map(Status::running_tasks)
            .unwrap_or_default()
    }

    /// The running tasks as `/tasks` lists them, one line each.
    pub(crate) fn task_lines(&self) -> Vec<String> {
        self.status
            .as_ref()
            .map(Status::task_lines)
            .unwrap_or_default()
    }

    /// Writes `line` on stderr as a line of its own (an answer to a command typed meanwhile).
    pub(crate) fn note(&mut self, line: &str) {
        self.line_start();
        let shown = self.output.stderr_text(line);
        self.push(Target::Stderr, format!("{shown}\n"));
    }

    /// Renders an event that is not a delta: a line of activity on stderr.
    fn render_activity(&mut self, event: &Event) {
        self.track_tasks(event);
        let line = match event {
            Event::OperationStart { .. } => {
                self.turn_started = Instant::now();
                self.styler = LineStyler::default();
                None
            }
            Event::TurnEnd {
                model,
                usage,
                stop_reason,
            } => {
                self.text_ended = true;
                if let Some(status) = &mut self.status {
                    status.turn_ended(usage.input_tokens + usage.output_tokens, usage.cost_usd);
                }
                let line = self.verbose.then(|| {
                    format!(
                        "[model turn: {model}, {} ms, {}, stop {stop_reason}]",
                        self.turn_started.elapsed().as_millis(),
                        usage_text(usage),
                    )
                });
                self.turn_started = Instant::now();
                line
            }
            // Refusals and other early ends fail the run, whose error line says why; an answer
            // cut at the output limit or a paused turn only gets a note.
            Event::TurnStopped { stop_reason, .. } => match stop_reason {
                flue_core::StopReason::MaxTokens => Some(
                    "note: the model's answer was cut off at its output token limit".to_owned(),
                ),
                flue_core::StopReason::PauseTurn => {
                    Some("note: the provider paused the model's turn; continuing it".to_owned())
                }
                _ => None,
            },
            Event::ProviderRetry {
                provider,
                attempt,
                max_retries,
                delay_ms,
                message,
            } => Some(format!(
                "{provider}: retrying {attempt} of {max_retries} in {}: {message}",
                duration_text(*delay_ms)
            )),
            Event::ToolStart {
                call_id,
                name,
                input,
            } => {
                self.text_ended = true;
                if let Some(status) = &mut self.status {
                    status.waiting_for(format!("running {name}"));
                }
                self.tool_started.insert(call_id.clone(), Instant::now());
                if let Some(path) = summary::input_path(input) {
                    self.tool_paths.insert(call_id.clone(), path);
                }
                if self.colors.1 && name == "edit_file" {
                    self.edit_diff = Some(summary::edit_lines(input));
                }
                Some(format!("-> {name} {input}"))
            }
            Event::ToolEnd {
                call_id,
                name,
                is_error,
                output,
            } => {
                let status = if *is_error { "failed" } else { "done" };
                let started = self.tool_started.remove(call_id);
                let status = match started {
                    Some(started) if self.verbose => {
                        format!("{status} in {} ms", started.elapsed().as_millis())
                    }
                    _ => status.to_owned(),
                };
                let path = self.tool_paths.remove(call_id);
                let result = self.tool_result(name, path.as_deref(), *is_error, output);
                self.turn_started = Instant::now();
                if let Some(status) = &mut self.status {
                    status.waiting_for("waiting for the model".to_owned());
                }
                Some(format!("<- {name} {status}: {result}"))
            }
            Event::CompactionStart {
                reason,
                estimated_tokens,
            } => {
                let reason = match reason {
                    CompactionReason::Threshold => "near the context window",
                    CompactionReason::Overflow => "context overflow",
                    CompactionReason::Manual => "requested",
                    _ => "other",
                };
                Some(format!(
                    "compacting context ({reason}, ~{estimated_tokens} tokens)"
                ))
            }
            Event::CompactionEnd {
                messages_before,
                messages_after,
                tokens_before,
                tokens_after,
                duration_ms,
                error,
                ..
            } => Some(match error {
                Some(error) => format!("compaction failed: {}", error.message),
                None => format!(
                    "compacted {messages_before} -> {messages_after} messages, \
                     ~{tokens_before} -> ~{tokens_after} tokens in {duration_ms} ms"
                ),
            }),
            Event::TaskStart {
                session,
                agent,
                depth,
                ..
            } => {
                let indent = "  ".repeat(usize::try_from(*depth).unwrap_or(0));
                let agent = agent.as_deref().unwrap_or("(same agent)");
                Some(format!("{indent}=> task {agent} in {session}"))
            }
            Event::TaskEnd {
                agent,
                depth,
                outcome,
                error,
                ..
            } => {
                let indent = "  ".repeat(usize::try_from(*depth).unwrap_or(0));
                let agent = agent.as_deref().unwrap_or("(same agent)");
                let outcome = match outcome {
                    Outcome::Completed => "done".to_owned(),
                    Outcome::Aborted => "aborted".to_owned(),
                    _ => format!(
                        "failed: {}",
                        error.as_ref().map_or("", |error| error.message.as_str())
                    ),
                };
                Some(format!("{indent}<= task {agent} {outcome}"))
            }
            Event::TaskActivity { depth, event, .. } => {
                let indent = "  ".repeat(usize::try_from(*depth).unwrap_or(0) + 1);
                match event.as_ref() {
                    Event::ToolStart {
                        call_id,
                        name,
                        input,
                    } => {
                        if let Some(path) = summary::input_path(input) {
                            self.tool_paths.insert(call_id.clone(), path);
                        }
                        Some(format!("{indent}-> {name} {input}"))
                    }
                    Event::ToolEnd {
                        call_id,
                        name,
                        is_error,
                        output,
                    } => {
                        let status = if *is_error { "failed" } else { "done" };
                        let path = self.tool_paths.remove(call_id);
                        let result = self.tool_result(name, path.as_deref(), *is_error, output);
                        Some(format!("{indent}<- {name} {status}: {result}"))
                    }
                    Event::CompactionStart { .. } => Some(format!("{indent}compacting context")),
                    Event::ProviderRetry {
                        provider,
                        attempt,
                        max_retries,
                        delay_ms,
                        message,
                    } => Some(format!(
                        "{indent}{provider}: retrying {attempt} of {max_retries} in {}: {message}",
                        duration_text(*delay_ms)
                    )),
                    // The task's text is its answer, which its parent receives; its deltas,
                    // turns and compaction ends add nothing here.
                    _ => None,
                }
            }
            Event::ActionRequired { action } => {
                self.action_tools
                    .insert(action.action_id.clone(), action.tool_name.clone());
                Some(format!("!! {} waits: {}", action.tool_name, action.reason))
            }
            Event::ActionResolved {
                action_id,
                decision,
            } => {
                // Named by its tool: the action's id is for `--confirm` only.
                let action_id = self
                    .action_tools
                    .remove(action_id)
                    .unwrap_or_else(|| action_id.clone());
                let decided = match decision {
                    flue_core::ActionDecision::Allow => "allowed",
                    flue_core::ActionDecision::Deny { .. } => "denied",
                    flue_core::ActionDecision::Result { .. } => "answered",
                    _ => "interrupted",
                };
                Some(format!("!! {action_id} {decided}"))
            }
            // A hook that had nothing to say is in the log, not on the terminal.
            Event::HookDecision { hook } if is_silent(hook) => None,
            Event::HookDecision { hook } => Some(format!("!! {}", hook_text(hook))),
            Event::OperationEnd { .. } => {
                self.line_start();
                None
            }
            _ => None,
        };
        if let Some(line) = line {
            self.line_start();
            let shown = self.output.stderr_text(&line);
            let line = format!("{}\n", activity_style(&shown).paint(&shown, self.colors.1));
            self.push(Target::Stderr, line);
        }
        if let Some(diff) = self.edit_diff.take() {
            let mut text = String::new();
            for (sign, line) in diff {
                let style = match sign {
                    '-' => Style::FAILED,
                    '+' => Style::DONE,
                    _ => Style::DIM,
                };
                let shown = self.output.stderr_text(&format!("   {sign} {line}"));
                text.push_str(&style.paint(&shown, true));
                text.push('\n');
            }
            self.push(Target::Stderr, text);
        }
    }

    /// Ends what streams (writing the text held back) and starts a new line if needed.
    fn line_start(&mut self) {
        if !self.pending.is_empty() {
            let text = std::mem::take(&mut self.pending);
            self.write_streamed(&text);
        }
        let was_text = self.streaming == Streaming::Text;
        if was_text && !self.text_line.is_empty() {
            let redraw = self.redraw_line();
            self.push(self.text_target, redraw);
        }
        self.streaming = Streaming::Nothing;
        if !self.at_line_start {
            self.push(self.last_target, "\n".to_owned());
            self.at_line_start = true;
        }
        if was_text {
            self.end_table();
        }
    }
}

/// The style of an activity line, by what it says: a tool call starting, done or failed, a
/// question or decision, a note.
fn activity_style(line: &str) -> Style {
    let line = line.trim_start();
    if line.starts_with("<-") || line.starts_with("<=") {
        if line.contains(" failed") {
            Style::FAILED
        } else {
            Style::DONE
        }
    } else if line.starts_with("->") || line.starts_with("=>") {
        Style::TOOL
    } else if line.starts_with("!!") || line.starts_with("note:") {
        Style::WARN
    } else {
        Style::DIM
    }
}

/// Tokens and, when the price is known, cost: `1200 input + 80 output tokens, $0.0042`
/// (cached input counts as input).
pub(crate) fn usage_text(usage: &Usage) -> String {
    let input = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens;
    let mut text = format!("{input} input + {} output tokens", usage.output_tokens);
    if let Some(cost) = usage.cost_usd {
        text.push_str(&format!(", {}", term_style::cost_text(cost)));
    }
    text
}

/// A delay as people read it: `500 ms`, `2 s`, `1.5 s`.
fn duration_text(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}

#[cfg(test)]
mod tests;

/// One hook decision as a line: the point, the hook, the decision and what it changed.
pub(crate) fn hook_text(hook: &flue_core::record::HookRecord) -> String {
    // An approval by a standing rule ("always") reads as what it is, without the call's id.
    if hook.hook.starts_with("standing rule ")
        && let Some(reason) = &hook.reason
    {
        return reason.clone();
    }
    let mut line = format!("hook {} by {}: {}", hook.event, hook.hook, hook.decision);
    if let Some(subject) = &hook.subject {
        line.push_str(&format!(" ({subject})"));
    }
    if let Some(reason) = &hook.reason {
        line.push_str(&format!(": {reason}"));
    }
    if let Some(input) = &hook.updated_input {
        line.push_str(&format!("; input replaced with {input}"));
    }
    if let Some(text) = &hook.replacement {
        line.push_str(&format!("; replaced with {text:?}"));
    }
    if let Some(context) = &hook.additional_context {
        line.push_str(&format!("; added context {context:?}"));
    }
    line
}

/// Whether a hook decision changed nothing (a plain `continue`).
fn is_silent(hook: &flue_core::record::HookRecord) -> bool {
    hook.decision == "continue"
        && hook.reason.is_none()
        && hook.updated_input.is_none()
        && hook.replacement.is_none()
        && hook.additional_context.is_none()
}
