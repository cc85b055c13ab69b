//! Unit tests of the virtual sandbox's helpers: seed rules and command state.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use pretty_assertions::assert_eq;
use tokio_util::sync::CancellationToken;

use super::seed::{is_excluded, stays_inside};
use super::{VirtualSandbox, shell_state};
use crate::sandbox::{ExecOptions, Sandbox};

#[test]
fn seed_exclusion_matches_names_and_prefixes() {
    let exclude = vec![".git".to_owned(), ".env*".to_owned()];
    let check = |name: &str| is_excluded(name, &exclude);
    assert_eq!(
        [".git", ".gitignore", ".env", ".env.local", "env", "src"].map(check),
        [true, false, true, true, false, false]
    );
}

#[test]
fn seed_symlinks_must_stay_inside() {
    let check = |base: &str, target: &str| stays_inside(Path::new(base), Path::new(target));
    assert_eq!(
        [
            check("", "a.txt"),
            check("sub", "../a.txt"),
            check("sub", "../../a.txt"),
            check("", "../x"),
            check("a/b", "./../../c"),
            check("", "/etc/passwd"),
        ],
        [true, true, false, false, true, false]
    );
}

#[tokio::test]
async fn a_command_state_has_its_cwd_and_env() {
    let sandbox = VirtualSandbox::new();
    let (_interpreter, base) = sandbox.new_interpreter().unwrap();
    let env = BTreeMap::from([("TOKEN".to_owned(), "t".to_owned())]);
    let state = shell_state(&base, Path::new("/workspace/sub"), &env);
    assert_eq!(state.cwd, Path::new("/workspace/sub"));
    assert_eq!(
        (
            state.env.get("PWD").map(String::as_str),
            state.env.get("TOKEN").map(String::as_str)
        ),
        (Some("/workspace/sub"), Some("t"))
    );
}

/// Waits until no interpreter thread of `sandbox` runs; the deadline (`STOP_GRACE` and a generous
/// margin for a busy machine) only ends a test whose thread runs on for good.
async fn threads_wind_down(sandbox: &VirtualSandbox) -> usize {
    let deadline = std::time::Instant::now() + super::STOP_GRACE + Duration::from_secs(60);
    while sandbox.running_commands() > 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    sandbox.running_commands()
}

/// How soon a stopped command must have returned: far below what it would run otherwise (the
/// loop limits take minutes), generous for a busy machine.
const PROMPTLY: Duration = Duration::from_secs(30);

/// CPU-bound commands that never yield; the test runtime is a current-thread one, like the CLI's.
const RUNAWAY_COMMANDS: [&str; 5] = [
    "a=(); while true; do a+=(x); done",
    "until false; do echo -n; done",
    "sed ':a;s/x*/&&x/;ba' <<< x",
    "for ((;;)); do :; done",
    "while :; do x=$(echo $x | tr a b); done",
];

#[tokio::test]
async fn runaway_commands_stop_at_their_timeout_and_their_thread_ends() {
    let sandbox = VirtualSandbox::new();
    let mut outcomes = Vec::new();
    for command in RUNAWAY_COMMANDS {
        let started = std::time::Instant::now();
        let res = sandbox
            .exec(
                command,
                ExecOptions::new().with_timeout(Duration::from_millis(300)),
            )
            .await
            .unwrap();
        let elapsed = started.elapsed();
        outcomes.push((
            command,
            res.exit_code,
            elapsed < PROMPTLY,
            threads_wind_down(&sandbox).await,
        ));
    }
    let expected: Vec<_> = RUNAWAY_COMMANDS
        .iter()
        .map(|command| (*command, 124, true, 0))
        .collect();
    assert_eq!(outcomes, expected);
    let after = sandbox.exec("echo still here", ExecOptions::new()).await;
    assert_eq!(after.unwrap().stdout, "still here\n");
}

#[tokio::test]
async fn an_abort_stops_a_runaway_command_and_its_thread() {
    let sandbox = VirtualSandbox::new();
    let mut outcomes = Vec::new();
    for command in RUNAWAY_COMMANDS {
        let cancel = CancellationToken::new();
        let trigger = cancel.clone();
        let started = std::time::Instant::now();
        let res = tokio::join!(
            sandbox.exec(command, ExecOptions::new().with_cancel(cancel)),
            async move {
                tokio::time::sleep(Duration::from_millis(200)).await;
                trigger.cancel();
            }
        )
        .0;
        outcomes.push((
            command,
            res.map_err(|err| err.kind()).err(),
            started.elapsed() < PROMPTLY,
            threads_wind_down(&sandbox).await,
        ));
    }
    let expected: Vec<_> = RUNAWAY_COMMANDS
        .iter()
        .map(|command| (*command, Some("aborted"), true, 0))
        .collect();
    assert_eq!(outcomes, expected);
}

