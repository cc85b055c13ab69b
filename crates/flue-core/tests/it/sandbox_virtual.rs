//! Tests: `VirtualSandbox` — the shared contract, seeding, limits and isolation from the host.

use std::sync::Arc;
use std::time::Duration;

use flue_core::{ExecOptions, Sandbox, VirtualSandbox, sandbox::VirtualLimits};
use pretty_assertions::assert_eq;
use tempfile::TempDir;

use crate::sandbox_contract::{Backend, kind_of, run_ok};

mod contract {
    crate::sandbox_contract::sandbox_contract!(super::backend);
}

/// A virtual sandbox; the outside directory is `/outside` of its own filesystem.
pub async fn backend() -> Backend {
    let sandbox = VirtualSandbox::new();
    run_ok(
        &sandbox,
        "mkdir /outside && printf secret > /outside/secret.txt",
    )
    .await;
    let probe = sandbox.clone();
    Backend {
        sandbox: Arc::new(sandbox),
        outside: "/outside".to_owned(),
        outside_state: Box::new(move || {
            let sandbox = probe.clone();
            Box::pin(async move {
                let listing = run_ok(&sandbox, "ls -1 /outside").await.stdout;
                let secret = run_ok(&sandbox, "cat /outside/secret.txt").await.stdout;
                (listing.lines().map(str::to_owned).collect(), secret)
            })
        }),
        _guard: Box::new(()),
    }
}

/// A host directory to seed from: `README.md`, `src/main.rs`, an excluded `.git/` and
/// `.env`, a symlink inside (`link` -> `README.md`) and one pointing out (`escape` -> `/etc`).
fn seed_dir() -> TempDir {
    let dir = TempDir::new().unwrap();
    let root = dir.path();
    std::fs::write(root.join("README.md"), "# project\n").unwrap();
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("src/main.rs"), "fn main() {}\n").unwrap();
    std::fs::create_dir_all(root.join(".git")).unwrap();
    std::fs::write(root.join(".git/HEAD"), "ref").unwrap();
    std::fs::write(root.join(".env"), "TOKEN=secret").unwrap();
    std::fs::write(root.join(".env.local"), "TOKEN=secret").unwrap();
    std::os::unix::fs::symlink("README.md", root.join("link")).unwrap();
    std::os::unix::fs::symlink("/etc", root.join("escape")).unwrap();
    std::os::unix::fs::symlink(root.join("src/main.rs"), root.join("abs_link")).unwrap();
    dir
}

/// Every file under `dir` with its content, sorted, as the host sees it.
fn host_tree(dir: &std::path::Path) -> Vec<(String, String)> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(next).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(dir).unwrap().display().to_string();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                pending.push(path);
            } else if meta.is_file() {
                files.push((rel, std::fs::read_to_string(&path).unwrap()));
            } else {
                files.push((
                    rel,
                    format!("-> {}", std::fs::read_link(&path).unwrap().display()),
                ));
            }
        }
    }
    files.sort();
    files
}

#[tokio::test]
async fn a_seed_is_a_copy_and_the_original_is_never_touched() {
    let dir = seed_dir();
    let before = host_tree(dir.path());
    let sandbox = VirtualSandbox::builder()
        .with_seed(dir.path())
        .with_seed_exclude([".git", ".env*"])
        .build()
        .await
        .unwrap();
    assert_eq!(
        sandbox.readdir(".").await.unwrap(),
        vec!["README.md", "abs_link", "link", "src"]
    );
    assert_eq!(sandbox.read_file("link").await.unwrap(), "# project\n");
    assert_eq!(
        sandbox.read_file("abs_link").await.unwrap(),
        "fn main() {}\n"
    );
    let res = run_ok(
        &sandbox,
        "cat src/main.rs; readlink abs_link; grep -c project README.md",
    )
    .await;
    assert_eq!(res.stdout, "fn main() {}\n/workspace/src/main.rs\n1\n");

    // Changing the copy leaves the host directory as it was.
    run_ok(
        &sandbox,
        "echo changed > README.md; rm src/main.rs; mkdir new; echo x > new/file; rm link",
    )
    .await;
    sandbox
        .write_file("src/lib.rs", b"pub fn f() {}")
        .await
        .unwrap();
    assert_eq!(sandbox.read_file("README.md").await.unwrap(), "changed\n");
    assert_eq!(host_tree(dir.path()), before);
}

