//! Budgets in real `flue` processes on the scripted model, which reports token usage and, with
//! a `price`, its cost (docs/scripted-model.md): a submission budget from the agent file, a
//! conversation budget from flags across processes (summed from the stored log), a cost budget
//! from flue.toml's `[defaults.budget]`, and a message's `budget` over HTTP. Each settles the
//! submission with `budget_exceeded` naming the limit, and no model call follows.

use pretty_assertions::assert_eq;
use serde_json::Value;

use crate::serve::{Server, http};
use crate::{Workspace, json, stderr};

/// `loop` keeps calling `bash` for ever; anything else is answered at once. The price makes
/// each turn cost about a cent (the scripted model counts a token per four characters).
fn workspace(agent_budget: &str, flue_toml: &str) -> Workspace {
    let script = serde_json::json!({
        "model": {"price": {"input": 100.0, "output": 100.0}},
        "rules": [
            {"when": {"tool_result": "bash"},
             "reply": {"tool_calls": [{"name": "bash", "input": {"command": "echo again"}}]}},
            {"when": {"user_matches": "^loop$"},
             "reply": {"tool_calls": [{"name": "bash", "input": {"command": "echo again"}}]}},
            {"reply": {"text": "hello"}}
        ]
    })
    .to_string();
    Workspace::new(&[
        (
            "agents/looper.md",
            &format!("---\nmodel: scripted/s.json\ntools: [bash]\n{agent_budget}---\nWork.\n"),
        ),
        ("s.json", &script),
        ("flue.toml", flue_toml),
    ])
}

