//! `flue serve` as a real process on loopback: the official client (`@flue/sdk`, under
//! tests/peers) drives it from Node; bind and token rules; SIGTERM; kill -9 during tool calls
//! and restart; many conversations with readers attached.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::Workspace;

/// The serve test workspace: agents `plain`, `tool` (bash `echo 42`) and `slow-tool` (a slow
/// command on the local sandbox that counts its runs in runs.log).
pub(crate) fn workspace() -> Workspace {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/serve-workspace");
    let workspace = Workspace::new(&[]);
    for relative in [
        "flue.toml",
        "agents/plain.md",
        "agents/tool.md",
        "agents/slow-tool.md",
        "agents/stream.md",
        "agents/stateful.md",
        "scripts/plain.json",
        "scripts/stateful.json",
        "scripts/stream.json",
        "scripts/tool.json",
        "scripts/slow.json",
    ] {
        let dest = workspace.root().join(relative);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(fixture.join(relative), dest).unwrap();
    }
    workspace
}

/// Makes the slow tool sleep `secs` seconds.
pub(crate) fn slow_secs(workspace: &Workspace, secs: u32) {
    std::fs::write(workspace.root().join("slow-secs"), secs.to_string()).unwrap();
}

/// A running `flue serve`; killed (SIGKILL) when dropped.
pub(crate) struct Server {
    pub(crate) child: Child,
    base: String,
    stderr: Arc<Mutex<String>>,
}