#[tokio::test]
async fn seeding_reports_what_is_wrong() {
    let missing = VirtualSandbox::builder()
        .with_seed("/nonexistent/flue-seed")
        .build()
        .await
        .map(|_| ());
    assert_eq!(kind_of(&missing), "not_found");

    let dir = seed_dir();
    let too_many = VirtualSandbox::builder()
        .with_seed(dir.path())
        .with_limits(VirtualLimits::default().with_max_files(3))
        .build()
        .await
        .unwrap_err();
    assert_eq!(too_many.kind(), "limit_exceeded");
    let message = too_many.to_string();
    assert!(
        message.contains("more than 3 files") && message.contains("seed exclude"),
        "{message}"
    );
    let too_big = VirtualSandbox::builder()
        .with_seed(dir.path())
        .with_limits(VirtualLimits::default().with_max_file_bytes(5))
        .build()
        .await
        .unwrap_err();
    assert_eq!(too_big.kind(), "limit_exceeded");
    assert!(too_big.to_string().contains("a file of"), "{too_big}");
}

/// A workspace `root/` with `root/data/notes.txt`, next to `outside/secret.txt`, plus symlinks
/// inside the workspace that lead out: `root/link -> outside`, `root/data/deeper -> outside`.
fn workspace_beside_a_secret() -> TempDir {
    let dir = TempDir::new().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("data")).unwrap();
    std::fs::write(root.join("data/notes.txt"), "notes").unwrap();
    std::fs::create_dir_all(dir.path().join("outside")).unwrap();
    std::fs::write(dir.path().join("outside/secret.txt"), "SECRET").unwrap();
    std::os::unix::fs::symlink(dir.path().join("outside"), root.join("link")).unwrap();
    std::os::unix::fs::symlink("../../outside", root.join("data/deeper")).unwrap();
    dir
}

#[tokio::test]
async fn a_seed_below_a_root_stays_below_it() {
    let dir = workspace_beside_a_secret();
    let root = dir.path().join("root");
    let seeded = VirtualSandbox::builder()
        .with_seed_in(&root, "./data")
        .build()
        .await
        .unwrap();
    // The copy holds the directory, and the symlink that leads out is left out.
    assert_eq!(seeded.readdir(".").await.unwrap(), vec!["notes.txt"]);

    let outside = dir.path().join("outside");
    for relative in [
        "../outside",
        "data/../../outside",
        outside.to_str().unwrap(),
        "/etc",
        "link",
        "data/deeper",
        "link/sub",
    ] {
        let err = VirtualSandbox::builder()
            .with_seed_in(&root, relative)
            .build()
            .await
            .map(|_| ())
            .unwrap_err();
        assert_eq!(err.kind(), "permission_denied", "{relative}: {err}");
        assert!(
            err.to_string()
                .contains("a seed must be a directory inside the workspace"),
            "{relative}: {err}"
        );
    }
}

