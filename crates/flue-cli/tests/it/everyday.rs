//! What a newcomer does on the first day: finding conversations, continuing the last one,
//! long messages on stdin, seeing the agent's tools and prompt, running a skill, errors that
//! point at the fix, and roots found from where they stand.

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use assert_cmd::Command;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::{Workspace, json, stderr, stdout};

/// `flue <args>` without `--root`, from `cwd`.
fn flue_in(cwd: &Path, args: &[&str]) -> std::process::Output {
    Command::cargo_bin("flue")
        .unwrap()
        .env("FLUE_TRUST", "1")
        .args(args)
        .current_dir(cwd)
        .env_remove("FLUE_LOG")
        .output()
        .unwrap()
}

fn ok(output: &std::process::Output) {
    assert!(output.status.success(), "{}", stderr(output));
}

const ECHO_SCRIPT: &str = r#"{"rules": [{"reply": {"text": "echo: {{user}}"}}]}"#;

#[test]
fn help_lists_only_real_commands_and_every_command_has_an_example_and_its_doc() {
    let help = stdout(&flue_in(Path::new("."), &["--help"]));
    let listed: Vec<&str> = help
        .split("Commands:")
        .nth(1)
        .unwrap()
        .split("Options:")
        .next()
        .unwrap()
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    assert_eq!(
        listed,
        vec![
            "run",
            "chat",
            "tools",
            "build",
            "schedules",
            "session",
            "audit",
            "memory",
            "rewind",
            "serve",
            "dev",
            "init",
            "trash",
            "trust",
            "eval",
            "mcp",
            "completions",
            "man",
            "help"
        ]
    );
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for command in [
        &["run"][..],
        &["chat"],
        &["tools"],
        &["build"],
        &["schedules"],
        &["session"],
        &["session", "list"],
        &["session", "show"],
        &["session", "fork"],
        &["audit"],
        &["memory"],
        &["memory", "list"],
        &["memory", "delete"],
        &["rewind"],
        &["serve"],
        &["dev"],
        &["init"],
        &["trash"],
        &["trash", "list"],
        &["trash", "restore"],
        &["trust"],
        &["eval"],
        &["eval", "list"],
        &["eval", "show"],
        &["eval", "diff"],
        &["mcp"],
        &["mcp", "serve"],
        &["mcp", "login"],
        &["mcp", "logout"],
        &["completions"],
        &["man"],
    ] {
        let mut args = command.to_vec();
        args.push("--help");
        let output = flue_in(Path::new("."), &args);
        ok(&output);
        let text = stdout(&output);
        assert!(text.contains("Examples:\n  flue "), "{args:?}: {text}");
        // The page in the repository, named with its address (an installed binary has no
        // docs/ folder beside it).
        let doc = text
            .split("Docs (https://github.com/flue-rs/flue): ")
            .nth(1)
            .unwrap_or_else(|| panic!("{args:?} names no doc: {text}"));
        let file = doc.split(['#', ',', ' ', '\n']).next().unwrap();
        assert!(docs.join(file).is_file(), "{args:?}: {file} does not exist");
    }
}

#[test]
fn a_message_longer_than_one_argument_can_be_comes_from_stdin() {
    let ws = Workspace::new(&[
        (
            "agents/echo.md",
            "---\nmodel: scripted/script.json\n---\nEcho.\n",
        ),
        ("script.json", ECHO_SCRIPT),
    ]);
    // Linux caps one argument at 128 KiB: this one could not be passed with -m.
    let message = format!("{}END", "long line of text\n".repeat(12_000));
    assert!(message.len() > 200_000);
    let output = Command::cargo_bin("flue")
        .unwrap()
        .env("FLUE_TRUST", "1")
        .args(["run", "echo", "-m", "-", "--id", "long", "--root"])
        .arg(ws.root())
        .write_stdin(format!("{message}\n"))
        .output()
        .unwrap();
    ok(&output);
    assert_eq!(stdout(&output), format!("echo: {message}\n"));
    let shown = json(&ws.flue(&["session", "show", "--id", "long", "--json"]));
    assert_eq!(shown["messages"][0]["content"][0]["text"], message);
}

