//! Hostile workspace files and inputs: YAML bombs run under a memory cap, seeds that point
//! out of the workspace, malformed conversation ids, damaged stores.

use std::process::Output;

use assert_cmd::Command;
use pretty_assertions::assert_eq;

use crate::{Workspace, stderr, stdout};

/// The most virtual memory (KiB) a `flue` under test may map: far more than a run needs, far
/// less than an alias bomb takes, so a regression fails the test instead of the machine.
const MEMORY_CAP_KIB: u64 = 2 * 1024 * 1024;

/// Nine levels of nine aliases each: about 400 bytes that a loader without limits expands to
/// 9^9 (387 million) strings.
fn billion_laughs() -> String {
    let mut text = String::from("l0: &l0 [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n");
    for level in 1..=9 {
        let prev = format!("*l{}", level - 1);
        let refs = [prev.as_str(); 9].join(",");
        text.push_str(&format!("l{level}: &l{level} [{refs}]\n"));
    }
    text
}

/// `flue <args> --root <ws>` with its address space capped at [`MEMORY_CAP_KIB`].
fn flue_capped(ws: &Workspace, args: &[&str]) -> Output {
    let flue = assert_cmd::cargo::cargo_bin("flue");
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(format!("ulimit -v {MEMORY_CAP_KIB} && exec \"$0\" \"$@\""))
        .env("FLUE_TRUST", "1")
        .arg(flue)
        .args(args)
        .arg("--root")
        .arg(ws.root())
        .env_remove("FLUE_LOG");
    command.output().unwrap()
}

const EXPANSION: &str = "frontmatter expands to more than 10000 values or 1048576 bytes";

#[test]
fn alias_bombs_in_agents_skills_and_roles_fail_fast_with_file_and_line() {
    let bomb = billion_laughs();
    assert!(bomb.len() < 500, "{}", bomb.len());
    let cases = [
        (
            "agents/bomb.md",
            format!("---\nmodel: scripted/script.json\n{bomb}---\nBoom."),
            "agents/bomb.md:7",
        ),
        (
            ".agents/skills/bomb/SKILL.md",
            format!("---\nname: bomb\ndescription: d\n{bomb}---\nBoom."),
            ".agents/skills/bomb/SKILL.md:8",
        ),
        (
            ".agents/roles/bomb.md",
            format!("---\ndescription: d\n{bomb}---\nBoom."),
            ".agents/roles/bomb.md:7",
        ),
    ];
    for (path, text, location) in cases {
        let ws = Workspace::hello_world();
        std::fs::create_dir_all(ws.root().join(path).parent().unwrap()).unwrap();
        std::fs::write(ws.root().join(path), text).unwrap();
        // Another agent's broken file does not touch a run of this one (tested below).
        let run_hello = &["run", "hello", "-m", "hi"][..];
        let run_bomb = &["run", "bomb", "-m", "hi"][..];
        let run = if path.starts_with("agents/") {
            run_bomb
        } else {
            run_hello
        };
        for args in [&["build"][..], run] {
            let output = flue_capped(&ws, args);
            let err = stderr(&output);
            assert_eq!(output.status.code(), Some(1), "{path} {args:?}: {err}");
            assert_eq!(stdout(&output), "");
            assert!(
                err.contains(&format!("{location}: {EXPANSION}")),
                "{path} {args:?}: {err}"
            );
        }
        if path.starts_with("agents/") {
            // A run reads only the agent it names: the other file is not even parsed.
            let output = flue_capped(&ws, run_hello);
            assert!(output.status.success(), "{}", stderr(&output));
            assert!(!stderr(&output).contains(EXPANSION), "{}", stderr(&output));
        }
    }
}

#[test]
fn the_memory_cap_leaves_ordinary_runs_alone() {
    // The cap itself must not be what fails the tests above.
    let ws = Workspace::hello_world();
    let output = flue_capped(
        &ws,
        &["run", "hello", "-m", "What does the greeting file say?"],
    );
    assert!(output.status.success(), "{}", stderr(&output));
}

