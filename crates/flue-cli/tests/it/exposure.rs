//! `flue dev` and `flue serve` as real processes on loopback, probed the way a web page or a
//! hostile client would: DNS rebinding (a `Host` that is not the server's), requests from
//! another site's `Origin`, form and text posts to every state-changing route, idle sockets
//! beyond `--max-connections`, one-byte-at-a-time header senders, and the settings refused at
//! start. Every probe is counted; the timeouts are the servers' own, set short by flags, and
//! the tests wait for conditions with generous deadlines.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::dev::{Dev, init_workspace};
use crate::serve::{Server, workspace};

/// Sends `head` (request line and headers; the blank line is added) and `body` on a fresh
/// connection; returns the status and the body.
fn raw(addr: &str, head: &str, body: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let request = format!("{head}\r\nconnection: close\r\n\r\n{body}");
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = Vec::new();
    // An SSE route answers headers and then streams: read what comes, stop at the timeout.
    let mut buf = [0u8; 8192];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                response.extend_from_slice(&buf[..n]);
                if response.starts_with(b"HTTP/1.1 200") && response.len() > 12 {
                    // Enough for a status check of a stream.
                    if String::from_utf8_lossy(&response).contains("text/event-stream") {
                        break;
                    }
                }
            }
            Err(err) if matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                break;
            }
            Err(err) => panic!("reading {head}: {err}"),
        }
    }
    let response = String::from_utf8_lossy(&response).into_owned();
    let status = response
        .get(9..12)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status for {head}: {response:?}"));
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// The error type of an envelope body.
fn kind(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|value| value["error"]["type"].as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("not an envelope: {body:?}"))
}

/// Counts probes and the ones refused as expected; reports every miss at the end.
#[derive(Default)]
struct Tally {
    tried: usize,
    refused: usize,
    misses: Vec<String>,
}

impl Tally {
    fn expect(&mut self, what: &str, got: (u16, String), status: u16, error: &str) {
        self.tried += 1;
        let (got_status, body) = got;
        if got_status == status && kind(&body) == error {
            self.refused += 1;
        } else {
            self.misses.push(format!("{what}: {got_status} {body}"));
        }
    }

    fn assert_all_refused(&self) {
        assert!(
            self.misses.is_empty() && self.tried == self.refused,
            "{} of {} probes were not refused:\n{}",
            self.tried - self.refused,
            self.tried,
            self.misses.join("\n")
        );
    }
}

/// The routes of a conversation: (method, path, body) for reading and state-changing ones.
fn conversation_routes(agent: &str, id: &str) -> (Vec<String>, Vec<(String, String)>) {
    let conv = format!("/agents/{agent}/{id}");
    let reading = vec![
        "/_flue/health".to_owned(),
        "/_flue/agents".to_owned(),
        conv.clone(),
        format!("{conv}?view=history"),
        format!("{conv}?view=updates&offset=-1&live=sse"),
        format!("{conv}/actions"),
        format!("{conv}/submissions/s1"),
        format!("{conv}/attachments/a1"),
    ];
    let message = r#"{"kind":"user","body":"run: id > pwned"}"#.to_owned();
    let changing = vec![
        (conv.clone(), message),
        (format!("{conv}/abort"), String::new()),
        (format!("{conv}/interrupt"), String::new()),
        (
            format!("{conv}/actions/a1"),
            r#"{"decision":"approve"}"#.to_owned(),
        ),
    ];
    (reading, changing)
}

