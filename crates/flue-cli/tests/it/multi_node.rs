//! Several `flue serve` processes on one Postgres database (`--store postgres://...`): any node
//! admits, exactly one runs a conversation at a time, a SIGKILLed node's conversations move to
//! the others, and a client following a stream on one node sees the reply another node is
//! producing. Checked against the database itself (every stream batch, submission and record).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::Workspace;
use crate::pg_server::{fresh_database, psql};
use crate::serve::Server;

/// The password variable of the store URL: expanded by `flue serve`, never printed.
const PASSWORD_VAR: &str = "FLUE_TEST_PG_PASSWORD";
const PASSWORD: &str = "pg-secret-3f9a1c";

/// Agents `count` (one bash call per message that appends to runs.log), `plain` (answers at
/// once) and `slow` (a tool call that takes a moment, so its reply is produced while a client
/// watches).
fn workspace() -> Workspace {
    Workspace::new(&[
        (
            "flue.toml",
            "[defaults]\nmodel = \"scripted/scripts/count.json\"\n",
        ),
        (
            "agents/count.md",
            "---\ndescription: Counts its tool runs\nmodel: scripted/scripts/count.json\n\
             tools: [bash]\nsandbox: local\n---\nYou count.\n",
        ),
        (
            "agents/plain.md",
            "---\ndescription: Answers at once\nmodel: scripted/scripts/plain.json\n---\nYou answer.\n",
        ),
        (
            "scripts/plain.json",
            r#"{"rules": [{"reply": {"text": "Hello from the fake model."}}]}"#,
        ),
        (
            "agents/slow.md",
            "---\ndescription: Takes a moment\nmodel: scripted/scripts/slow.json\n\
             tools: [bash]\nsandbox: local\n---\nYou take a moment.\n",
        ),
        (
            "scripts/count.json",
            r#"{"rules": [
  {"when": {"tool_result": "bash"}, "reply": {"text": "Counted: {{tool_result}}"}},
  {"reply": {"text": "Counting.", "tool_calls": [{"name": "bash", "input": {"command": "echo run >> runs.log; echo counted"}}]}}
]}"#,
        ),
        (
            "scripts/slow.json",
            r#"{"rules": [
  {"when": {"tool_result": "bash"}, "reply": {"text": "Slow answer: {{tool_result}}"}},
  {"reply": {"text": "Thinking it over.", "tool_calls": [{"name": "bash", "input": {"command": "sleep 0.3; echo pondered"}}]}}
]}"#,
        ),
    ])
}

/// The store URL as an operator writes it: the password comes from the environment.
fn store_arg(database_url: &str) -> String {
    let rest = database_url
        .strip_prefix("postgres://flue@")
        .unwrap_or_else(|| panic!("unexpected test database URL {database_url}"));
    format!("postgres://flue:${{{PASSWORD_VAR}}}@{rest}")
}

fn start_node(root: &Path, store: &str) -> Server {
    Server::start(
        root,
        &["--store", store, "--lease-ms", "3000"],
        &[(PASSWORD_VAR, PASSWORD)],
    )
}

/// One request on a fresh connection; `None` when the node is gone or answers badly.
fn try_http(addr: &str, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .ok()?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.get(9..12)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.to_owned();
    Some((status, body))
}

/// A tiny deterministic generator (no dependency for one test).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % bound
    }
}

