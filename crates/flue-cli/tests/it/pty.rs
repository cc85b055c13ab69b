//! `flue run` and `flue chat` on a real pseudo-terminal that the test drives key by key: the
//! reply appears token by token while the model is still writing it (a loopback
//! OpenAI-compatible server holds its stream open until the test has seen the previous token on
//! the terminal), a chat answers an approval with y, n or Ctrl-D and goes on, and Ctrl-C or
//! SIGTERM at a question ends the run with its exit code.
//!
//! The terminal is python3's `pty.fork()` (the program gets the terminal as its controlling
//! terminal, so Ctrl-C typed on it is a SIGINT from the line discipline, as for a person), in a
//! small relay: what the terminal shows is copied to the relay's stdout, and each JSON line on
//! its stdin types keys (`{"type": "..."}`) or sends a signal (`{"signal": 15}`).

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::{Workspace, stderr, stdout};

const RELAY: &str = r#"
import fcntl, json, os, pty, select, struct, sys, termios
argv = sys.argv[1:]
pid, fd = pty.fork()
if pid == 0:
    os.execv(argv[0], argv)
fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 80, 0, 0))
out = sys.stdout.buffer
commands = sys.stdin.buffer.fileno()
commands_open = True
pending = b""
status = None
while True:
    watched = [fd] + ([commands] if commands_open else [])
    ready, _, _ = select.select(watched, [], [], 0.2)
    if fd in ready:
        try:
            data = os.read(fd, 65536)
        except OSError:
            data = b""
        if not data:
            break
        out.write(data)
        out.flush()
    if commands_open and commands in ready:
        chunk = os.read(commands, 65536)
        if not chunk:
            commands_open = False
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            command = json.loads(line)
            if "type" in command:
                os.write(fd, command["type"].encode())
            if "signal" in command:
                os.kill(pid, command["signal"])
            if "resize" in command:
                rows, cols = command["resize"]
                fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    if not ready:
        # The program ended while something it started still holds the terminal open.
        done, ended = os.waitpid(pid, os.WNOHANG)
        if done:
            status = ended
            break
if status is None:
    _, status = os.waitpid(pid, 0)
code = os.waitstatus_to_exitcode(status)
sys.stderr.write("exit %d\n" % code)
sys.exit(0)
"#;

/// How long a test waits for something it expects on the terminal before it fails (only a
/// failing or hanging program ever waits this long).
const DEADLINE: Duration = Duration::from_secs(60);

/// What the terminal showed so far, and whether the relay ended.
#[derive(Default)]
struct Screen {
    bytes: Vec<u8>,
    ended: bool,
}

/// The terminal's size (the relay sets it; the screen a test reads has the same).
pub(crate) const ROWS: u16 = 50;
pub(crate) const COLS: u16 = 80;

/// A program on a pseudo-terminal; killed (with its relay) when dropped before it ended, so a
/// failing test leaves nothing running.
pub(crate) struct Terminal {
    relay: Option<Child>,
    keys: Option<ChildStdin>,
    screen: Arc<(Mutex<Screen>, Condvar)>,
    /// Where the next `expect` starts looking.
    position: usize,
    /// The terminal's width now.
    cols: u16,
}

impl Terminal {
    /// Starts `flue <args>` on a new terminal.
    pub(crate) fn start(args: &[&str]) -> Self {
        Self::start_with(args, &[])
    }

    /// Starts `flue <args>` on a new terminal with `envs` set too.
    pub(crate) fn start_with(args: &[&str], envs: &[(&str, &str)]) -> Self {
        let mut relay = Command::new("python3")
            .arg("-c")
            .arg(RELAY)
            .arg(assert_cmd::cargo::cargo_bin("flue"))
            .args(args)
            // Only what a run needs: no secret-named variable of the test's environment makes
            // the renderer hold text back.
            .env_clear()
            .env("FLUE_TRUST", "1")
            .envs(
                ["PATH", "HOME", "TMPDIR"]
                    .iter()
                    .filter_map(|name| std::env::var_os(name).map(|value| (name, value))),
            )
            .envs(envs.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|err| panic!("cannot start python3 for the terminal ({err})"));
        let keys = relay.stdin.take().unwrap();
        let mut shown = relay.stdout.take().unwrap();
        let screen = Arc::new((Mutex::new(Screen::default()), Condvar::new()));
        let writer = Arc::clone(&screen);
        std::thread::spawn(move || {
            let mut buffer = [0u8; 4096];
            loop {
                let n = shown.read(&mut buffer).unwrap_or(0);
                let (lock, changed) = &*writer;
                let mut screen = lock.lock().unwrap();
                if n == 0 {
                    screen.ended = true;
                } else {
                    screen.bytes.extend_from_slice(&buffer[..n]);
                }
                changed.notify_all();
                if n == 0 {
                    break;
                }
            }
        });
        Self {
            relay: Some(relay),
            keys: Some(keys),
            screen,
            position: 0,
            cols: COLS,
        }
    }

