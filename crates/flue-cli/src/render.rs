//! Renders an operation's events as human-readable activity on stderr.

use std::io::Write;

use flue_core::{CompactionReason, Event, EventStream, Outcome};

/// Longest tool output echoed to the terminal.
const MAX_TOOL_OUTPUT_CHARS: usize = 400;

/// Writes activity to stderr until the stream ends.
pub(crate) async fn to_stderr(mut events: EventStream) {
    let mut renderer = Renderer {
        at_line_start: true,
    };
    while let Some(event) = events.recv().await {
        let mut stderr = std::io::stderr().lock();
        // A closed stderr leaves nothing to report to; the operation goes on regardless.
        let _ = renderer.render(&mut stderr, &event);
        let _ = stderr.flush();
    }
}

struct Renderer {
    at_line_start: bool,
}

impl Renderer {
    fn render(&mut self, out: &mut impl Write, event: &Event) -> std::io::Result<()> {
        match event {
            Event::TextDelta { text } => {
                out.write_all(text.as_bytes())?;
                self.at_line_start = text.ends_with('\n');
            }
            Event::ThinkingDelta { text } => {
                self.line_start(out)?;
                writeln!(out, "(thinking) {}", text.trim_end())?;
            }
            Event::ToolStart { name, input, .. } => {
                self.line_start(out)?;
                writeln!(out, "-> {name} {input}")?;
            }
            Event::ToolEnd {
                name,
                is_error,
                output,
                ..
            } => {
                self.line_start(out)?;
                let status = if *is_error { "failed" } else { "done" };
                writeln!(out, "<- {name} {status}: {}", preview(output))?;
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
                writeln!(
                    out,
                    "compacting context ({reason}, ~{estimated_tokens} tokens)"
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
                match error {
                    Some(error) => writeln!(out, "compaction failed: {}", error.message)?,
                    None => writeln!(
                        out,
                        "compacted {messages_before} -> {messages_after} messages, \
                         ~{tokens_before} -> ~{tokens_after} tokens in {duration_ms} ms"
                    )?,
                }
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
                writeln!(out, "{indent}=> task {agent} in {session}")?;
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
                writeln!(out, "{indent}<= task {agent} {outcome}")?;
            }
            Event::OperationEnd { .. } => self.line_start(out)?,
            _ => {}
        }
        Ok(())
    }

    fn line_start(&mut self, out: &mut impl Write) -> std::io::Result<()> {
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
