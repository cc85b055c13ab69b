//! The path race: file tools run while a workspace directory is swapped, in a tight loop, for a
//! symlink to a host directory outside the root or to `/proc/self` (flue's own environment).
//!
//! A sandbox that checks a path and then uses it loses this race; one that resolves every
//! path from an open handle of the root never does. [`hammer`] runs thousands of file-tool and
//! sandbox calls on paths below [`RACE_DIR`] from several tasks at once and counts every
//! success that could only come from outside the root. The racer is the caller's: a host
//! thread for the local sandbox, the agent's own `bash` for the isolated one
//! ([`racer_script`]). flue-connectors includes this file too.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flue_core::{
    MemoryStore, Sandbox, ToolContext, builtin_tool,
    sandbox::{MkdirOptions, RmOptions},
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// The directory the racer swaps.
pub const RACE_DIR: &str = "d";

/// What `secret.txt` holds in the directory outside the root.
pub const OUTSIDE_SECRET: &str = "outside-secret";

/// What `d/f.txt` holds inside the root.
pub const INSIDE_TEXT: &str = "inside";

/// What the file-tool side of a race did.
#[derive(Debug, Default)]
pub struct RaceReport {
    /// Calls made.
    pub calls: usize,
    /// Calls that succeeded.
    pub succeeded: usize,
    /// Each success that could only have reached outside the root.
    pub escapes: Vec<String>,
}

/// Makes `d/f.txt` through the sandbox.
pub async fn prepare(sandbox: &dyn Sandbox) {
    sandbox
        .write_file(&format!("{RACE_DIR}/f.txt"), INSIDE_TEXT.as_bytes())
        .await
        .unwrap();
}

/// A bash loop for `seconds` that swaps `d` for a symlink to `outside`, then to `/proc/self`,
/// and back; it prints how many rounds it made.
#[allow(dead_code, reason = "flue-connectors' isolated sandbox races with it")]
pub fn racer_script(outside: &str, seconds: u64) -> String {
    format!(
        r#"n=0; end=$((SECONDS+{seconds}))
while [ $SECONDS -lt $end ]; do
  mv -T d d_saved 2>/dev/null
  ln -sT '{outside}' d 2>/dev/null; rm -f d 2>/dev/null
  ln -sT /proc/self d 2>/dev/null; rm -f d 2>/dev/null
  mv -T d_saved d 2>/dev/null || rm -rf d_saved
  n=$((n+1))
done
[ -d d ] || mkdir -p d
echo $n"#
    )
}

/// Runs file-tool and sandbox calls on paths below `d` from `workers` tasks until `duration`
/// has passed, and reports what they reached.
pub async fn hammer(sandbox: Arc<dyn Sandbox>, workers: usize, duration: Duration) -> RaceReport {
    let deadline = Instant::now() + duration;
    let mut tasks = Vec::new();
    for worker in 0..workers {
        let ctx = ToolContext::new(Arc::clone(&sandbox))
            .with_audit(Arc::new(MemoryStore::new()))
            .with_cancel(CancellationToken::new())
            .with_instance_id("race")
            .with_session("default")
            .with_cwd(sandbox.cwd());
        tasks.push(tokio::spawn(async move {
            let mut report = RaceReport::default();
            let mut round = 0usize;
            while Instant::now() < deadline {
                round += 1;
                for (what, outcome) in one_round(&ctx, worker, round).await {
                    report.calls += 1;
                    if let Ok(value) = outcome {
                        report.succeeded += 1;
                        if let Some(why) = escaped(what, &value) {
                            report.escapes.push(format!("{what}: {why}: {value}"));
                        }
                    }
                }
            }
            report
        }));
    }
    let mut total = RaceReport::default();
    for task in tasks {
        let report = task.await.unwrap();
        total.calls += report.calls;
        total.succeeded += report.succeeded;
        total.escapes.extend(report.escapes);
    }
    total
}

type Outcome = Result<Value, String>;

/// One round of calls: every tool that takes a path, and the sandbox operations beneath them.
async fn one_round(ctx: &ToolContext, worker: usize, round: usize) -> Vec<(&'static str, Outcome)> {
    let tool = |name: &'static str, input: Value| async move {
        builtin_tool(name)
            .unwrap()
            .call(input, ctx)
            .await
            .map_err(|err| err.kind)
    };
    let own = format!("{RACE_DIR}/w{worker}-{round}.txt");
    let moved = format!("{RACE_DIR}/m{worker}-{round}.txt");
    let sub = format!("{RACE_DIR}/s{worker}-{round}/deeper");
    let sandbox = ctx.sandbox.as_ref();
    let plain = |res: flue_core::Result<Value>| res.map_err(|err| err.kind().to_owned());
    vec![
        (
            "read inside",
            tool("read_file", json!({"path": "d/f.txt"})).await,
        ),
        (
            "read outside",
            tool("read_file", json!({"path": "d/secret.txt"})).await,
        ),
        (
            "read environ",
            tool("read_file", json!({"path": "d/environ"})).await,
        ),
        (
            "create",
            tool("create_file", json!({"path": own, "content": "mine"})).await,
        ),
        (
            "list",
            tool("list_directory", json!({"path": RACE_DIR})).await,
        ),
        (
            "move",
            tool("move_file", json!({"source": own, "destination": moved})).await,
        ),
        ("delete", tool("delete_file", json!({"path": moved})).await),
        (
            "stat outside",
            plain(
                sandbox
                    .stat("d/secret.txt")
                    .await
                    .map(|stat| json!(stat.size)),
            ),
        ),
        (
            "write outside",
            plain(
                sandbox
                    .write_file("d/planted.txt", b"planted")
                    .await
                    .map(|()| json!(null)),
            ),
        ),
        (
            "mkdir",
            plain(
                sandbox
                    .mkdir(&sub, MkdirOptions { recursive: true })
                    .await
                    .map(|()| json!(null)),
            ),
        ),
        (
            "rm",
            plain(
                sandbox
                    .rm(
                        &format!("{RACE_DIR}/s{worker}-{round}"),
                        RmOptions {
                            recursive: true,
                            force: true,
                        },
                    )
                    .await
                    .map(|()| json!(null)),
            ),
        ),
    ]
}

/// Why a successful call's result proves it reached outside the root, if it does.
fn escaped(what: &str, value: &Value) -> Option<&'static str> {
    let text = value.to_string();
    if text.contains(OUTSIDE_SECRET) {
        return Some("outside content");
    }
    if text.contains("PATH=") {
        return Some("process environment");
    }
    match what {
        // Neither exists inside the root: any success came from elsewhere.
        "read outside" | "read environ" | "stat outside" => Some("read a file that is not inside"),
        "list" => ["secret.txt", "environ", "cmdline", "status"]
            .iter()
            .any(|name| text.contains(&format!("\"{name}\"")))
            .then_some("listed a directory that is not inside"),
        _ => None,
    }
}
