//! The code-review example end to end: a skill, a role and a security subagent reached
//! through the `task` tool; `session show --tree` and task sessions by name; `--role`.

use pretty_assertions::assert_eq;

use crate::{Workspace, json, stderr, stdout};

const ASK: &str = "Review src/login.py";

/// The one task session of conversation `id`.
fn task_session(ws: &Workspace, id: &str) -> String {
    let shown = json(&ws.flue(&["session", "show", "--id", id, "--json", "--tree"]));
    shown["tasks"][0]["session"].as_str().unwrap().to_owned()
}

#[test]
fn the_reviewer_delegates_to_the_security_subagent() {
    let ws = Workspace::example("code-review");
    let output = ws.flue(&["run", "reviewer", "-m", ASK, "--id", "r"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let child = task_session(&ws, "r");
    assert!(child.starts_with("task:default:"), "{child}");
    let reply = stdout(&output);
    assert!(
        reply.starts_with("Review of src/login.py\n- blocker: see the security findings below.\n"),
        "{reply}"
    );
    // The subagent's answer, as text: not the task tool's JSON result.
    assert!(
        reply.ends_with(
            "\n\nSecurity subagent: 2 findings in src/login.py: (1) line 7 builds SQL from user \
             input: SQL injection, critical; use a parameterised query. (2) line 3 hard-codes \
             SECRET_KEY: major; read it from the environment.\n"
        ),
        "{reply}"
    );
    let err = stderr(&output);
    for line in [
        "-> load_skill {\"name\":\"code-review\"}",
        "-> load_skill {\"name\":\"code-review\",\"resource\":\"checklist.md\"}",
        "-> task {\"agent\":\"security\",\"prompt\":\"Audit src/login.py for security \
         vulnerabilities.\",\"role\":\"security-engineer\"}",
        &format!("  => task security in {child}"),
        // What the subagent does shows as it happens, under its task.
        "    -> read_file {\"path\":\"src/login.py\"}",
        "    <- read_file done: src/login.py, ",
        "  <= task security done",
    ] {
        assert!(err.contains(line), "missing {line:?} in:\n{err}");
    }
    // Each tool result is one line: what came back and its size, not the text itself.
    let skill_results: Vec<&str> = err
        .lines()
        .filter(|line| line.starts_with("<- load_skill done: "))
        .collect();
    assert!(
        skill_results.len() == 2 && skill_results.iter().all(|line| line.ends_with(" bytes")),
        "{err}"
    );
    assert!(!err.contains("Functions are short"), "{err}");
}

#[test]
fn session_show_tree_nests_the_task_transcripts() {
    let ws = Workspace::example("code-review");
    assert!(
        ws.flue(&["run", "reviewer", "-m", ASK, "--id", "r"])
            .status
            .success()
    );
    let child = task_session(&ws, "r");
    let shown = stdout(&ws.flue(&["session", "show", "--id", "r", "--tree"]));
    // Usage lines follow each model turn (the task's indented with it); the last one sums the
    // conversation, task sessions included.
    let (usage, tree) = super::session_show::without_usage(&shown);
    assert!(
        usage.iter().any(|line| line.starts_with("    [")),
        "{shown}"
    );
    assert!(
        usage
            .last()
            .is_some_and(|line| line.starts_with("conversation usage: ")),
        "{shown}"
    );
    let tree = tree.replace(&child, "<child>");
    let tail = tree
        .split_once("  == <child>\n")
        .map(|(_, tail)| tail)
        .unwrap_or_else(|| panic!("no task section in:\n{tree}"));
    assert!(
        tree.starts_with("== default\nuser (turn 1): Review src/login.py\n"),
        "{tree}"
    );
    // The read_file result is the tool's JSON envelope on one line; build the expected line
    // from the file itself so the test states what the subagent saw.
    let login_py = std::fs::read_to_string(ws.root().join("src/login.py")).unwrap();
    let read = json(&ws.flue(&[
        "session",
        "show",
        "--id",
        "r",
        "--session",
        &child,
        "--json",
    ]));
    let envelope: serde_json::Value =
        serde_json::from_str(read["messages"][2]["content"].as_str().unwrap()).unwrap();
    assert_eq!(envelope["ok"], true);
    assert_eq!(envelope["data"]["content"], login_py.as_str());
    let result_line = format!(
        "  tool result (read_file ok): {}\n",
        read["messages"][2]["content"]
            .as_str()
            .unwrap()
            .replace('\n', "\n  ")
    );
    assert_eq!(
        tail,
        format!(
            "  user: Audit src/login.py for security vulnerabilities.\n\
             \x20 tool call: read_file {{\"path\":\"src/login.py\"}}\n\
             {result_line}\
             \x20 assistant: 2 findings in src/login.py: (1) line 7 builds SQL from user input: SQL \
             injection, critical; use a parameterised query. (2) line 3 hard-codes SECRET_KEY: \
             major; read it from the environment.\n"
        )
    );

    // A task session can also be shown on its own, by name.
    let alone = stdout(&ws.flue(&["session", "show", "--id", "r", "--session", &child]));
    assert!(
        alone.starts_with("user: Audit src/login.py for security vulnerabilities.\n"),
        "{alone}"
    );
    // Without --tree, only the session itself.
    let plain = stdout(&ws.flue(&["session", "show", "--id", "r"]));
    assert!(
        !plain.contains("== ") && !plain.contains("user: Audit"),
        "{plain}"
    );
}

#[test]
fn a_role_can_be_chosen_per_run_and_an_unknown_one_is_an_error() {
    let ws = Workspace::example("code-review");
    let output = ws.flue(&[
        "run",
        "reviewer",
        "-m",
        ASK,
        "--role",
        "security-engineer",
        "--json",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));

    let output = ws.flue(&["run", "reviewer", "-m", ASK, "--role", "ceo", "--json"]);
    assert_eq!(output.status.code(), Some(1));
    let envelope = json(&output);
    assert_eq!(envelope["outcome"], "error");
    assert_eq!(envelope["error"]["kind"], "unknown_role");
    assert_eq!(
        envelope["error"]["message"],
        "unknown role \"ceo\" (roles: security-engineer)"
    );
}
