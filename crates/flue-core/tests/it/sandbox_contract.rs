//! The sandbox contract: one suite that every `Sandbox` implementation passes.
//!
//! A backend module provides an async `backend()` returning a [`Backend`] and instantiates
//! the suite with `sandbox_contract!(backend)`. The suite covers path confinement (the
//! escape corpus), the file operations and their error kinds, `exec` (output, exit code,
//! cwd, env, timeout, abort), and what sessions and harnesses do on top of a sandbox
//! (`session.shell` records, `harness.shell` and `fs` do not), and the protected paths (`.flue`,
//! `.env*`: refused by every operation and every file tool, hidden from listings, glob and
//! search). flue-connectors includes this
//! file too, so the isolated and Daytona sandboxes run the same suite.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flue_core::{
    AgentConfig, ExecOptions, FlueError, Harness, Record, Sandbox, ToolContext,
    sandbox::ShellResult,
    sandbox::{FileStat, MkdirOptions, RmOptions, TIMEOUT_EXIT_CODE},
    tool::builtin_tool,
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// What the outside directory holds: sorted names, and the text of `secret.txt`.
pub type OutsideState = (Vec<String>, String);

/// A boxed future of the outside state.
pub type OutsideFuture = Pin<Box<dyn Future<Output = OutsideState> + Send>>;

/// One implementation under test.
pub struct Backend {
    /// A sandbox whose root is empty.
    pub sandbox: Arc<dyn Sandbox>,
    /// An absolute path, as commands in the sandbox spell it, of a directory outside the
    /// root that holds `secret.txt` ("secret") and nothing else.
    pub outside: String,
    /// Reads the outside directory the way the backend's owner can (the host, or the
    /// backend's own shell).
    pub outside_state: Box<dyn Fn() -> OutsideFuture + Send + Sync>,
    /// Whatever must live as long as the sandbox (temporary directories, servers).
    pub _guard: Box<dyn Any + Send + Sync>,
}

