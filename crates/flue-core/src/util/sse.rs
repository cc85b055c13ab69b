//! The `text/event-stream` format (server-sent events): bytes in, dispatched events out.
//!
//! One incremental parser for every event stream Flue reads (model providers, the legacy MCP
//! transport), following the WHATWG HTML standard's "event stream interpretation":
//! - the stream is UTF-8 (an invalid sequence reads as U+FFFD), and one byte order mark at its
//!   very start is skipped;
//! - lines end with `\r\n`, `\n` or `\r`, also when a chunk ends between `\r` and `\n`;
//! - `data:` lines of one event are joined with `\n`; `event:` names it (`message` when it
//!   does not); `id:` sets the last event id, which later events keep (an id holding NUL is
//!   ignored); `retry:` sets the reconnection time when it is all ASCII digits; lines starting
//!   with `:` are comments; other fields are ignored; a line without `:` is a field with an
//!   empty value; one space after the colon is dropped;
//! - a blank line dispatches the event, unless it had no `data` line; an unfinished event at
//!   the end of the stream is dropped (callers detect a cut stream by a missing final event).
//!
//! An event, or a line, larger than [`MAX_EVENT_BYTES`] is an error rather than a reason to
//! grow without bound.

#[cfg(test)]
mod tests;

/// The most bytes one event (its data so far plus the line being read) may hold.
pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// One dispatched event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The event type: the `event:` field, `message` when the event had none.
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
    /// The last event id set by an `id:` field at or before this event; empty when none was.
    pub last_event_id: String,
}

/// Why a stream could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SseError {
    /// An event or a line exceeds [`MAX_EVENT_BYTES`]; the stream is malformed or hostile.
    #[error("malformed event stream: an event is larger than {} MiB", MAX_EVENT_BYTES / (1024 * 1024))]
    EventTooLarge,
}

/// The incremental parser; feed it chunks as they arrive.
///
/// ```
/// use flue_core::util::sse::{SseEvent, SseParser};
///
/// let mut parser = SseParser::default();
/// let mut events = Vec::new();
/// parser.feed(b"event: ping\r\ndata: {\"a\":", &mut events).unwrap();
/// parser.feed(b"1}\r\n\r\n", &mut events).unwrap();
/// assert_eq!(events[0].event, "ping");
/// assert_eq!(events[0].data, "{\"a\":1}");
/// ```
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of the line not finished yet.
    line: Vec<u8>,
    /// The last byte read ended a line with `\r`: a `\n` right after it belongs to that end.
    after_cr: bool,
    /// A line was read already (a byte order mark counts only on the first).
    past_first_line: bool,
    /// The event type buffer.
    event: String,
    /// The data buffer: each `data` value followed by `\n`.
    data: String,
    /// The last event id buffer.
    last_event_id: String,
    /// The reconnection time a `retry:` field set, in milliseconds.
    retry_ms: Option<u64>,
}

impl SseParser {
    /// Parses `chunk`, pushing every event it completes onto `out`.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        let mut rest = chunk;
        while let Some((&first, tail)) = rest.split_first() {
            if std::mem::take(&mut self.after_cr) && first == b'\n' {
                rest = tail;
                continue;
            }
            let Some(at) = rest.iter().position(|&byte| byte == b'\n' || byte == b'\r') else {
                self.line.extend_from_slice(rest);
                return self.check_size();
            };
            let (line, terminated) = rest.split_at(at);
            self.line.extend_from_slice(line);
            self.check_size()?;
            self.after_cr = terminated.first() == Some(&b'\r');
            self.end_line(out);
            rest = terminated.get(1..).unwrap_or_default();
        }
        Ok(())
    }

    /// The reconnection time the stream asked for with `retry:`, in milliseconds.
    pub fn retry_ms(&self) -> Option<u64> {
        self.retry_ms
    }

    fn check_size(&self) -> Result<(), SseError> {
        if self.line.len() + self.data.len() > MAX_EVENT_BYTES {
            return Err(SseError::EventTooLarge);
        }
        Ok(())
    }

    /// Interprets the line just finished.
    fn end_line(&mut self, out: &mut Vec<SseEvent>) {
        let bytes = std::mem::take(&mut self.line);
        {
            let text = String::from_utf8_lossy(&bytes);
            let line = if std::mem::replace(&mut self.past_first_line, true) {
                text.as_ref()
            } else {
                text.strip_prefix('\u{feff}').unwrap_or(&text)
            };
            if line.is_empty() {
                self.dispatch(out);
            } else if !line.starts_with(':') {
                let (field, value) = match line.split_once(':') {
                    Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
                    None => (line, ""),
                };
                self.field(field, value);
            }
        }
        // Keep the allocation for the next line.
        self.line = bytes;
        self.line.clear();
    }

    fn field(&mut self, field: &str, value: &str) {
        match field {
            "event" => value.clone_into(&mut self.event),
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
            }
            "id" if !value.contains('\0') => value.clone_into(&mut self.last_event_id),
            "retry" if !value.is_empty() && value.bytes().all(|byte| byte.is_ascii_digit()) => {
                // Digits too many for a u64 are not a time anyone meant; ignore them.
                if let Ok(retry_ms) = value.parse() {
                    self.retry_ms = Some(retry_ms);
                }
            }
            _ => {}
        }
    }

    /// A blank line: hands out the event read so far, if it had data.
    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let event = std::mem::take(&mut self.event);
        let mut data = std::mem::take(&mut self.data);
        if data.is_empty() {
            return;
        }
        data.pop();
        out.push(SseEvent {
            event: if event.is_empty() {
                "message".to_owned()
            } else {
                event
            },
            data,
            last_event_id: self.last_event_id.clone(),
        });
    }
}