/// Rebinding, foreign origins and simple posts against every route of `addr`.
fn probe_hostile_requests(addr: &str, reading: &[String], changing: &[(String, String)]) -> Tally {
    let port = addr.rsplit(':').next().unwrap();
    let mut tally = Tally::default();
    let evil_host = format!("evil.example:{port}");
    let json = "content-type: application/json";
    // DNS rebinding: the page's own name, on the server's port.
    for path in reading {
        let head = format!("GET {path} HTTP/1.1\r\nhost: {evil_host}");
        tally.expect(&head, raw(addr, &head, ""), 421, "host_not_allowed");
    }
    for (path, body) in changing {
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: {evil_host}\r\norigin: http://{evil_host}\r\n{json}\r\ncontent-length: {}",
            body.len()
        );
        tally.expect(&head, raw(addr, &head, body), 421, "host_not_allowed");
    }
    // Another site's page (the right host: the browser addresses the server directly).
    for origin in [
        "http://evil.example",
        "null",
        "http://localhost.evil.example",
    ] {
        for path in reading {
            let head = format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\norigin: {origin}");
            tally.expect(&head, raw(addr, &head, ""), 403, "origin_not_allowed");
        }
        for (path, body) in changing {
            let head = format!(
                "POST {path} HTTP/1.1\r\nhost: {addr}\r\norigin: {origin}\r\n{json}\r\ncontent-length: {}",
                body.len()
            );
            tally.expect(&head, raw(addr, &head, body), 403, "origin_not_allowed");
        }
    }
    // Simple requests (no preflight): form and text posts, with and without a body, from a
    // client that sends no Origin at all.
    for (path, body) in changing {
        for content_type in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
        ] {
            for sent in [body.as_str(), ""] {
                let head = format!(
                    "POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: {content_type}\r\ncontent-length: {}",
                    sent.len()
                );
                tally.expect(&head, raw(addr, &head, sent), 415, "unsupported_media_type");
            }
        }
    }
    tally
}

#[test]
fn flue_dev_serves_only_its_own_hosts_and_origin_and_refuses_simple_posts() {
    let (_dir, root) = init_workspace();
    let dev = Dev::start_with(&root, &["--allowed-host", "devbox.test"]);
    let addr = dev.addr.clone();
    let port = addr.rsplit(':').next().unwrap().to_owned();
    let (status, body) = raw(
        &addr,
        &format!("GET /_flue/agents HTTP/1.1\r\nhost: {addr}"),
        "",
    );
    assert_eq!(status, 200, "{body}");
    let agents: Value = serde_json::from_str(&body).unwrap();
    let agent = agents["agents"][0]["name"].as_str().unwrap().to_owned();

    let (mut reading, changing) = conversation_routes(&agent, "probe");
    reading.extend([
        "/".to_owned(),
        "/_flue/dev/console.js".to_owned(),
        "/_flue/dev/state".to_owned(),
        "/_flue/dev/conversations?q=probe".to_owned(),
        format!("/_flue/dev/transcript/{agent}/probe"),
        format!("/_flue/dev/live/{agent}/probe"),
    ]);
    let tally = probe_hostile_requests(&addr, &reading, &changing);
    eprintln!(
        "flue dev: {} hostile probes, {} refused",
        tally.tried, tally.refused
    );
    tally.assert_all_refused();
    assert!(tally.tried >= 90, "{}", tally.tried);

    // Nothing reached the conversation.
    let (status, body) = raw(
        &addr,
        &format!("GET /_flue/dev/transcript/{agent}/probe HTTP/1.1\r\nhost: {addr}"),
        "",
    );
    assert_eq!(status, 200, "{body}");
    let transcript: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(transcript["messages"], serde_json::json!([]), "{body}");

    // The refusal names the fix.
    let (_, body) = raw(
        &addr,
        &format!("GET / HTTP/1.1\r\nhost: evil.example:{port}"),
        "",
    );
    assert!(body.contains("--allowed-host"), "{body}");

    // What the console and its user do still works: the page by every loopback name and the
    // listed host, a same-origin JSON send, a same-origin bodiless abort (the console's).
    for host in [
        addr.clone(),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
        format!("devbox.test:{port}"),
    ] {
        let (status, body) = raw(&addr, &format!("GET / HTTP/1.1\r\nhost: {host}"), "");
        assert_eq!(status, 200, "{host}: {body}");
    }
    let message = r#"{"kind":"user","body":"hello"}"#;
    let head = format!(
        "POST /agents/{agent}/ok HTTP/1.1\r\nhost: localhost:{port}\r\norigin: http://localhost:{port}\r\ncontent-type: application/json\r\ncontent-length: {}",
        message.len()
    );
    let (status, body) = raw(&addr, &head, message);
    assert_eq!(status, 202, "{body}");
    let head = format!(
        "POST /agents/{agent}/ok/abort HTTP/1.1\r\nhost: {addr}\r\norigin: http://{addr}\r\ncontent-length: 0"
    );
    let (status, body) = raw(&addr, &head, "");
    assert_eq!(status, 200, "{body}");
}

