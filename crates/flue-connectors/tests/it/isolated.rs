//! Tests: `IsolatedSandbox` with each backend — the shared contract, and the isolation
//! itself (read-only host, private /tmp, no network, pid namespace).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use flue_connectors::{IsolatedSandbox, IsolationBackend};
use flue_core::{ExecOptions, Sandbox};
use pretty_assertions::assert_eq;
use tempfile::TempDir;

use crate::sandbox_contract::{Backend, OutsideState, run_ok};

/// An isolated sandbox on a fresh root using `backend`, and a directory outside it.
async fn backend_with(backend: IsolationBackend) -> Backend {
    let root = TempDir::new().unwrap();
    let outside = TempDir::new().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "secret").unwrap();
    let sandbox = IsolatedSandbox::builder(root.path())
        .with_backend(backend)
        .build()
        .await
        .unwrap();
    assert_eq!(sandbox.backend(), backend);
    let outside_path = outside.path().to_path_buf();
    Backend {
        sandbox: Arc::new(sandbox),
        outside: outside.path().display().to_string(),
        outside_state: Box::new(move || {
            let dir = outside_path.clone();
            Box::pin(async move { host_state(&dir) })
        }),
        _guard: Box::new((root, outside)),
    }
}

pub async fn bwrap_backend() -> Backend {
    backend_with(IsolationBackend::Bubblewrap).await
}

pub async fn unshare_backend() -> Backend {
    backend_with(IsolationBackend::Unshare).await
}

mod bwrap_contract {
    crate::sandbox_contract::sandbox_contract!(super::bwrap_backend);
}

mod unshare_contract {
    crate::sandbox_contract::sandbox_contract!(super::unshare_backend);
}

fn host_state(dir: &Path) -> OutsideState {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let secret = std::fs::read_to_string(dir.join("secret.txt")).unwrap_or_default();
    (names, secret)
}

