//! Hooks from real scripts (bash with jq, Python) in real `flue run` processes: declared in an
//! agent file's `hooks:` or flue.toml's `[hooks]` with the shape of Claude Code's settings,
//! asked at every point, blocking and rewriting tool calls, adding context, guarding the
//! prompt and the reply, failing (timeout, crash) closed or open, recorded in the session log
//! and not asked again after a pause or a kill -9. The scripts and their provenance are in
//! `tests/hooks/`; the model is the scripted one.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;

use crate::{Workspace, json, stderr, stdout};

/// The scripted model: `clean` -> `rm -rf build`; `greet` -> `echo unsafe`; `confirm` -> a
/// command the rewrite hook sends for confirmation; `wait` -> a command that waits for
/// `release`; `pad` -> `echo PWNED > marker` padded with 70,000 quotes; `ssn` -> a command
/// printing 29,000 control characters and a social security number; `pii` -> a 144 KB reply
/// ending with one; after a bash result -> `tool said: <result>`; `finish` -> `draft`, and
/// after the Stop hook's reason a checked reply with an address in it; anything else echoed.
fn script() -> String {
    let call = |command: &str| serde_json::json!([{"name": "bash", "input": {"command": command}}]);
    let padded = format!("echo PWNED > marker # {}", "\"".repeat(70_000));
    let long_reply = format!("{} Your SSN is 123-45-6789.", "lorem ".repeat(24_000));
    serde_json::json!({"rules": [
        {"when": {"tool_result": "bash"}, "reply": {"text": "tool said: {{tool_result}}"}},
        {"when": {"user_matches": "^pad$"}, "reply": {"tool_calls": call(&padded)}},
        {"when": {"user_matches": "^ssn$"}, "reply": {"tool_calls": call(
            "head -c 29000 /dev/zero | tr '\\0' '\\001'; echo \" 123-45-$((6788 + 1))\""
        )}},
        {"when": {"user_matches": "^pii$"}, "reply": {"text": long_reply}},
        {"when": {"user_matches": "^clean$"}, "reply": {"tool_calls": call("rm -rf build")}},
        {"when": {"user_matches": "^greet$"}, "reply": {"tool_calls": call("echo unsafe")}},
        {"when": {"user_matches": "^fail$"}, "reply": {"tool_calls": [
            {"name": "bash", "input": {"cmd": "the field is `command`"}}
        ]}},
        {"when": {"user_matches": "^confirm$"}, "reply": {"tool_calls": call("echo ask-me")}},
        {"when": {"user_matches": "^wait$"}, "reply": {"tool_calls": [
            {"name": "bash", "input": {"command": "rm -rf build"}},
            {"name": "bash", "input": {"command":
                "touch started; while [ ! -f release ]; do sleep 0.05; done; echo released"}}
        ]}},
        {"when": {"user_contains": "checked your work"},
         "reply": {"text": "final: checked, mail me at dev@example.com"}},
        {"when": {"user_matches": "^finish$"}, "reply": {"text": "draft"}},
        {"reply": {"text": "echo: {{user}}"}}
    ]})
    .to_string()
}

/// A workspace whose agent `guarded` (bash, local sandbox) declares `hooks` (YAML, indented
/// under `hooks:`), with the scripts of tests/hooks under `hooks/`.
pub(crate) fn workspace(hooks: &str) -> Workspace {
    let agent = format!(
        "---\nmodel: scripted/s.json\ntools: [bash]\nsandbox: local\nhooks:\n{hooks}---\nWork.\n"
    );
    let ws = Workspace::new(&[("agents/guarded.md", &agent), ("s.json", &script())]);
    copy_scripts(ws.root());
    std::fs::create_dir_all(ws.root().join("build")).unwrap();
    ws
}