    /// What the terminal shows now, as a terminal emulator draws it.
    pub(crate) fn screen(&self) -> vt100::Parser {
        let mut parser = new_screen(self.cols);
        parser.process(&self.screen.0.lock().unwrap().bytes);
        parser
    }

    /// Makes the terminal `cols` wide (the program gets SIGWINCH); the screen read from now on
    /// is that wide.
    pub(crate) fn resize(&mut self, cols: u16) {
        self.cols = cols;
        self.command(&json!({ "resize": [ROWS, cols] }));
    }

    /// Waits until the screen shows `text` (the emulator's view: styles and cursor moves do
    /// not split it); returns that screen. The next [`Terminal::expect`] looks only at what
    /// comes after everything shown so far: follow this with keys, not with an `expect` of
    /// output that may have come already.
    pub(crate) fn expect_screen(&mut self, text: &str) -> vt100::Parser {
        let (lock, changed) = &*self.screen;
        let deadline = Instant::now() + DEADLINE;
        let mut screen = lock.lock().unwrap();
        loop {
            let mut parser = new_screen(self.cols);
            parser.process(&screen.bytes);
            if parser.screen().contents().contains(text) {
                self.position = screen.bytes.len();
                return parser;
            }
            let now = Instant::now();
            assert!(
                !screen.ended && now < deadline,
                "waited for {text:?} on the screen; it showed:\n{}",
                parser.screen().contents()
            );
            screen = changed.wait_timeout(screen, deadline - now).unwrap().0;
        }
    }

    /// Waits until `text` shows after the previous match.
    pub(crate) fn expect(&mut self, text: &str) {
        let (lock, changed) = &*self.screen;
        let deadline = Instant::now() + DEADLINE;
        let mut screen = lock.lock().unwrap();
        loop {
            let rest = &screen.bytes[self.position.min(screen.bytes.len())..];
            if let Some(found) = find(rest, text.as_bytes()) {
                self.position += found + text.len();
                return;
            }
            let now = Instant::now();
            assert!(
                !screen.ended && now < deadline,
                "waited for {text:?}; the terminal showed:\n{}",
                String::from_utf8_lossy(&screen.bytes)
            );
            screen = changed.wait_timeout(screen, deadline - now).unwrap().0;
        }
    }

    /// Types `keys` on the terminal.
    pub(crate) fn send(&mut self, keys: &str) {
        self.command(&json!({ "type": keys }));
    }

    /// Sends `signal` to the program.
    pub(crate) fn signal(&mut self, signal: i32) {
        self.command(&json!({ "signal": signal }));
    }

    fn command(&mut self, command: &serde_json::Value) {
        let keys = self.keys.as_mut().unwrap();
        writeln!(keys, "{command}").unwrap();
        keys.flush().unwrap();
    }

