//! `flue chat` and `flue run` as a person sees them on a real pseudo-terminal, read through a
//! terminal emulator (the `vt100` crate), not as raw bytes: the line editor (a paste is one
//! message, the up-arrow recalls history without sending anything, slash commands complete and
//! never reach the model), markdown and colour on and off, approvals with "always", Ctrl-C at
//! the prompt and while a reply streams (what streamed is kept, marked interrupted), and
//! `flue run --jsonl`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::pty::{Terminal, held_stream};
use crate::{Workspace, stderr, stdout};

/// An agent that echoes each message, writes markdown on `md`, streams slowly on `slow`, and
/// asks before `bash` (`make X` writes X.txt).
fn echoing() -> Workspace {
    let script = json!({"rules": [
        {"when": {"tool_result": "bash"}, "reply": {"text": "made"}},
        {"when": {"user_matches": "^make (a|b)$"},
         "reply": {"tool_calls": [{"name": "bash", "input": {"command": "touch made-$RANDOM"}}]}},
        {"when": {"user_contains": "md"},
         "reply": {"text": "# Title\n\nSome **bold** and `code`.\n\n- one\n- two\n"}},
        {"when": {"user_contains": "wide"},
         "reply": {"text": "**Bold** words that run well past the forty columns of this terminal.\n"}},
        {"when": {"user_contains": "slow"},
         "reply": {"text": "one two three four five six seven eight nine ten eleven twelve \
                            thirteen fourteen fifteen sixteen", "chunk_delay_ms": 400}},
        {"reply": {"text": "You said: {{user}}"}}
    ]});
    Workspace::new(&[
        (
            "agents/echo.md",
            "---\nmodel: scripted/s.json\ntools: [bash]\nsandbox: local\npermissions:\n  \
             bash: always_ask\n---\nEcho.\n",
        ),
        ("s.json", &script.to_string()),
    ])
}

/// The user messages stored in conversation `id`, in order.
fn user_messages(ws: &Workspace, id: &str) -> Vec<String> {
    let shown = ws.flue(&["session", "show", "--id", id, "--json"]);
    assert!(shown.status.success(), "{}", stderr(&shown));
    let transcript: Value = serde_json::from_str(&stdout(&shown)).unwrap();
    let mut messages = Vec::new();
    collect_user_texts(&transcript, &mut messages);
    messages
}

/// Every `{"type": "user", ...}` record's text under `value`.
fn collect_user_texts(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(fields) => {
            if fields.get("type") == Some(&json!("user"))
                && let Some(content) = fields.get("content").and_then(Value::as_array)
            {
                let text: String = content
                    .iter()
                    .filter_map(|part| part.get("text").and_then(Value::as_str))
                    .collect();
                out.push(text);
                return;
            }
            fields
                .values()
                .for_each(|value| collect_user_texts(value, out));
        }
        Value::Array(items) => items
            .iter()
            .for_each(|value| collect_user_texts(value, out)),
        _ => {}
    }
}

#[test]
fn a_paste_is_one_message_and_the_up_arrow_recalls_without_sending() {
    let ws = echoing();
    let root = ws.root().to_str().unwrap();
    let mut terminal = Terminal::start(&["chat", "echo", "--id", "p1", "--root", root]);
    terminal.expect("> ");
    terminal.send("first\r");
    terminal.expect("You said: first");
    terminal.expect("> ");
    // A terminal's bracketed paste of two lines, then Enter: one message.
    terminal.send("\x1b[200~line one\rline two\x1b[201~");
    terminal.expect_screen("line two");
    terminal.send("\r");
    terminal.expect("You said: line one");
    terminal.expect("> ");
    // The up-arrow recalls the pasted message into the editor; nothing is sent until Enter.
    terminal.send("\x1b[A");
    let screen = terminal.expect_screen("> line one");
    assert_eq!(
        screen
            .screen()
            .contents()
            .matches("You said: line one")
            .count(),
        1
    );
    terminal.send("\r");
    terminal.expect("You said: line one");
    terminal.expect("> ");
    // Ctrl-R finds `first` in the history; Enter sends it.
    terminal.send("\x12fir");
    terminal.expect_screen("first");
    terminal.send("\r");
    terminal.expect("You said: first");
    terminal.expect("> ");
    terminal.send("\x04");
    let (code, shown) = terminal.wait();
    assert_eq!(code, 0, "{shown}");
    assert_eq!(
        user_messages(&ws, "p1"),
        ["first", "line one\nline two", "line one\nline two", "first"]
    );
    // The history is the workspace's, for the next chat.
    let history = std::fs::read_to_string(ws.root().join(".flue/chat-history")).unwrap();
    assert!(history.contains("first"), "{history}");
}