fn copy_scripts(root: &Path) {
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hooks");
    let to = root.join("hooks");
    std::fs::create_dir_all(&to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

/// One hook group in YAML: `event` with `matcher` running `command`, plus extra hook keys.
pub(crate) fn group(event: &str, matcher: &str, command: &str, extra: &str) -> String {
    format!(
        "  {event}:\n    - matcher: \"{matcher}\"\n      hooks:\n        - type: command\n          \
         command: '{command}'\n{extra}"
    )
}

fn run(ws: &Workspace, message: &str, id: &str) -> std::process::Output {
    ws.flue(&["run", "guarded", "-m", message, "--id", id, "--json"])
}

fn show(ws: &Workspace, id: &str) -> String {
    let output = ws.flue(&["session", "show", "--id", id]);
    assert!(output.status.success(), "{}", stderr(&output));
    stdout(&output)
}

fn lines(ws: &Workspace, file: &str) -> Vec<String> {
    std::fs::read_to_string(ws.root().join(file))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_pre_tool_use_validator_blocks_rm_rf_and_the_model_sees_why() {
    let ws = workspace(&group(
        "PreToolUse",
        "Bash",
        "python3 \"$CLAUDE_PROJECT_DIR/hooks/bash_validator.py\"",
        "",
    ));
    let output = run(&ws, "clean", "c1");
    assert!(output.status.success(), "{}", stderr(&output));
    let reply = json(&output)["message"].as_str().unwrap().to_owned();
    assert!(
        reply.starts_with("tool said: ") && reply.contains("Refusing `rm -rf`"),
        "{reply}"
    );
    assert!(ws.root().join("build").is_dir(), "the command never ran");
    assert!(
        stderr(&output).contains("hook PreToolUse by command"),
        "{}",
        stderr(&output)
    );
    let shown = show(&ws, "c1");
    assert!(
        shown.contains("hook PreToolUse by command `python3") && shown.contains(": deny"),
        "{shown}"
    );
    // A harmless command passes the validator.
    let output = run(&ws, "greet", "c2");
    assert_eq!(json(&output)["message"], "tool said: unsafe\n");
}

#[test]
fn a_pre_tool_use_hook_rewrites_the_input_and_a_post_tool_use_logger_annotates_the_result() {
    let hooks = group(
        "PreToolUse",
        "Bash|Edit",
        "\"$CLAUDE_PROJECT_DIR/hooks/rewrite.py\"",
        "",
    ) + &group(
        "PostToolUse",
        ".*",
        "bash \"$CLAUDE_PROJECT_DIR/hooks/log_tool.sh\"",
        "",
    );
    let ws = workspace(&hooks);
    let output = run(&ws, "greet", "c1");
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        json(&output)["message"],
        "tool said: safe\n\n\n(this call was logged)"
    );
    let logged = lines(&ws, "tool-calls.log");
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert!(
        logged[0].starts_with("Bash ") && logged[0].ends_with(r#"{"command":"echo safe"}"#),
        "{logged:?}"
    );
    let shown = show(&ws, "c1");
    assert!(
        shown.contains(r#"input replaced with {"command":"echo safe"}"#),
        "{shown}"
    );
}

#[test]
fn a_hook_that_asks_pauses_the_call_and_the_confirmed_call_runs_as_rewritten_without_asking_again()
{
    let hooks = group(
        "PreToolUse",
        "Bash",
        "in=$(cat); printf %s \"$in\" | bash hooks/count.sh; printf %s \"$in\" | python3 hooks/rewrite.py",
        "",
    );
    let ws = workspace(&hooks);
    let paused = run(&ws, "confirm", "c1");
    assert_eq!(paused.status.code(), Some(3), "{}", stderr(&paused));
    let envelope = json(&paused);
    assert_eq!(envelope["outcome"], "requires_action");
    let action = &envelope["pendingActions"][0];
    assert_eq!(action["reason"], "rewritten by rewrite.py");
    let action_id = action["action_id"].as_str().unwrap().to_owned();
    assert!(!ws.root().join("confirmed.txt").exists());
    // Another process confirms: the call runs with the hook's input, the hook is not asked.
    let resumed = ws.flue(&[
        "run",
        "guarded",
        "--id",
        "c1",
        "--confirm",
        &action_id,
        "--json",
    ]);
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    assert_eq!(json(&resumed)["message"], "tool said: confirmed\n");
    assert!(ws.root().join("confirmed.txt").exists());
    let counted = lines(&ws, "counts.log");
    assert_eq!(counted.len(), 1, "{counted:?}");
}

#[test]
fn the_prompt_hook_adds_context_and_its_block_trips_the_guardrail() {
    let ws = workspace(&group(
        "UserPromptSubmit",
        "",
        "bash hooks/prompt_guard.sh",
        "",
    ));
    let output = run(&ws, "hello", "c1");
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        json(&output)["message"],
        "echo: hello\n\nContext from the prompt hook: today is release day."
    );
    let blocked = run(&ws, "my password is hunter2", "c2");
    assert_eq!(blocked.status.code(), Some(1), "{}", stderr(&blocked));
    let error = &json(&blocked)["error"];
    assert_eq!(error["kind"], "guardrail_tripped");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("Prompts must not contain passwords."),
        "{error}"
    );
    // The prompt never reached the log; the decision did.
    let shown = show(&ws, "c2");
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(shown.contains("hook UserPromptSubmit"), "{shown}");
}

#[test]
fn the_stop_hook_sends_the_model_back_once_and_redacts_the_reply() {
    let ws = workspace(&group("Stop", "", "python3 hooks/stop_check.py", ""));
    let output = run(&ws, "finish", "c1");
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        json(&output)["message"],
        "final: checked, mail me at [email]"
    );
    let shown = show(&ws, "c1");
    assert!(
        shown.contains("user (turn 2): Say that you checked your work."),
        "{shown}"
    );
    assert!(shown.contains("hook Stop by command"), "{shown}");
}

#[test]
fn hooks_are_asked_at_every_point_and_flue_toml_hooks_run_first() {
    let count = "bash hooks/count.sh";
    let mut hooks = String::new();
    for event in [
        "SessionStart",
        "UserPromptSubmit",
        "BeforeModelCall",
        "PreToolUse",
        "PostToolUse",
        "Stop",
        "SessionEnd",
    ] {
        hooks += &group(event, "*", count, "");
    }
    let ws = workspace(&hooks);
    std::fs::write(
        ws.root().join("flue.toml"),
        "[[hooks.PreToolUse]]\nmatcher = \"Bash\"\nhooks = [{ type = \"command\", command = \
         \"echo toml >> counts.log\" }]\n",
    )
    .unwrap();
    let output = run(&ws, "greet", "c1");
    assert!(output.status.success(), "{}", stderr(&output));
    let counted = lines(&ws, "counts.log");
    let events: Vec<&str> = counted
        .iter()
        .map(|line| line.split(' ').next().unwrap_or_default())
        .collect();
    assert_eq!(
        events,
        [
            "SessionStart",
            "UserPromptSubmit",
            "BeforeModelCall",
            "toml",
            "PreToolUse",
            "PostToolUse",
            "BeforeModelCall",
            "Stop",
            "SessionEnd"
        ],
        "{counted:?}"
    );
    // The second message of the conversation starts no session.
    let output = run(&ws, "hello", "c1");
    assert!(output.status.success(), "{}", stderr(&output));
    let counted = lines(&ws, "counts.log");
    assert_eq!(
        counted
            .iter()
            .filter(|line| line.starts_with("SessionStart"))
            .count(),
        1
    );
}

#[test]
fn failing_hooks_fail_closed_at_blocking_points_unless_set_to_continue() {
    let timeout = "          timeout: 1\n";
    let ws = workspace(&group("PreToolUse", "Bash", "bash hooks/slow.sh", timeout));
    let started = Instant::now();
    let output = run(&ws, "greet", "c1");
    assert!(output.status.success(), "{}", stderr(&output));
    let reply = json(&output)["message"].as_str().unwrap().to_owned();
    assert!(
        reply.contains("timed out after 1 s") && reply.contains("fails closed"),
        "{reply}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "the hook was killed at its timeout"
    );

    let ws = workspace(&group("PreToolUse", "Bash", "bash hooks/crash.sh", ""));
    let output = run(&ws, "greet", "c1");
    let reply = json(&output)["message"].as_str().unwrap().to_owned();
    assert!(reply.contains("was killed (exit code 137)"), "{reply}");

    let open = "          onFailure: continue\n";
    let ws = workspace(&group("PreToolUse", "Bash", "bash hooks/crash.sh", open));
    let output = run(&ws, "greet", "c1");
    assert_eq!(json(&output)["message"], "tool said: unsafe\n");
    assert!(
        stderr(&output).contains("the command was killed"),
        "{}",
        stderr(&output)
    );

    // A prompt hook that fails closed ends the operation with `hook_failed`.
    let ws = workspace(&group("UserPromptSubmit", "", "bash hooks/crash.sh", ""));
    let output = run(&ws, "hello", "c1");
    assert_eq!(json(&output)["error"]["kind"], "hook_failed");

    // Exit code 1 is a non-blocking error: reported, the call runs.
    let ws = workspace(&group(
        "PreToolUse",
        "Bash",
        "cat > /dev/null; echo nope >&2; exit 1",
        "",
    ));
    let output = run(&ws, "greet", "c1");
    assert_eq!(json(&output)["message"], "tool said: unsafe\n");
    assert!(
        stderr(&output).contains("non-blocking error"),
        "{}",
        stderr(&output)
    );
}

/// Hook input of any size reaches the hook whole, on standard input (over 128 KiB, one
/// environment variable could not carry it and the hook could not start): a guard set to
/// `onFailure: continue` still refuses a command padded with 70,000 quotes, a redaction hook
/// still redacts a result whose number follows 29,000 control characters, and a Stop
/// guardrail still stops a 144 KB reply holding one. `FLUE_HOOK_INPUT` holds a small input
/// (the same text as standard input) and is absent for a large one.
#[test]
fn guards_hold_whatever_the_size_of_their_input() {
    let open = "          onFailure: continue\n";
    let sizes = "in=$(cat); if [ \"${FLUE_HOOK_INPUT+set}\" = set ]; then \
                 if [ \"$in\" = \"$FLUE_HOOK_INPUT\" ]; then v=same; else v=differs; fi; \
                 else v=absent; fi; echo \"${#in} $v\" >> sizes.log";
    let hooks = group("PreToolUse", "Bash", "bash hooks/no_pwned.sh", open)
        + &group("PostToolUse", "Bash", "python3 hooks/redact_ssn.py", open)
        + &group("Stop", "", "python3 hooks/no_pii_in_replies.py", open);
    let ws = workspace(&hooks);
    std::fs::write(
        ws.root().join("flue.toml"),
        format!(
            "[[hooks.PreToolUse]]\nmatcher = \"Bash\"\nhooks = [{{ type = \"command\", command = \
             '{sizes}' }}]\n"
        ),
    )
    .unwrap();

    let output = run(&ws, "pad", "c1");
    assert!(output.status.success(), "{}", stderr(&output));
    let reply = json(&output)["message"].as_str().unwrap().to_owned();
    assert_eq!(
        reply,
        "tool said: Refusing: this command writes the PWNED marker."
    );
    assert!(!ws.root().join("marker").exists(), "the padded command ran");

    let output = run(&ws, "greet", "c2");
    assert_eq!(json(&output)["message"], "tool said: unsafe\n");
    let sizes: Vec<(usize, String)> = lines(&ws, "sizes.log")
        .iter()
        .map(|line| {
            let (size, how) = line.split_once(' ').unwrap();
            (size.parse().unwrap(), how.to_owned())
        })
        .collect();
    assert_eq!(sizes.len(), 2, "{sizes:?}");
    assert!(sizes[0].0 > 140_000 && sizes[0].1 == "absent", "{sizes:?}");
    assert!(sizes[1].0 < 1_000 && sizes[1].1 == "same", "{sizes:?}");

    let output = run(&ws, "ssn", "c3");
    assert!(output.status.success(), "{}", stderr(&output));
    let reply = json(&output)["message"].as_str().unwrap().to_owned();
    assert!(
        reply.ends_with(" [SSN]\n"),
        "{:?}",
        &reply[reply.len() - 40..]
    );
    assert_eq!(reply.matches('\u{1}').count(), 29_000);
    let stored = ws.flue(&["session", "show", "--id", "c3", "--json"]);
    assert!(
        !stdout(&stored).contains("123-45-6789"),
        "the log holds the number"
    );

    let output = run(&ws, "pii", "c4");
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let error = &json(&output)["error"];
    assert_eq!(error["kind"], "guardrail_tripped", "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("The reply holds a social security number."),
        "{error}"
    );
    assert!(!stdout(&output).contains("123-45-6789"));
}

/// A hook flue cannot start at all (here: no `bash` on `PATH`) fails closed wherever it could
/// stop something, even with `onFailure: continue`: the call is refused and the reply is not
/// delivered (`hook_failed`). `onFailure: continue` covers a hook's own failures, not a guard
/// that never ran.
#[test]
fn a_hook_that_cannot_start_fails_closed_even_when_set_to_continue() {
    let open = "          onFailure: continue\n";
    let run_without_bash = |ws: &Workspace, message: &str| {
        Command::new(assert_cmd::cargo::cargo_bin("flue"))
            .env("FLUE_TRUST", "1")
            .args(["run", "guarded", "-m", message, "--json", "--root"])
            .arg(ws.root())
            .env_remove("FLUE_LOG")
            .env("PATH", ws.root().join("no-programs-here"))
            .output()
            .unwrap()
    };
    let refused = "a hook that could not be started fails closed whatever its `onFailure`, so \
                   this is refused";

    let ws = workspace(&group("PreToolUse", "Bash", "bash hooks/no_pwned.sh", open));
    let output = run_without_bash(&ws, "greet");
    assert!(output.status.success(), "{}", stderr(&output));
    let reply = json(&output)["message"].as_str().unwrap().to_owned();
    assert!(
        reply.starts_with("tool said: hook `bash hooks/no_pwned.sh` (PreToolUse in agents/guarded.md): cannot run: ")
            && reply.ends_with(refused),
        "{reply}"
    );

    let ws = workspace(&group(
        "Stop",
        "",
        "python3 hooks/no_pii_in_replies.py",
        open,
    ));
    let output = run_without_bash(&ws, "hello");
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let error = &json(&output)["error"];
    assert_eq!(error["kind"], "hook_failed", "{error}");
    assert!(
        error["message"].as_str().unwrap().ends_with(refused),
        "{error}"
    );
}

/// A hook's daemon does not outlive the hook: a `setsid` daemon (out of the hook's process
/// group) dies when the hook exits; and when flue is killed with SIGKILL while a hook runs,
/// the hook and its daemon die too (the watchdog finds the daemon by its tag).
#[test]
fn a_hooks_setsid_daemon_dies_with_the_hook_and_with_flue() {
    let ws = workspace(&group("UserPromptSubmit", "", "bash hooks/daemon.sh", ""));
    let output = run(&ws, "hello", "d1");
    assert!(output.status.success(), "{}", stderr(&output));
    let daemon = pid_in(&ws, "daemon.pid");
    assert!(gone(daemon), "the daemon {daemon} outlived its hook");

    let ws = workspace(&group(
        "UserPromptSubmit",
        "",
        "bash hooks/daemon.sh 600",
        "          timeout: 600\n",
    ));
    let mut child = run_until(&ws, "hello", "d2", "hook.pid");
    let (hook, daemon) = (pid_in(&ws, "hook.pid"), pid_in(&ws, "daemon.pid"));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(gone(hook), "the hook {hook} outlived flue");
    assert!(gone(daemon), "the daemon {daemon} outlived flue");
}

/// Starts `flue run guarded -m MESSAGE --id ID` in the background and waits until `file`
/// appears at the workspace root (what the test waits for has started).
fn run_until(ws: &Workspace, message: &str, id: &str, file: &str) -> std::process::Child {
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("flue"))
        .env("FLUE_TRUST", "1")
        .args([
            "run", "guarded", "-m", message, "--id", id, "--json", "--root",
        ])
        .arg(ws.root())
        .env_remove("FLUE_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !ws.root().join(file).exists() {
        assert!(Instant::now() < deadline, "{file} never appeared");
        assert!(child.try_wait().unwrap().is_none(), "flue run ended early");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// The pid a hook wrote to `file` at the workspace root.
fn pid_in(ws: &Workspace, file: &str) -> u32 {
    std::fs::read_to_string(ws.root().join(file))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Whether process `pid` is gone (or a zombie), waiting up to a minute for it.
fn gone(pid: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    while crate::signals::alive(pid) {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

#[test]
fn a_bad_hooks_declaration_fails_the_build_naming_the_place() {
    let ws = workspace(
        "  PreToolUse:\n    - matcher: Bash\n      hooks:\n        - type: command\n          command: x\n          timeout: 0\n",
    );
    let output = ws.flue(&["build"]);
    assert!(!output.status.success());
    let err = stderr(&output);
    assert!(err.contains("agents/guarded.md:"), "{err}");
    assert!(err.contains("hooks.PreToolUse[0].hooks[0]"), "{err}");
    assert!(err.contains("`timeout` must be between 1 and 600"), "{err}");
}

/// What flue has no use for in a hooks declaration (an event it has no point for, a key of
/// Claude Code's it does not read) is a warning naming the file and line; the build and the
/// run go on, and the other hooks run.
#[test]
fn unknown_hook_events_and_keys_are_warnings_and_the_rest_runs() {
    let hooks = group(
        "UserPromptSubmit",
        "",
        "bash hooks/count.sh",
        "          statusMessage: Counting\n          async: false\n",
    ) + "  TeammateIdle:\n    - hooks:\n        - type: command\n          command: 'bash hooks/count.sh'\n"
        + "  Later: []\n";
    let ws = workspace(&hooks);
    let output = ws.flue(&["build"]);
    let err = stderr(&output);
    assert!(output.status.success(), "{err}");
    for expected in [
        "note: agents/guarded.md:11: `hooks.UserPromptSubmit[0].hooks[0].statusMessage` is ignored",
        "note: agents/guarded.md:12: `hooks.UserPromptSubmit[0].hooks[0].async` is ignored",
        "note: agents/guarded.md:13: `hooks.TeammateIdle` is a Claude Code event flue does not run",
        "note: agents/guarded.md:17: `hooks.Later` is not a hook event flue knows",
    ] {
        assert!(err.contains(expected), "{expected:?} not in:\n{err}");
    }
    let output = run(&ws, "hello", "w1");
    let err = stderr(&output);
    assert!(output.status.success(), "{err}");
    assert!(
        err.contains("warning: agents/guarded.md:13: `hooks.TeammateIdle`"),
        "{err}"
    );
    assert_eq!(lines(&ws, "counts.log"), ["UserPromptSubmit "]);
}

/// A public repository's `.claude/settings.json`, unchanged: flue runs its hooks at the points
/// it has (the settings' own command lines, with the stand-in `uv` of
/// tests/claude_settings/PROVENANCE.md first on `PATH`), notes the event it has not, and
/// `[claude_code] settings = false` turns the file off.
#[test]
fn a_public_claude_settings_file_runs_its_hooks_unchanged() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/claude_settings");
    let settings =
        std::fs::read_to_string(data.join("claude-code-hooks-mastery.settings.json")).unwrap();
    let agent = "---\nmodel: scripted/s.json\ntools: [bash]\nsandbox: local\n---\nWork.\n";
    let asker = "---\nmodel: scripted/s.json\ntools: [bash]\nsandbox: local\npermissions:\n  \
                 bash: always_ask\n---\nWork.\n";
    let ws = Workspace::new(&[
        ("agents/guarded.md", agent),
        ("agents/asker.md", asker),
        ("s.json", &script()),
        (".claude/settings.json", &settings),
    ]);
    let build = ws.flue(&["build"]);
    let err = stderr(&build);
    assert!(build.status.success(), "{err}");
    assert!(
        !err.contains("note:"),
        "flue runs every event of the file:\n{err}"
    );
    let path = format!(
        "{}:{}",
        data.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let flue_run = |agent: &str, id: &str| {
        let mut command = Command::new(assert_cmd::cargo::cargo_bin("flue"));
        command
            .args(["run", agent, "-m", "greet", "--id", id, "--json", "--root"])
            .arg(ws.root())
            .env("FLUE_TRUST", "1")
            .env("PATH", &path)
            .stdin(Stdio::null());
        command.output().unwrap()
    };
    let output = flue_run("guarded", "s1");
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(json(&output)["message"], "tool said: unsafe\n");
    assert_eq!(
        lines(&ws, "uv.log"),
        [
            "SessionStart .claude/hooks/session_start.py",
            "UserPromptSubmit .claude/hooks/user_prompt_submit.py --log-only --store-last-prompt --name-agent",
            "PreToolUse .claude/hooks/pre_tool_use.py",
            "PostToolUse .claude/hooks/post_tool_use.py",
            "Stop .claude/hooks/stop.py --chat",
        ]
    );
    // Hook decisions name the file they came from.
    assert!(show(&ws, "s1").contains(".claude/settings.json"));

    // A call that waits for a confirmation is a notification, as Claude Code's permission
    // prompt is.
    std::fs::remove_file(ws.root().join("uv.log")).unwrap();
    let _ = flue_run("asker", "s3");
    assert_eq!(
        lines(&ws, "uv.log").last().map(String::as_str),
        Some("Notification .claude/hooks/notification.py --notify")
    );

    std::fs::write(
        ws.root().join("flue.toml"),
        "[claude_code]\nsettings = false\n",
    )
    .unwrap();
    std::fs::remove_file(ws.root().join("uv.log")).unwrap();
    let output = flue_run("guarded", "s2");
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        !ws.root().join("uv.log").exists(),
        "the settings' hooks ran"
    );
}

/// A decision stored before a kill -9 is not asked for again: one turn calls `rm -rf build`
/// (denied by the validator) and a command that waits; the run is killed while the second
/// runs. The next run recovers the conversation: the denied call is answered with its stored
/// denial, the other `interrupted`, and the hooks ran once per call and once per prompt.
#[test]
fn after_kill_9_recovery_does_not_ask_the_hooks_again_for_the_same_call() {
    let count = "bash hooks/count.sh";
    let validate = "in=$(cat); printf %s \"$in\" | bash hooks/count.sh; printf %s \"$in\" | python3 hooks/bash_validator.py";
    let hooks = group("UserPromptSubmit", "", count, "")
        + &group("PreToolUse", "Bash", validate, "")
        + &group("PostToolUse", "Bash", count, "");
    let ws = workspace(&hooks);
    let mut child = run_until(&ws, "wait", "k1", "started");
    child.kill().unwrap();
    child.wait().unwrap();
    std::fs::write(ws.root().join("release"), "").unwrap();
    let output = run(&ws, "hello", "k1");
    assert!(output.status.success(), "{}", stderr(&output));
    let counted = lines(&ws, "counts.log");
    let pre: Vec<&String> = counted
        .iter()
        .filter(|line| line.starts_with("PreToolUse"))
        .collect();
    assert_eq!(pre.len(), 2, "one per call: {counted:?}");
    assert!(ws.root().join("build").is_dir());
    let prompts = counted
        .iter()
        .filter(|line| line.starts_with("UserPromptSubmit"))
        .count();
    assert_eq!(prompts, 2, "one per message: {counted:?}");
    let shown = show(&ws, "k1");
    assert!(shown.contains("interrupted"), "{shown}");
    assert!(
        shown.contains("tool result (bash error): - Refusing `rm -rf`"),
        "{shown}"
    );
}

/// `flue serve` runs the agent file's hooks for messages posted over HTTP.
#[test]
fn flue_serve_runs_the_hooks_of_the_agent_file() {
    let hooks = group(
        "PreToolUse",
        "Bash",
        "in=$(cat); printf %s \"$in\" | bash hooks/count.sh; printf %s \"$in\" | python3 hooks/bash_validator.py",
        "",
    );
    let ws = workspace(&hooks);
    let server = crate::serve::Server::start(ws.root(), &[], &[]);
    let path = "/agents/guarded/s1";
    crate::serve::post_message(server.addr(), path, "clean");
    let deadline = Instant::now() + Duration::from_secs(120);
    let snapshot = loop {
        let snapshot = crate::serve::snapshot(server.addr(), path);
        if !snapshot["settlements"].as_array().unwrap().is_empty() {
            break snapshot;
        }
        assert!(Instant::now() < deadline, "never settled: {}", server.log());
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        snapshot.to_string().contains("Refusing `rm -rf`"),
        "{snapshot}"
    );
    assert!(ws.root().join("build").is_dir());
    assert_eq!(lines(&ws, "counts.log").len(), 1);
}

/// A hook sees the allow-listed environment and the variables it declares in `env`, never
/// the rest of flue's environment (provider keys and other secrets).
#[test]
fn a_hook_sees_only_the_allow_listed_and_declared_environment() {
    let command = "cat > /dev/null; echo \"secret=[${SECRET_TOKEN:-}] declared=[${DECLARED_VAR:-}] root=[$CLAUDE_PROJECT_DIR]\"";
    let ws = workspace(&group(
        "UserPromptSubmit",
        "",
        command,
        "          env: [DECLARED_VAR]\n",
    ));
    let output = Command::new(assert_cmd::cargo::cargo_bin("flue"))
        .env("FLUE_TRUST", "1")
        .args([
            "run", "guarded", "-m", "hello", "--id", "e1", "--json", "--root",
        ])
        .arg(ws.root())
        .env_remove("FLUE_LOG")
        .env("SECRET_TOKEN", "sk-do-not-leak")
        .env("DECLARED_VAR", "visible")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let root = std::fs::canonicalize(ws.root()).unwrap();
    assert_eq!(
        json(&output)["message"],
        format!(
            "echo: hello\n\nsecret=[] declared=[visible] root=[{}]",
            root.display()
        )
    );
}

/// `flue chat` runs the hooks for every line.
#[test]
fn flue_chat_runs_the_hooks_for_every_line() {
    let ws = workspace(&group("Stop", "", "python3 hooks/stop_check.py", ""));
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("flue"))
        .env("FLUE_TRUST", "1")
        .args(["chat", "guarded", "--id", "t1", "--root"])
        .arg(ws.root())
        .env_remove("FLUE_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"finish\nhello\n").unwrap();
    }
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        "final: checked, mail me at [email]\nfinal: checked, mail me at [email]\n"
    );
}

/// The state records of conversation `id`: (version, source, call id present, value).
fn state_records(ws: &Workspace, id: &str) -> Vec<(u64, String, bool, serde_json::Value)> {
    let shown = json(&ws.flue(&["session", "show", "--id", id, "--json"]));
    shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|message| message["type"] == "state")
        .map(|message| {
            (
                message["version"].as_u64().unwrap(),
                message["source"].as_str().unwrap().to_owned(),
                message["call_id"].is_string(),
                message["value"].clone(),
            )
        })
        .collect()
}

/// A real hook script reads the conversation's state at every point (`flue_state`) and writes
/// it (`updatedState`): each write is a `state` record named after its point, stored with the
/// decision, seen by the next hook; a write where decisions are not stored (SessionEnd), one
/// that is not an object and one over the size limit are refused as hook failures, writing
/// nothing (at a blocking point the prompt is refused with `hook_failed`).
#[test]
fn hooks_read_the_conversation_state_and_write_it_as_stored_state_records() {
    let command = "python3 \"$CLAUDE_PROJECT_DIR/hooks/state_hook.py\"";
    let hooks = [
        "UserPromptSubmit",
        "PreToolUse",
        "PostToolUse",
        "Stop",
        "SessionEnd",
    ]
    .iter()
    .map(|event| group(event, "", command, ""))
    .collect::<String>();
    let ws = workspace(&hooks);
    let output = run(&ws, "greet", "c1");
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(json(&output)["message"], "tool said: unsafe\n");
    let after_first = serde_json::json!({
        "UserPromptSubmit": 1, "PreToolUse": 1, "PostToolUse": 1, "last_tool": "Bash", "Stop": 1
    });
    let records = state_records(&ws, "c1");
    let sources: Vec<(u64, &str, bool)> = records
        .iter()
        .map(|(version, source, call, _)| (*version, source.as_str(), *call))
        .collect();
    assert_eq!(
        sources,
        vec![
            (1, "hook:UserPromptSubmit", false),
            (2, "hook:PreToolUse", true),
            (3, "hook:PostToolUse", true),
            (4, "hook:Stop", false),
        ]
    );
    assert_eq!(records[3].3, after_first);
    // Each hook saw the writes before it; SessionEnd saw the last one and could not write.
    let seen: Vec<serde_json::Value> = lines(&ws, "seen.log")
        .iter()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(
        seen[0],
        serde_json::json!({"event": "UserPromptSubmit", "state": {}})
    );
    assert_eq!(seen[1]["state"], serde_json::json!({"UserPromptSubmit": 1}));
    assert_eq!(seen[4]["event"], "SessionEnd");
    assert_eq!(seen[4]["state"], after_first);
    // SessionEnd decisions are reported (on stderr), not stored.
    assert!(
        stderr(&output)
            .contains("SessionEnd, whose decisions are not stored, so it cannot change the state"),
        "{}",
        stderr(&output)
    );

    // The next message starts from the stored state (another process: read back).
    let output = run(&ws, "hello", "c1");
    assert!(output.status.success(), "{}", stderr(&output));
    let records = state_records(&ws, "c1");
    let (version, _, _, value) = records.last().unwrap();
    assert_eq!(*version, 6);
    assert_eq!(value["UserPromptSubmit"], 2);
    assert_eq!(value["Stop"], 2);

    // Refused writes: not an object; over the size limit. The prompt hook fails closed, the
    // message is not stored, the state stays at version 6.
    for (prompt, says) in [
        (
            "state: [1, 2]",
            "its new state (`updatedState`) was refused, nothing was written: invalid state: \
             the state must be a JSON object",
        ),
        (
            "state: huge",
            "its new state (`updatedState`) was refused, nothing was written: the state is \
             71690 bytes of JSON, over its limit of 65536 bytes",
        ),
    ] {
        let output = run(&ws, prompt, "c1");
        assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
        let error = &json(&output)["error"];
        assert_eq!(error["kind"], "hook_failed", "{error}");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(says), "{message}");
        assert_eq!(state_records(&ws, "c1").len(), 6);
    }
}

