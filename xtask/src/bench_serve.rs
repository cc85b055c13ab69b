//! `cargo xtask bench-serve [--streams N] [--seconds S] [--idle-seconds S] [--workspace DIR]
//! [--flue BIN]`: `flue serve` (release build) on the serve test workspace
//! (crates/flue-cli/tests/fixtures/serve-workspace, scripted model; or `DIR`, used in place: a
//! copy of that workspace whose store was filled beforehand), driven over loopback HTTP/1.1 by
//! plain threads:
//!
//! - start-up: process start -> the first answered `GET /_flue/health`; then the server's CPU
//!   time (user + system) while idle for `--idle-seconds` (default 30);
//! - admission latency: 500 sequential `POST`s (new conversations, one keep-alive connection,
//!   each settled before the next), request sent -> 202 body read; p50 / p99; then 200 `POST`s
//!   back to back (turns piling up behind them);
//! - settled submissions per second: 8 clients for 10 s, each `POST` then long-poll until its
//!   `submission-settled` chunk (agents `plain` and `tool`);
//! - first streamed content: an SSE reader attached before the `POST`; `POST` sent -> first
//!   `message-delta` chunk read (agent `plain`, and agent `stream`, whose model produces a
//!   piece every 100 ms: its first delta is live, ahead of the turn's durable record);
//! - resident memory with N idle SSE streams (default 10,000; the fd limit is raised first):
//!   VmRSS before and after, per stream.
//!
//! Every wait is bounded: sockets carry connect/read/write timeouts, each phase has a
//! deadline, the server's readiness line is awaited with a timeout (its stderr is drained by a
//! thread for the whole run), the server is stopped with SIGTERM then SIGKILL, and a watchdog
//! kills the server and exits if the whole run overstays its budget.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::cargo;

/// How long the server gets to print its address.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Connect, read and write timeout of every client socket.
const IO_TIMEOUT: Duration = Duration::from_secs(20);
/// How long one submission may take to settle.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long opening all idle SSE streams may take.
const STREAMS_TIMEOUT: Duration = Duration::from_secs(90);
/// The whole run after the build; past it the watchdog kills the server and exits.
const RUN_BUDGET: Duration = Duration::from_secs(600);

/// The server: SIGTERM, then SIGKILL after a few seconds, when dropped.
pub(crate) struct Server {
    pub(crate) child: Child,
    pub(crate) addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        stop_child(&mut self.child, Duration::from_secs(5));
    }
}

/// Asks `child` to stop, waits at most `grace`, then kills it; never blocks longer.
pub(crate) fn stop_child(child: &mut Child, grace: Duration) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // SIGKILL cannot be ignored, so the wait that follows returns.
    let _ = child.kill();
    let _ = child.wait();
}

/// Kills the server and ends this process if the run outlives `budget`.
#[expect(
    clippy::disallowed_methods,
    reason = "the watchdog ends a stuck benchmark from its own thread; nothing else can"
)]
fn watchdog(pid: u32, budget: Duration) -> mpsc::Sender<()> {
    let (done, wait) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(budget) {
            eprintln!(
                "bench-serve: still running after {budget:?}; killing the server and exiting"
            );
            if let Ok(pid) = i32::try_from(pid) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            std::process::exit(3);
        }
    });
    done
}

/// With `flue` given, that binary is measured and nothing is built.
/// What `bench-serve` runs and measures.
pub(crate) struct ServeBench<'a> {
    /// Idle SSE streams to open.
    pub(crate) streams: usize,
    /// Seconds of each throughput phase.
    pub(crate) seconds: u64,
    /// Seconds the idle server's CPU time is counted for.
    pub(crate) idle_seconds: u64,
    /// A prepared workspace, served in place (a copy of the fixture is used otherwise).
    pub(crate) workspace: Option<&'a Path>,
    /// The binary (a release build of this checkout otherwise).
    pub(crate) flue: Option<&'a Path>,
}

