//! The errors of turning a workspace or bundle into runnable agents.

use std::path::PathBuf;

use flue_build::Diagnostics;
use flue_core::{ErrorInfo, FlueError};

/// Everything that can go wrong before an agent's first model call: finding the workspace,
/// reading `.env`, validating the workspace, naming an agent, opening its sandbox, MCP servers
/// and store. Grows over time: match with a wildcard.
///
/// Each variant has a stable [`kind`](HostError::kind); frontends print the message and put
/// [`to_info`](HostError::to_info) on the wire.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// No workspace root: the caller passes another root (`--root`).
    #[error("{message}")]
    RootNotFound {
        /// What was looked for, and where.
        message: String,
    },
    /// The workspace root exists but cannot be listed: the user fixes its permissions or
    /// passes another root.
    #[error("{message}")]
    RootUnreadable {
        /// The root, the operating system's error and the fix.
        message: String,
    },
    /// The agent name matches no agent file: the caller fixes the name.
    #[error(
        "unknown agent {name:?}{}: no agents/{name}.md in {origin} (agents: {known})",
        did_you_mean(name, known)
    )]
    UnknownAgent {
        /// The name asked for.
        name: String,
        /// The workspace root or bundle file the agents come from.
        origin: String,
        /// The agents there, comma-separated.
        known: String,
    },
    /// The env file is unreadable or malformed: the user fixes the file.
    #[error("{message}")]
    EnvFile {
        /// The env file.
        path: PathBuf,
        /// What is wrong, with the file and line.
        message: String,
    },
    /// Workspace (or bundle) validation failed: every problem, with file and line.
    #[error("{0}")]
    Diagnostics(Diagnostics),
    /// A runtime error (configuration, provider, sandbox, MCP, store).
    #[error(transparent)]
    Core(#[from] FlueError),
}

impl HostError {
    /// The stable kind string of this error.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::RootNotFound { .. } => "workspace_not_found",
            Self::RootUnreadable { .. } => "workspace_unreadable",
            Self::UnknownAgent { .. } => "unknown_agent",
            Self::EnvFile { .. } => "invalid_env_file",
            Self::Diagnostics(_) => "invalid_config",
            Self::Core(err) => err.kind(),
        }
    }

    /// The wire shape of this error.
    pub fn to_info(&self) -> ErrorInfo {
        ErrorInfo {
            kind: self.kind().to_owned(),
            message: self.to_string(),
        }
    }
}

impl From<HostError> for FlueError {
    /// The runtime's view of an assembly error (an agent registry returns `FlueError`): an
    /// unknown agent becomes [`FlueError::UnknownAgent`], the others configuration errors
    /// with the same message.
    fn from(err: HostError) -> Self {
        match err {
            HostError::Core(err) => err,
            HostError::UnknownAgent { name, known, .. } => FlueError::UnknownAgent {
                agent: name,
                known: known
                    .split(", ")
                    .filter(|name| !name.is_empty())
                    .map(str::to_owned)
                    .collect(),
            },
            other @ (HostError::RootNotFound { .. }
            | HostError::RootUnreadable { .. }
            | HostError::EnvFile { .. }
            | HostError::Diagnostics(_)) => FlueError::config(other.to_string()),
        }
    }
}

/// ` (did you mean "hello"?)` for the known agent (`known`, comma-separated) that `name` most
/// likely misspells, or nothing.
fn did_you_mean(name: &str, known: &str) -> String {
    flue_build::suggest_name(name, known.split(", "))
        .map(|candidate| format!(" (did you mean {candidate:?}?)"))
        .unwrap_or_default()
}