/// While one thread keeps swapping a seeded directory for a symlink to a secret directory and
/// back, seeding again and again never copies the secret: the copier opens every directory and
/// file relative to its parent's handle without following symlinks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swapping_a_directory_for_a_symlink_during_seeding_never_leaks() {
    let dir = workspace_beside_a_secret();
    let root = dir.path().join("root");
    std::fs::remove_file(root.join("link")).unwrap();
    std::fs::remove_file(root.join("data/deeper")).unwrap();
    for idx in 0..20 {
        std::fs::write(root.join(format!("data/file{idx}.txt")), "plain").unwrap();
        std::fs::write(
            dir.path().join(format!("outside/secret{idx}.txt")),
            "SECRET",
        )
        .unwrap();
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let n_swaps = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let swapper = {
        let stop = stop.clone();
        let n_swaps = n_swaps.clone();
        let data = root.join("data");
        let parked = root.join("parked");
        let outside = dir.path().join("outside");
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::fs::rename(&data, &parked).unwrap();
                std::os::unix::fs::symlink(&outside, &data).unwrap();
                std::thread::sleep(Duration::from_micros(200));
                std::fs::remove_file(&data).unwrap();
                std::fs::rename(&parked, &data).unwrap();
                std::thread::sleep(Duration::from_micros(100));
                n_swaps.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        })
    };
    // For two seconds, and on until enough seedings raced enough swaps to mean anything (a busy
    // machine gets there later); the deadline only ends a test that never gets there.
    let mut n_trials = 0_u64;
    let mut n_copied = 0_u64;
    let started = std::time::Instant::now();
    let enough = |n_trials: u64, n_copied: u64| {
        n_trials >= 20
            && n_copied >= 10
            && n_swaps.load(std::sync::atomic::Ordering::Relaxed) >= 100
    };
    while started.elapsed() < Duration::from_secs(2) || !enough(n_trials, n_copied) {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "too few trials to mean anything: {n_trials} seedings, {n_copied} copies, {} swaps",
            n_swaps.load(std::sync::atomic::Ordering::Relaxed)
        );
        n_trials += 1;
        let Ok(sandbox) = VirtualSandbox::builder().with_seed(&root).build().await else {
            continue;
        };
        n_copied += 1;
        let found = run_ok(&sandbox, "grep -rl SECRET . || true").await.stdout;
        assert_eq!(found, "", "trial {n_trials} copied the secret");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    swapper.join().unwrap();
}

#[tokio::test]
async fn limits_end_runaway_commands_with_a_typed_error() {
    let sandbox = VirtualSandbox::builder()
        .with_limits(
            VirtualLimits::default()
                .with_max_commands(500)
                .with_max_loop_iterations(50)
                .with_max_fs_bytes(1_000)
                .with_max_output_bytes(100),
        )
        .build()
        .await
        .unwrap();
    let err = sandbox
        .exec(
            "for i in $(seq 1 1000); do echo $i > /dev/null; done",
            ExecOptions::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "limit_exceeded");
    assert!(
        err.to_string().contains("limit of the virtual sandbox"),
        "{err}"
    );
    let err = sandbox
        .exec("i=0; while true; do i=$((i+1)); done", ExecOptions::new())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "limit_exceeded");

    let err = sandbox
        .write_file("big.bin", &[b'x'; 2_000])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "limit_exceeded");
    let res = sandbox
        .exec(
            "head -c 2000 /dev/zero > big.bin; echo $?",
            ExecOptions::new(),
        )
        .await
        .unwrap();
    assert_ne!(res.stdout, "0\n", "{res:?}");

    let res = sandbox
        .exec("seq 1 1000", ExecOptions::new())
        .await
        .unwrap();
    assert!(
        res.stdout
            .ends_with("[stdout truncated: kept the first 100 bytes]"),
        "{}",
        res.stdout
    );
    // The sandbox works on after each of these.
    assert_eq!(run_ok(&sandbox, "echo ok").await.stdout, "ok\n");
}