#[test]
fn three_nodes_under_sigkill_settle_every_submission_once_without_interleaving() {
    let workspace = workspace();
    let database = fresh_database();
    let store = store_arg(&database);
    let root = workspace.root().to_owned();
    let nodes: Arc<Mutex<Vec<Server>>> = Arc::new(Mutex::new(
        (0..3).map(|_| start_node(&root, &store)).collect(),
    ));
    let addrs = |nodes: &Mutex<Vec<Server>>| -> Vec<String> {
        nodes
            .lock()
            .unwrap()
            .iter()
            .map(|node| node.addr().to_owned())
            .collect()
    };
    let conversations = 100;
    let per_conversation = 10;
    let senders_done = Arc::new(AtomicBool::new(false));

    // Chaos: SIGKILL a random node every 1 to 2 s and start a new one in its place.
    let chaos = {
        let nodes = Arc::clone(&nodes);
        let done = Arc::clone(&senders_done);
        let (root, store) = (root.clone(), store.clone());
        std::thread::spawn(move || {
            let mut rng = Lcg(0x5eed ^ u64::from(std::process::id()));
            let mut kills = 0;
            while !done.load(Ordering::Acquire) || kills < 3 {
                std::thread::sleep(Duration::from_millis(1_000 + rng.below(1_000)));
                let victim = usize::try_from(rng.below(3)).unwrap();
                nodes.lock().unwrap()[victim].kill9();
                kills += 1;
                let replacement = start_node(&root, &store);
                let old = std::mem::replace(&mut nodes.lock().unwrap()[victim], replacement);
                // Its log, for a failure message; the process is already dead.
                drop(old);
            }
            kills
        })
    };

    // Senders: every message goes to a random node; refused or cut-off posts are retried
    // elsewhere (such a post may have been admitted anyway; it must settle once too).
    let acknowledged: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(Vec::new()));
    let senders: Vec<_> = (0..4)
        .map(|worker| {
            let nodes = Arc::clone(&nodes);
            let acknowledged = Arc::clone(&acknowledged);
            std::thread::spawn(move || {
                let mut rng = Lcg(worker as u64 + 7);
                for round in 0..per_conversation {
                    for conv in (worker..conversations).step_by(4) {
                        let body = json!({"kind": "user", "body": format!("m{round}")}).to_string();
                        // One conversation in five runs a tool (counted); the others reply
                        // at once, which keeps the run short on two cores.
                        let agent = if conv % 5 == 0 { "count" } else { "plain" };
                        let path = format!("/agents/{agent}/c{conv}");
                        let deadline = Instant::now() + Duration::from_secs(60);
                        loop {
                            let addrs = addrs(&nodes);
                            let addr = &addrs[usize::try_from(rng.below(3)).unwrap()];
                            if let Some((202, body)) = try_http(addr, "POST", &path, &body) {
                                let receipt: Value = serde_json::from_str(&body).unwrap();
                                acknowledged
                                    .lock()
                                    .unwrap()
                                    .push(receipt["submissionId"].as_str().unwrap().to_owned());
                                break;
                            }
                            assert!(Instant::now() < deadline, "no node admitted {path}");
                            std::thread::sleep(Duration::from_millis(20));
                        }
                    }
                }
            })
        })
        .collect();
    let started = Instant::now();
    for sender in senders {
        sender.join().unwrap();
    }
    eprintln!("admitted in {:?}", started.elapsed());
    senders_done.store(true, Ordering::Release);
    let kills = chaos.join().unwrap();
    assert!(kills >= 3);

    // Every submission in the database settles (survivors and replacements finish the work).
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let unsettled: u64 = psql(
            &database,
            "SELECT COUNT(*) FROM flue_submissions WHERE state <> 'settled'",
        )
        .parse()
        .unwrap();
        if unsettled == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{unsettled} submissions never settled; a node's log:\n{}",
            nodes.lock().unwrap()[0].log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    eprintln!("settled in {:?} with {kills} kills", started.elapsed());
    // No acknowledged message lost: each has its submission, settled.
    let stored: HashMap<String, String> = psql(
        &database,
        "SELECT submission_id || ' ' || state FROM flue_submissions",
    )
    .lines()
    .map(|line| {
        let (id, state) = line.split_once(' ').unwrap();
        (id.to_owned(), state.to_owned())
    })
    .collect();
    let acknowledged = acknowledged.lock().unwrap().clone();
    assert_eq!(acknowledged.len(), conversations * per_conversation);
    for id in &acknowledged {
        assert_eq!(stored.get(id).map(String::as_str), Some("settled"), "{id}");
    }

    // Exactly one settlement per submission, and no two attempts interleave in a stream.
    let batches = psql(
        &database,
        "SELECT instance_id || '|' || COALESCE(submission_id, '') || '|' || \
         COALESCE(body::json->>'type', 'records') FROM flue_stream ORDER BY instance_id, seq",
    );
    let mut settled_count: HashMap<String, usize> = HashMap::new();
    let mut running: HashMap<String, String> = HashMap::new();
    for line in batches.lines() {
        let mut parts = line.split('|');
        let (conversation, submission, kind) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        match kind {
            "started" => {
                if let Some(current) = running.get(conversation) {
                    assert_eq!(
                        current, submission,
                        "{conversation}: {submission} started while {current} was running"
                    );
                }
                running.insert(conversation.to_owned(), submission.to_owned());
            }
            "records" if !submission.is_empty() => {
                assert_eq!(
                    running.get(conversation).map(String::as_str),
                    Some(submission),
                    "{conversation}: records of {submission} outside its attempt"
                );
            }
            "settled" => {
                *settled_count.entry(submission.to_owned()).or_default() += 1;
                if running.get(conversation).map(String::as_str) == Some(submission) {
                    running.remove(conversation);
                }
            }
            _ => {}
        }
    }
    assert_eq!(settled_count.len(), stored.len());
    assert!(
        settled_count.values().all(|count| *count == 1),
        "{settled_count:?}"
    );

    // Every tool call ran at most once: each run appended a line, each call left one result.
    let tool_results: usize = psql(
        &database,
        "SELECT COUNT(*) FROM flue_records WHERE record LIKE '%\"type\":\"tool_result\"%'",
    )
    .parse()
    .unwrap();
    let runs = std::fs::read_to_string(root.join("runs.log"))
        .unwrap_or_default()
        .lines()
        .count();
    eprintln!(
        "{runs} runs, {tool_results} tool calls, {} submissions",
        stored.len()
    );
    assert!(
        runs <= tool_results,
        "{runs} runs for {tool_results} tool calls"
    );
    let tool_submissions: usize = psql(
        &database,
        "SELECT COUNT(*) FROM flue_submissions WHERE instance_id LIKE 'count:%'",
    )
    .parse()
    .unwrap();
    assert!(tool_submissions >= 200, "{tool_submissions}");
    assert!(
        tool_results <= tool_submissions,
        "{tool_results} tool calls for {tool_submissions} submissions that make one"
    );
    assert!(runs * 10 >= tool_submissions * 9, "only {runs} tool runs");
    let completed: usize = psql(
        &database,
        "SELECT COUNT(*) FROM flue_submissions WHERE settlement::json->>'outcome' = 'completed'",
    )
    .parse()
    .unwrap();
    assert!(
        completed * 10 >= stored.len() * 9,
        "{completed} of {} completed",
        stored.len()
    );

    // The password was expanded from the environment and never printed.
    for node in nodes.lock().unwrap().iter() {
        assert!(!node.log().contains(PASSWORD));
    }
}