/// Anthropic's Ralph Wiggum loop (tests/claude_code_plugins, unchanged): its setup script
/// writes the loop's state, its Stop hook (declared in `.claude/settings.json`) reads the last
/// reply from `transcript_path` and sends the model back with the loop's prompt until the
/// reply holds the completion promise. The model makes one pass per reply (a counter file); the
/// third pass prints the promise, so the loop runs to its end: two blocks, three replies, the
/// state file removed by the hook.
#[test]
fn the_ralph_wiggum_stop_hook_runs_its_loop_to_the_end() {
    let plugin =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/claude_code_plugins/ralph-wiggum");
    let pass = "n=$(( $(cat passes 2>/dev/null || echo 0) + 1 )); echo $n > passes; \
                if [ $n -ge 3 ]; then echo '<promise>ALL PASSES DONE</promise>'; else echo \"pass $n\"; fi";
    let script = serde_json::json!({"rules": [
        {"when": {"tool_result": "bash"}, "reply": {"text": "Pass result: {{tool_result}}"}},
        {"when": {"user_contains": "Count the passes"},
         "reply": {"tool_calls": [{"name": "bash", "input": {"command": pass}}]}}
    ]})
    .to_string();
    let settings = serde_json::json!({"hooks": {"Stop": [{"hooks": [
        {"type": "command", "command": format!("{}/stop-hook.sh", plugin.display())}
    ]}]}})
    .to_string();
    let ws = Workspace::new(&[
        (
            "agents/ralph.md",
            "---\nmodel: scripted/s.json\ntools: [bash]\nsandbox: local\n---\nWork.\n",
        ),
        ("s.json", &script),
        (".claude/settings.json", &settings),
    ]);
    let setup = Command::new("bash")
        .arg(plugin.join("setup-ralph-loop.sh"))
        .args([
            "Count the passes",
            "--completion-promise",
            "ALL PASSES DONE",
        ])
        .args(["--max-iterations", "10"])
        .current_dir(ws.root())
        .output()
        .unwrap();
    assert!(
        setup.status.success(),
        "{}",
        String::from_utf8_lossy(&setup.stderr)
    );
    let state_file = ws.root().join(".claude/ralph-loop.local.md");
    assert!(state_file.exists());

    let output = ws.flue(&[
        "run",
        "ralph",
        "-m",
        "Count the passes",
        "--id",
        "r1",
        "--json",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        json(&output)["message"],
        "Pass result: <promise>ALL PASSES DONE</promise>\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.root().join("passes")).unwrap(),
        "3\n"
    );
    assert!(
        !state_file.exists(),
        "the hook ends its loop by removing its state"
    );
    let shown = show(&ws, "r1");
    assert_eq!(
        shown
            .matches("(.claude/settings.json): block: \nCount the passes")
            .count(),
        2,
        "{shown}"
    );
    assert!(
        shown.contains("(.claude/settings.json): continue"),
        "{shown}"
    );

    // The transcript the hook read: Claude Code's JSON lines, ending with the last reply.
    let transcripts: Vec<_> = std::fs::read_dir(ws.root().join(".flue/transcripts"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    assert_eq!(transcripts.len(), 1, "{transcripts:?}");
    let text = std::fs::read_to_string(&transcripts[0]).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let assistant: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|line| line["type"] == "assistant")
        .collect();
    assert_eq!(
        assistant.len(),
        6,
        "three passes, each a tool call and a reply:\n{text}"
    );
    assert_eq!(assistant[0]["message"]["content"][0]["type"], "tool_use");
    assert_eq!(assistant[0]["message"]["content"][0]["name"], "Bash");
    let last = assistant.last().unwrap();
    assert_eq!(
        last["message"]["content"][0]["text"],
        "Pass result: <promise>ALL PASSES DONE</promise>\n"
    );
    assert!(
        text.contains("\"role\":\"assistant\""),
        "compact, as scripts grep it"
    );
}

/// A failed call is `PostToolUseFailure` after its `PostToolUse`, with Claude Code's `error`;
/// a call that waits for a confirmation is a `Notification` of type `permission_prompt`,
/// whose matcher selects that type.
#[test]
fn a_failed_call_and_a_pause_reach_their_hooks() {
    let log = "jq -c \"{event: .hook_event_name, error, notification_type, message, agent_type, duration_ms}\" \
               >> events.log";
    let hooks = group("PostToolUse", "Bash", log, "")
        + &group("PostToolUseFailure", "Bash", log, "")
        + &group("Notification", "permission_prompt", log, "")
        + "    - matcher: elicitation_dialog\n      hooks:\n        - type: command\n          \
           command: touch wrong-type\n";
    let ws = workspace(&hooks);
    let output = run(&ws, "greet", "f1");
    assert!(output.status.success(), "{}", stderr(&output));
    let events: Vec<serde_json::Value> = lines(&ws, "events.log")
        .iter()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(
        events.len(),
        1,
        "a call that succeeded is no failure: {events:?}"
    );
    assert_eq!(events[0]["event"], "PostToolUse");
    assert_eq!(events[0]["agent_type"], "guarded");
    assert!(events[0]["duration_ms"].is_u64(), "{events:?}");

    let output = run(&ws, "fail", "f2");
    assert!(output.status.success(), "{}", stderr(&output));
    let events: Vec<serde_json::Value> = lines(&ws, "events.log")
        .iter()
        .skip(1)
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(
        events
            .iter()
            .map(|e| e["event"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["PostToolUse", "PostToolUseFailure"]
    );
    assert!(
        events[1]["error"].as_str().unwrap().contains("command"),
        "the call's error: {events:?}"
    );

    std::fs::write(
        ws.root().join("agents/guarded.md"),
        std::fs::read_to_string(ws.root().join("agents/guarded.md"))
            .unwrap()
            .replace(
                "sandbox: local\n",
                "sandbox: local\npermissions:\n  bash: always_ask\n",
            ),
    )
    .unwrap();
    let _ = run(&ws, "greet", "f3");
    let last: serde_json::Value =
        serde_json::from_str(lines(&ws, "events.log").last().unwrap()).unwrap();
    assert_eq!(last["event"], "Notification");
    assert_eq!(last["notification_type"], "permission_prompt");
    assert_eq!(
        last["message"],
        "the agent needs your permission to use Bash"
    );
    assert!(!ws.root().join("wrong-type").exists());
}

/// Hooks run on the host at the workspace root: beside the virtual sandbox, whose files are an
/// in-memory copy, they would change the workspace's files the sandbox leaves untouched. Such a
/// run is refused before anything runs, saying why and what to do.
#[test]
fn hooks_beside_a_virtual_sandbox_are_refused_and_nothing_runs() {
    let ws = workspace(&group("UserPromptSubmit", "", "touch hook-ran", ""));
    let output = ws.flue(&["run", "guarded", "-m", "greet", "--sandbox", "virtual"]);
    let err = stderr(&output);
    assert!(!output.status.success(), "{err}");
    for needed in [
        "agent `guarded` runs in the virtual sandbox",
        "its hooks run on the host at the workspace root",
        "command `touch hook-ran` (agents/guarded.md)",
        "--sandbox local",
    ] {
        assert!(err.contains(needed), "{needed:?} not in:\n{err}");
    }
    assert!(!ws.root().join("hook-ran").exists());
    // The same agent in its own local sandbox runs its hooks.
    let output = run(&ws, "greet", "v2");
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(ws.root().join("hook-ran").exists());
}

/// A `PermissionRequest` hook answers the confirmation a call would wait for: the call it
/// allows runs without a pause, the one it denies is refused with its message, which the
/// model sees; neither waits for a person.
#[test]
fn a_permission_request_hook_answers_the_confirmation() {
    let ws = workspace(&group(
        "PermissionRequest",
        "Bash",
        "bash hooks/permission.sh",
        "",
    ));
    let agent = ws.root().join("agents/guarded.md");
    let text = std::fs::read_to_string(&agent).unwrap();
    std::fs::write(
        &agent,
        text.replace(
            "sandbox: local\n",
            "sandbox: local\npermissions:\n  bash: always_ask\n",
        ),
    )
    .unwrap();
    let output = run(&ws, "greet", "p1");
    assert!(output.status.success(), "{}", stderr(&output));
    let answer = json(&output);
    assert_eq!(answer["message"], "tool said: unsafe\n", "{answer}");
    assert_eq!(
        answer["pending_actions"].as_array().map_or(0, Vec::len),
        0,
        "{answer}"
    );

    let output = run(&ws, "clean", "p2");
    assert!(output.status.success(), "{}", stderr(&output));
    let reply = json(&output)["message"].as_str().unwrap().to_owned();
    assert!(reply.contains("only echo runs without a person"), "{reply}");
    assert!(ws.root().join("build").exists(), "the denied call ran");
    assert!(show(&ws, "p2").contains("hook PermissionRequest by command"));
}

/// A loopback HTTP server for http hooks: it answers every request with one status and body,
/// and keeps each request's head and body.
#[derive(Clone)]
pub(crate) struct HookServer {
    pub(crate) port: u16,
    requests: std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>,
    connections: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl HookServer {
    pub(crate) fn start(status: &'static str, body: &'static str) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let server = Self {
            port: listener.local_addr().unwrap().port(),
            requests: std::sync::Arc::default(),
            connections: std::sync::Arc::default(),
        };
        let shared = server.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                shared
                    .connections
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let shared = shared.clone();
                std::thread::spawn(move || shared.answer(stream, status, body));
            }
        });
        server
    }

    fn answer(&self, mut stream: std::net::TcpStream, status: &str, body: &str) {
        use std::io::{BufRead as _, Read as _, Write as _};
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
        let mut head = String::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        let length = head
            .lines()
            .find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse::<usize>().ok())?
            })
            .unwrap_or(0);
        let mut request_body = vec![0; length];
        reader.read_exact(&mut request_body).unwrap();
        self.requests
            .lock()
            .unwrap()
            .push((head, String::from_utf8(request_body).unwrap()));
        let answer = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = stream.write_all(answer.as_bytes());
    }

    /// The requests received so far: (head, body).
    pub(crate) fn requests(&self) -> Vec<(String, String)> {
        self.requests.lock().unwrap().clone()
    }

    /// The connections accepted so far.
    pub(crate) fn connections(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.port)
    }
}

