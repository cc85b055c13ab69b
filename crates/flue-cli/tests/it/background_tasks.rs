//! Background tasks as a model and a person use them, on `flue serve`: the model waits for
//! one (`task_wait`), checks and cancels another (`task_status`, `task_cancel`); a person
//! lists and cancels them over HTTP and sees them with their state in `flue session show
//! --tree`. Every result reaches the parent as one `task_result` message.

use serde_json::{Value, json};

use crate::Workspace;
use crate::crash_history::{Db, wait_settled};
use crate::serve::{Server, http};

/// `boss` answers `wait`, `cancel` and `hold` by starting a background task of `worker`:
/// `quick` answers at once, `gated` runs a command that waits for a file nobody writes.
pub(crate) fn workspace() -> Workspace {
    workspace_with(&[])
}

/// [`workspace`] with more files (a flue.toml).
fn workspace_with(extra: &[(&str, &str)]) -> Workspace {
    let task = |prompt: &str| {
        json!({"tool_calls": [{"name": "task", "input": {"agent": "worker",
            "prompt": prompt, "background": true}}]})
    };
    let id = "{{tool_result.task_id}}";
    let rules = json!([
        {"when": {"user_contains": "<task_result"},
         "reply": {"text": "noted {{user}}"}},
        {"when": {"user_matches": "^wait$", "tool_result": "task"},
         "reply": {"tool_calls": [{"name": "task_wait",
            "input": {"task_id": id, "timeout_secs": 120}}]}},
        {"when": {"user_matches": "^wait$", "tool_result": "task_wait"},
         "reply": {"text": "waited: {{tool_result.outcome}} {{tool_result.text}}"}},
        {"when": {"user_matches": "^wait$"}, "reply": task("quick")},
        {"when": {"user_matches": "^cancel$", "tool_result": "task"},
         "reply": {"tool_calls": [{"name": "task_status", "input": {"task_id": id}}]}},
        {"when": {"user_matches": "^cancel$", "tool_result": "task_status"},
         "reply": {"tool_calls": [{"name": "task_cancel", "input": {"task_id": id}}]}},
        {"when": {"user_matches": "^cancel$", "tool_result": "task_cancel"},
         "reply": {"text": "cancelled: {{tool_result.cancel_requested}}"}},
        {"when": {"user_matches": "^cancel$"}, "reply": task("gated")},
        {"when": {"user_matches": "^hold$", "tool_result": "task"},
         "reply": {"text": "holding {{tool_result.task_id}}"}},
        {"when": {"user_matches": "^hold$"}, "reply": task("gated")},
        {"when": {"user_matches": "^hold two$", "tool_result": "task"},
         "reply": {"text": "holding two"}},
        {"when": {"user_matches": "^hold two$"}, "reply": {"tool_calls": [
            task("gated")["tool_calls"][0], task("gated")["tool_calls"][0]]}},
        {"when": {"user_matches": "^quick$"}, "reply": {"text": "quick answer"}},
        {"when": {"user_matches": "^gated$", "tool_result": "bash"},
         "reply": {"text": "gate passed"}},
        {"when": {"user_matches": "^gated$"}, "reply": {"tool_calls": [{"name": "bash",
            "input": {"command": "echo ran >> gated-runs.log; until [ -f gate ]; do sleep 0.05; done"}}]}}
    ]);
    let boss = "---\nmodel: scripted/s.json\nsubagents: [worker]\nsandbox: local\n---\nDelegate.\n";
    let worker = "---\ndescription: Does one piece of work\nmodel: scripted/s.json\n\
                  tools: [bash]\nsandbox: local\n---\nWork.\n";
    let script = json!({ "rules": rules }).to_string();
    let mut files = vec![
        ("agents/boss.md", boss),
        ("agents/worker.md", worker),
        ("s.json", script.as_str()),
    ];
    files.extend_from_slice(extra);
    Workspace::new(&files)
}

pub(crate) fn send(server: &Server, id: &str, text: &str) {
    let (status, answer) = http(
        server.addr(),
        "POST",
        &format!("/agents/boss/{id}"),
        &[("content-type", "application/json")],
        &json!({"kind": "user", "body": text}).to_string(),
    );
    assert_eq!(status, 202, "{answer}");
}

/// The replies of the conversation's root session, in order.
fn replies(ws: &Workspace, id: &str) -> Vec<String> {
    let shown =
        crate::json(&ws.flue(&["session", "show", "--id", &format!("boss:{id}"), "--json"]));
    shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|message| message["role"] == "assistant")
        .filter_map(|message| {
            let texts: Vec<&str> = message["content"]
                .as_array()?
                .iter()
                .filter(|part| part["type"] == "text")
                .filter_map(|part| part["text"].as_str())
                .collect();
            (!texts.is_empty()).then(|| texts.concat())
        })
        .collect()
}