impl Server {
    pub(crate) fn start(root: &Path, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let mut command = Command::new(assert_cmd::cargo::cargo_bin("flue"));
        command.env("FLUE_TRUST", "1");
        command
            .args(["serve", "--root"])
            .arg(root)
            .args(["--port", "0"])
            .args(extra)
            .env_remove("FLUE_TOKEN")
            .env("FLUE_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let pipe = child.stderr.take().unwrap();
        let log = Arc::clone(&stderr);
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if let Some(addr) = line.strip_prefix("flue serve: listening on ") {
                    let _ = tx.send(addr.to_owned());
                }
                log.lock().unwrap().push_str(&line);
                log.lock().unwrap().push('\n');
            }
        });
        // Waits for the `listening on` line or the end of stderr (the server exited). The
        // deadline is generous (starting MCP servers on a busy machine takes a while); it only
        // ends a test whose server hangs while starting.
        let base = rx
            .recv_timeout(Duration::from_secs(300))
            .unwrap_or_else(|_| panic!("server did not start: {}", stderr.lock().unwrap()));
        Self {
            child,
            base,
            stderr,
        }
    }

    pub(crate) fn addr(&self) -> &str {
        self.base.trim_start_matches("http://")
    }

    pub(crate) fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub(crate) fn log(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// One HTTP/1.1 request on a fresh connection: (status, body).
pub(crate) fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
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

pub(crate) fn post_message(addr: &str, path: &str, text: &str) -> Value {
    let (status, body) = http(
        addr,
        "POST",
        path,
        &[("content-type", "application/json")],
        &json!({"kind": "user", "body": text}).to_string(),
    );
    assert_eq!(status, 202, "{body}");
    serde_json::from_str(&body).unwrap()
}

pub(crate) fn snapshot(addr: &str, path: &str) -> Value {
    let (status, body) = http(addr, "GET", path, &[], "");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn peers() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/peers")
}

#[test]
fn the_official_client_drives_flue_serve_end_to_end() {
    assert!(
        peers().join("node_modules/@flue/sdk").is_dir(),
        "tests/peers is not installed: npm ci --prefix tests/peers"
    );
    let workspace = workspace();
    slow_secs(&workspace, 20);
    let server = Server::start(workspace.root(), &[], &[]);
    let output = Command::new("node")
        .current_dir(peers())
        .arg("flue_sdk_client.mjs")
        .arg(&server.base)
        .args([
            "roundtrip",
            "sse",
            "streaming",
            "attachments",
            "reattach",
            "reconnect",
            "abort",
            "uid",
            "errors",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let results: Vec<Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let by_name = |name: &str| -> Value {
        let found = results
            .iter()
            .find(|result| result["scenario"] == name)
            .unwrap_or_else(|| {
                panic!(
                    "no {name} result: {stdout}\n{}",
                    String::from_utf8_lossy(&output.stderr)
                )
            })
            .clone();
        assert_eq!(
            found["ok"],
            true,
            "{name}: {found}\nserver log:\n{}",
            server.log()
        );
        found
    };

    let roundtrip = by_name("roundtrip");
    assert_eq!(
        roundtrip["admissionKeys"],
        json!(["offset", "streamUrl", "submissionId", "uid"])
    );
    assert_eq!(
        roundtrip["reply"],
        "Looking it up.\n\nFinal answer: the lookup said 42\n"
    );
    assert_eq!(roundtrip["toolState"], "output-available");
    assert_eq!(roundtrip["settlements"], json!(["completed", "completed"]));
    assert_eq!(roundtrip["sameUid"], true);
    assert_eq!(
        roundtrip["events"],
        json!([
            "message-started",
            "message-delta",
            "tool-input",
            "message-completed",
            "tool-output",
            "message-started",
            "message-delta",
            "message-completed",
            "submission-settled"
        ])
    );

    let sse = by_name("sse");
    assert_eq!(sse["reply"], "Hello from the fake model.");
    assert_eq!(sse["laterReply"], "Hello from the fake model.");
    assert_eq!(sse["messages"], 4);

    // Live SSE shows the reply piece by piece, and it ends up there once.
    let streaming = by_name("streaming");
    assert_eq!(
        streaming["reply"],
        "Hello from the slowly streaming fake model."
    );
    assert_eq!(streaming["historyReply"], streaming["reply"]);
    assert!(
        streaming["partials"].as_u64().unwrap() >= 3,
        "the reply grew piece by piece: {streaming}"
    );

    // An image comes back from the store at the URL the client resolves for its part.
    let attachments = by_name("attachments");
    assert_eq!(
        attachments,
        json!({
            "scenario": "attachments", "ok": true,
            "part": {"mediaType": "image/png", "size": 33, "hasId": true, "urlIsClients": true},
            "status": 200,
            "same": true,
            "headers": ["image/png", "33", "inline", "private, max-age=31536000, immutable", "sandbox"],
            "missing": "404:attachment_not_found",
        })
    );

    let reattach = by_name("reattach");
    assert_eq!(
        reattach["reply"],
        "Looking it up.\n\nFinal answer: the lookup said 42\n"
    );
    assert_eq!(reattach["submissionId"], true);

    let reconnect = by_name("reconnect");
    assert_eq!(reconnect["dropped"], 1);
    assert_eq!(reconnect["rawSettled"], true);
    assert_eq!(reconnect["rawChunks"], reconnect["rawUnique"]);
    assert!(
        reconnect["phases"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|phase| *phase == "connecting")
            .count()
            >= 2
    );

    let abort = by_name("abort");
    assert_eq!(abort["aborted"], true);
    assert_eq!(
        abort["outcomes"],
        json!(["aborted:submission_aborted", "aborted:submission_aborted"])
    );
    assert_eq!(abort["idle"], false);

    let uid = by_name("uid");
    assert_eq!(uid["exists"], "409:agent_instance_exists:true");
    assert_eq!(uid["wrong"], "404:agent_instance_not_found:false");
    assert_eq!(uid["right"], "ok");
    assert_eq!(uid["missing"], "404:agent_instance_not_found:false");

    let errors = by_name("errors");
    assert_eq!(
        errors,
        json!({
            "scenario": "errors", "ok": true,
            "historyMissing": "404:stream_not_found",
            "wrongType": "415:unsupported_media_type",
            "badJson": "400:invalid_json",
            "bareString": "400:invalid_request",
            "tooLarge": "413:payload_too_large",
            "wrongMethod": "405:method_not_allowed:GET, HEAD, POST, DELETE",
            "unknownAgent": "agent_not_found",
            "badOffset": "400:invalid_request",
            "missingOffset": "400:invalid_request",
            "pastHead": "500:conversation_stream_store_failure",
        })
    );
    // One log line per request and per settlement.
    let log = server.log();
    assert!(log.contains("flue_server::request"), "{log}");
    assert!(
        log.contains("flue_server::settlement") || log.contains("settled"),
        "{log}"
    );
}

/// Runs `flue_sdk_client.mjs` against `base` with `scenarios`; its results by scenario name.
pub(crate) fn sdk_client(base: &str, scenarios: &[&str]) -> Vec<Value> {
    let output = Command::new("node")
        .current_dir(peers())
        .arg("flue_sdk_client.mjs")
        .arg(base)
        .args(scenarios)
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let results: Vec<Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(
        results.len(),
        scenarios.len(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for result in &results {
        assert_eq!(result["ok"], true, "{result}");
    }
    results
}

/// The stored records of conversation `id`, by type (`user`, `assistant`, `tool_result`, ...).
fn record_types(workspace: &Workspace, id: &str) -> Vec<String> {
    let output = workspace.flue(&["session", "show", "--id", id, "--json"]);
    assert!(output.status.success(), "{}", crate::stderr(&output));
    let shown: Value = serde_json::from_slice(&output.stdout).unwrap();
    shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|record| record["type"].as_str().unwrap().to_owned())
        .collect()
}

/// The official client's `idempotencyKey`: a retried send converges on the first submission
/// (one submission id, one settlement, one model call), also when the server was killed with
/// SIGKILL between the two sends; another message with the key is 409 `submission_conflict`.
/// `initialData` seeds the conversation's state, which tools change and `GET .../state` reads.
#[test]
fn the_official_clients_idempotency_key_converges_also_across_a_kill_9() {
    assert!(
        peers().join("node_modules/@flue/sdk").is_dir(),
        "tests/peers is not installed: npm ci --prefix tests/peers"
    );
    let workspace = workspace();
    slow_secs(&workspace, 20);
    let mut server = Server::start(workspace.root(), &[], &[]);
    let results = sdk_client(&server.base, &["retry", "initialData"]);

    let retry = &results[0];
    assert_eq!(
        retry["firstKeys"],
        json!(["offset", "streamUrl", "submissionId", "uid"])
    );
    assert_eq!(retry["deduplicated"], json!([null, true, true]));
    assert_eq!(retry["sameSubmission"], true, "{retry}");
    assert_eq!(retry["sameUid"], true);
    assert_eq!(retry["reply"], "Hello from the fake model.");
    assert_eq!(retry["userMessages"], 1, "{retry}");
    assert_eq!(retry["replies"], 1);
    assert_eq!(retry["settlements"], json!(["completed"]));
    assert_eq!(retry["allSettlements"], 1);
    assert_eq!(retry["conflict"]["status"], 409);
    assert_eq!(retry["conflict"]["type"], "submission_conflict");
    assert_eq!(retry["conflict"]["sameSubmission"], true);
    // One model call: the store holds one user message and one assistant turn.
    let conversation = retry["conversation"].as_str().unwrap();
    let id = conversation.strip_prefix("plain/").unwrap();
    assert_eq!(record_types(&workspace, id), ["user", "assistant"]);

    let initial = &results[1];
    assert_eq!(initial["ok"], true, "{initial}");
    assert_eq!(initial["before"], 404, "{initial}");
    assert_eq!(initial["firstReply"], "Noting.\n\nNoted.");
    assert_eq!(
        initial["afterFirst"],
        json!({"state": {"issue": 7, "seen": true, "notes": ["first"]}, "version": 2,
               "source": "tool:state_write"}),
        "{initial}"
    );
    assert_eq!(initial["secondReply"], "Bumping.\n\nBumped.");
    // The second message's initialData is ignored: the conversation existed.
    assert_eq!(
        initial["afterSecond"],
        json!({"state": {"issue": 7, "seen": true, "notes": ["first"], "bumps": 1},
               "version": 3, "source": "tool:bump"}),
        "{initial}"
    );
    for refusal in initial["refusals"].as_array().unwrap() {
        assert_eq!(refusal["status"], 400, "{initial}");
        assert_eq!(refusal["type"], "invalid_request", "{initial}");
    }
    assert!(
        initial["refusals"][0]["details"]
            .as_str()
            .unwrap()
            .starts_with("`initialData` cannot be the conversation's state"),
        "{initial}"
    );
    assert_eq!(initial["refusedHistory"], "404:stream_not_found");
    assert_eq!(
        initial["roles"],
        json!(["user", "assistant", "user", "assistant"])
    );
    // The log holds the state records where the writes happened: the seed with the first
    // message, each tool's change with its result.
    let conversation = initial["conversation"].as_str().unwrap();
    let id = conversation.strip_prefix("stateful/").unwrap();
    assert_eq!(
        record_types(&workspace, id),
        [
            "state",
            "user",
            "assistant",
            // `state_write` is replay-safe: its run is recorded first.
            "tool_attempt",
            "tool_result",
            "state",
            "assistant",
            "user",
            "assistant",
            "tool_result",
            "state",
            "assistant"
        ]
    );
    // `flue session show` shows the state with its version.
    let output = workspace.flue(&["session", "show", "--id", id, "--json"]);
    let shown: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(shown["state"]["version"], 3, "{shown}");
    assert_eq!(shown["state"]["value"]["bumps"], 1, "{shown}");
    let output = workspace.flue(&["session", "show", "--id", id]);
    let text = crate::stdout(&output);
    let line = text
        .lines()
        .find(|line| line.starts_with("state (version 3): "))
        .unwrap_or_else(|| panic!("no state line in {text}"));
    assert!(
        line.contains(r#""bumps":1"#) && line.contains(r#""issue":7"#),
        "{line}"
    );

    // The first send is admitted; the server dies (SIGKILL) while its tool runs; a new server
    // on the same store gets the same send again.
    let send = sdk_client(&server.base, &["send:slow-tool:k9:order-9"]);
    let submission = send[0]["submissionId"].as_str().unwrap().to_owned();
    assert_eq!(send[0]["deduplicated"], Value::Null);
    let runs = workspace.root().join("runs.log");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !runs.exists() {
        assert!(Instant::now() < deadline, "the tool never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
    server.kill9();
    let server = Server::start(workspace.root(), &[], &[]);
    let resend = sdk_client(&server.base, &["resend:slow-tool:k9:order-9"]);
    let resend = &resend[0];
    assert_eq!(resend["submissionId"], submission.as_str(), "{resend}");
    assert_eq!(resend["deduplicated"], true);
    assert_eq!(resend["outcome"], "completed");
    assert_eq!(resend["userMessages"], 1, "{resend}");
    assert_eq!(resend["settlements"], json!(["completed"]));
    assert_eq!(resend["allSettlements"], 1);
    // The killed tool call was answered `interrupted`, never run again.
    assert_eq!(std::fs::read_to_string(&runs).unwrap().lines().count(), 1);
    assert_eq!(
        record_types(&workspace, "k9"),
        ["user", "assistant", "tool_result", "assistant"]
    );
}

/// The `js` code blocks of docs/http-api.md's "Clients" section, in order, as one program.
fn docs_client_program() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/http-api.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let (_, section) = doc.split_once("\n## Clients\n").expect("a Clients section");
    let section = section.split("\n## ").next().unwrap();
    let mut program = String::new();
    let mut inside = false;
    for line in section.lines() {
        match (inside, line) {
            (false, "```js") => inside = true,
            (true, "```") => inside = false,
            (true, line) => {
                program.push_str(line);
                program.push('\n');
            }
            _ => {}
        }
    }
    assert!(program.contains("createFlueClient"), "{program}");
    program
}

/// docs/http-api.md's client examples (send, observe with SSE, answer a pause with fetch,
/// abort) run unchanged with the official client against `flue serve`.
#[test]
fn the_http_api_docs_client_examples_run_against_flue_serve() {
    assert!(
        peers().join("node_modules/@flue/sdk").is_dir(),
        "tests/peers is not installed: npm ci --prefix tests/peers"
    );
    let workspace = Workspace::new(&[
        (
            "agents/support.md",
            "---\ndescription: Answers tickets\nmodel: scripted/scripts/support.json\n\
             tools: [bash]\npermissions:\n  bash: always_ask\n---\nYou answer tickets.\n",
        ),
        (
            "scripts/support.json",
            r#"{"rules": [
  {"when": {"tool_result": "bash"}, "reply": {"text": "Cleaned up: {{tool_result}}"}},
  {"when": {"user_contains": "Summarize"}, "reply": {"text": "The ticket asks for a refund of order 7.", "chunk_delay_ms": 40}},
  {"when": {"user_contains": "Clean"}, "reply": {"tool_calls": [{"name": "bash", "input": {"command": "echo 3 files removed"}}]}},
  {"when": {"user_contains": "slowly"}, "reply": {"text": "Still researching.", "delay_ms": 60000}}
]}"#,
        ),
    ]);
    let server = Server::start(workspace.root(), &[], &[]);
    let mut child = Command::new("node")
        .current_dir(peers())
        .args(["--input-type=module", "-"])
        .env("FLUE_URL", &server.base)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(docs_client_program().as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&output.stderr),
        server.log()
    );
    let lines: Vec<&str> = stdout
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect();
    assert_eq!(
        lines,
        [
            "The ticket asks for a refund of order 7.",
            "The ticket asks for a refund of order 7.",
            r#"bash wants to run with {"command":"echo 3 files removed"}"#,
            "Cleaned up: 3 files removed",
            "aborted: submission_aborted",
        ],
        "{stdout}"
    );
}

#[test]
fn a_non_loopback_bind_needs_a_token_and_then_every_request_carries_it() {
    let workspace = workspace();
    let refused = workspace.flue(&["serve", "--host", "0.0.0.0", "--port", "0"]);
    assert!(!refused.status.success());
    assert!(
        crate::stderr(&refused).contains("needs a token"),
        "{}",
        crate::stderr(&refused)
    );

    let server = Server::start(workspace.root(), &["--token", "t0ps3cret"], &[]);
    let (status, body) = http(server.addr(), "GET", "/_flue/health", &[], "");
    assert_eq!(status, 401);
    assert!(body.contains("\"unauthorized\""));
    let (status, _) = http(
        server.addr(),
        "GET",
        "/_flue/agents",
        &[("authorization", "Bearer wrong")],
        "",
    );
    assert_eq!(status, 401);
    let (status, body) = http(
        server.addr(),
        "GET",
        "/_flue/agents",
        &[("authorization", "Bearer t0ps3cret")],
        "",
    );
    assert_eq!(status, 200);
    let agents: Value = serde_json::from_str(&body).unwrap();
    let names: Vec<&str> = agents["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|agent| agent["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["plain", "slow-tool", "stateful", "stream", "tool"]);
    // The state route is behind the token like every other.
    let (status, _) = http(server.addr(), "GET", "/agents/plain/nobody/state", &[], "");
    assert_eq!(status, 401);
    let (status, body) = http(
        server.addr(),
        "GET",
        "/agents/plain/nobody/state",
        &[("authorization", "Bearer t0ps3cret")],
        "",
    );
    assert_eq!(status, 404, "{body}");
    assert!(!server.log().contains("t0ps3cret"));
}

#[test]
fn sigterm_lets_the_running_turn_finish_then_exits_0() {
    let workspace = workspace();
    slow_secs(&workspace, 1);
    let mut server = Server::start(workspace.root(), &["--grace", "10"], &[]);
    let addr = server.addr().to_owned();
    let admission = post_message(&addr, "/agents/slow-tool/term", "work");
    // The turn runs once its command has started (it writes runs.log first).
    let deadline = Instant::now() + Duration::from_secs(120);
    while !workspace.root().join("runs.log").exists() {
        assert!(
            Instant::now() < deadline,
            "the command never started:\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = server.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    // New work is refused while draining (or the socket is already closed).
    let started = Instant::now();
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}\n{}", server.log());
    assert!(
        server.log().contains("flue_server::settlement"),
        "{}",
        server.log()
    );
    // The running turn reached its end before the exit: settled completed.
    let restarted = Server::start(workspace.root(), &[], &[]);
    let snapshot = snapshot(restarted.addr(), "/agents/slow-tool/term");
    let settlements = snapshot["settlements"].as_array().unwrap();
    assert_eq!(settlements.len(), 1, "{snapshot}");
    assert_eq!(settlements[0]["submissionId"], admission["submissionId"]);
    assert_eq!(settlements[0]["outcome"], "completed");
}

#[test]
fn kill_9_during_tool_calls_then_restart_settles_every_submission_once_and_runs_no_tool_twice() {
    let workspace = workspace();
    slow_secs(&workspace, 1);
    let env = [];
    let mut admitted: Vec<(String, String)> = Vec::new();
    let mut seed = 0x9e37_79b9_u64 ^ u64::from(std::process::id());
    for trial in 0..4 {
        let mut server = Server::start(workspace.root(), &[], &env);
        let path = format!("/agents/slow-tool/crash{trial}");
        let admission = post_message(server.addr(), &path, "work");
        admitted.push((path, admission["submissionId"].as_str().unwrap().to_owned()));
        // A random instant within the tool call (the command sleeps 1 s).
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        std::thread::sleep(Duration::from_millis(100 + (seed >> 33) % 900));
        server.kill9();
    }
    let server = Server::start(workspace.root(), &[], &env);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut tool_parts = 0;
    for (path, submission) in &admitted {
        let snapshot = loop {
            let snapshot = snapshot(server.addr(), path);
            if !snapshot["settlements"].as_array().unwrap().is_empty() {
                break snapshot;
            }
            assert!(
                Instant::now() < deadline,
                "{path} never settled:\n{}",
                server.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let settlements = snapshot["settlements"].as_array().unwrap();
        assert_eq!(settlements.len(), 1, "{snapshot}");
        assert_eq!(settlements[0]["submissionId"], submission.as_str());
        tool_parts += snapshot["messages"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|message| message["parts"].as_array().unwrap().iter())
            .filter(|part| part["type"] == "dynamic-tool")
            .count();
    }
    // Every command run is one recorded tool call; an interrupted call is never run again.
    let runs = std::fs::read_to_string(workspace.root().join("runs.log")).unwrap_or_default();
    assert!(
        runs.lines().count() <= tool_parts,
        "runs {runs:?} vs {tool_parts} tool calls"
    );
    assert!(
        tool_parts <= admitted.len(),
        "{tool_parts} tool calls for {} submissions",
        admitted.len()
    );
}

#[test]
fn a_thousand_messages_over_a_hundred_conversations_with_readers_attached() {
    let workspace = workspace();
    let server = Server::start(workspace.root(), &[], &[]);
    let addr = server.addr().to_owned();
    let conversations = 100;
    let per_conversation = 10;
    // A long-poll reader per conversation, following until it sees every settlement.
    let readers: Vec<_> = (0..conversations)
        .map(|conv| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let path = format!("/agents/plain/load{conv}");
                // Wait for the conversation to exist.
                let mut offset = loop {
                    let (status, _) = http(&addr, "HEAD", &path, &[], "");
                    if status == 200 {
                        break "-1".to_owned();
                    }
                    std::thread::sleep(Duration::from_millis(20));
                };
                let mut settled = std::collections::HashSet::new();
                while settled.len() < per_conversation {
                    let mut stream = TcpStream::connect(&addr).unwrap();
                    stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
                    let request = format!(
                        "GET {path}?view=updates&offset={offset}&live=long-poll HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n"
                    );
                    stream.write_all(request.as_bytes()).unwrap();
                    let mut response = String::new();
                    stream.read_to_string(&mut response).unwrap();
                    let (head, body) = response.split_once("\r\n\r\n").unwrap();
                    offset = head
                        .lines()
                        .find_map(|line| line.strip_prefix("stream-next-offset: "))
                        .unwrap()
                        .to_owned();
                    let chunks: Value = serde_json::from_str(body).unwrap();
                    for chunk in chunks.as_array().unwrap() {
                        if chunk["type"] == "submission-settled" {
                            assert!(settled.insert(chunk["submissionId"].as_str().unwrap().to_owned()));
                        }
                        if chunk["type"] == "conversation-reset" {
                            for settlement in chunk["snapshot"]["settlements"].as_array().unwrap() {
                                settled.insert(settlement["submissionId"].as_str().unwrap().to_owned());
                            }
                        }
                    }
                }
                settled.len()
            })
        })
        .collect();
    let senders: Vec<_> = (0..4)
        .map(|worker| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                for round in 0..per_conversation {
                    for conv in (worker..conversations).step_by(4) {
                        post_message(
                            &addr,
                            &format!("/agents/plain/load{conv}"),
                            &format!("m{round}"),
                        );
                    }
                }
            })
        })
        .collect();
    for sender in senders {
        sender.join().unwrap();
    }
    let total: usize = readers
        .into_iter()
        .map(|reader| reader.join().unwrap())
        .sum();
    assert_eq!(total, conversations * per_conversation);
}

