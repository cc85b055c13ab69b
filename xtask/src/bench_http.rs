//! `cargo xtask bench-serve --model http --flue BIN [--seconds S]`: `flue serve` against a
//! real HTTP model (the in-process Rust fake of `fake_model.rs`, OpenAI Chat Completions,
//! streaming), driven by 8 client threads of this process (`bench_serve::throughput`).
//!
//! For the agents `plain-agent` (one reply) and `tool-agent` (a `read_file` call, then the
//! reply) in turn, for S seconds each: settled messages per second, the server's CPU time per
//! settled message, and this process's (fake model and clients together) beside it, so it
//! shows that the load costs less than the server it measures; then the server's RSS.

use std::path::Path;
use std::time::Duration;

use crate::bench_providers::write_workspace;
use crate::bench_serve::{
    connect, cpu_ticks, load_average, post, start, throughput, wait_settled_on,
};
use crate::fake_model;

/// Runs the bench with `flue` for `seconds` per agent.
pub(crate) fn bench_http(flue: &Path, seconds: u64) -> anyhow::Result<()> {
    println!("load average: {}", load_average());
    let model = fake_model::start()?;
    let scratch = std::env::temp_dir().join(format!("flue-bench-http-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    write_workspace(&scratch, model.port)?;
    let server = start(flue, &scratch)?;
    let pid = server.child.id();
    let own = std::process::id();
    // Warm up: connections, the agents' first harnesses.
    for agent in ["plain-agent", "tool-agent"] {
        for idx in 0..10 {
            let path = format!("/agents/{agent}/warm{idx}");
            let mut conn = connect(&server.addr)?;
            let admission = post(&mut conn, &server.addr, &path)?;
            wait_settled_on(&mut conn, &server.addr, &path, &admission)?;
        }
    }
    for agent in ["plain-agent", "tool-agent"] {
        let (server_before, own_before) = (cpu_ticks(pid)?, cpu_ticks(own)?);
        let (settled, per_s, _) = throughput(&server.addr, agent, 8, Duration::from_secs(seconds))?;
        let server_ms = (cpu_ticks(pid)? - server_before) as f64 * 10.0;
        let own_ms = (cpu_ticks(own)? - own_before) as f64 * 10.0;
        let settled_f = settled.max(1) as f64;
        println!(
            "{agent}: {settled} settled in {seconds} s = {per_s:.0}/s; CPU per settled message: \
             flue serve {:.2} ms, fake model + clients {:.2} ms",
            server_ms / settled_f,
            own_ms / settled_f
        );
    }
    println!(
        "flue serve RSS: {} KiB (peak {} KiB)",
        status_kib(pid, "VmRSS")?,
        status_kib(pid, "VmHWM")?
    );
    println!("load average: {}", load_average());
    drop(server);
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

fn status_kib(pid: u32, name: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{name}:")))
        .ok_or_else(|| anyhow::anyhow!("no {name} in /proc/{pid}/status"))?;
    Ok(line.trim().trim_end_matches("kB").trim().parse()?)
}