#[test]
fn slash_commands_complete_run_in_the_chat_and_never_reach_the_model() {
    let ws = echoing();
    let root = ws.root().to_str().unwrap();
    let mut terminal = Terminal::start(&["chat", "echo", "--id", "s1", "--root", root]);
    terminal.expect("> ");
    terminal.send("hi\r");
    terminal.expect("You said: hi");
    terminal.expect("> ");
    // Tab completes the command.
    terminal.send("/he\t");
    terminal.expect_screen("> /help");
    terminal.send("\r");
    terminal.expect("/compact");
    terminal.expect("> ");
    terminal.send("/bogus\r");
    terminal.expect("error: unknown command /bogus");
    terminal.expect("> ");
    terminal.send("/cost\r");
    terminal.expect("this chat so far:");
    terminal.expect("> ");
    terminal.send("/session\r");
    terminal.expect("`flue session show --id s1`");
    terminal.expect("> ");
    // A doubled slash sends the message with one.
    terminal.send("//etc\r");
    terminal.expect("You said: /etc");
    terminal.expect("> ");
    // /model switches the model for the following messages, in the same conversation.
    terminal.send("/model\r");
    terminal.expect("model: the agent's own");
    terminal.expect("> ");
    terminal.send("/model scripted/s.json\r");
    terminal.expect("now: conversation s1, model scripted/s.json");
    terminal.expect("> ");
    terminal.send("again\r");
    terminal.expect("You said: again");
    terminal.expect("> ");
    // /new starts another conversation.
    terminal.send("/new\r");
    terminal.expect("now: conversation ");
    terminal.expect("> ");
    terminal.send("elsewhere\r");
    terminal.expect("You said: elsewhere");
    terminal.expect("> ");
    terminal.send("/exit\r");
    let (code, shown) = terminal.wait();
    assert_eq!(code, 0, "{shown}");
    assert_eq!(user_messages(&ws, "s1"), ["hi", "/etc", "again"]);
}

/// The screen row holding `text`, and the column it starts at.
fn find(parser: &vt100::Parser, text: &str) -> (u16, u16) {
    let screen = parser.screen();
    for (row, line) in screen.rows(0, crate::pty::COLS).enumerate() {
        if let Some(at) = line.find(text) {
            let col = line[..at].chars().count();
            return (u16::try_from(row).unwrap(), u16::try_from(col).unwrap());
        }
    }
    panic!("{text:?} is not on the screen:\n{}", screen.contents());
}

fn is_bold(parser: &vt100::Parser, (row, col): (u16, u16)) -> bool {
    parser.screen().cell(row, col).unwrap().bold()
}

#[test]
fn markdown_is_styled_on_a_terminal_and_plain_without_colour() {
    let ws = echoing();
    let root = ws.root().to_str().unwrap();
    let mut terminal = Terminal::start(&["run", "echo", "-m", "md", "--root", root]);
    let screen = terminal.expect_screen("• two");
    let contents = screen.screen().contents();
    // Headings and emphasis lose their markers and gain their style.
    assert!(!contents.contains("# Title"), "{contents}");
    assert!(!contents.contains("**bold**"), "{contents}");
    assert!(is_bold(&screen, find(&screen, "Title")));
    assert!(is_bold(&screen, find(&screen, "bold and")));
    assert!(!is_bold(&screen, find(&screen, "Some")));
    let (code, shown) = terminal.wait();
    assert_eq!(code, 0, "{shown}");
    // The usage line after the reply.
    assert!(shown.contains("output tokens]"), "{shown}");

    // NO_COLOR, and --color never: the markdown as written, no styles.
    for (args, envs) in [
        (
            &["run", "echo", "-m", "md", "--root", root][..],
            &[("NO_COLOR", "1")][..],
        ),
        (
            &[
                "--color", "never", "run", "echo", "-m", "md", "--root", root,
            ][..],
            &[][..],
        ),
    ] {
        let mut terminal = Terminal::start_with(args, envs);
        let screen = terminal.expect_screen("- two");
        let contents = screen.screen().contents();
        assert!(contents.contains("# Title"), "{contents}");
        assert!(contents.contains("Some **bold** and `code`."), "{contents}");
        assert!(!is_bold(&screen, find(&screen, "# Title")));
        let (code, shown) = terminal.wait();
        assert_eq!(code, 0, "{shown}");
        // No styles: the only escape left is the status line erasing itself.
        let unstyled = shown.replace("\x1b[K", "");
        assert!(
            !unstyled.contains('\x1b'),
            "{args:?}: escape bytes in {shown:?}"
        );
    }

    // Piped, stdout is exactly the reply.
    let piped = ws.flue(&["--color", "always", "run", "echo", "-m", "md"]);
    assert!(piped.status.success(), "{}", stderr(&piped));
    assert_eq!(
        stdout(&piped),
        "# Title\n\nSome **bold** and `code`.\n\n- one\n- two\n"
    );
}

