//! Every form a workspace root or an agent file can be given in works alike in every command
//! that takes one: relative (`ws`, `./ws`, `..`, `.`), absolute, none (found from inside the
//! workspace or a folder of it), and through a symlinked folder. `flue dev` is the one that
//! needs it most: its watcher reports absolute paths, so a root kept as given judged every
//! change outside the workspace and never reloaded. Each form also starts `flue dev` on a
//! workspace broken at start, which must begin serving once fixed. Reloads are read from
//! `GET /_flue/dev/state`; every wait is on observable state, with deadlines that only end a
//! test that would hang.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::Value;

use crate::dev::{http, init_workspace};
use crate::{stderr, stdout};

/// How `--root` is given.
#[derive(Clone, Copy, Debug)]
enum Root {
    /// No `--root`: found from the current directory.
    Found,
    /// `--root` as written.
    Given(&'static str),
    /// `--root` with the workspace's absolute path.
    Absolute,
}

/// One way to name the workspace: the current directory (relative to the scratch folder,
/// which holds the workspace `ws` and the symlink `link` to it) and the root argument.
struct Form {
    name: &'static str,
    cwd: &'static str,
    root: Root,
}

const FORMS: &[Form] = &[
    Form {
        name: "relative",
        cwd: ".",
        root: Root::Given("ws"),
    },
    Form {
        name: "dot-slash",
        cwd: ".",
        root: Root::Given("./ws"),
    },
    Form {
        name: "dot-dot from agents/",
        cwd: "ws/agents",
        root: Root::Given(".."),
    },
    Form {
        name: "dot from inside",
        cwd: "ws",
        root: Root::Given("."),
    },
    Form {
        name: "absolute",
        cwd: ".",
        root: Root::Absolute,
    },
    Form {
        name: "found from inside",
        cwd: "ws",
        root: Root::Found,
    },
    Form {
        name: "found from a subfolder",
        cwd: "ws/scripts",
        root: Root::Found,
    },
    Form {
        name: "symlinked folder",
        cwd: ".",
        root: Root::Given("link"),
    },
    Form {
        name: "inside a symlinked folder",
        cwd: "link",
        root: Root::Found,
    },
    Form {
        name: "relative through a symlink",
        cwd: "link/agents",
        root: Root::Given("../../link"),
    },
];

/// A fresh scratch folder with the workspace `ws` (`flue init`) and `link` -> `ws`.
fn scratch() -> (tempfile::TempDir, PathBuf) {
    let (dir, ws) = init_workspace();
    std::os::unix::fs::symlink(&ws, dir.path().join("link")).unwrap();
    (dir, ws)
}

/// `flue <args>` in `cwd`, with `--root` as `form` gives it.
fn flue_in(dir: &Path, form: &Form, args: &[&str]) -> Command {
    let mut command = Command::new(assert_cmd::cargo::cargo_bin("flue"));
    command.env("FLUE_TRUST", "1");
    command
        .args(args)
        .current_dir(dir.join(form.cwd))
        .env_remove("FLUE_LOG");
    match form.root {
        Root::Found => {}
        Root::Given(root) => {
            command.args(["--root", root]);
        }
        Root::Absolute => {
            command.arg("--root").arg(dir.join("ws"));
        }
    }
    command
}

#[test]
fn every_form_of_root_runs_builds_and_lists_the_same_workspace() {
    let mut failures = Vec::new();
    for form in FORMS {
        let (dir, ws) = scratch();
        let run = flue_in(
            dir.path(),
            form,
            &["run", "assistant", "-m", "read the notes"],
        )
        .output()
        .unwrap();
        let built = flue_in(dir.path(), form, &["build", "--json"])
            .output()
            .unwrap();
        let listed = flue_in(dir.path(), form, &["session", "list", "--json"])
            .output()
            .unwrap();
        let bundle = serde_json::from_slice::<Value>(&built.stdout)
            .map(|built| built["bundle"].clone())
            .unwrap_or(Value::Null);
        let conversations = serde_json::from_slice::<Value>(&listed.stdout)
            .ok()
            .and_then(|listed| listed["conversations"].as_array().map(Vec::len));
        let seen = (
            run.status.success() && stdout(&run).starts_with("notes.md says:"),
            bundle,
            conversations,
        );
        let canonical = ws.canonicalize().unwrap();
        let wanted = (
            true,
            Value::from(
                canonical
                    .join("dist/flue-bundle.json")
                    .display()
                    .to_string(),
            ),
            Some(1),
        );
        if seen != wanted {
            failures.push(format!(
                "{}: {seen:?}\nrun: {}\nbuild: {}\nlist: {}",
                form.name,
                stderr(&run),
                stderr(&built),
                stderr(&listed)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn every_form_of_agent_file_finds_its_workspace() {
    // (current directory, the agent file as given)
    let forms = [
        ("ws", "agents/assistant.md"),
        ("ws", "./agents/assistant.md"),
        ("ws/agents", "assistant.md"),
        ("ws/scripts", "../agents/assistant.md"),
        (".", "ws/agents/assistant.md"),
        (".", "link/agents/assistant.md"),
    ];
    let (dir, _ws) = scratch();
    let mut seen = Vec::new();
    for (cwd, file) in forms {
        let run = Command::new(assert_cmd::cargo::cargo_bin("flue"))
            .env("FLUE_TRUST", "1")
            .args(["run", file, "-m", "read the notes"])
            .current_dir(dir.path().join(cwd))
            .env_remove("FLUE_LOG")
            .output()
            .unwrap();
        seen.push((
            cwd,
            file,
            run.status.success(),
            stderr(&run).contains("notes.md, "),
        ));
    }
    let wanted: Vec<_> = forms
        .iter()
        .map(|(cwd, file)| (*cwd, *file, true, true))
        .collect();
    assert_eq!(seen, wanted);
}

/// A running `flue dev`, its stderr collected line by line; killed when dropped.
struct Dev {
    child: Child,
    log: Arc<Mutex<String>>,
}

impl Dev {
    fn start(dir: &Path, form: &Form) -> Self {
        let mut child = flue_in(dir, form, &["dev", "--port", "0"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let pipe = child.stderr.take().unwrap();
        let sink = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        Self { child, log }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Waits until stderr holds a line starting with `prefix`; returns the rest of it.
    fn wait_line(&self, prefix: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let log = self.log();
            if let Some(rest) = log.lines().find_map(|line| line.strip_prefix(prefix)) {
                return rest.to_owned();
            }
            assert!(Instant::now() < deadline, "no {prefix:?} in:\n{log}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `GET /_flue/dev/state` (long-polling for the next build) until `done` holds for it.
    fn state_until(&self, addr: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut after = 0;
        loop {
            let (status, body) = http(addr, "GET", &format!("/_flue/dev/state?after={after}"), "");
            assert_eq!(status, 200, "{body}");
            let state: Value = serde_json::from_str(&body).unwrap();
            if done(&state) {
                return state;
            }
            assert!(
                Instant::now() < deadline,
                "the state never changed as expected; last: {state}\n{}",
                self.log()
            );
            after = state["generation"].as_u64().unwrap();
        }
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The agent file with `description` as its description.
fn agent_file(original: &str, description: &str) -> String {
    original
        .lines()
        .map(|line| {
            if line.starts_with("description:") {
                format!("description: {description}")
            } else {
                line.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The description of the first agent in a dev state.
fn description(state: &Value) -> &Value {
    &state["agents"][0]["description"]
}

/// Runs `flue dev` as `form` names the root, on a workspace broken at start: it must serve
/// once fixed, then reload an agent edit and a flue.toml edit. Returns the root it serves.
fn dev_with(form: &Form) -> String {
    let (dir, ws) = scratch();
    let agent = ws.join("agents/assistant.md");
    let original = std::fs::read_to_string(&agent).unwrap();
    std::fs::write(&agent, "---\ndescription: [unclosed\n---\nBroken.\n").unwrap();
    let dev = Dev::start(dir.path(), form);
    dev.wait_line("flue dev: fix the workspace");
    std::fs::write(&agent, agent_file(&original, "fixed")).unwrap();
    let addr = dev.wait_line("flue dev: console at http://");
    let addr = addr.trim_end_matches('/');
    let first = dev.state_until(addr, |state| state["ok"] == true);
    assert_eq!(description(&first), "fixed", "{}", form.name);
    std::fs::write(&agent, agent_file(&original, "edited")).unwrap();
    dev.state_until(addr, |state| description(state) == "edited");
    let toml = ws.join("flue.toml");
    let settings = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(&toml, format!("{settings}\n# edited\n")).unwrap();
    dev.state_until(addr, |state| {
        state["changed"] == serde_json::json!(["flue.toml"])
    });
    first["root"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn dev_reloads_and_recovers_from_a_broken_start_with_every_form_of_root() {
    for form in FORMS {
        let root = dev_with(form);
        // The root as served: one canonical path, whatever form it was given in.
        assert!(
            Path::new(&root).is_absolute() && !root.contains("/link") && root.ends_with("/ws"),
            "{}: {root}",
            form.name
        );
    }
}
