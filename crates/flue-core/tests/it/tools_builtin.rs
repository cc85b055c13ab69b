//! Tests: the built-in tool list and the `bash` tool, called through `ToolDefinition::call`.
//! The file tools have their own module, `file_tools`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flue_core::{
    LocalSandbox, Sandbox, ToolContext, ToolError, tool::BUILTIN_TOOL_NAMES, tool::Ownership,
    tool::builtin_tool, tool::builtin_tools,
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

/// A workspace with `notes.txt` (five lines), `sub/inner.txt`, `image.bin` (not UTF-8) and an
/// empty file, and a context whose cwd is the workspace root.
struct Workspace {
    _dir: TempDir,
    ctx: ToolContext,
}

fn workspace() -> Workspace {
    let dir = TempDir::new().unwrap();
    std::fs::write(
        dir.path().join("notes.txt"),
        "one\ntwo\nthree\nfour\nfive\n",
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("sub/inner.txt"), "inner").unwrap();
    std::fs::write(
        dir.path().join("image.bin"),
        [0x89, b'P', b'N', b'G', 0xff, 0xfe],
    )
    .unwrap();
    std::fs::write(dir.path().join("empty.txt"), "").unwrap();
    let sandbox = LocalSandbox::new(dir.path()).unwrap();
    let cwd = sandbox.cwd().to_owned();
    let ctx = ToolContext::new(Arc::new(sandbox))
        .with_cancel(CancellationToken::new())
        .with_instance_id("test-instance")
        .with_cwd(cwd);
    Workspace { _dir: dir, ctx }
}

/// Calls built-in `tool` with `input`: the text it returned, or its error.
async fn call(ctx: &ToolContext, tool: &str, input: Value) -> Result<String, ToolError> {
    let output = builtin_tool(tool).unwrap().call(input, ctx).await?;
    match output {
        Value::String(text) => Ok(text),
        other => panic!("{tool} returned non-text output: {other}"),
    }
}

/// The error kind of a failed call, or the text of a successful one.
fn kind(res: Result<String, ToolError>) -> Result<String, String> {
    res.map_err(|err| err.kind)
}

#[test]
fn the_builtin_tools_are_known_by_name() {
    assert_eq!(
        BUILTIN_TOOL_NAMES,
        &[
            "read_file",
            "list_directory",
            "search_files",
            "glob",
            "create_file",
            "write_file",
            "edit_file",
            "delete_file",
            "restore_file",
            "move_file",
            "apply_patch",
            "bash"
        ]
    );
    let names: Vec<String> = BUILTIN_TOOL_NAMES
        .iter()
        .map(|name| (*name).to_owned())
        .collect();
    let tools = builtin_tools(&names).unwrap();
    let actual: Vec<(String, Ownership, bool, bool)> = tools
        .iter()
        .map(|tool| {
            let meta = tool.meta();
            (
                tool.name().to_owned(),
                meta.ownership,
                meta.read_only,
                meta.destructive,
            )
        })
        .collect();
    assert_eq!(
        actual,
        [
            ("read_file", true, false),
            ("list_directory", true, false),
            ("search_files", true, false),
            ("glob", true, false),
            ("create_file", false, false),
            ("write_file", false, true),
            ("edit_file", false, false),
            ("delete_file", false, true),
            ("restore_file", false, false),
            ("move_file", false, false),
            ("apply_patch", false, true),
            ("bash", false, true),
        ]
        .map(|(name, read_only, destructive)| {
            (name.to_owned(), Ownership::Managed, read_only, destructive)
        })
        .to_vec()
    );
    for tool in &tools {
        assert_eq!(tool.input_schema()["type"], "object");
        assert!(
            tool.description().len() > 100,
            "{} needs a real description",
            tool.name()
        );
    }

    let err = builtin_tool("teleport").unwrap_err();
    assert_eq!(err.kind(), "invalid_config");
    assert!(
        err.to_string().contains("read_file, list_directory, "),
        "{err}"
    );
    let err = builtin_tools(&["bash".to_owned(), "teleport".to_owned()]).unwrap_err();
    assert_eq!(err.kind(), "invalid_config");
}

#[tokio::test]
async fn bash_returns_stdout_then_stderr_then_a_failing_exit_code() {
    let ws = workspace();
    let ctx = &ws.ctx;
    let cases = [
        ("echo hello", "hello\n"),
        ("echo out; echo err >&2; exit 3", "out\nerr\nexit code: 3"),
        ("printf out; printf err >&2", "out\nerr"),
        ("exit 1", "exit code: 1"),
        ("true", "[no output]"),
        ("cat notes.txt | wc -l", "5\n"),
    ];
    for (command, expected) in cases {
        let res = call(ctx, "bash", json!({"command": command})).await;
        assert_eq!(res, Ok(expected.to_owned()), "{command}");
    }
}

#[tokio::test]
async fn bash_runs_in_the_context_cwd() {
    let mut ws = workspace();
    let root = ws.ctx.cwd.clone();
    ws.ctx.cwd = format!("{root}/sub");
    let res = call(&ws.ctx, "bash", json!({"command": "pwd"})).await;
    assert_eq!(res, Ok(format!("{root}/sub\n")));
}

#[tokio::test]
async fn long_bash_output_keeps_its_tail() {
    let ws = workspace();
    let output = call(&ws.ctx, "bash", json!({"command": "seq 1 20000"}))
        .await
        .unwrap();
    let full: String = (1..=20000).map(|n| format!("{n}\n")).collect();
    let tail = &full[full.len() - 30_000..];
    assert_eq!(
        output,
        format!(
            "[output truncated: showing the last 30000 of {} characters]\n{tail}",
            full.len()
        )
    );
}

#[tokio::test]
async fn bash_reports_a_timeout_as_exit_code_124() {
    let ws = workspace();
    let started = Instant::now();
    let res = call(
        &ws.ctx,
        "bash",
        json!({"command": "echo started; sleep 30", "timeout_ms": 200}),
    )
    .await
    .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(
        res,
        "started\n[command timed out after 200 ms]\nexit code: 124"
    );
}

#[tokio::test]
async fn an_aborted_bash_call_is_an_aborted_error() {
    let ws = workspace();
    let trigger = ws.ctx.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        trigger.cancel();
    });
    let started = Instant::now();
    let res = call(&ws.ctx, "bash", json!({"command": "sleep 30"})).await;
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(kind(res), Err("aborted".to_owned()));
}

#[tokio::test]
async fn bash_rejects_invalid_input() {
    let ws = workspace();
    let ctx = &ws.ctx;
    let cases = [
        json!({}),
        json!({"command": 42}),
        json!({"command": "   "}),
        json!({"command": "true", "timeout_ms": 0}),
        json!({"command": "true", "timeout_ms": 600_001}),
        json!({"command": "true", "timeout_ms": "soon"}),
    ];
    for input in cases {
        let res = call(ctx, "bash", input.clone()).await;
        assert_eq!(
            kind(res.clone()),
            Err("invalid_input".to_owned()),
            "{input}: {res:?}"
        );
    }
    assert_eq!(
        call(
            ctx,
            "bash",
            json!({"command": "echo ok", "timeout_ms": 600_000})
        )
        .await,
        Ok("ok\n".to_owned())
    );
}
