//! The one reader of stdin in an interactive command: every line typed goes to whoever asks
//! next, the chat loop or a question (an approval, a custom tool's result, an MCP server's
//! question or sampling request).
//!
//! A blocking read of stdin cannot be cancelled, and a second reader would wait behind the
//! first one's lock for good; so one thread, started on the first question, reads lines and
//! hands them over a channel, and everything that needs a line awaits it next to Ctrl-C and
//! SIGTERM. The end of input (Ctrl-D on a terminal) is final: every later question gets
//! [`Reply::End`]. [`cancel_questions`] wakes the questions waiting now with
//! [`Reply::Cancelled`] (the work they belong to is being aborted).

use std::io::{BufRead as _, Write as _};
use std::sync::OnceLock;

use tokio::sync::{Mutex, Notify, mpsc};

/// What a question got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    /// One line, without its line end.
    Line(String),
    /// The end of input: nothing more will be typed.
    End,
    /// The question was withdrawn ([`cancel_questions`]).
    Cancelled,
}

/// The lines of stdin, read on their own thread; `None` once input ended.
static LINES: OnceLock<Mutex<mpsc::Receiver<String>>> = OnceLock::new();

/// Wakes the questions waiting now.
static CANCEL: Notify = Notify::const_new();

/// The next line of stdin (without its line end), or `None` at the end of input.
pub(crate) async fn line() -> Option<String> {
    let lines = LINES.get_or_init(|| Mutex::new(read_lines()));
    lines.lock().await.recv().await
}

/// Writes `question` on stderr and waits for the line that answers it.
pub(crate) async fn ask(question: &str) -> Reply {
    // Registered before the question shows, so a cancellation from now on is seen.
    let cancelled = CANCEL.notified();
    {
        let mut stderr = std::io::stderr().lock();
        // A closed stderr still leaves the line to read.
        let _ = stderr.write_all(question.as_bytes());
        let _ = stderr.flush();
    }
    tokio::select! {
        line = line() => line.map_or(Reply::End, Reply::Line),
        () = cancelled => Reply::Cancelled,
    }
}

/// Withdraws the questions waiting now: each gets [`Reply::Cancelled`]; a line typed later
/// goes to the next one who asks.
pub(crate) fn cancel_questions() {
    CANCEL.notify_waiters();
}

/// Starts the thread reading stdin: one line at a time, handed over when asked for (the channel
/// holds one line), until the end of input or a read error.
fn read_lines() -> mpsc::Receiver<String> {
    let (sender, receiver) = mpsc::channel(1);
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            let Ok(line) = line else { break };
            let line = line.strip_suffix('\r').map(str::to_owned).unwrap_or(line);
            if sender.blocking_send(line).is_err() {
                break;
            }
        }
    });
    receiver
}
