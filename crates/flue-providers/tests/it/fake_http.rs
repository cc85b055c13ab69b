//! A scripted HTTP/1.1 server on loopback for wire-level provider tests.
//!
//! It answers requests in arrival order with scripted [`Reply`]s — whole responses, responses
//! cut off mid-body, connections closed without an answer, servers that go silent before or
//! during the answer, endless streams — and records every request
//! (path, headers, JSON body). Each response closes its connection, so every attempt of a
//! client is a fresh request the script sees.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One scripted answer.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A whole response; the body ends when the connection closes.
    Full {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    /// A 200 event stream sent with chunked encoding, cut off after `body` (no final chunk).
    Cut { body: String },
    /// The connection is closed after the request is read, with no response at all.
    Close,
    /// The request is read and never answered; the connection stays open until the client
    /// closes it.
    Silent,
    /// A 200 event stream (chunked) that sends `body`, then stays silent with the connection
    /// open until the client closes it.
    Stall { body: String },
    /// A 200 event stream (chunked) that sends `prefix`, then `frame` every `every`, until the
    /// client goes away: a stream kept alive that never finishes.
    Trickle {
        prefix: String,
        frame: String,
        every: std::time::Duration,
    },
    /// A 200 event stream (chunked) that sends `body` in pieces of the given sizes, in turn
    /// and again from the first, each piece written and flushed on its own (a piece may end
    /// inside a line or a UTF-8 character): recorded bytes arriving in irregular,
    /// deterministic chunks. Cut off before the final chunk when `cut`. See
    /// [`Reply::pieces`] and [`Reply::seeded_pieces`].
    Pieces {
        body: Vec<u8>,
        sizes: Vec<usize>,
        cut: bool,
    },
    /// A 200 event stream (chunked) that sends `prefix`, then `frame` again and again,
    /// `total_bytes` in all, or until the client goes away; then ends the body properly.
    Endless {
        prefix: String,
        frame: String,
        total_bytes: usize,
    },
}

impl Reply {
    /// A 200 event stream.
    pub fn sse(body: String) -> Self {
        Self::Full {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            body,
        }
    }

    /// A JSON error (or any JSON) with a status.
    pub fn json(status: u16, body: &Value) -> Self {
        Self::Full {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.to_string(),
        }
    }

    /// `body` sent whole in pieces of `sizes` (see [`Reply::Pieces`]).
    pub fn pieces(body: impl Into<Vec<u8>>, sizes: &[usize]) -> Self {
        Self::Pieces {
            body: body.into(),
            sizes: sizes.to_vec(),
            cut: false,
        }
    }

    /// `body` in pieces of 1 to 97 bytes drawn from `seed` (the same seed always cuts the
    /// same way); cut off before the final chunk when `cut`.
    pub fn seeded_pieces(body: Vec<u8>, seed: u64, cut: bool) -> Self {
        let sizes = split(&body, seed).iter().map(|piece| piece.len()).collect();
        Self::Pieces { body, sizes, cut }
    }

    /// Adds a response header.
    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        if let Self::Full { headers, .. } = &mut self {
            headers.push((name.into(), value.into()));
        }
        self
    }
}

/// A request as the server received it.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub path: String,
    /// Header names lowercased.
    pub headers: BTreeMap<String, String>,
    pub body: Value,
}

/// The running server; stops when dropped.
pub struct FakeServer {
    pub url: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeServer {
    /// Starts a server on a random loopback port answering with `replies` in order (and with
    /// a 599 error once they run out, which fails the test visibly).
    pub async fn start(replies: Vec<Reply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(replies.into_iter().rev().collect::<Vec<_>>()));
        let recorded = Arc::clone(&requests);
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let recorded = Arc::clone(&recorded);
                let script = Arc::clone(&script);
                tokio::spawn(async move {
                    serve(stream, &recorded, &script).await;
                });
            }
        });
        Self {
            url,
            requests,
            task,
        }
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

