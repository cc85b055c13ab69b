//! [`IsolatedSandbox`]: a host directory whose commands run in Linux namespaces.
//!
//! File operations work on the host directory exactly like flue-core's `LocalSandbox` (which
//! this wraps). Commands are started through a [`CommandLauncher`] that puts them in fresh
//! user, mount, pid and (unless network is enabled) network namespaces: the host filesystem
//! read-only, only the workspace writable, a private `/tmp`, and a pid namespace whose end
//! kills everything the command left running.
//!
//! flue's store and the workspace's secrets are masked from commands: the root's `.flue`
//! directory is an empty read-only tmpfs inside the namespace and every `.env*` entry of the
//! root is covered by `/dev/null`, so a command can neither read the keys nor read, change or
//! delete the store, its audit log or its trash. The file tools refuse those paths too (see
//! `LocalSandbox`).
//!
//! Two backends: bubblewrap (`bwrap`), preferred when it works, and util-linux `unshare`
//! with a small mount script. Which one works is probed once, when the sandbox is built.

#[cfg(test)]
mod tests;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use flue_core::{
    BoxFuture, ExecOptions, FlueError, LocalSandbox, Result, Sandbox,
    error::SandboxErrorReason,
    sandbox::ShellResult,
    sandbox::{CommandLauncher, FileStat, MkdirOptions, RmOptions, protected_name},
};

/// How long a backend probe may take before it counts as not working.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// The mount script run by `unshare` as root of the new user namespace.
///
/// Arguments: the workspace root, the working directory, the command, the `unshare` program.
/// The shell's working directory pins the workspace while a tmpfs covers `/tmp` (the workspace
/// may lie below it); the workspace is then bound back (from `.`, uncanonicalized, so the
/// covered directory is the source) as its own writable mount. The root's `.flue` and `.env*`
/// entries are masked: a directory by an empty read-only tmpfs, anything else by `/dev/null`.
/// Every other mount point but the namespace's own `/proc` is remounted read-only. The command
/// then runs in a nested user and mount namespace: there every mount above is locked, so not
/// even root of that namespace can unmount a mask or make the host writable again.
const UNSHARE_SCRIPT: &str = r#"set -e
root=$1; cwd=$2; cmd=$3; unshare_program=$4
cd "$root"
mount -t tmpfs -o mode=1777 flue-tmp /tmp
mkdir -p "$root"
mount --no-canonicalize --bind . "$root"
for entry in "$root"/.flue "$root"/.env*; do
  [ -e "$entry" ] || continue
  if [ -d "$entry" ]; then
    mount -t tmpfs -o ro,mode=0555 flue-masked "$entry"
  else
    mount --bind /dev/null "$entry"
  fi
