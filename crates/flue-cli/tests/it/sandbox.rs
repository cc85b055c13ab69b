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
    command.env("FLUE_TRUST", "1");
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

/// A workspace whose agent goes for the secrets and the store: `read_file .env`, then
/// `delete_file .flue/flue.db`, then `move_file` of the store, then `command` with bash; it
/// replies with what bash printed.
fn raiding_workspace(kind: &str, command: &str) -> Workspace {
    let agent = format!(
        "---\nmodel: scripted/s.json\nsandbox: {kind}\n\
         tools: [read_file, delete_file, move_file, bash]\n---\nRaid.\n"
    );
    let script = serde_json::json!({
        "rules": [
            {"when": {"tool_result": "read_file"}, "reply": {"tool_calls": [
                {"name": "delete_file", "input": {"path": ".flue/flue.db"}}
            ]}},
            {"when": {"tool_result": "delete_file"}, "reply": {"tool_calls": [
                {"name": "move_file", "input": {"source": ".flue/flue.db", "destination": "stolen.db"}}
            ]}},
            {"when": {"tool_result": "move_file"}, "reply": {"tool_calls": [
                {"name": "bash", "input": {"command": command}}
            ]}},
            {"when": {"tool_result": "bash"}, "reply": {"text": "{{tool_result}}"}},
            {"reply": {"tool_calls": [{"name": "read_file", "input": {"path": ".env"}}]}}
        ]
    })
    .to_string();
    Workspace::new(&[
        ("agents/w.md", &agent),
        ("s.json", &script),
        (".env", "SECRET_TOKEN=abc-123\n"),
    ])
}

/// The tool results of conversation `id`: (tool, is_error, content).
fn tool_results(ws: &Workspace, id: &str) -> Vec<(String, bool, String)> {
    let shown = json(&ws.flue(&["session", "show", "--id", id, "--json"]));
    shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|message| message["type"] == "tool_result")
        .map(|message| {
            (
                message["tool_name"].as_str().unwrap().to_owned(),
                message["is_error"].as_bool().unwrap(),
                message["content"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Checks that the three file-tool calls were refused as protected and the store is whole.
fn assert_file_tools_refused(ws: &Workspace, id: &str) {
    let results = tool_results(ws, id);
    let file_tools: Vec<(String, bool, bool)> = results[..3]
        .iter()
        .map(|(tool, is_error, content)| {
            (tool.clone(), *is_error, content.contains("protected_path"))
        })
        .collect();
    assert_eq!(
        file_tools,
        [
            ("read_file".to_owned(), true, true),
            ("delete_file".to_owned(), true, true),
            ("move_file".to_owned(), true, true),
        ],
        "{results:?}"
    );
    // The store holds the whole conversation (it was read back above), and nothing moved.
    assert!(ws.db().is_file());
    assert!(!ws.root().join("stolen.db").exists());
    let transcript = format!("{results:?}");
    assert!(!transcript.contains("abc-123"), "{transcript}");
    assert_eq!(
        std::fs::read_to_string(ws.root().join(".env")).unwrap(),
        "SECRET_TOKEN=abc-123\n"
    );
}

#[test]
fn an_isolated_agent_cannot_read_the_secrets_or_touch_the_store() {
    let ws = raiding_workspace(
        "isolated",
        "cat .env 2>/dev/null | grep -c SECRET_TOKEN; rm -rf .flue/flue.db .flue 2>/dev/null; \
         mv .env gone 2>/dev/null; ls -A .flue | wc -l; echo end",
    );
    let output = run(&ws, &["--id", "raid"], &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    // bash saw neither the key nor the store.
    assert_eq!(
        stdout(&output).trim_end(),
        "0\n0\nend",
        "{}",
        stderr(&output)
    );
    assert_file_tools_refused(&ws, "raid");
}

#[test]
fn a_local_agent_cannot_use_file_tools_on_them_nor_read_flues_environment() {
    // Commands are the user's own shell: they read `/proc/$PPID/environ` (flue's) if flue
    // lets them. Root reads any process's environment, so as root flue runs as nobody here.
    // The command's own environment is readable (so /proc works); flue's is not.
    let command = "(tr '\\0' '\\n' < /proc/$$/environ | grep -q '^PATH=') && echo own:read; \
                   (tr '\\0' '\\n' < /proc/$PPID/environ | grep -q FLUE_RAID_MARKER) 2>/dev/null \
                   && echo flue:read || echo flue:hidden";
    let ws = raiding_workspace("local", command);
    let as_root =
        std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap()) == 0;
    let program = assert_cmd::Command::cargo_bin("flue")
        .unwrap()
        .env("FLUE_TRUST", "1")
        .get_program()
        .to_owned();
    let mut command = if as_root {
        set_permissions_recursively(ws.root());
        let mut setpriv = assert_cmd::Command::new("setpriv");
        setpriv
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(&program);
        setpriv
    } else {
        assert_cmd::Command::new(&program)
    };
    let output = command
        .args(["run", "w", "-m", "go", "--id", "raid", "--root"])
        .arg(ws.root())
        .env("FLUE_RAID_MARKER", "marker-value")
        .env("FLUE_TRUST", "1")
        .env_remove("FLUE_LOG")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output).trim_end(), "own:read\nflue:hidden");
    assert_file_tools_refused(&ws, "raid");
}

/// Lets any user read and write the workspace (for a run as nobody).
fn set_permissions_recursively(dir: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            set_permissions_recursively(&path);
        } else {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        }
    }
}