#[test]
fn ten_thousand_idle_sse_streams_stay_open_and_a_new_message_reaches_them() {
    let streams: usize = 10_000;
    raise_fd_limit(streams as u64 + 2_000);
    let workspace = workspace();
    let server = Server::start(workspace.root(), &[], &[]);
    let addr = server.addr().to_owned();
    let conversations = 10;
    let mut heads = Vec::new();
    for conv in 0..conversations {
        let path = format!("/agents/plain/idle{conv}");
        let admission = post_message(&addr, &path, "hi");
        let deadline = Instant::now() + Duration::from_secs(30);
        let snapshot = loop {
            let snapshot = snapshot(&addr, &path);
            if !snapshot["settlements"].as_array().unwrap().is_empty() {
                break snapshot;
            }
            assert!(Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(
            snapshot["settlements"][0]["submissionId"],
            admission["submissionId"]
        );
        heads.push(snapshot["offset"].as_str().unwrap().to_owned());
    }
    let mut open = Vec::with_capacity(streams);
    for idx in 0..streams {
        let conv = idx % conversations;
        let mut stream = TcpStream::connect(&addr).unwrap();
        let request = format!(
            "GET /agents/plain/idle{conv}?view=updates&offset={}&live=sse HTTP/1.1\r\nhost: {addr}\r\n\r\n",
            heads[conv]
        );
        stream.write_all(request.as_bytes()).unwrap();
        open.push((conv, stream));
    }
    // Every stream is answered: headers and a first control event.
    for (_, stream) in &mut open {
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut buf = [0u8; 1024];
        let mut text = String::new();
        while !text.contains("event: control") {
            let read = stream.read(&mut buf).unwrap();
            assert!(read > 0, "stream closed: {text}");
            text.push_str(&String::from_utf8_lossy(&buf[..read]));
        }
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    }
    // A new message on conversation 0 reaches its readers.
    let admission = post_message(&addr, "/agents/plain/idle0", "still there?");
    let needle = format!(
        "\"submissionId\":\"{}\",\"outcome\"",
        admission["submissionId"].as_str().unwrap()
    );
    for (_, stream) in open.iter_mut().filter(|(conv, _)| *conv == 0).take(50) {
        let mut buf = [0u8; 4096];
        let mut text = String::new();
        while !text.contains(&needle) {
            let read = stream.read(&mut buf).unwrap();
            assert!(read > 0);
            text.push_str(&String::from_utf8_lossy(&buf[..read]));
        }
    }
    let (status, _) = http(&addr, "GET", "/_flue/health", &[], "");
    assert_eq!(status, 200);
}

/// What `flue serve` prints up to its `listening on` line when started under an open-file limit
/// of 4,096 (soft and hard) with `extra` arguments.
fn serve_start_under_a_low_fd_limit(root: &Path, extra: &str) -> String {
    let script = format!(
        "ulimit -n 4096 && exec '{flue}' serve --root '{root}' --port 0 {extra}",
        flue = assert_cmd::cargo::cargo_bin("flue").display(),
        root = root.display(),
    );
    let mut child = Command::new("bash")
        .args(["-c", &script])
        .env_remove("FLUE_TOKEN")
        .env("FLUE_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut printed = String::new();
    for line in BufReader::new(child.stderr.take().unwrap())
        .lines()
        .map_while(Result::ok)
    {
        printed.push_str(&line);
        printed.push('\n');
        if line.starts_with("flue serve: listening on ") {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(printed.contains("listening on"), "{printed}");
    printed
}

#[test]
fn the_open_file_limit_is_warned_about_only_for_a_cap_that_was_asked_for() {
    let ws = Workspace::hello_world();
    // The default cap (20,000) does not fit: lowered to what fits, quietly.
    let default = serve_start_under_a_low_fd_limit(ws.root(), "");
    assert!(!default.contains("open-file limit"), "{default}");
    let fits = serve_start_under_a_low_fd_limit(ws.root(), "--max-connections 100");
    assert!(!fits.contains("open-file limit"), "{fits}");
    let asked = serve_start_under_a_low_fd_limit(ws.root(), "--max-connections 5000");
    assert!(
        asked.contains(
            "the open-file limit (4096) caps concurrent connections at 3072, below \
             --max-connections 5000"
        ),
        "{asked}"
    );
}

/// Raises this process's open-file limit (the server inherits it).
fn raise_fd_limit(wanted: u64) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    let target = wanted.min(hard).max(soft);
    setrlimit(Resource::RLIMIT_NOFILE, target, hard).unwrap();
    assert!(
        target >= wanted,
        "the hard open-file limit {hard} is below {wanted}"
    );
}

/// Two `flue serve` processes on one SQLite store: a client following a conversation's stream
/// on one process sees the messages the other process admits and runs (its process learns of
/// them from its one cross-process look at the store per conversation, every few seconds).
#[test]
fn a_reader_on_one_process_sees_what_another_process_admits_and_runs() {
    let workspace = workspace();
    let reader = Server::start(workspace.root(), &[], &[]);
    let runner = Server::start(workspace.root(), &[], &[]);
    let path = "/agents/plain/shared";
    post_message(runner.addr(), path, "first");
    let mut rounds_run_by_the_runner = 0;
    for round in 0..3 {
        // The reader's process, once the previous message settled: follow from its head.
        let deadline = Instant::now() + Duration::from_secs(120);
        let head = loop {
            let snapshot = snapshot(reader.addr(), path);
            if snapshot["settlements"].as_array().unwrap().len() == round + 1 {
                break snapshot["offset"].as_str().unwrap().to_owned();
            }
            assert!(Instant::now() < deadline, "round {round} never settled");
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut stream = TcpStream::connect(reader.addr()).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let request = format!(
            "GET {path}?view=updates&offset={head}&live=sse HTTP/1.1\r\nhost: {}\r\n\r\n",
            reader.addr()
        );
        stream.write_all(request.as_bytes()).unwrap();
        let mut text = String::new();
        let mut buf = [0u8; 4096];
        while !text.contains("event: control") {
            let read = stream.read(&mut buf).unwrap();
            assert!(read > 0, "stream closed: {text}");
            text.push_str(&String::from_utf8_lossy(&buf[..read]));
        }
        // The other process admits (and most likely runs) the next message.
        let admission = post_message(runner.addr(), path, &format!("round {round}"));
        let submission = admission["submissionId"].as_str().unwrap().to_owned();
        let needle = format!("\"submissionId\":\"{submission}\",\"outcome\"");
        // Heartbeats keep the stream talking, so the deadline is checked between reads.
        let deadline = Instant::now() + Duration::from_secs(120);
        while !text.contains(&needle) {
            assert!(
                Instant::now() < deadline,
                "the reader never saw {submission}: {text}"
            );
            let read = stream.read(&mut buf).unwrap();
            assert!(read > 0, "stream closed before the settlement: {text}");
            text.push_str(&String::from_utf8_lossy(&buf[..read]));
        }
        assert!(text.contains("Hello"), "{text}");
        let settled_by = |log: &str| {
            log.lines()
                .any(|line| line.contains("settled") && line.contains(&submission))
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        while !settled_by(&runner.log()) && !settled_by(&reader.log()) {
            assert!(Instant::now() < deadline, "no process logged {submission}");
            std::thread::sleep(Duration::from_millis(20));
        }
        if settled_by(&runner.log()) {
            rounds_run_by_the_runner += 1;
        }
    }
    assert!(
        rounds_run_by_the_runner >= 1,
        "every round ran in the reader's process: nothing crossed processes"
    );
}

#[test]
fn a_model_the_catalog_does_not_know_is_refused_at_start_and_in_a_message() {
    let workspace = workspace();
    let typo = workspace.root().join("agents/typo.md");
    std::fs::write(&typo, "---\nmodel: openai/gpt-4oo\n---\nYou answer.\n").unwrap();
    let key = [("OPENAI_API_KEY", "sk-test")];
    let refused = Command::new(assert_cmd::cargo::cargo_bin("flue"))
        .args(["serve", "--port", "0", "--root"])
        .arg(workspace.root())
        .env("FLUE_TRUST", "1")
        .env_remove("OPENAI_BASE_URL")
        .envs(key)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{said}");
    assert!(
        said.contains("refusing to serve")
            && said.contains("agent `typo`: model \"gpt-4oo\" is not in the catalog")
            && said.contains("did you mean `openai/gpt-4o`?"),
        "{said}"
    );
    assert!(!workspace.root().join(".flue").exists(), "a store was made");

    // Without the misspelt agent, a message naming a misspelt model is refused before
    // anything is stored; `--allow-unknown-model` lets it through.
    std::fs::remove_file(&typo).unwrap();
    let server = Server::start(workspace.root(), &[], &key);
    let body = json!({"kind": "user", "body": "hi", "model": "openai/gpt-4oo"}).to_string();
    let headers = [("content-type", "application/json")];
    let (status, answer) = http(server.addr(), "POST", "/agents/plain/t1", &headers, &body);
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("did you mean `openai/gpt-4o`?"), "{answer}");
    let (status, _) = http(server.addr(), "GET", "/agents/plain/t1", &[], "");
    assert_eq!(status, 404, "the refused message made a conversation");
    drop(server);
    let server = Server::start(workspace.root(), &["--allow-unknown-model"], &key);
    let (status, answer) = http(server.addr(), "POST", "/agents/plain/t2", &headers, &body);
    assert_eq!(status, 202, "{answer}");
}
