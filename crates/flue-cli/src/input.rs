//! The one reader of stdin in an interactive command: every line typed goes to whoever asks
//! next, the chat loop or a question (an approval, a custom tool's result, an MCP server's
//! question or sampling request).
//!
//! A blocking read of stdin cannot be cancelled, and a second reader would wait behind the
//! first one's lock for good; so one thread, started on the first question, reads a line
//! each time one is asked for and hands it over a channel, and everything that needs a line
//! awaits it next to Ctrl-C and SIGTERM. When stdin and stdout are both a terminal the thread
//! reads with a line editor ([`crate::term::editor`]): history, editing, bracketed paste,
//! Ctrl-R. The editor takes Ctrl-C as a key: at the chat's prompt it clears the input
//! ([`ChatLine::Interrupted`]); at a question it is sent on as SIGINT, so it aborts the work
//! as Ctrl-C does anywhere else. The end of input (Ctrl-D) is final: every later question gets
//! [`Reply::End`]. [`cancel_questions`] wakes the questions waiting now with
//! [`Reply::Cancelled`] (the work they belong to is being aborted); a line typed for a
//! withdrawn question goes to the next one who asks.

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::path::PathBuf;
use std::sync::OnceLock;

use rustyline::error::ReadlineError;
use rustyline::history::FileHistory;
use rustyline::{Config, Editor};
use tokio::sync::{Mutex, Notify, mpsc};

use crate::term::editor::{ChatHelper, joined};

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

/// What the chat's prompt got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ChatLine {
    /// A message or command (several lines when continued or pasted).
    Line(String),
    /// Ctrl-C at the prompt.
    Interrupted,
    /// The end of input.
    End,
}

/// What the reading thread is asked to read.
enum Request {
    /// A chat message; `history` is the file that keeps the chat's earlier inputs.
    Chat {
        prompt: String,
        history: Option<PathBuf>,
    },
    /// The answer to a question whose last line is `prompt`.
    Question { prompt: String },
}

/// What the reading thread read.
enum Read {
    Line(String),
    Interrupted,
    /// The read ended without a line for its asker (Ctrl-C at a question, sent on as SIGINT):
    /// whoever waits asks again.
    Withdrawn,
    End,
}

/// The reading thread's requests and results; `in_flight` while a request is not answered.
struct Reader {
    requests: std::sync::mpsc::Sender<Request>,
    state: Mutex<State>,
}

struct State {
    reads: mpsc::Receiver<Read>,
    in_flight: bool,
}

static READER: OnceLock<Reader> = OnceLock::new();

/// Wakes the questions waiting now.
static CANCEL: Notify = Notify::const_new();

/// The terminal's settings before the editor changed them, restored by [`restore_terminal`].
static ORIGINAL_TERMIOS: OnceLock<rustix::termios::Termios> = OnceLock::new();

/// Whether input is read with the line editor: stdin and stdout are both a terminal.
pub(crate) fn is_interactive() -> bool {
    std::io::stdin().is_terminal() && std::io::stdout().is_terminal()
}

/// The chat's next input after showing `prompt`, with the earlier inputs kept in `history`.
pub(crate) async fn chat_line(prompt: &str, history: Option<PathBuf>) -> ChatLine {
    let request = || Request::Chat {
        prompt: prompt.to_owned(),
        history: history.clone(),
    };
    match read(request, prompt).await {
        Read::Line(line) => ChatLine::Line(line),
        Read::Interrupted => ChatLine::Interrupted,
        Read::Withdrawn | Read::End => ChatLine::End,
    }
}

/// Writes `question` and waits for the line that answers it.
pub(crate) async fn ask(question: &str) -> Reply {
    // Registered before the question shows, so a cancellation from now on is seen.
    let cancelled = CANCEL.notified();
    // The editor draws the last line (it redraws it while editing); the rest goes first.
    let (head, prompt) = question
        .rfind('\n')
        .map_or(("", question), |at| question.split_at(at + 1));
    write_stderr(head);
    let request = || Request::Question {
        prompt: prompt.to_owned(),
    };
    tokio::select! {
        read = read(request, prompt) => match read {
            Read::Line(line) => Reply::Line(line),
            Read::Interrupted | Read::Withdrawn => Reply::Cancelled,
            Read::End => Reply::End,
        },
        () = cancelled => Reply::Cancelled,
    }
}

/// Withdraws the questions waiting now: each gets [`Reply::Cancelled`]; a line typed later
/// goes to the next one who asks.
pub(crate) fn cancel_questions() {
    CANCEL.notify_waiters();
}

/// Puts the terminal back as it was before the editor read from it (a signal can end the
/// process while the editor waits for a key).
pub(crate) fn restore_terminal() {
    if let Some(termios) = ORIGINAL_TERMIOS.get() {
        let _ = rustix::termios::tcsetattr(
            std::io::stdin(),
            rustix::termios::OptionalActions::Now,
            termios,
        );
    }
}