#[tokio::test]
async fn dropping_a_running_exec_stops_its_command() {
    let sandbox = VirtualSandbox::new();
    let dropped = tokio::time::timeout(
        Duration::from_millis(200),
        sandbox.exec("while true; do :; done", ExecOptions::new()),
    )
    .await;
    assert!(dropped.is_err(), "the loop cannot have finished");
    assert_eq!(threads_wind_down(&sandbox).await, 0);
}

#[tokio::test]
async fn recursion_no_counter_sees_is_a_limit_not_a_crash() {
    let sandbox = VirtualSandbox::new();
    let commands = [
        r#"cmd='eval "$cmd"'; eval "$cmd""#,
        r#"echo 'eval "$(cat /tmp/s)"' > /tmp/s; eval "$(cat /tmp/s)""#,
        r#"cmd='command eval "$cmd"'; eval "$cmd""#,
        r#"cmd='builtin eval "$cmd"'; eval "$cmd""#,
        r#"cmd='eval "$cmd" | cat'; eval "$cmd""#,
        r#"cmd='x=$(eval "$cmd")'; eval "$cmd""#,
        "f(){ eval f; }; f",
        "echo 'source /tmp/s' > /tmp/s; source /tmp/s",
        "f(){ f; }; f",
    ];
    let mut kinds = Vec::new();
    for command in commands {
        let res = sandbox.exec(command, ExecOptions::new()).await;
        kinds.push((
            command,
            match res {
                Ok(res) => format!("exit {}", res.exit_code),
                Err(err) => err.kind().to_owned(),
            },
        ));
    }
    let expected = vec![
        (commands[0], "limit_exceeded".to_owned()),
        (commands[1], "limit_exceeded".to_owned()),
        (commands[2], "limit_exceeded".to_owned()),
        (commands[3], "limit_exceeded".to_owned()),
        (commands[4], "limit_exceeded".to_owned()),
        // bashkit's substitution depth limit, inside the substitution: a failing command.
        (commands[5], "exit 1".to_owned()),
        (commands[6], "limit_exceeded".to_owned()),
        // bashkit's own source depth limit: a failing command.
        (commands[7], "exit 1".to_owned()),
        (commands[8], "limit_exceeded".to_owned()),
    ];
    assert_eq!(kinds, expected);
    assert_eq!(threads_wind_down(&sandbox).await, 0);
    let after = sandbox.exec("echo still here", ExecOptions::new()).await;
    assert_eq!(after.unwrap().stdout, "still here\n");
}

/// Memory bombs, each run in a child process capped at [`BOMB_ADDRESS_SPACE`] bytes of address
/// space (`prlimit --as`): a bomb that grew past it would kill the child, not the machine. Each
/// with the outcomes it may have: a limit, or its 1.5 s timeout (which a slower or faster build
/// reaches first).
const BOMBS: [(&str, &[&str]); 8] = [
    (
        "a=(); while true; do a+=(x); done",
        &["exit 124", "limit_exceeded"],
    ),
    ("x=x; while true; do x=$x$x; done", &["limit_exceeded"]),
    (
        "declare -A m; i=0; while true; do m[$i]=$i; i=$((i+1)); done",
        &["exit 124", "limit_exceeded"],
    ),
    (
        "x=x; for i in $(seq 1 23); do x=$x$x; done; a=(); while true; do a+=(\"$x\"); done",
        &["limit_exceeded"],
    ),
    (
        "x=x; for i in $(seq 1 23); do x=$x$x; done; cat <<< \"$x$x$x$x$x$x$x$x\" | sort | wc -c",
        &["limit_exceeded"],
    ),
    (
        "x=x; for i in $(seq 1 23); do x=$x$x; done; i=0; while true; do echo \"$x\" > /tmp/f$i; i=$((i+1)); done",
        &["limit_exceeded"],
    ),
    // awk's own string limit: a failed command.
    ("awk 'BEGIN{s=\"x\"; while(1) s=s s}'", &["exit 2"]),
    (
        "f(){ local x=$(seq 1 100000); f; }; f",
        &["exit 124", "limit_exceeded"],
    ),
];
const BOMB_ADDRESS_SPACE: &str = "2000000000";
const BOMB_ENV: &str = "FLUE_VFS_BOMB";

