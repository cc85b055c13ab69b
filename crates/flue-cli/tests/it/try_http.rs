//! Per-message choices over HTTP: a real `flue serve` on loopback, driven by the official
//! client (`@flue/sdk`, tests/peers/flue_sdk_try.mjs) and by plain fetch from Node. A message
//! picks its model, thinking level and role, runs a skill with arguments, or is a signal in a
//! role; the scripted models echo which model and level they were asked with, and a rule on
//! the system prompt answers in the role's voice. Choices the agent does not have are refused
//! naming the field, storing nothing; the choices are stored with the submission, so a server
//! killed with SIGKILL while the submission waits resumes it with the same ones.

use std::path::Path;
use std::process::Command;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::Workspace;
use crate::results_http::{wait_for_action, wait_settled};
use crate::serve::{Server, http};

/// The agent's own model: echoes what it was asked with; in the role, or running the skill,
/// it says so.
pub(crate) const MAIN: &str = r##"{"rules": [
  {"when": {"tool_result": "create_file"}, "reply": {"text": "created"}},
  {"when": {"user_matches": "^create a"}, "reply": {"tool_calls": [
    {"name": "create_file", "input": {"path": "a.txt", "content": "alpha\n"}}]}},
  {"when": {"user_matches": "^flaky"}, "reply": {"error": {"message": "connection reset"}}},
  {"when": {"user_matches": "^lookup"},
   "reply": {"tool_calls": [{"name": "lookup_order", "input": {"id": "A-1"}}]}},
  {"when": {"system_contains": "# Skill: summarize"},
   "reply": {"text": "main summarizes: {{user}}"}},
  {"when": {"system_contains": "# Role: pirate"},
   "reply": {"text": "main, as a pirate, thinking {{thinking}}: {{user}}"}},
  {"reply": {"text": "main ({{model}}), thinking {{thinking}}: {{user}}"}}
]}"##;

/// The other model a message may pick (another agent's).
pub(crate) const OTHER: &str = r##"{"rules": [
  {"when": {"user_matches": "^lookup"},
   "reply": {"tool_calls": [{"name": "lookup_order", "input": {"id": "A-1"}}]}},
  {"when": {"tool_result": "lookup_order", "system_contains": "# Role: pirate"},
   "reply": {"text": "other, as a pirate, thinking {{thinking}}: the order is {{tool_result.status}}"}},
  {"when": {"system_contains": "# Role: pirate"},
   "reply": {"text": "Arr, other ({{model}}), thinking {{thinking}}: {{user}}"}},
  {"reply": {"text": "other ({{model}}), thinking {{thinking}}: {{user}}"}}
]}"##;

fn workspace() -> Workspace {
    Workspace::new(&[
        ("main.json", MAIN),
        ("other.json", OTHER),
        (
            "agents/helper.md",
            "---\ndescription: Helps\nmodel: scripted/main.json\n---\nHelp.\n",
        ),
        (
            "agents/second.md",
            "---\ndescription: Another model\nmodel: scripted/other.json\n---\nHelp too.\n",
        ),
        (
            "agents/shop.md",
            "---\nmodel: scripted/main.json\ntools:\n  - name: lookup_order\n    description: Looks an order up\n    custom: true\n    input: { type: object, properties: { id: { type: string } }, required: [id] }\n---\nHelp customers.\n",
        ),
        (
            ".agents/roles/pirate.md",
            "---\ndescription: Talks like a pirate\n---\nTalk like a pirate.\n",
        ),
        (
            ".agents/skills/summarize/SKILL.md",
            "---\nname: summarize\ndescription: Summarizes a file\n---\nRead the file and summarize it.\n",
        ),
    ])
}

fn peers() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/peers")
}