    /// Waits for the program to end; its exit code (minus the signal number when a signal
    /// ended it) and everything the terminal showed.
    pub(crate) fn wait(mut self) -> (i32, String) {
        let relay = self.relay.take().unwrap();
        drop(self.keys.take());
        let screen = Arc::clone(&self.screen);
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = sender.send(relay.wait_with_output());
        });
        let output = receiver
            .recv_timeout(DEADLINE)
            .unwrap_or_else(|_| {
                let shown = String::from_utf8_lossy(&screen.0.lock().unwrap().bytes).into_owned();
                panic!("the program did not end; the terminal showed:\n{shown}")
            })
            .unwrap();
        let report = String::from_utf8_lossy(&output.stderr).into_owned();
        let code = report
            .lines()
            .find_map(|line| line.strip_prefix("exit ")?.trim().parse().ok())
            .unwrap_or_else(|| panic!("the relay failed: {report}"));
        // The reader thread has seen the end of the relay's stdout.
        let (lock, changed) = &*screen;
        let mut shown = lock.lock().unwrap();
        while !shown.ended {
            shown = changed.wait_timeout(shown, DEADLINE).unwrap().0;
        }
        (code, String::from_utf8_lossy(&shown.bytes).into_owned())
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let Some(mut relay) = self.relay.take() else {
            return;
        };
        if let Some(mut keys) = self.keys.take() {
            // SIGKILL to the program (the relay knows its pid); the relay ends with it.
            let _ = writeln!(keys, "{}", json!({ "signal": 9 }));
            let _ = keys.flush();
        }
        let deadline = Instant::now() + DEADLINE;
        while matches!(relay.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = relay.kill();
        let _ = relay.wait();
    }
}

/// An emulated screen of the terminal's size.
fn new_screen(cols: u16) -> vt100::Parser {
    let size = |n: u16| std::num::NonZero::new(n).unwrap();
    vt100::Parser::new(size(ROWS), size(cols), 0)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// A loopback OpenAI-compatible server that answers one chat completion with `pieces` as
/// `data:` chunks (`("reasoning", ...)` or `("content", ...)`), sending each only when the test
/// releases it; returns the base URL and the release channel.
pub(crate) fn held_stream(
    pieces: &'static [(&'static str, &'static str)],
) -> (String, mpsc::Sender<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let (release, released) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        let Ok((mut stream, _)) = listener.accept() else {
            return;
        };
        read_request(&mut stream);
        let _ = write!(
            stream,
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\
             Connection: close\r\n\r\n"
        );
        let chunk = |delta: serde_json::Value, finish: Option<&str>| {
            let body = json!({
                "id": "chatcmpl-1",
                "object": "chat.completion.chunk",
                "created": 1_700_000_000,
                "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            });
            format!("data: {body}\n\n")
        };
        let _ = stream.write_all(chunk(json!({"role": "assistant"}), None).as_bytes());
        for (kind, text) in pieces {
            if released.recv().is_err() {
                return;
            }
            let delta = match *kind {
                "reasoning" => json!({ "reasoning_content": text }),
                _ => json!({ "content": text }),
            };
            let _ = stream.write_all(chunk(delta, None).as_bytes());
            let _ = stream.flush();
        }
        let _ = stream.write_all(chunk(json!({}), Some("stop")).as_bytes());
        let usage = json!({
            "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1_700_000_000,
            "model": "m", "choices": [],
            "usage": {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19},
        });
        let _ = write!(stream, "data: {usage}\n\ndata: [DONE]\n\n");
    });
    (url, release)
}

/// Reads one HTTP request: its headers, then the body its content-length announces.
fn read_request(stream: &mut std::net::TcpStream) {
    let mut request = Vec::new();
    let mut buffer = [0; 4096];
    while let Ok(n) = stream.read(&mut buffer) {
        if n == 0 {
            return;
        }
        request.extend_from_slice(&buffer[..n]);
        let text = String::from_utf8_lossy(&request);
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text
                .lines()
                .find_map(|line| {
                    line.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|value| value.trim().parse::<usize>().unwrap_or(0))
                })
                .unwrap_or(0);
            if request.len() >= end + 4 + length {
                return;
            }
        }
    }
}

const PIECES: &[(&str, &str)] = &[
    ("reasoning", "Let me"),
    ("reasoning", " think"),
    ("content", "Hel"),
    ("content", "lo, wor"),
    ("content", "ld!"),
];

