//! `flue run` and sandboxes: the virtual default (a copy of the workspace), `--sandbox`,
//! `sandbox:` in agents and flue.toml, and typed errors when a sandbox is unavailable.

use std::process::Output;

use pretty_assertions::assert_eq;

use crate::{Workspace, json, stderr, stdout};

/// The command the agent runs unless a test says otherwise.
const COMMAND: &str = "ls -A; echo changed > notes.txt; cat notes.txt";

/// A workspace with an agent `w` that runs [`COMMAND`], `notes.txt`, `.env` and a `.git/`
/// directory; `frontmatter` is added to the agent's.
fn workspace(frontmatter: &str) -> Workspace {
    workspace_running(frontmatter, COMMAND)
}

/// A workspace whose agent runs `command` with bash and replies with what it printed.
fn workspace_running(frontmatter: &str, command: &str) -> Workspace {
    let agent = format!("---\nmodel: scripted/s.json\ntools: [bash]\n{frontmatter}---\nRun it.\n");
    let script = serde_json::json!({
        "rules": [
            {"when": {"tool_result": "bash"}, "reply": {"text": "{{tool_result}}"}},
            {"reply": {"tool_calls": [{"name": "bash", "input": {"command": command}}]}}
        ]
    })
    .to_string();
    Workspace::new(&[
        ("agents/w.md", &agent),
        ("s.json", &script),
        ("notes.txt", "original\n"),
        (".env", "SECRET_TOKEN=abc\n"),
        (".git/HEAD", "ref: refs/heads/main\n"),
    ])
}

fn notes(ws: &Workspace) -> String {
    std::fs::read_to_string(ws.root().join("notes.txt")).unwrap()
}

/// `flue run w` with `extra` arguments and the environment changes `env` (None removes).
fn run(ws: &Workspace, extra: &[&str], env: &[(&str, Option<&str>)]) -> Output {
    let mut command = assert_cmd::Command::cargo_bin("flue").unwrap();
    command
        .args(["run", "w", "-m", "go"])
        .args(extra)
        .arg("--root")
        .arg(ws.root())
        .env_remove("FLUE_LOG");
    for (key, value) in env {
        match value {
            Some(value) => command.env(key, value),
            None => command.env_remove(key),
        };
    }
    command.output().unwrap()
}

#[test]
fn by_default_the_agent_works_on_a_copy_of_the_workspace() {
    let ws = workspace("");
    let output = run(&ws, &[], &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    // The copy leaves out the store, env files and .git; changes stay in the copy.
    assert_eq!(stdout(&output), "agents\nnotes.txt\ns.json\nchanged\n");
    assert_eq!(notes(&ws), "original\n");
}

#[test]
fn the_sandbox_flag_overrides_the_agent() {
    let ws = workspace("sandbox: virtual\n");
    let output = run(&ws, &["--sandbox", "local"], &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout(&output).contains(".env\n"), "{}", stdout(&output));
    assert_eq!(notes(&ws), "changed\n");
}

#[test]
fn an_isolated_agent_writes_to_the_workspace_only() {
    let ws = workspace("sandbox: { kind: isolated }\n");
    let output = run(&ws, &[], &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(notes(&ws), "changed\n");
}

#[test]
fn flue_toml_sets_the_sandbox_and_the_agent_wins() {
    let ws = workspace("");
    std::fs::write(ws.root().join("flue.toml"), "[sandbox]\nkind = \"local\"\n").unwrap();
    let output = run(&ws, &[], &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(notes(&ws), "changed\n");

    let ws = workspace("sandbox: virtual\n");
    std::fs::write(ws.root().join("flue.toml"), "[sandbox]\nkind = \"local\"\n").unwrap();
    let output = run(&ws, &[], &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(notes(&ws), "original\n");
}

#[test]
fn a_seed_directory_and_exclusions_shape_the_copy() {
    let ws = workspace("sandbox: { kind: virtual, seed: agents }\n");
    let output = run(&ws, &[], &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output), "w.md\nchanged\n");

    let ws = workspace("sandbox: { kind: virtual, exclude: [notes.txt] }\n");
    let output = run(&ws, &[], &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    // An explicit list replaces the default one (.git is copied), never the store or .env.
    assert_eq!(stdout(&output), ".git\nagents\ns.json\nchanged\n");
}

#[test]
fn timeout_ms_caps_every_command() {
    for kind in ["virtual", "local"] {
        let ws = workspace_running(
            &format!("sandbox: {{ kind: {kind}, timeout_ms: 300 }}\n"),
            "sleep 30",
        );
        let output = run(&ws, &[], &[]);
        assert!(output.status.success(), "{}", stderr(&output));
        assert_eq!(
            stdout(&output),
            "[command timed out after 300 ms]\nexit code: 124\n",
            "{kind}"
        );
    }
}

#[test]
fn daytona_without_a_key_is_a_typed_error() {
    let ws = workspace("sandbox: daytona\n");
    let output = run(&ws, &["--json"], &[("DAYTONA_API_KEY", None)]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let envelope = json(&output);
    assert_eq!(envelope["error"]["kind"], "sandbox_unavailable");
    let message = envelope["error"]["message"].as_str().unwrap();
    assert!(message.contains("DAYTONA_API_KEY"), "{message}");
}

#[test]
fn an_unreachable_daytona_is_a_typed_error_that_never_shows_the_key() {
    let ws = workspace("sandbox: daytona\n");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "http://127.0.0.1:{}/api",
        listener.local_addr().unwrap().port()
    );
    drop(listener);
    let output = run(
        &ws,
        &["--json"],
        &[
            ("DAYTONA_API_KEY", Some("dtn_cli_secret")),
            ("DAYTONA_API_URL", Some(&url)),
        ],
    );
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert_eq!(json(&output)["error"]["kind"], "sandbox_unavailable");
    assert!(!stdout(&output).contains("dtn_cli_secret"));
    assert!(!stderr(&output).contains("dtn_cli_secret"));
}

#[test]
fn an_unknown_sandbox_flag_is_refused_by_the_parser() {
    let ws = workspace("");
    let output = run(&ws, &["--sandbox", "docker"], &[]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("invalid sandbox `docker`"),
        "{}",
        stderr(&output)
    );
}
