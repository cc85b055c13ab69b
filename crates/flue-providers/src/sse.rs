//! Server-sent events framing: bytes in, `(event, data)` frames out.
//!
//! A small incremental parser for the `text/event-stream` format as providers use it: lines end
//! with `\n`, `\r\n` or `\r` (also across chunk boundaries), `data:` lines of one event are
//! joined with `\n`, `event:` names the event, comments (`:`) and other fields are ignored, and
//! a blank line ends the event. An unfinished event at the end of the stream is dropped, as the
//! specification says; callers detect a cut stream by the missing terminal event instead.

#[cfg(test)]
mod tests;

/// The longest line accepted; a longer one is a malformed stream, not a reason to grow forever.
const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// One dispatched event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SseEvent {
    /// The `event:` field; empty when the event had none (the default type, `message`).
    pub(crate) event: String,
    /// The `data:` lines joined with `\n`.
    pub(crate) data: String,
}

/// Why a stream could not be framed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SseError {
    /// A line is not UTF-8.
    #[error("malformed event stream: a line is not valid UTF-8")]
    InvalidUtf8,
    /// A line exceeds [`MAX_LINE_BYTES`].
    #[error("malformed event stream: a line is longer than {MAX_LINE_BYTES} bytes")]
    LineTooLong,
}

/// Incremental parser; feed it chunks as they arrive.
#[derive(Debug, Default)]
pub(crate) struct SseParser {
    /// Bytes of the line not finished yet.
    pending: Vec<u8>,
    /// The event being read.
    current: PartialEvent,
}

/// The fields of the event being read.
#[derive(Debug, Default)]
struct PartialEvent {
    event: String,
    data: String,
    has_data: bool,
}

impl SseParser {
    /// Parses `chunk`, pushing every event it completes onto `out`.
    pub(crate) fn feed(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        self.pending.extend_from_slice(chunk);
        let mut start = 0;
        let mut idx = 0;
        while let Some(&byte) = self.pending.get(idx) {
            let terminator_len = match byte {
                b'\n' => 1,
                b'\r' => match self.pending.get(idx + 1) {
                    Some(b'\n') => 2,
                    Some(_) => 1,
                    // A `\r` at the end may be the first half of `\r\n`: wait for more bytes.
                    None => break,
                },
                _ => {
                    idx += 1;
                    continue;
                }
            };
            let line = self.pending.get(start..idx).unwrap_or_default();
            let line = std::str::from_utf8(line).map_err(|_| SseError::InvalidUtf8)?;
            if let Some(event) = self.current.line(line) {
                out.push(event);
            }
            idx += terminator_len;
            start = idx;
        }
        self.pending.drain(..start);
        if self.pending.len() > MAX_LINE_BYTES {
            return Err(SseError::LineTooLong);
        }
        Ok(())
    }
}

impl PartialEvent {
    /// Handles one line; returns the event a blank line completes.
    fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            let event = std::mem::take(&mut self.event);
            let data = std::mem::take(&mut self.data);
            return std::mem::take(&mut self.has_data).then_some(SseEvent { event, data });
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => value.clone_into(&mut self.event),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            // `id`, `retry` and unknown fields mean nothing to a model stream.
            _ => {}
        }
        None
    }
}
