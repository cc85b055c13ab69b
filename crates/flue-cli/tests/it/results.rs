//! Structured results and custom tools without Rust, through the real `flue` binary on the
//! scripted model: `flue run --result SCHEMA` (a file or inline), `result:` in agent and skill
//! files, the model's retries and give-up, and custom tools declared in an agent file answered
//! with `--confirm ID --result JSON` or at a pseudo-terminal.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::json as j;

use crate::{Workspace, json, stderr, stdout};

const VERDICT_SCHEMA: &str = r#"{
  "type": "object",
  "properties": {
    "verdict": {"type": "string", "enum": ["ok", "bad"]},
    "score": {"type": "integer"}
  },
  "required": ["verdict", "score"],
  "additionalProperties": false
}"#;

/// `review` finishes at once; `retry` first sends a score that is not an integer, then a
/// valid one; `hopeless` gives up; `chat` only talks.
fn script() -> String {
    j!({"rules": [
        {"when": {"user_matches": "^review"},
         "reply": {"text": "Looking.", "tool_calls": [{"name": "finish", "input": {"verdict": "ok", "score": 7}}]}},
        {"when": {"user_matches": "^retry", "tool_result": "finish", "turn": 2},
         "reply": {"tool_calls": [{"name": "finish", "input": {"verdict": "bad", "score": 2}}]}},
        {"when": {"user_matches": "^retry"},
         "reply": {"tool_calls": [{"name": "finish", "input": {"verdict": "bad", "score": "two"}}]}},
        {"when": {"user_matches": "^Run the skill \"review\""},
         "reply": {"tool_calls": [{"name": "finish", "input": {"verdict": "ok", "score": 1}}]}},
        {"when": {"user_matches": "^hopeless"},
         "reply": {"tool_calls": [{"name": "give_up", "input": {"reason": "no diff to review"}}]}},
        {"when": {"tool_result": "lookup_order"},
         "reply": {"text": "The order is {{tool_result.status}}."}},
        {"when": {"user_matches": "^lookup"},
         "reply": {"tool_calls": [{"name": "lookup_order", "input": {"id": "A-1"}}]}},
        {"reply": {"text": "just talking"}}
    ]})
    .to_string()
}

fn workspace(extra: &[(&str, &str)]) -> Workspace {
    let script = script();
    let mut files: Vec<(&str, &str)> = vec![
        (
            "agents/plain.md",
            "---\nmodel: scripted/s.json\n---\nWork.\n",
        ),
        ("s.json", &script),
        ("schemas/verdict.json", VERDICT_SCHEMA),
    ];
    files.extend_from_slice(extra);
    Workspace::new(&files)
}

