//! Structured results and custom tools over HTTP: a real `flue serve` on loopback, driven by
//! the official client (`@flue/sdk`, tests/peers/flue_sdk_results.mjs) and by plain fetch from
//! Node. The settlement carries the validated `data` (also after a kill -9 and a restart: the
//! schema is stored with the submission); a custom tool declared in an agent file pauses the
//! submission until a result that matches its output schema is posted.

use std::path::Path;
use std::process::Command;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::Workspace;
use crate::serve::{Server, http};

const SCRIPT: &str = r#"{"rules": [
  {"when": {"user_matches": "^review"},
   "reply": {"text": "Reviewing.", "tool_calls": [{"name": "finish", "input": {"verdict": "ok", "score": 9}}]}},
  {"when": {"user_matches": "^Deliver your answer"},
   "reply": {"tool_calls": [{"name": "finish", "input": {"verdict": "late"}}]}},
  {"when": {"user_matches": "^hopeless"},
   "reply": {"tool_calls": [{"name": "give_up", "input": {"reason": "nothing to review"}}]}},
  {"when": {"tool_result": "lookup_order"},
   "reply": {"text": "The order is {{tool_result.status}}."}},
  {"when": {"user_matches": "^lookup"},
   "reply": {"tool_calls": [{"name": "lookup_order", "input": {"id": "A-1"}}]}},
  {"reply": {"text": "just talking"}}
]}"#;

fn workspace() -> Workspace {
    Workspace::new(&[
        ("flue.toml", "[defaults]\nmodel = \"scripted/s.json\"\n"),
        ("s.json", SCRIPT),
        ("agents/plain.md", "---\ndescription: Answers\n---\nWork.\n"),
        (
            "agents/reviewer.md",
            "---\nresult: ../schemas/verdict.json\n---\nReview.\n",
        ),
        (
            "schemas/verdict.json",
            r#"{"type": "object", "properties": {"verdict": {"type": "string"}, "score": {"type": "integer"}}, "required": ["verdict", "score"]}"#,
        ),
        (
            "agents/shop.md",
            "---\ntools:\n  - name: lookup_order\n    description: Looks an order up in the back office\n    custom: true\n    input: { type: object, properties: { id: { type: string } }, required: [id] }\n    output:\n      type: object\n      properties: { status: { type: string } }\n      required: [status]\n---\nHelp customers.\n",
        ),
    ])
}

fn peers() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/peers")
}

/// Runs the results peer script with `scenarios`; each scenario's facts, by name.
fn client(base: &str, scenarios: &[&str]) -> Vec<Value> {
    assert!(
        peers().join("node_modules/@flue/sdk").is_dir(),
        "the official client is missing: run tests/peers/install.sh"
    );
    let output = Command::new("node")
        .current_dir(peers())
        .arg("flue_sdk_results.mjs")
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

fn by_name<'a>(results: &'a [Value], name: &str) -> &'a Value {
    results
        .iter()
        .find(|result| result["scenario"] == name)
        .unwrap()
}

#[test]
fn structured_results_over_http_from_the_official_client_and_fetch() {
    let workspace = workspace();
    let server = Server::start(workspace.root(), &[], &[]);
    let base = format!("http://{}", server.addr());
    let results = client(
        &base,
        &[
            "sdkResult",
            "sdkGiveUp",
            "agentResult",
            "fetchResult",
            "refusals",
        ],
    );
    let log = server.log();

    let sdk = by_name(&results, "sdkResult");
    assert_eq!(sdk["settlement"]["outcome"], "completed", "{sdk}\n{log}");
    assert_eq!(
        sdk["settlement"]["data"],
        json!({"verdict": "ok", "score": 9})
    );
    assert_eq!(sdk["status"]["state"], "settled");
    assert_eq!(sdk["status"]["data"], json!({"verdict": "ok", "score": 9}));

    let gave_up = by_name(&results, "sdkGiveUp");
    assert_eq!(gave_up["failure"]["failure"], "failed", "{gave_up}");
    assert_eq!(gave_up["failure"]["type"], "result_unavailable");
    assert!(
        gave_up["failure"]["message"]
            .as_str()
            .unwrap()
            .contains("nothing to review"),
        "{gave_up}"
    );
    assert!(gave_up["settlement"].get("data").is_none(), "{gave_up}");

    let agent = by_name(&results, "agentResult");
    assert_eq!(
        agent["settlement"]["data"],
        json!({"verdict": "ok", "score": 9}),
        "{agent}"
    );
    assert_eq!(agent["listed"]["required"], json!(["verdict", "score"]));

    let fetched = by_name(&results, "fetchResult");
    assert_eq!(fetched["admitted"], 202);
    assert_eq!(
        fetched["status"]["data"],
        json!({"verdict": "ok", "score": 9})
    );
    assert_eq!(
        fetched["chunk"],
        json!({"outcome": "completed", "data": {"verdict": "ok", "score": 9}})
    );

    let refused = by_name(&results, "refusals");
    for name in ["badSchema", "notObject", "onSignal"] {
        assert_eq!(refused[name]["status"], 400, "{name}: {refused}");
        assert_eq!(
            refused[name]["type"], "invalid_request",
            "{name}: {refused}"
        );
        assert!(
            refused[name]["details"]
                .as_str()
                .unwrap()
                .contains("result"),
            "{name}: {refused}"
        );
    }
    assert_eq!(refused["created"], 404, "a refused message creates nothing");
}