/// Waits until the conversation has `n` replies and nothing pending.
pub(crate) fn wait_replies(ws: &Workspace, id: &str, n: usize) -> Vec<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        wait_settled(ws, &Db::Sqlite, id);
        let replies = replies(ws, id);
        if replies.len() >= n {
            return replies;
        }
        assert!(std::time::Instant::now() < deadline, "{replies:?}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn the_model_waits_for_a_background_task_and_its_result_still_arrives_as_a_message() {
    let ws = workspace();
    let server = Server::start(ws.root(), &[], &[]);
    send(&server, "w", "wait");
    let replies = wait_replies(&ws, "w", 2);
    assert_eq!(replies[0], "waited: completed quick answer");
    assert!(replies[1].starts_with("noted <task_result"), "{replies:?}");
    assert!(replies[1].contains("outcome=\"completed\""), "{replies:?}");
    assert!(replies[1].contains("quick answer"), "{replies:?}");
    assert_eq!(replies.len(), 2, "{replies:?}");
}

#[test]
fn the_model_checks_and_cancels_a_background_task_and_hears_it_was_aborted() {
    let ws = workspace();
    let server = Server::start(ws.root(), &[], &[]);
    send(&server, "c", "cancel");
    let replies = wait_replies(&ws, "c", 2);
    assert_eq!(replies[0], "cancelled: true");
    assert!(replies[1].contains("outcome=\"aborted\""), "{replies:?}");
    assert_eq!(replies.len(), 2, "{replies:?}");
}

#[test]
fn people_list_and_cancel_background_tasks_over_http_and_see_them_in_the_tree() {
    let ws = workspace();
    let server = Server::start(ws.root(), &[], &[]);
    send(&server, "h", "hold");
    let holding = wait_replies(&ws, "h", 1);
    let task_id = holding[0].strip_prefix("holding ").unwrap().to_owned();
    let list = |server: &Server| {
        let (status, body) = http(server.addr(), "GET", "/agents/boss/h/tasks", &[], "");
        assert_eq!(status, 200, "{body}");
        serde_json::from_str::<Value>(&body).unwrap()
    };
    let listed = list(&server);
    let tasks = listed["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1, "{listed}");
    assert_eq!(tasks[0]["task_id"], task_id.as_str());
    assert_eq!(tasks[0]["agent"], "worker");
    assert!(
        tasks[0]["conversation"]
            .as_str()
            .unwrap()
            .starts_with("h~bg.boss.")
    );
    assert!(
        ["queued", "running"].contains(&tasks[0]["state"].as_str().unwrap()),
        "{listed}"
    );

    let cancel = |task: &str| {
        let path = format!("/agents/boss/h/tasks/{task}/cancel");
        http(server.addr(), "POST", &path, &[], "")
    };
    let (status, body) = cancel(&task_id);
    assert_eq!((status, body.as_str()), (200, r#"{"cancelled":true}"#));
    let replies = wait_replies(&ws, "h", 2);
    assert!(replies[1].contains("outcome=\"aborted\""), "{replies:?}");
    let listed = list(&server);
    assert_eq!(listed["tasks"][0]["state"], "settled", "{listed}");
    assert_eq!(listed["tasks"][0]["outcome"], "aborted", "{listed}");
    let (status, body) = cancel(&task_id);
    assert_eq!((status, body.as_str()), (200, r#"{"cancelled":false}"#));
    let (status, body) = cancel("01NOTATASK");
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("task_not_found"), "{body}");

    let tree = ws.flue(&["session", "show", "--id", "boss:h", "--tree"]);
    let text = String::from_utf8_lossy(&tree.stdout);
    let header = format!("== background task worker/{}", tasks_conversation(&listed));
    assert!(
        text.contains(&format!("{header} (settled, aborted)")),
        "{text}"
    );
    assert!(text.contains("    user (turn 1): gated"), "{text}");
}

fn tasks_conversation(listed: &Value) -> String {
    listed["tasks"][0]["conversation"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// `[tasks] max_background_per_conversation = 1`: of two background tasks started together,
/// one runs and the other waits, listed `queued`, until the first ends; then it runs.
#[test]
fn background_tasks_past_the_limit_wait_queued_until_one_ends() {
    let ws = workspace_with(&[(
        "flue.toml",
        "[tasks]\nmax_background_per_conversation = 1\n",
    )]);
    let server = Server::start(ws.root(), &[], &[]);
    send(&server, "q", "hold two");
    wait_replies(&ws, "q", 1);
    let runs = ws.root().join("gated-runs.log");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !runs.exists() {
        assert!(std::time::Instant::now() < deadline, "no task ran");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let (status, body) = http(server.addr(), "GET", "/agents/boss/q/tasks", &[], "");
    assert_eq!(status, 200, "{body}");
    let listed: Value = serde_json::from_str(&body).unwrap();
    let mut states: Vec<&str> = listed["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|task| task["state"].as_str().unwrap())
        .collect();
    states.sort_unstable();
    assert_eq!(states, ["queued", "running"], "{listed}");
    assert_eq!(std::fs::read_to_string(&runs).unwrap().lines().count(), 1);
    std::fs::write(ws.root().join("gate"), "").unwrap();
    let replies = wait_replies(&ws, "q", 3);
    let completed = replies
        .iter()
        .filter(|reply| reply.contains("outcome=\"completed\""))
        .count();
    assert_eq!(completed, 2, "{replies:?}");
    assert_eq!(std::fs::read_to_string(&runs).unwrap().lines().count(), 2);
}
