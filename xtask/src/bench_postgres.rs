//! `cargo xtask bench-postgres [--seconds S] [--flue BIN] [--postgres URL]`: several
//! `flue serve` processes (release build, built once) on one Postgres database, over loopback:
//!
//! - settled submissions per second on 1, 2 and 4 nodes: 8 clients for S seconds (default 10),
//!   client `i` on node `i % n`, each `POST` then long-poll until its settlement (agent
//!   `plain`, scripted model);
//! - admission latency on a 2-node cluster: 500 sequential `POST`s (each settled before the
//!   next), request sent -> 202 read; p50 / p99;
//! - takeover: the owner of a conversation busy in a long tool call is SIGKILLed (5 trials),
//!   or frozen with SIGSTOP (3 trials: a hung node, which only the 5 s lease ends); time from
//!   the signal to the other node's `submission-running` chunk (attempt 2) on a long-poll;
//! - cross-node live-stream latency: SSE readers on node A and node B of one conversation,
//!   a message posted to A (which runs it); time from A's reader seeing the settlement to B's
//!   (p50 / p99 over 200 rounds), and POST -> B's reader.
//!
//! Postgres is a throwaway server from tests/peers/postgres.sh unless `--postgres` names one
//! (a database per phase is created in it). Every wait is bounded; servers are stopped on drop.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::bench_serve::{
    connect, copy_dir, head_offset, load_average, next_offset, post, read_response, report,
    stop_child, target_dir, wait_settled_on,
};
use crate::cargo;

const READY_TIMEOUT: Duration = Duration::from_secs(60);
const PHASE_TIMEOUT: Duration = Duration::from_secs(60);
/// The lease of every node (the issue's target is takeover within lease + 1 s).
const LEASE_MS: u64 = 5_000;

/// One `flue serve` node: SIGTERM, then SIGKILL, when dropped.
struct Node {
    child: Child,
    addr: String,
}

impl Drop for Node {
    fn drop(&mut self) {
        // A frozen node must be thawed to hear SIGTERM.
        signal(&self.child, nix::sys::signal::Signal::SIGCONT);
        stop_child(&mut self.child, Duration::from_secs(5));
    }
}

fn signal(child: &Child, signal: nix::sys::signal::Signal) {
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
    }
}

