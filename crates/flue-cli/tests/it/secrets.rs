//! Known secrets never reach the transcript, the terminal or the model: an agent whose tools
//! print a key in every common transform, with the key in `.env` or in the environment; and
//! terminal control sequences from the model and tools are shown escaped.

use std::path::Path;
use std::process::Output;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use serde_json::Value;

use crate::providers::FakeOpenAi;
use crate::{Workspace, json, stderr, stdout};

/// The key; `+`, `/` and `=` make URL encoding and base64 differ from it.
const KEY: &str = "sk-ant-api03-Qx7Rt2+Lm9Vb4/Nc8Kd1Wz5=Yh3Pf6Gs0Ja";

/// Prints the key of `secrets/key.txt` in every transform, one per line.
const LEAK_COMMAND: &str = r#"k=$(cat secrets/key.txt)
echo "exact $k"
echo "upper $(printf %s "$k" | tr a-z A-Z)"
echo "lower $(printf %s "$k" | tr A-Z a-z)"
echo "base64 $(printf %s "$k" | base64 -w0)"
echo "base64, one byte in $(printf %s "x$k" | base64 -w0)"
echo "url-safe base64, two bytes in $(printf %s "ab$k" | base64 -w0 | tr '+/' '-_' | tr -d '=')"
echo "hex $(printf %s "$k" | od -An -tx1 | tr -d ' \n')"
echo "url $(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$k")"
echo "reversed $(printf %s "$k" | rev)"
echo "first half ${k:0:24}"
echo "second half ${k:24}""#;

/// The transforms [`LEAK_COMMAND`] prints.
fn transforms() -> Vec<String> {
    vec![
        KEY.to_owned(),
        KEY.to_uppercase(),
        KEY.to_lowercase(),
        STANDARD.encode(KEY),
        STANDARD.encode(format!("x{KEY}")),
        URL_SAFE_NO_PAD.encode(format!("ab{KEY}")),
        hex::encode(KEY),
        KEY.replace('+', "%2B")
            .replace('/', "%2F")
            .replace('=', "%3D"),
        KEY.chars().rev().collect(),
    ]
}

/// Fails when `text` holds 16 characters of any transform, or 12 of the key (any case).
#[track_caller]
fn assert_no_leak(place: &str, text: &str) {
    let lower = text.to_lowercase();
    let mut pieces = Vec::new();
    for form in transforms() {
        let chars: Vec<char> = form.to_lowercase().chars().collect();
        pieces.extend(chars.windows(16).map(|w| w.iter().collect::<String>()));
    }
    let chars: Vec<char> = KEY.to_lowercase().chars().collect();
    pieces.extend(chars.windows(12).map(|w| w.iter().collect::<String>()));
    for piece in pieces {
        assert!(!lower.contains(&piece), "{place} holds {piece:?}:\n{text}");
    }
}

/// The stored database (and its write-ahead log) as text.
fn stored_bytes(ws: &Workspace) -> String {
    let mut text = String::new();
    for suffix in ["", "-wal"] {
        let path = format!("{}{suffix}", ws.db().display());
        if let Ok(bytes) = std::fs::read(&path) {
            text.push_str(&String::from_utf8_lossy(&bytes));
        }
    }
    text
}

/// A workspace whose agent `leaky` runs [`LEAK_COMMAND`] with bash in the local sandbox and
/// replies with what it printed; `env_file` is its `.env`.
fn leaky_workspace(env_file: &str) -> Workspace {
    let script = serde_json::json!({
        "rules": [
            {"when": {"tool_result": "bash"}, "reply": {"text": "It printed:\n{{tool_result}}"}},
            {"reply": {"tool_calls": [{"name": "bash", "input": {"command": LEAK_COMMAND}}]}}
        ]
    })
    .to_string();
    Workspace::new(&[
        (
            "agents/leaky.md",
            "---\nmodel: scripted/s.json\ntools: [bash]\nsandbox: local\n---\nRun it.\n",
        ),
        ("s.json", &script),
        ("secrets/key.txt", KEY),
        (".env", env_file),
    ])
}

fn flue(ws: &Workspace, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = assert_cmd::Command::cargo_bin("flue").unwrap();
    command.env("FLUE_TRUST", "1");
    command
        .args(args)
        .arg("--root")
        .arg(ws.root())
        .env_remove("FLUE_LOG");
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().unwrap()
}

