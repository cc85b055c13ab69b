//! One list of offered tools: what the model gets in a run (the request the provider
//! receives), what `flue tools` and `flue run --dry-run` print and what the dev console's
//! Agent tab lists are the same tools, in the same order, with the same origins.

use std::path::Path;

use pretty_assertions::assert_eq;
use serde_json::Value;

use crate::dev::Dev;
use crate::providers::FakeOpenAi;
use crate::{Workspace, json, stderr};

/// An agent with every kind of tool: built-in (one that asks first, so `permissions_check`
/// joins), state, command, custom, an MCP server's (the stdlib-only raw server, listing
/// `one`, `two`, `three` over three pages), `load_skill` and `task`.
fn workspace(server: &FakeOpenAi) -> Workspace {
    let raw_server = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/peers/raw_server.py");
    let flue_toml = format!(
        "[providers.fake]\napi = \"openai-completions\"\nbase_url = \"{}\"\n\
         api_key_env = \"FLUE_TEST_FAKE_KEY\"\n\n\
         [providers.fake.models.fake-model]\ncontext_window = 128000\nmax_output_tokens = 8192\n",
        server.base_url()
    );
    let agent = format!(
        "---\nmodel: fake/fake-model\n\
         tools:\n  - read_file\n  - bash\n  - state_read\n\
         \x20 - name: count_lines\n    description: Count the lines of a file\n    command: wc -l < \"$path\"\n\
         \x20 - name: lookup_order\n    description: Looks an order up\n    custom: true\n\
         \x20   input: {{ type: object, properties: {{ id: {{ type: string }} }}, required: [id] }}\n\
         skills: [haiku]\nsubagents: [helper]\n\
         permissions:\n  bash: always_ask\n\
         mcp:\n  raw:\n    command: python3\n    args: [\"{}\", pages]\n---\nYou do everything.\n",
        raw_server.display()
    );
    Workspace::new(&[
        ("flue.toml", flue_toml.as_str()),
        (".env", "FLUE_TEST_FAKE_KEY=fake-key-0123456789\n"),
        ("agents/studio.md", agent.as_str()),
        (
            "agents/helper.md",
            "---\ndescription: Helps\nmodel: fake/fake-model\n---\nYou help.\n",
        ),
        (
            ".agents/skills/haiku/SKILL.md",
            "---\nname: haiku\ndescription: Writes a haiku\n---\nWrite a haiku.\n",
        ),
        ("facts.txt", "The answer is 42.\n"),
    ])
}

/// `(name, origin)` of each listed tool.
fn named(tools: &Value) -> Vec<(String, String)> {
    tools
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {tools}"))
        .iter()
        .map(|tool| {
            (
                tool["name"].as_str().unwrap().to_owned(),
                tool["origin"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn the_loop_flue_tools_the_dry_run_and_the_console_offer_the_same_tools() {
    let server = FakeOpenAi::start();
    let ws = workspace(&server);

    let listed = ws.flue(&["tools", "studio", "--json"]);
    assert!(listed.status.success(), "{}", stderr(&listed));
    let listed = named(&json(&listed)["tools"]);
    let expected: Vec<(String, String)> = [
        ("read_file", "built-in"),
        ("bash", "built-in"),
        ("state_read", "state"),
        ("count_lines", "command"),
        ("lookup_order", "custom"),
        ("mcp__raw__one", "mcp"),
        ("mcp__raw__two", "mcp"),
        ("mcp__raw__three", "mcp"),
        ("load_skill", "skills"),
        ("task", "task"),
        ("task_status", "task"),
        ("task_wait", "task"),
        ("task_cancel", "task"),
        ("permissions_check", "runtime"),
    ]
    .iter()
    .map(|(name, origin)| ((*name).to_owned(), (*origin).to_owned()))
    .collect();
    assert_eq!(listed, expected);

    let dry = ws.flue(&["run", "studio", "--dry-run", "--json"]);
    assert!(dry.status.success(), "{}", stderr(&dry));
    assert_eq!(named(&json(&dry)["tools"]), expected);

    let run = ws.flue(&["run", "studio", "-m", "facts.txt"]);
    assert!(run.status.success(), "{}", stderr(&run));
    let requests = server.requests();
    let offered: Vec<&str> = requests[0]["body"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools offered: {}", requests[0]))
        .iter()
        .map(|tool| tool["function"]["name"].as_str().unwrap())
        .collect();
    let names: Vec<&str> = expected.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(offered, names);

    let dev = Dev::start(ws.root());
    let console = dev.get("/_flue/dev/tools/studio");
    assert_eq!(named(&console["tools"]), expected, "{console:#}");
    let mcp_servers: Vec<&Value> = console["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|tool| tool["origin"] == "mcp")
        .map(|tool| &tool["server"])
        .collect();
    assert_eq!(mcp_servers, [&Value::from("raw"); 3]);
}