/// One http hook group in YAML: `event` with `matcher` POSTing to `url`, plus extra keys.
pub(crate) fn http_group(event: &str, matcher: &str, url: &str, extra: &str) -> String {
    format!(
        "  {event}:\n    - matcher: \"{matcher}\"\n      hooks:\n        - type: http\n          \
         url: \"{url}\"\n{extra}"
    )
}

/// `flue run guarded` trusted, with `HOOK_TOKEN` (listed by the hook) and `OTHER_TOKEN` (not
/// listed) in its environment.
fn run_with_tokens(ws: &Workspace, message: &str, id: &str) -> std::process::Output {
    Command::new(assert_cmd::cargo::cargo_bin("flue"))
        .env("FLUE_TRUST", "1")
        .env("HOOK_TOKEN", "tok-listed-1234")
        .env("OTHER_TOKEN", "tok-unlisted-5678")
        .args([
            "run", "guarded", "-m", message, "--id", id, "--json", "--root",
        ])
        .arg(ws.root())
        .env_remove("FLUE_LOG")
        .output()
        .unwrap()
}

/// An http hook gets the input a command hook reads on standard input as its request body,
/// with its headers (variables filled only where the hook lists them), and its 2xx answer's
/// JSON decision is read as a command's standard output: a deny stops the call.
#[test]
fn an_http_pre_tool_use_hook_gets_the_hook_input_and_its_deny_stops_the_tool() {
    let server = HookServer::start(
        "200 OK",
        r#"{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": "the policy server says no"}}"#,
    );
    let extra = "          headers: { Authorization: \"Bearer ${HOOK_TOKEN}\", X-Other: \
                 \"[$OTHER_TOKEN]\" }\n          allowedEnvVars: [HOOK_TOKEN]\n          \
                 timeout: 20\n";
    let ws = workspace(&http_group("PreToolUse", "Bash", &server.url(), extra));
    let output = run_with_tokens(&ws, "clean", "h1");
    assert!(output.status.success(), "{}", stderr(&output));
    let reply = json(&output)["message"].as_str().unwrap().to_owned();
    assert_eq!(reply, "tool said: the policy server says no");
    assert!(ws.root().join("build").is_dir(), "the command never ran");

    let requests = server.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    let (head, body) = &requests[0];
    assert!(head.starts_with("POST /hook HTTP/1.1\r\n"), "{head}");
    let lower = head.to_ascii_lowercase();
    assert!(lower.contains("content-type: application/json"), "{head}");
    assert!(
        lower.contains("authorization: bearer tok-listed-1234"),
        "{head}"
    );
    assert!(
        lower.contains("x-other: []"),
        "an unlisted variable is empty: {head}"
    );
    let input: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(input["hook_event_name"], "PreToolUse");
    assert_eq!(input["tool_name"], "Bash");
    assert_eq!(
        input["tool_input"],
        serde_json::json!({"command": "rm -rf build"})
    );
    assert_eq!(input["session_id"], "guarded:h1");
    assert_eq!(input["cwd"], ws.root().display().to_string());
    assert!(input["transcript_path"].as_str().is_some(), "{input}");

    // The header's value is in no output and not in the session log.
    let shown = show(&ws, "h1");
    assert!(shown.contains("hook PreToolUse by http `"), "{shown}");
    for text in [stderr(&output), stdout(&output), shown] {
        assert!(
            !text.contains("tok-listed-1234"),
            "a header value leaked: {text}"
        );
    }
}

