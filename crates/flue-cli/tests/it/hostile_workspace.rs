//! Workspaces that point outside themselves or hold files that never end, run through the real
//! `flue` binary: every file the workspace supplies is read under one rule (inside the root,
//! regular files only, bounded), in `flue run`, `flue build` and `flue serve` alike.

use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Output;

use crate::{Workspace, stderr, stdout};

/// What the files outside the workspace hold: it must never show up anywhere.
const OUTSIDE_SECRET: &str = "outside-secret-6f1d2c9a";

/// The most memory (address space) a `flue` process may use here: far less than a hostile
/// file would need if it were read whole.
const ADDRESS_SPACE: &str = "--as=1073741824";

/// A hello-world copy and, beside it, a folder of files that are not the workspace's.
struct Hostile {
    ws: Workspace,
    outside: tempfile::TempDir,
}

impl Hostile {
    fn new() -> Self {
        let outside = tempfile::tempdir().unwrap();
        let agent = format!("---\nmodel: scripted/script.json\n---\n{OUTSIDE_SECRET}\n");
        std::fs::write(outside.path().join("secret.md"), &agent).unwrap();
        std::fs::create_dir_all(outside.path().join("dir/s")).unwrap();
        std::fs::write(outside.path().join("dir/hello.md"), &agent).unwrap();
        std::fs::write(
            outside.path().join("dir/s/SKILL.md"),
            format!("---\nname: s\ndescription: {OUTSIDE_SECRET}\n---\nX.\n"),
        )
        .unwrap();
        Self {
            ws: Workspace::hello_world(),
            outside,
        }
    }

    fn path(&self, relative: &str) -> std::path::PathBuf {
        let path = self.ws.root().join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let _ = std::fs::remove_file(&path);
        path
    }

    /// Replaces `relative` with a link to `target` (outside when it starts with `@`).
    fn link(&self, relative: &str, target: &str) {
        let target = match target.strip_prefix('@') {
            Some(rest) => self.outside.path().join(rest),
            None => Path::new(target).to_path_buf(),
        };
        let path = self.path(relative);
        let _ = std::fs::remove_dir_all(&path);
        symlink(target, path).unwrap();
    }

    /// `flue <args>` under a memory limit.
    fn flue(&self, args: &[&str]) -> Output {
        let program = assert_cmd::Command::cargo_bin("flue")
            .unwrap()
            .get_program()
            .to_owned();
        let mut command = std::process::Command::new("prlimit");
        command
            .arg(ADDRESS_SPACE)
            .env("FLUE_TRUST", "1")
            .arg("--")
            .arg(program)
            .args(args)
            .arg("--root")
            .arg(self.ws.root())
            .env_remove("FLUE_LOG");
        command.output().unwrap()
    }
}

/// Runs `flue run`, `flue build` and `flue serve` on the workspace `setup` makes, and checks
/// each is refused naming `file` with `expected` in the message, with nothing of the outside
/// in its output or in a bundle. Returns how many commands were refused.
fn refused_everywhere(setup: impl Fn(&Hostile), file: &str, expected: &str) -> usize {
    let hostile = Hostile::new();
    setup(&hostile);
    let mut refused = 0;
    let commands: [&[&str]; 3] = [
        &["run", "hello", "-m", "hi", "--id", "probe"],
        &["build"],
        &["serve", "--port", "0"],
    ];
    for args in commands {
        let output = hostile.flue(args);
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(1), "{args:?} on {file}: {err}");
        assert!(
            err.contains(file) && err.contains(expected),
            "{args:?} on {file}: expected `{expected}`: {err}"
        );
        assert!(!err.contains(OUTSIDE_SECRET) && !stdout(&output).contains(OUTSIDE_SECRET));
        assert!(!hostile.ws.root().join("dist/flue-bundle.json").exists());
        refused += 1;
    }
    refused
}

const OUT: &str = "leads outside the workspace";