#[test]
fn run_result_prints_the_validated_json_and_json_puts_it_under_data() {
    let workspace = workspace(&[]);
    let schema = workspace.root().join("schemas/verdict.json");
    let schema = schema.to_str().unwrap();

    let out = workspace.flue(&["run", "plain", "-m", "review", "--result", schema]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let printed: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(printed, j!({"verdict": "ok", "score": 7}));

    let out = workspace.flue(&["run", "plain", "-m", "review", "--result", schema, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let envelope = json(&out);
    assert_eq!(envelope["outcome"], "completed");
    assert_eq!(envelope["data"], j!({"verdict": "ok", "score": 7}));

    // Inline, and retried: the invalid first delivery is a tool error the model sees.
    let out = workspace.flue(&[
        "run",
        "plain",
        "-m",
        "retry",
        "--result",
        VERDICT_SCHEMA,
        "--json",
        "--id",
        "r1",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(json(&out)["data"], j!({"verdict": "bad", "score": 2}));
    let shown = workspace.flue(&["session", "show", "--id", "r1", "--json"]);
    let shown = stdout(&shown);
    assert!(shown.contains("invalid input for finish"), "{shown}");

    // Without --result the same agent answers in text.
    let out = workspace.flue(&["run", "plain", "-m", "chat"]);
    assert_eq!(stdout(&out), "just talking\n");
}

#[test]
fn a_model_that_gives_up_fails_the_run_with_result_unavailable() {
    let workspace = workspace(&[]);
    let out = workspace.flue(&[
        "run",
        "plain",
        "-m",
        "hopeless",
        "--result",
        VERDICT_SCHEMA,
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let envelope = json(&out);
    assert_eq!(envelope["outcome"], "failed");
    assert_eq!(envelope["error"]["kind"], "result_unavailable");
    assert!(
        envelope["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no diff to review"),
        "{envelope}"
    );
    assert!(envelope.get("data").is_none(), "{envelope}");

    let out = workspace.flue(&["run", "plain", "-m", "hopeless", "--result", VERDICT_SCHEMA]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout(&out), "");
    assert!(stderr(&out).contains("result"), "{}", stderr(&out));
}

#[test]
fn a_bad_result_flag_is_refused_before_anything_runs() {
    let workspace = workspace(&[]);
    let out = workspace.flue(&["run", "plain", "-m", "review", "--result", "missing.json"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("--result missing.json"),
        "{}",
        stderr(&out)
    );
    let out = workspace.flue(&[
        "run",
        "plain",
        "-m",
        "review",
        "--result",
        r#"{"type": 12}"#,
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        json(&out)["error"]["message"]
            .as_str()
            .unwrap()
            .contains("invalid JSON Schema"),
        "{}",
        stdout(&out)
    );
    assert!(
        !workspace.db().exists(),
        "nothing is stored for a refused flag"
    );
}

#[test]
fn result_in_an_agent_file_names_a_schema_file_or_is_inline() {
    let workspace = workspace(&[
        (
            "agents/reviewer.md",
            "---\nmodel: scripted/s.json\nresult: ../schemas/verdict.json\n---\nReview.\n",
        ),
        (
            "agents/inline.md",
            "---\nmodel: scripted/s.json\nresult:\n  type: object\n  properties:\n    verdict: { type: string }\n    score: { type: integer }\n  required: [verdict]\n---\nReview.\n",
        ),
    ]);
    let out = workspace.flue(&["run", "reviewer", "-m", "review"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let printed: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(printed, j!({"verdict": "ok", "score": 7}));
    let out = workspace.flue(&["run", "inline", "-m", "review", "--json"]);
    assert_eq!(json(&out)["data"], j!({"verdict": "ok", "score": 7}));
    // The model that only talks is reminded, then the run fails after the reminders.
    let out = workspace.flue(&["run", "reviewer", "-m", "chat", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(json(&out)["error"]["kind"], "result_unavailable");
}

#[test]
fn a_bad_result_schema_in_an_agent_file_fails_the_build_naming_file_and_field() {
    let workspace = workspace(&[
        (
            "agents/broken.md",
            "---\nmodel: scripted/s.json\nresult:\n  type: objekt\n---\nReview.\n",
        ),
        (
            "agents/missing.md",
            "---\nmodel: scripted/s.json\nresult: nowhere.json\n---\nReview.\n",
        ),
        ("schemas/notjson.json", "type: object"),
        (
            "agents/outside.md",
            "---\nmodel: scripted/s.json\nresult: ../../verdict.json\n---\nReview.\n",
        ),
        (
            "agents/notjson.md",
            "---\nmodel: scripted/s.json\nresult: ../schemas/notjson.json\n---\nReview.\n",
        ),
    ]);
    let out = workspace.flue(&["build"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(err.contains("agents/broken.md:3"), "{err}");
    assert!(
        err.contains("`result` is not a usable JSON Schema"),
        "{err}"
    );
    assert!(err.contains("agents/missing.md:3"), "{err}");
    assert!(err.contains("agents/nowhere.json"), "{err}");
    assert!(err.contains("agents/notjson.md:3"), "{err}");
    assert!(err.contains("is not JSON"), "{err}");
    assert!(err.contains("agents/outside.md:3"), "{err}");
    assert!(err.contains("leads outside the workspace"), "{err}");
}

#[test]
fn result_in_a_skill_file_shapes_the_skill_run() {
    let workspace = workspace(&[(
        ".agents/skills/review.md",
        "---\nname: review\ndescription: Reviews a change\nresult: ../../schemas/verdict.json\n---\nReview the change.\n",
    )]);
    let out = workspace.flue(&["run", "plain", "--skill", "review", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(json(&out)["data"], j!({"verdict": "ok", "score": 1}));
    let out = workspace.flue(&["run", "plain", "--skill", "review"]);
    let printed: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(printed, j!({"verdict": "ok", "score": 1}));
}

/// An agent with a custom tool declared in its file, with an output schema.
fn custom_tool_workspace() -> Workspace {
    workspace(&[(
        "agents/shop.md",
        "---\nmodel: scripted/s.json\ntools:\n  - name: lookup_order\n    description: Looks an order up in the back office\n    custom: true\n    input: { type: object, properties: { id: { type: string } }, required: [id] }\n    output:\n      type: object\n      properties: { status: { type: string } }\n      required: [status]\n---\nHelp customers.\n",
    )])
}

#[test]
fn a_custom_tool_in_an_agent_file_pauses_and_confirm_result_answers_it() {
    let workspace = custom_tool_workspace();
    let paused = workspace.flue(&["run", "shop", "-m", "lookup", "--id", "o1", "--json"]);
    assert_eq!(paused.status.code(), Some(3), "{}", stderr(&paused));
    let envelope = json(&paused);
    assert_eq!(envelope["outcome"], "requires_action");
    let action = &envelope["pendingActions"][0];
    assert_eq!(action["kind"], "custom_tool");
    assert_eq!(action["tool_name"], "lookup_order");
    assert_eq!(action["input"], j!({"id": "A-1"}));
    assert_eq!(action["output_schema"]["required"], j!(["status"]));
    let action_id = action["action_id"].as_str().unwrap().to_owned();

    let hint = workspace.flue(&["run", "shop", "-m", "lookup", "--id", "o2"]);
    assert!(
        stderr(&hint).contains("--confirm") && stderr(&hint).contains("--result JSON"),
        "{}",
        stderr(&hint)
    );

    // A result the output schema refuses: named, and nothing is lost.
    let wrong = workspace.flue(&[
        "run",
        "shop",
        "--id",
        "o1",
        "--confirm",
        &action_id,
        "--result",
        r#"{"state": "shipped"}"#,
        "--json",
    ]);
    assert_eq!(wrong.status.code(), Some(1), "{}", stderr(&wrong));
    let error = &json(&wrong)["error"];
    assert_eq!(error["kind"], "invalid_decision");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("status"), "{message}");
    assert!(message.contains("output schema"), "{message}");

    let answered = workspace.flue(&[
        "run",
        "shop",
        "--id",
        "o1",
        "--confirm",
        &action_id,
        "--result",
        r#"{"status": "shipped"}"#,
    ]);
    assert_eq!(answered.status.code(), Some(0), "{}", stderr(&answered));
    assert_eq!(stdout(&answered), "The order is shipped.\n");
}

#[test]
fn a_custom_tool_without_its_keys_fails_the_build() {
    let workspace = workspace(&[(
        "agents/shop.md",
        "---\nmodel: scripted/s.json\ntools:\n  - name: lookup_order\n    custom: true\n    command: echo hi\n    output: { type: 3 }\n---\nHelp.\n",
    )]);
    let out = workspace.flue(&["build"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("agents/shop.md"), "{err}");
    assert!(err.contains("a custom tool needs `description`"), "{err}");
    assert!(err.contains("runs no command: remove `command`"), "{err}");
    assert!(err.contains("`output`"), "{err}");
}

#[test]
fn on_a_terminal_the_person_types_the_custom_tools_result() {
    let workspace = custom_tool_workspace();
    let pty = nix::pty::openpty(None, None).unwrap();
    let child = Command::new(assert_cmd::cargo::cargo_bin("flue"))
        .env("FLUE_TRUST", "1")
        .args(["run", "shop", "-m", "lookup", "--root"])
        .arg(workspace.root())
        .env_remove("FLUE_LOG")
        .stdin(Stdio::from(pty.slave.try_clone().unwrap()))
        .stderr(Stdio::from(pty.slave))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut master = std::fs::File::from(pty.master);
    let mut reader = master.try_clone().unwrap();
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buffer = [0u8; 4096];
        while let Ok(n) = reader.read(&mut buffer) {
            if n == 0 || sender.send(buffer[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut shown = String::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let wait_for = |shown: &mut String, text: &str| {
        while !shown.contains(text) {
            let chunk = receiver
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|_| {
                    panic!("the terminal never showed {text:?}; it showed: {shown}")
                });
            shown.push_str(&String::from_utf8_lossy(&chunk));
        }
    };
    wait_for(&mut shown, "result as JSON");
    assert!(shown.contains("lookup_order wants to run:"), "{shown}");
    master.write_all(b"{\"status\": \"packed\"}\n").unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{shown}");
    assert_eq!(stdout(&output), "The order is packed.\n");
}

#[test]
fn a_bundle_carries_the_result_schema_file() {
    let source = workspace(&[(
        "agents/reviewer.md",
        "---\nmodel: scripted/s.json\nresult: ../schemas/verdict.json\n---\nReview.\n",
    )]);
    let built = source.flue(&["build"]);
    assert!(built.status.success(), "{}", stderr(&built));
    let project = Workspace::new(&[]);
    let bundle = project.root().join("app.bundle.json");
    std::fs::copy(source.root().join("dist/flue-bundle.json"), &bundle).unwrap();
    drop(source);
    let out = project.flue(&[
        "run",
        "--bundle",
        bundle.to_str().unwrap(),
        "reviewer",
        "-m",
        "review",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(json(&out)["data"], j!({"verdict": "ok", "score": 7}));
}
