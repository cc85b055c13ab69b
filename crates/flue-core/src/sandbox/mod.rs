//! Sandboxes: where commands run and files live, behind one trait.
//!
//! Agent code never knows which sandbox it runs in. Every implementation resolves paths
//! against its root and refuses any path that would escape it (`..`, absolute paths outside the
//! root, symlinks pointing out, NUL bytes) with [`FlueError::PathOutsideSandbox`], and any path
//! that reaches flue's own store (`.flue`) or a secrets file (a name starting with `.env`), at
//! any depth and through symlinks too, with [`FlueError::ProtectedPath`]; listings leave those
//! names out.

mod in_cwd;
mod local;
mod vfs;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::error::{FlueError, Result, SandboxErrorReason};
use crate::util::BoxFuture;

pub(crate) use in_cwd::in_cwd;
pub(crate) use local::DEFAULT_ENV_ALLOWLIST;
pub use local::{CommandLauncher, LocalSandbox};
pub use vfs::{VIRTUAL_ROOT, VirtualLimits, VirtualSandbox, VirtualSandboxBuilder};

/// The directory of flue's own files in a workspace: the store, its audit log and trash.
pub(crate) const STORE_DIR_NAME: &str = ".flue";

/// Names starting with this are secrets files (`.env`, `.env.local`, `.envrc`, ...).
pub(crate) const SECRETS_NAME_PREFIX: &str = ".env";

/// Exit code reported when a command hits its timeout.
pub const TIMEOUT_EXIT_CODE: i32 = 124;

/// Options of one command.
#[derive(Clone, Debug, Default)]
pub struct ExecOptions {
    /// Working directory (sandbox path); default: the sandbox's cwd.
    pub cwd: Option<String>,
    /// Extra environment variables.
    pub env: BTreeMap<String, String>,
    /// Wall-clock limit; on expiry the command is killed and exits with [`TIMEOUT_EXIT_CODE`].
    pub timeout: Option<Duration>,
    /// Fires to kill the command.
    pub cancel: Option<CancellationToken>,
}

impl ExecOptions {
    /// Default options.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the working directory.
    #[must_use]
    pub fn with_cwd(mut self, cwd: impl Into<String>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }

    /// Adds an environment variable.
    #[must_use]
    pub fn with_env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// Sets the timeout.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sets the cancellation token.
    #[must_use]
    pub fn with_cancel(mut self, cancel: CancellationToken) -> Self {
        self.cancel = Some(cancel);
        self
    }
}

/// What a command produced.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShellResult {
    /// Standard output (lossy UTF-8).
    pub stdout: String,
    /// Standard error (lossy UTF-8).
    pub stderr: String,
    /// Exit code; [`TIMEOUT_EXIT_CODE`] after a timeout.
    pub exit_code: i32,
}

/// Metadata of one path.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileStat {
    /// A regular file.
    pub is_file: bool,
    /// A directory.
    pub is_dir: bool,
    /// A symbolic link, when the sandbox can tell.
    pub is_symlink: Option<bool>,
    /// Size in bytes, when known.
    pub size: Option<u64>,
    /// Modification time in milliseconds since the epoch, when known.
    pub mtime_ms: Option<u64>,
}

/// Options of [`Sandbox::mkdir`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MkdirOptions {
    /// Create missing parents; an existing directory is not an error.
    pub recursive: bool,
}

/// Options of [`Sandbox::rm`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RmOptions {
    /// Remove directories and their contents.
    pub recursive: bool,
    /// A missing path is not an error.
    pub force: bool,
}

/// An isolated shell and filesystem. One per harness; its sessions and tasks share it.
///
/// Paths may be absolute (sandbox paths) or relative to [`Sandbox::cwd`].
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a sandbox",
    label = "implement `flue_core::Sandbox` for this type"
)]
pub trait Sandbox: Send + Sync {
    /// The default working directory, as an absolute sandbox path.
    fn cwd(&self) -> &str;