pub(crate) fn bench_serve(root: &Path, bench: &ServeBench<'_>) -> anyhow::Result<()> {
    let ServeBench {
        streams,
        seconds,
        idle_seconds,
        workspace,
        flue,
    } = *bench;
    let flue = match flue {
        Some(flue) => flue.to_path_buf(),
        None => {
            cargo(root, &["build", "--release", "-p", "flue-cli"], &[])?;
            target_dir(root).join("release/flue")
        }
    };
    raise_fd_limit(streams + 1_000)?;
    println!("load average: {}", load_average());
    let scratch = match workspace {
        Some(dir) => dir.to_path_buf(),
        None => {
            let scratch =
                std::env::temp_dir().join(format!("flue-bench-serve-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&scratch);
            copy_dir(
                &root.join("crates/flue-cli/tests/fixtures/serve-workspace"),
                &scratch,
            )?;
            scratch
        }
    };
    let spawned = Instant::now();
    let server = start(&flue, &scratch)?;
    let pid = server.child.id();
    let _watchdog = watchdog(pid, RUN_BUDGET + Duration::from_secs(idle_seconds));
    health(&server.addr)?;
    println!(
        "start-up: {:.1} ms (process start -> first answered GET /_flue/health)",
        spawned.elapsed().as_secs_f64() * 1000.0
    );
    let idle_rss = rss_kib(pid)?;
    println!("flue serve: {}  idle RSS {} KiB", server.addr, idle_rss);
    if idle_seconds > 0 {
        let before = cpu_ticks(pid)?;
        std::thread::sleep(Duration::from_secs(idle_seconds));
        let used = cpu_ticks(pid)?.saturating_sub(before);
        println!(
            "idle CPU: {} ms over {idle_seconds} s (load average {})",
            used * 1000 / clock_ticks_per_second(),
            load_average()
        );
    }

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

    // Idle server: each submission settles before the next POST (untimed wait).
    let mut conn = connect(&server.addr)?;
    let mut admissions = Vec::new();
    for idx in 0..500 {
        let path = format!("/agents/plain/adm{idx}");
        let started = Instant::now();
        let admission = post(&mut conn, &server.addr, &path)?;
        admissions.push(started.elapsed());
        wait_settled_on(&mut conn, &server.addr, &path, &admission)?;
    }
    report("admission (sequential, idle server)", &mut admissions);

    // Backlog: POSTs back to back, the agent turns piling up behind them.
    let mut backlog = Vec::new();
    for idx in 0..200 {
        let started = Instant::now();
        post(
            &mut conn,
            &server.addr,
            &format!("/agents/plain/burst{idx}"),
        )?;
        backlog.push(started.elapsed());
    }
    report(
        "admission (200 back to back, turns piling up)",
        &mut backlog,
    );
    // Let that work drain before measuring throughput.
    wait_settled(&server.addr, "/agents/plain/burst199", &Admission::any())?;

    for agent in ["plain", "tool"] {
        let (settled, per_s, mut latencies) =
            throughput(&server.addr, agent, 8, Duration::from_secs(seconds))?;
        println!("throughput {agent}: {settled} settled in {seconds} s = {per_s:.0}/s (8 clients)");
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
    // The `stream` agent's model produces a piece every 100 ms: the first delta arrives as
    // the model produces it, not when the turn is stored (about 700 ms later).
    let mut live = Vec::new();
    for idx in 0..10 {
        live.push(first_delta(
            &server.addr,
            &format!("/agents/stream/first{idx}"),
        )?);
    }
    report(
        "POST -> first message-delta over SSE (`stream`, 100 ms per piece)",
        &mut live,
    );

    let before = rss_kib(pid)?;
    let opened = open_streams(&server.addr, streams)?;
    std::thread::sleep(Duration::from_millis(500));
    let after = rss_kib(pid)?;
    println!(
        "{} of {streams} idle SSE streams: RSS {} KiB -> {} KiB = {:.1} KiB per stream (peak {} KiB)",
        opened.len(),
        before,
        after,
        (after.saturating_sub(before)) as f64 / opened.len().max(1) as f64,
        peak_kib(pid)?
    );
    drop(opened);
    println!("load average: {}", load_average());
    drop(server);
    if workspace.is_none() {
        let _ = std::fs::remove_dir_all(&scratch);
    }
    Ok(())
}

/// Asks `GET /_flue/health` until it is answered 200 (bounded by the ready timeout).
fn health(addr: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let answered = connect(addr).and_then(|mut conn| {
            conn.get_mut().write_all(
                format!("GET /_flue/health HTTP/1.1\r\nhost: {addr}\r\n\r\n").as_bytes(),
            )?;
            read_response(&mut conn)
        });
        match answered {
            Ok((200, _, _)) => return Ok(()),
            Ok(_) | Err(_) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok((status, _, body)) => bail!("GET /_flue/health: {status} {body}"),
            Err(err) => return Err(err.context("GET /_flue/health")),
        }
    }
}

/// CPU time (user + system) of process `pid` so far, in clock ticks (`/proc/<pid>/stat`).
pub(crate) fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The fields after the command name (in parentheses, which may hold spaces): utime and
    // stime are the 12th and 13th of them.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .context("malformed /proc/<pid>/stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |idx: usize| -> anyhow::Result<u64> {
        Ok(fields.get(idx).context("short /proc/<pid>/stat")?.parse()?)
    };
    Ok(field(11)? + field(12)?)
}

