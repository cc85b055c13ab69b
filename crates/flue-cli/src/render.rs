//! Renders an operation's events as human-readable activity on stderr.
//!
//! Everything written goes through [`Output::stderr_text`]: known secrets are redacted and
//! control characters escaped. Streamed text is held back until its line ends (or another
//! event arrives), so a secret split over several deltas is still found whole. With `-v`
//! each model turn and tool call also shows how long it took.

use std::collections::HashMap;
use std::io::Write;
use std::time::Instant;

use flue_core::{CompactionReason, Event, EventStream, Outcome};

use crate::terminal::Output;

/// Longest tool output echoed to the terminal.
const MAX_TOOL_OUTPUT_CHARS: usize = 400;

/// Writes activity to stderr until the stream ends; returns the text of the last model turn
/// that streamed any (the reply, when the operation completed), as shown.
pub(crate) async fn to_stderr(mut events: EventStream, output: Output, verbose: bool) -> String {
    let mut renderer = Renderer::new(output);
    renderer.verbose = verbose;
    while let Some(event) = events.recv().await {
        let mut stderr = std::io::stderr().lock();
        // A closed stderr leaves nothing to report to; the operation goes on regardless.
        let _ = renderer.render(&mut stderr, &event);
        let _ = stderr.flush();
    }
    let mut stderr = std::io::stderr().lock();
    let _ = renderer.flush_text(&mut stderr);
    let _ = stderr.flush();
    renderer.last_text
}

struct Renderer {
    output: Output,
    at_line_start: bool,
    /// Streamed text of the current line, not yet written.
    pending_text: String,
    /// All text the current (or last) model turn streamed.
    last_text: String,
    /// The next text delta starts a new turn's text.
    text_ended: bool,
    /// Show timings (`-v`).
    verbose: bool,
    /// When the current model turn started (the operation's start, or the last turn's end).
    turn_started: Instant,
    /// When each running tool call started, by call id.
    tool_started: HashMap<String, Instant>,
}

impl Renderer {
    fn new(output: Output) -> Self {
        Self {
            output,
            at_line_start: true,
            pending_text: String::new(),
            last_text: String::new(),
            text_ended: false,
            verbose: false,
            turn_started: Instant::now(),
            tool_started: HashMap::new(),
        }
    }