#[test]
fn a_tokenless_flue_serve_refuses_rebinding_foreign_origins_and_simple_posts() {
    let workspace = workspace();
    let server = Server::start(
        workspace.root(),
        &["--cors-origin", "https://app.example.com"],
        &[],
    );
    let addr = server.addr().to_owned();
    let (reading, changing) = conversation_routes("plain", "probe");
    let tally = probe_hostile_requests(&addr, &reading, &changing);
    eprintln!(
        "flue serve: {} hostile probes, {} refused",
        tally.tried, tally.refused
    );
    tally.assert_all_refused();

    // A listed origin may call; the SDK's bodiless abort without Origin still works.
    let message = r#"{"kind":"user","body":"hello"}"#;
    let head = format!(
        "POST /agents/plain/cors HTTP/1.1\r\nhost: {addr}\r\norigin: https://app.example.com\r\ncontent-type: application/json\r\ncontent-length: {}",
        message.len()
    );
    let (status, body) = raw(&addr, &head, message);
    assert_eq!(status, 202, "{body}");
    let (status, body) = raw(
        &addr,
        &format!("POST /agents/plain/cors/abort HTTP/1.1\r\nhost: {addr}\r\ncontent-length: 0"),
        "",
    );
    assert_eq!(status, 200, "{body}");
}

#[test]
fn server_settings_that_cannot_be_safe_are_refused_at_start_and_bearer_is_case_insensitive() {
    let workspace = workspace();
    let refusals: [(&[&str], &str); 8] = [
        (&["--cors-origin", "*"], "'*' is not supported"),
        (&["--cors-origin", "app.example.com"], "is not an origin"),
        (&["--host", "0.0.0.0", "--token", "x"], "too easy to guess"),
        // Long enough for a length rule, guessed at once.
        (
            &["--host", "0.0.0.0", "--token", "password12345678"],
            "openssl rand -hex 32",
        ),
        (
            &["--host", "0.0.0.0", "--token", "aaaaaaaaaaaaaaaa"],
            "too easy to guess",
        ),
        (&["--token", "   "], "blank"),
        (&["--token", "two words"], "whitespace"),
        (&["--allowed-host", "a b"], "is not a host"),
    ];
    for (args, needle) in refusals {
        let (exited, stderr) = serve_until_exit(workspace.root(), args);
        assert!(exited, "{args:?} started serving: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }

    let server = Server::start(workspace.root(), &["--token", "t0ps3cret"], &[]);
    let addr = server.addr();
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let head = format!(
            "GET /_flue/agents HTTP/1.1\r\nhost: {addr}\r\nauthorization: {scheme} t0ps3cret"
        );
        let (status, body) = raw(addr, &head, "");
        assert_eq!(status, 200, "{scheme}: {body}");
    }
    // A token server serves any host (the page cannot add the token).
    let head =
        "GET /_flue/agents HTTP/1.1\r\nhost: flue.internal\r\nauthorization: Bearer t0ps3cret";
    assert_eq!(raw(addr, head, "").0, 200);
    // A long request target is refused with the envelope.
    let long = "a".repeat(10_000);
    let (status, body) = raw(
        addr,
        &format!("GET /_flue/health?{long} HTTP/1.1\r\nhost: {addr}"),
        "",
    );
    assert_eq!(
        (status, kind(&body).as_str()),
        (414, "uri_too_long"),
        "{body}"
    );
}

/// Runs `flue serve --port 0 ARGS`; whether it exited with a failure before it served (else it
/// is killed once it prints its address, or after 60 s), and its stderr.
fn serve_until_exit(root: &std::path::Path, args: &[&str]) -> (bool, String) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("flue"))
        .env("FLUE_TRUST", "1")
        .args(["serve", "--port", "0", "--root"])
        .arg(root)
        .args(args)
        .env_remove("FLUE_TOKEN")
        .env_remove("FLUE_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pipe = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut stderr = String::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => {
                let serving = line.contains("listening on");
                stderr.push_str(&line);
                stderr.push('\n');
                if serving {
                    break;
                }
            }
            // The pipe closed: the process ended.
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                let status = child.wait().unwrap();
                return (!status.success(), stderr);
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => break,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    (false, stderr)
}