/// What one command sees of the isolation, as one line per check.
async fn isolation_report(backend: IsolationBackend, network: bool) -> Vec<String> {
    let root = TempDir::new().unwrap();
    let host_dir = TempDir::new().unwrap();
    std::fs::write(host_dir.path().join("host.txt"), "host").unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();

    let mut builder = IsolatedSandbox::builder(root.path()).with_backend(backend);
    if network {
        builder = builder.with_network();
    }
    let sandbox = builder.build().await.unwrap();
    let host = host_dir.path().display();
    let test_pid = std::process::id();
    let script = format!(
        "echo workspace > ws.txt && echo workspace:writable
         (echo x > {host}/new.txt) 2>/dev/null && echo host:writable || echo host:read-only
         test -e {host}/host.txt && echo host-tmp:visible || echo host-tmp:hidden
         echo scratch > /tmp/scratch.txt && echo tmp:writable
         test -d /proc/{test_pid} && echo pid:shared || echo pid:private
         (echo > /dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo network:on || echo network:off"
    );
    let res = sandbox.exec(&script, ExecOptions::new()).await.unwrap();
    assert_eq!(res.exit_code, 0, "{res:?}");
    // What the command did in the workspace is on the host; nothing else is.
    assert_eq!(
        std::fs::read_to_string(root.path().join("ws.txt")).unwrap(),
        "workspace\n"
    );
    assert!(!host_dir.path().join("new.txt").exists());
    drop(listener);
    res.stdout.lines().map(str::to_owned).collect()
}

fn expected_report(network: &str) -> Vec<String> {
    [
        "workspace:writable",
        "host:read-only",
        "host-tmp:hidden",
        "tmp:writable",
        "pid:private",
        network,
    ]
    .map(str::to_owned)
    .to_vec()
}

#[tokio::test]
async fn bwrap_isolates_the_command() {
    assert_eq!(
        isolation_report(IsolationBackend::Bubblewrap, false).await,
        expected_report("network:off")
    );
    assert_eq!(
        isolation_report(IsolationBackend::Bubblewrap, true).await,
        expected_report("network:on")
    );
}

#[tokio::test]
async fn unshare_isolates_the_command() {
    assert_eq!(
        isolation_report(IsolationBackend::Unshare, false).await,
        expected_report("network:off")
    );
    assert_eq!(
        isolation_report(IsolationBackend::Unshare, true).await,
        expected_report("network:on")
    );
}

/// Whether a process has its working directory in `dir` (compared by device and inode, so a
/// process inside a mount namespace counts too: the workspace is bound there, the same inode).
fn a_process_works_in(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let wanted = std::fs::metadata(dir).unwrap();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    procs.filter_map(Result::ok).any(|entry| {
        std::fs::metadata(entry.path().join("cwd"))
            .is_ok_and(|cwd| cwd.dev() == wanted.dev() && cwd.ino() == wanted.ino())
    })
}

/// Waits until no process works in `dir`; false when one still does after a minute (the
/// last resort: every command here is killed at once).
async fn until_nothing_works_in(dir: &Path) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while a_process_works_in(dir) {
        if std::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

#[tokio::test]
async fn nothing_outlives_the_command() {
    for backend in [IsolationBackend::Bubblewrap, IsolationBackend::Unshare] {
        let root = TempDir::new().unwrap();
        let sandbox = IsolatedSandbox::builder(root.path())
            .with_backend(backend)
            .build()
            .await
            .unwrap();
        run_ok(&sandbox, "(sleep 1; touch late.txt) & echo started").await;
        // Every process of the command works in the workspace until it dies: once none does,
        // nothing is left that could still write there.
        assert!(
            until_nothing_works_in(root.path()).await,
            "{backend}: a process survived"
        );
        assert!(!root.path().join("late.txt").exists(), "{backend}");

        // A timeout stops the command at once, whatever it was doing when it fired (on a busy
        // machine, often still setting up the namespace): it gets no grace to go on writing.
        let res = sandbox
            .exec(
                "(sleep 1; touch late2.txt) & sleep 30",
                ExecOptions::new().with_timeout(Duration::from_millis(300)),
            )
            .await
            .unwrap();
        assert_eq!(res.exit_code, 124, "{backend}: {res:?}");
        assert_eq!(res.stderr, "[command timed out after 300 ms]", "{backend}");
        assert!(
            until_nothing_works_in(root.path()).await,
            "{backend}: a process survived"
        );
        assert!(!root.path().join("late2.txt").exists(), "{backend}");
    }
}

#[tokio::test]
async fn the_first_working_backend_is_chosen() {
    let root = TempDir::new().unwrap();
    let sandbox = IsolatedSandbox::builder(root.path()).build().await.unwrap();
    assert_eq!(sandbox.backend(), IsolationBackend::Bubblewrap);
    let sandbox = IsolatedSandbox::builder(root.path())
        .with_bwrap_program("/nonexistent/bwrap")
        .build()
        .await
        .unwrap();
    assert_eq!(sandbox.backend(), IsolationBackend::Unshare);
}

#[tokio::test]
async fn no_working_backend_is_a_typed_error_that_says_how_to_fix_it() {
    let root = TempDir::new().unwrap();
    let err = IsolatedSandbox::builder(root.path())
        .with_bwrap_program("/nonexistent/bwrap")
        .with_unshare_program("false")
        .build()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "sandbox_unavailable");
    let message = err.to_string();
    for needle in [
        "bwrap: /nonexistent/bwrap is not installed",
        "unshare: false failed",
        "apt-get install bubblewrap",
        "local sandbox",
    ] {
        assert!(message.contains(needle), "{needle:?} not in {message}");
    }
}

/// What an agent's commands try against the store and the secrets, each attempt reporting on
/// a line of its own.
const RAID: &str = r#"
cat .env .env.local .envs/key 2>/dev/null | grep -o 'sk-[a-z0-9-]*' || echo secrets:unread
cat .flue/flue.db 2>/dev/null | grep -q store-bytes && echo store:read || echo store:unread
(echo rewritten > .flue/flue.db) 2>/dev/null && echo store:written || echo store:unwritable
rm -rf .flue/* 2>/dev/null; rm -f .env .env.local 2>/dev/null
mv .flue moved 2>/dev/null && echo store:moved || echo store:unmovable
mv .env env.bak 2>/dev/null && echo env:moved || echo env:unmovable
umount .flue 2>/dev/null && echo mask:removed || echo mask:kept
umount -l .env 2>/dev/null && echo mask:removed || echo mask:kept
mount -o remount,rw .flue 2>/dev/null && echo mask:writable || echo mask:read-only
unshare -Urm sh -c 'umount .flue' 2>/dev/null && echo nested:removed || echo nested:kept
cat /proc/*/environ 2>/dev/null | tr '\0' '\n' | grep -c CARGO_MANIFEST_DIR || true
ln -s .flue/flue.db db_link && ln -s .env env_link && echo links:made
"#;

#[tokio::test]
async fn commands_cannot_reach_the_store_or_the_secrets() {
    for backend in [IsolationBackend::Bubblewrap, IsolationBackend::Unshare] {
        let root = TempDir::new().unwrap();
        let path = root.path();
        std::fs::create_dir_all(path.join(".flue/trash")).unwrap();
        std::fs::create_dir_all(path.join(".envs")).unwrap();
        std::fs::write(path.join(".flue/flue.db"), "store-bytes").unwrap();
        std::fs::write(path.join(".flue/trash/item"), "trashed").unwrap();
        std::fs::write(path.join(".env"), "KEY=sk-live-123\n").unwrap();
        std::fs::write(path.join(".env.local"), "KEY=sk-local-456\n").unwrap();
        std::fs::write(path.join(".envs/key"), "sk-dir-789\n").unwrap();
        let sandbox = IsolatedSandbox::builder(path)
            .with_backend(backend)
            .build()
            .await
            .unwrap();
        let res = sandbox.exec(RAID, ExecOptions::new()).await.unwrap();
        assert_eq!(
            res.stdout.lines().collect::<Vec<_>>(),
            [
                "secrets:unread",
                "store:unread",
                "store:unwritable",
                "store:unmovable",
                "env:unmovable",
                "mask:kept",
                "mask:kept",
                "mask:read-only",
                "nested:kept",
                "0",
                "links:made",
            ],
            "{backend}: {res:?}"
        );
        // On the host everything is as it was.
        let read = |rel: &str| std::fs::read_to_string(path.join(rel)).unwrap();
        assert_eq!(read(".flue/flue.db"), "store-bytes", "{backend}");
        assert_eq!(read(".flue/trash/item"), "trashed", "{backend}");
        assert_eq!(read(".env"), "KEY=sk-live-123\n", "{backend}");
        assert_eq!(read(".env.local"), "KEY=sk-local-456\n", "{backend}");
        assert_eq!(read(".envs/key"), "sk-dir-789\n", "{backend}");
        // The links the command made lead nowhere for the file operations.
        for link in ["db_link", "env_link"] {
            assert_eq!(
                sandbox.read_file(link).await.unwrap_err().kind(),
                "protected_path",
                "{backend}: {link}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_own_bash_cannot_lead_a_file_tool_out() {
    use crate::sandbox_race::{
        OUTSIDE_SECRET, RACER_ROUNDS, RACER_STOP, RaceGoal, hammer, prepare, racer_script,
    };

    for backend in [IsolationBackend::Bubblewrap, IsolationBackend::Unshare] {
        let root = TempDir::new().unwrap();
        let outside = TempDir::new().unwrap();
        std::fs::write(outside.path().join("secret.txt"), OUTSIDE_SECRET).unwrap();
        let sandbox: Arc<dyn Sandbox> = Arc::new(
            IsolatedSandbox::builder(root.path())
                .with_backend(backend)
                .build()
                .await
                .unwrap(),
        );
        prepare(sandbox.as_ref()).await;
        // The racer is a command of the sandbox itself, running while the file tools work,
        // as when a model issues `bash` and file-tool calls in one turn.
        // Both sides work until each has done enough; then the racer is told to stop.
        let script = racer_script(&outside.path().display().to_string());
        let racing = sandbox.exec(&script, ExecOptions::new());
        let rounds_file = root.path().join(RACER_ROUNDS);
        let goal = RaceGoal {
            calls: 500,
            succeeded: 50,
            racer_done: Box::new(move || {
                std::fs::read_to_string(&rounds_file)
                    .ok()
                    .and_then(|text| text.trim().parse::<usize>().ok())
                    .is_some_and(|rounds| rounds >= 30)
            }),
        };
        let stop_file = root.path().join(RACER_STOP);
        let hammering = async {
            let report = hammer(Arc::clone(&sandbox), 4, goal).await;
            std::fs::write(&stop_file, "").unwrap();
            report
        };
        let (raced, report) = tokio::join!(racing, hammering);
        let raced = raced.unwrap();
        assert_eq!(raced.exit_code, 0, "{backend}: {raced:?}");
        let rounds: usize = raced.stdout.trim().parse().unwrap();
        eprintln!(
            "isolated race ({backend}): {} calls ({} succeeded), {rounds} racer rounds, {} escapes",
            report.calls,
            report.succeeded,
            report.escapes.len()
        );
        assert!(report.calls >= 500, "{backend}: {report:?}");
        assert!(report.succeeded >= 50, "{backend}: {report:?}");
        assert!(rounds >= 30, "{backend}: {rounds} racer rounds");
        assert_eq!(report.escapes, Vec::<String>::new(), "{backend}");
        assert_eq!(
            host_state(outside.path()),
            (vec!["secret.txt".to_owned()], OUTSIDE_SECRET.to_owned()),
            "{backend}"
        );
    }
}