/// Runs `leaky` and checks that every output of the run, and the store, is free of the key.
fn check_run(ws: &Workspace, env: &[(&str, &str)]) {
    // `-v`: the tool's whole output is shown, and redacted.
    let output = flue(ws, &["run", "leaky", "-m", "go", "--id", "c1", "-v"], env);
    assert!(output.status.success(), "{}", stderr(&output));
    let reply = stdout(&output);
    assert!(reply.starts_with("It printed:\n"), "{reply}");
    // Every line of the transcript is redacted, down to the halves.
    let lines: Vec<&str> = reply.lines().skip(1).collect();
    assert_eq!(lines.len(), 11, "{reply}");
    for line in &lines {
        assert!(line.contains("[redacted]"), "{line:?} in\n{reply}");
    }
    assert_no_leak("stdout", &reply);
    assert_no_leak("stderr", &stderr(&output));
    assert!(
        stderr(&output).contains(" ms: exact [redacted]"),
        "{}",
        stderr(&output)
    );
    assert_no_leak("the store", &stored_bytes(ws));

    let json_run = flue(
        ws,
        &["run", "leaky", "-m", "again", "--id", "c1", "--json"],
        env,
    );
    assert!(json_run.status.success(), "{}", stderr(&json_run));
    assert_no_leak("the --json envelope", &stdout(&json_run));
    assert!(
        json(&json_run)["message"]
            .as_str()
            .unwrap()
            .contains("exact [redacted]")
    );
}

#[test]
fn a_key_from_env_file_printed_by_bash_in_any_transform_is_redacted_everywhere() {
    let ws = leaky_workspace(&format!("SERVICE_CREDS=\"{KEY}\"\nNODE_ENV=development\n"));
    check_run(&ws, &[]);
    for args in [
        &["session", "show", "--id", "c1", "--json"][..],
        &["session", "show", "--id", "c1"][..],
    ] {
        let show = flue(&ws, args, &[]);
        assert!(show.status.success(), "{}", stderr(&show));
        assert_no_leak("session show", &stdout(&show));
    }
}

#[test]
fn a_key_from_the_environment_is_redacted_before_it_is_stored() {
    let ws = leaky_workspace("");
    check_run(&ws, &[("LEAKY_API_KEY", KEY)]);
    // `session show` without the variable cannot redact anything itself: what it prints is
    // what the store holds.
    let show = flue(&ws, &["session", "show", "--id", "c1", "--json"], &[]);
    assert!(show.status.success(), "{}", stderr(&show));
    let transcript = stdout(&show);
    assert!(transcript.contains("exact [redacted]"), "{transcript}");
    assert_no_leak("the stored transcript", &transcript);
}