#[test]
fn custom_tools_declared_in_an_agent_file_are_answered_over_http() {
    let workspace = workspace();
    let server = Server::start(workspace.root(), &[], &[]);
    let base = format!("http://{}", server.addr());
    let results = client(&base, &["customSdk", "customFetch"]);

    let sdk = by_name(&results, "customSdk");
    assert_eq!(
        sdk["action"],
        json!({
            "kind": "custom_tool",
            "toolName": "lookup_order",
            "input": {"id": "A-1"},
            "outputSchema": {"type": "object", "properties": {"status": {"type": "string"}}, "required": ["status"]}
        }),
        "{sdk}"
    );
    assert_eq!(sdk["waiting"], "waiting");
    assert_eq!(
        sdk["part"],
        json!({"state": "pending", "kind": "custom_tool"})
    );
    assert_eq!(sdk["wrong"]["status"], 400, "{sdk}");
    assert_eq!(sdk["wrong"]["type"], "invalid_request");
    let text = sdk["wrong"]["text"].as_str().unwrap();
    assert!(text.contains("\"status\""), "{text}");
    assert!(text.contains("output schema"), "{text}");
    assert_eq!(sdk["stillPending"], true);
    assert_eq!(sdk["right"], 202);
    assert_eq!(sdk["reply"], "The order is shipped.");

    let fetched = by_name(&results, "customFetch");
    assert_eq!(
        fetched,
        &json!({"scenario": "customFetch", "ok": true, "right": 202, "outcome": "completed",
                "reply": "The order is packed."})
    );
}

/// The schema is stored with the submission: a server killed with SIGKILL while the
/// submission waits on a custom tool, restarted, still settles it with validated data.
#[test]
fn a_result_schema_survives_a_kill_9_while_the_submission_waits() {
    let workspace = workspace();
    let mut server = Server::start(workspace.root(), &[], &[]);
    let schema = json!({"type": "object", "properties": {"verdict": {"type": "string"}},
                        "required": ["verdict"]});
    let (status, body) = http(
        server.addr(),
        "POST",
        "/agents/shop/k9",
        &[("content-type", "application/json")],
        &json!({"kind": "user", "body": "lookup then review", "result": schema}).to_string(),
    );
    assert_eq!(status, 202, "{body}");
    let submission = serde_json::from_str::<Value>(&body).unwrap()["submissionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let action_id = wait_for_action(server.addr(), "/agents/shop/k9");
    server.kill9();

    let server = Server::start(workspace.root(), &[], &[]);
    // The reply to the tool result only talks; the stored schema makes the runtime remind the
    // model to deliver, which it then does: without the schema it would settle with the text.
    let (status, body) = http(
        server.addr(),
        "POST",
        &format!("/agents/shop/k9/actions/{action_id}"),
        &[("content-type", "application/json")],
        &json!({"decision": "result", "value": {"status": "sent"}}).to_string(),
    );
    assert_eq!(status, 202, "{body}");
    let settled = wait_settled(server.addr(), "/agents/shop/k9", &submission);
    assert_eq!(settled["outcome"], "completed", "{settled}");
    assert_eq!(settled["data"], json!({"verdict": "late"}), "{settled}");
}

/// Waits for the conversation at `path` to have a pending action; returns its id.
pub(crate) fn wait_for_action(addr: &str, path: &str) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let (status, body) = http(addr, "GET", &format!("{path}/actions"), &[], "");
        if status == 200 {
            let listed: Value = serde_json::from_str(&body).unwrap();
            if let Some(action) = listed["actions"]
                .as_array()
                .and_then(|actions| actions.iter().find(|action| action["state"] == "pending"))
            {
                return action["actionId"].as_str().unwrap().to_owned();
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no pending action: {body}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Waits for `submission` to settle; returns its status.
pub(crate) fn wait_settled(addr: &str, path: &str, submission: &str) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let (_, body) = http(
            addr,
            "GET",
            &format!("{path}/submissions/{submission}"),
            &[],
            "",
        );
        let status: Value = serde_json::from_str(&body).unwrap_or_default();
        if status["state"] == "settled" {
            return status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never settled: {body}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
