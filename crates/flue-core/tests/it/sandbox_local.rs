//! Tests: `LocalSandbox` — the shared contract, and what only a host directory does
//! (environment allow-list, process groups, output cap, launchers).

use std::ffi::OsString;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flue_core::{
    ExecOptions, FlueError, LocalSandbox, Sandbox,
    sandbox::ShellResult,
    sandbox::{CommandLauncher, TIMEOUT_EXIT_CODE},
};
use pretty_assertions::assert_eq;
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

use crate::sandbox_contract::{Backend, OutsideState, kind_of};

mod contract {
    crate::sandbox_contract::sandbox_contract!(super::backend);
}

/// A local sandbox over a fresh root, and a directory outside it.
pub async fn backend() -> Backend {
    let root = TempDir::new().unwrap();
    let outside = TempDir::new().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "secret").unwrap();
    let outside_path = outside.path().to_path_buf();
    Backend {
        sandbox: Arc::new(LocalSandbox::new(root.path()).unwrap()),
        outside: outside.path().display().to_string(),
        outside_state: Box::new(move || {
            let dir = outside_path.clone();
            Box::pin(async move { host_state(&dir) })
        }),
        _guard: Box::new((root, outside)),
    }
}

/// The outside directory's names and secret, read on the host.
pub fn host_state(dir: &Path) -> OutsideState {
    let secret = std::fs::read_to_string(dir.join("secret.txt")).unwrap_or_default();
    (names_in(dir), secret)
}

/// A sandbox over a fresh root with `a.txt` and `sub/`.
struct Fixture {
    root: TempDir,
    sandbox: LocalSandbox,
}

fn fixture() -> Fixture {
    let root = TempDir::new().unwrap();
    std::fs::write(root.path().join("a.txt"), "hello\n").unwrap();
    std::fs::create_dir(root.path().join("sub")).unwrap();
    let sandbox = LocalSandbox::new(root.path()).unwrap();
    Fixture { root, sandbox }
}