/// An http hook that answers an error status at a blocking point fails closed (the call does
/// not run); one nobody answers fails closed even when set to continue, as a command hook that
/// cannot start does.
#[test]
fn an_http_hook_answering_500_or_unreachable_fails_closed() {
    let server = HookServer::start("500 Internal Server Error", r#"{"error": "down"}"#);
    let ws = workspace(&http_group("PreToolUse", "Bash", &server.url(), ""));
    let output = run(&ws, "greet", "h2");
    assert!(output.status.success(), "{}", stderr(&output));
    let reply = json(&output)["message"].as_str().unwrap().to_owned();
    assert!(
        reply.contains("answered HTTP 500") && reply.contains("fails closed"),
        "{reply}"
    );
    assert_eq!(server.connections(), 1);

    // Nothing listens on the port of a server that was bound and dropped.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "http://127.0.0.1:{}/hook",
        closed.local_addr().unwrap().port()
    );
    drop(closed);
    let open = "          onFailure: continue\n";
    let ws = workspace(&http_group("PreToolUse", "Bash", &url, open));
    let output = run(&ws, "greet", "h3");
    let reply = json(&output)["message"].as_str().unwrap().to_owned();
    assert!(
        reply.contains("no answer") && reply.contains("fails closed whatever its `onFailure`"),
        "{reply}"
    );
    assert!(!reply.contains("unsafe"), "the call ran: {reply}");
}

