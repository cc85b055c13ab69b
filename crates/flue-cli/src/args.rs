//! Command-line arguments, as clap parses them.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use flue_build::SandboxKind;

/// Flue: an agent harness. Agents are markdown files; `flue` runs them.
#[derive(Debug, Parser)]
#[command(
    name = "flue",
    version,
    about,
    long_about = None,
    propagate_version = true,
    after_help = MAIN_HELP
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
    /// Trust the workspace for this one command, without recording it (also
    /// `FLUE_TRUST=1`): its hooks, MCP servers, host sandboxes, schedules and the endpoints
    /// and variables it names are used. For CI and scripts; see `flue trust`.
    #[arg(long, global = true)]
    pub(crate) trust: bool,
    /// When to colour output: `auto` (on a terminal, unless NO_COLOR is set; CLICOLOR_FORCE
    /// or FORCE_COLOR force it), `always` or `never`.
    #[arg(long, global = true, value_name = "WHEN", default_value = "auto")]
    pub(crate) color: crate::term::ColorChoice,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run one message (or a skill) through an agent and print its reply.
    #[command(after_help = RUN_HELP)]
    Run(RunArgs),
    /// Talk to an agent on the terminal: one conversation, message after message.
    #[command(after_help = CHAT_HELP)]
    Chat(ChatArgs),
    /// List every tool an agent gets, with its input schema.
    #[command(after_help = TOOLS_HELP)]
    Tools(ToolsArgs),
    /// Validate the workspace and write a self-contained bundle.
    #[command(after_help = BUILD_HELP)]
    Build(BuildArgs),
    /// List the workspace's schedules with their next fire times.
    #[command(after_help = SCHEDULES_HELP)]
    Schedules(SchedulesArgs),
    /// List and show stored conversations.
    #[command(visible_alias = "conversation", after_help = SESSION_HELP)]
    Session {
        #[command(subcommand)]
        command: SessionCommand,
    },
    /// Show the audit log of the file tools: every change an agent made, or tried to make.
    #[command(after_help = AUDIT_HELP)]
    Audit(AuditArgs),
    /// List and erase the agents' memory notes (retention, erasure requests).
    #[command(after_help = MEMORY_HELP)]
    Memory {
        #[command(subcommand)]
        command: MemoryCommand,
    },
    /// Put the workspace's files back as they were before a turn of a conversation (undoing
    /// what its file tools changed), or undo a rewind.
    #[command(after_help = REWIND_HELP)]
    Rewind(RewindArgs),
    /// Serve every agent of the workspace (or bundle) over HTTP, speaking the Flue
    /// conversation protocol.
    #[command(after_help = SERVE_HELP)]
    Serve(ServeArgs),
    /// Serve the workspace's agents with hot reload and a console in the browser.
    #[command(after_help = DEV_HELP)]
    Dev(DevArgs),
    /// Create a new workspace (an agent on the scripted model, its script, a skill) that
    /// `flue dev` and `flue run` serve at once, offline.
    #[command(after_help = INIT_HELP)]
    Init(InitArgs),
    /// List and restore files the file tools deleted or overwrote.
    #[command(after_help = TRASH_HELP)]
    Trash {
        #[command(subcommand)]
        command: TrashCommand,
    },
    /// Trust a workspace: let its hooks, MCP servers, host sandboxes and schedules run and
    /// its endpoints get your keys (recorded in your own configuration, not the workspace).
    #[command(after_help = TRUST_HELP)]
    Trust(TrustArgs),
    /// Run the workspace's eval cases (`evals/*.yaml`) and report pass rates, tokens, cost and
    /// latency; list, show and compare stored runs.
    #[command(after_help = EVAL_HELP, args_conflicts_with_subcommands = true)]
    Eval(EvalArgs),
    /// Serve the workspace's agents to MCP clients (`serve`), and sign in to and out of remote
    /// MCP servers that use OAuth (`login`, `logout`).
    #[command(after_help = MCP_HELP)]
    Mcp {
        #[command(subcommand)]
        command: McpCommand,
    },
    /// Print a shell completion script (bash, zsh, fish, powershell, elvish) to stdout.
    #[command(after_help = COMPLETIONS_HELP)]
    Completions(CompletionsArgs),
    /// Print flue's man page (roff) to stdout, or write one page per command into a folder.
    #[command(after_help = MAN_HELP)]
    Man(ManArgs),
}

const TRUST_HELP: &str = "Examples:
  flue trust                     (show what the workspace runs and where it sends keys; trust it)
  flue trust --list
  flue trust --revoke --root ~/src/agents
  flue run reviewer -m hi --trust (this command only; or FLUE_TRUST=1)

A workspace is untrusted until you trust it: `build`, `tools`, `run --dry-run`, `session` and
the `dev` console work and run nothing of it; commands that would run its hooks, MCP servers,
host sandboxes or schedules, or send your keys where it says, ask on a terminal and refuse
elsewhere. A change to what trust covers asks again.