#[test]
fn ctrl_c_clears_the_prompt_and_keeps_a_streaming_reply_as_interrupted() {
    let ws = echoing();
    let root = ws.root().to_str().unwrap();
    let mut terminal = Terminal::start(&["chat", "echo", "--id", "i1", "--root", root]);
    terminal.expect("> ");
    // Ctrl-C with text typed: the text is dropped, the chat goes on.
    terminal.send("never sent");
    terminal.expect_screen("> never sent");
    terminal.send("\x03");
    terminal.expect("(Ctrl-D or /exit ends the chat)");
    terminal.expect("> ");
    terminal.send("slow\r");
    terminal.expect_screen("one two three");
    terminal.send("\x03");
    terminal.expect("reply aborted");
    terminal.expect("> ");
    // Nothing more of the reply shows after the abort.
    let screen = terminal.screen();
    assert!(!screen.screen().contents().contains("sixteen"));
    terminal.send("after\r");
    terminal.expect("You said: after");
    terminal.expect("> ");
    terminal.send("\x04");
    let (code, shown) = terminal.wait();
    assert_eq!(code, 0, "{shown}");
    assert_eq!(user_messages(&ws, "i1"), ["slow", "after"]);
    let transcript = stdout(&ws.flue(&["session", "show", "--id", "i1"]));
    assert!(
        transcript.contains("assistant (interrupted): one two three"),
        "{transcript}"
    );
    let json = stdout(&ws.flue(&["session", "show", "--id", "i1", "--json"]));
    assert!(
        json.replace([' ', '\n'], "")
            .contains("\"interrupted\":true"),
        "{json}"
    );
}

#[test]
fn always_for_this_conversation_stops_asking_and_no_can_say_why() {
    let ws = echoing();
    let root = ws.root().to_str().unwrap();
    let config = tempfile::tempdir().unwrap();
    let config_dir = config.path().to_str().unwrap();
    let mut terminal = Terminal::start_with(
        &["chat", "echo", "--id", "a1", "--root", root],
        &[("FLUE_CONFIG_DIR", config_dir)],
    );
    terminal.expect("> ");
    terminal.send("make a\r");
    let screen = terminal.expect_screen("allow? [y/N]");
    let contents = screen.screen().contents();
    // The reason once, and no action id.
    assert_eq!(
        contents.matches("needs confirmation").count(),
        1,
        "{contents}"
    );
    assert!(!contents.contains("act_"), "{contents}");
    terminal.send("not now, thanks\r");
    terminal.expect("made");
    terminal.expect("> ");
    // No rule granted yet: no key was made.
    assert!(!config.path().join("approval.key").exists());
    terminal.send("make a\r");
    terminal.expect("allow? [y/N]");
    terminal.send("a\r");
    terminal.expect("allowed from now on in this conversation");
    terminal.expect("made");
    terminal.expect("> ");
    // The runtime approves the next call itself, and says by which rule.
    terminal.send("make b\r");
    terminal.expect("approved by standing rule rule_");
    terminal.expect("made");
    terminal.expect("> ");
    terminal.send("/tools\r");
    terminal.expect("always allowed in this conversation (standing rules):");
    terminal.expect("bash rule_");
    terminal.expect("> ");
    // Revoked from the chat: the next call asks again.
    terminal.send("/tools revoke bash\r");
    terminal.expect("bash asks again");
    terminal.expect("> ");
    terminal.send("make b\r");
    terminal.expect("allow? [y/N]");
    terminal.send("always\r");
    terminal.expect("allowed from now on in this conversation");
    terminal.expect("made");
    terminal.expect("> ");
    terminal.send("\x04");
    let (code, shown) = terminal.wait();
    assert_eq!(code, 0, "{shown}");
    let show = |config_dir: &str| {
        let mut command = assert_cmd::Command::cargo_bin("flue").unwrap();
        let out = command
            .args(["session", "show", "--id", "a1", "--root", root])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("FLUE_CONFIG_DIR", config_dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };
    let transcript = show(config_dir);
    assert!(
        transcript.contains("declined at the terminal: not now, thanks"),
        "{transcript}"
    );
    assert!(
        transcript.contains("approved by standing rule rule_"),
        "{transcript}"
    );
    assert!(transcript.contains(" (revoked)"), "{transcript}");
    assert!(!transcript.contains("unverified"), "{transcript}");
    // The key is the user's, made readable by them alone; the workspace holds none.
    let key = config.path().join("approval.key");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&key).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    assert!(!ws.root().join(".flue/approval.key").exists());
    // Another user (another key) reading the same store sees the rule as unverified.
    let elsewhere = tempfile::tempdir().unwrap();
    let transcript = show(elsewhere.path().to_str().unwrap());
    assert!(transcript.contains("unverified"), "{transcript}");
}

