//! `flue` on a real pseudo-terminal (python3's `pty`): the reply printed once when stdout and
//! stderr are the same terminal, and `flue chat`'s loop with Ctrl-C aborting one reply, not
//! the chat.

use std::path::Path;

use serde_json::json;

use crate::{Workspace, stderr, stdout};

/// Drives a program on a pseudo-terminal: argv[1] is a JSON list of steps `[expect, send]`
/// (wait until `expect` shows after the previous match, then type `send`), argv[2] a file for
/// the program's stdout or "" for the terminal, the rest the program and its arguments. Prints
/// everything the terminal showed; exits with the program's exit code, or 99 on a timeout.
pub(crate) const DRIVER: &str = r#"
import json, os, pty, select, sys, time
steps = json.loads(sys.argv[1])
stdout_file = sys.argv[2]
argv = sys.argv[3:]
pid, fd = pty.fork()
if pid == 0:
    if stdout_file:
        out_fd = os.open(stdout_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out_fd, 1)
    os.execv(argv[0], argv)
screen = b""
def read_some(timeout):
    global screen
    ready, _, _ = select.select([fd], [], [], timeout)
    if not ready:
        return True
    try:
        data = os.read(fd, 65536)
    except OSError:
        return False
    if not data:
        return False
    screen += data
    return True
position = 0
for expect, send in steps:
    deadline = time.time() + 60
    while True:
        found = screen.find(expect.encode(), position)
        if found >= 0:
            position = found + len(expect.encode())
            break
        if time.time() > deadline or not read_some(0.5):
            sys.stdout.buffer.write(screen)
            sys.stdout.write("\n[driver: timed out waiting for %r]\n" % expect)
            sys.exit(99)
    if send:
        os.write(fd, send.encode())
deadline = time.time() + 60
while time.time() < deadline and read_some(0.5):
    pass
_, status = os.waitpid(pid, 0)
sys.stdout.buffer.write(screen)
sys.exit(os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status >> 8)
"#;

/// Runs `flue <args>` on a pseudo-terminal through `steps`; returns the exit code and what the
/// terminal showed.
fn on_terminal(steps: &[(&str, &str)], stdout_file: Option<&Path>, args: &[&str]) -> (i32, String) {
    let flue = assert_cmd::cargo::cargo_bin("flue");
    let steps = json!(steps).to_string();
    let output = std::process::Command::new("python3")
        .arg("-c")
        .env("FLUE_TRUST", "1")
        .arg(DRIVER)
        .arg(steps)
        .arg(
            stdout_file
                .map(|path| path.display().to_string())
                .unwrap_or_default(),
        )
        .arg(&flue)
        .args(args)
        .env_remove("FLUE_LOG")
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

const REPLY: &str = "The greeting file says: Hello, world! Welcome to Flue.";

#[test]
fn the_reply_is_printed_once_on_a_terminal_and_stdout_stays_clean_for_pipes() {
    let ws = Workspace::hello_world();
    let root = ws.root().to_str().unwrap();
    let ask = [
        "run",
        "hello",
        "-m",
        "What does the greeting file say?",
        "--root",
        root,
    ];
    let (code, screen) = on_terminal(&[], None, &ask);
    assert_eq!(code, 0, "{screen}");
    assert_eq!(screen.matches(REPLY).count(), 1, "{screen}");

    // stdout to a file, stderr on the terminal: the terminal sees the streamed reply, the file
    // gets exactly the reply.
    let file = ws.root().join("reply.txt");
    let (code, screen) = on_terminal(&[], Some(&file), &ask);
    assert_eq!(code, 0, "{screen}");
    assert_eq!(screen.matches(REPLY).count(), 1, "{screen}");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        format!("{REPLY}\n")
    );
}

const CHATTY: &str = "---
model: scripted/script.json
tools: [bash]
sandbox: local
---
You chat.
";

const CHATTY_SCRIPT: &str = r#"{"rules": [
  {"when": {"tool_result": "bash"}, "reply": {"text": "slept"}},
  {"when": {"user_matches": "slow"}, "reply": {"tool_calls": [
    {"name": "bash", "input": {"command": "sleep 30"}}
  ]}},
  {"when": {"user_matches": "greet"}, "reply": {"text": "Hello there, friend!"}},
  {"reply": {"text": "?"}}
]}"#;

#[test]
fn chat_streams_replies_and_ctrl_c_aborts_the_reply_not_the_chat() {
    let ws = Workspace::new(&[("agents/chatty.md", CHATTY), ("script.json", CHATTY_SCRIPT)]);
    let root = ws.root().to_str().unwrap();
    let (code, screen) = on_terminal(
        &[
            ("chatting with chatty in conversation c1", ""),
            ("> ", "greet me\r"),
            ("Hello there, friend!", ""),
            ("> ", "go slow\r"),
            ("-> bash", "\x03"),
            ("(reply aborted; the conversation goes on)", ""),
            ("> ", "greet again\r"),
            ("Hello there, friend!", ""),
            // Ctrl-C at the prompt does not end the chat either.
            ("> ", "\x03"),
            ("(Ctrl-D or /exit ends the chat)", ""),
            ("> ", "\x04"),
        ],
        None,
        &["chat", "chatty", "--id", "c1", "--root", root],
    );
    assert_eq!(code, 0, "{screen}");
    // Streamed once per reply, not printed again.
    assert_eq!(
        screen.matches("Hello there, friend!").count(),
        2,
        "{screen}"
    );
    assert!(!screen.contains("slept"), "{screen}");

    // The history is the conversation's, in the store.
    let shown = ws.flue(&["session", "show", "--id", "c1"]);
    assert!(shown.status.success(), "{}", stderr(&shown));
    let transcript = stdout(&shown);
    for line in [
        "user (turn 1): greet me\nassistant: Hello there, friend!\n",
        "user (turn 2): go slow\n",
        "user (turn 3): greet again\nassistant: Hello there, friend!\n",
    ] {
        assert!(transcript.contains(line), "{line:?} in {transcript}");
    }
    // And `chat --continue` picks it up again; /exit ends it.
    let (code, screen) = on_terminal(
        &[("conversation c1", ""), ("> ", "/exit\r")],
        None,
        &["chat", "chatty", "--continue", "--root", root],
    );
    assert_eq!(code, 0, "{screen}");
}