/// An http hook in `.claude/settings.json` (Claude Code's shape) and one in flue.toml run in a
/// trusted workspace: the settings file's `UserPromptSubmit` block trips the guardrail, and
/// flue.toml's plain-text answer is context for the model.
#[test]
fn http_hooks_in_claude_settings_and_flue_toml_run() {
    let blocker = HookServer::start(
        "200 OK",
        r#"{"decision": "block", "reason": "no prompts today"}"#,
    );
    let context = HookServer::start("200 OK", "the build is green");
    let ws = workspace(&group("SessionStart", "", "true", ""));
    let settings = serde_json::json!({"hooks": {"UserPromptSubmit": [{"hooks": [
        {"type": "http", "url": blocker.url(), "timeout": 30}
    ]}]}});
    std::fs::create_dir_all(ws.root().join(".claude")).unwrap();
    std::fs::write(
        ws.root().join(".claude/settings.json"),
        serde_json::to_string_pretty(&settings).unwrap(),
    )
    .unwrap();
    let output = run(&ws, "hello", "s1");
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let error = &json(&output)["error"];
    assert_eq!(error["kind"], "guardrail_tripped", "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("no prompts today"),
        "{error}"
    );
    let requests = blocker.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    let input: serde_json::Value = serde_json::from_str(&requests[0].1).unwrap();
    assert_eq!(input["prompt"], "hello");

    std::fs::remove_dir_all(ws.root().join(".claude")).unwrap();
    let toml = format!(
        "[[hooks.UserPromptSubmit]]\nhooks = [{{ type = \"http\", url = \"{}\" }}]\n",
        context.url()
    );
    std::fs::write(ws.root().join("flue.toml"), toml).unwrap();
    let output = run(&ws, "hello", "s2");
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        json(&output)["message"],
        "echo: hello\n\nthe build is green"
    );
    assert_eq!(context.requests().len(), 1);
}