    fn render(&mut self, out: &mut impl Write, event: &Event) -> std::io::Result<()> {
        match event {
            Event::OperationStart { .. } => self.turn_started = Instant::now(),
            Event::TurnEnd {
                model,
                usage,
                stop_reason,
            } => {
                self.text_ended = true;
                if self.verbose {
                    self.line_start(out)?;
                    let line = format!(
                        "[model turn: {model}, {} ms, {} input + {} output tokens, stop {stop_reason:?}]",
                        self.turn_started.elapsed().as_millis(),
                        usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens,
                        usage.output_tokens,
                    );
                    self.line(out, &line)?;
                }
                self.turn_started = Instant::now();
            }
            Event::TurnStopped { stop_reason, .. } => {
                // Refusals and other early ends fail the run, whose error line says why; an
                // answer cut at the output limit or a paused turn only gets a note.
                let note = match stop_reason {
                    flue_core::StopReason::MaxTokens => {
                        Some("note: the model's answer was cut off at its output token limit")
                    }
                    flue_core::StopReason::PauseTurn => {
                        Some("note: the provider paused the model's turn; continuing it")
                    }
                    _ => None,
                };
                if let Some(note) = note {
                    self.line_start(out)?;
                    self.line(out, note)?;
                }
            }
            Event::TextDelta { text } => {
                if self.text_ended {
                    self.last_text.clear();
                    self.text_ended = false;
                }
                self.last_text.push_str(text);
                self.pending_text.push_str(text);
                if let Some(end) = self.pending_text.rfind('\n') {
                    let rest = self.pending_text.split_off(end + 1);
                    let lines = std::mem::replace(&mut self.pending_text, rest);
                    out.write_all(self.output.stderr_text(&lines).as_bytes())?;
                    self.at_line_start = true;
                }
            }
            Event::ThinkingDelta { text } => {
                self.line_start(out)?;
                self.line(out, &format!("(thinking) {}", text.trim_end()))?;
            }
            Event::ToolStart {
                call_id,
                name,
                input,
            } => {
                self.text_ended = true;
                self.tool_started.insert(call_id.clone(), Instant::now());
                self.line_start(out)?;
                self.line(out, &format!("-> {name} {input}"))?;
            }
            Event::ToolEnd {
                call_id,
                name,
                is_error,
                output,
            } => {
                self.line_start(out)?;
                let status = if *is_error { "failed" } else { "done" };
                let started = self.tool_started.remove(call_id);
                let status = match started {
                    Some(started) if self.verbose => {
                        format!("{status} in {} ms", started.elapsed().as_millis())
                    }
                    _ => status.to_owned(),
                };
                let output = preview(&self.output.stderr_text(output));
                self.line(out, &format!("<- {name} {status}: {output}"))?;
                self.turn_started = Instant::now();
            }
            Event::CompactionStart {
                reason,
                estimated_tokens,
            } => {
                self.line_start(out)?;
                let reason = match reason {
                    CompactionReason::Threshold => "near the context window",
                    CompactionReason::Overflow => "context overflow",
                    CompactionReason::Manual => "requested",
                    _ => "other",
                };
                self.line(
                    out,
                    &format!("compacting context ({reason}, ~{estimated_tokens} tokens)"),
                )?;
            }
            Event::CompactionEnd {
                messages_before,
                messages_after,
                tokens_before,
                tokens_after,
                duration_ms,
                error,
                ..
            } => {
                self.line_start(out)?;
                let line = match error {
                    Some(error) => format!("compaction failed: {}", error.message),
                    None => format!(
                        "compacted {messages_before} -> {messages_after} messages, \
                         ~{tokens_before} -> ~{tokens_after} tokens in {duration_ms} ms"
                    ),
                };
                self.line(out, &line)?;
            }
            Event::TaskStart {
                session,
                agent,
                depth,
                ..
            } => {
                self.line_start(out)?;
                let indent = "  ".repeat(usize::try_from(*depth).unwrap_or(0));
                let agent = agent.as_deref().unwrap_or("(same agent)");
                self.line(out, &format!("{indent}=> task {agent} in {session}"))?;
            }
            Event::TaskEnd {
                agent,
                depth,
                outcome,
                error,
                ..
            } => {
                self.line_start(out)?;
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
                self.line(out, &format!("{indent}<= task {agent} {outcome}"))?;
            }
            Event::TaskActivity { depth, event, .. } => {
                let indent = "  ".repeat(usize::try_from(*depth).unwrap_or(0) + 1);
                let line = match event.as_ref() {
                    Event::ToolStart { name, input, .. } => {
                        Some(format!("{indent}-> {name} {input}"))
                    }
                    Event::ToolEnd {
                        name,
                        is_error,
                        output,
                        ..
                    } => {
                        let status = if *is_error { "failed" } else { "done" };
                        let output = preview(&self.output.stderr_text(output));
                        Some(format!("{indent}<- {name} {status}: {output}"))
                    }
                    Event::CompactionStart { .. } => Some(format!("{indent}compacting context")),
                    // The task's text is its answer, which its parent receives; its deltas,
                    // turns and compaction ends add nothing here.
                    _ => None,
                };
                if let Some(line) = line {
                    self.line_start(out)?;
                    self.line(out, &line)?;
                }
            }
            Event::ActionRequired { action } => {
                self.line_start(out)?;
                self.line(
                    out,
                    &format!(
                        "!! {} waits ({}): {}",
                        action.tool_name, action.action_id, action.reason
                    ),
                )?;
            }
            Event::ActionResolved {
                action_id,
                decision,
            } => {
                self.line_start(out)?;
                let decided = match decision {
                    flue_core::ActionDecision::Allow => "allowed",
                    flue_core::ActionDecision::Deny { .. } => "denied",
                    flue_core::ActionDecision::Result { .. } => "answered",
                    _ => "interrupted",
                };
                self.line(out, &format!("!! {action_id} {decided}"))?;
            }
            Event::OperationEnd { .. } => self.line_start(out)?,
            _ => {}
        }
        Ok(())
    }

    /// Writes streamed text held back so far (its line has not ended).
    fn flush_text(&mut self, out: &mut impl Write) -> std::io::Result<()> {
        if self.pending_text.is_empty() {
            return Ok(());
        }
        let text = std::mem::take(&mut self.pending_text);
        out.write_all(self.output.stderr_text(&text).as_bytes())?;
        self.at_line_start = text.ends_with('\n');
        Ok(())
    }

    /// Writes one line of activity, redacted and escaped.
    fn line(&self, out: &mut impl Write, line: &str) -> std::io::Result<()> {
        writeln!(out, "{}", self.output.stderr_text(line))
    }

    fn line_start(&mut self, out: &mut impl Write) -> std::io::Result<()> {
        self.flush_text(out)?;
        if !self.at_line_start {
            writeln!(out)?;
            self.at_line_start = true;
        }
        Ok(())
    }
}

fn preview(output: &str) -> String {
    let flat = output.trim().replace('\n', " | ");
    if flat.chars().count() <= MAX_TOOL_OUTPUT_CHARS {
        return flat;
    }
    let cut: String = flat.chars().take(MAX_TOOL_OUTPUT_CHARS).collect();
    format!("{cut}...")
}

#[cfg(test)]
mod tests;