#[test]
fn run_jsonl_prints_one_versioned_event_per_line_and_the_settlement_last() {
    let ws = echoing();
    let out = ws.flue(&["run", "echo", "-m", "md", "--jsonl"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<Value> = stdout(&out)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert!(lines.iter().all(|line| line["v"] == 1), "{lines:?}");
    let types: Vec<&str> = lines
        .iter()
        .map(|line| line["type"].as_str().unwrap())
        .collect();
    assert!(types.contains(&"text_delta"), "{types:?}");
    assert!(types.contains(&"turn_end"), "{types:?}");
    let text: String = lines
        .iter()
        .filter(|line| line["type"] == "text_delta")
        .map(|line| line["text"].as_str().unwrap())
        .collect();
    assert_eq!(
        text,
        "# Title\n\nSome **bold** and `code`.\n\n- one\n- two\n"
    );
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "settlement");
    assert_eq!(last["outcome"], "completed");
    assert!(
        last["usage"]["output_tokens"].as_u64().unwrap() > 0,
        "{last}"
    );
}

const PIECES: &[(&str, &str)] = &[
    ("content", "alpha "),
    ("content", "bravo "),
    ("content", "charlie "),
    ("content", "delta "),
    ("content", "echo "),
    ("content", "foxtrot "),
    ("content", "golf "),
    ("content", "hotel "),
    ("content", "india "),
    ("content", "juliet"),
];

/// How long a streamed token takes from the model's socket to the screen: the loopback server
/// sends each piece when the test says, and the test times until the emulator shows it.
/// `FLUE_TOKEN_LATENCY=1` prints the figures (BENCHMARKS.md).
#[test]
fn a_streamed_token_reaches_the_screen_promptly() {
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
    let mut terminal = Terminal::start(&["run", "a", "-m", "hi", "--root", root]);
    terminal.expect("submission: ");
    let mut took = Vec::new();
    for (_, piece) in PIECES {
        let sent = Instant::now();
        release.send(()).unwrap();
        terminal.expect_screen(piece.trim());
        took.push(sent.elapsed());
    }
    let (code, shown) = terminal.wait();
    assert_eq!(code, 0, "{shown}");
    took.sort();
    if std::env::var_os("FLUE_TOKEN_LATENCY").is_some() {
        eprintln!(
            "token to screen: median {:?}, max {:?} over {} tokens",
            took[took.len() / 2],
            took[took.len() - 1],
            took.len()
        );
    }
    // A failure guard only: a token waiting for the line to end would take the whole stream.
    assert!(took[took.len() / 2] < Duration::from_secs(5), "{took:?}");
}

#[test]
fn after_a_resize_a_wrapped_markdown_line_is_redrawn_whole() {
    let ws = echoing();
    let root = ws.root().to_str().unwrap();
    let mut terminal = Terminal::start(&["chat", "echo", "--id", "r1", "--root", root]);
    terminal.expect("> ");
    terminal.resize(40);
    terminal.send("wide\r");
    terminal.expect("of this terminal.");
    terminal.expect("> ");
    terminal.send("/exit\r");
    let (code, shown) = terminal.wait();
    assert_eq!(code, 0, "{shown}");
    // The raw line took two rows of the narrower terminal; both were replaced.
    let screen = terminal_screen(&shown, 40);
    let contents = screen.screen().contents();
    assert!(!contents.contains("**"), "{contents}");
    assert_eq!(contents.matches("Bold words").count(), 1, "{contents}");
    assert!(is_bold(&screen, find(&screen, "Bold words")));
}

/// `bytes` as a terminal `cols` wide shows them (the rows written before a resize may wrap
/// differently; the tests look at what came after).
fn terminal_screen(bytes: &str, cols: u16) -> vt100::Parser {
    let size = |n: u16| std::num::NonZero::new(n).unwrap();
    let mut parser = vt100::Parser::new(size(crate::pty::ROWS), size(cols), 0);
    parser.process(bytes.as_bytes());
    parser
}