/// A workspace whose agent `w` has `sandbox:` set to `sandbox`, next to a secret directory
/// (`<tmp>/outside/id_rsa`), with `data` a symlink to it; `{outside}` in `sandbox` is replaced
/// by the secret directory's path.
fn workspace_with_seed(sandbox: &str) -> (Workspace, tempfile::TempDir) {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("id_rsa"), "PRIVATE KEY").unwrap();
    let agent = format!(
        "---\nmodel: scripted/s.json\ntools: [bash]\nsandbox: {}\n---\nRun it.\n",
        sandbox.replace("{outside}", &outside.path().display().to_string())
    );
    let script = serde_json::json!({
        "rules": [
            {"when": {"tool_result": "bash"}, "reply": {"text": "{{tool_result}}"}},
            {"reply": {"tool_calls": [{"name": "bash", "input": {"command": "ls -R; cat id_rsa"}}]}}
        ]
    })
    .to_string();
    let ws = Workspace::new(&[("agents/w.md", &agent), ("s.json", &script)]);
    std::os::unix::fs::symlink(outside.path(), ws.root().join("data")).unwrap();
    (ws, outside)
}

#[test]
fn a_seed_outside_the_workspace_is_refused_at_build_and_run_with_file_and_line() {
    let (ws, _outside) = workspace_with_seed("{ kind: virtual, seed: {outside} }");
    for args in [&["build"][..], &["run", "w", "-m", "go"][..]] {
        let output = ws.flue(args);
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("agents/w.md:4: `sandbox.seed` must be a directory inside the workspace"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("PRIVATE KEY"), "{err}");
    }
    let (ws, _outside) = workspace_with_seed("{ kind: virtual, seed: ../../.. }");
    let output = ws.flue(&["run", "w", "-m", "go"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("agents/w.md:4: `sandbox.seed` must be"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_seed_reaching_out_through_a_symlink_is_refused_when_the_sandbox_opens() {
    let (ws, _outside) = workspace_with_seed("{ kind: virtual, seed: data }");
    let output = ws.flue(&["run", "w", "-m", "go", "--json"]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let envelope = crate::json(&output);
    assert_eq!(envelope["error"]["kind"], "permission_denied");
    let message = envelope["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("sandbox: `sandbox.seed: data`: seed directory ")
            && message.contains("`data` on the way is a symlink"),
        "{message}"
    );
    assert!(!stdout(&output).contains("PRIVATE KEY"));

    // The default seed (the whole root) copies the workspace but leaves the symlink out.
    let (ws, _outside) = workspace_with_seed("virtual");
    let output = ws.flue(&["run", "w", "-m", "go"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        !stdout(&output).contains("PRIVATE KEY"),
        "{}",
        stdout(&output)
    );
}

#[test]
fn a_forged_bundle_with_a_seed_outside_is_refused_by_run() {
    use sha2::{Digest, Sha256};

    let ws = Workspace::hello_world();
    assert!(ws.flue(&["build"]).status.success());
    let path = ws.root().join("dist/flue-bundle.json");
    let mut bundle: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let agent = "---\nmodel: scripted/script.json\ntools: [bash]\nsandbox: { kind: virtual, seed: /etc }\n---\nGreet.";
    bundle["files"]["agents/hello.md"] = serde_json::json!({
        "sha256": hex::encode(Sha256::digest(agent.as_bytes())),
        "text": agent,
    });
    // Re-sign it as a careful forger would: the digest covers the canonical JSON.
    bundle["digest"] = serde_json::json!("");
    let digest = hex::encode(Sha256::digest(serde_json::to_vec(&bundle).unwrap()));
    bundle["digest"] = serde_json::json!(format!("sha256:{digest}"));
    std::fs::write(&path, serde_json::to_vec(&bundle).unwrap()).unwrap();

    let output = ws.flue(&[
        "run",
        "--bundle",
        path.to_str().unwrap(),
        "hello",
        "-m",
        "hi",
    ]);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{err}");
    assert!(
        err.contains("agents/hello.md:4: `sandbox.seed` must be a directory inside the workspace, relative to its root (like `src`), not the absolute path \"/etc\""),
        "{err}"
    );
}

#[test]
fn malformed_conversation_ids_are_refused_in_one_line_before_anything_is_stored() {
    let ws = Workspace::hello_world();
    let long = "x".repeat(100_000);
    for (id, reason) in [
        ("", "it is empty"),
        ("ticket\n42", "it contains a control character"),
        (
            "\u{1b}[2J\u{1b}]52;c;aGk=\u{7}",
            "it contains a control character",
        ),
        ("two words", "it contains whitespace"),
        ("../../etc", "it contains a slash"),
        (long.as_str(), "it is 100000 characters long"),
    ] {
        let output = ws.flue(&["run", "hello", "-m", "hi", "--id", id]);
        assert_eq!(output.status.code(), Some(1));
        assert_eq!(stdout(&output), "");
        let err = stderr(&output);
        assert!(
            err.starts_with("error: invalid conversation id ") && err.contains(reason),
            "{err}"
        );
        assert!(
            err.ends_with(
                "; use 1 to 128 printable characters without spaces or slashes, such as a \
                 ticket number, an email address or a user id\n"
            ) && err.lines().count() == 1
                && !err.contains('\u{1b}'),
            "{err:?}"
        );
        assert!(err.len() < 400, "{}", err.len());

        let output = ws.flue(&["run", "hello", "-m", "hi", "--id", id, "--json"]);
        assert_eq!(output.status.code(), Some(1));
        let envelope = crate::json(&output);
        assert_eq!(
            (&envelope["outcome"], &envelope["error"]["kind"]),
            (
                &serde_json::json!("error"),
                &serde_json::json!("invalid_id")
            )
        );
        for args in [
            &["session", "show", "--id", id][..],
            &["audit", "--id", id][..],
            &["trash", "list", "--id", id][..],
        ] {
            let output = ws.flue(args);
            assert_eq!(output.status.code(), Some(1), "{args:?}");
            assert!(
                stderr(&output).starts_with("error: invalid conversation id "),
                "{}",
                stderr(&output)
            );
        }
    }
    // Nothing was created by any of the refused runs.
    assert!(!ws.db().exists());
    let output = ws.flue(&["run", "hello", "-m", "hi", "--id", "alice@example.com"]);
    assert!(output.status.success(), "{}", stderr(&output));
}

#[test]
fn a_damaged_store_names_the_file_the_cause_and_the_fix() {
    let ws = Workspace::hello_world();
    std::fs::create_dir_all(ws.root().join(".flue")).unwrap();
    std::fs::write(ws.db(), "garbage, not sqlite\n".repeat(100)).unwrap();
    let db = ws.db().display().to_string();
    let expected = format!(
        "error: store error: cannot open the conversation store {db}: cannot set the journal \
         mode: file is not a database; the file is damaged or is not a flue store: move it \
         aside (`mv {db} {db}.damaged`) and run again to start an empty store\n"
    );
    for args in [
        &["run", "hello", "-m", "hi", "--id", "c"][..],
        &["session", "show", "--id", "c"][..],
        &["audit", "--id", "c"][..],
    ] {
        let output = ws.flue(args);
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        assert_eq!(stderr(&output), expected, "{args:?}");
    }
    // The fix works: moved aside, the next run starts an empty store.
    std::fs::rename(ws.db(), format!("{db}.damaged")).unwrap();
    let output = ws.flue(&["run", "hello", "-m", "hi", "--id", "c"]);
    assert!(output.status.success(), "{}", stderr(&output));
}

/// `flue <args> --root <root>` in a new user namespace without mappings, where the caller has
/// no capabilities over the host's files: a mode-000 folder is unreadable even for root.
fn flue_without_privileges(root: &std::path::Path, args: &[&str]) -> Output {
    let mut command = Command::new("unshare");
    command
        .arg("--user")
        .env("FLUE_TRUST", "1")
        .arg(assert_cmd::cargo::cargo_bin("flue"))
        .args(args)
        .arg("--root")
        .arg(root)
        .env_remove("FLUE_LOG");
    command.output().unwrap()
}

#[test]
fn an_unreadable_root_is_reported_as_the_root() {
    use std::os::unix::fs::PermissionsExt;

    let ws = Workspace::hello_world();
    let root = ws.root();
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o000)).unwrap();
    let run = flue_without_privileges(root, &["run", "hello", "-m", "hi", "--json"]);
    let show = flue_without_privileges(root, &["session", "show", "--id", "c"]);
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).unwrap();

    let message = format!(
        "cannot read the workspace root {shown}: Permission denied (os error 13); give this \
         user permission to list and read it (`chmod u+rx {shown}`) or pass another --root",
        shown = root.display()
    );
    assert_eq!(run.status.code(), Some(1), "{}", stderr(&run));
    let envelope = crate::json(&run);
    assert_eq!(envelope["error"]["kind"], "workspace_unreadable");
    assert_eq!(envelope["error"]["message"], message);
    assert_eq!(show.status.code(), Some(1));
    assert_eq!(stderr(&show), format!("error: {message}\n"));
}