/// Runs the peer script with `scenarios`; each scenario's facts, in order.
fn client(base: &str, scenarios: &[&str]) -> Vec<Value> {
    assert!(
        peers().join("node_modules/@flue/sdk").is_dir(),
        "the official client is missing: run tests/peers/install.sh"
    );
    let output = Command::new("node")
        .current_dir(peers())
        .arg("flue_sdk_try.mjs")
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

#[test]
fn a_message_picks_its_model_thinking_role_and_skill_from_the_official_client() {
    let workspace = workspace();
    let server = Server::start(workspace.root(), &[], &[]);
    let base = format!("http://{}", server.addr());
    let results = client(&base, &["sdkChoices", "sdkSkill", "fetchSignal"]);
    let log = server.log();

    let choices = &results[0];
    assert_eq!(
        choices["plain"], "main (main.json), thinking off: hello",
        "{choices}\n{log}"
    );
    assert_eq!(
        choices["chosen"],
        "Arr, other (other.json), thinking high: hello again"
    );
    assert_eq!(
        choices["after"], "main (main.json), thinking off: and now",
        "the choices apply to one message"
    );
    assert_eq!(
        choices["options"],
        json!({"model": "scripted/other.json", "thinking": "high", "role": "pirate"})
    );
    assert_eq!(choices["plainOptions"], Value::Null);

    let skill = &results[1];
    assert_eq!(
        skill["reply"],
        "main summarizes: Run the skill \"summarize\" with these arguments:\n{\n  \"depth\": 2,\n  \"file\": \"notes.md\"\n}",
        "{skill}"
    );
    assert_eq!(
        skill["options"],
        json!({"skill": "summarize", "args": {"file": "notes.md", "depth": 2}})
    );

    let signal = &results[2];
    assert_eq!(signal["admitted"], 202, "{signal}");
    assert_eq!(
        signal["reply"],
        "main, as a pirate, thinking off: <signal type=\"ci.failed\" branch=\"main\">\nbuild 7 is red\n</signal>"
    );
    assert_eq!(signal["options"], json!({"role": "pirate"}));
}

#[test]
fn choices_the_agent_does_not_have_are_refused_naming_the_field() {
    let workspace = workspace();
    let server = Server::start(workspace.root(), &[], &[]);
    let base = format!("http://{}", server.addr());
    let results = client(&base, &["refusals"]);
    let refused = &results[0];
    for (name, field) in [
        ("model", "model"),
        ("provider", "model"),
        ("role", "role"),
        ("skill", "skill"),
        ("thinking", "thinking"),
        ("args", "args"),
        ("signalSkill", "skill"),
        ("memory", "role"),
    ] {
        assert_eq!(refused[name]["status"], 400, "{name}: {refused}");
        assert_eq!(
            refused[name]["type"], "invalid_request",
            "{name}: {refused}"
        );
        let text = refused[name]["text"].as_str().unwrap();
        assert!(text.contains(&format!("`{field}`")), "{name}: {text}");
    }
    // What there is, named with the refusal.
    let role = refused["role"]["text"].as_str().unwrap();
    assert!(role.contains("pirate"), "{role}");
    let skill = refused["skill"]["text"].as_str().unwrap();
    assert!(skill.contains("summarize"), "{skill}");
    let thinking = refused["thinking"]["text"].as_str().unwrap();
    assert!(thinking.contains("xhigh"), "{thinking}");
    assert_eq!(refused["created"], 404, "a refused message creates nothing");
    assert_eq!(
        refused["memoryAfter"], 202,
        "a refused message bound no memory subject: {refused}"
    );
}

/// The choices are stored with the submission: a server killed with SIGKILL while the
/// submission waits on a custom tool, restarted, resumes it with the same model, role and
/// thinking level.
#[test]
fn the_choices_survive_a_kill_9_while_the_submission_waits() {
    let workspace = workspace();
    let mut server = Server::start(workspace.root(), &[], &[]);
    let (status, body) = http(
        server.addr(),
        "POST",
        "/agents/shop/k9",
        &[("content-type", "application/json")],
        &json!({"kind": "user", "body": "lookup A-1", "model": "scripted/other.json",
                "role": "pirate", "thinking": "low"})
        .to_string(),
    );
    assert_eq!(status, 202, "{body}");
    let submission = serde_json::from_str::<Value>(&body).unwrap()["submissionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let action_id = wait_for_action(server.addr(), "/agents/shop/k9");
    server.kill9();

    let server = Server::start(workspace.root(), &[], &[]);
    let (status, body) = http(
        server.addr(),
        "POST",
        &format!("/agents/shop/k9/actions/{action_id}"),
        &[("content-type", "application/json")],
        &json!({"decision": "result", "value": {"status": "shipped"}}).to_string(),
    );
    assert_eq!(status, 202, "{body}");
    wait_settled(server.addr(), "/agents/shop/k9", &submission);
    let (_, body) = http(server.addr(), "GET", "/agents/shop/k9", &[], "");
    let snapshot: Value = serde_json::from_str(&body).unwrap();
    let reply = snapshot["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rfind(|message| message["role"] == "assistant")
        .unwrap();
    let text: String = reply["parts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|part| part["type"] == "text")
        .map(|part| part["text"].as_str().unwrap())
        .collect();
    assert_eq!(
        text, "other, as a pirate, thinking low: the order is shipped",
        "{snapshot:#}"
    );
}
