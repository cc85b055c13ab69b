//! End-to-end tests of the `flue` binary against real workspaces and a real SQLite file.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail loudly by design"
)]
#![allow(unreachable_pub, missing_docs, reason = "test helpers are not API")]

mod audit_trash;
mod background_tasks;
mod budgets;
mod build;
mod closed_stdout;
mod command_tools;
mod conformance;
mod console_list;
mod crash_background;
mod crash_history;
mod crash_tasks;
mod delegation;
mod delete;
mod dev;
mod dev_layout;
mod dev_markdown;
mod dev_tasks;
mod docs_commands;
mod durable;
mod elicit_serve;
mod eval;
mod everyday;
mod exposure;
mod fork_rewind;
mod hooks;
mod hostile_inputs;
mod hostile_workspace;
mod large_messages;
mod mcp;
mod mcp_oauth;
mod mcp_serve;
mod memory;
mod model_per_call;
mod multi_node;
mod offered_tools;
mod on_terminal;
mod otel;
mod path_forms;
mod pauses;
#[path = "../../../flue-store/tests/it/pg_server.rs"]
mod pg_server;
mod prompt_hooks;
mod providers;
mod pty;
mod results;
mod results_http;
mod run;
mod runaway;
mod sandbox;
mod schedules;
mod secrets;
mod serve;
mod session_show;
mod shell;
mod signals;
mod term_tasks;
mod term_ui;
mod trust;
mod try_http;

use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::Command;
use tempfile::TempDir;

/// A scratch workspace built from `(path, content)` pairs.
pub struct Workspace {
    pub dir: TempDir,
}

impl Workspace {
    pub fn new(files: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        for (path, content) in files {
            let full = dir.path().join(path);
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(full, content).unwrap();
        }
        Self { dir }
    }

    /// A copy of examples/hello-world.
    pub fn hello_world() -> Self {
        Self::example("hello-world")
    }

    /// A copy of examples/<name>, without any stored conversations or build output.
    pub fn example(name: &str) -> Self {
        let example = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../examples")
            .join(name);
        let workspace = Self::new(&[]);
        copy_dir(&example, workspace.root());
        let _ = std::fs::remove_dir_all(workspace.root().join(".flue"));
        let _ = std::fs::remove_dir_all(workspace.root().join("dist"));
        workspace
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn db(&self) -> PathBuf {
        self.root().join(".flue/flue.db")
    }

    /// `flue <args>` with `--root` pointing here where the command takes it.
    pub fn flue(&self, args: &[&str]) -> Output {
        let mut command = Command::cargo_bin("flue").unwrap();
        command.env("FLUE_TRUST", "1");
        command
            .args(args)
            .arg("--root")
            .arg(self.root())
            .env_remove("FLUE_LOG");
        command.output().unwrap()
    }
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).unwrap()
}

pub fn json(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|err| panic!("stdout is not one JSON object ({err}): {}", stdout(output)))
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let dest = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &dest);
        } else {
            std::fs::copy(entry.path(), dest).unwrap();
        }
    }
}