/// Whether the server has closed `stream` (EOF or reset), waiting at most until `deadline`.
fn closed_by(stream: &mut TcpStream, deadline: Instant) -> bool {
    let mut buf = [0u8; 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        stream.set_read_timeout(Some(left)).unwrap();
        match stream.read(&mut buf) {
            Ok(0) => return true,
            // A 408 the server wrote before closing: keep reading to the end.
            Ok(_) => {}
            Err(err) if matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false;
            }
            Err(_) => return true,
        }
    }
}

#[test]
fn idle_and_slow_sockets_cannot_hold_flue_serve_and_streams_stay_open() {
    let workspace = workspace();
    let server = Server::start(
        workspace.root(),
        &["--max-connections", "50", "--header-timeout-ms", "1500"],
        &[],
    );
    let addr = server.addr().to_owned();

    // An SSE reader, open before the flood: it is not idle (its request is in flight).
    let admission = crate::serve::post_message(&addr, "/agents/plain/stream-1", "hello");
    let mut sse = TcpStream::connect(&addr).unwrap();
    let offset = admission["offset"].as_str().unwrap();
    write!(
        sse,
        "GET /agents/plain/stream-1?view=updates&offset={offset}&live=sse HTTP/1.1\r\nhost: {addr}\r\n\r\n"
    )
    .unwrap();
    // Its response head has arrived: the request is in flight.
    sse.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        sse.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );

    // More idle sockets than slots.
    let mut idle: Vec<TcpStream> = (0..60)
        .map(|_| TcpStream::connect(&addr).unwrap())
        .collect();
    let started = Instant::now();
    let (status, body) = raw(
        &addr,
        &format!("GET /_flue/health HTTP/1.1\r\nhost: {addr}"),
        "",
    );
    let waited = started.elapsed();
    assert_eq!(status, 200, "{body}");
    // Within the header timeout, with a generous margin for a busy machine.
    assert!(waited < Duration::from_secs(10), "health took {waited:?}");

    // Every idle socket is closed: evicted for a newer connection or timed out.
    let deadline = Instant::now() + Duration::from_secs(20);
    let closed = idle
        .iter_mut()
        .map(|s| closed_by(s, deadline))
        .filter(|closed| *closed)
        .count();
    eprintln!("idle sockets: 60 opened, {closed} closed by the server");
    assert_eq!(closed, 60);

    // One-byte-at-a-time header senders are closed before their head is complete.
    let senders: Vec<_> = (0..20)
        .map(|_| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let mut stream = TcpStream::connect(&addr).unwrap();
                let head = format!(
                    "GET /_flue/health HTTP/1.1\r\nhost: {addr}\r\nx-slow: {}\r\n\r\n",
                    "a".repeat(300)
                );
                let deadline = Instant::now() + Duration::from_secs(30);
                for byte in head.bytes() {
                    if Instant::now() > deadline || stream.write_all(&[byte]).is_err() {
                        return true;
                    }
                    stream
                        .set_read_timeout(Some(Duration::from_millis(100)))
                        .unwrap();
                    let mut buf = [0u8; 256];
                    match stream.read(&mut buf) {
                        Ok(0) => return true,
                        Ok(_) => {}
                        Err(err)
                            if matches!(
                                err.kind(),
                                ErrorKind::WouldBlock | ErrorKind::TimedOut
                            ) => {}
                        Err(_) => return true,
                    }
                }
                false
            })
        })
        .collect();
    let closed = senders
        .into_iter()
        .map(|sender| sender.join().unwrap())
        .filter(|closed| *closed)
        .count();
    eprintln!("slow header senders: 20 tried, {closed} closed before their head was complete");
    assert_eq!(closed, 20);

    // The SSE stream outlived several header timeouts and still carries data.
    sse.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let mut buf = [0u8; 4096];
    let mut got = 0;
    loop {
        match sse.read(&mut buf) {
            Ok(0) => panic!("the SSE stream was closed"),
            Ok(n) => got += n,
            Err(err) if matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => break,
            Err(err) => panic!("the SSE stream failed: {err}"),
        }
    }
    eprintln!("SSE: {got} bytes after its head while the sockets were probed");
    let (status, _) = raw(
        &addr,
        &format!("GET /_flue/health HTTP/1.1\r\nhost: {addr}"),
        "",
    );
    assert_eq!(status, 200);
    let (status, body) = raw(
        &addr,
        &format!(
            "POST /agents/plain/stream-1 HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: 30"
        ),
        r#"{"kind":"user","body":"again"}"#,
    );
    assert_eq!(status, 202, "{body}");
    let mut text = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !text.contains("Hello from the fake model") {
        assert!(
            Instant::now() < deadline,
            "the SSE stream saw no reply: {text}"
        );
        if let Ok(n) = sse.read(&mut buf) {
            assert!(n > 0, "the SSE stream was closed");
            text.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    }
}