/// The Postgres server: ours (stopped and deleted on drop) or the caller's.
struct Postgres {
    url: String,
    owned: Option<(PathBuf, PathBuf)>,
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if let Some((script, dir)) = &self.owned {
            let _ = Command::new("bash")
                .arg(script)
                .arg("stop")
                .arg(dir)
                .status();
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Postgres {
    fn start(root: &Path, given: Option<&str>) -> anyhow::Result<Self> {
        if let Some(url) = given {
            return Ok(Self {
                url: url.to_owned(),
                owned: None,
            });
        }
        let script = root.join("tests/peers/postgres.sh");
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let dir = std::env::temp_dir().join(format!("flue-bench-pg-{}", std::process::id()));
        let output = Command::new("bash")
            .arg(&script)
            .arg("start")
            .arg(&dir)
            .arg(port.to_string())
            .stderr(Stdio::inherit())
            .output()?;
        if !output.status.success() {
            bail!("tests/peers/postgres.sh could not start Postgres");
        }
        Ok(Self {
            url: String::from_utf8(output.stdout)?.trim().to_owned(),
            owned: Some((script, dir)),
        })
    }

    /// A new empty database; its URL.
    fn database(&self, name: &str) -> anyhow::Result<String> {
        let name = format!("flue_bench_{name}_{}", std::process::id());
        psql(&self.url, &format!("DROP DATABASE IF EXISTS {name}"))?;
        psql(&self.url, &format!("CREATE DATABASE {name}"))?;
        let base = self
            .url
            .rsplit_once('/')
            .map_or(self.url.as_str(), |(base, _)| base);
        Ok(format!("{base}/{name}"))
    }
}

fn psql(url: &str, sql: &str) -> anyhow::Result<String> {
    let mut binary = PathBuf::from("psql");
    if let Ok(entries) = std::fs::read_dir("/usr/lib/postgresql") {
        let mut found: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|entry| entry.path().join("bin/psql"))
            .filter(|path| path.exists())
            .collect();
        found.sort();
        if let Some(path) = found.pop() {
            binary = path;
        }
    }
    let output = Command::new(binary)
        .arg(url)
        .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .output()?;
    if !output.status.success() {
        bail!("psql {sql:?}: {}", String::from_utf8_lossy(&output.stderr));
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

pub(crate) fn bench_postgres(
    root: &Path,
    seconds: u64,
    flue: Option<&Path>,
    postgres: Option<&str>,
) -> anyhow::Result<()> {
    let flue = match flue {
        Some(flue) => flue.to_path_buf(),
        None => {
            cargo(root, &["build", "--release", "-p", "flue-cli"], &[])?;
            target_dir(root).join("release/flue")
        }
    };
    println!("load average: {}", load_average());
    let scratch = std::env::temp_dir().join(format!("flue-bench-postgres-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    copy_dir(
        &root.join("crates/flue-cli/tests/fixtures/serve-workspace"),
        &scratch,
    )?;
    // A conversation that stays busy: one tool call that sleeps, then an answer.
    std::fs::write(
        scratch.join("agents/hold.md"),
        "---\ndescription: Holds the conversation\nmodel: scripted/scripts/hold.json\n\
         tools: [bash]\nsandbox: local\n---\nYou wait.\n",
    )?;
    std::fs::write(
        scratch.join("scripts/hold.json"),
        r#"{"rules": [
  {"when": {"tool_result": "bash"}, "reply": {"text": "Held."}},
  {"reply": {"text": "Holding.", "tool_calls": [{"name": "bash", "input": {"command": "sleep 60"}}]}}
]}"#,
    )?;
    let pg = Postgres::start(root, postgres)?;

    for nodes in [1, 2, 4] {
        let store = pg.database(&format!("tput{nodes}"))?;
        let cluster: Vec<Node> = (0..nodes)
            .map(|_| start(&flue, &scratch, &store))
            .collect::<anyhow::Result<_>>()?;
        let addrs: Vec<String> = cluster.iter().map(|node| node.addr.clone()).collect();
        warm_up(&addrs)?;
        let (settled, per_s, mut latencies) = throughput(&addrs, 8, Duration::from_secs(seconds))?;
        println!(
            "throughput on {nodes} node(s): {settled} settled in {seconds} s = {per_s:.0}/s (8 clients)"
        );
        report(
            &format!("POST -> settled ({nodes} node(s))"),
            &mut latencies,
        );
    }

    let store = pg.database("pair")?;
    let a = start(&flue, &scratch, &store)?;
    let b = start(&flue, &scratch, &store)?;
    warm_up(&[a.addr.clone(), b.addr.clone()])?;
    let mut conn = connect(&a.addr)?;
    let mut admissions = Vec::new();
    for idx in 0..500 {
        let path = format!("/agents/plain/adm{idx}");
        let started = Instant::now();
        let admission = post(&mut conn, &a.addr, &path)?;
        admissions.push(started.elapsed());
        wait_settled_on(&mut conn, &a.addr, &path, &admission)?;
    }
    report("admission (2 nodes, sequential, idle)", &mut admissions);

    let mut gaps = Vec::new();
    let mut totals = Vec::new();
    for round in 0..200 {
        let (gap, total) = cross_node(&a.addr, &b.addr, &format!("/agents/plain/live{round}"))?;
        gaps.push(gap);
        totals.push(total);
    }
    report("cross-node stream: A's reader -> B's reader", &mut gaps);
    report("cross-node stream: POST to A -> B's reader", &mut totals);
    drop((a, b));

    for (label, trials, freeze) in [("SIGKILL", 5, false), ("SIGSTOP (hung)", 3, true)] {
        let mut takeovers = Vec::new();
        for trial in 0..trials {
            let store = pg.database(&format!("takeover{trial}{}", u8::from(freeze)))?;
            takeovers.push(takeover(&flue, &scratch, &store, freeze)?);
        }
        report(
            &format!("takeover after {label}, lease {LEASE_MS} ms: signal -> running elsewhere"),
            &mut takeovers,
        );
    }
    println!("load average: {}", load_average());
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

fn warm_up(addrs: &[String]) -> anyhow::Result<()> {
    for (idx, addr) in addrs.iter().enumerate() {
        for round in 0..10 {
            let path = format!("/agents/plain/warm{idx}-{round}");
            let mut conn = connect(addr)?;
            let admission = post(&mut conn, addr, &path)?;
            wait_settled_on(&mut conn, addr, &path, &admission)?;
        }
    }
    Ok(())
}

fn throughput(
    addrs: &[String],
    clients: usize,
    duration: Duration,
) -> anyhow::Result<(usize, f64, Vec<Duration>)> {
    let started = Instant::now();
    let workers: Vec<_> = (0..clients)
        .map(|client| {
            let addr = addrs[client % addrs.len()].clone();
            std::thread::spawn(move || -> anyhow::Result<Vec<Duration>> {
                let mut conn = connect(&addr)?;
                let mut latencies = Vec::new();
                let mut idx = 0;
                while started.elapsed() < duration {
                    let path = format!("/agents/plain/tput{client}-{idx}");
                    idx += 1;
                    let begun = Instant::now();
                    let admission = post(&mut conn, &addr, &path)?;
                    wait_settled_on(&mut conn, &addr, &path, &admission)?;
                    latencies.push(begun.elapsed());
                }
                Ok(latencies)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for worker in workers {
        latencies.extend(
            worker
                .join()
                .map_err(|_| anyhow::anyhow!("client panicked"))??,
        );
    }
    let elapsed = started.elapsed().as_secs_f64();
    Ok((latencies.len(), latencies.len() as f64 / elapsed, latencies))
}

/// Opens an SSE reader of `path` at its head on `addr`; returns once its first control
/// event arrived.
fn attach(addr: &str, path: &str) -> anyhow::Result<std::io::BufReader<std::net::TcpStream>> {
    let head = head_offset(addr, path)?;
    let mut sse = connect(addr)?;
    sse.get_mut().write_all(
        format!("GET {path}?view=updates&offset={head}&live=sse HTTP/1.1\r\nhost: {addr}\r\n\r\n")
            .as_bytes(),
    )?;
    wait_line(&mut sse, "data:{\"streamNextOffset\"")?;
    Ok(sse)
}

/// Reads SSE lines until one contains `needle`; the moment it arrived.
fn wait_line(
    sse: &mut std::io::BufReader<std::net::TcpStream>,
    needle: &str,
) -> anyhow::Result<Instant> {
    let deadline = Instant::now() + PHASE_TIMEOUT;
    let mut line = String::new();
    loop {
        line.clear();
        if sse.read_line(&mut line)? == 0 {
            bail!("SSE stream ended before {needle:?}");
        }
        if line.contains(needle) {
            return Ok(Instant::now());
        }
        if Instant::now() >= deadline {
            bail!("no {needle:?} within {PHASE_TIMEOUT:?}");
        }
    }
}

/// One round: readers on A and B, a message to A; (B's arrival - A's, POST -> B's arrival).
fn cross_node(a: &str, b: &str, path: &str) -> anyhow::Result<(Duration, Duration)> {
    let mut conn = connect(a)?;
    let first = post(&mut conn, a, path)?;
    wait_settled_on(&mut conn, a, path, &first)?;
    let mut on_a = attach(a, path)?;
    let mut on_b = attach(b, path)?;
    let (tx, rx) = mpsc::channel();
    let needle = "\"type\":\"submission-settled\"";
    let reader = std::thread::spawn(move || {
        let _ = tx.send(wait_line(&mut on_b, needle));
    });
    let posted = Instant::now();
    post(&mut conn, a, path)?;
    let seen_a = wait_line(&mut on_a, needle)?;
    let seen_b = rx.recv_timeout(PHASE_TIMEOUT).context("B's reader")??;
    let _ = reader.join();
    Ok((
        seen_b.saturating_duration_since(seen_a),
        seen_b.duration_since(posted),
    ))
}

/// Node A runs a long tool call; it is killed (or frozen); the time until node B's first
/// write (the `started` batch of attempt 2; A writes nothing to the stream during its tool
/// call) reaches a long-poll on B.
fn takeover(flue: &Path, root: &Path, store: &str, freeze: bool) -> anyhow::Result<Duration> {
    let path = "/agents/hold/t";
    // B starts after A owns the conversation, so A runs it.
    let a = start(flue, root, store)?;
    let mut conn = connect(&a.addr)?;
    let admission = post(&mut conn, &a.addr, path)?;
    let running = wait_for(&a.addr, path, &admission.offset, Some("Holding."))?;
    let b = start(flue, root, store)?;
    // Give the tool call time to start.
    std::thread::sleep(Duration::from_millis(300));
    let signalled = Instant::now();
    let mut a = a;
    if freeze {
        signal(&a.child, nix::sys::signal::Signal::SIGSTOP);
    } else {
        let _ = a.child.kill();
        let _ = a.child.wait();
    }
    wait_for(&b.addr, path, &running, None)?;
    let took = signalled.elapsed();
    drop((a, b));
    Ok(took)
}

/// Long-polls `path` on `addr` from `offset` until a response containing `needle` (or, with
/// `None`, until the stream grows at all); returns the offset after it.
fn wait_for(addr: &str, path: &str, offset: &str, needle: Option<&str>) -> anyhow::Result<String> {
    let mut conn = connect(addr)?;
    let mut offset = offset.to_owned();
    let deadline = Instant::now() + PHASE_TIMEOUT;
    loop {
        if Instant::now() >= deadline {
            bail!("{path}: no {needle:?} within {PHASE_TIMEOUT:?}");
        }
        let request = format!(
            "GET {path}?view=updates&offset={offset}&live=long-poll HTTP/1.1\r\nhost: {addr}\r\n\r\n"
        );
        conn.get_mut().write_all(request.as_bytes())?;
        let (status, headers, body) = read_response(&mut conn)?;
        if status != 200 {
            bail!("GET {path}: {status} {body}");
        }
        let next = next_offset(&headers)?;
        let grew = next != offset;
        offset = next;
        match needle {
            Some(needle) if body.contains(needle) => return Ok(offset),
            None if grew => return Ok(offset),
            _ => {}
        }
    }
}

fn start(flue: &Path, root: &Path, store: &str) -> anyhow::Result<Node> {
    let mut child = Command::new(flue)
        // The bench's own workspace.
        .env("FLUE_TRUST", "1")
        .args(["serve", "--root"])
        .arg(root)
        .args(["--port", "0", "--store", store, "--lease-ms"])
        .arg(LEASE_MS.to_string())
        .env("FLUE_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting flue serve")?;
    let stderr = child.stderr.take().context("no stderr")?;
    let (ready, listening) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        let mut ready = Some(ready);
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            match line.strip_prefix("flue serve: listening on http://") {
                Some(addr) => {
                    if let Some(ready) = ready.take() {
                        let _ = ready.send(addr.to_owned());
                    }
                }
                None => eprintln!("[flue serve] {line}"),
            }
        }
    });
    match listening.recv_timeout(READY_TIMEOUT) {
        Ok(addr) => Ok(Node { child, addr }),
        Err(err) => {
            stop_child(&mut child, Duration::from_secs(2));
            bail!("flue serve did not print its address within {READY_TIMEOUT:?} ({err})")
        }
    }
}
