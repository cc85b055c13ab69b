//! `flue run` with MCP servers: an agent calling MCP tools end to end (scripted model), servers
//! from flue.toml with `${VAR}` from .env, servers that fail to start or die mid-call, and a
//! server whose tool list changes during the run.

use std::path::{Path, PathBuf};

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::{Workspace, json, stderr, stdout};

fn peers() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/peers")
}

/// A file under tests/peers/, which must exist (`cargo xtask ci` installs the peers).
pub fn peer(relative: &str) -> String {
    let path = peers().join(relative);
    assert!(
        path.exists(),
        "{} is missing: run `bash tests/peers/install.sh` (or `cargo xtask ci`) to install the MCP test servers",
        path.display()
    );
    path.to_string_lossy().into_owned()
}

fn python() -> String {
    peer(".venv/bin/python")
}

/// A script that calls `tool` with `input` when the user says `trigger`, then reports the
/// tool's result.
fn script(trigger: &str, tool: &str, input: &serde_json::Value) -> String {
    json!({
        "rules": [
            {"when": {"user_contains": trigger}, "reply": {"tool_calls": [{"name": tool, "input": input}]}},
            {"when": {"tool_result": tool}, "reply": {"text": "Tool said: {{tool_result}}"}},
            {"reply": {"text": "ok"}}
        ]
    })
    .to_string()
}

fn agent(mcp: &str) -> String {
    format!("---\nmodel: scripted/script.json\nmcp:\n{mcp}---\nYou use MCP tools.\n")
}

#[test]
fn an_agent_calls_a_tool_of_server_everything_over_stdio() {
    let everything = peer("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let mcp = format!("  everything:\n    command: node\n    args: [\"{everything}\", stdio]\n");
    let ws = Workspace::new(&[
        ("agents/helper.md", &agent(&mcp)),
        (
            "script.json",
            &script(
                "echo",
                "mcp__everything__echo",
                &json!({"message": "{{user}}"}),
            ),
        ),
    ]);
    let output = ws.flue(&["run", "helper", "-m", "echo this", "--id", "c1"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output), "Tool said: Echo: echo this\n");
    let err = stderr(&output);
    assert!(err.contains("-> mcp__everything__echo"), "{err}");

    let show = ws.flue(&["session", "show", "--id", "c1", "--json"]);
    let messages = json(&show)["messages"].clone();
    let tool_result = messages
        .as_array()
        .unwrap()
        .iter()
        .find(|message| message["role"] == "tool")
        .cloned()
        .unwrap();
    assert_eq!(tool_result["content"], "Echo: echo this", "{tool_result}");

    // `flue tools` lists the server's tools with their input schemas.
    let listed = json(&ws.flue(&["tools", "helper", "--json"]));
    let echo = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|tool| tool["name"] == "mcp__everything__echo")
        .cloned()
        .unwrap_or_else(|| panic!("{listed}"));
    assert_eq!(echo["origin"], "mcp");
    assert_eq!(
        echo["inputSchema"]["properties"]["message"]["type"],
        "string"
    );
}