Docs (https://github.com/flue-rs/flue): docs/security.md#workspace-trust, docs/cli.md#flue-trust";
const MAIN_HELP: &str = "Examples:
  flue init my-agents && cd my-agents
  flue run assistant -m \"read the notes\"
  flue chat assistant
  flue session list

More: `flue help <command>` for each command's options and examples; `flue man` prints the
man page, `flue completions <shell>` a completion script.
Docs: https://github.com/flue-rs/flue/tree/main/docs (docs/cli.md for every command)";
const COMPLETIONS_HELP: &str = "Examples:
  flue completions bash > ~/.local/share/bash-completion/completions/flue
  source <(flue completions bash)                                 (this shell only)
  flue completions zsh > \"${fpath[1]}/_flue\"
  flue completions fish > ~/.config/fish/completions/flue.fish
  flue completions powershell >> $PROFILE

Docs (https://github.com/flue-rs/flue): docs/cli.md#flue-completions";
const MAN_HELP: &str = "Examples:
  flue man | man -l -                     (read it now)
  flue man --dir ~/.local/share/man/man1  (flue.1 and flue-run.1, ...; then `man flue-run`)

Docs (https://github.com/flue-rs/flue): docs/cli.md#flue-man";

const RUN_HELP: &str = "Examples:
  flue run hello -m \"What does the greeting file say?\"
  git diff | flue run reviewer -m - --id pr-42
  flue run reviewer --continue -m \"And the tests?\"
  flue run reviewer --skill code-review --arg file=src/login.py
  flue run hello --dry-run

Docs (https://github.com/flue-rs/flue): docs/cli.md#flue-run";
const CHAT_HELP: &str = "Examples:
  flue chat hello
  flue chat hello --id support-7     (continue or start conversation support-7)
  flue chat hello --continue         (the agent's most recent conversation)

Type a message and press Enter; Ctrl-C aborts the reply being written, Ctrl-D or /exit ends
the chat.

Docs (https://github.com/flue-rs/flue): docs/cli.md#flue-chat";
const TOOLS_HELP: &str = "Examples:
  flue tools hello
  flue tools hello --json | jq '.tools[].name'

Docs (https://github.com/flue-rs/flue): docs/cli.md#flue-tools (built-in tools: docs/file-tools.md)";
const BUILD_HELP: &str = "Examples:
  flue build                 (check everything a run would reject, and write dist/)
  flue build --out /tmp/bundle
  flue build --json | jq '.problems'    (every problem with its file and line, for an editor or CI)

Docs (https://github.com/flue-rs/flue): docs/cli.md#flue-build, docs/bundle-format.md";
const SCHEDULES_HELP: &str = "Examples:
  flue schedules
  flue schedules --json | jq '.schedules[].next'

Schedules fire in `flue serve` and `flue dev`. Docs (https://github.com/flue-rs/flue): docs/schedules.md, docs/cli.md#flue-schedules";
const SESSION_HELP: &str = "Examples:
  flue session list
  flue session show --id demo --tree
  flue session delete --id demo

Docs (https://github.com/flue-rs/flue): docs/cli.md#flue-session";
const FORK_HELP: &str = "Examples:
  flue session fork --id demo --at 2          (a new conversation holding turn 1 of demo)
  flue session fork --id demo --at 2 --new-id demo-b

Turns are numbered by the `user:` lines of `flue session show` (its --json gives each its
`turn`). Docs (https://github.com/flue-rs/flue): docs/fork-rewind.md";
const REWIND_HELP: &str = "Examples:
  flue rewind --id demo --to 2 --dry-run      (list what would be restored or deleted)
  flue rewind --id demo --to 2
  flue rewind --id demo --undo 01J...         (put back what that rewind replaced)

A file changed outside the agent since its last write is a conflict: nothing is rewound.
Docs (https://github.com/flue-rs/flue): docs/fork-rewind.md";
const MEMORY_HELP: &str = "Examples:
  flue memory list --subject user-42          (every agent's notes about user-42)
  flue memory list --agent helper --json
  flue memory delete --subject user-42        (erase user-42 everywhere)
  flue memory delete --agent helper --subject user-42 --id 01J...

Docs (https://github.com/flue-rs/flue): docs/memory.md";
const AUDIT_HELP: &str = "Examples:
  flue audit                  (every conversation of the workspace)
  flue audit --id demo --diff

Docs (https://github.com/flue-rs/flue): docs/cli.md#flue-audit, docs/file-tools.md";
const SERVE_HELP: &str = "Examples:
  flue serve
  flue serve --port 8080 --token \"$FLUE_TOKEN\" --host 0.0.0.0

Docs (https://github.com/flue-rs/flue): docs/cli.md#flue-serve, docs/http-api.md";
const DEV_HELP: &str = "Examples:
  flue dev
  flue dev --root my-agents --port 0

Docs (https://github.com/flue-rs/flue): docs/dev.md, docs/cli.md#flue-dev";
const INIT_HELP: &str = "Examples:
  flue init my-agents
  flue init

Docs (https://github.com/flue-rs/flue): docs/dev.md, docs/cli.md#flue-init";
const TRASH_HELP: &str = "Examples:
  flue trash list
  flue trash restore 01J9Z... --id demo --to notes-restored.md

Docs (https://github.com/flue-rs/flue): docs/cli.md#flue-trash, docs/file-tools.md";
const EVAL_HELP: &str = "Examples:
  flue eval                              (every case of evals/*.yaml)
  flue eval probe --repeat 5 --concurrency 4
  flue eval --junit report.xml --threshold 0.9
  flue eval --baseline last              (improved / regressed / unchanged per case)
  flue eval list
  flue eval show RUN
  flue eval diff RUN_A RUN_B

Docs (https://github.com/flue-rs/flue): docs/evals.md";
const MCP_HELP: &str = "Examples:
  flue mcp serve                       (the agents as MCP tools over stdio)
  flue mcp serve --http --port 3100    (over streamable HTTP at http://127.0.0.1:3100/mcp)
  flue mcp login github
  flue mcp logout github

Docs (https://github.com/flue-rs/flue): docs/cli.md#flue-mcp, docs/mcp.md";

#[derive(Debug, Subcommand)]
pub(crate) enum McpCommand {
    /// Serve every agent of the workspace (or bundle) as an MCP tool, over stdio (for a client
    /// that starts `flue` itself) or over streamable HTTP (`--http`).
    #[command(after_help = MCP_HELP)]
    Serve(McpServeArgs),
    /// Sign in to a remote MCP server (OAuth): prints the url to open, waits for the browser to
    /// come back to a loopback address, and keeps the tokens in the workspace store.
    #[command(after_help = MCP_HELP)]
    Login(McpServerArgs),
    /// Forget the stored OAuth tokens of a remote MCP server.
    #[command(after_help = MCP_HELP)]
    Logout(McpServerArgs),
}

#[derive(Debug, Args)]
pub(crate) struct McpServeArgs {
    /// Workspace root (default: the nearest ancestor holding agents/ or flue.toml); with
    /// --bundle, where agents work and conversations are kept (default: the current directory).
    #[arg(long)]
    pub(crate) root: Option<PathBuf>,
    /// Serve the agents of a bundle built by `flue build`.
    #[arg(long)]
    pub(crate) bundle: Option<PathBuf>,
    /// Environment file to load instead of ROOT/.env.
    #[arg(long = "env")]
    pub(crate) env_file: Option<PathBuf>,
    /// Keep conversations in this Postgres database (as `flue serve --store`). Default:
    /// flue.toml's `[store] url`, else ROOT/.flue/flue.db.
    #[arg(long, value_name = "URL")]
    pub(crate) store: Option<String>,
    /// Serve streamable HTTP at `http://HOST:PORT/mcp` instead of stdio.
    #[arg(long)]
    pub(crate) http: bool,
    /// With --http: the address to bind. Anything but loopback requires a token.
    #[arg(long, default_value = "127.0.0.1", requires = "http")]
    pub(crate) host: String,
    /// With --http: the port to bind (0 picks a free one; the url is printed on stderr).
    #[arg(long, default_value_t = 3100, requires = "http")]
    pub(crate) port: u16,
    /// With --http: the bearer token every request must carry (default: $FLUE_TOKEN).
    #[arg(long, requires = "http")]
    pub(crate) token: Option<String>,
    /// With --http: a host name (`name` or `name:port`) requests may address besides
    /// `localhost`, `127.0.0.1` and `[::1]` on the bound port (repeatable), as `flue serve`.
    #[arg(long = "allowed-host", value_name = "HOST", requires = "http")]
    pub(crate) allowed_hosts: Vec<String>,
    /// With --http: most open connections at once (SSE streams included).
    #[arg(long, default_value_t = 1_024, requires = "http")]
    pub(crate) max_connections: usize,
    /// With --http: most MCP sessions kept at once. A new one closes the session idle the
    /// longest; with every session busy (a request or stream open), it is refused with 503.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..), requires = "http")]
    pub(crate) max_sessions: u64,
    /// With --http: seconds an MCP session with no request or stream open is kept.
    #[arg(long, value_name = "SECS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..), requires = "http")]
    pub(crate) session_idle: u64,
    /// Seconds running calls get to finish at shutdown.
    #[arg(long, default_value_t = 10)]
    pub(crate) grace: u64,
    /// Serve agents and accept `model` overrides naming a model the built-in provider's
    /// catalog does not know (a model newer than this flue); without it such an agent is
    /// refused at start and such an override with 400, as most likely a typo.
    #[arg(long)]
    pub(crate) allow_unknown_model: bool,
}

#[derive(Debug, Args)]
pub(crate) struct McpServerArgs {
    /// The server's name in flue.toml (`[mcp.NAME]`) or in an agent's `mcp` settings.
    pub(crate) server: String,
    /// Workspace root (default: the nearest ancestor holding agents/ or flue.toml).
    #[arg(long)]
    pub(crate) root: Option<PathBuf>,
    /// Environment file to load instead of ROOT/.env.
    #[arg(long = "env")]
    pub(crate) env_file: Option<PathBuf>,
}

#[derive(Debug, Default, Args)]
pub(crate) struct RunArgs {
    /// Agent name (a file under ROOT/agents/) or path to an agent file.
    pub(crate) agent: String,
    /// The message to send; `-` reads it from stdin (for messages too long for the command
    /// line). Not with --confirm or --tool-result, which resume a paused conversation instead.
    #[arg(
        short = 'm',
        long = "message",
        required_unless_present_any = ["skill", "dry_run", "confirm", "tool_result"],
        conflicts_with_all = ["confirm", "tool_result"]
    )]
    pub(crate) message: Option<String>,
    /// Run this skill of the agent (like `session.skill()`), with `--arg`s; `-m` then adds
    /// nothing but may be omitted.
    #[arg(long, value_name = "NAME", conflicts_with = "message")]
    pub(crate) skill: Option<String>,
    /// An argument of the skill, `KEY=VALUE` (repeatable; a VALUE that parses as JSON is passed
    /// as that JSON value, anything else as a string).
    #[arg(long = "arg", value_name = "KEY=VALUE", requires = "skill")]
    pub(crate) skill_args: Vec<String>,
    /// Print the assembled system prompt, tools and model, and stop: no model is called and
    /// nothing is stored.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Also show each model turn's and tool call's time, and the provider's retries.
    #[arg(short = 'v', long)]
    pub(crate) verbose: bool,
    /// Continue the agent's most recent conversation (the one with the latest activity).
    #[arg(long = "continue", visible_alias = "last", conflicts_with_all = ["id", "new"])]
    pub(crate) continue_last: bool,
    /// Confirm the pending action ACTION_ID of the conversation (or deny it with --deny) and
    /// resume it.
    #[arg(
        long,
        value_name = "ACTION_ID",
        requires = "id",
        conflicts_with = "tool_result"
    )]
    pub(crate) confirm: Option<String>,
    /// With --confirm: deny the action instead, with MESSAGE for the model.
    #[arg(
        long,
        value_name = "MESSAGE",
        requires = "confirm",
        conflicts_with = "result"
    )]
    pub(crate) deny: Option<String>,
    /// A structured result: the JSON Schema it must match, as a file (`schema.json`) or inline
    /// JSON (`'{"type": "object", ...}'`). The run prints the validated JSON (with --json,
    /// under `data`), or fails with `result_unavailable`. With --confirm ACTION_ID instead: the
    /// result, as JSON, of the custom tool call ACTION_ID.
    #[arg(long, value_name = "SCHEMA|JSON", conflicts_with = "tool_result")]
    pub(crate) result: Option<String>,
    /// Supply the result of the custom tool call ACTION_ID (with --value) and resume.
    #[arg(long, value_name = "ACTION_ID", requires_all = ["id", "value"])]
    pub(crate) tool_result: Option<String>,
    /// With --tool-result: the result, as JSON (a JSON string is shown to the model as is).
    #[arg(long, value_name = "JSON", requires = "tool_result")]
    pub(crate) value: Option<String>,
    /// Workspace root (default: the nearest ancestor holding agents/ or flue.toml).
    #[arg(long)]
    pub(crate) root: Option<PathBuf>,
    /// Conversation id: continue it, or create it (default: a fresh id). 1 to 128 printable
    /// characters without spaces or slashes (a ticket number, an email address, a user id).
    #[arg(long)]
    pub(crate) id: Option<String>,
    /// Fail if the conversation id already exists.
    #[arg(long, requires = "id")]
    pub(crate) new: bool,
    /// Print one JSON object to stdout instead of the reply.
    #[arg(long)]
    pub(crate) json: bool,
    /// Print one JSON event per line to stdout as the run goes (text deltas, tool calls and
    /// results, pauses, usage), the settlement last; schema in docs/cli.md.
    #[arg(long, conflicts_with = "json")]
    pub(crate) jsonl: bool,
    /// On a terminal, leave out the usage line printed after the reply.
    #[arg(short = 'q', long)]
    pub(crate) quiet: bool,
    /// Model override, PROVIDER/MODEL.
    #[arg(long)]
    pub(crate) model: Option<String>,
    /// Use the model even though the catalog of its built-in provider does not list it (a
    /// model newer than this flue); without it such a name is refused before anything is
    /// stored, as most likely a typo.
    #[arg(long)]
    pub(crate) allow_unknown_model: bool,
    /// Environment file to load instead of ROOT/.env.
    #[arg(long = "env")]
    pub(crate) env_file: Option<PathBuf>,
    /// Sandbox kind, overriding the agent's and flue.toml's: virtual, local, isolated or
    /// daytona.
    #[arg(long, value_name = "KIND")]
    pub(crate) sandbox: Option<SandboxKind>,
    /// Run from a bundle built by `flue build` instead of a source workspace; ROOT (default:
    /// the current directory) is then only where the agent works and conversations are kept.
    #[arg(long)]
    pub(crate) bundle: Option<PathBuf>,
    /// Role for this message (a persona from .agents/roles/).
    #[arg(long)]
    pub(crate) role: Option<String>,
    /// When another process is working on the conversation, fail with `session_busy`
    /// (naming it) instead of waiting for its turn.
    #[arg(long)]
    pub(crate) no_wait: bool,
    #[command(flatten)]
    pub(crate) budget: BudgetArgs,
    /// Approve every tool call that asks for confirmation, and accept MCP servers' requests
    /// for input (elicitation) with the defaults their schema gives, without asking.
    #[arg(long)]
    pub(crate) yes: bool,
    /// Whose memory the conversation uses (a user id): an agent with `memory:` keeps and finds
    /// notes about this subject across conversations. Set once per conversation.
    #[arg(long, value_name = "SUBJECT")]
    pub(crate) memory_subject: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct ChatArgs {
    /// Agent name (a file under ROOT/agents/) or path to an agent file.
    pub(crate) agent: String,
    /// Whose memory the conversation uses (a user id), as `flue run --memory-subject`.
    #[arg(long, value_name = "SUBJECT")]
    pub(crate) memory_subject: Option<String>,
    /// Conversation id: continue it, or create it (default: a fresh id).
    #[arg(long)]
    pub(crate) id: Option<String>,
    /// Continue the agent's most recent conversation.
    #[arg(long = "continue", visible_alias = "last", conflicts_with = "id")]
    pub(crate) continue_last: bool,
    /// Workspace root (default: the nearest ancestor holding agents/ or flue.toml).
    #[arg(long)]
    pub(crate) root: Option<PathBuf>,
    /// Model override, PROVIDER/MODEL.
    #[arg(long)]
    pub(crate) model: Option<String>,
    /// Use the model even though the catalog of its built-in provider does not list it (a
    /// model newer than this flue); without it such a name is refused before anything is
    /// stored, as most likely a typo.
    #[arg(long)]
    pub(crate) allow_unknown_model: bool,
    /// Environment file to load instead of ROOT/.env.
    #[arg(long = "env")]
    pub(crate) env_file: Option<PathBuf>,
    /// Sandbox kind, overriding the agent's and flue.toml's: virtual, local, isolated or
    /// daytona.
    #[arg(long, value_name = "KIND")]
    pub(crate) sandbox: Option<SandboxKind>,
    /// Chat with an agent of a bundle built by `flue build`.
    #[arg(long)]
    pub(crate) bundle: Option<PathBuf>,
    /// Role for every message (a persona from .agents/roles/).
    #[arg(long)]
    pub(crate) role: Option<String>,
    /// Also show each model turn's and tool call's time, and the provider's retries.
    #[arg(short = 'v', long)]
    pub(crate) verbose: bool,
    #[command(flatten)]
    pub(crate) budget: BudgetArgs,
}

/// Budgets of the messages sent, over the agent's `budget:` (each flag replaces that limit).
#[derive(Clone, Debug, Default, Args)]
pub(crate) struct BudgetArgs {
    /// Most US dollars each message may spend (its model calls and tasks); reaching it fails
    /// the message with `budget_exceeded` before the next model call.
    #[arg(long, value_name = "USD")]
    pub(crate) max_cost_usd: Option<f64>,
    /// Most model calls each message may make.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_turns: Option<u32>,
    /// Most US dollars the whole conversation may have spent (every message, as stored).
    #[arg(long, value_name = "USD")]
    pub(crate) conversation_max_cost_usd: Option<f64>,
    /// Most model calls the whole conversation may have made.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) conversation_max_turns: Option<u32>,
}

#[derive(Debug, Args)]
pub(crate) struct ToolsArgs {
    /// Agent name (a file under ROOT/agents/) or path to an agent file.
    pub(crate) agent: String,
    /// Workspace root (default: the nearest ancestor holding agents/ or flue.toml).
    #[arg(long)]
    pub(crate) root: Option<PathBuf>,
    /// Environment file to load instead of ROOT/.env.
    #[arg(long = "env")]
    pub(crate) env_file: Option<PathBuf>,
    /// List the tools of an agent of a bundle built by `flue build`.
    #[arg(long)]
    pub(crate) bundle: Option<PathBuf>,
    /// Print JSON: `{"agent", "tools": [{"name", "description", "inputSchema"}]}`.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct BuildArgs {
    /// Workspace root (default: the nearest ancestor holding agents/ or flue.toml).
    #[arg(long)]
    pub(crate) root: Option<PathBuf>,
    /// Output folder (default: ROOT/dist).
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    /// Print JSON: `{"ok": true, "bundle", "digest", "agents", "skills", "roles", "notes"}`,
    /// or `{"ok": false, "problems": [{"path", "line", "message"}]}` (the exit code is 1).
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct SchedulesArgs {
    /// Workspace root (default: the nearest ancestor holding agents/ or flue.toml).
    #[arg(long)]
    pub(crate) root: Option<PathBuf>,
    /// How many next fire times to list per schedule.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=100))]
    pub(crate) next: u16,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum SessionCommand {
    /// List the conversations of the workspace, most recent activity last.
    #[command(after_help = SESSION_HELP)]
    List(ListArgs),
    /// Print a stored transcript.
    #[command(after_help = SESSION_HELP)]
    Show(ShowArgs),
    /// Delete a conversation with its task sessions; refused while a message of it is queued,
    /// running or waiting for a decision. Its audit log and trash are kept.
    #[command(after_help = SESSION_HELP)]
    Delete(DeleteArgs),
    /// Start a new conversation from an earlier turn of a stored one (the turns before it are
    /// copied; nothing is shared). Prints the new conversation's id.
    #[command(after_help = FORK_HELP)]
    Fork(ForkArgs),
}

#[derive(Debug, Args)]
pub(crate) struct DeleteArgs {
    /// Conversation id (`AGENT:ID` when several agents have one of that id).
    #[arg(long)]
    pub(crate) id: String,
    /// Workspace root (default: the nearest ancestor holding agents/ or flue.toml).
    #[arg(long)]
    pub(crate) root: Option<PathBuf>,
    /// Delete from this Postgres store (`postgres://user:${PGPASSWORD}@host:5432/db`, as
    /// `flue serve --store`). Default: flue.toml's `[store] url`, else ROOT/.flue/flue.db.
    #[arg(long, value_name = "URL")]
    pub(crate) store: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ForkArgs {
    /// Conversation id to fork.
    #[arg(long)]
    pub(crate) id: String,
    /// The turn to fork at: the fork holds the turns before it (1 = the first `user:` line of
    /// `flue session show`; one past the last turn copies everything).
    #[arg(long, value_name = "N")]
    pub(crate) at: u64,
    /// The new conversation's id (default: a new ULID).
    #[arg(long, value_name = "ID")]
    pub(crate) new_id: Option<String>,
    /// Workspace root (default: the nearest ancestor holding agents/ or flue.toml).
    #[arg(long)]
    pub(crate) root: Option<PathBuf>,
    /// Use this Postgres store (`postgres://user:${PGPASSWORD}@host:5432/db`, as
    /// `flue serve --store`). Default: flue.toml's `[store] url`, else ROOT/.flue/flue.db.
    #[arg(long, value_name = "URL")]
    pub(crate) store: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct RewindArgs {
    /// Conversation id whose file changes to undo.
    #[arg(long)]
    pub(crate) id: String,
    /// Put the workspace's files back as they were before turn N (1 = the first `user:` line
    /// of `flue session show`).
    #[arg(
        long,
        value_name = "N",
        required_unless_present = "undo",
        conflicts_with = "undo"
    )]
    pub(crate) to: Option<u64>,
    /// Undo the rewind with this id (printed by the rewind; `flue audit` shows it as session
    /// `rewind:<id>`).
    #[arg(long, value_name = "REWIND_ID")]
    pub(crate) undo: Option<String>,
    /// Only list what the rewind would do.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Workspace root (default: the nearest ancestor holding agents/ or flue.toml).
    #[arg(long)]
    pub(crate) root: Option<PathBuf>,
    /// Use this Postgres store (`postgres://user:${PGPASSWORD}@host:5432/db`, as
    /// `flue serve --store`). Default: flue.toml's `[store] url`, else ROOT/.flue/flue.db.
    #[arg(long, value_name = "URL")]
    pub(crate) store: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Workspace root (default: the nearest ancestor holding agents/ or flue.toml, else the
    /// current directory when it holds .flue/).
    #[arg(long)]
    pub(crate) root: Option<PathBuf>,
    /// Read this Postgres store (`postgres://user:${PGPASSWORD}@host:5432/db`, as
    /// `flue serve --store`). Default: flue.toml's `[store] url`, else ROOT/.flue/flue.db.
    #[arg(long, value_name = "URL")]
    pub(crate) store: Option<String>,
    /// Only this agent's conversations.
    #[arg(long)]
    pub(crate) agent: Option<String>,
    /// Only conversations whose agent, id or first message contain every word of this text.
    #[arg(long, value_name = "TEXT")]
    pub(crate) search: Option<String>,
    /// The most recently active conversations to show (at most 500).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u16).range(1..=500))]
    pub(crate) limit: u16,
    /// Show the page before this one: the `next` cursor an earlier listing printed.
    #[arg(long, value_name = "CURSOR")]
    pub(crate) before: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ShowArgs {
    /// Conversation id.
    #[arg(long)]
    pub(crate) id: String,
    /// Session of the conversation: `default`, or one of its task sessions (`task:...`).
    #[arg(long, default_value = "default")]
    pub(crate) session: String,
    /// Workspace root (default: the nearest ancestor holding agents/ or flue.toml).
    #[arg(long)]
    pub(crate) root: Option<PathBuf>,
    /// Read this Postgres store (`postgres://user:${PGPASSWORD}@host:5432/db`, as
    /// `flue serve --store`). Default: flue.toml's `[store] url`, else ROOT/.flue/flue.db.
    #[arg(long, value_name = "URL")]
    pub(crate) store: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// Also print the session's task sessions (and theirs), nested.
    #[arg(long)]
    pub(crate) tree: bool,
}

#[derive(Debug, Args)]
pub(crate) struct AuditArgs {
    /// Conversation id (default: every conversation of the workspace).
    #[arg(long)]
    pub(crate) id: Option<String>,
    /// Workspace root (default: the nearest ancestor holding agents/ or flue.toml).
    #[arg(long)]
    pub(crate) root: Option<PathBuf>,
    /// Read this Postgres store (`postgres://user:${PGPASSWORD}@host:5432/db`, as
    /// `flue serve --store`). Default: flue.toml's `[store] url`, else ROOT/.flue/flue.db.
    #[arg(long, value_name = "URL")]
    pub(crate) store: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// Print each change's unified diff under its line.
    #[arg(long, conflicts_with = "json")]
    pub(crate) diff: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum TrashCommand {
    /// List what is in the trash, oldest first.
    #[command(after_help = TRASH_HELP)]
    List(TrashListArgs),
    /// Restore a trashed file to its original path (or `--to PATH`); never overwrites.
    #[command(after_help = TRASH_HELP)]
    Restore(TrashRestoreArgs),
}

#[derive(Debug, Args)]
pub(crate) struct TrashListArgs {
    /// Conversation id (default: every conversation of the workspace).
    #[arg(long)]
    pub(crate) id: Option<String>,
    /// Workspace root (default: the nearest ancestor holding agents/ or flue.toml).
    #[arg(long)]
    pub(crate) root: Option<PathBuf>,
    /// Read this Postgres store (`postgres://user:${PGPASSWORD}@host:5432/db`, as
    /// `flue serve --store`). Default: flue.toml's `[store] url`, else ROOT/.flue/flue.db.
    #[arg(long, value_name = "URL")]
    pub(crate) store: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct TrashRestoreArgs {
    /// The trash id (from `flue trash list`).
    pub(crate) trash_id: String,
    /// Conversation id.
    #[arg(long)]
    pub(crate) id: String,
    /// Restore to this path (relative to the workspace root) instead of the original one.
    #[arg(long)]
    pub(crate) to: Option<String>,
    /// Workspace root (default: the nearest ancestor holding agents/ or flue.toml).
    #[arg(long)]
    pub(crate) root: Option<PathBuf>,
    /// Read this Postgres store (`postgres://user:${PGPASSWORD}@host:5432/db`, as
    /// `flue serve --store`). Default: flue.toml's `[store] url`, else ROOT/.flue/flue.db.
    #[arg(long, value_name = "URL")]
    pub(crate) store: Option<String>,
    /// Print the result as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Workspace root (default: the nearest ancestor holding agents/ or flue.toml); with
    /// --bundle, where agents work and conversations are kept (default: the current directory).
    #[arg(long)]
    pub(crate) root: Option<PathBuf>,
    /// Serve the agents of a bundle built by `flue build`.
    #[arg(long)]
    pub(crate) bundle: Option<PathBuf>,
    /// Address to bind. Anything but loopback requires a token.
    #[arg(long, default_value = "127.0.0.1")]
    pub(crate) host: String,
    /// Port to bind (0 picks a free one; the address is printed on stderr).
    #[arg(long, default_value_t = 3000)]
    pub(crate) port: u16,
    /// Bearer token every request must carry (default: $FLUE_TOKEN).
    #[arg(long)]
    pub(crate) token: Option<String>,
    /// Environment file to load instead of ROOT/.env.
    #[arg(long = "env")]
    pub(crate) env_file: Option<PathBuf>,
    /// Most open connections at once (SSE streams included). Default: 20,000, or what the
    /// open-file limit allows when that is lower (a warning only when N is given and cannot be
    /// honoured).
    #[arg(long, value_name = "N")]
    pub(crate) max_connections: Option<usize>,
    /// Seconds running turns get to finish at shutdown.
    #[arg(long, default_value_t = 10)]
    pub(crate) grace: u64,
    /// Origin allowed to call cross-origin (repeatable; `scheme://host[:port]`, no
    /// wildcard); none = no CORS headers, and requests from other origins are refused.
    #[arg(long = "cors-origin")]
    pub(crate) cors_origins: Vec<String>,
    /// Host name (`name` or `name:port`) requests may address besides `localhost`, `127.0.0.1`
    /// and `[::1]` on the bound port (repeatable). Without a token only these hosts are
    /// served; with a token any host is, unless some are listed.
    #[arg(long = "allowed-host", value_name = "HOST")]
    pub(crate) allowed_hosts: Vec<String>,
    /// Milliseconds a connection may take to send a complete request head, counted from its
    /// opening or its previous response (so also how long an idle keep-alive connection stays).
    #[arg(long, default_value_t = 20_000, value_name = "MS")]
    pub(crate) header_timeout_ms: u64,
    /// Most bytes the request bodies in flight may hold together (MiB); more wait.
    #[arg(long, default_value_t = 64, value_name = "MIB")]
    pub(crate) inflight_body_mib: usize,
    /// Keep conversations in this Postgres database, shared with other `flue serve`
    /// processes (`postgres://user:${PGPASSWORD}@host:5432/db`; `${VAR}` comes from the
    /// environment). Default: flue.toml's `[store] url`, else ROOT/.flue/flue.db.
    #[arg(long, value_name = "URL")]
    pub(crate) store: Option<String>,
    /// Ownership lease in milliseconds: how long a node that stopped renewing (hung, or cut
    /// off) keeps its conversations. Default: flue.toml's `[store] lease_ms`, else 5000 with
    /// Postgres and 30000 with SQLite.
    #[arg(long, value_name = "MS")]
    pub(crate) lease_ms: Option<u64>,
    /// Also serve the dev console at `/`: read-only without a token (it shows conversations,
    /// transcripts and details, and changes nothing); with --token it asks for the token and
    /// then works as in `flue dev`.
    #[arg(long)]
    pub(crate) console: bool,
    /// Serve agents and accept `model` overrides naming a model the built-in provider's
    /// catalog does not know (a model newer than this flue); without it such an agent is
    /// refused at start and such an override with 400, as most likely a typo.
    #[arg(long)]
    pub(crate) allow_unknown_model: bool,
}

#[derive(Debug, Args)]
pub(crate) struct DevArgs {
    /// Workspace root (default: the nearest ancestor holding agents/ or flue.toml).
    #[arg(long)]
    pub(crate) root: Option<PathBuf>,
    /// Loopback address to bind (the console has no authentication).
    #[arg(long, default_value = "127.0.0.1")]
    pub(crate) host: String,
    /// Port to bind (0 picks a free one; the console url is printed on stderr).
    #[arg(long, default_value_t = 3583)]
    pub(crate) port: u16,
    /// Environment file to load instead of ROOT/.env (watched like .env).
    #[arg(long = "env")]
    pub(crate) env_file: Option<PathBuf>,
    /// Milliseconds of quiet after a file change before the workspace is rebuilt.
    #[arg(long, default_value_t = 100)]
    pub(crate) debounce_ms: u64,
    /// Host name (`name` or `name:port`) the console may be opened by besides `localhost`,
    /// `127.0.0.1` and `[::1]` on the bound port (repeatable).
    #[arg(long = "allowed-host", value_name = "HOST")]
    pub(crate) allowed_hosts: Vec<String>,
    /// Most open connections at once (the console's streams included).
    #[arg(long, default_value_t = 1_024)]
    pub(crate) max_connections: usize,
    /// Milliseconds a connection may take to send a complete request head, counted from its
    /// opening or its previous response (so also how long an idle keep-alive connection stays).
    #[arg(long, default_value_t = 20_000, value_name = "MS")]
    pub(crate) header_timeout_ms: u64,
}

#[derive(Debug, Args)]
pub(crate) struct TrustArgs {
    /// Workspace directory (default: found from the current directory).
    #[arg(long)]
    pub(crate) root: Option<PathBuf>,
    /// List the trusted workspaces.
    #[arg(long, conflicts_with = "revoke")]
    pub(crate) list: bool,
    /// Stop trusting the workspace.
    #[arg(long)]
    pub(crate) revoke: bool,
    /// Print the record (or, with --list, every record) as JSON on stdout.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub(crate) shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub(crate) struct ManArgs {
    /// Write `flue.1` and one page per subcommand (`flue-run.1`, `flue-session-list.1`, ...)
    /// into this folder instead of printing `flue.1`.
    #[arg(long, value_name = "DIR")]
    pub(crate) dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct InitArgs {
    /// Folder to create the workspace in (default: the current directory); created when
    /// missing. Existing files are never overwritten.
    pub(crate) dir: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum MemoryCommand {
    /// List memory notes, oldest first.
    #[command(after_help = MEMORY_HELP)]
    List(MemoryListArgs),
    /// Erase memory notes: a subject's (every agent's, or one agent's), or one note.
    #[command(after_help = MEMORY_HELP)]
    Delete(MemoryDeleteArgs),
}

#[derive(Debug, Args)]
pub(crate) struct MemoryListArgs {
    /// Only this agent's notes.
    #[arg(long)]
    pub(crate) agent: Option<String>,
    /// Only the notes about this subject.
    #[arg(long)]
    pub(crate) subject: Option<String>,
    /// Workspace root (default: the nearest ancestor holding agents/ or flue.toml).
    #[arg(long)]
    pub(crate) root: Option<PathBuf>,
    /// Use this Postgres store (`postgres://user:${PGPASSWORD}@host:5432/db`, as
    /// `flue serve --store`). Default: flue.toml's `[store] url`, else ROOT/.flue/flue.db.
    #[arg(long, value_name = "URL")]
    pub(crate) store: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct MemoryDeleteArgs {
    /// The subject whose notes to erase (with no --agent: every agent's, and the subject's
    /// bindings to conversations).
    #[arg(long)]
    pub(crate) subject: String,
    /// Only this agent's notes.
    #[arg(long)]
    pub(crate) agent: Option<String>,
    /// Only this note (needs --agent).
    #[arg(long, value_name = "NOTE_ID", requires = "agent")]
    pub(crate) id: Option<String>,
    /// Workspace root (default: the nearest ancestor holding agents/ or flue.toml).
    #[arg(long)]
    pub(crate) root: Option<PathBuf>,
    /// Use this Postgres store (`postgres://user:${PGPASSWORD}@host:5432/db`, as
    /// `flue serve --store`). Default: flue.toml's `[store] url`, else ROOT/.flue/flue.db.
    #[arg(long, value_name = "URL")]
    pub(crate) store: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct EvalArgs {
    #[command(subcommand)]
    pub(crate) command: Option<EvalCommand>,
    #[command(flatten)]
    pub(crate) run: EvalRunArgs,
}

#[derive(Debug, Subcommand)]
pub(crate) enum EvalCommand {
    /// List the stored eval runs, oldest first.
    #[command(after_help = EVAL_HELP)]
    List(EvalListArgs),
    /// Show a stored eval run: its summary and every failed check.
    #[command(after_help = EVAL_HELP)]
    Show(EvalShowArgs),
    /// Compare two stored runs case by case: improved, regressed, unchanged.
    #[command(after_help = EVAL_HELP)]
    Diff(EvalDiffArgs),
}

#[derive(Debug, Args)]
pub(crate) struct EvalRunArgs {
    /// Case files (`evals/probe.yaml`) or names: a file's name without `.yaml`, or a case's
    /// name. Default: every case of `evals/*.yaml`.
    pub(crate) select: Vec<String>,
    /// Workspace root (default: the nearest ancestor holding agents/ or flue.toml).
    #[arg(long)]
    pub(crate) root: Option<PathBuf>,
    /// Environment file to load instead of ROOT/.env.
    #[arg(long = "env")]
    pub(crate) env_file: Option<PathBuf>,
    /// Case runs at once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub(crate) concurrency: u16,
    /// Runs of each case; the summary gives each case's pass rate.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub(crate) repeat: u32,
    /// The lowest overall pass rate (0 to 1) that exits 0. Default: 1, every run of every case
    /// passes.
    #[arg(long, default_value_t = 1.0)]
    pub(crate) threshold: f64,
    /// Compare with this stored run (`last`: the newest before this one): each case marked
    /// improved, regressed or unchanged.
    #[arg(long, value_name = "RUN")]
    pub(crate) baseline: Option<String>,
    /// Continue a run that was cut short: its finished case runs are kept, the rest run.
    #[arg(long, value_name = "RUN", conflicts_with = "select")]
    pub(crate) resume: Option<String>,
    /// Keep the run's model traffic (every provider's, redacted) in the cassette, for
    /// `--replay`.
    #[arg(long, conflicts_with = "replay")]
    pub(crate) record: bool,
    /// Answer every model turn from the cassette instead of the provider: no key, no network;
    /// a request the cassette lacks fails its case, saying what differs.
    #[arg(long)]
    pub(crate) replay: bool,
    /// The cassette file, relative to the workspace root.
    #[arg(long, value_name = "FILE", default_value = "evals/cassette.json")]
    pub(crate) cassette: PathBuf,
    /// Write a JUnit XML report (one testcase per case) to this file.
    #[arg(long, value_name = "FILE")]
    pub(crate) junit: Option<PathBuf>,
    /// Use `flue dev`'s store (`.flue/dev.db`) instead of the workspace's (`.flue/flue.db`):
    /// the console of `flue dev` shows the runs and opens their cases.
    #[arg(long)]
    pub(crate) dev: bool,
    /// Print the run as one JSON object.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct EvalListArgs {
    /// Workspace root (default: the nearest ancestor holding agents/ or flue.toml).
    #[arg(long)]
    pub(crate) root: Option<PathBuf>,
    /// Use `flue dev`'s store (`.flue/dev.db`) instead of the workspace's (`.flue/flue.db`):
    /// the console of `flue dev` shows the runs and opens their cases.
    #[arg(long)]
    pub(crate) dev: bool,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct EvalShowArgs {
    /// The run's id (`last`: the newest).
    pub(crate) run: String,
    /// Workspace root (default: the nearest ancestor holding agents/ or flue.toml).
    #[arg(long)]
    pub(crate) root: Option<PathBuf>,
    /// Use `flue dev`'s store (`.flue/dev.db`) instead of the workspace's (`.flue/flue.db`):
    /// the console of `flue dev` shows the runs and opens their cases.
    #[arg(long)]
    pub(crate) dev: bool,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct EvalDiffArgs {
    /// The earlier run (the baseline).
    pub(crate) before: String,
    /// The later run.
    pub(crate) after: String,
    /// Workspace root (default: the nearest ancestor holding agents/ or flue.toml).
    #[arg(long)]
    pub(crate) root: Option<PathBuf>,
    /// Use `flue dev`'s store (`.flue/dev.db`) instead of the workspace's (`.flue/flue.db`):
    /// the console of `flue dev` shows the runs and opens their cases.
    #[arg(long)]
    pub(crate) dev: bool,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}