#[tokio::test]
async fn a_path_no_filesystem_takes_is_not_a_limit_to_raise() {
    // Like the local sandbox (and Linux): names over 255 bytes, paths over 4096 bytes.
    let sandbox = VirtualSandbox::new();
    let long_name = "x".repeat(256);
    let long_path = "d/".repeat(2_100);
    for path in [long_name.as_str(), long_path.as_str()] {
        let err = sandbox.write_file(path, b"x").await.unwrap_err();
        let message = err.to_string();
        assert_eq!(
            (err.kind(), message.contains("VirtualLimits")),
            ("sandbox_error", false),
            "{message}"
        );
    }
    sandbox.write_file(&"x".repeat(255), b"x").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_loop_is_stopped_by_its_timeout() {
    let sandbox = VirtualSandbox::builder()
        .with_limits(
            VirtualLimits::default()
                .with_max_commands(usize::MAX)
                .with_max_loop_iterations(usize::MAX)
                .with_max_total_loop_iterations(usize::MAX),
        )
        .build()
        .await
        .unwrap();
    let res = sandbox
        .exec(
            "while true; do :; done",
            ExecOptions::new().with_timeout(Duration::from_millis(300)),
        )
        .await
        .unwrap();
    assert_eq!(
        (res.exit_code, res.stderr.as_str()),
        (124, "[command timed out after 300 ms]")
    );
}

#[tokio::test]
async fn one_sandbox_serves_many_commands() {
    // bashkit's own default allows 1,000 `exec` calls per interpreter.
    let sandbox = VirtualSandbox::new();
    for idx in 0..1_100 {
        let res = sandbox
            .exec("echo $((1 + 1))", ExecOptions::new())
            .await
            .unwrap();
        assert_eq!(res.stdout, "2\n", "call {idx}");
    }
}

#[tokio::test]
async fn commands_see_neither_the_host_nor_the_network() {
    let host_dir = TempDir::new().unwrap();
    std::fs::write(host_dir.path().join("host.txt"), "host").unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();

    let sandbox = VirtualSandbox::new();
    let host_file = host_dir.path().join("host.txt");
    let res = sandbox
        .exec(
            &format!("cat {}; echo $?", host_file.display()),
            ExecOptions::new(),
        )
        .await
        .unwrap();
    assert_eq!(res.stdout, "1\n", "{res:?}");
    let res = sandbox
        .exec(
            &format!("curl -sS http://127.0.0.1:{port}/; echo $?"),
            ExecOptions::new(),
        )
        .await
        .unwrap();
    assert_ne!(res.stdout, "0\n", "{res:?}");
    assert!(
        matches!(listener.accept(), Err(err) if err.kind() == std::io::ErrorKind::WouldBlock),
        "the sandbox reached the host network"
    );
    let res = run_ok(&sandbox, "whoami; hostname; echo $HOME").await;
    assert_eq!(res.stdout, "flue\nflue-virtual\n/home/flue\n");
}

/// Hands out virtual sandboxes and records the instance ids it was asked for.
#[derive(Default)]
struct CountingFactory {
    asked: std::sync::Mutex<Vec<String>>,
}

impl flue_core::sandbox::SandboxFactory for CountingFactory {
    fn create<'a>(
        &'a self,
        instance_id: &'a str,
    ) -> flue_core::BoxFuture<'a, flue_core::Result<Arc<dyn Sandbox>>> {
        self.asked.lock().unwrap().push(instance_id.to_owned());
        Box::pin(async { Ok(Arc::new(VirtualSandbox::new()) as Arc<dyn Sandbox>) })
    }
}

#[tokio::test]
async fn a_harness_gets_one_sandbox_from_its_factory_or_a_virtual_one() {
    use flue_core::{AgentConfig, Harness, sandbox::VIRTUAL_ROOT};

    let factory = Arc::new(CountingFactory::default());
    let harness = Harness::builder(AgentConfig::new())
        .with_instance_id("agent-1")
        .with_sandbox_factory(factory.clone())
        .build()
        .await
        .unwrap();
    let first = harness.session("a").await.unwrap();
    let second = harness.session("b").await.unwrap();
    first.fs().write_file("x.txt", b"shared").await.unwrap();
    assert_eq!(second.fs().read_file("x.txt").await.unwrap(), "shared");
    assert_eq!(factory.asked.lock().unwrap().clone(), vec!["agent-1"]);

    // Without a sandbox or a factory, a harness works in an empty virtual sandbox.
    let harness = Harness::builder(AgentConfig::new()).build().await.unwrap();
    assert_eq!(harness.fs().cwd(), VIRTUAL_ROOT);
    let res = harness
        .shell("pwd; ls | wc -l", ExecOptions::new())
        .await
        .unwrap();
    assert_eq!(res.stdout, "/workspace\n0\n");
}

#[tokio::test]
async fn max_time_caps_a_longer_timeout() {
    let sandbox = VirtualSandbox::builder()
        .with_limits(VirtualLimits::default().with_max_time(Duration::from_millis(300)))
        .build()
        .await
        .unwrap();
    let res = sandbox
        .exec(
            "sleep 30",
            ExecOptions::new().with_timeout(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    assert_eq!(
        (res.exit_code, res.stderr.as_str()),
        (124, "[command timed out after 300 ms]")
    );
}
