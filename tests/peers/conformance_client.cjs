// The client under test for the MCP conformance suite (`conformance client --command ...`).
//
// The suite starts one scenario server per scenario and runs this script with the server's url
// as the last argument, the scenario's name in MCP_CONFORMANCE_SCENARIO and, for scenarios that
// need it, a JSON object in MCP_CONFORMANCE_CONTEXT (pre-registered client credentials).
//
// It does what a new user would do: a workspace with one agent whose `mcp:` entry points at the
// url, a scripted model that calls the scenario's tool, and `flue run` (the binary named by
// FLUE_BIN). OAuth settings go in the entry's `oauth:` key, as a user would write them; the
// suite's authorization servers approve without a person, so the entry asks flue to follow the
// authorization redirect itself (`redirect: follow`).
"use strict";
const { spawnSync } = require("node:child_process");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");

const url = process.argv[process.argv.length - 1];
const scenario = process.env.MCP_CONFORMANCE_SCENARIO || "";
const context = JSON.parse(process.env.MCP_CONFORMANCE_CONTEXT || "{}");
const flue = process.env.FLUE_BIN;
if (!flue) {
  console.error("conformance_client.cjs: set FLUE_BIN to the flue binary");
  process.exit(2);
}

// The tool each scenario's server offers; `initialize` has none to call.
const tools = {
  initialize: null,
  tools_call: ["add_numbers", { a: 2, b: 3 }],
  "elicitation-sep1034-client-defaults": ["test_client_elicitation_defaults", {}],
  "sse-retry": ["test_reconnection", {}],
};
const call = scenario in tools ? tools[scenario] : ["test-tool", {}];

const rules = [];
if (call) {
  rules.push({
    when: { user_contains: "go" },
    reply: { tool_calls: [{ name: `mcp__conformance__${call[0]}`, input: call[1] }] },
  });
  rules.push({ when: { tool_result: `mcp__conformance__${call[0]}` }, reply: { text: "{{tool_result}}" } });
}
rules.push({ reply: { text: "done" } });

const oauth = [];
if (scenario.startsWith("auth/")) {
  oauth.push("redirect: follow");
  oauth.push('client_metadata_url: "https://conformance-test.local/client-metadata.json"');
  if (context.client_id) oauth.push(`client_id: ${JSON.stringify(context.client_id)}`);
  if (context.client_secret) oauth.push(`client_secret: ${JSON.stringify(context.client_secret)}`);
  if (scenario.startsWith("auth/client-credentials")) oauth.push("grant: client_credentials");
}
let entry = `  conformance:\n    url: ${JSON.stringify(url)}\n`;
if (oauth.length > 0) entry += `    oauth:\n${oauth.map((line) => `      ${line}\n`).join("")}`;

const root = fs.mkdtempSync(path.join(os.tmpdir(), "flue-conformance-"));
try {
  fs.mkdirSync(path.join(root, "agents"));
  fs.writeFileSync(
    path.join(root, "agents", "client.md"),
    `---\nmodel: scripted/script.json\nmcp:\n${entry}---\nYou call the server's tool.\n`,
  );
  fs.writeFileSync(path.join(root, "script.json"), JSON.stringify({ rules }));
  // `--yes`: the elicitation scenario asks to "accept with defaults", which is what --yes does.
  const run = spawnSync(flue, ["run", "client", "-m", "go", "--yes", "--root", root], {
    stdio: ["ignore", "inherit", "inherit"],
  });
  process.exitCode = run.status ?? 1;
} finally {
  fs.rmSync(root, { recursive: true, force: true });
}