#[test]
fn conversations_are_listed_and_the_latest_is_continued_without_its_id() {
    let ws = Workspace::new(&[
        (
            "agents/echo.md",
            "---\nmodel: scripted/script.json\n---\nEcho.\n",
        ),
        (
            "agents/other.md",
            "---\nmodel: scripted/script.json\n---\nEcho.\n",
        ),
        ("script.json", ECHO_SCRIPT),
    ]);
    let empty = ws.flue(&["session", "list"]);
    ok(&empty);
    assert_eq!(stdout(&empty), "");
    assert!(
        stderr(&empty).contains("no conversations"),
        "{}",
        stderr(&empty)
    );

    for (agent, id) in [("echo", "first"), ("echo", "second"), ("other", "third")] {
        ok(&ws.flue(&["run", agent, "-m", "hi", "--id", id]));
    }
    let continued = ws.flue(&["run", "echo", "--continue", "-m", "again"]);
    ok(&continued);
    assert!(
        stderr(&continued).contains("continuing conversation second"),
        "{}",
        stderr(&continued)
    );
    assert_eq!(stdout(&continued), "echo: again\n");
    // `--last` is the same flag.
    ok(&ws.flue(&["run", "other", "--last", "-m", "more"]));

    let listed = json(&ws.flue(&["session", "list", "--json"]));
    let rows: Vec<Value> = listed["conversations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| json!([row["id"], row["agent"], row["messages"], row["pending"]]))
        .collect();
    assert_eq!(
        rows,
        vec![
            json!(["first", "echo", 2, 0]),
            json!(["second", "echo", 4, 0]),
            json!(["third", "other", 4, 0]),
        ]
    );
    // A page of the two most recent, then the page before it through the printed cursor.
    let page = json(&ws.flue(&["session", "list", "--limit", "2", "--json"]));
    let ids: Vec<&str> = page["conversations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["second", "third"]);
    let next = page["next"].as_str().unwrap();
    let before = json(&ws.flue(&[
        "session", "list", "--limit", "2", "--before", next, "--json",
    ]));
    assert_eq!(before["conversations"][0]["id"], "first");
    assert_eq!(before["next"], Value::Null);
    let searched = json(&ws.flue(&["session", "list", "--search", "THIR", "--json"]));
    assert_eq!(searched["conversations"][0]["id"], "third");
    assert_eq!(searched["conversations"].as_array().unwrap().len(), 1);
    let text = stdout(&ws.flue(&["session", "list", "--agent", "echo"]));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].starts_with("ID "), "{text}");
    assert!(lines[2].starts_with("second  echo "), "{text}");

    let fresh = Workspace::new(&[
        (
            "agents/echo.md",
            "---\nmodel: scripted/script.json\n---\nEcho.\n",
        ),
        ("script.json", ECHO_SCRIPT),
    ]);
    let refused = fresh.flue(&["run", "echo", "--continue", "-m", "x"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains("agent `echo` has no conversation to continue yet"),
        "{}",
        stderr(&refused)
    );
}

#[test]
fn showing_an_unknown_conversation_says_it_does_not_exist() {
    let ws = Workspace::hello_world();
    ok(&ws.flue(&["run", "hello", "-m", "hi", "--id", "known"]));
    let output = ws.flue(&["session", "show", "--id", "unknown"]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        stderr(&output),
        "error: conversation \"unknown\" does not exist; `flue session list` shows the stored \
         ones\n"
    );
    let output = ws.flue(&["session", "show", "--id", "known", "--session", "nope"]);
    assert!(
        stderr(&output)
            .contains("conversation \"known\" has no session \"nope\"; its sessions: default"),
        "{}",
        stderr(&output)
    );
}

const KEEPER: &str = "---
model: scripted/script.json
tools: [create_file, delete_file]
---
You keep notes.
";

const KEEPER_SCRIPT: &str = r#"{"rules": [
  {"when": {"tool_result": "create_file"}, "reply": {"text": "created"}},
  {"when": {"tool_result": "delete_file"}, "reply": {"text": "deleted {{tool_result.data.trashId}}"}},
  {"when": {"user_matches": "create"}, "reply": {"tool_calls": [
    {"name": "create_file", "input": {"path": "new.txt", "content": "new\n"}}
  ]}},
  {"when": {"user_matches": "delete"}, "reply": {"tool_calls": [
    {"name": "delete_file", "input": {"path": "notes.txt"}}
  ]}},
  {"reply": {"text": "?"}}
]}"#;

fn keeper(sandbox: &str) -> Workspace {
    let agent = KEEPER.replacen("---\n", &format!("---\nsandbox: {sandbox}\n"), 1);
    Workspace::new(&[
        ("agents/keeper.md", &agent),
        ("script.json", KEEPER_SCRIPT),
        ("notes.txt", "keep me\n"),
    ])
}