/// Whether process `pid` has exited (gone, or a zombie waiting to be reaped), waiting for it
/// up to a generous minute (a busy machine is slow; the deadline only ends a failing test).
async fn process_is_gone(pid: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let gone = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        };
        if gone || Instant::now() >= deadline {
            return gone;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn new_requires_an_existing_directory() {
    let fx = fixture();
    let missing = LocalSandbox::new(fx.root.path().join("missing")).unwrap_err();
    assert_eq!(missing.kind(), "not_found");
    let file = LocalSandbox::new(fx.root.path().join("a.txt")).unwrap_err();
    assert_eq!(file.kind(), "not_a_directory");
    // A root given through a symlink is stored canonical.
    let via_link = LocalSandbox::new(fx.root.path().join("sub_via")).map(|_| ());
    assert_eq!(kind_of(&via_link), "not_found");
    symlink(fx.root.path().join("sub"), fx.root.path().join("sub_via")).unwrap();
    let sandbox = LocalSandbox::new(fx.root.path().join("sub_via")).unwrap();
    assert_eq!(
        Path::new(sandbox.cwd()),
        fx.root.path().join("sub").canonicalize().unwrap()
    );
}

#[tokio::test]
async fn a_signal_is_128_plus_its_number_and_stdin_is_closed() {
    let fx = fixture();
    let res = fx
        .sandbox
        .exec("kill -TERM $$", ExecOptions::new())
        .await
        .unwrap();
    assert_eq!(res.exit_code, 128 + 15);
    let res = fx
        .sandbox
        .exec("read line; echo \"[$line]\"", ExecOptions::new())
        .await
        .unwrap();
    assert_eq!(res.stdout, "[]\n", "stdin is closed");
}

#[tokio::test]
async fn exec_sees_only_allow_listed_host_variables() {
    let fx = fixture();
    // Variables bash itself sets in the environment of the commands it runs, and the tag by
    // which flue finds the processes a command leaves behind.
    let from_bash = ["PWD", "OLDPWD", "SHLVL", "_", "FLUE_COMMAND_TAG"];
    let allowed = [
        "PATH", "HOME", "USER", "LOGNAME", "HOSTNAME", "SHELL", "LANG", "LC_ALL", "LC_CTYPE", "TZ",
        "TERM", "TMPDIR",
    ];
    let env_names = |stdout: &str| -> Vec<String> {
        stdout
            .lines()
            .filter_map(|line| line.split_once('='))
            .map(|(name, _)| name.to_owned())
            .collect()
    };

    let options = ExecOptions::new().with_env("FLUE_TEST_GIVEN", "yes");
    let res = fx.sandbox.exec("env", options).await.unwrap();
    let names = env_names(&res.stdout);
    let leaked: Vec<&String> = names
        .iter()
        .filter(|name| {
            !(allowed.contains(&name.as_str())
                || from_bash.contains(&name.as_str())
                || *name == "FLUE_TEST_GIVEN")
        })
        .collect();
    assert_eq!(leaked, Vec::<&String>::new(), "env was:\n{}", res.stdout);
    assert!(
        res.stdout.contains("FLUE_TEST_GIVEN=yes\n"),
        "{}",
        res.stdout
    );
    assert!(names.iter().any(|name| name == "PATH"));

    // A narrower allow-list; PATH falls back to a default so that commands are found.
    let sandbox = LocalSandbox::new(fx.root.path())
        .unwrap()
        .with_env_allowlist(["LANG"]);
    let res = sandbox.exec("env", ExecOptions::new()).await.unwrap();
    let leaked: Vec<String> = env_names(&res.stdout)
        .into_iter()
        .filter(|name| !(name == "LANG" || name == "PATH" || from_bash.contains(&name.as_str())))
        .collect();
    assert_eq!(leaked, Vec::<String>::new(), "env was:\n{}", res.stdout);
    assert!(
        res.stdout.contains("PATH=/usr/local/bin:/usr/bin:/bin\n"),
        "{}",
        res.stdout
    );
}

#[tokio::test]
async fn a_timeout_kills_the_whole_process_group() {
    let fx = fixture();
    let started = Instant::now();
    let options = ExecOptions::new().with_timeout(Duration::from_millis(300));
    let res = fx
        .sandbox
        .exec("echo before; sleep 30 & echo $!; sleep 30", options)
        .await
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(res.exit_code, TIMEOUT_EXIT_CODE);
    assert!(
        res.stderr.contains("command timed out after 300 ms"),
        "{}",
        res.stderr
    );
    let mut lines = res.stdout.lines();
    assert_eq!(lines.next(), Some("before"));
    let pid: u32 = lines.next().unwrap().parse().unwrap();
    assert!(
        process_is_gone(pid).await,
        "background process {pid} survived the timeout"
    );
}

#[tokio::test]
async fn a_timeout_escalates_to_sigkill() {
    let fx = fixture();
    let started = Instant::now();
    let options = ExecOptions::new().with_timeout(Duration::from_millis(200));
    let command = "trap '' TERM; sleep 30 & echo $!; wait";
    let res = fx.sandbox.exec(command, options).await.unwrap();
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_secs(2),
        "SIGKILL came before the grace period: {elapsed:?}"
    );
    assert!(elapsed < Duration::from_secs(15), "took {elapsed:?}");
    assert_eq!(res.exit_code, TIMEOUT_EXIT_CODE);
    let pid: u32 = res.stdout.trim().parse().unwrap();
    assert!(
        process_is_gone(pid).await,
        "process {pid} ignoring SIGTERM survived"
    );
}

#[tokio::test]
async fn an_abort_kills_the_whole_process_group() {
    let fx = fixture();
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        trigger.cancel();
    });
    let started = Instant::now();
    let options = ExecOptions::new().with_cancel(cancel);
    let res = fx
        .sandbox
        .exec("sleep 30 & echo $! > pid.txt; sleep 30", options)
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
    assert!(matches!(res, Err(FlueError::Aborted)), "{res:?}");
    let pid: u32 = std::fs::read_to_string(fx.root.path().join("pid.txt"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        process_is_gone(pid).await,
        "background process {pid} survived the abort"
    );

    // A token that has already fired runs nothing.
    let fired = CancellationToken::new();
    fired.cancel();
    let res = fx
        .sandbox
        .exec("touch ran.txt", ExecOptions::new().with_cancel(fired))
        .await;
    assert!(matches!(res, Err(FlueError::Aborted)), "{res:?}");
    assert!(!fx.root.path().join("ran.txt").exists());
}

#[tokio::test]
async fn background_processes_die_when_the_shell_exits() {
    let fx = fixture();
    let started = Instant::now();
    let res = fx
        .sandbox
        .exec("sleep 30 & echo $!", ExecOptions::new())
        .await
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(res.exit_code, 0);
    let pid: u32 = res.stdout.trim().parse().unwrap();
    assert!(
        process_is_gone(pid).await,
        "background process {pid} outlived the call"
    );
}

