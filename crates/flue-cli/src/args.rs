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
    /// Inspect stored conversations.
    Session {
        #[command(subcommand)]
        command: SessionCommand,
    },
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
    /// Conversation id: continue it, or create it (default: a fresh id).
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
}
