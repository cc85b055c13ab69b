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
        {"when": {"user_contains": "code"},
         "reply": {"text": "Rust:\n\n```rust\nfn main() { let s = \"hi\"; }\n```\n\nPython:\n\n\
                            ```python\ndef f(x): return 'a'  # note\n```\n"}},
        {"when": {"user_contains": "long table"},
         "reply": {"text": format!("| a | b |\n|---|---|\n| {} | {} |\n", "x".repeat(50), "y".repeat(40))}},
        {"when": {"user_contains": "table"},
         "reply": {"text": "| name | n |\n|---|--:|\n| alpha | 1 |\n| b | 100 |\n\nThe end:\n\n\
                            | k | v |\n|---|---|\n| long key | x |\n"}},
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

/// The distinct foreground colours of the non-blank cells of the row showing `text`.
fn row_colours(parser: &vt100::Parser, text: &str) -> Vec<vt100::Color> {
    let (row, _) = find(parser, text);
    let mut colours = Vec::new();
    for col in 0..crate::pty::COLS {
        let cell = parser.screen().cell(row, col).unwrap();
        if !cell.contents().trim().is_empty() && !colours.contains(&cell.fgcolor()) {
            colours.push(cell.fgcolor());
        }
    }
    colours
}

#[test]
fn code_blocks_are_highlighted_on_a_terminal_and_piped_unchanged() {
    let ws = echoing();
    let root = ws.root().to_str().unwrap();
    // Read once the run is over: a line shows raw until its end arrives, then is redrawn.
    let terminal = Terminal::start(&["run", "echo", "-m", "code", "--root", root]);
    let (code, shown) = terminal.wait();
    assert_eq!(code, 0, "{shown}");
    let screen = terminal_screen(&shown, crate::pty::COLS);
    for line in ["fn main()", "def f(x)"] {
        let colours = row_colours(&screen, line);
        assert!(colours.len() > 2, "{line}: {colours:?}");
    }

    let terminal = Terminal::start_with(
        &["run", "echo", "-m", "code", "--root", root],
        &[("NO_COLOR", "1")],
    );
    let (code, shown) = terminal.wait();
    assert_eq!(code, 0, "{shown}");
    let screen = terminal_screen(&shown, crate::pty::COLS);
    assert_eq!(row_colours(&screen, "fn main()"), [vt100::Color::Default]);

    let piped = ws.flue(&["run", "echo", "-m", "code"]);
    assert!(piped.status.success(), "{}", stderr(&piped));
    assert_eq!(
        stdout(&piped),
        "Rust:\n\n```rust\nfn main() { let s = \"hi\"; }\n```\n\nPython:\n\n\
         ```python\ndef f(x): return 'a'  # note\n```\n"
    );
}

/// The columns at which `│` shows on the row holding `text`.
fn bars(parser: &vt100::Parser, text: &str) -> Vec<usize> {
    let (row, _) = find(parser, text);
    let line = parser
        .screen()
        .rows(0, crate::pty::COLS)
        .nth(usize::from(row))
        .unwrap();
    line.chars()
        .enumerate()
        .filter(|(_, c)| *c == '│')
        .map(|(col, _)| col)
        .collect()
}

