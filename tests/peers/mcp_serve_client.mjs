// The official TypeScript MCP client (`@modelcontextprotocol/sdk`) against `flue mcp serve`.
//
// MODE=stdio starts the server the way Claude Desktop's configuration does (a command and its
// arguments: FLUE_BIN with `mcp serve --root ROOT`); MODE=http connects to URL over streamable
// HTTP (with TOKEN as a bearer token when set). ELICIT=1 declares the elicitation capability
// and accepts every question (allowing the call). The workspace (tests/it/mcp_serve.rs) has
// the agents `plain` (echoes), `asker` (bash under always_ask), `slow` (a long command; a
// message with "quick" answers at once), and `reviewer` and `lister` (they declare `result:`).
//
// Prints one JSON object: what each step saw.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema, LoggingMessageNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const mode = process.env.MODE;
const elicit = process.env.ELICIT === "1";
// A generous bound on each call, so that a hang fails the test instead of stalling it.
const timeout = 300_000;

let transport;
if (mode === "stdio") {
  // The shape of a Claude Desktop `mcpServers` entry: command, args, env.
  const config = {
    command: process.env.FLUE_BIN,
    args: ["mcp", "serve", "--root", process.env.ROOT],
    // FLUE_TRUST: the tests' workspaces are trusted for the one process (docs/security.md).
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", FLUE_TRUST: process.env.FLUE_TRUST ?? "" },
  };
  transport = new StdioClientTransport({ ...config, stderr: "inherit" });
} else {
  const headers = process.env.TOKEN ? { Authorization: `Bearer ${process.env.TOKEN}` } : {};
  transport = new StreamableHTTPClientTransport(new URL(process.env.URL), { requestInit: { headers } });
}

const client = new Client(
  { name: "flue-mcp-serve-test", version: "1.0.0" },
  { capabilities: elicit ? { elicitation: { form: {} } } : {} },
);
const report = { questions: [], logs: [] };
if (elicit) {
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    report.questions.push(request.params.message);
    return { action: "accept", content: { allow: true } };
  });
}
// Resolved when the server logs that a cancelled call's work was aborted.
let abortLogged;
const aborted = new Promise((resolve) => {
  abortLogged = resolve;
});
client.setNotificationHandler(LoggingMessageNotificationSchema, (notification) => {
  const message = notification.params.data?.message ?? "";
  report.logs.push(message);
  if (message.includes("aborted after the client's cancellation")) abortLogged();
});

await client.connect(transport);
report.server = client.getServerVersion()?.name;
await client.setLoggingLevel("info");

const listed = await client.listTools();
report.tools = listed.tools.map((tool) => ({
  name: tool.name,
  description: tool.description,
  required: tool.inputSchema.required,
  properties: Object.keys(tool.inputSchema.properties ?? {}).sort(),
  output: Object.keys(tool.outputSchema?.properties ?? {}).sort(),
}));

const call = async (name, args, extra = {}) => {
  const progress = [];
  const result = await client.callTool({ name, arguments: args }, undefined, {
    timeout,
    onprogress: (p) => {
      progress.push(p.message ?? "");
      extra.onprogress?.(p);
    },
    signal: extra.signal,
  });
  return {
    isError: result.isError ?? false,
    text: result.content.map((block) => block.text ?? "").join("\n"),
    structured: result.structuredContent ?? null,
    progress,
  };
};

// A new conversation, then the same one again.
report.first = await call("plain", { message: "hello there" });
const id = report.first.structured?.conversation_id;
report.second = await call("plain", { message: "and again", conversation_id: id });

// Agents declaring `result:`: the structured content is the validated data (the client
// validates it against the tool's output schema).
report.reviewed = await call("reviewer", { message: "review this" });
report.listed = await call("lister", { message: "list things" });

// A call that pauses for confirmation.
report.asked = await call("asker", { message: "look it up" });

// Cancellation: abort once the slow command runs; the next message of the same conversation
// then runs (it would wait behind the command otherwise).
const controller = new AbortController();
try {
  await call(
    "slow",
    { message: "take your time", conversation_id: "cancel-me" },
    {
      signal: controller.signal,
      onprogress: (p) => {
        if ((p.message ?? "").includes("running the tool")) controller.abort("enough");
      },
    },
  );
  report.cancelled = "the call was not cancelled";
} catch (err) {
  report.cancelled = String(err?.name ?? err);
}
// Over HTTP the cancellation is a request of its own that the next call could overtake (and
// be aborted with it): wait until the server says the abort is done.
await aborted;
report.afterCancel = await call("slow", { message: "quick one", conversation_id: "cancel-me" });

// Arguments the schema refuses.
try {
  await client.callTool({ name: "plain", arguments: { text: "no message" } });
  report.badArguments = "accepted";
} catch (err) {
  report.badArguments = String(err?.message ?? err);
}

await client.close();
console.log(JSON.stringify(report));
