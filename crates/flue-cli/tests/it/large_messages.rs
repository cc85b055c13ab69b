//! Large messages sent at once to a real `flue serve` over HTTP: each is stored about twice
//! (its submission and its session record, not a third time in the stream batch that
//! admitted it), each settles and reads back whole, and the in-flight body budget
//! (`--inflight-body-mib`) still bounds how many run at a time. What is asserted is what the
//! server decides, not how fast it is: no timing, no memory figure of this machine.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::serve::{Server, snapshot, workspace};

/// Bytes of each message's text.
const MESSAGE_BYTES: usize = 6 * 1024 * 1024;
/// How many are sent at once, each to a conversation of its own.
const MESSAGES: usize = 4;
/// The budget: room for two of them at a time.
const BUDGET_MIB: &str = "13";

/// The text of message `idx`: lines that name it, so that a mix-up shows.
fn text_of(idx: usize) -> String {
    let line = format!("message {idx} says hello to the store, once and whole.\n");
    line.repeat(MESSAGE_BYTES / line.len())
}

/// POSTs `body` (JSON) and returns (status, body); waits as long as the server makes it wait.
fn post(addr: &str, path: &str, body: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(600)))
        .unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body.as_bytes()).unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    let response = String::from_utf8_lossy(&response).into_owned();
    let status = response[9..12].parse().unwrap();
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// Bytes of the SQLite store that hold data (its pages less the free ones), after moving the
/// write-ahead log into the file. Free pages are reused by the next writes.
fn used_bytes(db: &Path) -> u64 {
    let connection = rusqlite::Connection::open(db).unwrap();
    connection
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    let pragma = |name: &str| -> u64 {
        connection
            .query_row(&format!("PRAGMA {name}"), [], |row| row.get::<_, i64>(0))
            .unwrap()
            .try_into()
            .unwrap()
    };
    (pragma("page_count") - pragma("freelist_count")) * pragma("page_size")
}

/// The serve workspace with an agent `large` whose model reads a 6 MiB message (the scripted
/// model estimates a token per four characters; its default window is 128,000 tokens).
fn large_workspace() -> crate::Workspace {
    let workspace = workspace();
    std::fs::write(
        workspace.root().join("agents/large.md"),
        "---\ndescription: Reads long messages\nmodel: scripted/scripts/large.json\n---\n\
         You read everything.\n",
    )
    .unwrap();
    std::fs::write(
        workspace.root().join("scripts/large.json"),
        r#"{"model": {"context_window": 100000000},
            "rules": [{"reply": {"text": "Read it all."}}]}"#,
    )
    .unwrap();
    workspace
}

#[test]
fn large_messages_at_once_are_stored_twice_settle_whole_and_keep_to_the_budget() {
    let workspace = large_workspace();
    let db = workspace.root().join(".flue/flue.db");
    // The store exists once a first, small message went through.
    let server = Server::start(workspace.root(), &["--inflight-body-mib", BUDGET_MIB], &[]);
    crate::serve::post_message(server.addr(), "/agents/large/warm-up", "hello");
    let deadline = Instant::now() + Duration::from_secs(600);
    while snapshot(server.addr(), "/agents/large/warm-up")["settlements"]
        .as_array()
        .is_none_or(Vec::is_empty)
    {
        assert!(Instant::now() < deadline, "the warm-up did not settle");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(server);
    let before = used_bytes(&db);

    let server = Server::start(workspace.root(), &["--inflight-body-mib", BUDGET_MIB], &[]);
    let addr = server.addr().to_owned();
    let senders: Vec<_> = (0..MESSAGES)
        .map(|idx| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let body = json!({"kind": "user", "body": text_of(idx)}).to_string();
                let path = format!("/agents/large/m-{idx}");
                let mut busy = 0;
                loop {
                    let (status, response) = post(&addr, &path, &body);
                    match status {
                        202 => {
                            let receipt: Value = serde_json::from_str(&response).unwrap();
                            return (receipt, busy);
                        }
                        // Waited its 30 s for room: the client tries again.
                        503 => busy += 1,
                        _ => panic!("message {idx}: {status} {response}"),
                    }
                }
            })
        })
        .collect();
    let receipts: Vec<(Value, u32)> = senders
        .into_iter()
        .map(|sender| sender.join().unwrap())
        .collect();

    // Every message settles and reads back whole, in its own conversation.
    for idx in 0..MESSAGES {
        let path = format!("/agents/large/m-{idx}");
        let state = loop {
            let state = snapshot(&addr, &path);
            if state["settlements"]
                .as_array()
                .is_some_and(|settled| !settled.is_empty())
            {
                break state;
            }
            assert!(
                Instant::now() < deadline,
                "message {idx} did not settle: {}",
                server.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        assert_eq!(
            state["settlements"][0]["outcome"], "completed",
            "message {idx}: {}",
            state["settlements"]
        );
        let sent: Vec<&str> = state["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|message| message["role"] == "user")
            .flat_map(|message| message["parts"].as_array().unwrap())
            .filter_map(|part| part["text"].as_str())
            .collect();
        assert!(
            sent == [text_of(idx).as_str()],
            "message {idx} reads back as {} text parts of {:?} bytes",
            sent.len(),
            sent.iter().map(|text| text.len()).collect::<Vec<_>>()
        );
    }
    drop(server);

    // The budget bounded how many were admitted and not yet settled at any time: each holds
    // its share from before its admission until after its settlement.
    let store = rusqlite::Connection::open(&db).unwrap();
    let mut spans: Vec<(i64, i64)> = store
        .prepare(
            "SELECT accepted_at, json_extract(settlement, '$.settled_at') FROM submissions
             WHERE instance_id LIKE 'large:m-%'",
        )
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    drop(store);
    assert_eq!(spans.len(), MESSAGES, "one submission per message");
    spans.sort_unstable();
    let most_at_once = spans
        .iter()
        .map(|(start, _)| {
            spans
                .iter()
                .filter(|(other_start, other_end)| other_start <= start && start < other_end)
                .count()
        })
        .max()
        .unwrap();
    assert!(
        most_at_once <= 2,
        "{most_at_once} large messages ran at once under a budget for two: {spans:?} \
         (receipts {receipts:?})"
    );

    // Each message is on disk about twice: its submission and its session record.
    let grown = used_bytes(&db) - before;
    let sent = (MESSAGES * MESSAGE_BYTES) as u64;
    assert!(
        grown <= sent * 2 + sent / 5,
        "the store grew by {grown} bytes for {sent} bytes of messages ({:.2} times)",
        grown as f64 / sent as f64
    );
}
