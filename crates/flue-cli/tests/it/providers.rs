//! `flue run` against real HTTP: an OpenAI-compatible provider declared in flue.toml, served by
//! the project's fake OpenAI server (`tests/fixtures/fake_openai.py`, python3 standard library)
//! on a random loopback port that each test starts and stops itself.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::{Workspace, json, stderr, stdout};

const KEY: &str = "fake-key-0123456789";

/// The fake server, killed (by its pid) when dropped.
pub(crate) struct FakeOpenAi {
    child: Child,
    port: u16,
    dir: TempDir,
}

impl FakeOpenAi {
    pub(crate) fn start() -> Self {
        Self::start_gated(None)
    }

    /// The server with `FAKE_GATE` set to `gate` (see the script).
    pub(crate) fn start_gated(gate: Option<&Path>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake_openai.py");
        let port_file = dir.path().join("fake.port");
        let mut command = Command::new("python3");
        if let Some(gate) = gate {
            command.env("FAKE_GATE", gate);
        }
        let child = command
            .arg(&script)
            .env("FAKE_PORT", "0")
            .env("FAKE_PORT_FILE", &port_file)
            .env("FAKE_LOG", dir.path().join("requests.jsonl"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|err| {
                panic!("cannot start python3 for the fake OpenAI server ({err}); install python3")
            });
        let started = Instant::now();
        let port = loop {
            if let Some(port) = std::fs::read_to_string(&port_file)
                .ok()
                .and_then(|text| text.trim().parse().ok())
            {
                break port;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the fake OpenAI server did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        Self { child, port, dir }
    }

    pub(crate) fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// Every request the server received: `{"path", "headers", "body", ...}`, header names
    /// lowercased.
    pub(crate) fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.path().join("requests.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|line| {
                let mut request: Value = serde_json::from_str(line).unwrap();
                let headers: serde_json::Map<String, Value> = request["headers"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(name, value)| (name.to_ascii_lowercase(), value.clone()))
                    .collect();
                request["headers"] = Value::Object(headers);
                request
            })
            .collect()
    }
}

impl Drop for FakeOpenAi {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A workspace whose flue.toml declares the fake server as provider `fake`, with a tool agent
/// (read_file), a plain agent and the key in `.env`.
fn workspace(server: &FakeOpenAi, env_file: &str) -> Workspace {
    let flue_toml = format!(
        "[providers.fake]\napi = \"openai-completions\"\nbase_url = \"{}\"\n\
         api_key_env = \"FLUE_TEST_FAKE_KEY\"\n\n\
         [providers.fake.models.fake-model]\ncontext_window = 128000\nmax_output_tokens = 8192\n\
         cost = {{ input = 1.0, output = 2.0 }}\n",
        server.base_url()
    );
    Workspace::new(&[
        ("flue.toml", flue_toml.as_str()),
        (".env", env_file),
        (
            "agents/tool-agent.md",
            "---\nmodel: fake/fake-model\ntools: [read_file]\n---\nYou answer from files.\n",
        ),
        (
            "agents/plain-agent.md",
            "---\nmodel: fake/fake-model\n---\nYou answer briefly.\n",
        ),
        ("facts.txt", "The answer is 42.\n"),
    ])
}

/// `flue <args> --root <ws>` with extra environment variables for the child only.
fn flue_with_env(ws: &Workspace, args: &[&str], vars: &[(&str, &str)]) -> Output {
    let mut command = assert_cmd::Command::cargo_bin("flue").unwrap();
    command.env("FLUE_TRUST", "1");
    command.args(args).arg("--root").arg(ws.root());
    for (name, value) in vars {
        command.env(name, value);
    }
    command.output().unwrap()
}

#[test]
fn a_tool_round_trip_through_a_flue_toml_provider() {
    let server = FakeOpenAi::start();
    let ws = workspace(&server, &format!("FLUE_TEST_FAKE_KEY={KEY}\n"));
    let output = ws.flue(&[
        "run",
        "tool-agent",
        "-m",
        "facts.txt",
        "--json",
        "--id",
        "e2e",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let mut envelope = json(&output);
    let usage = envelope.as_object_mut().unwrap().remove("usage").unwrap();
    let message = envelope.as_object_mut().unwrap().remove("message").unwrap();
    let submission_id = envelope
        .as_object_mut()
        .unwrap()
        .remove("submissionId")
        .unwrap();
    assert!(submission_id.as_str().is_some_and(|id| !id.is_empty()));
    assert_eq!(
        envelope,
        json!({"id": "e2e", "agent": "tool-agent", "session": "default", "outcome": "completed",
               "stopReason": "end_turn"})
    );
    // The fake model quotes (the first 200 characters of) the tool result: read_file's JSON
    // envelope for facts.txt.
    let quoted = message
        .as_str()
        .unwrap()
        .strip_prefix("Final answer: the tool said ")
        .unwrap();
    assert!(
        quoted.starts_with(r#"{"data":{"content":"The answer is 42.\n""#),
        "{quoted}"
    );
    // Two turns of 10 input and 5 output tokens at $1 / $2 per million.
    assert_eq!(
        usage,
        json!({"input_tokens": 20, "output_tokens": 10, "cache_read_tokens": 0,
               "cache_write_tokens": 0, "cost_usd": 0.00004})
    );

    let requests = server.requests();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    for request in &requests {
        assert_eq!(request["path"], "/v1/chat/completions");
        assert_eq!(request["headers"]["authorization"], format!("Bearer {KEY}"));
        assert_eq!(request["body"]["model"], "fake-model");
        assert_eq!(request["body"]["stream"], true);
        assert_eq!(
            request["body"]["stream_options"],
            json!({"include_usage": true})
        );
    }
    let messages = requests[1]["body"]["messages"].as_array().unwrap();
    let call_id = messages[2]["tool_calls"][0]["id"].clone();
    assert_eq!(
        messages[2]["tool_calls"][0]["function"],
        json!({"name": "read_file", "arguments": "{\"path\":\"facts.txt\"}"})
    );
    assert_eq!(
        (&messages[3]["role"], &messages[3]["tool_call_id"]),
        (&json!("tool"), &call_id)
    );
    let sent: serde_json::Value =
        serde_json::from_str(messages[3]["content"].as_str().unwrap()).unwrap();
    assert_eq!(sent["data"]["content"], "The answer is 42.\n");

    let show = ws.flue(&["session", "show", "--id", "e2e", "--json"]);
    let roles: Vec<String> = json(&show)["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|message| message["role"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
    // The key is in no output and not in the stored conversation.
    for text in [stdout(&output), stderr(&output), stdout(&show)] {
        assert!(!text.contains(KEY), "{text}");
    }
    let db = std::fs::read(ws.db()).unwrap();
    assert!(!db.windows(KEY.len()).any(|window| window == KEY.as_bytes()));
}

#[test]
fn a_plain_reply_streams_to_stdout() {
    let server = FakeOpenAi::start();
    let ws = workspace(&server, &format!("FLUE_TEST_FAKE_KEY={KEY}\n"));
    let output = ws.flue(&["run", "plain-agent", "-m", "hi"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output), "Hello from the fake model.\n");
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn a_missing_key_fails_before_any_request_and_names_the_variable() {
    let server = FakeOpenAi::start();
    let ws = workspace(&server, "# no key here\n");
    let output = ws.flue(&["run", "plain-agent", "-m", "hi", "--json"]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let envelope = json(&output);
    assert_eq!(
        envelope["error"],
        json!({
            "kind": "missing_api_key",
            "message": "model provider \"fake\" needs an API key: set FLUE_TEST_FAKE_KEY in the \
                        environment or in .env",
        })
    );
    assert_eq!(envelope["outcome"], "error");
    assert_eq!(server.requests(), Vec::<Value>::new());
}

#[test]
fn the_model_flag_picks_a_built_in_provider_whose_url_and_key_come_from_the_environment() {
    let server = FakeOpenAi::start();
    let ws = workspace(&server, &format!("FLUE_TEST_FAKE_KEY={KEY}\n"));
    let output = flue_with_env(
        &ws,
        &[
            "run",
            "plain-agent",
            "-m",
            "hi",
            "--model",
            "openai/gpt-4.1",
        ],
        &[
            ("OPENAI_BASE_URL", server.base_url().as_str()),
            ("OPENAI_API_KEY", "sk-openai-test"),
        ],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output), "Hello from the fake model.\n");
    assert!(!stderr(&output).contains("warning"), "{}", stderr(&output));
    let requests = server.requests();
    assert_eq!(requests[0]["body"]["model"], "gpt-4.1");
    assert_eq!(requests[0]["body"]["max_completion_tokens"], 32768);
    assert_eq!(
        requests[0]["headers"]["authorization"],
        "Bearer sk-openai-test"
    );
}

#[test]
fn an_unknown_model_runs_on_defaults_with_a_warning() {
    let server = FakeOpenAi::start();
    let ws = workspace(&server, &format!("FLUE_TEST_FAKE_KEY={KEY}\n"));
    let output = ws.flue(&[
        "run",
        "plain-agent",
        "-m",
        "hi",
        "--model",
        "fake/other-model",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stderr(&output).contains(
            "warning: model \"other-model\" is not in the catalog of provider \"fake\"; using \
             conservative defaults (128000 tokens of context, 8192 output tokens, no reasoning, \
             no images, no price); describe it under [providers.fake.models.\"other-model\"] in \
             flue.toml"
        ),
        "{}",
        stderr(&output)
    );
    assert_eq!(server.requests()[0]["body"]["model"], "other-model");
}

#[test]
fn a_refusal_fails_the_run_with_exit_code_4_and_shows_in_json() {
    let server = FakeOpenAi::start();
    let ws = workspace(&server, &format!("FLUE_TEST_FAKE_KEY={KEY}\n"));
    let output = ws.flue(&["run", "plain-agent", "-m", "REFUSE please"]);
    assert_eq!(output.status.code(), Some(4), "{}", stderr(&output));
    assert!(
        stderr(&output).contains(
            "error: the model fake/fake-model refused to answer: I'm sorry, I can't help with that."
        ),
        "{}",
        stderr(&output)
    );
    assert!(output.stdout.is_empty());

    let output = ws.flue(&["run", "plain-agent", "-m", "REFUSE please", "--json"]);
    assert_eq!(output.status.code(), Some(4));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["outcome"], "failed");
    assert_eq!(json["error"]["kind"], "model_refusal");
    assert_eq!(json["stopReason"], "refusal");
    assert_eq!(json["refusal"], "I'm sorry, I can't help with that. ");

    let output = ws.flue(&["run", "plain-agent", "-m", "hi", "--json"]);
    assert!(output.status.success());
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["stopReason"], "end_turn");
}

#[test]
fn a_turn_that_fails_after_reporting_usage_counts_it_in_json_and_session_show() {
    // The server reports 10 + 5 tokens, streams "Partial", then an error object.
    let server = FakeOpenAi::start();
    let ws = workspace(&server, &format!("FLUE_TEST_FAKE_KEY={KEY}\n"));
    let output = ws.flue(&[
        "run",
        "plain-agent",
        "-m",
        "FAIL_AFTER_USAGE please",
        "--json",
        "--id",
        "failing",
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let envelope = json(&output);
    assert_eq!(envelope["outcome"], "failed");
    assert_eq!(envelope["error"]["kind"], "provider_error");
    // Text had been shown: one request, not retried.
    assert_eq!(server.requests().len(), 1);
    // $1 per million input tokens, $2 per million output tokens.
    assert_eq!(
        envelope["usage"],
        json!({"input_tokens": 10, "output_tokens": 5, "cache_read_tokens": 0,
               "cache_write_tokens": 0, "cost_usd": 2e-5})
    );
    let shown = stdout(&ws.flue(&["session", "show", "--id", "failing"]));
    assert!(
        shown.contains(
            "failed model turn (provider_error): model provider \"fake\" failed: The server \
             had an error while processing your request."
        ),
        "{shown}"
    );
    assert!(
        shown.contains("  [fake/fake-model: 10 input + 5 output tokens, $0.0000]")
            && shown.contains("conversation usage: 1 model turn, 10 input + 5 output tokens"),
        "{shown}"
    );
    let records = json(&ws.flue(&["session", "show", "--id", "failing", "--json"]));
    assert_eq!(records["messages"][1]["type"], "failed_turn");
    assert_eq!(records["messages"][1]["usage"]["input_tokens"], 10);
}

#[test]
fn a_misspelt_model_gets_a_did_you_mean_from_the_catalog() {
    let server = FakeOpenAi::start();
    let ws = workspace(&server, &format!("FLUE_TEST_FAKE_KEY={KEY}\n"));
    let output = ws.flue(&[
        "run",
        "plain-agent",
        "-m",
        "hi",
        "--model",
        "fake/fake-modle",
    ]);
    assert!(
        stderr(&output).contains(
            "warning: model \"fake-modle\" is not in the catalog of provider \"fake\" (did you \
             mean `fake/fake-model`?)"
        ),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_provider_table_error_is_reported_with_its_line() {
    let ws = Workspace::new(&[
        (
            "flue.toml",
            "[providers.local]\napi = \"openai-completions\"\nbase_url = \"localhost:8080\"\n",
        ),
        ("agents/a.md", "---\nmodel: local/m\n---\nHi.\n"),
    ]);
    let output = ws.flue(&["run", "a", "-m", "hi"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains(
            "flue.toml:3: base_url \"localhost:8080\" must be an http:// or https:// URL"
        ),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_broken_base_url_variable_is_reported_only_when_used() {
    let ws = Workspace::hello_world();
    // The scripted agent does not use OpenAI, so a bad OPENAI_BASE_URL does not matter to it.
    let ask = ["run", "hello", "-m", "What does the greeting file say?"];
    let fine = flue_with_env(&ws, &ask, &[("OPENAI_BASE_URL", "not a url")]);
    assert!(fine.status.success(), "{}", stderr(&fine));
    let mut with_model = ask.to_vec();
    with_model.extend(["--model", "openai/gpt-4.1", "--json"]);
    let output = flue_with_env(&ws, &with_model, &[("OPENAI_BASE_URL", "not a url")]);
    assert_eq!(output.status.code(), Some(1));
    let message = json(&output)["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains("base_url \"not a url\" is not a valid URL")
            && message.ends_with("(the URL comes from OPENAI_BASE_URL)"),
        "{message}"
    );
}

#[test]
fn a_dry_run_prints_the_system_prompt_the_model_gets_role_included() {
    let server = FakeOpenAi::start();
    let ws = workspace(&server, &format!("FLUE_TEST_FAKE_KEY={KEY}\n"));
    for (relative, content) in [
        (
            "agents/roled.md",
            "---\nmodel: fake/fake-model\nrole: terse\n---\nYou answer briefly.\n",
        ),
        (
            ".agents/roles/terse.md",
            "---\ndescription: Short answers\n---\nAnswer in five words at most.\n",
        ),
        (
            ".agents/roles/loud.md",
            "---\ndescription: Capitals\n---\nAnswer in capitals.\n",
        ),
    ] {
        let path = ws.root().join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    // The agent's default role, then one given for the run.
    for (extra, role) in [(&[][..], "terse"), (&["--role", "loud"][..], "loud")] {
        let mut dry = vec!["run", "roled", "--dry-run", "--json"];
        dry.extend(extra);
        let dry = ws.flue(&dry);
        assert!(dry.status.success(), "{}", stderr(&dry));
        let printed = json(&dry)["systemPrompt"].as_str().unwrap().to_owned();
        assert!(printed.contains(&format!("# Role: {role}")), "{printed}");

        let mut run = vec!["run", "roled", "-m", "hi"];
        run.extend(extra);
        let run = ws.flue(&run);
        assert!(run.status.success(), "{}", stderr(&run));
        let requests = server.requests();
        let sent = &requests.last().unwrap()["body"]["messages"][0];
        assert_eq!(sent["role"], "system", "{sent}");
        assert_eq!(sent["content"].as_str().unwrap(), printed);
    }
}