#[test]
fn a_virtual_run_says_its_edits_are_gone_and_its_trash_restores_onto_the_workspace() {
    let ws = keeper("virtual");
    let created = ws.flue(&["run", "keeper", "-m", "create", "--id", "v1"]);
    ok(&created);
    assert!(!ws.root().join("new.txt").exists());
    assert!(
        stderr(&created).contains(
            "note: the agent changed 1 file in the virtual sandbox, an in-memory copy of the \
             workspace discarded when flue exits; the workspace's own files are unchanged. Run \
             with --sandbox local to let the agent edit them, or see the changes with `flue \
             audit --id v1 --diff`"
        ),
        "{}",
        stderr(&created)
    );
    // Nothing changed: no note.
    let idle = ws.flue(&["run", "keeper", "-m", "nothing", "--id", "v1"]);
    assert!(!stderr(&idle).contains("note:"), "{}", stderr(&idle));

    let deleted = ws.flue(&["run", "keeper", "-m", "delete", "--id", "v1"]);
    ok(&deleted);
    let trash_id = stdout(&deleted)
        .trim()
        .strip_prefix("deleted ")
        .unwrap()
        .to_owned();
    let listed = json(&ws.flue(&["trash", "list", "--id", "v1", "--json"]));
    assert_eq!(listed["entries"][0]["path"], "notes.txt");

    // The real file is still there: restoring refuses, naming the CLI's flag.
    let refused = ws.flue(&["trash", "restore", &trash_id, "--id", "v1"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains("hint: Pass another --to PATH"),
        "{}",
        stderr(&refused)
    );
    std::fs::remove_file(ws.root().join("notes.txt")).unwrap();
    let restored = ws.flue(&["trash", "restore", &trash_id, "--id", "v1"]);
    ok(&restored);
    assert_eq!(
        std::fs::read_to_string(ws.root().join("notes.txt")).unwrap(),
        "keep me\n"
    );

    // With a local sandbox the edit is real, and there is nothing to say.
    let local = keeper("local");
    let created = local.flue(&["run", "keeper", "-m", "create", "--id", "l1"]);
    ok(&created);
    assert!(local.root().join("new.txt").is_file());
    assert!(!stderr(&created).contains("note:"), "{}", stderr(&created));
}

#[test]
fn audit_and_trash_cover_the_whole_workspace_without_an_id() {
    let ws = keeper("local");
    ok(&ws.flue(&["run", "keeper", "-m", "create", "--id", "c1"]));
    ok(&ws.flue(&["run", "keeper", "-m", "delete", "--id", "c2"]));
    let audit = json(&ws.flue(&["audit", "--json"]));
    let rows: Vec<Value> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| json!([entry["instance_id"], entry["tool"]]))
        .collect();
    assert_eq!(
        rows,
        vec![
            json!(["keeper:c1", "create_file"]),
            json!(["keeper:c2", "delete_file"])
        ]
    );
    let text = stdout(&ws.flue(&["audit"]));
    assert!(text.contains("(conversation c1, session default"), "{text}");
    assert!(text.contains("(conversation c2, session default"), "{text}");
    let trash = ws.flue(&["trash", "list"]);
    ok(&trash);
    assert!(
        stdout(&trash).contains("notes.txt  8 bytes"),
        "{}",
        stdout(&trash)
    );
    assert!(
        stdout(&trash).contains("conversation c2, session default"),
        "{}",
        stdout(&trash)
    );
}