#[test]
fn a_key_read_from_a_file_is_not_sent_to_the_model_in_the_next_request() {
    let server = FakeOpenAi::start();
    let flue_toml = format!(
        "[providers.fake]\napi = \"openai-completions\"\nbase_url = \"{}\"\n\
         api_key_env = \"FLUE_TEST_FAKE_KEY\"\n",
        server.base_url()
    );
    let leaked: String = transforms()
        .iter()
        .map(|form| format!("{form}\n"))
        .collect();
    let ws = Workspace::new(&[
        ("flue.toml", &flue_toml),
        (
            ".env",
            &format!("FLUE_TEST_FAKE_KEY=fake-key-0123456789\nDEPLOY_TOKEN={KEY}\n"),
        ),
        (
            "agents/reader.md",
            "---\nmodel: fake/fake-model\ntools: [read_file]\nsandbox: local\n---\nRead.\n",
        ),
        ("notes/leak.txt", &leaked),
    ]);
    let output = flue(
        &ws,
        &["run", "reader", "-m", "notes/leak.txt", "--id", "c1"],
        &[],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    let messages = &requests[1]["body"]["messages"];
    let tool_message = messages
        .as_array()
        .unwrap()
        .iter()
        .find(|message| message["role"] == "tool")
        .unwrap();
    assert!(
        tool_message["content"]
            .as_str()
            .unwrap()
            .contains("[redacted]"),
        "{tool_message}"
    );
    assert_no_leak("the second request", &messages.to_string());
    assert_no_leak("stdout", &stdout(&output));
    assert_no_leak("stderr", &stderr(&output));
    assert_no_leak("the store", &stored_bytes(&ws));
    // The provider key itself still goes where it belongs: the header.
    assert_eq!(
        requests[1]["headers"]["authorization"],
        Value::String("Bearer fake-key-0123456789".into())
    );
}

#[test]
fn a_provider_reply_quoting_the_key_is_stored_and_served_redacted() {
    // The fake provider answers "quote your key" with the bearer key it received: a provider
    // (or a model) repeating the key must not put it in the store, nor in what is served.
    let server = FakeOpenAi::start();
    let key = "fake-key-quoted-0123456789";
    let flue_toml = format!(
        "[providers.fake]\napi = \"openai-completions\"\nbase_url = \"{}\"\n\
         api_key_env = \"FLUE_TEST_FAKE_KEY\"\n",
        server.base_url()
    );
    let ws = Workspace::new(&[
        ("flue.toml", &flue_toml),
        (".env", &format!("FLUE_TEST_FAKE_KEY={key}\n")),
        (
            "agents/talker.md",
            "---\nmodel: fake/fake-model\n---\nTalk.\n",
        ),
    ]);
    let output = flue(
        &ws,
        &[
            "run",
            "talker",
            "-m",
            "quote your key",
            "--id",
            "q1",
            "--json",
        ],
        &[],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(server.requests().len(), 1);
    let store = stored_bytes(&ws);
    assert!(!store.contains(key), "the store holds the key");
    assert!(store.contains("My key is [redacted] as sent."), "{store}");
    // What is served from the store: the stored session as `flue session show --json` reads
    // it (the HTTP transcript renders the same records).
    let shown = flue(&ws, &["session", "show", "talker", "q1", "--json"], &[]);
    assert!(!stdout(&shown).contains(key));
}

/// An agent whose bash prints screen-clearing sequences and whose reply writes the clipboard.
fn hostile_workspace() -> Workspace {
    let script = serde_json::json!({
        "rules": [
            {"when": {"tool_result": "bash"},
             "reply": {"text": "done \u{1b}]52;c;cm0gLXJmIH4=\u{7} \u{9b}2J \u{202e}txet"}},
            {"reply": {"tool_calls": [{"name": "bash",
                "input": {"command": "printf 'a\\033[2J\\033[Hb\\rc'"}}]}}
        ]
    })
    .to_string();
    Workspace::new(&[
        (
            "agents/hostile.md",
            "---\nmodel: scripted/s.json\ntools: [bash]\n---\nRun it.\n",
        ),
        ("s.json", &script),
    ])
}

/// Characters a terminal acts on (other than newline, tab and CR before LF).
fn raw_controls(text: &str) -> Vec<char> {
    let text = text.replace("\r\n", "\n");
    text.chars()
        .filter(|&c| {
            (c.is_control() && c != '\n' && c != '\t')
                || ('\u{202a}'..='\u{202e}').contains(&c)
                || ('\u{2066}'..='\u{2069}').contains(&c)
        })
        .collect()
}

#[test]
fn control_sequences_reach_the_terminal_escaped() {
    let ws = hostile_workspace();
    // `-v`: the tool's whole output is shown, and escaped.
    let output = flue(
        &ws,
        &["run", "hostile", "-m", "go", "--id", "c1", "-v"],
        &[],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    // stderr is always escaped.
    let activity = stderr(&output);
    assert_eq!(raw_controls(&activity), Vec::<char>::new(), "{activity}");
    assert!(
        activity.contains(r" ms: a\x1b[2J\x1b[Hb\x0dc"),
        "{activity}"
    );
    assert!(activity.contains(r"done \x1b]52;c;cm0gLXJmIH4=\x07 \u{9b}2J \u{202e}txet"));
    // A pipe gets the reply as the model wrote it.
    assert!(stdout(&output).contains("\u{1b}]52;c;"));
    // --json carries no raw control character, and the reply is intact for a JSON reader.
    let json_run = flue(
        &ws,
        &["run", "hostile", "-m", "go", "--id", "c2", "--json"],
        &[],
    );
    assert_eq!(raw_controls(&stdout(&json_run)), Vec::<char>::new());
    assert!(
        json(&json_run)["message"]
            .as_str()
            .unwrap()
            .contains("\u{1b}]52;c;")
    );
    for args in [
        &["session", "show", "--id", "c1", "--json"][..],
        &["audit", "--id", "c1", "--json"][..],
        &["trash", "list", "--id", "c1", "--json"][..],
    ] {
        let shown = flue(&ws, args, &[]);
        assert!(shown.status.success(), "{args:?}: {}", stderr(&shown));
        assert_eq!(
            raw_controls(&stdout(&shown)),
            Vec::<char>::new(),
            "{args:?}"
        );
    }
}

/// Runs `flue <args> --root <ws>` with stdout and stderr on a pseudo-terminal (python3's `pty`)
/// and returns what the terminal received.
fn on_terminal(ws: &Workspace, args: &[&str]) -> String {
    let flue = assert_cmd::cargo::cargo_bin("flue");
    let output = std::process::Command::new("python3")
        .arg("-c")
        .arg("import pty, sys; sys.exit(pty.spawn(sys.argv[1:]) >> 8)")
        .env("FLUE_TRUST", "1")
        .arg(&flue)
        .args(args)
        .arg("--root")
        .arg(ws.root())
        .env_remove("FLUE_LOG")
        .output()
        .unwrap();
    assert!(output.status.success(), "{args:?}: {output:?}");
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn on_a_terminal_the_reply_and_transcript_are_escaped_too() {
    let ws = hostile_workspace();
    // Without colour, the one control flue itself writes is the status line's erase; whatever
    // the model and the tool sent reaches the screen escaped.
    let args = [
        "run", "hostile", "-m", "go", "--id", "c1", "--color", "never",
    ];
    let screen = on_terminal(&ws, &args).replace("\r\x1b[K", "");
    assert_eq!(raw_controls(&screen), Vec::<char>::new(), "{screen}");
    assert!(
        screen.contains(r"done \x1b]52;c;cm0gLXJmIH4=\x07"),
        "{screen}"
    );
    let transcript = on_terminal(&ws, &["session", "show", "--id", "c1"]);
    assert_eq!(
        raw_controls(&transcript),
        Vec::<char>::new(),
        "{transcript}"
    );
    assert!(transcript.contains(r"a\x1b[2J\x1b[Hb\x0dc"), "{transcript}");
    assert!(Path::new(&ws.db()).is_file());
}

#[test]
fn a_key_streamed_in_pieces_reaches_a_live_sse_reader_redacted() {
    // The fake provider streams its own key three characters per chunk, in its reasoning and
    // in its text, once the gate exists; the SSE reader is attached at the head before that,
    // so it receives the turn live, delta by delta, as `flue serve` sends it.
    let gate_dir = tempfile::tempdir().unwrap();
    let gate = gate_dir.path().join("open");
    let server = FakeOpenAi::start_gated(Some(&gate));
    let key = "fake-key-streamed-0123456789";
    let flue_toml = format!(
        "[providers.fake]\napi = \"openai-completions\"\nbase_url = \"{}\"\n\
         api_key_env = \"FLUE_TEST_FAKE_KEY\"\n",
        server.base_url()
    );
    let ws = Workspace::new(&[
        ("flue.toml", &flue_toml),
        (".env", &format!("FLUE_TEST_FAKE_KEY={key}\n")),
        (
            "agents/talker.md",
            "---\nmodel: fake/fake-model\n---\nTalk.\n",
        ),
    ]);
    let flue = crate::serve::Server::start(ws.root(), &[], &[]);
    let addr = flue.addr().to_owned();
    let admission =
        crate::serve::post_message(&addr, "/agents/talker/k1", "quote your key in pieces");
    let offset = admission["offset"].as_str().unwrap();
    let mut sse = std::net::TcpStream::connect(&addr).unwrap();
    sse.set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    std::io::Write::write_all(
        &mut sse,
        format!(
            "GET /agents/talker/k1?view=updates&offset={offset}&live=sse HTTP/1.1\r\n\
             host: {addr}\r\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    let mut reader = std::io::BufReader::new(sse);
    let mut seen = String::new();
    // The response head, then the body's lines out of its chunked encoding.
    loop {
        let mut head_line = String::new();
        std::io::BufRead::read_line(&mut reader, &mut head_line).unwrap();
        seen.push_str(&head_line);
        if head_line == "\r\n" || head_line.is_empty() {
            break;
        }
    }
    let mut body: Vec<u8> = Vec::new();
    let mut read_line = |line: &mut String| loop {
        if let Some(end) = body.iter().position(|byte| *byte == b'\n') {
            let taken: Vec<u8> = body.drain(..=end).collect();
            *line = String::from_utf8_lossy(&taken).into_owned();
            return;
        }
        let mut size = String::new();
        std::io::BufRead::read_line(&mut reader, &mut size).unwrap();
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        assert!(size > 0, "the stream ended:\n{seen}");
        let mut chunk = vec![0u8; size + 2];
        std::io::Read::read_exact(&mut reader, &mut chunk).unwrap();
        chunk.truncate(size);
        seen.push_str(&String::from_utf8_lossy(&chunk));
        body.extend_from_slice(&chunk);
    };
    let mut line = String::new();
    // The first control event: the reader is at the head, and the provider waits at the gate.
    loop {
        read_line(&mut line);
        if line.starts_with("event: control") {
            break;
        }
    }
    std::fs::write(&gate, "").unwrap();
    // Every chunk until the submission settles.
    let mut live = Vec::new();
    let mut settled = false;
    while !settled {
        read_line(&mut line);
        let Some(data) = line.strip_prefix("data:") else {
            continue;
        };
        let Ok(Value::Array(chunks)) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        for chunk in chunks {
            match chunk["type"].as_str() {
                Some("message-delta") => live.push((
                    chunk["kind"].as_str().unwrap_or_default().to_owned(),
                    chunk["delta"].as_str().unwrap_or_default().to_owned(),
                )),
                Some("submission-settled") => settled = true,
                _ => {}
            }
        }
    }
    let text: String = live
        .iter()
        .filter(|(kind, _)| kind == "text")
        .map(|(_, delta)| delta.as_str())
        .collect();
    let reasoning: String = live
        .iter()
        .filter(|(kind, _)| kind == "reasoning")
        .map(|(_, delta)| delta.as_str())
        .collect();
    eprintln!(
        "{} live deltas: text {text:?}, reasoning {reasoning:?}",
        live.len()
    );
    // Live and redacted in both streams. How much of the turn goes out live depends on how
    // far the reader is when the turn's durable batch lands (the rest then comes in the
    // `conversation-reset` snapshot), so what arrived live must be the start of the redacted
    // text; the unit tests of `TurnSink::redacting` cover every split deterministically.
    assert!(
        "My key is [redacted] as sent.".starts_with(&text),
        "{text:?}\n{seen}"
    );
    assert!(
        "Recalling my key [redacted] now.".starts_with(&reasoning),
        "{reasoning:?}\n{seen}"
    );
    assert!(seen.contains("My key is [redacted] as sent."), "{seen}");
    let chars: Vec<char> = key.chars().collect();
    for piece in chars
        .windows(flue_core::Redactor::FRAGMENT_CHARS)
        .map(|w| w.iter().collect::<String>())
    {
        assert!(
            !seen.contains(&piece),
            "the stream holds {piece:?}:\n{seen}"
        );
    }
}

#[test]
fn a_message_quoting_a_key_is_stored_and_served_redacted() {
    // A user pastes a key (the value of a secret-named variable of the server's environment)
    // into a message: the stored submission, the snapshot, the updates from the start and the
    // console's list and transcript never hold it.
    let key = "acme-7Hq2Lm9Xv4Rb8Wz1Pk";
    let no_key = |place: &str, text: &str| {
        let chars: Vec<char> = key.to_lowercase().chars().collect();
        for piece in chars.windows(12).map(|w| w.iter().collect::<String>()) {
            assert!(
                !text.to_lowercase().contains(&piece),
                "{place} holds {piece:?}:\n{text}"
            );
        }
    };
    let ws = Workspace::new(&[
        (
            "agents/talker.md",
            "---\nmodel: scripted/script.json\n---\nTalk.\n",
        ),
        (
            "script.json",
            r#"{"rules": [{"reply": {"text": "Noted."}}]}"#,
        ),
    ]);
    let flue =
        crate::serve::Server::start(ws.root(), &["--console"], &[("ACME_SERVICE_TOKEN", key)]);
    let addr = flue.addr().to_owned();
    let message = format!("my token is {key}, keep it");
    crate::serve::post_message(&addr, "/agents/talker/m1", &message);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let snapshot = loop {
        let snapshot = crate::serve::snapshot(&addr, "/agents/talker/m1");
        if !snapshot["settlements"].as_array().unwrap().is_empty() {
            break snapshot.to_string();
        }
        assert!(std::time::Instant::now() < deadline, "{}", flue.log());
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(
        snapshot.contains("my token is [redacted], keep it"),
        "{snapshot}"
    );
    no_key("the snapshot", &snapshot);
    for (place, path) in [
        ("the updates", "/agents/talker/m1?view=updates&offset=-1"),
        ("the console's list", "/_flue/dev/conversations"),
        (
            "the console's transcript",
            "/_flue/dev/transcript/talker/m1",
        ),
    ] {
        let (status, body) = crate::serve::http(&addr, "GET", path, &[], "");
        assert_eq!(status, 200, "{place}: {body}");
        assert!(body.contains("[redacted]"), "{place}: {body}");
        no_key(place, &body);
    }
    drop(flue);
    no_key("the store", &stored_bytes(&ws));
}