/// The pid a command wrote to `file` under the root.
fn pid_in(root: &Path, file: &str) -> u32 {
    std::fs::read_to_string(root.join(file))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Starts the processes that leave a command's process group: a `setsid` daemon (a session of
/// its own), a job of a shell with job control (a group of its own), a double fork into a new
/// session, and one more `setsid` daemon that drops the tag from its environment. Each writes
/// its pid to a file; the command waits for all four.
const LEAVING_THE_GROUP: &str = "setsid -f sh -c 'echo $$ > daemon.pid; exec sleep 1001'; \
    set -m; sleep 1002 & echo $! > job.pid; set +m; \
    (setsid sh -c 'sleep 1003 & echo $! > double.pid' &); \
    setsid -f env -u FLUE_COMMAND_TAG sh -c 'echo $$ > shed.pid; exec sleep 1004'; \
    for f in daemon job double shed; do while [ ! -s $f.pid ]; do sleep 0.02; done; done";

/// What left the group dies with the call as well, found by the tag in its environment, when
/// the shell exits and when the call times out; a process that dropped the tag is not found
/// (docs/sandboxes.md says so).
#[tokio::test]
async fn processes_that_left_the_group_die_with_the_call_unless_they_dropped_the_tag() {
    // The timeout leaves the command (which waits for its four processes) time on a busy machine.
    for timeout in [None, Some(Duration::from_secs(8))] {
        let fx = fixture();
        let mut options = ExecOptions::new();
        let mut command = LEAVING_THE_GROUP.to_owned();
        if let Some(timeout) = timeout {
            options = options.with_timeout(timeout);
            command.push_str("; sleep 60");
        }
        let res = fx.sandbox.exec(&command, options).await.unwrap();
        let expected_code = if timeout.is_some() {
            TIMEOUT_EXIT_CODE
        } else {
            0
        };
        assert_eq!(res.exit_code, expected_code, "{res:?}");
        for file in ["daemon.pid", "job.pid", "double.pid"] {
            let pid = pid_in(fx.root.path(), file);
            assert!(
                process_is_gone(pid).await,
                "{file}: process {pid} outlived the call (timeout {timeout:?})"
            );
        }
        let shed = pid_in(fx.root.path(), "shed.pid");
        let alive = std::fs::read_to_string(format!("/proc/{shed}/cmdline"))
            .is_ok_and(|cmdline| cmdline.starts_with("sleep"));
        let _ = std::process::Command::new("kill")
            .args(["-9", &shed.to_string()])
            .status();
        assert!(
            alive,
            "a process without the tag is not found, so it survives"
        );
    }
}

#[tokio::test]
async fn output_is_capped_per_stream_and_drained() {
    let fx = fixture();
    let sandbox = LocalSandbox::new(fx.root.path())
        .unwrap()
        .with_output_limit(1000);
    let command = "head -c 300000 /dev/zero | tr '\\0' a; head -c 5 /dev/zero | tr '\\0' e >&2";
    let res = sandbox.exec(command, ExecOptions::new()).await.unwrap();
    assert_eq!(
        res,
        ShellResult {
            stdout: format!(
                "{}\n[stdout truncated: kept the first 1000 of 300000 bytes]",
                "a".repeat(1000)
            ),
            stderr: "eeeee".into(),
            exit_code: 0,
        }
    );
}

/// Starts commands as `env FLUE_LAUNCHED=yes bash -c ...` and records each call.
#[derive(Debug, Default)]
struct RecordingLauncher {
    calls: std::sync::Mutex<Vec<(String, String)>>,
}

impl CommandLauncher for RecordingLauncher {
    fn argv(&self, command: &str, cwd: &Path) -> flue_core::Result<Vec<OsString>> {
        self.calls
            .lock()
            .unwrap()
            .push((command.to_owned(), cwd.display().to_string()));
        if command == "refuse" {
            return Err(FlueError::sandbox(
                flue_core::error::SandboxErrorReason::Unavailable,
                "launcher refused",
            ));
        }
        Ok(["env", "FLUE_LAUNCHED=yes", "bash", "-c", command]
            .map(OsString::from)
            .to_vec())
    }
}

#[tokio::test]
async fn a_launcher_wraps_each_command() {
    let fx = fixture();
    let launcher = Arc::new(RecordingLauncher::default());
    let sandbox = fx.sandbox.clone().with_launcher(launcher.clone());
    let res = sandbox
        .exec(
            "echo $FLUE_LAUNCHED; pwd",
            ExecOptions::new().with_cwd("sub"),
        )
        .await
        .unwrap();
    let sub = fx.root.path().canonicalize().unwrap().join("sub");
    assert_eq!(
        res,
        ShellResult {
            stdout: format!("yes\n{}\n", sub.display()),
            stderr: String::new(),
            exit_code: 0
        }
    );
    let err = sandbox
        .exec("refuse", ExecOptions::new())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "sandbox_unavailable");
    assert_eq!(
        launcher.calls.lock().unwrap().clone(),
        vec![
            (
                "echo $FLUE_LAUNCHED; pwd".to_owned(),
                sub.display().to_string()
            ),
            (
                "refuse".to_owned(),
                fx.root.path().canonicalize().unwrap().display().to_string()
            ),
        ]
    );
    // A timeout still ends the launched process.
    let res = sandbox
        .exec(
            "sleep 30",
            ExecOptions::new().with_timeout(Duration::from_millis(200)),
        )
        .await
        .unwrap();
    assert_eq!(res.exit_code, TIMEOUT_EXIT_CODE);
}

