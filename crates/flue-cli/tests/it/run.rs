//! `flue run`: replies, the JSON envelope, continuation, exit codes and bad input.

use std::process::Stdio;
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::json;

use crate::{Workspace, json, stderr, stdout};

const ASK: &str = "What does the greeting file say?";
const REPLY: &str = "The greeting file says: Hello, world! Welcome to Flue.\n";

#[test]
fn runs_the_example_with_a_tool_round_trip() {
    let ws = Workspace::hello_world();
    let output = ws.flue(&["run", "hello", "-m", ASK]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output), REPLY);
    let err = stderr(&output);
    assert!(err.contains("conversation id: "), "{err}");
    assert!(
        err.contains("-> read_file {\"path\":\"greeting.txt\"}"),
        "{err}"
    );
    // The result as one line (the file and its size), not the JSON the model receives.
    let size = std::fs::metadata(ws.root().join("greeting.txt"))
        .unwrap()
        .len();
    assert!(
        err.contains(&format!("<- read_file done: greeting.txt, {size} bytes\n")),
        "{err}"
    );
    assert!(ws.db().is_file());
}

#[test]
fn json_prints_exactly_one_envelope() {
    let ws = Workspace::hello_world();
    let output = ws.flue(&["run", "hello", "-m", ASK, "--json", "--id", "conv-1"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let mut envelope = json(&output);
    let usage = envelope.as_object_mut().unwrap().remove("usage").unwrap();
    // The submission id is the one the run printed on stderr when the message was admitted.
    let submission_id = envelope
        .as_object_mut()
        .unwrap()
        .remove("submissionId")
        .unwrap();
    assert!(
        stderr(&output).contains(&format!("submission: {}", submission_id.as_str().unwrap())),
        "{}",
        stderr(&output)
    );
    assert_eq!(
        envelope,
        json!({"id": "conv-1", "agent": "hello", "session": "default", "outcome": "completed",
               "message": REPLY, "stopReason": "end_turn"})
    );
    assert!(usage["input_tokens"].as_u64().unwrap() > 0, "{usage}");
    assert_eq!(stdout(&output).lines().count(), 1);
}

#[test]
fn an_id_continues_the_conversation() {
    let ws = Workspace::hello_world();
    let first = ws.flue(&["run", "hello", "-m", ASK, "--json", "--id", "c"]);
    let second = ws.flue(&["run", "hello", "-m", ASK, "--json", "--id", "c"]);
    assert!(second.status.success(), "{}", stderr(&second));
    // The scripted model counts the tokens it is sent: the second run carries the first's history.
    let tokens = |output| json(output)["usage"]["input_tokens"].as_u64().unwrap();
    assert!(
        tokens(&second) > tokens(&first) + 20,
        "{} vs {}",
        tokens(&second),
        tokens(&first)
    );
    let show = ws.flue(&["session", "show", "--id", "c", "--json"]);
    let roles: Vec<String> = json(&show)["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap().to_owned())
        .collect();
    let one_run = ["user", "assistant", "tool", "assistant"];
    assert_eq!(roles, [one_run, one_run].concat());
}

#[test]
fn new_refuses_an_existing_id_and_changes_nothing() {
    let ws = Workspace::hello_world();
    assert!(
        ws.flue(&["run", "hello", "-m", ASK, "--id", "c", "--new"])
            .status
            .success()
    );
    let before = ws.flue(&["session", "show", "--id", "c", "--json"]);
    let output = ws.flue(&["run", "hello", "-m", ASK, "--id", "c", "--new", "--json"]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(json(&output)["outcome"], "error");
    assert_eq!(json(&output)["error"]["kind"], "conversation_exists");
    let after = ws.flue(&["session", "show", "--id", "c", "--json"]);
    assert_eq!(stdout(&before), stdout(&after));
}

#[test]
fn an_agent_can_be_given_as_a_file() {
    let ws = Workspace::hello_world();
    let file = ws.root().join("agents/hello.md");
    let output = ws.flue(&["run", file.to_str().unwrap(), "-m", ASK]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output), REPLY);
}

#[test]
fn the_model_can_be_overridden() {
    let ws = Workspace::hello_world();
    std::fs::write(
        ws.root().join("other.json"),
        r#"{"rules": [{"reply": {"text": "other model"}}]}"#,
    )
    .unwrap();
    let output = ws.flue(&["run", "hello", "-m", ASK, "--model", "scripted/other.json"]);
    assert_eq!(stdout(&output), "other model\n");
}

/// Bad input: a one-line error naming the file or key, exit 1, stored sessions untouched.
fn check_setup_error(ws: &Workspace, args: &[&str], kind: &str, needle: &str) {
    // A stored conversation that must survive the failed run byte for byte.
    let seeded = ws.flue(&["run", "hello", "-m", ASK, "--id", "keep"]);
    let before = ws.flue(&["session", "show", "--id", "keep", "--json"]);

    let mut full = vec!["run"];
    full.extend_from_slice(args);
    let output = ws.flue(&full);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert_eq!(stdout(&output), "");
    let err = stderr(&output);
    assert!(err.starts_with("error: "), "{err}");
    assert!(err.contains(needle), "expected {needle:?} in {err}");

    full.push("--json");
    let output = ws.flue(&full);
    assert_eq!(output.status.code(), Some(1));
    let envelope = json(&output);
    assert_eq!(
        (
            envelope["outcome"].as_str(),
            envelope["error"]["kind"].as_str()
        ),
        (Some("error"), Some(kind))
    );

    if seeded.status.success() {
        let after = ws.flue(&["session", "show", "--id", "keep", "--json"]);
        assert_eq!(stdout(&before), stdout(&after));
    }
}

#[test]
fn an_unknown_agent_is_named() {
    let ws = Workspace::hello_world();
    check_setup_error(
        &ws,
        &["nobody", "-m", "hi"],
        "unknown_agent",
        "unknown agent \"nobody\"",
    );
}

#[test]
fn a_misspelt_agent_gets_the_closest_name() {
    let ws = Workspace::hello_world();
    check_setup_error(
        &ws,
        &["helo", "-m", "hi"],
        "unknown_agent",
        "unknown agent \"helo\" (did you mean \"hello\"?)",
    );
}

#[test]
fn a_model_the_catalog_does_not_know_is_refused_before_anything_is_stored() {
    let ws = Workspace::hello_world();
    // A key, so that only the name is wrong; nothing is sent anywhere.
    let run_with = |extra: &[&str], base_url: Option<&str>| {
        let mut command = assert_cmd::Command::cargo_bin("flue").unwrap();
        command.env("FLUE_TRUST", "1");
        command
            .args(["run", "hello", "-m", "hi", "--root"])
            .arg(ws.root())
            .args(extra)
            .env("OPENAI_API_KEY", "sk-test")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("FLUE_LOG");
        if let Some(url) = base_url {
            command.env("OPENAI_BASE_URL", url);
        }
        command.output().unwrap()
    };
    let run = |extra: &[&str]| run_with(extra, None);
    let refused = run(&["--model", "openai/gpt-4oo"]);
    assert_eq!(
        (refused.status.code(), stderr(&refused)),
        (
            Some(1),
            "error: model \"gpt-4oo\" is not in the catalog of provider \"openai\" (did you \
             mean `openai/gpt-4o`?); fix the name, or if the provider does serve it, pass \
             --allow-unknown-model or describe it under [providers.openai.models.\"gpt-4oo\"] in \
             flue.toml\n"
                .to_owned()
        )
    );
    assert!(!ws.root().join(".flue").exists(), "the store was created");
    let envelope = json(&run(&["--model", "openai/gpt-4oo", "--json"]));
    assert_eq!(envelope["error"]["kind"], "unknown_model");
    // A known model, or the override, passes the check (and then fails to connect, or is
    // refused by a real provider: not this test's business).
    for passing in [
        &["--model", "openai/gpt-4o", "--dry-run"][..],
        &[
            "--model",
            "openai/gpt-4oo",
            "--allow-unknown-model",
            "--dry-run",
        ][..],
    ] {
        let output = run(passing);
        assert!(output.status.success(), "{passing:?}: {}", stderr(&output));
    }
    let refused = run(&["--model", "openai/gpt-4oo", "--dry-run"]);
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    // Another server at the provider's URL knows models the catalog cannot.
    let moved = run_with(
        &["--model", "openai/gpt-4oo", "--dry-run"],
        Some("http://127.0.0.1:9/v1"),
    );
    assert!(moved.status.success(), "{}", stderr(&moved));
    // A model described in flue.toml is known.
    let settings = std::fs::read_to_string(ws.root().join("flue.toml")).unwrap();
    std::fs::write(
        ws.root().join("flue.toml"),
        format!("{settings}\n[providers.openai.models.\"gpt-4oo\"]\ncontext_window = 64000\n"),
    )
    .unwrap();
    let described = run(&["--model", "openai/gpt-4oo", "--dry-run"]);
    assert!(described.status.success(), "{}", stderr(&described));
}

#[test]
fn malformed_frontmatter_names_the_file_and_line() {
    let ws = Workspace::hello_world();
    std::fs::write(
        ws.root().join("agents/broken.md"),
        "---\ndescription: fine\nmodle: scripted/script.json\n---\nbody\n",
    )
    .unwrap();
    // Running that agent fails naming the file and line.
    check_setup_error(
        &ws,
        &["broken", "-m", "hi"],
        "invalid_config",
        "agents/broken.md:3",
    );
    // Another agent still runs: the broken file is not read, so it is not mentioned.
    let other = ws.flue(&["run", "hello", "-m", "hi"]);
    assert!(other.status.success(), "{}", stderr(&other));
    assert!(!stderr(&other).contains("broken.md"), "{}", stderr(&other));
    // The build reports it, at its line.
    let build = ws.flue(&["build"]);
    assert_eq!(build.status.code(), Some(1));
    assert!(
        stderr(&build).contains("agents/broken.md:3: unknown key `modle` (did you mean `model`?)"),
        "{}",
        stderr(&build)
    );
}

#[test]
fn an_unknown_provider_is_named() {
    let ws = Workspace::hello_world();
    check_setup_error(
        &ws,
        &["hello", "-m", "hi", "--model", "nowhere/model"],
        "unknown_provider",
        "unknown provider \"nowhere\"",
    );
}

#[test]
fn an_unreadable_script_is_named() {
    let ws = Workspace::hello_world();
    check_setup_error(
        &ws,
        &["hello", "-m", "hi", "--model", "scripted/missing.json"],
        "script_error",
        "missing.json",
    );
}

#[test]
fn a_missing_model_is_explained() {
    let ws = Workspace::new(&[("agents/plain.md", "---\ndescription: no model\n---\nHi.\n")]);
    let output = ws.flue(&["run", "plain", "-m", "hi"]);
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    assert!(
        err.contains("agents/plain.md") && err.contains("model"),
        "{err}"
    );
}

#[test]
fn a_missing_workspace_is_explained() {
    let dir = tempfile::tempdir().unwrap();
    let output = assert_cmd::Command::cargo_bin("flue")
        .unwrap()
        .env("FLUE_TRUST", "1")
        .current_dir(dir.path())
        .args(["run", "hello", "-m", "hi"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("no workspace found"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn the_root_is_found_from_a_subdirectory() {
    let ws = Workspace::hello_world();
    let sub = ws.root().join("deep/er");
    std::fs::create_dir_all(&sub).unwrap();
    let output = assert_cmd::Command::cargo_bin("flue")
        .unwrap()
        .env("FLUE_TRUST", "1")
        .current_dir(&sub)
        .args(["run", "hello", "-m", ASK])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output), REPLY);
}

#[test]
fn a_failing_model_turn_is_failed_with_exit_1() {
    let ws = Workspace::new(&[
        ("agents/a.md", "---\nmodel: scripted/s.json\n---\nHi.\n"),
        (
            "s.json",
            r#"{"rules": [{"reply": {"error": {"message": "upstream exploded"}}}]}"#,
        ),
    ]);
    let output = ws.flue(&["run", "a", "-m", "hi", "--json", "--id", "x"]);
    assert_eq!(output.status.code(), Some(1));
    let envelope = json(&output);
    assert_eq!(envelope["outcome"], "failed");
    assert_eq!(envelope["error"]["kind"], "provider_error");
    // The acknowledged message is kept.
    let show = ws.flue(&["session", "show", "--id", "x", "--json"]);
    assert_eq!(json(&show)["messages"][0]["role"], "user");
}

#[test]
fn compaction_near_the_window_is_shown_and_the_history_kept() {
    // A 600-token window: reserve 200, so the second run starts above the 400-token threshold.
    let ws = Workspace::new(&[
        (
            "agents/a.md",
            // Without `task` (offered by default), whose schema would count in the window.
            "---\nmodel: scripted/s.json\ntask: false\ncompaction: { keep_recent_tokens: 10 }\n---\nHi.\n",
        ),
        (
            "s.json",
            r###"{"model": {"context_window": 600}, "rules": [
                {"when": {"user_contains": "<conversation>"}, "reply": {"text": "## Goal\nSay ok."}},
                {"reply": {"text": "ok"}}]}"###,
        ),
    ]);
    let long = "word ".repeat(360);
    let first = ws.flue(&["run", "a", "-m", &long, "--id", "c"]);
    assert!(first.status.success(), "{}", stderr(&first));
    assert!(!stderr(&first).contains("compact"), "{}", stderr(&first));
    let second = ws.flue(&["run", "a", "-m", "again", "--id", "c"]);
    assert!(second.status.success(), "{}", stderr(&second));
    let err = stderr(&second);
    assert!(
        err.contains("compacting context (near the context window, ~"),
        "{err}"
    );
    assert!(err.contains("compacted 3 -> 3 messages, ~"), "{err}");
    // The transcript keeps everything, with the summary in its place.
    let show = ws.flue(&["session", "show", "--id", "c", "--json"]);
    let types: Vec<String> = json(&show)["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["type"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        types,
        ["user", "assistant", "user", "compaction", "assistant"]
    );
}

#[test]
fn env_file_errors_are_reported() {
    let ws = Workspace::hello_world();
    std::fs::write(ws.root().join(".env"), "GOOD=1\nnot a pair\n").unwrap();
    let output = ws.flue(&["run", "hello", "-m", ASK]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("line 2: expected KEY=VALUE"),
        "{}",
        stderr(&output)
    );
    let output = ws.flue(&["run", "hello", "-m", ASK, "--env", "/nonexistent/.env"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("/nonexistent/.env"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn ctrl_c_aborts_cleanly_with_exit_130() {
    let ws = Workspace::new(&[
        ("agents/slow.md", "---\nmodel: scripted/s.json\n---\nHi.\n"),
        (
            "s.json",
            r#"{"rules": [{"reply": {"text": "too late", "delay_ms": 30000}}]}"#,
        ),
    ]);
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("flue"))
        .env("FLUE_TRUST", "1")
        .args(["run", "slow", "-m", "hi", "--json", "--id", "s", "--root"])
        .arg(ws.root())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the message is stored (the model turn is then in flight), then interrupt.
    let started = Instant::now();
    while !ws.db().exists() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no store was created"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    loop {
        let show = ws.flue(&["session", "show", "--id", "s", "--json"]);
        let stored = show.status.success()
            && json(&show)["messages"]
                .as_array()
                .is_some_and(|messages| !messages.is_empty());
        if stored {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the message was never stored"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = child.id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(130), "{}", stderr(&output));
    let envelope = json(&output);
    assert_eq!(envelope["outcome"], "aborted");
    let show = ws.flue(&["session", "show", "--id", "s", "--json"]);
    let messages = json(&show)["messages"].as_array().unwrap().clone();
    assert_eq!(
        messages.len(),
        1,
        "only the acknowledged user message: {messages:?}"
    );
}

#[test]
fn help_version_and_unknown_flags() {
    let help = assert_cmd::Command::cargo_bin("flue")
        .unwrap()
        .env("FLUE_TRUST", "1")
        .arg("--help")
        .output()
        .unwrap();
    assert!(help.status.success());
    assert!(stdout(&help).contains("run"));
    let version = assert_cmd::Command::cargo_bin("flue")
        .unwrap()
        .env("FLUE_TRUST", "1")
        .arg("--version")
        .output()
        .unwrap();
    assert_eq!(
        stdout(&version),
        format!("flue {}\n", env!("CARGO_PKG_VERSION"))
    );
    let bad = assert_cmd::Command::cargo_bin("flue")
        .unwrap()
        .env("FLUE_TRUST", "1")
        .args(["run", "hello", "-m", "x", "--bogus"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    assert!(stderr(&bad).contains("--bogus"));
    // Every usage error is exit 1, like other setup errors: no subcommand, a missing value.
    for args in [&[][..], &["run", "hello"][..], &["session", "show"][..]] {
        let usage = assert_cmd::Command::cargo_bin("flue")
            .unwrap()
            .env("FLUE_TRUST", "1")
            .args(args)
            .output()
            .unwrap();
        assert_eq!(usage.status.code(), Some(1), "{args:?}: {}", stderr(&usage));
        assert!(stderr(&usage).contains("Usage:"), "{}", stderr(&usage));
        assert_eq!(stdout(&usage), "");
    }
    let sub_help = assert_cmd::Command::cargo_bin("flue")
        .unwrap()
        .env("FLUE_TRUST", "1")
        .args(["run", "--help"])
        .output()
        .unwrap();
    assert_eq!(sub_help.status.code(), Some(0));
    assert!(stdout(&sub_help).contains("--id"));
}