    /// Runs `command` with a bash-compatible shell.
    fn exec<'a>(
        &'a self,
        command: &'a str,
        options: ExecOptions,
    ) -> BoxFuture<'a, Result<ShellResult>>;

    /// Reads a whole file.
    fn read_file_bytes<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Vec<u8>>>;

    /// Writes a whole file, creating missing parent directories.
    fn write_file<'a>(&'a self, path: &'a str, content: &'a [u8]) -> BoxFuture<'a, Result<()>>;

    /// Metadata of `path` (not following a final symlink where the sandbox can tell).
    fn stat<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<FileStat>>;

    /// Entry names of a directory, sorted.
    fn readdir<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Vec<String>>>;

    /// Creates a directory.
    fn mkdir<'a>(&'a self, path: &'a str, options: MkdirOptions) -> BoxFuture<'a, Result<()>>;

    /// Removes a file or directory.
    fn rm<'a>(&'a self, path: &'a str, options: RmOptions) -> BoxFuture<'a, Result<()>>;

    /// Writes a whole file so that a crash leaves its old content or the new one, never part
    /// of it (what a rewind writes). The local sandbox writes a temporary file beside it and
    /// renames it over the file; the default writes in place ([`Sandbox::write_file`]).
    fn replace_file<'a>(&'a self, path: &'a str, content: &'a [u8]) -> BoxFuture<'a, Result<()>> {
        self.write_file(path, content)
    }

    /// Reads a file as UTF-8 text.
    fn read_file<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<String>> {
        Box::pin(async move {
            let bytes = self.read_file_bytes(path).await?;
            String::from_utf8(bytes).map_err(|_| {
                FlueError::sandbox(
                    SandboxErrorReason::InvalidUtf8,
                    format!("{path}: not valid UTF-8 text"),
                )
            })
        })
    }

    /// Whether `path` exists.
    fn exists<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            match self.stat(path).await {
                Ok(_) => Ok(true),
                Err(FlueError::Sandbox {
                    reason: SandboxErrorReason::NotFound,
                    ..
                }) => Ok(false),
                Err(err) => Err(err),
            }
        })
    }
}

/// Creates the sandbox of a harness: one per harness, shared by all its sessions and tasks.
///
/// [`HarnessBuilder::build`](crate::harness::HarnessBuilder::build) calls [`SandboxFactory::create`]
/// once, with the harness's agent instance id, when no sandbox was given directly. A server
/// that opens many harnesses uses a factory so that each agent instance gets its own sandbox.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a sandbox factory",
    label = "implement `flue_core::sandbox::SandboxFactory` for this type"
)]
pub trait SandboxFactory: Send + Sync {
    /// A new sandbox for the harness of agent instance `instance_id`. An error fails the
    /// harness build.
    fn create<'a>(&'a self, instance_id: &'a str) -> BoxFuture<'a, Result<Arc<dyn Sandbox>>>;
}

/// Joins `path` onto `cwd` and normalises `.` and `..` lexically, in sandbox (POSIX) form.
///
/// Returns an absolute sandbox path, or [`FlueError::PathOutsideSandbox`] when `..` climbs
/// above `/` or the path contains NUL.
pub fn normalize_path(cwd: &str, path: &str) -> Result<String> {
    if path.contains('\0') || cwd.contains('\0') {
        return Err(FlueError::PathOutsideSandbox {
            path: path.replace('\0', "\\0"),
        });
    }
    let joined = if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("{cwd}/{path}")
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in joined.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(FlueError::PathOutsideSandbox {
                        path: path.to_owned(),
                    });
                }
            }
            other => parts.push(other),
        }
    }
    Ok(format!("/{}", parts.join("/")))
}

/// Why one path component is off limits to a sandbox's file operations, if it is.
///
/// `.flue` holds flue's conversation store, audit log and trash; a name starting with `.env`
/// holds secrets such as API keys. Both are refused at any depth below the root, whether named
/// directly or reached through a symlink, and left out of listings.
pub fn protected_name(name: &str) -> Option<&'static str> {
    if name == STORE_DIR_NAME {
        Some("`.flue/` holds flue's conversation store, audit log and trash")
    } else if name.starts_with(SECRETS_NAME_PREFIX) {
        Some("`.env*` files hold secrets such as API keys")
    } else {
        None
    }
}

/// Refuses `abs` (an absolute, normalized sandbox path) when a component of it below `root` is
/// protected ([`protected_name`]), with [`FlueError::ProtectedPath`] naming `shown`.
pub fn check_protected(root: &str, abs: &str, shown: &str) -> Result<()> {
    let below = if root == "/" {
        Some(abs)
    } else {
        abs.strip_prefix(root.trim_end_matches('/'))
            .filter(|rest| rest.is_empty() || rest.starts_with('/'))
    };
    let Some(below) = below else {
        return Ok(());
    };
    match below.split('/').find_map(protected_name) {
        Some(reason) => Err(FlueError::ProtectedPath {
            path: shown.to_owned(),
            reason: reason.to_owned(),
        }),
        None => Ok(()),
    }
}