done
while read -r _ _ _ _ point _; do
  point=$(printf '%b' "$point")
  case "$point" in
    "$root" | "$root"/* | /tmp | /proc) continue ;;
  esac
  mount -o remount,bind,ro "$point" 2>/dev/null || true
done < /proc/self/mountinfo
cd "$cwd"
set +e
exec "$unshare_program" --user --map-root-user --mount bash -c "$cmd"
"#;

/// The namespace tool that isolates commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum IsolationBackend {
    /// bubblewrap (`bwrap`).
    Bubblewrap,
    /// util-linux `unshare` with a mount script.
    Unshare,
}

impl IsolationBackend {
    /// The backend's name as users spell it: `bwrap` or `unshare`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Bubblewrap => "bwrap",
            Self::Unshare => "unshare",
        }
    }
}

impl std::fmt::Display for IsolationBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Builds an [`IsolatedSandbox`]; `build` probes the backends and fails with
/// [`SandboxErrorReason::Unavailable`] when none works.
#[derive(Clone, Debug)]
pub struct IsolatedSandboxBuilder {
    root: PathBuf,
    network: bool,
    backend: Option<IsolationBackend>,
    bwrap_program: PathBuf,
    unshare_program: PathBuf,
    env_allowlist: Option<Vec<String>>,
    output_limit: Option<usize>,
}

impl IsolatedSandboxBuilder {
    /// Lets commands use the host's network (default: no network at all, not even loopback).
    #[must_use]
    pub fn with_network(mut self) -> Self {
        self.network = true;
        self
    }

    /// Uses `backend` only, instead of the first that works (bubblewrap, then unshare).
    #[must_use]
    pub fn with_backend(mut self, backend: IsolationBackend) -> Self {
        self.backend = Some(backend);
        self
    }

    /// Where bubblewrap is (default: `bwrap` on `PATH`).
    #[must_use]
    pub fn with_bwrap_program(mut self, program: impl Into<PathBuf>) -> Self {
        self.bwrap_program = program.into();
        self
    }

    /// Where `unshare` is (default: `unshare` on `PATH`).
    #[must_use]
    pub fn with_unshare_program(mut self, program: impl Into<PathBuf>) -> Self {
        self.unshare_program = program.into();
        self
    }

    /// Replaces the host environment variables commands see (see
    /// `LocalSandbox::with_env_allowlist`).
    #[must_use]
    pub fn with_env_allowlist<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.env_allowlist = Some(names.into_iter().map(Into::into).collect());
        self
    }

    /// Sets how many bytes of each output stream a command keeps (default 1 MiB).
    #[must_use]
    pub fn with_output_limit(mut self, bytes: usize) -> Self {
        self.output_limit = Some(bytes);
        self
    }

    /// Checks the root, finds a working backend and returns the sandbox.
    pub async fn build(self) -> Result<IsolatedSandbox> {
        let mut local = LocalSandbox::new(&self.root)?;
        if let Some(names) = self.env_allowlist.clone() {
            local = local.with_env_allowlist(names);
        }
        if let Some(bytes) = self.output_limit {
            local = local.with_output_limit(bytes);
        }
        let candidates = match self.backend {
            Some(backend) => vec![backend],
            None => vec![IsolationBackend::Bubblewrap, IsolationBackend::Unshare],
        };
        let mut failures = Vec::new();
        let mut chosen = None;
        for backend in candidates {
            let launcher = NamespaceLauncher {
                backend,
                program: match backend {
                    IsolationBackend::Bubblewrap => self.bwrap_program.clone(),
                    IsolationBackend::Unshare => self.unshare_program.clone(),
                },
                root: local.root().to_path_buf(),
                network: self.network,
            };
            match launcher.probe().await {
                Ok(()) => {
                    chosen = Some(launcher);
                    break;
                }
                Err(why) => failures.push(format!("{backend}: {why}")),
            }
        }
        let Some(launcher) = chosen else {
            return Err(FlueError::sandbox(
                SandboxErrorReason::Unavailable,
                format!(
                    "the isolated sandbox cannot create Linux namespaces here ({}); install \
                     bubblewrap (`apt-get install bubblewrap`), or allow unprivileged user \
                     namespaces (`sysctl kernel.unprivileged_userns_clone=1`, or \
                     `kernel.apparmor_restrict_unprivileged_userns=0`), or use the local \
                     sandbox",
                    failures.join("; ")
                ),
            ));
        };
        let backend = launcher.backend;
        Ok(IsolatedSandbox {
            local: local.with_launcher(Arc::new(launcher)),
            backend,
            network: self.network,
        })
    }
}

/// A host directory whose commands run in Linux namespaces (bubblewrap or `unshare`).
///
/// Commands see the host filesystem read-only; only the workspace (the root) is writable,
/// `/tmp` is private and empty, there is no network unless enabled
/// ([`IsolatedSandboxBuilder::with_network`]), and a pid namespace ends every process the
/// command started when it exits. File operations, the environment allow-list, the output cap
/// and timeout/abort behave as in flue-core's `LocalSandbox`; paths never leave the root.
///
/// ```no_run
/// # async fn demo() -> flue_core::Result<()> {
/// use flue_connectors::IsolatedSandbox;
/// use flue_core::{ExecOptions, Sandbox};
/// let sandbox = IsolatedSandbox::builder("my-project").build().await?;
/// let res = sandbox.exec("touch /etc/x || echo read-only", ExecOptions::new()).await?;
/// assert_eq!(res.stdout, "read-only\n");
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct IsolatedSandbox {
    local: LocalSandbox,
    backend: IsolationBackend,
    network: bool,
}

impl IsolatedSandbox {
    /// Starts building a sandbox on the existing directory `root`.
    pub fn builder(root: impl Into<PathBuf>) -> IsolatedSandboxBuilder {
        IsolatedSandboxBuilder {
            root: root.into(),
            network: false,
            backend: None,
            bwrap_program: PathBuf::from("bwrap"),
            unshare_program: PathBuf::from("unshare"),
            env_allowlist: None,
            output_limit: None,
        }
    }

    /// The backend in use.
    pub fn backend(&self) -> IsolationBackend {
        self.backend
    }

    /// Whether commands may use the network.
    pub fn network(&self) -> bool {
        self.network
    }
}

impl Sandbox for IsolatedSandbox {
    fn cwd(&self) -> &str {
        self.local.cwd()
    }

    fn exec<'a>(
        &'a self,
        command: &'a str,
        options: ExecOptions,
    ) -> BoxFuture<'a, Result<ShellResult>> {
        self.local.exec(command, options)
    }

    fn read_file_bytes<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Vec<u8>>> {
        self.local.read_file_bytes(path)
    }

    fn write_file<'a>(&'a self, path: &'a str, content: &'a [u8]) -> BoxFuture<'a, Result<()>> {
        self.local.write_file(path, content)
    }

    fn stat<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<FileStat>> {
        self.local.stat(path)
    }

    fn readdir<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Vec<String>>> {
        self.local.readdir(path)
    }

    fn mkdir<'a>(&'a self, path: &'a str, options: MkdirOptions) -> BoxFuture<'a, Result<()>> {
        self.local.mkdir(path, options)
    }

    fn rm<'a>(&'a self, path: &'a str, options: RmOptions) -> BoxFuture<'a, Result<()>> {
        self.local.rm(path, options)
    }
}

/// Wraps each command in the namespaces of one backend.
#[derive(Debug)]
struct NamespaceLauncher {
    backend: IsolationBackend,
    program: PathBuf,
    /// The workspace: canonical host path, the same inside.
    root: PathBuf,
    network: bool,
}

impl NamespaceLauncher {
    /// Runs `true` the way commands will run; the reason when that fails.
    async fn probe(&self) -> std::result::Result<(), String> {
        let argv = self.argv_for("true", &self.root);
        let Some((program, args)) = argv.split_first() else {
            return Err("empty command line".to_owned());
        };
        let child = tokio::process::Command::new(program)
            .args(args)
            .current_dir(&self.root)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn();
        let child = match child {
            Ok(child) => child,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return Err(format!("{} is not installed", self.program.display()));
            }
            Err(err) => return Err(format!("cannot start {}: {err}", self.program.display())),
        };
        match tokio::time::timeout(PROBE_TIMEOUT, child.wait_with_output()).await {
            Err(_) => Err(format!(
                "{} did not finish within {} s",
                self.program.display(),
                PROBE_TIMEOUT.as_secs()
            )),
            Ok(Err(err)) => Err(format!("cannot run {}: {err}", self.program.display())),
            Ok(Ok(output)) if output.status.success() => Ok(()),
            Ok(Ok(output)) => {
                let stderr = String::from_utf8_lossy(&output.stderr);
                let reason = stderr.trim();
                Err(format!(
                    "{} failed ({}){}",
                    self.program.display(),
                    output.status,
                    if reason.is_empty() {
                        String::new()
                    } else {
                        format!(": {reason}")
                    }
                ))
            }
        }
    }

    fn argv_for(&self, command: &str, cwd: &Path) -> Vec<OsString> {
        match self.backend {
            IsolationBackend::Bubblewrap => {
                let masks = masks(&self.root);
                bwrap_argv(
                    &self.program,
                    &self.root,
                    cwd,
                    command,
                    self.network,
                    &masks,
                )
            }
            IsolationBackend::Unshare => {
                unshare_argv(&self.program, &self.root, cwd, command, self.network)
            }
        }
    }
}

impl CommandLauncher for NamespaceLauncher {
    fn argv(&self, command: &str, cwd: &Path) -> Result<Vec<OsString>> {
        Ok(self.argv_for(command, cwd))
    }

    /// The command runs as (or under) init of its own pid namespace, which ignores SIGTERM
    /// from outside: a stop is SIGKILL at once, which ends the namespace and everything in it.
    fn graceful_stop(&self) -> bool {
        false
    }
}

/// An entry of the workspace root hidden from commands.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Mask {
    /// Host path (the same inside).
    path: PathBuf,
    /// A directory (covered by an empty read-only tmpfs); else covered by `/dev/null`.
    is_dir: bool,
}

/// The protected entries (`.flue`, `.env*`) of the root that exist now, symlinks followed;
/// one directory read per command.
fn masks(root: &Path) -> Vec<Mask> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut masks: Vec<Mask> = entries
        .filter_map(std::result::Result::ok)
        .filter(|entry| protected_name(&entry.file_name().to_string_lossy()).is_some())
        .filter_map(|entry| {
            // A dangling symlink leads nowhere readable: nothing to cover.
            let metadata = std::fs::metadata(entry.path()).ok()?;
            Some(Mask {
                path: entry.path(),
                is_dir: metadata.is_dir(),
            })
        })
        .collect();
    masks.sort_by(|a, b| a.path.cmp(&b.path));
    masks
}

/// `bwrap` arguments: no capabilities, the host read-only, fresh /dev, /proc and /tmp, the
/// workspace writable with `masks` covered, every namespace new (the network one unless
/// `network`).
fn bwrap_argv(
    program: &Path,
    root: &Path,
    cwd: &Path,
    command: &str,
    network: bool,
    masks: &[Mask],
) -> Vec<OsString> {
    let mut argv: Vec<OsString> = vec![program.into()];
    // No capabilities, even when flue runs as root: a command must not be able to unmount
    // the masks or remount the host writable.
    let flags: &[&str] = &["--die-with-parent", "--unshare-all", "--cap-drop", "ALL"];
    argv.extend(flags.iter().map(OsString::from));
    if network {
        argv.push("--share-net".into());
    }
    let mounts: &[&str] = &[
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
    ];
    argv.extend(mounts.iter().map(OsString::from));
    argv.extend(["--bind".into(), root.into(), root.into()]);
    for mask in masks {
        let path = OsString::from(&mask.path);
        if mask.is_dir {
            argv.extend(["--tmpfs".into(), path.clone(), "--remount-ro".into(), path]);
        } else {
            argv.extend(["--ro-bind".into(), "/dev/null".into(), path]);
        }
    }
    argv.extend(["--chdir".into(), cwd.into()]);
    argv.extend(["--".into(), "bash".into(), "-c".into(), command.into()]);
    argv
}

/// `unshare` arguments: new user (mapped to root), mount, pid (with its own /proc) and,
/// unless `network`, network namespaces; [`UNSHARE_SCRIPT`] sets up the mounts.
fn unshare_argv(
    program: &Path,
    root: &Path,
    cwd: &Path,
    command: &str,
    network: bool,
) -> Vec<OsString> {
    let mut argv: Vec<OsString> = vec![program.into()];
    let flags: &[&str] = &[
        "--user",
        "--map-root-user",
        "--mount",
        "--pid",
        "--fork",
        "--kill-child",
        "--mount-proc",
    ];
    argv.extend(flags.iter().map(OsString::from));
    if !network {
        argv.push("--net".into());
    }
    argv.extend([
        "bash".into(),
        "-c".into(),
        UNSHARE_SCRIPT.into(),
        "flue-isolated".into(),
        root.into(),
        cwd.into(),
        command.into(),
        program.into(),
    ]);
    argv
}