/// What a local command tries against flue's environment and memory: every `environ` of the
/// flue process (`$PPID`, each of its threads, and the process found by name) and its `mem` at
/// the environment's address. Each attempt prints `tried:<what>`, and `read:<what>` when it got
/// through (`leak:<what>` when what it read holds the marker). The same probes against the
/// command's own process show they work (`self:environ`, `self:mem`).
const PROBE: &str = r#"
found=""
for stat in /proc/[0-9]*/stat; do
  { read -r pid comm _ < "$stat"; } 2>/dev/null || continue
  [ "$comm" = "(flue)" ] && [ "$pid" != "$$" ] && found="$found $pid"
done
probe_environ() {
  echo "tried:environ:$1"
  if content=$(tr '\0' '\n' 2>/dev/null < "$1"); then
    echo "read:environ:$1"
    case "$content" in *FLUE_PROBE_SECRET=*) echo "leak:environ:$1";; esac
  fi
}
probe_mem() {
  echo "tried:mem:$1"
  { read -r -a fields < "/proc/$1/stat"; } 2>/dev/null
  start=${fields[49]:-0}; end=${fields[50]:-0}
  if [ "$start" = 0 ]; then read -r -a own < /proc/$$/stat; start=${own[49]}; end=${own[50]}; fi
  if { : < "/proc/$1/mem"; } 2>/dev/null; then
    echo "read:mem:$1"
    if dd if="/proc/$1/mem" bs=1 skip="$start" count=$((end - start)) 2>/dev/null \
        | tr '\0' '\n' | grep -q FLUE_PROBE_SECRET=; then echo "leak:mem:$1"; fi
  fi
}
probe_environ /proc/$PPID/environ
for task in /proc/$PPID/task/*; do probe_environ "$task/environ"; done
for pid in $found; do probe_environ "/proc/$pid/environ"; probe_mem "$pid"; done
probe_mem "$PPID"
(tr '\0' '\n' < /proc/$$/environ | grep -q '^PATH=') && echo self:environ
{ : < /proc/$$/mem; } && echo self:mem
echo "pids:$PPID:$found"
"#;

#[test]
fn a_local_command_cannot_read_flues_environment_or_memory_even_as_root() {
    // Run as whoever runs the tests: root in CI, where dropping privileges is the point (a
    // command running as root reads any dumpable process's environment), and an ordinary user
    // elsewhere (the same-user rule). The secret sits in flue's own environment.
    let secret = "probe-secret-4f1c9a27d3b84e6b";
    let ws = workspace_running("sandbox: local\n", PROBE);
    let output = run(
        &ws,
        &["--id", "probe"],
        &[("FLUE_PROBE_SECRET", Some(secret))],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let report = stdout(&output);
    let lines: Vec<&str> = report.lines().collect();
    let count = |prefix: &str| lines.iter().filter(|line| line.starts_with(prefix)).count();
    let (tried, read, leaked) = (count("tried:"), count("read:"), count("leak:"));
    eprintln!("{tried} probes of flue's environment and memory, {read} opened, {leaked} leaked");
    // The probes work: the command reads its own environment and memory, and found flue.
    assert!(
        lines.contains(&"self:environ") && lines.contains(&"self:mem"),
        "{report}"
    );
    let pids = lines.iter().find(|line| line.starts_with("pids:")).unwrap();
    let parent = pids.split(':').nth(1).unwrap();
    assert!(
        pids.split(':')
            .nth(2)
            .unwrap()
            .split_whitespace()
            .any(|pid| pid == parent),
        "{report}"
    );
    // environ of the process, of each of its threads and of the process found by name, and
    // mem: all tried, none opened.
    assert!(tried >= 5, "{report}");
    assert_eq!((read, leaked), (0, 0), "{report}");
    assert!(!report.contains(secret), "{report}");
}