#[test]
fn tools_lists_what_the_agent_gets_with_inputs() {
    let ws = Workspace::example("code-review");
    let listed = json(&ws.flue(&["tools", "reviewer", "--json"]));
    let names: Vec<(&str, &str)> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| {
            (
                tool["name"].as_str().unwrap(),
                tool["origin"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        names,
        vec![
            ("read_file", "built-in"),
            ("load_skill", "skills"),
            ("task", "task"),
            ("task_status", "task"),
            ("task_wait", "task"),
            ("task_cancel", "task"),
        ]
    );
    let task = &listed["tools"][2];
    assert!(
        task["description"].as_str().unwrap().contains("security"),
        "the task tool names the subagents: {task}"
    );
    assert_eq!(task["inputSchema"]["type"], "object");
    assert!(task["inputSchema"]["properties"]["prompt"].is_object());

    let text = stdout(&ws.flue(&["tools", "reviewer"]));
    assert!(text.starts_with("read_file (built-in)\n"), "{text}");
    assert!(text.contains("    path (string, required): "), "{text}");
    assert!(!ws.db().exists(), "listing tools stores nothing");
}

#[test]
fn a_dry_run_prints_prompt_tools_and_model_and_calls_nothing() {
    let ws = Workspace::example("code-review");
    let output = ws.flue(&["run", "reviewer", "--dry-run", "-m", "Review src/login.py"]);
    ok(&output);
    let text = stdout(&output);
    assert!(
        text.starts_with("agent: reviewer\nmodel: scripted/"),
        "{text}"
    );
    assert!(text.contains("sandbox: virtual\n"), "{text}");
    assert!(
        text.contains("tools: read_file, load_skill, task, task_status, task_wait, task_cancel (inputs: flue tools reviewer)\n"),
        "{text}"
    );
    assert!(text.contains("message: Review src/login.py\n"), "{text}");
    assert!(
        text.contains("--- system prompt ---\nYou are a careful code reviewer."),
        "{text}"
    );
    assert!(
        stderr(&output).contains("dry run: no model was called"),
        "{}",
        stderr(&output)
    );
    assert!(!ws.db().exists(), "a dry run stores nothing");

    let as_json = json(&ws.flue(&["run", "reviewer", "--dry-run", "--json"]));
    assert_eq!(as_json["sandbox"], "virtual");
    assert!(
        as_json["systemPrompt"]
            .as_str()
            .unwrap()
            .contains("code-review")
    );
    // The model override is what the dry run shows (its key is checked, not used).
    let overridden = Command::cargo_bin("flue")
        .unwrap()
        .env("FLUE_TRUST", "1")
        .args([
            "run",
            "reviewer",
            "--dry-run",
            "--json",
            "--model",
            "openai/gpt-4.1",
        ])
        .arg("--root")
        .arg(ws.root())
        .env("OPENAI_API_KEY", "sk-not-used")
        .output()
        .unwrap();
    assert_eq!(json(&overridden)["model"], "openai/gpt-4.1");
}

#[test]
fn a_skill_runs_from_the_command_line_with_arguments() {
    let ws = Workspace::new(&[
        (
            "agents/echo.md",
            "---\nmodel: scripted/script.json\nskills: [summarize]\n---\nEcho.\n",
        ),
        (
            ".agents/skills/summarize.md",
            "---\nname: summarize\ndescription: Summarizes a file\n---\nSummarize the file.\n",
        ),
        ("script.json", ECHO_SCRIPT),
    ]);
    let output = ws.flue(&[
        "run",
        "echo",
        "--skill",
        "summarize",
        "--arg",
        "file=src/a.py",
        "--arg",
        "depth=2",
        "--id",
        "s1",
    ]);
    ok(&output);
    let reply = stdout(&output);
    assert!(reply.starts_with("echo: "), "{reply}");
    assert!(reply.contains("summarize"), "{reply}");
    assert!(reply.contains("src/a.py"), "{reply}");
    // Kept in the conversation like any message, and listed with the others.
    let shown = stdout(&ws.flue(&["session", "show", "--id", "s1"]));
    assert!(shown.contains("assistant: echo: Run the skill"), "{shown}");
    let listed = json(&ws.flue(&["session", "list", "--json"]));
    assert_eq!(listed["conversations"][0]["id"], "s1");
    assert_eq!(listed["conversations"][0]["agent"], "echo");

    let unknown = ws.flue(&["run", "echo", "--skill", "sumarize"]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(
        stderr(&unknown)
            .contains(r#"agent "echo" has no skill "sumarize"; its skills are summarize"#),
        "{}",
        stderr(&unknown)
    );
    let bad_arg = ws.flue(&["run", "echo", "--skill", "summarize", "--arg", "file"]);
    assert!(
        stderr(&bad_arg).contains("is not KEY=VALUE"),
        "{}",
        stderr(&bad_arg)
    );
}

#[test]
fn verbose_runs_show_timings() {
    let ws = Workspace::hello_world();
    let output = ws.flue(&[
        "run",
        "hello",
        "-m",
        "What does the greeting file say?",
        "-v",
    ]);
    ok(&output);
    let err = stderr(&output);
    assert!(err.contains("<- read_file done in "), "{err}");
    assert!(err.contains("[model turn: scripted/script.json, "), "{err}");
    let quiet = ws.flue(&["run", "hello", "-m", "What does the greeting file say?"]);
    assert!(
        !stderr(&quiet).contains("[model turn"),
        "{}",
        stderr(&quiet)
    );
}

/// A loopback server answering every request with a proxy's 502 page (retry at once); counts
/// the requests.
fn bad_gateway() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let count = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&count);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { break };
            let mut request = Vec::new();
            let mut buffer = [0; 4096];
            // Headers, then the body its content-length announces.
            while let Ok(n) = stream.read(&mut buffer) {
                if n == 0 {
                    break;
                }
                request.extend_from_slice(&buffer[..n]);
                let text = String::from_utf8_lossy(&request);
                if let Some(end) = text.find("\r\n\r\n") {
                    let length = text
                        .lines()
                        .find_map(|line| {
                            line.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|value| value.trim().parse::<usize>().unwrap_or(0))
                        })
                        .unwrap_or(0);
                    if request.len() >= end + 4 + length {
                        break;
                    }
                }
            }
            counter.fetch_add(1, Ordering::SeqCst);
            let body = "<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head>\
                        <body><center><h1>502 Bad Gateway</h1></center><hr><center>nginx\
                        </center></body></html>";
            let _ = write!(
                stream,
                "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/html\r\nRetry-After: 0\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (url, count)
}

fn local_provider(url: &str) -> Workspace {
    Workspace::new(&[
        (
            "flue.toml",
            &format!(
                "[defaults]\nmodel = \"local/m\"\n\n[providers.local]\napi = \"openai-completions\"\n\
                 base_url = \"{url}\"\n"
            ),
        ),
        ("agents/a.md", "---\ndescription: A\n---\nHi.\n"),
    ])
}

#[test]
fn a_server_error_page_is_a_short_cause_and_verbose_runs_show_the_retries() {
    let (url, requests) = bad_gateway();
    let ws = local_provider(&url);
    let output = ws.flue(&["run", "a", "-m", "hi", "-v"]);
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    assert!(
        err.contains("an HTML error page: \"502 Bad Gateway\""),
        "{err}"
    );
    assert!(!err.contains("<html") && !err.contains("<center>"), "{err}");
    assert_eq!(
        requests.load(Ordering::SeqCst),
        4,
        "one try and three retries"
    );
    // Each retry on a line of its own, with its cause (shown with or without -v).
    assert_eq!(err.matches("local: retrying ").count(), 3, "{err}");
    assert!(
        err.contains("local: retrying 1 of 3 in 0 ms: an HTML error page: \"502 Bad Gateway\"\n"),
        "{err}"
    );
    assert!(err.contains("local: retrying 3 of 3 in 0 ms: "), "{err}");
}

#[test]
fn a_provider_that_cannot_be_reached_is_named_with_its_url_and_flue_toml_line() {
    // A port nothing listens on.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/v1");
    let ws = local_provider(&url);
    let output = ws.flue(&["run", "a", "-m", "hi"]);
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    assert!(
        err.contains(&format!("cannot reach {url}/chat/completions")),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "hint: provider `local`'s URL is set at {}:6 (`base_url`)",
            ws.root().join("flue.toml").display()
        )),
        "{err}"
    );
}