/// The stored assistant turns of conversation `id` and their costs.
fn turns(workspace: &Workspace, id: &str) -> Vec<f64> {
    let shown = workspace.flue(&["session", "show", "--id", id, "--json"]);
    assert_eq!(shown.status.code(), Some(0), "{}", stderr(&shown));
    json(&shown)["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|message| message["role"] == "assistant")
        .map(|message| message["usage"]["cost_usd"].as_f64().unwrap_or(0.0))
        .collect()
}

#[test]
fn a_submission_budget_from_the_agent_file_stops_before_the_next_model_call() {
    let workspace = workspace("budget:\n  max_turns: 3\n", "");
    let out = workspace.flue(&["run", "looper", "-m", "loop", "--id", "a", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let envelope = json(&out);
    assert_eq!(envelope["error"]["kind"], "budget_exceeded", "{envelope}");
    let message = envelope["error"]["message"].as_str().unwrap();
    assert!(
        message
            .starts_with("the submission budget max_turns = 3 is used up (3 model calls reached)"),
        "{message}"
    );
    // The key it names is the one flue.toml takes (flue.toml rejects a top-level `[budget]`).
    assert!(
        message.contains("`[defaults.budget]` in flue.toml"),
        "{message}"
    );
    // Three model calls, each answered by its tool; no fourth.
    assert_eq!(turns(&workspace, "a").len(), 3);
    // A flag replaces the file's limit for its message.
    let out = workspace.flue(&[
        "run",
        "looper",
        "-m",
        "loop",
        "--id",
        "b",
        "--max-turns",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("max_turns = 1"), "{}", stderr(&out));
    assert_eq!(turns(&workspace, "b").len(), 1);
}

#[test]
fn a_conversation_budget_counts_what_earlier_processes_stored() {
    let workspace = workspace("", "");
    let run = |text: &str| {
        workspace.flue(&[
            "run",
            "looper",
            "-m",
            text,
            "--id",
            "c",
            "--conversation-max-turns",
            "2",
            "--json",
        ])
    };
    for _ in 0..2 {
        let out = run("hi");
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    let out = run("hi");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let envelope = json(&out);
    assert_eq!(envelope["error"]["kind"], "budget_exceeded");
    assert!(
        envelope["error"]["message"].as_str().unwrap().starts_with(
            "the conversation budget max_turns = 2 is used up (2 model calls reached)"
        ),
        "{envelope}"
    );
    assert_eq!(turns(&workspace, "c").len(), 2);
}

#[test]
fn a_cost_budget_from_flue_toml_lets_the_crossing_turn_finish_and_makes_no_further_call() {
    let workspace = workspace("", "[defaults.budget]\nmax_cost_usd = 0.05\n");
    let out = workspace.flue(&["run", "looper", "-m", "loop", "--id", "d", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let envelope = json(&out);
    assert_eq!(envelope["error"]["kind"], "budget_exceeded");
    let message = envelope["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("the submission budget max_cost_usd = 0.05 USD is used up ("),
        "{message}"
    );
    let costs = turns(&workspace, "d");
    let total: f64 = costs.iter().sum();
    let before_last: f64 = costs[..costs.len() - 1].iter().sum();
    // The provider's figures: every turn priced; the last call started under the limit and
    // the one after it was never made.
    assert!(costs.iter().all(|cost| *cost > 0.0), "{costs:?}");
    assert!(before_last < 0.05 && total >= 0.05, "{costs:?}");
    assert!(
        message.contains(&format!("({total:.6} USD reached)")),
        "{message} {costs:?}"
    );
    // An invalid budget is refused at load, naming the field.
    let bad = Workspace::new(&[(
        "agents/bad.md",
        "---\nmodel: scripted/s.json\nbudget:\n  conversation:\n    max_cost_usd: -1\n---\nx\n",
    )]);
    let out = bad.flue(&["run", "bad", "-m", "hi"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("budget.conversation.max_cost_usd"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_messages_budget_over_http_settles_it_with_budget_exceeded() {
    let workspace = workspace("", "");
    let server = Server::start(workspace.root(), &[], &[]);
    let addr = server.addr().to_owned();
    let (status, body) = http(
        &addr,
        "POST",
        "/agents/looper/h",
        &[("content-type", "application/json")],
        r#"{"kind": "user", "body": "loop", "budget": {"maxTurns": 2}}"#,
    );
    assert_eq!(status, 202, "{body}");
    let admitted: Value = serde_json::from_str(&body).unwrap();
    let submission = admitted["submissionId"].as_str().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let settled = loop {
        let (_, body) = http(
            &addr,
            "GET",
            &format!("/agents/looper/h/submissions/{submission}"),
            &[],
            "",
        );
        let status: Value = serde_json::from_str(&body).unwrap();
        if status["state"] == "settled" {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "{status}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(settled["outcome"], "failed", "{settled}");
    assert_eq!(settled["error"]["type"], "budget_exceeded", "{settled}");
    assert!(
        settled["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_turns = 2"),
        "{settled}"
    );
    // A malformed budget is refused before anything is stored.
    let (status, body) = http(
        &addr,
        "POST",
        "/agents/looper/h2",
        &[("content-type", "application/json")],
        r#"{"kind": "user", "body": "loop", "budget": {"maxCostUsd": 0}}"#,
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("budget.maxCostUsd"), "{body}");
    drop(server);
    assert_eq!(turns(&workspace, "h").len(), 2);
}

#[test]
fn chat_applies_the_budget_flags_to_every_message() {
    let workspace = workspace("", "");
    let output = assert_cmd::Command::cargo_bin("flue")
        .unwrap()
        .env("FLUE_TRUST", "1")
        .args(["chat", "looper", "--id", "ch", "--max-turns", "1", "--root"])
        .arg(workspace.root())
        .write_stdin("loop\nhi\n")
        .output()
        .unwrap();
    let err = stderr(&output);
    assert!(
        err.contains("the submission budget max_turns = 1 is used up (1 model call reached)"),
        "{err}"
    );
    // The chat goes on: the next message has a budget of its own, and one call is enough.
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("hello"),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    assert_eq!(turns(&workspace, "ch").len(), 2);
}

/// A message's budget is stored with it and counts its turns across a pause: the second
/// process, which confirms the paused call and resumes the submission, finds the one allowed
/// model call spent before the pause and makes no other.
#[test]
fn a_submission_budget_holds_across_a_pause_resumed_by_another_process() {
    let script = serde_json::json!({"rules": [
        {"when": {"tool_result": "bash"}, "reply": {"text": "done"}},
        {"reply": {"tool_calls": [{"name": "bash", "input": {"command": "echo made"}}]}}
    ]})
    .to_string();
    let workspace = Workspace::new(&[
        (
            "agents/careful.md",
            "---\nmodel: scripted/s.json\ntools: [bash]\npermissions:\n  bash: always_ask\n---\nWork.\n",
        ),
        ("s.json", &script),
    ]);
    let paused = workspace.flue(&[
        "run",
        "careful",
        "-m",
        "go",
        "--id",
        "p",
        "--max-turns",
        "1",
        "--json",
    ]);
    assert_eq!(paused.status.code(), Some(3), "{}", stderr(&paused));
    let action = json(&paused)["pendingActions"][0]["action_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let resumed = workspace.flue(&[
        "run",
        "careful",
        "--id",
        "p",
        "--confirm",
        &action,
        "--json",
    ]);
    assert_eq!(resumed.status.code(), Some(1), "{}", stderr(&resumed));
    let envelope = json(&resumed);
    assert_eq!(envelope["error"]["kind"], "budget_exceeded", "{envelope}");
    assert!(
        envelope["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("the submission budget max_turns = 1 is used up (1 model call reached)"),
        "{envelope}"
    );
    assert_eq!(turns(&workspace, "p").len(), 1);
}
