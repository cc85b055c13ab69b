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
    /// The workspace declares commands to run or places to send the user's secrets, and the
    /// user has not trusted it (or what trust covers changed): the user reviews the list and
    /// runs `flue trust`, or trusts it for one process with `--trust` or `FLUE_TRUST=1`.
    #[error("{}", untrusted_message(root, *changed, needs))]
    Untrusted {
        /// The workspace root.
        root: PathBuf,
        /// True when the workspace was trusted before and what trust covers changed since.
        changed: bool,
        /// What needs trust, one line each.
        needs: Vec<String>,
    },
    /// The user's trust file cannot be read or written: the message names the file and the
    /// fix.
    #[error("{message}")]
    TrustFile {
        /// The file, what went wrong and the fix.
        message: String,
    },
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
            Self::Untrusted { .. } => "workspace_untrusted",
            Self::TrustFile { .. } => "trust_file",
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
            | HostError::Diagnostics(_)
            | HostError::Untrusted { .. }
            | HostError::TrustFile { .. }) => FlueError::config(other.to_string()),
        }
    }
}

/// The message of [`HostError::Untrusted`]: what needs trust and the three ways to give it.
fn untrusted_message(root: &std::path::Path, changed: bool, needs: &[String]) -> String {
    let state = if changed {
        "changed since you trusted it (or this command uses parts of it you have not trusted)"
    } else {
        "is not trusted"
    };
    let mut message = format!("the workspace {} {state}, and it would:\n", root.display());
    for line in needs {
        message.push_str("  - ");
        message.push_str(line);
        message.push('\n');
    }
    message.push_str(&format!(
        "review it, then run `flue trust --root {}` to trust it (recorded in your own \
         configuration, not in the workspace), or pass --trust (or set FLUE_TRUST=1) to trust \
         it for this one command",
        root.display()
    ));
    message
}

/// ` (did you mean "hello"?)` for the known agent (`known`, comma-separated) that `name` most
/// likely misspells, or nothing.
fn did_you_mean(name: &str, known: &str) -> String {
    flue_build::suggest_name(name, known.split(", "))
        .map(|candidate| format!(" (did you mean {candidate:?}?)"))
        .unwrap_or_default()
}