/// The transcript a hook reads grows by appending (the lines written for the first message
/// stay as they were, byte for byte), and `flue session delete` removes it with the
/// conversation; another conversation's stays.
#[test]
fn the_hook_transcript_grows_by_appending_and_goes_with_its_conversation() {
    let ws = workspace(&group(
        "UserPromptSubmit",
        "",
        "python3 -c \"import json,sys; print(json.load(sys.stdin)[\\\"transcript_path\\\"])\" > /dev/null",
        "",
    ));
    let dir = ws.root().join(".flue/transcripts");
    for (message, id) in [("greet", "t1"), ("hello", "t2")] {
        let output = run(&ws, message, id);
        assert!(output.status.success(), "{}", stderr(&output));
    }
    let t1 = dir.join("guarded_t1.default.jsonl");
    // At the first message the log is empty; at the second it holds the first exchange.
    let output = run(&ws, "again", "t1");
    assert!(output.status.success(), "{}", stderr(&output));
    let first = std::fs::read_to_string(&t1).unwrap();
    assert!(first.contains("\"role\":\"assistant\""), "{first}");
    let output = run(&ws, "once more", "t1");
    assert!(output.status.success(), "{}", stderr(&output));
    let second = std::fs::read_to_string(&t1).unwrap();
    assert!(
        second.len() > first.len() && second.starts_with(&first),
        "{first}\n---\n{second}"
    );
    let deleted = ws.flue(&["session", "delete", "--id", "t1"]);
    assert!(deleted.status.success(), "{}", stderr(&deleted));
    assert!(
        !t1.exists(),
        "the transcript of a deleted conversation is kept"
    );
    assert!(dir.join("guarded_t2.default.jsonl").exists());
}