/// Instantiates the contract suite for `$backend`, an async function returning a `Backend`.
macro_rules! sandbox_contract {
    ($backend:path) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn every_operation_refuses_paths_that_escape_the_root() {
            crate::sandbox_contract::escape_corpus($backend().await).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn the_store_and_secrets_files_are_refused_and_hidden() {
            crate::sandbox_contract::protected_paths($backend().await).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn the_error_names_the_path_as_given() {
            crate::sandbox_contract::error_names_the_path($backend().await).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn paths_inside_the_root_work_in_every_spelling() {
            crate::sandbox_contract::inside_paths_work($backend().await).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn files_round_trip() {
            crate::sandbox_contract::files_round_trip($backend().await).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn directories_are_made_and_removed() {
            crate::sandbox_contract::directories($backend().await).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn file_errors_have_stable_kinds() {
            crate::sandbox_contract::file_error_kinds($backend().await).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn exec_reports_stdout_stderr_and_exit_code() {
            crate::sandbox_contract::exec_output($backend().await).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn exec_runs_in_the_root_or_the_given_cwd_with_the_given_env() {
            crate::sandbox_contract::exec_cwd_and_env($backend().await).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn a_timeout_is_exit_code_124_with_a_note() {
            crate::sandbox_contract::exec_timeout($backend().await).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn an_abort_stops_the_command() {
            crate::sandbox_contract::exec_abort($backend().await).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn session_shell_records_and_harness_shell_does_not() {
            crate::sandbox_contract::session_shell($backend().await).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn the_bash_tool_keeps_the_tail_of_long_output() {
            crate::sandbox_contract::bash_tool_output($backend().await).await;
        }
    };
}
pub(crate) use sandbox_contract;

/// The kind of an outcome: "ok" or the error's stable kind.
pub fn kind_of<T>(res: &flue_core::Result<T>) -> String {
    match res {
        Ok(_) => "ok".to_owned(),
        Err(err) => err.kind().to_owned(),
    }
}

/// Single-quotes `text` for bash.
pub fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// Runs `command` and asserts it succeeded.
pub async fn run_ok(sandbox: &dyn Sandbox, command: &str) -> ShellResult {
    let res = sandbox.exec(command, ExecOptions::new()).await.unwrap();
    assert_eq!(res.exit_code, 0, "{command}: {res:?}");
    res
}

/// The standard layout, made through the sandbox itself.
///
/// Root: `a.txt` ("hello\n"), `sub/inner.txt` ("inner"), `inside_link` -> `a.txt`, `out_dir`
/// -> the outside directory, `host_file` -> `/etc/hostname`, `dangling` -> a missing file
/// outside, `dangling_dir` -> a missing directory outside.
pub async fn layout(backend: &Backend) {
    let sandbox = backend.sandbox.as_ref();
    sandbox.write_file("a.txt", b"hello\n").await.unwrap();
    sandbox.write_file("sub/inner.txt", b"inner").await.unwrap();
    let outside = &backend.outside;
    let command = format!(
        "ln -s a.txt inside_link && ln -s {out} out_dir && ln -s /etc/hostname host_file && \
         ln -s {missing} dangling && ln -s {missing_dir} dangling_dir",
        out = quote(outside),
        missing = quote(&format!("{outside}/missing.txt")),
        missing_dir = quote(&format!("{outside}/missing_dir")),
    );
    run_ok(sandbox, &command).await;
}

/// Runs every operation on `path` and reports `(operation, path, outcome kind)`.
async fn probe(sandbox: &dyn Sandbox, path: &str) -> Vec<(String, String, String)> {
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

pub async fn escape_corpus(backend: Backend) {
    layout(&backend).await;
    let sandbox = backend.sandbox.as_ref();
    let outside_abs = format!("{}/secret.txt", backend.outside);
    let root_parent = format!("{}/..", sandbox.cwd());
    let corpus = [
        "../x",
        "a/../../x",
        "sub/../../x",
        "/etc/passwd",
        "/",
        root_parent.as_str(),
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
        let outcomes = probe(sandbox, path).await;
        expected.extend(
            outcomes
                .iter()
                .map(|(op, path, _)| (op.clone(), path.clone(), "outside_workspace".to_owned())),
        );
        actual.extend(outcomes);
    }
    assert_eq!(actual, expected);

    // Nothing outside was created, changed or removed.
    assert_eq!(
        (backend.outside_state)().await,
        (vec!["secret.txt".to_owned()], "secret".to_owned())
    );
    // The refused symlinks are still there.
    let names = sandbox.readdir(".").await.unwrap();
    for link in ["out_dir", "host_file", "dangling", "dangling_dir"] {
        assert!(names.iter().any(|name| name == link), "{link} was removed");
    }
}

/// The protected layout, made by a command: a store, secrets at the root and deeper, and
/// symlinks leading to them.
async fn protected_layout(sandbox: &dyn Sandbox) {
    run_ok(
        sandbox,
        "mkdir -p .flue/trash sub && echo db > .flue/flue.db && echo KEY=sk-live-123 > .env && \
         echo KEY=sk-local-456 > .env.local && echo KEY=sk-sub-789 > sub/.env && \
         echo visible > sub/notes.txt && ln -s .env env_link && ln -s .flue flue_link && \
         ln -s sub/.env sub_env_link",
    )
    .await;
}

pub async fn protected_paths(backend: Backend) {
    let sandbox = backend.sandbox.as_ref();
    protected_layout(sandbox).await;
    let cwd = sandbox.cwd().to_owned();
    let absolute = format!("{cwd}/.env");
    let corpus = [
        ".env",
        ".env.local",
        ".env.new",
        ".flue",
        ".flue/flue.db",
        ".flue/trash",
        ".flue/new.txt",
        "sub/.env",
        "./sub/../.env",
        absolute.as_str(),
        "env_link",
        "flue_link",
        "flue_link/flue.db",
        "sub_env_link",
    ];
    let mut actual = Vec::new();
    let mut expected = Vec::new();
    for path in corpus {
        let outcomes = probe(sandbox, path).await;
        expected.extend(
            outcomes
                .iter()
                .map(|(op, path, _)| (op.clone(), path.clone(), "protected_path".to_owned())),
        );
        actual.extend(outcomes);
    }
    assert_eq!(actual, expected);
    let err = sandbox.read_file(".env").await.unwrap_err();
    assert!(
        matches!(&err, FlueError::ProtectedPath { path, .. } if path == ".env"),
        "{err:?}"
    );
    assert!(err.to_string().contains("secrets"), "{err}");

    // Listings leave them out; the links stay (they are the agent's own files).
    assert_eq!(
        sandbox.readdir(".").await.unwrap(),
        vec!["env_link", "flue_link", "sub", "sub_env_link"]
    );
    assert_eq!(sandbox.readdir("sub").await.unwrap(), vec!["notes.txt"]);

    // The file tools refuse them with a tool error naming the path, and never show them.
    let ctx = ToolContext::new(Arc::clone(&backend.sandbox))
        .with_cancel(CancellationToken::new())
        .with_instance_id("contract")
        .with_session("default")
        .with_cwd(backend.sandbox.cwd());
    let tool_error = |tool: &'static str, input: Value| {
        let ctx = ctx.clone();
        async move {
            let err = builtin_tool(tool)
                .unwrap()
                .call(input.clone(), &ctx)
                .await
                .unwrap_err();
            (tool, err.kind)
        }
    };
    let refusals = vec![
        tool_error("read_file", json!({"path": ".env"})).await,
        tool_error("read_file", json!({"path": "env_link"})).await,
        tool_error("delete_file", json!({"path": ".flue/flue.db"})).await,
        tool_error(
            "move_file",
            json!({"source": ".flue/flue.db", "destination": "db.bak"}),
        )
        .await,
        tool_error(
            "move_file",
            json!({"source": "sub/notes.txt", "destination": ".env"}),
        )
        .await,
        tool_error(
            "create_file",
            json!({"path": ".flue/x.txt", "content": "x"}),
        )
        .await,
        tool_error("list_directory", json!({"path": ".flue"})).await,
    ];
    assert_eq!(
        refusals,
        vec![
            ("read_file", "protected_path".to_owned()),
            ("read_file", "protected_path".to_owned()),
            ("delete_file", "protected_path".to_owned()),
            ("move_file", "protected_path".to_owned()),
            ("move_file", "protected_path".to_owned()),
            ("create_file", "protected_path".to_owned()),
            ("list_directory", "protected_path".to_owned()),
        ]
    );
    let found = builtin_tool("search_files")
        .unwrap()
        .call(json!({"pattern": "sk-"}), &ctx)
        .await
        .unwrap();
    assert_eq!(found["data"]["matches"], json!([]), "{found}");
    let globbed = builtin_tool("glob")
        .unwrap()
        .call(json!({"pattern": "**/.env*"}), &ctx)
        .await
        .unwrap();
    assert_eq!(globbed["data"]["matches"], json!([]), "{globbed}");
    // A directory holding a protected entry is not removed.
    let rm_all = RmOptions {
        recursive: true,
        force: false,
    };
    assert_eq!(kind_of(&sandbox.rm("sub", rm_all).await), "protected_path");
    // Nothing was changed: the file under `sub` is still there and was not moved.
    assert_eq!(
        sandbox.read_file("sub/notes.txt").await.unwrap(),
        "visible\n"
    );
}

pub async fn error_names_the_path(backend: Backend) {
    let sandbox = backend.sandbox.as_ref();
    let err = sandbox.read_file("../x").await.unwrap_err();
    assert!(
        matches!(&err, FlueError::PathOutsideSandbox { path } if path == "../x"),
        "{err:?}"
    );
    let err = sandbox.read_file("nope/missing.txt").await.unwrap_err();
    assert_eq!(err.kind(), "not_found");
    assert!(err.to_string().contains("nope/missing.txt"), "{err}");
}

pub async fn inside_paths_work(backend: Backend) {
    layout(&backend).await;
    let sandbox = backend.sandbox.as_ref();
    let cwd = sandbox.cwd().to_owned();
    for path in [
        "a.txt".to_owned(),
        "./a.txt".to_owned(),
        "sub/../a.txt".to_owned(),
        format!("{cwd}/a.txt"),
        format!("{cwd}/sub/../a.txt"),
        "inside_link".to_owned(),
    ] {
        assert_eq!(sandbox.read_file(&path).await.unwrap(), "hello\n", "{path}");
    }
    // A symlinked parent that stays inside the root is fine too.
    run_ok(sandbox, "ln -s sub sub_link").await;
    assert_eq!(
        sandbox.read_file("sub_link/inner.txt").await.unwrap(),
        "inner"
    );
    sandbox
        .write_file("sub_link/new.txt", b"via link")
        .await
        .unwrap();
    assert_eq!(sandbox.read_file("sub/new.txt").await.unwrap(), "via link");
    // A dangling symlink whose target would be inside may be written through.
    run_ok(sandbox, "ln -s later.txt later_link").await;
    sandbox.write_file("later_link", b"made").await.unwrap();
    assert_eq!(sandbox.read_file("later.txt").await.unwrap(), "made");
    // Commands see what the file operations wrote.
    let res = run_ok(sandbox, "cat sub/new.txt later.txt").await;
    assert_eq!(res.stdout, "via linkmade");
}

pub async fn files_round_trip(backend: Backend) {
    layout(&backend).await;
    let sandbox = backend.sandbox.as_ref();
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
    let binary = [0u8, 0xff, 0xfe, b'\n', 7];
    sandbox.write_file("bin.dat", &binary).await.unwrap();
    assert_eq!(sandbox.read_file_bytes("bin.dat").await.unwrap(), binary);
    assert_eq!(
        sandbox.read_file("bin.dat").await.unwrap_err().kind(),
        "invalid_utf8"
    );

    let file = sandbox.stat("new/dir/f.txt").await.unwrap();
    assert!(file.mtime_ms.is_none_or(|mtime| mtime > 0), "{file:?}");
    assert_eq!(
        FileStat {
            mtime_ms: None,
            is_symlink: None,
            ..file.clone()
        },
        FileStat {
            is_file: true,
            is_dir: false,
            is_symlink: None,
            size: Some(9),
            mtime_ms: None
        }
    );
    assert_ne!(file.is_symlink, Some(true));
    let dir = sandbox.stat("new").await.unwrap();
    assert_eq!((dir.is_file, dir.is_dir), (false, true));
    let link = sandbox.stat("inside_link").await.unwrap();
    if let Some(is_symlink) = link.is_symlink {
        assert!(is_symlink, "{link:?}");
    }

    assert_eq!(
        sandbox.readdir(".").await.unwrap(),
        vec![
            "a.txt",
            "bin.dat",
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

pub async fn directories(backend: Backend) {
    layout(&backend).await;
    let sandbox = backend.sandbox.as_ref();
    let plain = MkdirOptions { recursive: false };
    let recursive = MkdirOptions { recursive: true };
    sandbox.mkdir("d1", plain).await.unwrap();
    sandbox.mkdir("d2/x/y", recursive).await.unwrap();
    sandbox.mkdir("d2/x/y", recursive).await.unwrap();
    sandbox.write_file("d2/x/y/f.txt", b"f").await.unwrap();
    assert!(sandbox.stat("d1").await.unwrap().is_dir);
    assert!(sandbox.stat("d2/x/y/f.txt").await.unwrap().is_file);

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
    assert!(!sandbox.exists("d2/x/y/f.txt").await.unwrap());
    sandbox.rm("d2", rm_all).await.unwrap();
    assert!(!sandbox.exists("d2").await.unwrap());
    sandbox.rm("missing.txt", rm_force).await.unwrap();
    sandbox.rm("missing/deeper.txt", rm_force).await.unwrap();
    // Removing an inside symlink removes the link, not its target.
    sandbox.rm("inside_link", rm).await.unwrap();
    assert!(sandbox.exists("a.txt").await.unwrap());
    assert!(!sandbox.exists("inside_link").await.unwrap());
}

pub async fn file_error_kinds(backend: Backend) {
    layout(&backend).await;
    let sandbox = backend.sandbox.as_ref();
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
    let exec_in = |dir: &'static str| sandbox.exec("true", ExecOptions::new().with_cwd(dir));
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
        ("exec in missing dir", kind_of(&exec_in("nope").await)),
        ("exec in a file", kind_of(&exec_in("a.txt").await)),
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
    assert!(sandbox.exists("a.txt").await.unwrap());
}

pub async fn exec_output(backend: Backend) {
    let sandbox = backend.sandbox.as_ref();
    let res = sandbox
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
    let res = sandbox
        .exec(
            "printf 'it'\"'\"'s $HOME' | wc -c; false || echo fell back",
            ExecOptions::new(),
        )
        .await
        .unwrap();
    assert_eq!(
        (
            res.stdout.split_whitespace().collect::<Vec<_>>(),
            res.exit_code
        ),
        (vec!["10", "fell", "back"], 0)
    );
    let res = sandbox
        .exec(
            "cat <<'EOF' | grep -c x\nx1\ny\nx2\nEOF",
            ExecOptions::new(),
        )
        .await
        .unwrap();
    assert_eq!((res.stdout.as_str(), res.exit_code), ("2\n", 0));
}

pub async fn exec_cwd_and_env(backend: Backend) {
    layout(&backend).await;
    let sandbox = backend.sandbox.as_ref();
    let root = sandbox.cwd().to_owned();
    let res = run_ok(sandbox, "pwd").await;
    assert_eq!(res.stdout, format!("{root}\n"));
    let res = sandbox
        .exec("pwd; cat inner.txt", ExecOptions::new().with_cwd("sub"))
        .await
        .unwrap();
    assert_eq!(res.stdout, format!("{root}/sub\ninner"));
    let res = sandbox
        .exec(
            "pwd",
            ExecOptions::new().with_cwd(format!("{root}/sub/../sub")),
        )
        .await
        .unwrap();
    assert_eq!(res.stdout, format!("{root}/sub\n"));

    let options = ExecOptions::new()
        .with_env("FLUE_TEST_GIVEN", "it's given")
        .with_env("FLUE_OTHER", "2");
    let res = sandbox
        .exec("echo \"$FLUE_TEST_GIVEN/$FLUE_OTHER\"", options)
        .await
        .unwrap();
    assert_eq!(res.stdout, "it's given/2\n");
    // Given variables do not stick to the sandbox, nor does `cd` or a shell variable.
    let res = run_ok(sandbox, "cd sub; X=1").await;
    assert_eq!(res.stdout, "");
    let res = run_ok(sandbox, "echo \"[$FLUE_TEST_GIVEN][$X]\"; pwd").await;
    assert_eq!(res.stdout, format!("[][]\n{root}\n"));
}

pub async fn exec_timeout(backend: Backend) {
    let sandbox = backend.sandbox.as_ref();
    let started = Instant::now();
    let options = ExecOptions::new().with_timeout(Duration::from_millis(300));
    let res = sandbox.exec("sleep 30", options).await.unwrap();
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
    // The sandbox is still usable afterwards.
    assert_eq!(run_ok(sandbox, "echo after").await.stdout, "after\n");
}

pub async fn exec_abort(backend: Backend) {
    let sandbox = backend.sandbox.as_ref();
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        trigger.cancel();
    });
    let started = Instant::now();
    let res = sandbox
        .exec("sleep 30", ExecOptions::new().with_cancel(cancel))
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
    assert!(matches!(res, Err(FlueError::Aborted)), "{res:?}");

    // A token that has already fired runs nothing.
    let fired = CancellationToken::new();
    fired.cancel();
    let res = sandbox
        .exec("touch ran.txt", ExecOptions::new().with_cancel(fired))
        .await;
    assert!(matches!(res, Err(FlueError::Aborted)), "{res:?}");
    assert!(!sandbox.exists("ran.txt").await.unwrap());
    assert_eq!(run_ok(sandbox, "echo after").await.stdout, "after\n");
}

pub async fn session_shell(backend: Backend) {
    let harness = Harness::builder(AgentConfig::new())
        .with_sandbox(Arc::clone(&backend.sandbox))
        .build()
        .await
        .unwrap();
    let session = harness.session("default").await.unwrap();
    let other = harness.session("other").await.unwrap();
    let result = session
        .shell(
            "echo \"$TOKEN\" | wc -c; echo shared > shared.txt; exit 3",
            ExecOptions::new().with_env("TOKEN", "s3cret"),
        )
        .await
        .unwrap();
    assert_eq!((result.stdout.trim(), result.exit_code), ("7", 3));
    let timed_out = session
        .shell(
            "sleep 30",
            ExecOptions::new().with_timeout(Duration::from_millis(200)),
        )
        .await
        .unwrap();
    assert_eq!(timed_out.exit_code, TIMEOUT_EXIT_CODE);

    let records = session.records().await;
    let exchanges: Vec<_> = records
        .iter()
        .map(|record| match record {
            Record::Shell(exchange) => (
                exchange.command.clone(),
                exchange.env_keys.clone(),
                exchange.exit_code,
                exchange.stderr.contains("command timed out after 200 ms"),
            ),
            other => panic!("expected shell records, got {other:?}"),
        })
        .collect();
    assert_eq!(
        exchanges,
        vec![
            (
                "echo \"$TOKEN\" | wc -c; echo shared > shared.txt; exit 3".to_owned(),
                vec!["TOKEN".to_owned()],
                3,
                false
            ),
            ("sleep 30".to_owned(), vec![], TIMEOUT_EXIT_CODE, true),
        ]
    );
    let stored = serde_json::to_string(&records).unwrap();
    assert!(!stored.contains("s3cret"), "{stored}");

    // Sessions of one harness share the sandbox; harness.shell and fs record nothing.
    assert_eq!(
        other.fs().read_file("shared.txt").await.unwrap(),
        "shared\n"
    );
    let res = harness
        .shell("cat shared.txt", ExecOptions::new())
        .await
        .unwrap();
    assert_eq!(res.stdout, "shared\n");
    harness.fs().write_file("quiet.txt", b"q").await.unwrap();
    session.fs().write_file("quiet2.txt", b"q").await.unwrap();
    assert_eq!(session.records().await.len(), 2);
    assert_eq!(other.records().await.len(), 0);
}

pub async fn bash_tool_output(backend: Backend) {
    let ctx = ToolContext::new(Arc::clone(&backend.sandbox))
        .with_cancel(CancellationToken::new())
        .with_instance_id("contract")
        .with_session("default")
        .with_cwd(backend.sandbox.cwd());
    let bash = builtin_tool("bash").unwrap();
    let output = bash
        .call(json!({"command": "seq 1 20000; echo done >&2"}), &ctx)
        .await
        .unwrap();
    let Value::String(text) = output else {
        panic!("bash returned {output}")
    };
    let first_line = text.lines().next().unwrap();
    assert!(
        first_line.starts_with("[output truncated: showing the last 30000 of "),
        "{first_line}"
    );
    assert!(
        text.ends_with("19999\n20000\ndone\n"),
        "{}",
        &text[text.len() - 40..]
    );
    let output = bash
        .call(json!({"command": "sleep 30", "timeout_ms": 200}), &ctx)
        .await
        .unwrap();
    assert_eq!(
        output,
        Value::String("[command timed out after 200 ms]\nexit code: 124".into())
    );
}