#[test]
fn idle_sockets_beyond_the_limit_do_not_lock_out_the_console() {
    let (_dir, root) = init_workspace();
    let dev = Dev::start_with(
        &root,
        &["--max-connections", "20", "--header-timeout-ms", "1500"],
    );
    let addr = dev.addr.clone();
    let mut idle: Vec<TcpStream> = (0..40)
        .map(|_| TcpStream::connect(&addr).unwrap())
        .collect();
    let started = Instant::now();
    let (status, body) = raw(&addr, &format!("GET / HTTP/1.1\r\nhost: {addr}"), "");
    assert_eq!(status, 200, "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let closed = idle
        .iter_mut()
        .map(|s| closed_by(s, deadline))
        .filter(|closed| *closed)
        .count();
    eprintln!(
        "flue dev idle sockets: 40 opened, {closed} closed; log:\n{}",
        dev.log()
    );
    assert_eq!(closed, 40);
}

#[test]
fn heads_the_http_layer_cannot_parse_are_answered_with_the_envelope() {
    let workspace = workspace();
    let server = Server::start(workspace.root(), &[], &[]);
    let addr = server.addr().to_owned();
    let mut tally = Tally::default();
    // Targets past the guard's 8 KiB and past what the HTTP layer parses at all (65,534 bytes).
    for len in [10_000, 70_000, 200_000] {
        let head = format!(
            "GET /_flue/health?{} HTTP/1.1\r\nhost: {addr}",
            "a".repeat(len)
        );
        tally.expect(
            &format!("target {len}"),
            raw(&addr, &head, ""),
            414,
            "uri_too_long",
        );
    }
    // Heads that do not parse.
    for head in [
        format!("GET /_flue/health HTTP/9.9\r\nhost: {addr}"),
        format!("G\u{1}T /_flue/health HTTP/1.1\r\nhost: {addr}"),
        format!("GET /_flue/health HTTP/1.1\r\nhost: {addr}\r\nno colon here"),
    ] {
        tally.expect(
            &format!("{head:?}"),
            raw(&addr, &head, ""),
            400,
            "invalid_request",
        );
    }
    // On a keep-alive connection, after a served request.
    let mut stream = TcpStream::connect(&addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(stream, "GET /_flue/health HTTP/1.1\r\nhost: {addr}\r\n\r\n").unwrap();
    let mut first = Vec::new();
    let mut byte = [0u8; 1];
    while !first.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte).unwrap();
        first.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&first).to_lowercase();
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length: "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).unwrap();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    write!(
        stream,
        "GET /_flue/health?{} HTTP/1.1\r\nhost: {addr}\r\n\r\n",
        "b".repeat(70_000)
    )
    .unwrap();
    let mut second = Vec::new();
    stream.read_to_end(&mut second).unwrap();
    let second = String::from_utf8_lossy(&second).into_owned();
    let status = second
        .get(9..12)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let body = second
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    assert!(
        second
            .to_lowercase()
            .contains("content-type: application/json"),
        "{second}"
    );
    tally.expect(
        "keep-alive target 70000",
        (status, body),
        414,
        "uri_too_long",
    );
    eprintln!(
        "unparsable heads: {} tried, {} answered with the envelope",
        tally.tried, tally.refused
    );
    tally.assert_all_refused();
    // The server still serves.
    assert_eq!(
        raw(
            &addr,
            &format!("GET /_flue/health HTTP/1.1\r\nhost: {addr}"),
            ""
        )
        .0,
        200
    );
}
