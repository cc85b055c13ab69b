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
        for args in [&["build"][..], &["run", "hello", "-m", "hi"][..]] {
            let output = flue_capped(&ws, args);
            let err = stderr(&output);
            assert_eq!(output.status.code(), Some(1), "{path} {args:?}: {err}");
            assert_eq!(stdout(&output), "");
            assert!(
                err.contains(&format!("{location}: {EXPANSION}")),
                "{path} {args:?}: {err}"
            );
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