#[test]
fn the_reply_and_thinking_appear_token_by_token_while_the_model_writes() {
    let (url, release) = held_stream(PIECES);
    let ws = Workspace::new(&[
        (
            "flue.toml",
            &format!(
                "[defaults]\nmodel = \"local/m\"\n\n[providers.local]\n\
                 api = \"openai-completions\"\nbase_url = \"{url}\"\n"
            ),
        ),
        ("agents/a.md", "---\ndescription: A\n---\nHi.\n"),
    ]);
    let root = ws.root().to_str().unwrap();
    let mut terminal = Terminal::start(&["run", "a", "-m", "hi", "--id", "t1", "--root", root]);
    // Each piece shows before the server sends the next one: the stream is still open.
    for (_, piece) in PIECES {
        release.send(()).unwrap();
        terminal.expect(piece);
    }
    let screen = terminal.expect_screen("Hello, world!");
    let (code, shown) = terminal.wait();
    assert_eq!(code, 0, "{shown}");
    // One running thinking block (dimmed), then the reply, shown once (stdout is the
    // terminal).
    let contents = screen.screen().contents();
    assert_eq!(contents.matches("(thinking)").count(), 1, "{contents}");
    assert!(contents.contains("(thinking) Let me think\n"), "{contents}");
    assert_eq!(contents.matches("Hello, world!").count(), 1, "{contents}");
    let (row, col) = (0..crate::pty::ROWS)
        .find_map(|row| {
            let line = screen
                .screen()
                .contents_between(row, 0, row, crate::pty::COLS);
            line.find("Let me")
                .map(|col| (row, u16::try_from(col).unwrap()))
        })
        .unwrap();
    assert!(screen.screen().cell(row, col).unwrap().dim(), "{contents}");
}

/// An agent whose `bash` asks first: `make X` runs `echo X > X.txt`, then says `made`.
fn careful() -> Workspace {
    let script = json!({"rules": [
        {"when": {"tool_result": "bash"}, "reply": {"text": "made"}},
        {"when": {"user_matches": "^make a$"},
         "reply": {"tool_calls": [{"name": "bash", "input": {"command": "echo a > a.txt"}}]}},
        {"when": {"user_matches": "^make b$"},
         "reply": {"tool_calls": [{"name": "bash", "input": {"command": "echo b > b.txt"}}]}},
        {"when": {"user_matches": "^make c$"},
         "reply": {"tool_calls": [{"name": "bash", "input": {"command": "echo c > c.txt"}}]}},
        {"reply": {"text": "?"}}
    ]})
    .to_string();
    Workspace::new(&[
        (
            "agents/careful.md",
            "---\nmodel: scripted/s.json\ntools: [bash]\nsandbox: local\npermissions:\n  \
             bash: always_ask\n---\nWork.\n",
        ),
        ("s.json", &script),
    ])
}

#[test]
fn a_chat_answers_approvals_with_y_n_and_ctrl_d_and_goes_on() {
    let ws = careful();
    let root = ws.root().to_str().unwrap();
    let mut terminal = Terminal::start(&["chat", "careful", "--id", "c1", "--root", root]);
    terminal.expect("> ");
    terminal.send("make a\r");
    terminal.expect("allow? [y/N]");
    terminal.send("y\r");
    terminal.expect("made");
    terminal.expect("> ");
    terminal.send("make b\r");
    terminal.expect("allow? [y/N]");
    terminal.send("n\r");
    terminal.expect("made");
    terminal.expect("> ");
    terminal.send("make c\r");
    terminal.expect("allow? [y/N]");
    // Ctrl-D at the question: no, and the input is over, so the chat ends after the reply.
    terminal.send("\x04");
    terminal.expect("made");
    let (code, shown) = terminal.wait();
    assert_eq!(code, 0, "{shown}");
    assert!(ws.root().join("a.txt").exists(), "{shown}");
    assert!(!ws.root().join("b.txt").exists(), "{shown}");
    assert!(!ws.root().join("c.txt").exists(), "{shown}");
    let transcript = ws.flue(&["session", "show", "--id", "c1"]);
    assert!(transcript.status.success(), "{}", stderr(&transcript));
    assert_eq!(stdout(&transcript).matches("assistant: made").count(), 3);
}

