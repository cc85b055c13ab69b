//! The path race: file tools run while a workspace directory is swapped, in a tight loop, for a
//! symlink to a host directory outside the root or to `/proc/self` (flue's own environment).
//!
//! A sandbox that checks a path and then uses it loses this race; one that resolves every
//! path from an open handle of the root never does. [`hammer`] runs thousands of file-tool and
//! sandbox calls on paths below [`RACE_DIR`] from several tasks at once and counts every
//! success that could only come from outside the root. The racer is the caller's: a host
//! thread for the local sandbox, the agent's own `bash` for the isolated one
//! ([`racer_script`]). A race runs until it has done enough ([`RaceGoal`]), not for a fixed
//! time, so a busy machine makes it slower, never weaker. flue-connectors includes this file
//! too.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use flue_core::{
    MemoryStore, Sandbox, ToolContext,
    sandbox::{MkdirOptions, RmOptions},
    tool::builtin_tool,
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

/// The file the racer of [`racer_script`] reports its rounds in, and the one that stops it;
/// both in the root, outside [`RACE_DIR`].
pub const RACER_ROUNDS: &str = "racer-rounds";
#[allow(dead_code, reason = "flue-connectors' isolated sandbox races with it")]
pub const RACER_STOP: &str = "racer-stop";

/// A bash loop that swaps `d` for a symlink to `outside`, then to `/proc/self`, and back,
/// writing its round count to [`RACER_ROUNDS`] every ten rounds, until [`RACER_STOP`] exists
/// (or, as a last resort, ten minutes have passed); it prints how many rounds it made.
#[allow(dead_code, reason = "flue-connectors' isolated sandbox races with it")]
pub fn racer_script(outside: &str) -> String {
    format!(
        r#"n=0; end=$((SECONDS+600))
while [ ! -e {RACER_STOP} ] && [ $SECONDS -lt $end ]; do
  mv -T d d_saved 2>/dev/null
  ln -sT '{outside}' d 2>/dev/null; rm -f d 2>/dev/null
  ln -sT /proc/self d 2>/dev/null; rm -f d 2>/dev/null
  mv -T d_saved d 2>/dev/null || rm -rf d_saved
  n=$((n+1))
  [ $((n % 10)) -ne 0 ] || {{ echo $n > {RACER_ROUNDS}.new && mv {RACER_ROUNDS}.new {RACER_ROUNDS}; }}
done
[ -d d ] || mkdir -p d
echo $n"#
    )
}

/// How much a race must do before it ends: calls made and succeeded, and whatever else
/// `racer_done` checks (the racer's own progress).
pub struct RaceGoal {
    pub calls: usize,
    pub succeeded: usize,
    pub racer_done: Box<dyn Fn() -> bool + Send + Sync>,
}

/// The last resort of a race that cannot reach its goal (the test then fails on the counts).
const RACE_DEADLINE: Duration = Duration::from_secs(300);

/// Runs file-tool and sandbox calls on paths below `d` from `workers` tasks until `goal` is
/// reached, and reports what they reached.
pub async fn hammer(sandbox: Arc<dyn Sandbox>, workers: usize, goal: RaceGoal) -> RaceReport {
    let deadline = Instant::now() + RACE_DEADLINE;
    let calls = Arc::new(AtomicUsize::new(0));
    let succeeded = Arc::new(AtomicUsize::new(0));
    let goal = Arc::new(goal);
    let mut tasks = Vec::new();
    for worker in 0..workers {
        let ctx = ToolContext::new(Arc::clone(&sandbox))
            .with_audit(Arc::new(MemoryStore::new()))
            .with_cancel(CancellationToken::new())
            .with_instance_id("race")
            .with_session("default")
            .with_cwd(sandbox.cwd());
        let (calls, succeeded, goal) = (
            Arc::clone(&calls),
            Arc::clone(&succeeded),
            Arc::clone(&goal),
        );
        tasks.push(tokio::spawn(async move {
            let mut report = RaceReport::default();
            let mut round = 0usize;
            let reached = || {
                calls.load(Ordering::Relaxed) >= goal.calls
                    && succeeded.load(Ordering::Relaxed) >= goal.succeeded
                    && (goal.racer_done)()
            };
            while !reached() && Instant::now() < deadline {
                round += 1;
                for (what, outcome) in one_round(&ctx, worker, round).await {
                    report.calls += 1;
                    calls.fetch_add(1, Ordering::Relaxed);
                    if let Ok(value) = outcome {
                        report.succeeded += 1;
                        succeeded.fetch_add(1, Ordering::Relaxed);
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