#[test]
fn tables_are_aligned_on_a_terminal_and_wide_ones_stay_as_written() {
    let ws = echoing();
    let root = ws.root().to_str().unwrap();
    let terminal = Terminal::start(&["run", "echo", "-m", "table", "--root", root]);
    let (code, shown) = terminal.wait();
    assert_eq!(code, 0, "{shown}");
    let screen = terminal_screen(&shown, crate::pty::COLS);
    let contents = screen.screen().contents();
    // One table followed by text, one ending the reply: both aligned, numbers to the right.
    assert_eq!(bars(&screen, "name"), [0, 8, 14], "{contents}");
    assert_eq!(bars(&screen, "alpha"), [0, 8, 14], "{contents}");
    assert_eq!(bars(&screen, "100"), [0, 8, 14], "{contents}");
    assert!(contents.contains("│ alpha │   1 │"), "{contents}");
    assert!(contents.contains("├───────┼─────┤"), "{contents}");
    assert_eq!(bars(&screen, "long key"), [0, 11, 15], "{contents}");
    assert!(contents.contains("│ k        │ v │"), "{contents}");
    assert_eq!(contents.matches("alpha").count(), 1, "{contents}");
    assert!(contents.contains("The end:"), "{contents}");

    // Wider than the terminal: the rows stay one per line as they came.
    let terminal = Terminal::start(&["run", "echo", "-m", "long table", "--root", root]);
    let (code, shown) = terminal.wait();
    assert_eq!(code, 0, "{shown}");
    let screen = terminal_screen(&shown, crate::pty::COLS);
    let contents = screen.screen().contents();
    assert!(!contents.contains('├'), "{contents}");
    assert!(contents.contains("│ a │ b │"), "{contents}");

    // Piped: the table as the model wrote it.
    let piped = ws.flue(&["--color", "always", "run", "echo", "-m", "table"]);
    assert!(
        stdout(&piped).starts_with("| name | n |\n|---|--:|\n"),
        "{}",
        stdout(&piped)
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

/// An agent that creates `notes/a.txt` on `create a`, says the thinking level it was asked
/// with, and summarises a conversation when asked to compact it.
fn note_keeper() -> Workspace {
    let script = json!({"rules": [
        {"when": {"tool_result": "create_file"}, "reply": {"text": "created"}},
        {"when": {"user_matches": "^create a$"}, "reply": {"tool_calls": [
            {"name": "create_file", "input": {"path": "notes/a.txt", "content": "alpha\n"}}
        ]}},
        {"when": {"user_contains": "<conversation>"}, "reply": {"text": "## Goal\nKeep notes."}},
        {"reply": {"text": "heard {{user}} at {{thinking}}"}}
    ]});
    Workspace::new(&[
        (
            "agents/keeper.md",
            "---\nmodel: scripted/s.json\ntools: [create_file]\nsandbox: local\ntask: false\n\
             compaction: { keep_recent_tokens: 10 }\n---\nYou keep notes.\n",
        ),
        ("s.json", &script.to_string()),
    ])
}

/// The `type` of each message `session show --json` lists for conversation `id`.
fn message_types(ws: &Workspace, id: &str) -> Vec<String> {
    let shown = ws.flue(&["session", "show", "--id", id, "--json"]);
    assert!(shown.status.success(), "{}", stderr(&shown));
    let transcript: Value = serde_json::from_str(&stdout(&shown)).unwrap();
    transcript["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|message| message["type"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn thinking_sets_the_next_messages_level_and_compact_compacts_now() {
    let ws = note_keeper();
    let root = ws.root().to_str().unwrap();
    let mut terminal = Terminal::start(&["chat", "keeper", "--id", "t1", "--root", root]);
    terminal.expect("> ");
    terminal.send("/compact\r");
    terminal.expect("nothing to compact: the conversation has no message yet");
    terminal.expect("> ");
    terminal.send("first message of a few words\r");
    terminal.expect("heard first message of a few words at ");
    terminal.expect("> ");
    terminal.send("/thinking high\r");
    terminal.expect("thinking: high from the next message");
    terminal.expect("> ");
    terminal.send("second\r");
    terminal.expect("heard second at high");
    terminal.expect("> ");
    terminal.send("/thinking lots\r");
    terminal.expect("error: unknown thinking level lots");
    terminal.expect("> ");
    terminal.send("/thinking -\r");
    terminal.expect("thinking: the agent's own from the next message");
    terminal.expect("> ");
    terminal.send("/compact\r");
    terminal.expect("compacting context (requested, ~");
    terminal.expect("compacted ");
    terminal.expect("> ");
    terminal.send("third\r");
    terminal.expect("heard third at ");
    terminal.expect("> ");
    terminal.send("/exit\r");
    let (code, shown) = terminal.wait();
    assert_eq!(code, 0, "{shown}");
    assert!(!shown.contains("heard third at high"), "{shown}");
    // The summary is stored in place, and nothing of the commands reached the model.
    assert!(
        message_types(&ws, "t1").contains(&"compaction".to_owned()),
        "{:?}",
        message_types(&ws, "t1")
    );
    assert_eq!(
        user_messages(&ws, "t1"),
        ["first message of a few words", "second", "third"]
    );
}

#[test]
fn rewind_asks_then_puts_the_files_back_and_fork_goes_on_in_a_copy() {
    let ws = note_keeper();
    let root = ws.root().to_str().unwrap();
    let note = ws.root().join("notes/a.txt");
    let mut terminal = Terminal::start(&["chat", "keeper", "--id", "f1", "--root", root]);
    terminal.expect("> ");
    terminal.send("create a\r");
    terminal.expect("created");
    terminal.expect("> ");
    assert!(note.exists());
    // Declined: the plan is shown and nothing changes.
    terminal.send("/rewind\r");
    terminal.expect("notes/a.txt");
    terminal.expect("rewind the files of turn 1? [y/N]");
    terminal.send("n\r");
    terminal.expect("nothing was rewound");
    terminal.expect("> ");
    assert!(note.exists());
    terminal.send("/rewind\r");
    terminal.expect("rewind the files of turn 1? [y/N]");
    terminal.send("y\r");
    terminal.expect("file(s); undo it with `flue rewind --id f1 --undo ");
    terminal.expect("> ");
    assert!(!note.exists());
    // The fork holds the turns so far; the chat's next message goes to the fork only.
    terminal.send("/fork\r");
    terminal.expect("forked conversation f1 (1 turn(s)");
    terminal.expect("now: conversation ");
    terminal.expect("> ");
    terminal.send("in the fork\r");
    terminal.expect("heard in the fork at ");
    terminal.expect("> ");
    terminal.send("/exit\r");
    let (code, shown) = terminal.wait();
    assert_eq!(code, 0, "{shown}");
    let fork_id = shown
        .split("now: conversation ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .unwrap()
        .to_owned();
    assert_ne!(fork_id, "f1");
    assert_eq!(user_messages(&ws, "f1"), ["create a"]);
    assert_eq!(user_messages(&ws, &fork_id), ["create a", "in the fork"]);
}

#[test]
fn verbose_runs_fold_a_long_tool_output() {
    let script = json!({"rules": [
        {"when": {"tool_result": "bash"}, "reply": {"text": "counted"}},
        {"reply": {"tool_calls": [{"name": "bash", "input": {"command": "seq 1 40"}}]}}
    ]});
    let ws = Workspace::new(&[
        (
            "agents/counter.md",
            "---\nmodel: scripted/s.json\ntools: [bash]\nsandbox: local\n---\nCount.\n",
        ),
        ("s.json", &script.to_string()),
    ]);
    let output = ws.flue(&["run", "counter", "-m", "count", "-v"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let err = stderr(&output);
    let shown: Vec<&str> = err
        .lines()
        .skip_while(|line| !line.starts_with("<- bash done in "))
        .take(13)
        .collect();
    assert!(shown[0].ends_with(" ms: 1"), "{err}");
    assert_eq!(shown[1..3], ["   2", "   3"], "{err}");
    assert_eq!(shown[11..], ["   12", "   ... 28 more lines"], "{err}");
    assert!(!err.contains("   13\n"), "{err}");
}