#[test]
fn a_model_without_a_known_provider_gets_the_likely_one() {
    let ws = Workspace::hello_world();
    for (model, suggested) in [
        ("gpt-4o", "openai/gpt-4o"),
        ("opnai/gpt-4o", "openai/gpt-4o"),
    ] {
        let output = ws.flue(&["run", "hello", "-m", "hi", "--model", model]);
        assert_eq!(output.status.code(), Some(1));
        assert!(
            stderr(&output).contains(&format!("hint: did you mean `{suggested}`?")),
            "{model}: {}",
            stderr(&output)
        );
    }
}

#[test]
fn build_rejects_an_unknown_provider_at_its_line_and_run_skips_other_broken_agents() {
    let ws = Workspace::new(&[
        (
            "agents/good.md",
            "---\nmodel: scripted/script.json\n---\nEcho.\n",
        ),
        (
            "agents/typo.md",
            "---\ndescription: T\nmodel: opnai/gpt-4o\n---\nT.\n",
        ),
        ("script.json", ECHO_SCRIPT),
    ]);
    let build = ws.flue(&["build"]);
    assert_eq!(build.status.code(), Some(1));
    assert!(
        stderr(&build).starts_with(
            "agents/typo.md:3: unknown provider `opnai` in model `opnai/gpt-4o` (did you mean \
             `openai/gpt-4o`?)"
        ),
        "{}",
        stderr(&build)
    );
    let run = ws.flue(&["run", "good", "-m", "hi"]);
    ok(&run);
    assert_eq!(stdout(&run), "echo: hi\n");
    // The other agent's file is not read: no warning about it either.
    assert!(!stderr(&run).contains("typo.md"), "{}", stderr(&run));
    let broken = ws.flue(&["run", "typo", "-m", "hi"]);
    assert_eq!(broken.status.code(), Some(1));
    assert!(
        stderr(&broken).contains("agents/typo.md:3: "),
        "{}",
        stderr(&broken)
    );
}

