//! Runs the provider example as a user would, twice on one database, against a local server
//! that replays a stream the Anthropic Messages API really sent (flue-providers'
//! `tests/corpus/anthropic/text.jsonl`; its provenance and licence are in that folder's
//! PROVENANCE.md). Checks the reply, the hook's lines, the request the provider sent, and that
//! the second run continued the conversation stored in SQLite by the first.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail loudly by design"
)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::mpsc;
use std::thread;

use pretty_assertions::assert_eq;
use serde_json::Value;

/// The recorded reply's text, as the stream's deltas spell it.
const REPLY: &str = "Hello! I'm doing well, thank you for asking. How are you doing today? Is \
                     there anything I can help you with?";

/// The recorded payloads framed as the API sends them: `event: <type>`, `data: <payload>`.
fn recorded_stream() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../crates/flue-providers/tests/corpus/anthropic/text.jsonl");
    let mut body = String::new();
    for line in std::fs::read_to_string(path).unwrap().lines() {
        let payload: Value = serde_json::from_str(line).unwrap();
        let kind = payload["type"].as_str().unwrap();
        body.push_str(&format!("event: {kind}\ndata: {line}\n\n"));
    }
    body
}

/// A server on a loopback port answering `n_requests` POSTs with `stream`; it sends each
/// request's path, headers and JSON body to the returned receiver.
fn replay_server(stream: String, n_requests: usize) -> (String, mpsc::Receiver<(String, Value)>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base_url = format!("http://{}", listener.local_addr().unwrap());
    let (sender, requests) = mpsc::channel();
    thread::spawn(move || {
        for connection in listener.incoming().take(n_requests) {
            let mut connection = connection.unwrap();
            let mut reader = BufReader::new(connection.try_clone().unwrap());
            let mut head = String::new();
            let mut content_length = 0;
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                if let Some((name, value)) = line.split_once(':')
                    && name.eq_ignore_ascii_case("content-length")
                {
                    content_length = value.trim().parse().unwrap();
                }
                if line == "\r\n" {
                    break;
                }
                head.push_str(&line);
            }
            let mut body = vec![0; content_length];
            reader.read_exact(&mut body).unwrap();
            sender
                .send((head, serde_json::from_slice(&body).unwrap()))
                .unwrap();
            let response = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{stream}",
                stream.len()
            );
            connection.write_all(response.as_bytes()).unwrap();
        }
    });
    (base_url, requests)
}

fn run_example(base_url: &str, db: &Path, message: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flue-example-provider"))
        .arg(db)
        .arg(message)
        .env("ANTHROPIC_API_KEY", "sk-ant-test")
        .env("ANTHROPIC_BASE_URL", base_url)
        .output()
        .unwrap()
}

#[test]
fn the_example_talks_to_anthropic_keeps_the_conversation_in_sqlite_and_runs_its_hook() {
    let (base_url, requests) = replay_server(recorded_stream(), 2);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("conversations.db");

    let first = run_example(&base_url, &db, "Hello, how are you?");
    let stderr = String::from_utf8(first.stderr).unwrap();
    assert!(first.status.success(), "{stderr}");
    assert_eq!(
        String::from_utf8(first.stdout).unwrap(),
        format!("{REPLY}\n")
    );
    assert!(
        stderr.contains("hook: model call 1 of example to anthropic/claude-sonnet-4-5"),
        "{stderr}"
    );
    assert!(stderr.contains("hook: assistant replied"), "{stderr}");
    let (head, body) = requests.recv().unwrap();
    assert!(head.starts_with("POST /v1/messages "), "{head}");
    assert!(head.contains("x-api-key: sk-ant-test"), "{head}");
    assert_eq!(body["model"], "claude-sonnet-4-5");
    assert_eq!(body["stream"], true);
    assert_eq!(body["messages"].as_array().unwrap().len(), 1);

    // The second run opens the same file: the model sees the first exchange.
    let second = run_example(&base_url, &db, "And what is new?");
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let (_, body) = requests.recv().unwrap();
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3, "{body}");
    assert_eq!(messages[1]["role"], "assistant");
    assert_eq!(messages[1]["content"][0]["text"], REPLY);
    assert_eq!(messages[2]["content"][0]["text"], "And what is new?");
}