/// Swaps `a` and `b` atomically (both stay present), as a racer on the host would.
fn exchange(a: &Path, b: &Path) -> bool {
    rustix::fs::renameat_with(
        rustix::fs::CWD,
        a,
        rustix::fs::CWD,
        b,
        rustix::fs::RenameFlags::EXCHANGE,
    )
    .is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_swapped_for_a_symlink_never_leads_a_file_tool_out() {
    use crate::sandbox_race::{OUTSIDE_SECRET, RaceGoal, hammer, prepare};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    let root = TempDir::new().unwrap();
    let outside = TempDir::new().unwrap();
    std::fs::write(outside.path().join("secret.txt"), OUTSIDE_SECRET).unwrap();
    let sandbox = Arc::new(LocalSandbox::new(root.path()).unwrap());
    prepare(sandbox.as_ref()).await;
    let dir = root.path().join("d");
    let to_outside = root.path().join("l_out");
    let to_proc = root.path().join("l_proc");
    symlink(outside.path(), &to_outside).unwrap();
    symlink("/proc/self", &to_proc).unwrap();

    // The racer: a host thread that keeps `d` a directory half of the time and a symlink out
    // of the root (to the outside directory, then to /proc/self) the other half.
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicUsize::new(0));
    let racer = {
        let (stop, swaps) = (Arc::clone(&stop), Arc::clone(&swaps));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for link in [&to_outside, &to_proc] {
                    if exchange(&dir, link) {
                        std::thread::yield_now();
                        assert!(exchange(&dir, link), "swap back");
                        swaps.fetch_add(1, Ordering::Relaxed);
                    }
                    std::thread::yield_now();
                }
            }
        })
    };
    let goal = RaceGoal {
        calls: 1_000,
        succeeded: 100,
        racer_done: Box::new({
            let swaps = Arc::clone(&swaps);
            move || swaps.load(Ordering::Relaxed) >= 100
        }),
    };
    let report = hammer(sandbox, 4, goal).await;
    stop.store(true, Ordering::Relaxed);
    racer.join().unwrap();

    let swaps = swaps.load(Ordering::Relaxed);
    eprintln!(
        "local race: {} calls ({} succeeded), {swaps} swaps, {} escapes",
        report.calls,
        report.succeeded,
        report.escapes.len()
    );
    assert!(report.calls >= 1_000, "{report:?}");
    assert!(report.succeeded >= 100, "{report:?}");
    assert!(swaps >= 100, "{swaps} swaps");
    assert_eq!(report.escapes, Vec::<String>::new());
    // Nothing was created, changed or removed outside.
    assert_eq!(
        host_state(outside.path()),
        (vec!["secret.txt".to_owned()], OUTSIDE_SECRET.to_owned())
    );
}

#[tokio::test]
async fn symlinks_are_walked_by_hand_inside_the_root_only() {
    let fx = fixture();
    let root = fx.root.path().canonicalize().unwrap();
    let link = |target: &str, name: &str| symlink(target, root.join(name)).unwrap();
    // An absolute link into the root, a relative one with `..` that stays inside, a chain.
    link(&root.join("a.txt").display().to_string(), "absolute");
    link("sub/../a.txt", "climbs_back");
    link("absolute", "chain");
    link("..", "sub/up");
    // Out: `..` past the root, through a link in a subdirectory; and a loop.
    link("../../etc/passwd", "sub/out");
    link("loop_b", "loop_a");
    link("loop_a", "loop_b");
    let read = |path: &'static str| {
        let sandbox = fx.sandbox.clone();
        async move {
            match sandbox.read_file(path).await {
                Ok(text) => text,
                Err(err) => err.kind().to_owned(),
            }
        }
    };
    assert_eq!(
        [
            read("absolute").await,
            read("climbs_back").await,
            read("chain").await,
            read("sub/up/a.txt").await,
            read("sub/up/sub/up/a.txt").await,
            read("sub/out").await,
            read("sub/up/sub/out").await,
            read("loop_a").await,
        ],
        [
            "hello\n",
            "hello\n",
            "hello\n",
            "hello\n",
            "hello\n",
            "outside_workspace",
            "outside_workspace",
            "sandbox_error",
        ]
    );
    // A write through a chain lands inside, creating the missing parents there.
    link("sub/new", "to_new");
    fx.sandbox
        .write_file("to_new/deep/f.txt", b"made")
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(root.join("sub/new/deep/f.txt")).unwrap(),
        "made"
    );
}