async fn serve(mut stream: TcpStream, recorded: &Mutex<Vec<Recorded>>, script: &Mutex<Vec<Reply>>) {
    let Some(request) = read_request(&mut stream).await else {
        return;
    };
    // Record and pick the reply in one critical section, so order matches.
    let reply = {
        let mut recorded = recorded.lock().unwrap();
        recorded.push(request);
        script.lock().unwrap().pop()
    };
    let reply = reply.unwrap_or_else(|| {
        Reply::json(
            599,
            &serde_json::json!({"error": {"message": "the fake server has no reply scripted"}}),
        )
    });
    let bytes = match reply {
        Reply::Silent => {
            hold_open(&mut stream).await;
            return;
        }
        Reply::Stall { body } => {
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                 transfer-encoding: chunked\r\nconnection: close\r\n\r\n{:x}\r\n{body}\r\n",
                body.len()
            );
            if stream.write_all(head.as_bytes()).await.is_ok() {
                hold_open(&mut stream).await;
            }
            return;
        }
        Reply::Trickle {
            prefix,
            frame,
            every,
        } => {
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                 transfer-encoding: chunked\r\nconnection: close\r\n\r\n{:x}\r\n{prefix}\r\n",
                prefix.len()
            );
            if stream.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            let chunk = format!("{:x}\r\n{frame}\r\n", frame.len());
            loop {
                tokio::time::sleep(every).await;
                if stream.write_all(chunk.as_bytes()).await.is_err() {
                    return;
                }
            }
        }
        Reply::Endless {
            prefix,
            frame,
            total_bytes,
        } => {
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                 transfer-encoding: chunked\r\nconnection: close\r\n\r\n{:x}\r\n{prefix}\r\n",
                prefix.len()
            );
            if stream.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            let chunk = format!("{:x}\r\n{frame}\r\n", frame.len());
            let mut sent = 0;
            while sent < total_bytes {
                if stream.write_all(chunk.as_bytes()).await.is_err() {
                    return;
                }
                sent += frame.len();
            }
            let _ = stream.write_all(b"0\r\n\r\n").await;
            let _ = stream.shutdown().await;
            return;
        }
        Reply::Pieces { body, sizes, cut } => {
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                        transfer-encoding: chunked\r\nconnection: close\r\n\r\n";
            if stream.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            let mut rest = body.as_slice();
            for size in sizes.iter().copied().filter(|size| *size > 0).cycle() {
                if rest.is_empty() {
                    break;
                }
                let (piece, tail) = rest.split_at(size.min(rest.len()));
                rest = tail;
                let mut chunk = format!("{:x}\r\n", piece.len()).into_bytes();
                chunk.extend_from_slice(piece);
                chunk.extend_from_slice(b"\r\n");
                if stream.write_all(&chunk).await.is_err() || stream.flush().await.is_err() {
                    return;
                }
                tokio::task::yield_now().await;
            }
            if !cut {
                let _ = stream.write_all(b"0\r\n\r\n").await;
            }
            let _ = stream.shutdown().await;
            return;
        }
        Reply::Full {
            status,
            headers,
            body,
        } => {
            let mut head = format!("HTTP/1.1 {status} Scripted\r\nconnection: close\r\n");
            for (name, value) in headers {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            format!("{head}\r\n{body}").into_bytes()
        }
        Reply::Cut { body } => format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\
             connection: close\r\n\r\n{:x}\r\n{body}\r\n",
            body.len()
        )
        .into_bytes(),
        Reply::Close => Vec::new(),
    };
    let _ = stream.write_all(&bytes).await;
    let _ = stream.shutdown().await;
}

/// Reads (and drops) whatever the client sends until it closes the connection.
async fn hold_open(stream: &mut TcpStream) {
    let mut sink = [0u8; 4096];
    while let Ok(n) = stream.read(&mut sink).await {
        if n == 0 {
            return;
        }
    }
}

async fn read_request(stream: &mut TcpStream) -> Option<Recorded> {
    let mut buffer = Vec::new();
    let head_end = loop {
        if let Some(end) = buffer.windows(4).position(|window| window == b"\r\n\r\n") {
            break end;
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(buffer[..head_end].to_vec()).ok()?;
    let mut lines = head.split("\r\n");
    let path = lines.next()?.split(' ').nth(1)?.to_owned();
    let headers: BTreeMap<String, String> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let length: usize = headers
        .get("content-length")
        .and_then(|value| value.parse().ok())
        .unwrap_or(0);
    let mut body = buffer[head_end + 4..].to_vec();
    while body.len() < length {
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Recorded {
        path,
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    })
}

/// `body` cut into pieces of 1 to 97 bytes, the sizes drawn from `seed` (a xorshift
/// generator: the same seed always gives the same pieces).
fn split(body: &[u8], seed: u64) -> Vec<&[u8]> {
    let mut state = seed | 1;
    let mut pieces = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let size = usize::try_from(state % 97).unwrap() + 1;
        let (piece, tail) = rest.split_at(size.min(rest.len()));
        pieces.push(piece);
        rest = tail;
    }
    pieces
}