#[test]
fn a_client_on_one_node_follows_the_reply_another_node_produces() {
    let workspace = workspace();
    let database = fresh_database();
    let store = store_arg(&database);
    let runner = start_node(workspace.root(), &store);
    let reader = start_node(workspace.root(), &store);
    let path = "/agents/slow/live";
    // Create the conversation and let its first turn finish.
    let (status, body) = try_http(
        runner.addr(),
        "POST",
        path,
        &json!({"kind": "user", "body": "first"}).to_string(),
    )
    .unwrap();
    assert_eq!(status, 202, "{body}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut cross_node_rounds = 0;
    for round in 0..5 {
        // Follow the stream on the reader node from its current head.
        let head = loop {
            let (status, body) = try_http(reader.addr(), "GET", path, "").unwrap();
            assert_eq!(status, 200, "{body}");
            let snapshot: Value = serde_json::from_str(&body).unwrap();
            let settled = snapshot["settlements"].as_array().unwrap().len();
            if settled == round + 1 {
                break snapshot["offset"].as_str().unwrap().to_owned();
            }
            assert!(
                Instant::now() < deadline,
                "round {round} never idle: {snapshot}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut stream = TcpStream::connect(reader.addr()).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let request = format!(
            "GET {path}?view=updates&offset={head}&live=sse HTTP/1.1\r\nhost: {}\r\n\r\n",
            reader.addr()
        );
        stream.write_all(request.as_bytes()).unwrap();
        let mut text = String::new();
        let mut buf = [0u8; 4096];
        while !text.contains("event: control") {
            let read = stream.read(&mut buf).unwrap();
            assert!(read > 0, "stream closed: {text}");
            text.push_str(&String::from_utf8_lossy(&buf[..read]));
        }
        // The runner node admits and runs the next message.
        let (status, body) = try_http(
            runner.addr(),
            "POST",
            path,
            &json!({"kind": "user", "body": format!("round {round}")}).to_string(),
        )
        .unwrap();
        assert_eq!(status, 202, "{body}");
        let receipt: Value = serde_json::from_str(&body).unwrap();
        let submission = receipt["submissionId"].as_str().unwrap();
        let needle = format!("\"submissionId\":\"{submission}\",\"outcome\"");
        while !text.contains(&needle) {
            let read = stream.read(&mut buf).unwrap();
            assert!(read > 0, "stream closed before the settlement: {text}");
            text.push_str(&String::from_utf8_lossy(&buf[..read]));
        }
        assert!(text.contains("Slow answer: pondered"), "{text}");
        // Count the rounds the runner (not the reader) ran: the one whose log has it settled.
        let settled_line = |log: &str| {
            log.lines()
                .any(|line| line.contains("settled") && line.contains(submission))
        };
        wait_for(|| settled_line(&runner.log()) || settled_line(&reader.log()));
        if settled_line(&runner.log()) {
            cross_node_rounds += 1;
        }
    }
    assert!(cross_node_rounds >= 1, "every round ran on the reader node");
}

/// Waits until `condition` holds; the deadline, generous for a busy machine, only ends a test
/// that would hang.
fn wait_for(mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !condition() {
        assert!(Instant::now() < deadline, "condition never held");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn flue_toml_names_the_store_and_a_missing_password_variable_is_named_not_printed() {
    let workspace = workspace();
    let database = fresh_database();
    let url = store_arg(&database);
    std::fs::write(
        workspace.root().join("flue.toml"),
        format!(
            "[defaults]\nmodel = \"scripted/scripts/plain.json\"\n\n[store]\nurl = \"{url}\"\n"
        ),
    )
    .unwrap();
    // Without the variable the server refuses to start, naming the variable.
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("flue"))
        .env("FLUE_TRUST", "1")
        .args(["serve", "--port", "0", "--root"])
        .arg(workspace.root())
        .env_remove(PASSWORD_VAR)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("flue serve started without its store password");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(!status.success());
    assert!(stderr.contains(PASSWORD_VAR), "{stderr}");
    assert!(stderr.contains("flue.toml [store] url"), "{stderr}");

    // With it, conversations go to the database named in flue.toml.
    let server = Server::start(workspace.root(), &[], &[(PASSWORD_VAR, PASSWORD)]);
    let (status, body) = try_http(
        server.addr(),
        "POST",
        "/agents/plain/from-toml",
        &json!({"kind": "user", "body": "hi"}).to_string(),
    )
    .unwrap();
    assert_eq!(status, 202, "{body}");
    assert_eq!(
        psql(
            &database,
            "SELECT COUNT(*) FROM flue_conversations WHERE instance_id = 'plain:from-toml'"
        ),
        "1"
    );
    assert!(!workspace.root().join(".flue/flue.db").exists());
    assert!(!server.log().contains(PASSWORD));
}

#[test]
fn inspection_commands_read_the_postgres_store_and_name_an_unreachable_one() {
    let workspace = workspace();
    let database = fresh_database();
    let store = store_arg(&database);
    let node = start_node(workspace.root(), &store);
    let path = "/agents/plain/inspect-me";
    crate::serve::post_message(node.addr(), path, "hello postgres");
    wait_for(|| {
        crate::serve::snapshot(node.addr(), path)["settlements"]
            .as_array()
            .is_some_and(|settled| settled.len() == 1)
    });
    drop(node);
    // Whatever the node left on disk, the conversation is only in the database.
    let _ = std::fs::remove_dir_all(workspace.root().join(".flue"));
    let flue = |args: &[&str]| {
        let output = std::process::Command::new(assert_cmd::cargo::cargo_bin("flue"))
            .env("FLUE_TRUST", "1")
            .args(args)
            .arg("--root")
            .arg(workspace.root())
            .env(PASSWORD_VAR, PASSWORD)
            .env_remove("FLUE_LOG")
            .output()
            .unwrap();
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };

    let (ok, out, err) = flue(&["session", "list", "--json", "--store", &store]);
    assert!(ok, "{err}");
    let listed: Value = serde_json::from_str(&out).unwrap();
    let conversations = listed["conversations"].as_array().unwrap();
    assert_eq!(conversations.len(), 1, "{listed}");
    assert_eq!(conversations[0]["id"], "inspect-me");
    assert_eq!(conversations[0]["agent"], "plain");
    assert!(
        conversations[0]["messages"].as_u64().unwrap() >= 2,
        "{listed}"
    );
    assert_eq!(conversations[0]["pending"], 0);

    let (ok, out, err) = flue(&["session", "show", "--id", "inspect-me", "--store", &store]);
    assert!(ok, "{err}");
    assert!(out.contains("hello postgres"), "{out}");
    assert!(out.contains("Hello from the fake model."), "{out}");

    // flue.toml's [store] url is used without --store, as `flue serve` uses it.
    std::fs::write(
        workspace.root().join("flue.toml"),
        format!(
            "[defaults]\nmodel = \"scripted/scripts/plain.json\"\n\n[store]\nurl = \"{store}\"\n"
        ),
    )
    .unwrap();
    // Only flue.toml is read: a broken agent file does not hide the conversations.
    std::fs::write(
        workspace.root().join("agents/broken.md"),
        "---\nmodel: [unclosed\n---\n",
    )
    .unwrap();
    let (ok, out, err) = flue(&["session", "list"]);
    assert!(ok, "{err}");
    assert!(out.contains("inspect-me"), "{out}");
    for args in [
        &["audit", "--id", "inspect-me", "--json"][..],
        &["trash", "list", "--json"][..],
    ] {
        let (ok, out, err) = flue(args);
        assert!(ok, "{args:?}: {err}");
        let listed: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(listed["entries"], json!([]), "{args:?}: {listed}");
    }

    // An unreachable store is named (user@host:port/db), its password is not.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dead = format!("postgres://flue:${{{PASSWORD_VAR}}}@127.0.0.1:{port}/nowhere");
    let (ok, _, err) = flue(&["session", "list", "--store", &dead]);
    assert!(!ok);
    assert!(
        err.contains(&format!("flue@127.0.0.1:{port}/nowhere")),
        "{err}"
    );
    assert!(!err.contains(PASSWORD), "{err}");
}

/// An `idempotencyKey` holds across the nodes of one Postgres store: the official client's
/// retry on another node gets the first node's submission, and two nodes racing the same key
/// on a conversation that does not exist yet admit it once.
#[test]
fn an_idempotency_key_converges_across_nodes() {
    let workspace = workspace();
    let database = fresh_database();
    let store = store_arg(&database);
    let first = start_node(workspace.root(), &store);
    let second = start_node(workspace.root(), &store);

    let sent = crate::serve::sdk_client(
        &format!("http://{}", first.addr()),
        &["send:plain:pg-retry:order-5"],
    );
    let resent = crate::serve::sdk_client(
        &format!("http://{}", second.addr()),
        &["resend:plain:pg-retry:order-5"],
    );
    let (sent, resent) = (&sent[0], &resent[0]);
    assert_eq!(resent["submissionId"], sent["submissionId"], "{resent}");
    assert_eq!(resent["deduplicated"], true);
    assert_eq!(resent["outcome"], "completed");
    assert_eq!(resent["userMessages"], 1);
    assert_eq!(resent["allSettlements"], 1);

    // Racing: the same key sent to both nodes at once, on fresh conversations.
    for round in 0..10 {
        let path = format!("/agents/plain/race-{round}");
        let body = json!({"kind": "user", "body": "once", "idempotencyKey": "k"}).to_string();
        let senders: Vec<_> = [first.addr().to_owned(), second.addr().to_owned()]
            .into_iter()
            .map(|addr| {
                let (path, body) = (path.clone(), body.clone());
                std::thread::spawn(move || try_http(&addr, "POST", &path, &body))
            })
            .collect();
        let receipts: Vec<Value> = senders
            .into_iter()
            .map(|sender| {
                let (status, body) = sender.join().unwrap().expect("an answer");
                assert_eq!(status, 202, "{body}");
                serde_json::from_str(&body).unwrap()
            })
            .collect();
        assert_eq!(
            receipts[0]["submissionId"], receipts[1]["submissionId"],
            "{receipts:?}"
        );
        let admitted: i64 = psql(
            &database,
            &format!(
                "SELECT count(*) FROM flue_submissions WHERE instance_id = 'plain:race-{round}'"
            ),
        )
        .trim()
        .parse()
        .unwrap();
        assert_eq!(admitted, 1, "round {round}");
    }
}
