//! Per-command latency of each sandbox: a small pipeline and a file write + read.
//!
//! Run with `cargo bench -p flue-connectors --bench sandboxes` (or `cargo xtask bench`).
//! Prints one line per figure; BENCHMARKS.md records them with the command that produced
//! them. The isolated sandbox needs bubblewrap and unprivileged user namespaces; Daytona is
//! not measured here (it needs an account, and its figures are network round trips).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark fails loudly"
)]
#![allow(
    missing_docs,
    clippy::print_stdout,
    reason = "a benchmark binary reports on stdout"
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use flue_connectors::{IsolatedSandbox, IsolationBackend};
use flue_core::{ExecOptions, LocalSandbox, Sandbox, VirtualSandbox};

/// The pipeline measured, on a 200-line file with 67 matching lines.
const PIPELINE: &str = "cat f | grep x | wc -l";

/// A write and a read through the shell.
const SHELL_WRITE_READ: &str = "echo hello > g; cat g";

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let virtual_sandbox: Arc<dyn Sandbox> = Arc::new(VirtualSandbox::new());
        measure("virtual", &virtual_sandbox, 2_000).await;

        let local_dir = tempfile::tempdir().unwrap();
        let local: Arc<dyn Sandbox> = Arc::new(LocalSandbox::new(local_dir.path()).unwrap());
        measure("local", &local, 300).await;

        for backend in [IsolationBackend::Bubblewrap, IsolationBackend::Unshare] {
            let dir = tempfile::tempdir().unwrap();
            let isolated: Arc<dyn Sandbox> = Arc::new(
                IsolatedSandbox::builder(dir.path())
                    .with_backend(backend)
                    .build()
                    .await
                    .unwrap(),
            );
            measure(&format!("isolated ({backend})"), &isolated, 100).await;
        }
    });
}

async fn measure(name: &str, sandbox: &Arc<dyn Sandbox>, n: u32) {
    let text: String = (0..200)
        .map(|idx| format!("line {idx} {}\n", if idx % 3 == 0 { "x" } else { "y" }))
        .collect();
    sandbox.write_file("f", text.as_bytes()).await.unwrap();
    let res = sandbox.exec(PIPELINE, ExecOptions::new()).await.unwrap();
    assert_eq!(res.stdout.trim(), "67", "{name}: {res:?}");

    let mut samples = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let started = Instant::now();
        let res = sandbox.exec(PIPELINE, ExecOptions::new()).await.unwrap();
        samples.push(started.elapsed());
        assert_eq!(res.exit_code, 0);
    }
    report(&format!("{name}: exec `{PIPELINE}`"), &mut samples);

    let mut samples = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let started = Instant::now();
        let res = sandbox
            .exec(SHELL_WRITE_READ, ExecOptions::new())
            .await
            .unwrap();
        samples.push(started.elapsed());
        assert_eq!(res.stdout, "hello\n");
    }
    report(&format!("{name}: exec `{SHELL_WRITE_READ}`"), &mut samples);

    let mut samples = Vec::with_capacity(n as usize);
    for idx in 0..n {
        let content = format!("note {idx}");
        let started = Instant::now();
        sandbox
            .write_file("notes/n.txt", content.as_bytes())
            .await
            .unwrap();
        let read = sandbox.read_file("notes/n.txt").await.unwrap();
        samples.push(started.elapsed());
        assert_eq!(read, content);
    }
    report(&format!("{name}: write_file + read_file"), &mut samples);
}

fn report(label: &str, samples: &mut [Duration]) {
    samples.sort();
    let total: Duration = samples.iter().sum();
    let mean = total / u32::try_from(samples.len()).unwrap();
    let median = samples[samples.len() / 2];
    let p95 = samples[samples.len() * 95 / 100];
    println!(
        "{label}: mean {:.1} us, median {:.1} us, p95 {:.1} us (n={})",
        micros(mean),
        micros(median),
        micros(p95),
        samples.len()
    );
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}
