//! Tests: `LocalSandbox` path confinement, file operations and command execution.

use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::{Duration, Instant};

use flue_core::{
    ExecOptions, FileStat, FlueError, LocalSandbox, MkdirOptions, RmOptions, Sandbox, ShellResult,
    TIMEOUT_EXIT_CODE,
};
use pretty_assertions::assert_eq;
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

/// A sandbox over a fresh root, and a directory outside it.
///
/// Root: `a.txt` ("hello\n"), `sub/inner.txt`, `inside_link` -> `a.txt`, `out_dir` -> the
/// outside directory, `host_file` -> `/etc/hostname`, `dangling` -> a missing file outside,
/// `dangling_dir` -> a missing directory outside. Outside: `secret.txt`.
struct Fixture {
    root: TempDir,
    outside: TempDir,
    sandbox: LocalSandbox,
}

fn fixture() -> Fixture {
    let root = TempDir::new().unwrap();
    let outside = TempDir::new().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "secret").unwrap();
    std::fs::write(root.path().join("a.txt"), "hello\n").unwrap();
    std::fs::create_dir(root.path().join("sub")).unwrap();
    std::fs::write(root.path().join("sub/inner.txt"), "inner").unwrap();
    symlink("a.txt", root.path().join("inside_link")).unwrap();
    symlink(outside.path(), root.path().join("out_dir")).unwrap();
    symlink("/etc/hostname", root.path().join("host_file")).unwrap();
    symlink(
        outside.path().join("missing.txt"),
        root.path().join("dangling"),
    )
    .unwrap();
    symlink(
        outside.path().join("missing_dir"),
        root.path().join("dangling_dir"),
    )
    .unwrap();
    let sandbox = LocalSandbox::new(root.path()).unwrap();
    Fixture {
        root,
        outside,
        sandbox,
    }
}

/// The kind of an outcome: "ok" or the error's stable kind.
fn kind_of<T>(res: &flue_core::Result<T>) -> String {
    match res {
        Ok(_) => "ok".to_owned(),
        Err(err) => err.kind().to_owned(),
    }
}

/// Runs every operation on `path` and reports `(operation, path, outcome kind)`.
async fn probe(sandbox: &LocalSandbox, path: &str) -> Vec<(String, String, String)> {
    let recursive = MkdirOptions { recursive: true };
    let rm_all = RmOptions {
        recursive: true,
        force: true,
    };
    let outcomes = [
        ("read", kind_of(&sandbox.read_file_bytes(path).await)),
        ("write", kind_of(&sandbox.write_file(path, b"pwned").await)),
        ("stat", kind_of(&sandbox.stat(path).await)),
        ("readdir", kind_of(&sandbox.readdir(path).await)),
        ("mkdir", kind_of(&sandbox.mkdir(path, recursive).await)),
        ("rm", kind_of(&sandbox.rm(path, rm_all).await)),
        (
            "exec_cwd",
            kind_of(
                &sandbox
                    .exec("true", ExecOptions::new().with_cwd(path))
                    .await,
            ),
        ),
    ];
    outcomes
        .into_iter()
        .map(|(op, kind)| (op.to_owned(), path.to_owned(), kind))
        .collect()
}

