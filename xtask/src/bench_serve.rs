//! `cargo xtask bench-serve [--streams N]`: `flue serve` (release build) on the serve test
//! workspace (crates/flue-cli/tests/fixtures/serve-workspace, scripted model), driven over
//! loopback HTTP/1.1 by plain threads:
//!
//! - admission latency: 500 sequential `POST`s (new conversations, one keep-alive connection),
//!   request sent -> 202 body read; p50 / p99;
//! - settled submissions per second: 8 clients for 10 s, each `POST` then long-poll until its
//!   `submission-settled` chunk (agents `plain` and `tool`);
//! - first streamed content: an SSE reader attached before the `POST`; `POST` sent -> first
//!   `message-delta` chunk read;
//! - resident memory with N idle SSE streams (default 10,000; the fd limit is raised first):
//!   VmRSS before and after, per stream.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::cargo;

/// The server, killed by pid when dropped.
struct Server {
    child: Child,
    addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn bench_serve(root: &Path, streams: usize) -> anyhow::Result<()> {
    cargo(root, &["build", "--release", "-p", "flue-cli"], &[])?;
    raise_fd_limit(streams + 1_000)?;
    let flue = target_dir(root).join("release/flue");
    let scratch = std::env::temp_dir().join(format!("flue-bench-serve-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    copy_dir(
        &root.join("crates/flue-cli/tests/fixtures/serve-workspace"),
        &scratch,
    )?;
    let server = start(&flue, &scratch)?;
    let pid = server.child.id();
    let idle_rss = rss_kib(pid)?;
    println!("flue serve: {}  idle RSS {} KiB", server.addr, idle_rss);

    // Warm up.
    for idx in 0..20 {
        let admission = post(
            &mut connect(&server.addr)?,
            &server.addr,
            &format!("/agents/plain/warm{idx}"),
        )?;
        wait_settled(
            &server.addr,
            &format!("/agents/plain/warm{idx}"),
            &admission,
        )?;
    }

    let mut conn = connect(&server.addr)?;
    let mut admissions = Vec::new();
    for idx in 0..500 {
        let started = Instant::now();
        post(&mut conn, &server.addr, &format!("/agents/plain/adm{idx}"))?;
        admissions.push(started.elapsed());
    }
    report("admission (sequential, idle server)", &mut admissions);
    // Let that work drain before measuring throughput.
    wait_settled(&server.addr, "/agents/plain/adm499", &Admission::any())?;

    for agent in ["plain", "tool"] {
        let (settled, per_s, mut latencies) =
            throughput(&server.addr, agent, 8, Duration::from_secs(10))?;
        println!("throughput {agent}: {settled} settled in 10 s = {per_s:.0}/s (8 clients)");
        report(
            &format!("POST -> settled ({agent}, under load)"),
            &mut latencies,
        );
    }

    let mut first = Vec::new();
    for idx in 0..50 {
        first.push(first_delta(
            &server.addr,
            &format!("/agents/plain/first{idx}"),
        )?);
    }
    report("POST -> first message-delta over SSE", &mut first);

    let before = rss_kib(pid)?;
    let opened = open_streams(&server.addr, streams)?;
    std::thread::sleep(Duration::from_millis(500));
    let after = rss_kib(pid)?;
    println!(
        "{} idle SSE streams: RSS {} KiB -> {} KiB = {:.1} KiB per stream (peak {} KiB)",
        opened.len(),
        before,
        after,
        (after.saturating_sub(before)) as f64 / opened.len().max(1) as f64,
        peak_kib(pid)?
    );
    drop(opened);
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

/// Settled count, settled per second, and POST -> settled latencies.
fn throughput(
    addr: &str,
    agent: &str,
    clients: usize,
    duration: Duration,
) -> anyhow::Result<(usize, f64, Vec<Duration>)> {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..clients)
        .map(|client| {
            let (addr, agent) = (addr.to_owned(), agent.to_owned());
            let (stop, count) = (Arc::clone(&stop), Arc::clone(&count));
            std::thread::spawn(move || -> anyhow::Result<Vec<Duration>> {
                let mut conn = connect(&addr)?;
                let mut latencies = Vec::new();
                let mut idx = 0;
                while !stop.load(Ordering::Relaxed) {
                    let path = format!("/agents/{agent}/tput{client}-{idx}");
                    idx += 1;
                    let begun = Instant::now();
                    let admission = post(&mut conn, &addr, &path)?;
                    wait_settled_on(&mut conn, &addr, &path, &admission)?;
                    latencies.push(begun.elapsed());
                    count.fetch_add(1, Ordering::Relaxed);
                }
                Ok(latencies)
            })
        })
        .collect();
    std::thread::sleep(duration);
    stop.store(true, Ordering::Relaxed);
    let mut latencies = Vec::new();
    for worker in workers {
        latencies.extend(
            worker
                .join()
                .map_err(|_| anyhow::anyhow!("client panicked"))??,
        );
    }
    let elapsed = started.elapsed().as_secs_f64();
    let settled = count.load(Ordering::Relaxed);
    Ok((settled, settled as f64 / elapsed, latencies))
}

/// An admission's submission id and offset.
struct Admission {
    submission: Option<String>,
    offset: String,
}

impl Admission {
    /// Any settlement of the conversation, from its start.
    fn any() -> Self {
        Self {
            submission: None,
            offset: "-1".to_owned(),
        }
    }
}

fn post(conn: &mut BufReader<TcpStream>, addr: &str, path: &str) -> anyhow::Result<Admission> {
    let body = r#"{"kind":"user","body":"what is six times seven"}"#;
    let request = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.get_mut().write_all(request.as_bytes())?;
    let (status, _, body) = read_response(conn)?;
    if status != 202 {
        bail!("POST {path}: {status} {body}");
    }
    Ok(Admission {
        submission: field(&body, "submissionId"),
        offset: field(&body, "offset").context("admission without offset")?,
    })
}

fn wait_settled(addr: &str, path: &str, admission: &Admission) -> anyhow::Result<()> {
    wait_settled_on(&mut connect(addr)?, addr, path, admission)
}

/// Long-polls from the admission's offset until its settlement chunk.
fn wait_settled_on(
    conn: &mut BufReader<TcpStream>,
    addr: &str,
    path: &str,
    admission: &Admission,
) -> anyhow::Result<()> {
    let mut offset = admission.offset.clone();
    let needle = match &admission.submission {
        Some(id) => format!("\"type\":\"submission-settled\",\"submissionId\":\"{id}\""),
        None => "\"type\":\"submission-settled\"".to_owned(),
    };
    loop {
        let request = format!(
            "GET {path}?view=updates&offset={offset}&live=long-poll HTTP/1.1\r\nhost: {addr}\r\n\r\n"
        );
        conn.get_mut().write_all(request.as_bytes())?;
        let (status, headers, body) = read_response(conn)?;
        if status != 200 {
            bail!("GET {path}: {status} {body}");
        }
        if body.contains(&needle) {
            return Ok(());
        }
        offset = headers
            .lines()
            .find_map(|line| line.strip_prefix("stream-next-offset: "))
            .context("no stream-next-offset")?
            .trim()
            .to_owned();
    }
}

/// POST -> first `message-delta` read on an SSE stream attached to the conversation.
fn first_delta(addr: &str, path: &str) -> anyhow::Result<Duration> {
    // Create the conversation, then attach at its head.
    let first = post(&mut connect(addr)?, addr, path)?;
    wait_settled(addr, path, &first)?;
    let mut head_conn = connect(addr)?;
    head_conn
        .get_mut()
        .write_all(format!("HEAD {path} HTTP/1.1\r\nhost: {addr}\r\n\r\n").as_bytes())?;
    let (_, headers, _) = read_head_only(&mut head_conn)?;
    let head = headers
        .lines()
        .find_map(|line| line.strip_prefix("stream-next-offset: "))
        .context("no head")?
        .trim()
        .to_owned();
    let mut sse = connect(addr)?;
    sse.get_mut().write_all(
        format!("GET {path}?view=updates&offset={head}&live=sse HTTP/1.1\r\nhost: {addr}\r\n\r\n")
            .as_bytes(),
    )?;
    // Headers, then the first control event.
    let mut line = String::new();
    loop {
        line.clear();
        sse.read_line(&mut line)?;
        if line.starts_with("data:{\"streamNextOffset\"") {
            break;
        }
    }
    let started = Instant::now();
    post(&mut connect(addr)?, addr, path)?;
    loop {
        line.clear();
        if sse.read_line(&mut line)? == 0 {
            bail!("SSE stream ended");
        }
        if line.contains("\"type\":\"message-delta\"") {
            return Ok(started.elapsed());
        }
    }
}

/// Opens `n` SSE streams over 100 conversations and reads each one's first control event.
fn open_streams(addr: &str, n: usize) -> anyhow::Result<Vec<TcpStream>> {
    for conv in 0..100 {
        let path = format!("/agents/plain/idle{conv}");
        let admission = post(&mut connect(addr)?, addr, &path)?;
        wait_settled(addr, &path, &admission)?;
    }
    let mut streams = Vec::with_capacity(n);
    for idx in 0..n {
        let mut stream = TcpStream::connect(addr)?;
        let path = format!("/agents/plain/idle{}", idx % 100);
        stream.write_all(
            format!("GET {path}?view=updates&offset=-1&live=sse HTTP/1.1\r\nhost: {addr}\r\n\r\n")
                .as_bytes(),
        )?;
        streams.push(stream);
    }
    // Every stream got its headers and first events (reading a little from each).
    for stream in &mut streams {
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        let mut buf = [0u8; 512];
        let read = stream.read(&mut buf)?;
        if !buf[..read].starts_with(b"HTTP/1.1 200") {
            bail!(
                "SSE stream refused: {}",
                String::from_utf8_lossy(&buf[..read])
            );
        }
    }
    Ok(streams)
}

fn connect(addr: &str) -> anyhow::Result<BufReader<TcpStream>> {
    let stream = TcpStream::connect(addr)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    Ok(BufReader::new(stream))
}

/// Reads one response with a `content-length` body: (status, headers lowercased, body).
fn read_response(conn: &mut BufReader<TcpStream>) -> anyhow::Result<(u16, String, String)> {
    let (status, headers, length) = read_head_only(conn)?;
    let mut body = vec![0u8; length];
    conn.read_exact(&mut body)?;
    Ok((status, headers, String::from_utf8_lossy(&body).into_owned()))
}

fn read_head_only(conn: &mut BufReader<TcpStream>) -> anyhow::Result<(u16, String, usize)> {
    let mut status_line = String::new();
    conn.read_line(&mut status_line)?;
    let status = status_line.get(9..12).context("no status line")?.parse()?;
    let mut headers = String::new();
    let mut length = 0;
    loop {
        let mut line = String::new();
        conn.read_line(&mut line)?;
        if line == "\r\n" || line.is_empty() {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(value) = lower.strip_prefix("content-length: ") {
            length = value.trim().parse()?;
        }
        headers.push_str(&lower);
    }
    Ok((status, headers, length))
}

/// A string field of a flat JSON object (no escapes in our values).
fn field(body: &str, name: &str) -> Option<String> {
    let start = body.find(&format!("\"{name}\":\""))? + name.len() + 4;
    let end = body[start..].find('"')? + start;
    Some(body[start..end].to_owned())
}

fn start(flue: &Path, root: &Path) -> anyhow::Result<Server> {
    let mut child = Command::new(flue)
        .args(["serve", "--root"])
        .arg(root)
        .args(["--port", "0"])
        .env("FLUE_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting flue serve")?;
    let stderr = child.stderr.take().context("no stderr")?;
    let mut lines = BufReader::new(stderr).lines();
    let addr = loop {
        let line = lines
            .next()
            .context("flue serve exited before listening")??;
        if let Some(addr) = line.strip_prefix("flue serve: listening on http://") {
            break addr.to_owned();
        }
    };
    // Keep draining stderr so the server never blocks on it.
    std::thread::spawn(move || for _ in lines {});
    Ok(Server { child, addr })
}

fn report(name: &str, samples: &mut [Duration]) {
    samples.sort();
    let pct = |p: f64| {
        let idx = ((samples.len() - 1) as f64 * p).round() as usize;
        samples[idx].as_secs_f64() * 1000.0
    };
    println!(
        "{name}: n={} p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms",
        samples.len(),
        pct(0.5),
        pct(0.99),
        pct(1.0)
    );
}

fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    status_field(pid, "VmRSS:")
}

fn peak_kib(pid: u32) -> anyhow::Result<u64> {
    status_field(pid, "VmHWM:")
}

fn status_field(pid: u32, name: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(name))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .with_context(|| format!("no {name} in /proc/{pid}/status"))
}

fn raise_fd_limit(wanted: usize) -> anyhow::Result<()> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    let target = (wanted as u64).min(hard).max(soft);
    setrlimit(Resource::RLIMIT_NOFILE, target, hard)?;
    if target < wanted as u64 {
        eprintln!("bench-serve: fd limit {target} < {wanted}; fewer streams will open");
    }
    Ok(())
}

fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from)
}

fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let dest = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &dest)?;
        } else {
            std::fs::copy(entry.path(), dest)?;
        }
    }
    Ok(())
}