#[test]
fn ctrl_c_at_a_question_aborts_the_run_with_130_and_the_chat_reply_only() {
    let ws = careful();
    let root = ws.root().to_str().unwrap();
    let mut terminal = Terminal::start(&["run", "careful", "-m", "make a", "--root", root]);
    terminal.expect("allow? [y/N]");
    terminal.send("\x03");
    let (code, shown) = terminal.wait();
    assert_eq!(code, 130, "{shown}");
    assert!(shown.contains("interrupted: aborting"), "{shown}");
    assert!(!ws.root().join("a.txt").exists(), "{shown}");

    // In a chat, Ctrl-C aborts the reply that asks; the chat goes on.
    let mut terminal = Terminal::start(&["chat", "careful", "--id", "c2", "--root", root]);
    terminal.expect("> ");
    terminal.send("make a\r");
    terminal.expect("allow? [y/N]");
    terminal.send("\x03");
    terminal.expect("(reply aborted; the conversation goes on)");
    terminal.expect("> ");
    terminal.send("make b\r");
    terminal.expect("allow? [y/N]");
    terminal.send("y\r");
    terminal.expect("made");
    terminal.expect("> ");
    terminal.send("/exit\r");
    let (code, shown) = terminal.wait();
    assert_eq!(code, 0, "{shown}");
    assert!(!ws.root().join("a.txt").exists(), "{shown}");
    assert!(ws.root().join("b.txt").exists(), "{shown}");
}

#[test]
fn sigterm_at_a_question_ends_the_chat_and_the_run_with_143() {
    let ws = careful();
    let root = ws.root().to_str().unwrap();
    for args in [
        &["chat", "careful", "--id", "c3", "--root", root][..],
        &["run", "careful", "-m", "make a", "--root", root][..],
    ] {
        let mut terminal = Terminal::start(args);
        if args[0] == "chat" {
            terminal.expect("> ");
            terminal.send("make a\r");
        }
        terminal.expect("allow? [y/N]");
        terminal.signal(15);
        let (code, shown) = terminal.wait();
        assert_eq!(code, 143, "{args:?}: {shown}");
        assert!(!ws.root().join("a.txt").exists(), "{shown}");
    }
}

#[test]
fn a_chat_answers_an_mcp_servers_question_and_ctrl_c_withdraws_it() {
    // The Python SDK peer's `release` tool asks which version to release (an elicitation).
    let tool = "mcp__py__release";
    let script = json!({"rules": [
        {"when": {"tool_result": tool}, "reply": {"text": "Tool said: {{tool_result}}"}},
        {"when": {"user_contains": "release"}, "reply": {"tool_calls": [{"name": tool, "input": {}}]}},
        {"reply": {"text": "ok"}}
    ]});
    let python = super::mcp::peer(".venv/bin/python");
    let server = super::mcp::peer("py_server.py");
    let ws = Workspace::new(&[
        (
            "agents/asker.md",
            &format!(
                "---\nmodel: scripted/script.json\nmcp:\n  py:\n    command: {python}\n    \
                 args: [\"{server}\", stdio]\n---\nYou release.\n"
            ),
        ),
        ("script.json", &script.to_string()),
    ]);
    let root = ws.root().to_str().unwrap();
    let mut terminal = Terminal::start(&["chat", "asker", "--id", "m1", "--root", root]);
    terminal.expect("> ");
    terminal.send("release please\r");
    terminal.expect("Which version should be released?");
    // The fields in the schema's (alphabetical) order; Enter keeps a default.
    terminal.expect("Channel [stable/beta] default \"stable\": ");
    terminal.send("\r");
    terminal.expect("default true: ");
    terminal.send("\r");
    terminal.expect("(The version to release): ");
    terminal.send("1.2.3\r");
    terminal.expect("send this? [a]ccept, [d]ecline, [c]ancel: ");
    terminal.send("a\r");
    terminal.expect("Tool said: ");
    terminal.expect("released 1.2.3 on stable (notify: yes)");
    terminal.expect("> ");
    terminal.send("release again\r");
    terminal.expect("Channel [stable/beta] default \"stable\": ");
    // Ctrl-C at the server's question: the reply is aborted, the chat goes on.
    terminal.send("\x03");
    terminal.expect("(reply aborted; the conversation goes on)");
    terminal.expect("> ");
    terminal.send("hello\r");
    terminal.expect("ok");
    terminal.expect("> ");
    terminal.send("\x04");
    let (code, shown) = terminal.wait();
    assert_eq!(code, 0, "{shown}");
}