/// `DELETE /agents/<agent>/<id>` on `flue serve` removes the conversation's hook transcripts
/// too (the runtime's delete tells the workspace's agents).
#[test]
fn an_http_delete_removes_the_hook_transcripts() {
    let ws = workspace(&group("UserPromptSubmit", "", "cat > /dev/null", ""));
    let token = "hooks-delete-t0ken-1";
    let server = crate::serve::Server::start(ws.root(), &["--token", token], &[]);
    let auth = format!("Bearer {token}");
    let path = "/agents/guarded/h1";
    let (status, body) = crate::serve::http(
        server.addr(),
        "POST",
        path,
        &[
            ("content-type", "application/json"),
            ("authorization", &auth),
        ],
        &serde_json::json!({"kind": "user", "body": "hello"}).to_string(),
    );
    assert_eq!(status, 202, "{body}");
    let transcript = ws.root().join(".flue/transcripts/guarded_h1.default.jsonl");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, body) =
            crate::serve::http(server.addr(), "GET", path, &[("authorization", &auth)], "");
        if body.contains("\"settlements\":[{") || body.contains("completed") {
            break;
        }
        assert!(Instant::now() < deadline, "never settled: {}", server.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(transcript.exists(), "the hook wrote no transcript");
    let (status, body) = crate::serve::http(
        server.addr(),
        "DELETE",
        path,
        &[("authorization", &auth)],
        "",
    );
    assert!((200..300).contains(&status), "{status}: {body}");
    assert!(
        !transcript.exists(),
        "the transcript outlived its conversation"
    );
}