#[test]
fn memory_bombs_end_within_a_capped_address_space() {
    let exe = std::env::current_exe().unwrap();
    let mut outcomes = Vec::new();
    for (bomb_idx, (bomb, accepted)) in BOMBS.iter().enumerate() {
        let output = std::process::Command::new("prlimit")
            .arg(format!("--as={BOMB_ADDRESS_SPACE}"))
            .arg(&exe)
            .args([
                "--exact",
                "sandbox::vfs::tests::bomb_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(BOMB_ENV, bomb_idx.to_string())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let verdict = stdout
            .lines()
            .find_map(|line| {
                line.split_once("bomb outcome: ")
                    .map(|(_, verdict)| verdict)
            })
            .map_or_else(
                || {
                    format!(
                        "the child died: {}",
                        String::from_utf8_lossy(&output.stderr)
                    )
                },
                str::to_owned,
            );
        let expected = if accepted.contains(&verdict.as_str()) {
            "as expected".to_owned()
        } else {
            verdict
        };
        outcomes.push((*bomb, expected));
    }
    let expected: Vec<_> = BOMBS
        .iter()
        .map(|(bomb, _)| (*bomb, "as expected".to_owned()))
        .collect();
    assert_eq!(outcomes, expected);
}

/// Runs one bomb of [`BOMBS`] when started by `memory_bombs_end_within_a_capped_address_space`
/// (which sets [`BOMB_ENV`]); alone it has nothing to run.
#[test]
fn bomb_child() {
    let Ok(bomb_idx) = std::env::var(BOMB_ENV) else {
        return;
    };
    let (bomb, accepted) = BOMBS[bomb_idx.parse::<usize>().unwrap()];
    // A bomb that may end at its timeout gets a short one; one that must reach a limit gets a
    // generous one (a busy machine gets there later), which only ends a bomb that never does.
    let timeout = if accepted.contains(&"exit 124") {
        Duration::from_millis(1_500)
    } else {
        Duration::from_secs(120)
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let outcome = runtime.block_on(async {
        let sandbox = VirtualSandbox::new();
        let res = sandbox
            .exec(bomb, ExecOptions::new().with_timeout(timeout))
            .await;
        match res {
            Ok(res) => format!("exit {}", res.exit_code),
            Err(err) => err.kind().to_owned(),
        }
    });
    println!("bomb outcome: {outcome}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_commands_share_pooled_interpreters_without_disturbing_each_other() {
    let sandbox = VirtualSandbox::new();
    let mut outputs = Vec::new();
    for wave in 0..20 {
        let mut set = tokio::task::JoinSet::new();
        for idx in 0..12 {
            let sandbox = sandbox.clone();
            let n = wave * 12 + idx;
            set.spawn(async move {
                let res = sandbox
                    .exec(
                        &format!("for i in 1 2 3; do :; done; echo {n}"),
                        ExecOptions::new(),
                    )
                    .await;
                (n, res.map(|res| res.stdout).map_err(|err| err.kind()))
            });
        }
        while let Some(done) = set.join_next().await {
            outputs.push(done.unwrap());
        }
    }
    outputs.sort_by_key(|(n, _)| *n);
    let expected: Vec<_> = (0..240).map(|n| (n, Ok(format!("{n}\n")))).collect();
    assert_eq!(outputs, expected);
    assert_eq!(threads_wind_down(&sandbox).await, 0);
}

#[tokio::test]
async fn an_abort_ends_a_command_waiting_inside_a_step_before_exec_returns() {
    // `sleep` waits without looking at the stop flag: before, exec returned after the whole
    // stop grace with the command still sleeping on its thread (Ctrl-C took 2 s).
    let sandbox = VirtualSandbox::new();
    for command in ["sleep 30", "echo start; sleep 30; echo never"] {
        let cancel = CancellationToken::new();
        let trigger = cancel.clone();
        let (res, ()) = tokio::join!(
            sandbox.exec(command, ExecOptions::new().with_cancel(cancel)),
            async move {
                tokio::time::sleep(Duration::from_millis(200)).await;
                trigger.cancel();
            }
        );
        // Counted down before the reply is dropped: nothing is left running at return.
        assert_eq!(
            (
                res.map_err(|err| err.kind()).err(),
                sandbox.running_commands()
            ),
            (Some("aborted"), 0),
            "{command}"
        );
    }
    let after = sandbox.exec("echo still here", ExecOptions::new()).await;
    assert_eq!(after.unwrap().stdout, "still here\n");
}
