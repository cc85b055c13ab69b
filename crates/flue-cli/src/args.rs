//! Command-line arguments, as clap parses them.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use flue_build::SandboxKind;

/// Flue: an agent harness. Agents are markdown files; `flue` runs them.
#[derive(Debug, Parser)]
#[command(name = "flue", version, about, long_about = None, propagate_version = true)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run one message through an agent and print its reply.
    Run(RunArgs),
    /// Validate the workspace and write a self-contained bundle.
    Build(BuildArgs),
    /// Inspect stored conversations.
    Session {
        #[command(subcommand)]
        command: SessionCommand,
    },
    /// Show the audit log of the file tools: every change an agent made, or tried to make.
    Audit(AuditArgs),
    /// Serve every agent of the workspace (or bundle) over HTTP, speaking the Flue
    /// conversation protocol.
    Serve(ServeArgs),
    /// List and restore files the file tools deleted or overwrote.
    Trash {
        #[command(subcommand)]
        command: TrashCommand,
    },
    /// Sign in to and out of remote MCP servers that use OAuth.
    Mcp {
        #[command(subcommand)]
        command: McpCommand,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum McpCommand {
    /// Sign in to a remote MCP server (OAuth): prints the url to open, waits for the browser to
    /// come back to a loopback address, and keeps the tokens in the workspace store.
    Login(McpServerArgs),
    /// Forget the stored OAuth tokens of a remote MCP server.
    Logout(McpServerArgs),
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

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Agent name (a file under ROOT/agents/) or path to an agent file.
    pub(crate) agent: String,
    /// The message to send.
    #[arg(short = 'm', long = "message")]
    pub(crate) message: String,
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
    /// Model override, PROVIDER/MODEL.
    #[arg(long)]
    pub(crate) model: Option<String>,
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
    /// Accept MCP servers' requests for input (elicitation) with the defaults their schema
    /// gives, without asking.
    #[arg(long)]
    pub(crate) yes: bool,
}

#[derive(Debug, Args)]
pub(crate) struct BuildArgs {
    /// Workspace root (default: the nearest ancestor holding agents/ or flue.toml).
    #[arg(long)]
    pub(crate) root: Option<PathBuf>,
    /// Output folder (default: ROOT/dist).
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum SessionCommand {
    /// Print a stored transcript.
    Show(ShowArgs),
}

#[derive(Debug, Args)]
pub(crate) struct ShowArgs {
    /// Conversation id.
    #[arg(long)]
    pub(crate) id: String,
    /// Session name.
    #[arg(long, default_value = "default")]
    pub(crate) session: String,
    /// Workspace root (default: the nearest ancestor holding agents/ or flue.toml).
    #[arg(long)]
    pub(crate) root: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// Also print the session's task sessions (and theirs), nested.
    #[arg(long)]
    pub(crate) tree: bool,
}

#[derive(Debug, Args)]
pub(crate) struct AuditArgs {
    /// Conversation id (agent instance id).
    #[arg(long)]
    pub(crate) id: String,
    /// Workspace root (default: the nearest ancestor holding agents/ or flue.toml).
    #[arg(long)]
    pub(crate) root: Option<PathBuf>,
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
    List(TrashListArgs),
    /// Restore a trashed file to its original path (or `--to PATH`); never overwrites.
    Restore(TrashRestoreArgs),
}

#[derive(Debug, Args)]
pub(crate) struct TrashListArgs {
    /// Conversation id (agent instance id).
    #[arg(long)]
    pub(crate) id: String,
    /// Workspace root (default: the nearest ancestor holding agents/ or flue.toml).
    #[arg(long)]
    pub(crate) root: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct TrashRestoreArgs {
    /// The trash id (from `flue trash list`).
    pub(crate) trash_id: String,
    /// Conversation id (agent instance id).
    #[arg(long)]
    pub(crate) id: String,
    /// Restore to this path (relative to the workspace root) instead of the original one.
    #[arg(long)]
    pub(crate) to: Option<String>,
    /// Workspace root (default: the nearest ancestor holding agents/ or flue.toml).
    #[arg(long)]
    pub(crate) root: Option<PathBuf>,
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
    /// Most open connections at once (SSE streams included).
    #[arg(long, default_value_t = 20_000)]
    pub(crate) max_connections: usize,
    /// Seconds running turns get to finish at shutdown.
    #[arg(long, default_value_t = 10)]
    pub(crate) grace: u64,
    /// Origin allowed to call cross-origin (repeatable); none = no CORS headers.
    #[arg(long = "cors-origin")]
    pub(crate) cors_origins: Vec<String>,
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
}