#[test]
fn roots_beside_the_workspace_name_the_folder_that_holds_agents() {
    let ws = Workspace::hello_world();
    let agents_dir = ws.root().join("agents");
    let inside = flue_in(
        Path::new("."),
        &[
            "run",
            "hello",
            "-m",
            "hi",
            "--root",
            agents_dir.to_str().unwrap(),
        ],
    );
    assert_eq!(inside.status.code(), Some(1));
    assert!(
        stderr(&inside).contains(&format!(
            "it is the agents folder itself: pass the folder that holds it, --root {}",
            ws.root().display()
        )),
        "{}",
        stderr(&inside)
    );
    let parent = tempfile::tempdir().unwrap();
    let project = parent.path().join("my-agents");
    std::fs::create_dir_all(project.join("agents")).unwrap();
    let above = flue_in(
        Path::new("."),
        &["build", "--root", parent.path().to_str().unwrap()],
    );
    assert_eq!(above.status.code(), Some(1));
    assert!(
        stderr(&above).contains(&format!(
            "the workspace is {}: pass --root {}",
            project.display(),
            project.display()
        )),
        "{}",
        stderr(&above)
    );
    // Without --root, from the parent folder: the same hint.
    let from_parent = flue_in(parent.path(), &["build"]);
    assert!(
        stderr(&from_parent).contains("the workspace is "),
        "{}",
        stderr(&from_parent)
    );
}

#[test]
fn conversations_of_a_bundle_run_are_found_from_the_current_directory() {
    let ws = Workspace::hello_world();
    let built = ws.flue(&["build"]);
    ok(&built);
    let bundle = stdout(&built).trim().to_owned();
    let work = tempfile::tempdir().unwrap();
    let run = flue_in(
        work.path(),
        &[
            "run",
            "hello",
            "--bundle",
            &bundle,
            "-m",
            "What does the greeting file say?",
            "--id",
            "b1",
        ],
    );
    ok(&run);
    assert!(work.path().join(".flue/flue.db").is_file());
    let shown = flue_in(work.path(), &["session", "show", "--id", "b1"]);
    ok(&shown);
    assert!(stdout(&shown).starts_with("user (turn 1): What does the greeting file say?\n"));
    ok(&flue_in(work.path(), &["audit"]));
    let listed = flue_in(work.path(), &["session", "list"]);
    assert!(stdout(&listed).contains("b1  hello"), "{}", stdout(&listed));
}

#[test]
fn the_built_in_tools_inputs_are_documented() {
    let tools = "[read_file, list_directory, search_files, glob, create_file, write_file, \
                 edit_file, delete_file, restore_file, move_file, apply_patch, bash]";
    let ws = Workspace::new(&[
        (
            "agents/all.md",
            // `task: false`: the built-in file tools and `bash` only (`task` is documented
            // in skills-roles-tasks.md).
            &format!("---\nmodel: scripted/script.json\ntools: {tools}\ntask: false\n---\nAll.\n"),
        ),
        ("script.json", ECHO_SCRIPT),
    ]);
    let listed = json(&ws.flue(&["tools", "all", "--json"]));
    let doc = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/file-tools.md"),
    )
    .unwrap();
    let inputs = doc
        .split("## Inputs of every built-in tool")
        .nth(1)
        .unwrap();
    for tool in listed["tools"].as_array().unwrap() {
        let name = tool["name"].as_str().unwrap();
        let section = inputs
            .split(&format!("### `{name}`\n"))
            .nth(1)
            .unwrap_or_else(|| panic!("docs/file-tools.md has no inputs of `{name}`"))
            .split("### ")
            .next()
            .unwrap();
        for property in tool["inputSchema"]["properties"]
            .as_object()
            .unwrap()
            .keys()
        {
            assert!(
                section.contains(&format!("| `{property}` |")),
                "docs/file-tools.md: `{name}` lacks input `{property}`"
            );
        }
    }
}