/// Whether process `pid` has exited (gone, or a zombie waiting to be reaped), waiting up to 5 s.
async fn process_is_gone(pid: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
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
async fn every_operation_refuses_paths_that_escape_the_root() {
    let fx = fixture();
    let outside_abs = fx.outside.path().join("secret.txt").display().to_string();
    let corpus = [
        "../x",
        "a/../../x",
        "sub/../../x",
        "/etc/passwd",
        "/",
        outside_abs.as_str(),
        "out_dir",
        "out_dir/secret.txt",
        "out_dir/new/deeper.txt",
        "host_file",
        "dangling",
        "dangling_dir/x/y",
        "sub/nul\0byte",
    ];
    let mut actual = Vec::new();
    let mut expected = Vec::new();
    for path in corpus {
        let outcomes = probe(&fx.sandbox, path).await;
        expected.extend(
            outcomes
                .iter()
                .map(|(op, path, _)| (op.clone(), path.clone(), "outside_workspace".to_owned())),
        );
        actual.extend(outcomes);
    }
    assert_eq!(actual, expected);

    // Nothing outside was created, changed or removed.
    assert_eq!(names_in(fx.outside.path()), vec!["secret.txt"]);
    assert_eq!(
        std::fs::read_to_string(fx.outside.path().join("secret.txt")).unwrap(),
        "secret"
    );
    // The refused symlinks are still there.
    for link in ["out_dir", "host_file", "dangling", "dangling_dir"] {
        assert!(
            fx.root.path().join(link).symlink_metadata().is_ok(),
            "{link} was removed"
        );
    }
}

#[tokio::test]
async fn the_error_names_the_path_as_given() {
    let fx = fixture();
    let err = fx.sandbox.read_file("../x").await.unwrap_err();
    assert!(
        matches!(&err, FlueError::PathOutsideSandbox { path } if path == "../x"),
        "{err:?}"
    );
    let err = fx.sandbox.read_file("nope/missing.txt").await.unwrap_err();
    assert_eq!(err.kind(), "not_found");
    assert!(err.to_string().contains("nope/missing.txt"), "{err}");
}

#[tokio::test]
async fn paths_inside_the_root_work_in_every_spelling() {
    let fx = fixture();
    let cwd = fx.sandbox.cwd().to_owned();
    assert_eq!(Path::new(&cwd), fx.root.path().canonicalize().unwrap());
    for path in [
        "a.txt".to_owned(),
        "./a.txt".to_owned(),
        "sub/../a.txt".to_owned(),
        format!("{cwd}/a.txt"),
        format!("{cwd}/sub/../a.txt"),
        "inside_link".to_owned(),
    ] {
        assert_eq!(
            fx.sandbox.read_file(&path).await.unwrap(),
            "hello\n",
            "{path}"
        );
    }
    // A symlinked parent that stays inside the root is fine too.
    symlink(fx.root.path().join("sub"), fx.root.path().join("sub_link")).unwrap();
    assert_eq!(
        fx.sandbox.read_file("sub_link/inner.txt").await.unwrap(),
        "inner"
    );
    fx.sandbox
        .write_file("sub_link/new.txt", b"via link")
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(fx.root.path().join("sub/new.txt")).unwrap(),
        "via link"
    );
    // A dangling symlink whose target would be inside may be written through.
    symlink("later.txt", fx.root.path().join("later_link")).unwrap();
    fx.sandbox.write_file("later_link", b"made").await.unwrap();
    assert_eq!(
        std::fs::read_to_string(fx.root.path().join("later.txt")).unwrap(),
        "made"
    );
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
async fn files_round_trip() {
    let fx = fixture();
    let sandbox = &fx.sandbox;
    sandbox.write_file("new/dir/f.txt", b"data").await.unwrap();
    assert_eq!(
        sandbox.read_file_bytes("new/dir/f.txt").await.unwrap(),
        b"data"
    );
    sandbox
        .write_file("new/dir/f.txt", b"more data")
        .await
        .unwrap();
    assert_eq!(
        sandbox.read_file("new/dir/f.txt").await.unwrap(),
        "more data"
    );

    let file = sandbox.stat("new/dir/f.txt").await.unwrap();
    assert!(file.mtime_ms.is_some_and(|mtime| mtime > 0), "{file:?}");
    assert_eq!(
        FileStat {
            mtime_ms: None,
            ..file
        },
        FileStat {
            is_file: true,
            is_dir: false,
            is_symlink: Some(false),
            size: Some(9),
            mtime_ms: None
        }
    );
    let dir = sandbox.stat("new").await.unwrap();
    assert_eq!(
        (dir.is_file, dir.is_dir, dir.is_symlink),
        (false, true, Some(false))
    );
    let link = sandbox.stat("inside_link").await.unwrap();
    assert_eq!(
        (link.is_file, link.is_dir, link.is_symlink),
        (false, false, Some(true))
    );

    assert_eq!(
        sandbox.readdir(".").await.unwrap(),
        vec![
            "a.txt",
            "dangling",
            "dangling_dir",
            "host_file",
            "inside_link",
            "new",
            "out_dir",
            "sub"
        ]
    );
    assert_eq!(sandbox.readdir("new/dir").await.unwrap(), vec!["f.txt"]);
    assert!(sandbox.exists("a.txt").await.unwrap());
    assert!(!sandbox.exists("b.txt").await.unwrap());
}

#[tokio::test]
async fn directories_are_made_and_removed() {
    let fx = fixture();
    let sandbox = &fx.sandbox;
    let plain = MkdirOptions { recursive: false };
    let recursive = MkdirOptions { recursive: true };
    sandbox.mkdir("d1", plain).await.unwrap();
    sandbox.mkdir("d2/x/y", recursive).await.unwrap();
    sandbox.mkdir("d2/x/y", recursive).await.unwrap();
    sandbox.write_file("d2/x/y/f.txt", b"f").await.unwrap();
    assert!(fx.root.path().join("d1").is_dir());
    assert!(fx.root.path().join("d2/x/y/f.txt").is_file());

    let rm = RmOptions {
        recursive: false,
        force: false,
    };
    let rm_all = RmOptions {
        recursive: true,
        force: false,
    };
    let rm_force = RmOptions {
        recursive: false,
        force: true,
    };
    sandbox.rm("d2/x/y/f.txt", rm).await.unwrap();
    assert!(!fx.root.path().join("d2/x/y/f.txt").exists());
    sandbox.rm("d2", rm_all).await.unwrap();
    assert!(!fx.root.path().join("d2").exists());
    sandbox.rm("missing.txt", rm_force).await.unwrap();
    sandbox.rm("missing/deeper.txt", rm_force).await.unwrap();
    // Removing an inside symlink removes the link, not its target.
    sandbox.rm("inside_link", rm).await.unwrap();
    assert!(fx.root.path().join("a.txt").exists());
}

#[tokio::test]
async fn file_errors_have_stable_kinds() {
    let fx = fixture();
    let sandbox = &fx.sandbox;
    let plain = MkdirOptions { recursive: false };
    let recursive = MkdirOptions { recursive: true };
    let rm = RmOptions {
        recursive: false,
        force: false,
    };
    let rm_all = RmOptions {
        recursive: true,
        force: true,
    };
    let cwd = sandbox.cwd().to_owned();
    let actual = vec![
        (
            "read missing",
            kind_of(&sandbox.read_file_bytes("missing.txt").await),
        ),
        (
            "read directory",
            kind_of(&sandbox.read_file_bytes("sub").await),
        ),
        (
            "read through a file",
            kind_of(&sandbox.read_file_bytes("a.txt/x").await),
        ),
        (
            "write onto a directory",
            kind_of(&sandbox.write_file("sub", b"x").await),
        ),
        (
            "write under a file",
            kind_of(&sandbox.write_file("a.txt/x", b"x").await),
        ),
        ("stat missing", kind_of(&sandbox.stat("missing.txt").await)),
        (
            "readdir missing",
            kind_of(&sandbox.readdir("missing").await),
        ),
        ("readdir a file", kind_of(&sandbox.readdir("a.txt").await)),
        (
            "mkdir existing",
            kind_of(&sandbox.mkdir("sub", plain).await),
        ),
        (
            "mkdir without parent",
            kind_of(&sandbox.mkdir("x/y", plain).await),
        ),
        (
            "mkdir -p over a file",
            kind_of(&sandbox.mkdir("a.txt", recursive).await),
        ),
        (
            "mkdir -p under a file",
            kind_of(&sandbox.mkdir("a.txt/x/y", recursive).await),
        ),
        ("rm missing", kind_of(&sandbox.rm("missing.txt", rm).await)),
        (
            "rm directory without recursive",
            kind_of(&sandbox.rm("sub", rm).await),
        ),
        ("rm root", kind_of(&sandbox.rm(".", rm_all).await)),
        (
            "rm root by absolute path",
            kind_of(&sandbox.rm(&cwd, rm_all).await),
        ),
        (
            "rm root via ..",
            kind_of(&sandbox.rm("sub/..", rm_all).await),
        ),
        (
            "exec in missing dir",
            kind_of(
                &sandbox
                    .exec("true", ExecOptions::new().with_cwd("nope"))
                    .await,
            ),
        ),
        (
            "exec in a file",
            kind_of(
                &sandbox
                    .exec("true", ExecOptions::new().with_cwd("a.txt"))
                    .await,
            ),
        ),
    ];
    let expected = vec![
        ("read missing", "not_found"),
        ("read directory", "is_directory"),
        ("read through a file", "not_a_directory"),
        ("write onto a directory", "is_directory"),
        ("write under a file", "not_a_directory"),
        ("stat missing", "not_found"),
        ("readdir missing", "not_found"),
        ("readdir a file", "not_a_directory"),
        ("mkdir existing", "already_exists"),
        ("mkdir without parent", "not_found"),
        ("mkdir -p over a file", "already_exists"),
        ("mkdir -p under a file", "not_a_directory"),
        ("rm missing", "not_found"),
        ("rm directory without recursive", "is_directory"),
        ("rm root", "permission_denied"),
        ("rm root by absolute path", "permission_denied"),
        ("rm root via ..", "permission_denied"),
        ("exec in missing dir", "not_found"),
        ("exec in a file", "not_a_directory"),
    ];
    let expected: Vec<(&str, String)> = expected
        .into_iter()
        .map(|(case, kind)| (case, kind.to_owned()))
        .collect();
    assert_eq!(actual, expected);
    assert!(fx.root.path().join("a.txt").exists());
}

#[tokio::test]
async fn exec_reports_stdout_stderr_and_exit_code() {
    let fx = fixture();
    let res = fx
        .sandbox
        .exec("echo out; echo err >&2; exit 3", ExecOptions::new())
        .await
        .unwrap();
    assert_eq!(
        res,
        ShellResult {
            stdout: "out\n".into(),
            stderr: "err\n".into(),
            exit_code: 3
        }
    );
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
async fn exec_runs_in_the_root_or_the_given_cwd() {
    let fx = fixture();
    let root = fx.root.path().canonicalize().unwrap();
    let res = fx.sandbox.exec("pwd", ExecOptions::new()).await.unwrap();
    assert_eq!(res.stdout, format!("{}\n", root.display()));
    let res = fx
        .sandbox
        .exec("pwd; cat inner.txt", ExecOptions::new().with_cwd("sub"))
        .await
        .unwrap();
    assert_eq!(res.stdout, format!("{}\ninner", root.join("sub").display()));
}

#[tokio::test]
async fn exec_sees_only_allow_listed_host_variables() {
    let fx = fixture();
    // Variables bash itself sets in the environment of the commands it runs.
    let from_bash = ["PWD", "OLDPWD", "SHLVL", "_"];
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