#[test]
fn flue_toml_servers_get_variables_from_the_env_file() {
    let flue_toml = format!(
        "[mcp.py]\ncommand = \"{}\"\nargs = [\"{}\", \"stdio\"]\nenv = {{ FIXTURE_GREETING = \"hi ${{GREETING}}!\" }}\n",
        python(),
        peer("py_server.py")
    );
    let ws = Workspace::new(&[
        ("flue.toml", &flue_toml),
        // Every `.env` value is redacted from tool output unless it is too short to be a
        // secret (docs/security.md): a short greeting shows the value arrived.
        (".env", "GREETING=friend\n"),
        (
            "agents/helper.md",
            "---\nmodel: scripted/script.json\n---\nYou use MCP tools.\n",
        ),
        (
            "script.json",
            &script(
                "greet",
                "mcp__py__env_value",
                &json!({"name": "FIXTURE_GREETING"}),
            ),
        ),
    ]);
    let output = ws.flue(&["run", "helper", "-m", "greet me"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        "Tool said: Structured content:\n{\n  \"result\": \"hi friend!\"\n}\n\nhi friend!\n"
    );
}

#[test]
fn a_server_that_fails_to_start_is_an_error_naming_it_without_secrets() {
    let mcp = format!(
        "  broken:\n    command: {}\n    args: [\"{}\", die]\n    env: {{ FIXTURE_SECRET: \"${{SECRET}}\" }}\n",
        python(),
        peer("raw_server.py")
    );
    let ws = Workspace::new(&[
        ("agents/helper.md", &agent(&mcp)),
        (".env", "SECRET=topsecret-123\n"),
        ("script.json", &script("x", "mcp__broken__x", &json!({}))),
    ]);
    let output = ws.flue(&["run", "helper", "-m", "hi", "--json", "--id", "c"]);
    assert_eq!(output.status.code(), Some(1));
    let envelope = json(&output);
    assert_eq!(
        envelope["error"],
        json!({
            "kind": "mcp_start_failed",
            "message": "mcp server \"broken\": the server closed the connection during the MCP handshake; its stderr ends with:\nfixture: cannot start, token [redacted] rejected"
        })
    );
    assert!(!stdout(&output).contains("topsecret"));
    assert!(!stderr(&output).contains("topsecret"));
    // Nothing was stored: the conversation never started.
    let show = ws.flue(&["session", "show", "--id", "c", "--json"]);
    assert_eq!(show.status.code(), Some(1), "{}", stdout(&show));
}

#[test]
fn a_missing_variable_is_a_configuration_error() {
    let mcp = "  docs:\n    url: http://127.0.0.1:9/mcp\n    headers: { Authorization: \"Bearer ${FLUE_TEST_UNSET_TOKEN_VAR}\" }\n";
    let ws = Workspace::new(&[
        ("agents/helper.md", &agent(mcp)),
        ("script.json", &script("x", "x", &json!({}))),
    ]);
    let output = ws.flue(&["run", "helper", "-m", "hi", "--json"]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        json(&output)["error"],
        json!({
            "kind": "invalid_config",
            "message": "mcp server `docs`, header `Authorization`: `${FLUE_TEST_UNSET_TOKEN_VAR}` is not set: set FLUE_TEST_UNSET_TOKEN_VAR in the environment or in .env"
        })
    );
}

#[test]
fn a_server_that_dies_mid_call_leaves_the_conversation_usable() {
    let mcp = format!(
        "  raw:\n    command: {}\n    args: [\"{}\", calls]\n",
        python(),
        peer("raw_server.py")
    );
    let script = json!({
        "rules": [
            {"when": {"user_contains": "crash"}, "reply": {"tool_calls": [{"name": "mcp__raw__crash", "input": {}}]}},
            {"when": {"user_contains": "again"}, "reply": {"tool_calls": [{"name": "mcp__raw__ok", "input": {}}]}},
            {"when": {"tool_result": "mcp__raw__crash"}, "reply": {"text": "The server failed: {{tool_result}}"}},
            {"when": {"tool_result": "mcp__raw__ok"}, "reply": {"text": "The server said: {{tool_result}}"}}
        ]
    })
    .to_string();
    let ws = Workspace::new(&[("agents/helper.md", &agent(&mcp)), ("script.json", &script)]);
    let first = ws.flue(&["run", "helper", "-m", "crash please", "--id", "c"]);
    assert!(first.status.success(), "{}", stderr(&first));
    assert_eq!(
        stdout(&first),
        "The server failed: mcp server \"raw\": the connection closed during tools/call `crash`: \
         the server exited or hung up; a new run reconnects; its stderr ends with:\n\
         fixture: crashing on purpose\n"
    );
    // The next run reconnects and continues the same conversation.
    let second = ws.flue(&["run", "helper", "-m", "again", "--id", "c"]);
    assert!(second.status.success(), "{}", stderr(&second));
    assert_eq!(stdout(&second), "The server said: fine\n");
    let show = ws.flue(&["session", "show", "--id", "c", "--json"]);
    let results: Vec<(serde_json::Value, serde_json::Value)> = json(&show)["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|message| message["role"] == "tool")
        .map(|message| (message["tool_name"].clone(), message["error_kind"].clone()))
        .collect();
    assert_eq!(
        results,
        [
            (json!("mcp__raw__crash"), json!("mcp_server_closed")),
            (json!("mcp__raw__ok"), serde_json::Value::Null)
        ]
    );
}

#[test]
fn a_tool_the_server_adds_mid_run_is_offered_at_the_next_turn_and_a_removed_one_is_gone() {
    let mcp = format!(
        "  changing:\n    command: {}\n    args: [\"{}\"]\n",
        python(),
        peer("changing_server.py")
    );
    // `grow` adds `echo` and `shrink` removes it, each announcing the change.
    let call = |tool: &str, input: serde_json::Value| json!({"tool_calls": [{"name": format!("mcp__changing__{tool}"), "input": input}]});
    let script = json!({
        "rules": [
            {"when": {"user_contains": "go"}, "reply": call("grow", json!({}))},
            {"when": {"turn": 2}, "reply": call("echo", json!({"text": "hi"}))},
            {"when": {"turn": 3}, "reply": call("shrink", json!({}))},
            {"when": {"turn": 4}, "reply": call("echo", json!({"text": "again"}))},
            {"when": {"turn": 5}, "reply": {"text": "done"}}
        ]
    })
    .to_string();
    let ws = Workspace::new(&[("agents/helper.md", &agent(&mcp)), ("script.json", &script)]);
    let output = ws.flue(&["run", "helper", "-m", "go", "--id", "c"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output), "done\n");
    let show = ws.flue(&["session", "show", "--id", "c", "--json"]);
    let results: Vec<(Value, Value)> = json(&show)["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|message| message["role"] == "tool")
        .map(|message| (message["tool_name"].clone(), message["error_kind"].clone()))
        .collect();
    assert_eq!(
        results,
        [
            (json!("mcp__changing__grow"), Value::Null),
            (json!("mcp__changing__echo"), Value::Null),
            (json!("mcp__changing__shrink"), Value::Null),
            (json!("mcp__changing__echo"), json!("unknown_tool")),
        ]
    );
    // A new run connects again and lists the server's tools as they are at its start.
    let listed = json(&ws.flue(&["tools", "helper", "--json"]));
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .filter(|name| name.starts_with("mcp__"))
        .collect();
    assert_eq!(
        names,
        [
            "mcp__changing__grow",
            "mcp__changing__reshape",
            "mcp__changing__shrink",
            "mcp__changing__clash"
        ]
    );
}

#[test]
fn a_subagents_servers_are_connected_too() {
    let mcp = format!(
        "  broken:\n    command: {}\n    args: [\"{}\", die]\n",
        python(),
        peer("raw_server.py")
    );
    let ws = Workspace::new(&[
        (
            "agents/helper.md",
            "---\nmodel: scripted/script.json\nsubagents: [worker]\n---\nYou delegate.\n",
        ),
        ("agents/worker.md", &agent(&mcp)),
        ("script.json", &script("x", "x", &json!({}))),
    ]);
    let output = ws.flue(&["run", "helper", "-m", "hi", "--json"]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        json(&output)["error"],
        json!({
            "kind": "mcp_start_failed",
            "message": "mcp server \"broken\": the server closed the connection during the MCP handshake; its stderr ends with:\nfixture: cannot start, token  rejected"
        })
    );
}

#[test]
fn a_server_with_sampling_enabled_gets_answers_from_the_agents_model() {
    let everything = peer("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let mcp = format!(
        "  everything:\n    command: node\n    args: [\"{everything}\", stdio]\n    sampling: true\n"
    );
    let script = json!({"rules": [
        {"when": {"user_contains": "context: hi"}, "reply": {"text": "sampled answer"}},
        {"when": {"user_contains": "please"}, "reply": {"tool_calls": [
            {"name": "mcp__everything__trigger-sampling-request", "input": {"prompt": "hi"}}
        ]}},
        {"when": {"tool_result": "mcp__everything__trigger-sampling-request"}, "reply": {"text": "Tool said: {{tool_result}}"}},
        {"reply": {"text": "ok"}}
    ]});
    let ws = Workspace::new(&[
        ("agents/helper.md", &agent(&mcp)),
        ("script.json", &script.to_string()),
    ]);
    let output = ws.flue(&["run", "helper", "-m", "please sample"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let out = stdout(&output);
    assert!(out.contains("\"text\": \"sampled answer\""), "{out}");
    assert!(out.contains("\"model\": \"scripted/script.json\""), "{out}");
    assert!(
        stderr(&output).contains("mcp sampling used the agent's model"),
        "{}",
        stderr(&output)
    );

    // The exchange is in the session log, as the model saw it, and counted in the operation.
    let output = ws.flue(&[
        "run",
        "helper",
        "-m",
        "please sample",
        "--json",
        "--id",
        "s1",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let usage = json(&output)["usage"].clone();
    let messages = json(&ws.flue(&["session", "show", "--id", "s1", "--json"]))["messages"].clone();
    let messages = messages.as_array().unwrap();
    let sampled: Vec<&Value> = messages
        .iter()
        .filter(|m| m["type"] == "sampling")
        .collect();
    assert_eq!(sampled.len(), 1, "{messages:?}");
    let exchange = sampled[0];
    assert_eq!(exchange["server"], "everything");
    assert_eq!(exchange["model"], "scripted/script.json");
    assert_eq!(exchange["response"], "sampled answer");
    assert!(
        exchange["messages"][0]["text"]
            .as_str()
            .unwrap()
            .contains("hi"),
        "{exchange}"
    );
    let tool_call_id = messages
        .iter()
        .find(|m| m["role"] == "tool")
        .map(|m| m["call_id"].clone())
        .unwrap();
    assert_eq!(exchange["call_id"], tool_call_id);
    let sampling_input = exchange["usage"]["input_tokens"].as_u64().unwrap();
    assert!(sampling_input > 0, "{exchange}");
    let turns_input: u64 = messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(|m| m["usage"]["input_tokens"].as_u64().unwrap())
        .sum();
    assert_eq!(
        usage["input_tokens"].as_u64().unwrap(),
        turns_input + sampling_input,
        "{usage} turns {turns_input} sampling {sampling_input}"
    );

    // Without `sampling: true` the server is not told flue can sample, so it offers no such tool.
    let off = agent(&mcp.replace("    sampling: true\n", ""));
    std::fs::write(ws.root().join("agents/helper.md"), off).unwrap();
    let output = ws.flue(&["run", "helper", "-m", "please sample"]);
    assert!(
        !stdout(&output).contains("sampled answer"),
        "{}",
        stdout(&output)
    );
}

#[test]
fn sampling_under_always_ask_is_refused_headless_and_approved_with_yes() {
    let everything = peer("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let agent_file = format!(
        "---\nmodel: scripted/script.json\nmcp:\n  everything:\n    command: node\n    \
         args: [\"{everything}\", stdio]\n    sampling: true\npermissions:\n  \
         mcp__everything__sampling: always_ask\n---\nYou use MCP tools.\n"
    );
    let script = json!({"rules": [
        {"when": {"user_contains": "context: hi"}, "reply": {"text": "sampled answer"}},
        {"when": {"user_contains": "please"}, "reply": {"tool_calls": [
            {"name": "mcp__everything__trigger-sampling-request", "input": {"prompt": "hi"}}
        ]}},
        {"when": {"tool_result": "mcp__everything__trigger-sampling-request"}, "reply": {"text": "Tool said: {{tool_result}}"}},
        {"reply": {"text": "ok"}}
    ]});
    let ws = Workspace::new(&[
        ("agents/helper.md", &agent_file),
        ("script.json", &script.to_string()),
    ]);

    // No terminal and no --yes: nothing reaches the model, the server gets the reason.
    let output = ws.flue(&["run", "helper", "-m", "please sample", "--id", "a1"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(
        err.contains("`mcp__everything__sampling` is always_ask"),
        "{err}"
    );
    assert!(
        !stdout(&output).contains("sampled answer"),
        "{}",
        stdout(&output)
    );
    let messages = json(&ws.flue(&["session", "show", "--id", "a1", "--json"]))["messages"].clone();
    let exchange = messages
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["type"] == "sampling")
        .cloned()
        .unwrap_or_else(|| panic!("{messages}"));
    assert!(exchange["response"].is_null(), "{exchange}");
    assert!(
        exchange["error"]
            .as_str()
            .unwrap()
            .contains("needs approval"),
        "{exchange}"
    );
    assert_eq!(exchange["usage"]["input_tokens"], 0, "{exchange}");

    // --yes approves.
    let output = ws.flue(&["run", "helper", "-m", "please sample", "--yes"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("sampled answer"),
        "{}",
        stdout(&output)
    );
    assert!(
        stderr(&output).contains("approved (--yes)"),
        "{}",
        stderr(&output)
    );
}

/// A bundle whose agent starts the official Python SDK server by a path relative to its
/// `cwd` (`servers/`, below the directory the bundle runs in), and a directory to run it in
/// that holds the server.
fn bundle_with_a_stdio_server() -> (Workspace, String, tempfile::TempDir) {
    // server-everything too: it greets with long instructions and announces list changes,
    // which the default log of `flue serve` must not quote.
    let everything = peer("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let mcp = format!(
        "  py:\n    command: {}\n    args: [py_server.py, stdio]\n    cwd: servers\n  \
         everything:\n    command: node\n    args: [\"{everything}\", stdio]\n",
        python()
    );
    let ws = Workspace::new(&[
        ("agents/helper.md", &agent(&mcp)),
        (
            "script.json",
            &script("add", "mcp__py__append_note", &json!({"note": "five"})),
        ),
    ]);
    let built = ws.flue(&["build"]);
    assert!(built.status.success(), "{}", stderr(&built));
    let bundle = stdout(&built).trim().to_owned();
    let work = tempfile::tempdir().unwrap();
    std::fs::create_dir(work.path().join("servers")).unwrap();
    std::fs::copy(
        peer("py_server.py"),
        work.path().join("servers/py_server.py"),
    )
    .unwrap();
    (ws, bundle, work)
}

#[test]
fn a_bundle_runs_its_stdio_mcp_server_in_the_directory_it_works_in() {
    let (_ws, bundle, work) = bundle_with_a_stdio_server();
    let run = |dir: &Path, args: &[&str]| {
        assert_cmd::Command::cargo_bin("flue")
            .unwrap()
            .env("FLUE_TRUST", "1")
            .current_dir(dir)
            .args(["run", "helper", "--bundle", &bundle, "-m", "add them"])
            .args(args)
            .env_remove("FLUE_LOG")
            .output()
            .unwrap()
    };
    // From the directory itself, and from elsewhere with --root.
    for output in [
        run(work.path(), &[]),
        run(
            Path::new("/"),
            &["--root", &work.path().display().to_string()],
        ),
    ] {
        assert!(output.status.success(), "{}", stderr(&output));
        let reply = stdout(&output);
        assert!(reply.starts_with("Tool said: "), "{reply}");
        assert!(reply.ends_with("appended five\n"), "{reply}");
    }

    // Without the server's directory the error names the directory, not the program.
    std::fs::remove_dir_all(work.path().join("servers")).unwrap();
    let output = run(work.path(), &[]);
    assert!(!output.status.success());
    let err = stderr(&output);
    assert!(
        err.contains(&format!(
            "in {}: that working directory is not a directory",
            work.path()
                .canonicalize()
                .unwrap()
                .join("servers")
                .display()
        )),
        "{err}"
    );
    assert!(!err.contains("installed"), "{err}");
}

/// `flue serve --bundle BUNDLE --root ROOT --port 0` at its default log level; its address
/// once listening, and the process (stderr piped, read by the caller).
fn serve_bundle(
    bundle: &str,
    root: &Path,
) -> (
    String,
    std::process::Child,
    std::sync::mpsc::Receiver<String>,
) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("flue"))
        .env("FLUE_TRUST", "1")
        .args(["serve", "--bundle", bundle, "--port", "0", "--root"])
        .arg(root)
        .env_remove("FLUE_TOKEN")
        .env_remove("FLUE_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let pipe = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut seen = Vec::new();
    loop {
        let Ok(line) = rx.recv_timeout(std::time::Duration::from_secs(120)) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("flue serve did not start: {seen:?}");
        };
        if let Some(addr) = line.strip_prefix("flue serve: listening on http://") {
            return (addr.to_owned(), child, rx);
        }
        seen.push(line);
    }
}

#[test]
fn flue_serve_runs_a_bundle_with_a_stdio_mcp_server_and_refuses_one_that_cannot_run() {
    use crate::serve::{post_message, snapshot};
    let (ws, bundle, work) = bundle_with_a_stdio_server();
    let (addr, mut child, lines) = serve_bundle(&bundle, work.path());
    post_message(&addr, "/agents/helper/b1", "add them");
    // The log's settlement line says when the reply is there.
    let mut log = Vec::new();
    while !log.iter().any(|line: &String| line.contains(" settled")) {
        let line = lines
            .recv_timeout(std::time::Duration::from_secs(120))
            .unwrap_or_else(|_| panic!("no settlement: {log:#?}"));
        log.push(line);
    }
    let state = snapshot(&addr, "/agents/helper/b1").to_string();
    assert!(
        state.contains("appended five\",\"type\":\"text\""),
        "{state}"
    );
    let _ = child.kill();
    let _ = child.wait();
    log.extend(lines.try_iter());
    // Default logs: flue's short lines only; durations in whole milliseconds.
    for line in &log {
        assert!(line.len() < 400, "a long log line: {line}");
        assert!(!line.contains("rmcp"), "a library's line: {line}");
        if let Some((_, ms)) = line.split_once(" ms=") {
            let ms = ms.split_whitespace().next().unwrap();
            assert!(ms.parse::<u64>().is_ok(), "{line}");
        }
    }
    assert!(log.iter().any(|line| line.contains("request")), "{log:#?}");

    // Where the server's directory is missing the agent cannot run: serve refuses to start,
    // naming the agent and the cause.
    let elsewhere = tempfile::tempdir().unwrap();
    let output = assert_cmd::Command::cargo_bin("flue")
        .unwrap()
        .env("FLUE_TRUST", "1")
        .args(["serve", "--bundle", &bundle, "--port", "0", "--root"])
        .arg(elsewhere.path())
        .env_remove("FLUE_TOKEN")
        .env_remove("FLUE_LOG")
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .unwrap();
    assert!(!output.status.success());
    let err = stderr(&output);
    assert!(
        err.contains("refusing to serve: an agent cannot run"),
        "{err}"
    );
    assert!(err.contains("agent `helper`: "), "{err}");
    assert!(
        err.contains("that working directory is not a directory"),
        "{err}"
    );
    drop(ws);
}