/// The next read for `request`; when an earlier read is still under way (its asker gave up),
/// that one's result, with `prompt` shown again.
async fn read(request: impl Fn() -> Request, prompt: &str) -> Read {
    let reader = READER.get_or_init(start);
    let mut state = reader.state.lock().await;
    loop {
        if state.in_flight {
            write_stderr(prompt);
        } else {
            if reader.requests.send(request()).is_err() {
                return Read::End;
            }
            state.in_flight = true;
        }
        let read = state.reads.recv().await.unwrap_or(Read::End);
        state.in_flight = false;
        if !matches!(read, Read::Withdrawn) {
            return read;
        }
    }
}

fn write_stderr(text: &str) {
    let mut stderr = std::io::stderr().lock();
    // A closed stderr still leaves the line to read.
    let _ = stderr.write_all(text.as_bytes());
    let _ = stderr.flush();
}

/// Starts the reading thread.
fn start() -> Reader {
    let (requests, requested) = std::sync::mpsc::channel();
    let (sender, reads) = mpsc::channel(1);
    std::thread::spawn(move || {
        let mut source = Source::open();
        while let Ok(request) = requested.recv() {
            let read = source.read(request);
            if sender.blocking_send(read).is_err() {
                break;
            }
        }
    });
    Reader {
        requests,
        state: Mutex::new(State {
            reads,
            in_flight: false,
        }),
    }
}

/// Where lines come from.
enum Source {
    Editor {
        editor: Box<Editor<ChatHelper, FileHistory>>,
        /// The history file loaded into the editor.
        loaded: Option<PathBuf>,
    },
    Plain,
    Ended,
}

impl Source {
    fn open() -> Self {
        if !is_interactive() {
            return Self::Plain;
        }
        if let Ok(termios) = rustix::termios::tcgetattr(std::io::stdin()) {
            let _ = ORIGINAL_TERMIOS.set(termios);
        }
        let config = Config::builder()
            .auto_add_history(false)
            .bracketed_paste(true)
            .completion_type(rustyline::CompletionType::List)
            .build();
        match Editor::with_config(config) {
            Ok(mut editor) => {
                editor.set_helper(Some(ChatHelper));
                Self::Editor {
                    editor: Box::new(editor),
                    loaded: None,
                }
            }
            Err(_) => Self::Plain,
        }
    }

    fn read(&mut self, request: Request) -> Read {
        let read = match self {
            Self::Editor { editor, loaded } => edit(editor, loaded, request),
            Self::Plain => plain(&request),
            Self::Ended => Read::End,
        };
        if matches!(read, Read::End) {
            *self = Self::Ended;
        }
        read
    }
}

/// Reads with the editor; a chat input goes into the history (and its file).
fn edit(
    editor: &mut Editor<ChatHelper, FileHistory>,
    loaded: &mut Option<PathBuf>,
    request: Request,
) -> Read {
    let (prompt, history, is_chat) = match request {
        Request::Chat { prompt, history } => (prompt, history, true),
        Request::Question { prompt } => (prompt, None, false),
    };
    if let Some(path) = &history
        && loaded.as_ref() != Some(path)
    {
        editor.clear_history().ok();
        // No file yet: an empty history.
        let _ = editor.load_history(path);
        *loaded = Some(path.clone());
    }
    loop {
        return match editor.readline(&prompt) {
            Ok(line) => {
                if let Some(path) = history.as_ref().filter(|_| !line.trim().is_empty()) {
                    let _ = editor.add_history_entry(line.as_str());
                    let _ = append_history(editor, path);
                }
                Read::Line(joined(&line))
            }
            Err(ReadlineError::Interrupted) if is_chat => Read::Interrupted,
            Err(ReadlineError::Interrupted) => {
                // Ctrl-C at a question aborts the work, as a SIGINT from the terminal would.
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::this(),
                    nix::sys::signal::Signal::SIGINT,
                );
                Read::Withdrawn
            }
            Err(ReadlineError::Signal(_)) => continue,
            Err(_) => Read::End,
        };
    }
}

/// Appends the newest entry to the history file, creating its folder.
fn append_history(
    editor: &mut Editor<ChatHelper, FileHistory>,
    path: &std::path::Path,
) -> rustyline::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    editor.append_history(path)
}

/// Reads one line of stdin as it is (not a terminal, or no editor), the prompt on stderr.
fn plain(request: &Request) -> Read {
    let prompt = match request {
        Request::Chat { prompt, .. } | Request::Question { prompt } => prompt,
    };
    write_stderr(prompt);
    let mut line = String::new();
    match std::io::stdin().lock().read_line(&mut line) {
        Ok(0) | Err(_) => Read::End,
        Ok(_) => {
            let line = line.strip_suffix('\n').unwrap_or(&line);
            Read::Line(line.strip_suffix('\r').unwrap_or(line).to_owned())
        }
    }
}
