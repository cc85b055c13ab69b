//! `cargo xtask bench-long --flue BIN [--flue BIN ...] [--turns N] [--window W]`: the CPU one
//! more message costs `flue serve` as a conversation grows, against a real HTTP model (the
//! fake OpenAI server of the tests, `crates/flue-cli/tests/fixtures/fake_openai.py`).
//!
//! Each binary in turn serves a fresh workspace (`bench_providers`' provider `fake`, agent
//! `plain-agent`); N messages (default 1,000) go to one conversation one after the other, each
//! settled before the next. The server's CPU time (user + system, `/proc/<pid>/stat`) is read
//! every W messages (default 100), so the cost per message shows at each length: the request
//! the model gets holds every earlier message.

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::bench_providers::{start_server, write_workspace};
use crate::bench_serve::{connect, cpu_ticks, load_average, post, start, wait_settled_on};

/// What `cargo xtask bench-long` measures.
pub(crate) struct LongBench {
    pub(crate) binaries: Vec<PathBuf>,
    pub(crate) turns: usize,
    pub(crate) window: usize,
}

/// Runs the bench for each binary and prints a row per window.
pub(crate) fn bench_long(root: &Path, bench: &LongBench) -> anyhow::Result<()> {
    println!("load average at start: {}", load_average());
    for flue in &bench.binaries {
        println!("{}", flue.display());
        let per_window = run(root, flue, bench)?;
        for (idx, ms) in per_window.iter().enumerate() {
            let first = idx * bench.window;
            println!(
                "  messages {:>5}-{:<5} CPU per message {ms:.2} ms",
                first + 1,
                first + bench.window
            );
        }
    }
    println!("load average at end: {}", load_average());
    Ok(())
}

/// CPU milliseconds per message of each window of one binary's run.
fn run(root: &Path, flue: &Path, bench: &LongBench) -> anyhow::Result<Vec<f64>> {
    let scratch = std::env::temp_dir().join(format!("flue-bench-long-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch)?;
    let model = start_server(root, &scratch)?;
    let workspace = scratch.join("ws");
    write_workspace(&workspace, model.port)?;
    let server = start(flue, &workspace)?;
    let mut conn = connect(&server.addr)?;
    let path = "/agents/plain-agent/long";
    let mut windows = Vec::new();
    let mut before = cpu_ticks(server.child.id())?;
    for n in 1..=bench.turns {
        let admission =
            post(&mut conn, &server.addr, path).with_context(|| format!("message {n}"))?;
        wait_settled_on(&mut conn, &server.addr, path, &admission)?;
        if n % bench.window == 0 {
            let now = cpu_ticks(server.child.id())?;
            // Clock ticks are 10 ms each.
            windows.push((now - before) as f64 * 10.0 / bench.window as f64);
            before = now;
        }
    }
    drop(server);
    drop(model);
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(windows)
}