#[test]
fn links_out_of_the_workspace_are_refused_for_every_kind_of_file() {
    type Setup = fn(&Hostile);
    let cases: &[(&str, Setup)] = &[
        ("AGENTS.md", |h| h.link("AGENTS.md", "@secret.md")),
        ("flue.toml", |h| h.link("flue.toml", "@secret.md")),
        ("agents/hello.md", |h| {
            h.link("agents/hello.md", "@secret.md");
        }),
        ("agents", |h| h.link("agents", "@dir")),
        (".agents/skills/s.md", |h| {
            h.link(".agents/skills/s.md", "@secret.md");
        }),
        (".agents/skills/s/SKILL.md", |h| {
            h.link(".agents/skills/s/SKILL.md", "@dir/s/SKILL.md");
        }),
        (".agents/skills/s/SKILL.md", |h| {
            h.link(".agents/skills/s", "@dir/s");
        }),
        (".agents/roles/r.md", |h| {
            h.link(".agents/roles/r.md", "@secret.md");
        }),
        (".agents/roles", |h| h.link(".agents/roles", "@dir")),
    ];
    let mut tried = 0;
    let mut refused = 0;
    for (file, setup) in cases {
        tried += 3;
        refused += refused_everywhere(setup, file, OUT);
    }
    eprintln!("links out: {refused} of {tried} commands refused");
    assert_eq!(refused, tried);
}

/// Makes `relative` a sparse file of 1 GiB (no disk used).
fn sparse(h: &Hostile, relative: &str) {
    let file = std::fs::File::create(h.path(relative)).unwrap();
    file.set_len(1 << 30).unwrap();
}

/// Makes `relative` a FIFO nobody writes to.
fn fifo(h: &Hostile, relative: &str) {
    let path = h.path(relative);
    let status = std::process::Command::new("mkfifo").arg(&path).status();
    assert!(status.unwrap().success());
}

#[test]
fn huge_and_special_files_are_refused_with_their_limit_without_reading_them() {
    type Setup = fn(&Hostile);
    let cases: &[(&str, &str, Setup)] = &[
        ("flue.toml", "1 MiB", |h| sparse(h, "flue.toml")),
        ("AGENTS.md", "4 MiB", |h| sparse(h, "AGENTS.md")),
        ("agents/hello.md", "4 MiB", |h| sparse(h, "agents/hello.md")),
        (".agents/roles/r.md", "4 MiB", |h| {
            sparse(h, ".agents/roles/r.md");
        }),
        ("flue.toml", "not a regular file", |h| fifo(h, "flue.toml")),
        ("AGENTS.md", "not a regular file", |h| fifo(h, "AGENTS.md")),
        ("AGENTS.md", OUT, |h| h.link("AGENTS.md", "/dev/zero")),
        ("flue.toml", OUT, |h| h.link("flue.toml", "/dev/zero")),
    ];
    let mut tried = 0;
    let mut refused = 0;
    for (file, expected, setup) in cases {
        tried += 3;
        refused += refused_everywhere(setup, file, expected);
    }
    eprintln!("huge and special files: {refused} of {tried} commands refused");
    assert_eq!(refused, tried);
}

#[test]
fn a_fifo_or_a_huge_env_file_or_script_fails_the_run_at_once() {
    let mut tried = 0;
    let mut refused = 0;
    type Setup = fn(&Hostile);
    let cases: [(&str, &str, Setup); 4] = [
        (".env", "not a regular file", |h| fifo(h, ".env")),
        (".env", "1 MiB", |h| sparse(h, ".env")),
        (".env", OUT, |h| h.link(".env", "@secret.md")),
        // The virtual sandbox's seed copy (its own per-file limit) or the script read refuses
        // it, whichever comes first.
        ("script.json", "limit", |h| sparse(h, "script.json")),
    ];
    for (file, expected, setup) in cases {
        let hostile = Hostile::new();
        setup(&hostile);
        let output = hostile.flue(&["run", "hello", "-m", "hi", "--id", "probe"]);
        tried += 1;
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(1), "{file}: {err}");
        assert!(
            err.contains(file) && err.contains(expected),
            "{file}: {err}"
        );
        assert!(!err.contains(OUTSIDE_SECRET));
        refused += 1;
    }
    eprintln!("env files and scripts: {refused} of {tried} runs refused");
    assert_eq!(refused, tried);
}

#[test]
fn links_that_stay_inside_the_workspace_still_work() {
    let hostile = Hostile::new();
    let root = hostile.ws.root();
    std::fs::create_dir_all(root.join("shared")).unwrap();
    std::fs::rename(root.join("AGENTS.md"), root.join("shared/context.md")).unwrap();
    hostile.link("AGENTS.md", "shared/context.md");
    std::fs::rename(root.join("agents/hello.md"), root.join("shared/hello.md")).unwrap();
    hostile.link("agents/hello.md", "../shared/hello.md");
    let output = hostile.flue(&["run", "hello", "-m", "hi", "--id", "inside"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(!stdout(&output).is_empty());
    let output = hostile.flue(&["build"]);
    assert!(output.status.success(), "{}", stderr(&output));
}