/// The kernel's clock ticks per second (`USER_HZ`): 100 on Linux.
fn clock_ticks_per_second() -> u64 {
    100
}

pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|line| {
            line.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "unknown".to_owned())
}

/// Settled count, settled per second, and POST -> settled latencies.
pub(crate) fn throughput(
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
pub(crate) struct Admission {
    submission: Option<String>,
    pub(crate) offset: String,
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

pub(crate) fn post(
    conn: &mut BufReader<TcpStream>,
    addr: &str,
    path: &str,
) -> anyhow::Result<Admission> {
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
pub(crate) fn wait_settled_on(
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
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    loop {
        if Instant::now() >= deadline {
            bail!("{path}: not settled within {SETTLE_TIMEOUT:?}");
        }
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
        offset = next_offset(&headers)?;
    }
}

/// POST -> first `message-delta` read on an SSE stream attached to the conversation.
fn first_delta(addr: &str, path: &str) -> anyhow::Result<Duration> {
    // Create the conversation, then attach at its head.
    let first = post(&mut connect(addr)?, addr, path)?;
    wait_settled(addr, path, &first)?;
    let head = head_offset(addr, path)?;
    let mut sse = connect(addr)?;
    sse.get_mut().write_all(
        format!("GET {path}?view=updates&offset={head}&live=sse HTTP/1.1\r\nhost: {addr}\r\n\r\n")
            .as_bytes(),
    )?;
    // Headers, then the first control event (each read is bounded by the socket timeout,
    // the whole wait by a deadline).
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    let mut line = String::new();
    loop {
        line.clear();
        if sse.read_line(&mut line)? == 0 {
            bail!("SSE stream ended before its first control event");
        }
        if line.starts_with("data:{\"streamNextOffset\"") {
            break;
        }
        if Instant::now() >= deadline {
            bail!("{path}: no control event within {SETTLE_TIMEOUT:?}");
        }
    }
    let started = Instant::now();
    post(&mut connect(addr)?, addr, path)?;
    loop {
        line.clear();
        if sse.read_line(&mut line)? == 0 {
            bail!("SSE stream ended");
        }
        if Instant::now() >= deadline {
            bail!("{path}: no message-delta within {SETTLE_TIMEOUT:?}");
        }
        if line.contains("\"type\":\"message-delta\"") {
            return Ok(started.elapsed());
        }
    }
}

/// Opens up to `n` SSE streams over 100 conversations and reads each one's first bytes;
/// stops early (and says why) at the phase deadline or the first failure.
fn open_streams(addr: &str, n: usize) -> anyhow::Result<Vec<TcpStream>> {
    for conv in 0..100 {
        let path = format!("/agents/plain/idle{conv}");
        let admission = post(&mut connect(addr)?, addr, &path)?;
        wait_settled(addr, &path, &admission)?;
    }
    let started = Instant::now();
    let deadline = started + STREAMS_TIMEOUT;
    let socket: std::net::SocketAddr = addr.parse()?;
    let mut streams = Vec::with_capacity(n);
    for idx in 0..n {
        if Instant::now() >= deadline {
            eprintln!("bench-serve: stopped opening streams at {idx}: phase deadline");
            break;
        }
        let opened = TcpStream::connect_timeout(&socket, IO_TIMEOUT).and_then(|mut stream| {
            stream.set_write_timeout(Some(IO_TIMEOUT))?;
            let path = format!("/agents/plain/idle{}", idx % 100);
            stream.write_all(
                format!(
                    "GET {path}?view=updates&offset=-1&live=sse HTTP/1.1\r\nhost: {addr}\r\n\r\n"
                )
                .as_bytes(),
            )?;
            Ok(stream)
        });
        match opened {
            Ok(stream) => streams.push(stream),
            Err(err) => {
                eprintln!("bench-serve: stopped opening streams at {idx}: {err}");
                break;
            }
        }
    }
    let connected = started.elapsed();
    // Every stream got its headers and first events (reading a little from each).
    let mut answered = 0;
    for stream in &mut streams {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_secs(1));
        stream.set_read_timeout(Some(left.min(IO_TIMEOUT)))?;
        let mut buf = [0u8; 512];
        let read = match stream.read(&mut buf) {
            Ok(read) => read,
            Err(err) => {
                eprintln!("bench-serve: stream {answered} unanswered: {err}");
                break;
            }
        };
        if !buf[..read].starts_with(b"HTTP/1.1 200") {
            bail!(
                "SSE stream refused: {}",
                String::from_utf8_lossy(&buf[..read])
            );
        }
        answered += 1;
    }
    streams.truncate(answered);
    println!(
        "idle SSE streams: {} connected and asked in {:.2} s, all answered after {:.2} s",
        streams.len(),
        connected.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    Ok(streams)
}

pub(crate) fn connect(addr: &str) -> anyhow::Result<BufReader<TcpStream>> {
    let stream = TcpStream::connect_timeout(&addr.parse()?, IO_TIMEOUT)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    Ok(BufReader::new(stream))
}

/// Reads one response with a `content-length` body: (status, headers lowercased, body).
pub(crate) fn read_response(
    conn: &mut BufReader<TcpStream>,
) -> anyhow::Result<(u16, String, String)> {
    let (status, headers, length) = read_head_only(conn)?;
    let mut body = vec![0u8; length];
    conn.read_exact(&mut body)?;
    Ok((status, headers, String::from_utf8_lossy(&body).into_owned()))
}

pub(crate) fn read_head_only(
    conn: &mut BufReader<TcpStream>,
) -> anyhow::Result<(u16, String, usize)> {
    let mut status_line = String::new();
    if conn.read_line(&mut status_line)? == 0 {
        bail!("connection closed before a response");
    }
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

/// Starts `flue serve` on a free port and waits (bounded) for the address it prints on
/// stderr; a thread drains stderr for the server's whole life so it never blocks writing.
pub(crate) fn start(flue: &Path, root: &Path) -> anyhow::Result<Server> {
    let mut child = Command::new(flue)
        // The bench's own workspace.
        .env("FLUE_TRUST", "1")
        .args(["serve", "--root"])
        .arg(root)
        .args(["--port", "0"])
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
        for line in BufReader::new(stderr).lines() {
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
        Ok(addr) => Ok(Server { child, addr }),
        Err(err) => {
            stop_child(&mut child, Duration::from_secs(2));
            bail!("flue serve did not print its address within {READY_TIMEOUT:?} ({err})")
        }
    }
}

pub(crate) fn report(name: &str, samples: &mut [Duration]) {
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

pub(crate) fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from)
}

pub(crate) fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
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

/// The `Stream-Next-Offset` of a response's headers (as read by `read_response`).
pub(crate) fn next_offset(headers: &str) -> anyhow::Result<String> {
    Ok(headers
        .lines()
        .find_map(|line| line.strip_prefix("stream-next-offset: "))
        .context("no stream-next-offset")?
        .trim()
        .to_owned())
}

/// The head offset of the conversation at `path`, from a `HEAD` request.
pub(crate) fn head_offset(addr: &str, path: &str) -> anyhow::Result<String> {
    let mut conn = connect(addr)?;
    conn.get_mut()
        .write_all(format!("HEAD {path} HTTP/1.1\r\nhost: {addr}\r\n\r\n").as_bytes())?;
    let (_, headers, _) = read_head_only(&mut conn)?;
    next_offset(&headers)
}
