//! [`LocalSandbox`]: a host directory used as the sandbox.
//!
//! Sandbox paths are host paths. The canonical root is the working directory, relative paths
//! resolve against it, and absolute paths must lie inside it. Paths are checked lexically,
//! then every file operation walks from a directory handle of the root held open for the
//! sandbox's life (`util/beneath.rs`): one component at a time, never letting the kernel follow a
//! symlink, so a directory swapped for a symlink between two steps (by the agent's own
//! commands, running at the same time) cannot lead an operation out of the root. `.flue` and
//! `.env*` entries are refused at any depth and left out of listings. Commands run as `bash
//! -c` in a process group of their own, with a cleared environment; the whole group is killed
//! on timeout, on abort, and once the shell exits, and so is every process that left the group
//! but still carries the command's tag in its environment (`strays`: a `setsid` daemon, a
//! double fork), so nothing the command started outlives the call unless it shed its
//! environment or had another program start it. A watchdog process joins each group and does
//! the same if flue itself dies (even by SIGKILL).
//!
//! Commands are not confined: a local command is the user's own shell, which can read any
//! file the user can (`.env` included). Confining commands is the isolated sandbox's job.
//!
//! What commands cannot read is flue itself: its environment (where the API keys live) and its
//! memory. Creating a local sandbox makes the process non-dumpable (`PR_SET_DUMPABLE` 0), which
//! closes `/proc/<pid>/environ`, `/proc/<pid>/mem` and ptrace to processes of the same user that
//! lack the capabilities below, root's included; and commands are started from a thread that
//! has removed those capabilities from its bounding and inheritable sets, so that a command run
//! as root does not get them back at `exec` ([`spawn_without_introspection`]).

mod strays;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use rustix::fs::FileType;
use rustix::thread::CapabilitySet;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, Command};
use tokio::time::Instant;

use crate::error::{BoxError, FlueError, Result, SandboxErrorReason};
use crate::sandbox::{
    ExecOptions, FileStat, MkdirOptions, RmOptions, Sandbox, ShellResult, TIMEOUT_EXIT_CODE,
    normalize_path, protected_name,
};
use crate::util::BoxFuture;
use crate::util::beneath::{self, Failure, Tree};

/// Host environment variables that commands see by default.
pub(crate) const DEFAULT_ENV_ALLOWLIST: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "HOSTNAME", "SHELL", "LANG", "LC_ALL", "LC_CTYPE", "TZ",
    "TERM", "TMPDIR",
];

/// `PATH` of commands when neither the host nor the options provide one.
const FALLBACK_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Bytes kept of each output stream by default.
const DEFAULT_OUTPUT_LIMIT: usize = 1024 * 1024;

/// How long a process group gets between SIGTERM and SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(2);

/// How long output is still read once the command's process group is dead; bounds the wait
/// for a process that left the group but holds the pipes open.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// How often a terminating process group is checked for survivors.
const KILL_POLL: Duration = Duration::from_millis(20);

/// The watchdog of a command's process group: a bash in the group that waits for its standard
/// input, a pipe whose other end only flue holds, to close, then kills every process started
/// after the command's shell (`$2`; all of them after the pids wrapped around) whose
/// environment holds `$1`, the command's tag variable (the processes that left the group, see
/// `strays`; none for a launcher's command), a few rounds for children forked meanwhile, and
/// then the group. The pipe closes when flue has died, whatever killed it (when the command
/// ends, flue kills the group, the watchdog with it, and sweeps the tagged processes itself).
/// Being a member, it also keeps the group id from being reused while it runs.
const WATCHDOG_SCRIPT: &str = r#"entry=$1 first=$2
while read -r _; do :; done
[ -n "$entry" ] && for round in 1 2 3 4 5 6 7 8; do
  read -r last < /proc/sys/kernel/ns_last_pid || last=0
  found=
  for dir in /proc/[0-9]*; do
    pid=${dir#/proc/}
    if [ "$pid" -le "$first" ] && [ "$last" -ge "$first" ]; then continue; fi
    [ "$pid" = "$$" ] && continue
    while IFS= read -r -d '' var; do
      if [ "$var" = "$entry" ]; then
        kill -s KILL "$pid" && found=1
        break
      fi
    done 2>/dev/null < "$dir/environ"
  done
  [ -n "$found" ] || break
done
kill -s KILL 0"#;

/// The capabilities that open another process's `/proc/<pid>/environ`, `/proc/<pid>/mem` or
/// ptrace to their holder even when that process is non-dumpable: `CAP_SYS_PTRACE` by the
/// kernel's documented rule, and on current kernels (measured on Linux 6.18) also
/// `CAP_SYS_ADMIN` and `CAP_PERFMON` for `environ`. Commands of the default launcher never hold
/// them.
const INTROSPECTION_CAPABILITIES: CapabilitySet = CapabilitySet::SYS_PTRACE
    .union(CapabilitySet::SYS_ADMIN)
    .union(CapabilitySet::PERFMON);

/// Makes this process non-dumpable, once: its `/proc/<pid>/environ` and `/proc/<pid>/mem`, and
/// ptrace, are then refused to every process without `CAP_SYS_PTRACE` (and, for `environ`,
/// without the rest of [`INTROSPECTION_CAPABILITIES`]), the same user's included. That keeps the
/// API keys in flue's environment and memory out of the reach of local commands (they are its
/// children, running as the same user). It also turns core dumps off, which would hold the same
/// keys. Commands become dumpable again once they exec, and nothing else of flue reads its own
/// `/proc` entries through a path that needs it dumpable.
fn hide_this_process() {
    static HIDDEN: std::sync::Once = std::sync::Once::new();
    HIDDEN.call_once(|| {
        // Fails only on kernels without prctl; nothing better to do there.
        let _ = nix::sys::prctl::set_dumpable(false);
    });
}

/// Spawns `command` from a thread of its own that has dropped [`INTROSPECTION_CAPABILITIES`]
/// from its bounding and inheritable sets first (capability sets belong to a thread, and a
/// forked child starts with its thread's): a command run as root then starts without them, so
/// it cannot read this non-dumpable process's environment or memory; a command run as an
/// ordinary user had none of them anyway (there the drop fails for want of `CAP_SETPCAP`, and
/// is not needed). The thread ends with the spawn, so no other work of flue loses anything.
fn spawn_without_introspection(command: &mut Command) -> io::Result<Child> {
    // Outside a tokio runtime the spawn fails as it would have anyway.
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return command.spawn();
    };
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("flue-spawn".into())
            .spawn_scoped(scope, || {
                let _entered = runtime.enter();
                for capability in INTROSPECTION_CAPABILITIES.iter() {
                    let _ = rustix::thread::remove_capability_from_bounding_set(capability);
                }
                if let Ok(mut sets) = rustix::thread::capabilities(None)
                    && sets.inheritable.intersects(INTROSPECTION_CAPABILITIES)
                {
                    sets.inheritable.remove(INTROSPECTION_CAPABILITIES);
                    let _ = rustix::thread::set_capabilities(None, sets);
                }
                command.spawn()
            })?
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the thread starting the command panicked")))
    })
}

/// How a [`LocalSandbox`] starts the process of one command; the default is `bash -c COMMAND`.
///
/// Connectors use it to wrap commands, for example in Linux namespaces. The sandbox keeps
/// everything around the process: the working directory, the environment, output capture,
/// the process group, timeout and abort. [`LocalSandbox::exec`](Sandbox::exec) calls
/// [`CommandLauncher::argv`] once per command, after resolving the working directory.
pub trait CommandLauncher: Send + Sync + std::fmt::Debug {
    /// The program and arguments that run `command`, a bash command line, in `cwd`: an
    /// existing directory inside the sandbox root (canonical host path). The process starts
    /// in `cwd` already. An error is returned to the caller of `exec` unchanged.
    fn argv(&self, command: &str, cwd: &Path) -> Result<Vec<OsString>>;

    /// Whether a timed-out or aborted command gets SIGTERM and a grace of 2 s to end before
    /// SIGKILL (the default), or SIGKILL at once. A launcher whose command runs as init of a
    /// new pid namespace answers false: init ignores a SIGTERM sent from outside its
    /// namespace, so the command would go on running (and writing) through the whole grace,
    /// while SIGKILL to init ends every process of the namespace at once.
    fn graceful_stop(&self) -> bool {
        true
    }
}

/// A host directory as a sandbox.
///
/// The root is the working directory: [`Sandbox::cwd`] returns its canonical host path,
/// relative paths resolve against it and absolute paths are accepted only inside it. A path
/// that leads out of the root, lexically or through a symlink, is refused with
/// [`FlueError::PathOutsideSandbox`]; one that names or leads to `.flue` or a `.env*` file with
/// [`FlueError::ProtectedPath`]. File operations are race-free: they walk from a handle of the
/// root opened here, so nothing running at the same time (the agent's own commands included)
/// can swap a checked directory for a symlink that leads them out.
///
/// Commands run with `bash -c` in their own process group, with standard input closed and an
/// environment made of an allow-list of host variables plus [`ExecOptions::env`] and
/// `FLUE_COMMAND_TAG` (a value of the command's own, by which the processes it leaves running
/// outside its group are found and killed when it ends). Each output stream keeps its first
/// megabyte by default ([`LocalSandbox::with_output_limit`]).
///
/// ```
/// use flue_core::{LocalSandbox, Sandbox};
/// let dir = tempfile::tempdir().unwrap();
/// let sandbox = LocalSandbox::new(dir.path()).unwrap();
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// sandbox.write_file("notes/todo.txt", b"ship it").await.unwrap();
/// assert_eq!(sandbox.read_file("notes/todo.txt").await.unwrap(), "ship it");
/// assert!(sandbox.read_file("../escape.txt").await.is_err());
/// # });
/// ```
#[derive(Clone, Debug)]
pub struct LocalSandbox {
    root: PathBuf,
    /// The root held open: every file operation walks from this handle.
    tree: Arc<Tree>,
    root_text: String,
    env_allowlist: Vec<String>,
    output_limit: usize,
    launcher: Option<Arc<dyn CommandLauncher>>,
}

impl LocalSandbox {
    /// A sandbox rooted at `root`, which must be an existing directory.
    ///
    /// The root is stored canonicalized (symlinks resolved); it must be valid UTF-8.
    pub fn new(root: impl Into<PathBuf>) -> Result<Self> {
        let root = root.into();
        let shown = root.display().to_string();
        let canonical = std::fs::canonicalize(&root)
            .map_err(|err| io_error("open sandbox root", &shown, err))?;
        let metadata = std::fs::metadata(&canonical)
            .map_err(|err| io_error("open sandbox root", &shown, err))?;
        if !metadata.is_dir() {
            return Err(FlueError::sandbox(
                SandboxErrorReason::NotADirectory,
                format!("open sandbox root {shown}: not a directory"),
            ));
        }
        let Some(root_text) = canonical.to_str().map(str::to_owned) else {
            return Err(FlueError::sandbox(
                SandboxErrorReason::Unsupported,
                format!("open sandbox root {shown}: the path is not valid UTF-8"),
            ));
        };
        let tree = Tree::open(&canonical, protected_name)
            .map_err(|err| io_error("open sandbox root", &shown, err))?;
        hide_this_process();
        Ok(Self {
            root: canonical,
            tree: Arc::new(tree),
            root_text,
            env_allowlist: DEFAULT_ENV_ALLOWLIST
                .iter()
                .map(|name| (*name).to_owned())
                .collect(),
            output_limit: DEFAULT_OUTPUT_LIMIT,
            launcher: None,
        })
    }

    /// Starts commands through `launcher` instead of plain `bash -c`.
    #[must_use]
    pub fn with_launcher(mut self, launcher: Arc<dyn CommandLauncher>) -> Self {
        self.launcher = Some(launcher);
        self
    }

    /// The canonical host path of the root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Replaces the names of the host environment variables that commands see.
    ///
    /// The default is `PATH HOME USER LOGNAME HOSTNAME SHELL LANG LC_ALL LC_CTYPE TZ TERM
    /// TMPDIR`. Nothing else from the host environment reaches a command; without `PATH`,
    /// commands get `/usr/local/bin:/usr/bin:/bin`.
    #[must_use]
    pub fn with_env_allowlist<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.env_allowlist = names.into_iter().map(Into::into).collect();
        self
    }

    /// Sets how many bytes of each output stream (stdout, stderr) a command keeps.
    ///
    /// Output past the limit is read and dropped, and a note saying so ends the stream.
    #[must_use]
    pub fn with_output_limit(mut self, bytes: usize) -> Self {
        self.output_limit = bytes;
        self
    }

    /// The components of `path` below the root (relative paths start at the root), checked
    /// lexically: `..` never climbs above the root and absolute paths lie inside it.
    fn components(&self, path: &str) -> Result<Vec<OsString>> {
        let lexical = PathBuf::from(normalize_path(&self.root_text, path)?);
        let Ok(below) = lexical.strip_prefix(&self.root) else {
            return Err(FlueError::PathOutsideSandbox {
                path: path.to_owned(),
            });
        };
        Ok(below
            .components()
            .map(|part| part.as_os_str().to_owned())
            .collect())
    }

    /// Runs `operation` on `path`'s components below the root on the blocking pool, and turns
    /// its failure into a [`FlueError`] about `path`.
    async fn beneath<T, F>(&self, verb: &'static str, path: &str, operation: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Tree, &[OsString]) -> beneath::Outcome<T> + Send + 'static,
    {
        let components = self.components(path)?;
        let tree = Arc::clone(&self.tree);
        let outcome = tokio::task::spawn_blocking(move || operation(&tree, &components))
            .await
            .map_err(|err| FlueError::Sandbox {
                message: format!("{verb} {path}: the file operation did not finish"),
                reason: SandboxErrorReason::Other,
                source: Some(BoxError::from(err)),
            })?;
        outcome.map_err(|failure| failure_error(verb, path, failure))
    }

    /// The environment of a command: allow-listed host variables, then the options' ones.
    fn command_env(&self, extra: &BTreeMap<String, String>) -> BTreeMap<OsString, OsString> {
        let mut env: BTreeMap<OsString, OsString> = self
            .env_allowlist
            .iter()
            .filter_map(|name| std::env::var_os(name).map(|value| (OsString::from(name), value)))
            .collect();
        env.extend(
            extra
                .iter()
                .map(|(key, value)| (OsString::from(key), OsString::from(value))),
        );
        env.entry(OsString::from("PATH"))
            .or_insert_with(|| OsString::from(FALLBACK_PATH));
        env
    }

    async fn read_bytes(&self, path: &str) -> Result<Vec<u8>> {
        self.beneath("read", path, Tree::read).await
    }

    async fn write(&self, path: &str, content: &[u8]) -> Result<()> {
        let content = content.to_vec();
        self.beneath("write", path, move |tree, components| {
            tree.write(components, &content)
        })
        .await
    }

    async fn replace(&self, path: &str, content: &[u8]) -> Result<()> {
        let content = content.to_vec();
        self.beneath("write", path, move |tree, components| {
            tree.replace(components, &content)
        })
        .await
    }

    async fn stat_path(&self, path: &str) -> Result<FileStat> {
        let stat = self.beneath("stat", path, Tree::stat).await?;
        Ok(FileStat {
            is_file: stat.file_type == FileType::RegularFile,
            is_dir: stat.file_type == FileType::Directory,
            is_symlink: Some(stat.file_type == FileType::Symlink),
            size: Some(stat.size),
            mtime_ms: stat.mtime_ms,
        })
    }

    async fn list(&self, path: &str) -> Result<Vec<String>> {
        let names = self.beneath("list", path, Tree::list).await?;
        let mut names: Vec<String> = names
            .into_iter()
            .map(|name| name.to_string_lossy().into_owned())
            .collect();
        names.sort();
        Ok(names)
    }

    async fn make_dir(&self, path: &str, options: MkdirOptions) -> Result<()> {
        self.beneath("create directory", path, move |tree, components| {
            tree.mkdir(components, options.recursive)
        })
        .await
    }

    async fn remove(&self, path: &str, options: RmOptions) -> Result<()> {
        let res = self
            .beneath("remove", path, move |tree, components| {
                tree.remove(components, options.recursive)
            })
            .await;
        match res {
            Err(FlueError::Sandbox {
                reason: SandboxErrorReason::NotFound,
                ..
            }) if options.force => Ok(()),
            other => other,
        }
    }

    /// Starts the watchdog of the process group `pgid`, whose command carries `tag` (see
    /// [`WATCHDOG_SCRIPT`]).
    fn spawn_watchdog(&self, pgid: i32, tag: Option<&str>) -> Result<Child> {
        Command::new("bash")
            .args(["-c", WATCHDOG_SCRIPT, "flue-watchdog"])
            .arg(tag.map_or(String::new(), |tag| format!("{}={tag}", strays::TAG_VAR)))
            .arg(pgid.to_string())
            .current_dir(&self.root)
            .env_clear()
            .envs(self.command_env(&BTreeMap::new()))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(pgid)
            .kill_on_drop(true)
            .spawn()
            .map_err(|err| other_error("start the watchdog of the command", err))
    }

    /// Runs `command` as [`Sandbox::exec`] does, with `input` on its standard input: written
    /// while its output is read (a command that never reads it cannot stall flue; one that
    /// exits without reading it is fine), then closed. Standard output keeps `stdout_limit`
    /// bytes, standard error the sandbox's output limit. For command hooks, whose input can be
    /// far larger than an environment variable may be.
    pub(crate) async fn exec_with_input(
        &self,
        command: &str,
        options: ExecOptions,
        input: Vec<u8>,
        stdout_limit: usize,
    ) -> Result<ShellResult> {
        self.run(
            command,
            options,
            Some(Piped {
                input,
                stdout_limit,
            }),
        )
        .await
    }

    async fn run(
        &self,
        command: &str,
        options: ExecOptions,
        piped: Option<Piped>,
    ) -> Result<ShellResult> {
        let cancel = options.cancel.clone().unwrap_or_default();
        if cancel.is_cancelled() {
            return Err(FlueError::Aborted);
        }
        let cwd_text = options.cwd.as_deref().unwrap_or(&self.root_text);
        // Checked race-free; the command then starts in it by path. A local command is the
        // user's own shell (it can `cd` anywhere); an isolated one enters it inside its
        // namespace, where only the workspace is writable.
        self.beneath("run in", cwd_text, |tree, components| {
            tree.check_dir(components)
        })
        .await?;
        let mut cwd = self.root.clone();
        cwd.extend(self.components(cwd_text)?);

        let argv = match &self.launcher {
            Some(launcher) => launcher.argv(command, &cwd)?,
            None => vec!["bash".into(), "-c".into(), command.into()],
        };
        let Some((program, args)) = argv.split_first() else {
            return Err(FlueError::sandbox(
                SandboxErrorReason::Other,
                "start command: the launcher returned an empty command line",
            ));
        };
        // A launcher's commands end with their namespace; plain ones are found by their tag.
        let tag = self.launcher.is_none().then(strays::new_tag);
        let mut env = self.command_env(&options.env);
        if let Some(tag) = &tag {
            env.insert(strays::TAG_VAR.into(), tag.into());
        }
        let (stdout_limit, input) = match piped {
            Some(piped) => (piped.stdout_limit, Some(piped.input)),
            None => (self.output_limit, None),
        };
        let mut command = Command::new(program);
        command
            .args(args)
            .current_dir(&cwd)
            .env_clear()
            .envs(env)
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        // A launcher owns the process it starts (the isolated one needs root's capabilities to
        // build its namespaces, and hides flue behind a pid namespace instead).
        let spawned = match &self.launcher {
            Some(_) => command.spawn(),
            None => spawn_without_introspection(&mut command),
        };
        let mut child = spawned
            .map_err(|err| other_error(&format!("start {}", program.to_string_lossy()), err))?;
        let Some(pgid) = child.id().and_then(|pid| i32::try_from(pid).ok()) else {
            return Err(FlueError::sandbox(
                SandboxErrorReason::Other,
                "start bash: the process has no id",
            ));
        };
        let mut group = ProcessGroup {
            pgid: Pid::from_raw(pgid),
            armed: true,
            graceful: self
                .launcher
                .as_ref()
                .is_none_or(|launcher| launcher.graceful_stop()),
            watchdog: None,
            tag,
        };
        group.watchdog = Some(self.spawn_watchdog(pgid, group.tag.as_deref())?);
        let mut stdin = child.stdin.take();
        let mut stdout = child.stdout.take();
        let mut stderr = child.stderr.take();
        let mut stdout_capture = Capture::new(stdout_limit);
        let mut stderr_capture = Capture::new(self.output_limit);

        let ending = {
            let finished = async {
                let mut drains = std::pin::pin!(async {
                    tokio::join!(
                        feed(stdin.take(), input.as_deref()),
                        drain(stdout.as_mut(), &mut stdout_capture),
                        drain(stderr.as_mut(), &mut stderr_capture),
                    );
                });
                let exited = tokio::select! {
                    status = child.wait() => Some(status),
                    () = &mut drains => None,
                };
                let drained = exited.is_none();
                let status = match exited {
                    Some(status) => status,
                    None => child.wait().await,
                };
                // The shell is gone: whatever it left running in its group, or elsewhere with
                // its tag, dies with it, which also closes the pipes.
                group.send(Signal::SIGKILL);
                group.sweep().await;
                if !drained {
                    let _ = tokio::time::timeout(DRAIN_GRACE, drains).await;
                }
                status
            };
            tokio::select! {
                biased;
                () = cancel.cancelled() => Ending::Aborted,
                () = sleep_until_timeout(options.timeout) => Ending::TimedOut,
                status = finished => Ending::Exited(status),
            }
        };

        match ending {
            Ending::Exited(status) => {
                group.armed = false;
                // Killed with the rest of the group once the shell exited.
                if let Some(watchdog) = &mut group.watchdog {
                    let _ = tokio::time::timeout(KILL_GRACE, watchdog.wait()).await;
                }
                let status = status.map_err(|err| other_error("wait for bash", err))?;
                Ok(ShellResult {
                    stdout: stdout_capture.finish("stdout"),
                    stderr: stderr_capture.finish("stderr"),
                    exit_code: exit_code(status),
                })
            }
            Ending::TimedOut => {
                group.terminate(&mut child).await;
                group.sweep().await;
                let _ = tokio::time::timeout(DRAIN_GRACE, async {
                    tokio::join!(
                        drain(stdout.as_mut(), &mut stdout_capture),
                        drain(stderr.as_mut(), &mut stderr_capture),
                    );
                })
                .await;
                group.armed = false;
                let timeout_ms = options.timeout.map_or(0, |timeout| timeout.as_millis());
                let mut stderr_text = stderr_capture.finish("stderr");
                push_line(
                    &mut stderr_text,
                    &format!("[command timed out after {timeout_ms} ms]"),
                );
                Ok(ShellResult {
                    stdout: stdout_capture.finish("stdout"),
                    stderr: stderr_text,
                    exit_code: TIMEOUT_EXIT_CODE,
                })
            }
            Ending::Aborted => {
                group.terminate(&mut child).await;
                group.sweep().await;
                group.armed = false;
                Err(FlueError::Aborted)
            }
        }
    }
}

impl Sandbox for LocalSandbox {
    fn cwd(&self) -> &str {
        &self.root_text
    }

    fn exec<'a>(
        &'a self,
        command: &'a str,
        options: ExecOptions,
    ) -> BoxFuture<'a, Result<ShellResult>> {
        Box::pin(self.run(command, options, None))
    }

    fn read_file_bytes<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Vec<u8>>> {
        Box::pin(self.read_bytes(path))
    }

    fn write_file<'a>(&'a self, path: &'a str, content: &'a [u8]) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.write(path, content))
    }

    fn replace_file<'a>(&'a self, path: &'a str, content: &'a [u8]) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.replace(path, content))
    }

    fn stat<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<FileStat>> {
        Box::pin(self.stat_path(path))
    }

    fn readdir<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Vec<String>>> {
        Box::pin(self.list(path))
    }

    fn mkdir<'a>(&'a self, path: &'a str, options: MkdirOptions) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.make_dir(path, options))
    }

    fn rm<'a>(&'a self, path: &'a str, options: RmOptions) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.remove(path, options))
    }
}

/// What [`LocalSandbox::exec_with_input`] adds to a command.
struct Piped {
    /// Written to its standard input, which is then closed.
    input: Vec<u8>,
    /// Bytes of standard output kept.
    stdout_limit: usize,
}

/// How a command's wait ended.
enum Ending {
    Exited(io::Result<ExitStatus>),
    TimedOut,
    Aborted,
}

/// The process group of one command. Dropping it while armed kills the group, so a dropped
/// `exec` future leaves nothing behind.
struct ProcessGroup {
    pgid: Pid,
    armed: bool,
    /// SIGTERM first and [`KILL_GRACE`] before SIGKILL; else SIGKILL at once (see
    /// [`CommandLauncher::graceful_stop`]).
    graceful: bool,
    /// The group's watchdog, a member of the group; reaped here, so that it stops counting as
    /// a member once killed.
    watchdog: Option<Child>,
    /// The tag in the command's environment (`strays`); none for a launcher's commands.
    tag: Option<String>,
}

impl ProcessGroup {
    /// Sends `signal` to every process of the group; false when the group is gone.
    fn send(&self, signal: Signal) -> bool {
        killpg(self.pgid, signal).is_ok()
    }

    /// Kills the processes that left the group but carry the command's tag (see `strays`),
    /// once the group is dead.
    async fn sweep(&self) {
        let Some(tag) = self.tag.clone() else { return };
        let shell_pid = self.pgid.as_raw();
        let _ = tokio::task::spawn_blocking(move || strays::kill_tagged(&tag, shell_pid)).await;
    }

    /// Reaps the watchdog if it has exited.
    fn reap_watchdog(&mut self) {
        if let Some(watchdog) = &mut self.watchdog {
            let _ = watchdog.try_wait();
        }
    }

    /// Whether any process of the group (a zombie included) still exists.
    fn is_alive(&self) -> bool {
        killpg(self.pgid, None).is_ok()
    }

    /// SIGTERM, then SIGKILL once [`KILL_GRACE`] has passed with members still alive (SIGKILL
    /// at once when not `graceful`); reaps the shell.
    async fn terminate(&mut self, child: &mut Child) {
        let first = if self.graceful {
            Signal::SIGTERM
        } else {
            Signal::SIGKILL
        };
        if self.send(first) {
            let deadline = Instant::now() + KILL_GRACE;
            loop {
                // Reap the shell and the watchdog as soon as they exit, so they stop counting
                // as members.
                let _ = child.try_wait();
                self.reap_watchdog();
                if !self.is_alive() {
                    break;
                }
                if Instant::now() >= deadline {
                    self.send(Signal::SIGKILL);
                    break;
                }
                tokio::time::sleep(KILL_POLL).await;
            }
        }
        let _ = tokio::time::timeout(KILL_GRACE, child.wait()).await;
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if self.armed {
            self.send(Signal::SIGKILL);
            if let Some(tag) = &self.tag {
                strays::kill_tagged(tag, self.pgid.as_raw());
            }
        }
    }
}

/// The first `limit` bytes of a stream, and how many bytes it had in all.
struct Capture {
    kept: Vec<u8>,
    limit: usize,
    total: usize,
}

impl Capture {
    fn new(limit: usize) -> Self {
        Self {
            kept: Vec::new(),
            limit,
            total: 0,
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        self.total = self.total.saturating_add(bytes.len());
        let room = self.limit.saturating_sub(self.kept.len());
        self.kept.extend_from_slice(&bytes[..room.min(bytes.len())]);
    }

    /// The kept text (lossy UTF-8), with a note when the stream was cut.
    fn finish(self, stream: &str) -> String {
        if self.total <= self.kept.len() {
            return String::from_utf8_lossy(&self.kept).into_owned();
        }
        let mut text = lossy_utf8_prefix(&self.kept);
        push_line(
            &mut text,
            &format!(
                "[{stream} truncated: kept the first {} of {} bytes]",
                self.kept.len(),
                self.total
            ),
        );
        text
    }
}

/// Decodes a prefix of a byte stream: like lossy UTF-8, but a character cut in two at the end
/// is dropped instead of turning into a replacement character.
fn lossy_utf8_prefix(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len());
    let mut chunks = bytes.utf8_chunks().peekable();
    while let Some(chunk) = chunks.next() {
        text.push_str(chunk.valid());
        if !chunk.invalid().is_empty() && chunks.peek().is_some() {
            text.push(char::REPLACEMENT_CHARACTER);
        }
    }
    text
}

/// Appends `line` on a line of its own.
fn push_line(text: &mut String, line: &str) {
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(line);
}

/// Writes `input` to `pipe`, then closes it (the command reads end of file). A command that
/// exits or closes its standard input without reading it all ends the write (`EPIPE`; flue
/// ignores SIGPIPE, as Rust programs do), and that is fine.
async fn feed(pipe: Option<ChildStdin>, input: Option<&[u8]>) {
    let (Some(mut pipe), Some(input)) = (pipe, input) else {
        return;
    };
    let _ = pipe.write_all(input).await;
}

/// Reads `reader` to its end into `capture`. Cancel-safe: nothing read is lost when dropped.
async fn drain<R: AsyncRead + Unpin>(reader: Option<&mut R>, capture: &mut Capture) {
    let Some(reader) = reader else { return };
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        match reader.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n_read) => capture.push(&chunk[..n_read]),
        }
    }
}

async fn sleep_until_timeout(timeout: Option<Duration>) {
    match timeout {
        Some(timeout) => tokio::time::sleep(timeout).await,
        None => std::future::pending().await,
    }
}

/// The exit code of a finished command; a command killed by a signal reports 128 + signal.
fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|signal| 128 + signal))
        .unwrap_or(-1)
}

/// The error of a failed operation below the root, about `path` (as the caller gave it).
fn failure_error(verb: &str, path: &str, failure: Failure) -> FlueError {
    let (reason, text) = match failure {
        Failure::Outside => {
            return FlueError::PathOutsideSandbox {
                path: path.to_owned(),
            };
        }
        Failure::Protected(reason) => {
            return FlueError::ProtectedPath {
                path: path.to_owned(),
                reason: reason.to_owned(),
            };
        }
        Failure::Io(err) => return io_error(verb, path, err),
        Failure::Unstable => (
            SandboxErrorReason::Other,
            "the path kept changing while it was resolved; retry",
        ),
        Failure::TooManyLinks => (
            SandboxErrorReason::Other,
            "too many levels of symbolic links",
        ),
        Failure::TooDeep => (
            SandboxErrorReason::LimitExceeded,
            "the tree is too deep to remove (more than 256 levels)",
        ),
        Failure::NotRegular => (
            SandboxErrorReason::Unsupported,
            "not a regular file or directory",
        ),
        Failure::TooLarge(_) => (SandboxErrorReason::LimitExceeded, "the file is too large"),
        Failure::IsRoot => (
            SandboxErrorReason::PermissionDenied,
            "refusing to remove the sandbox root",
        ),
        Failure::NeedsRecursive => (
            SandboxErrorReason::IsDirectory,
            "is a directory (set recursive to remove it)",
        ),
    };
    FlueError::sandbox(reason, format!("{verb} {path}: {text}"))
}

/// A sandbox error for a failed I/O operation on `path` (as the caller gave it).
fn io_error(operation: &str, path: &str, err: io::Error) -> FlueError {
    let (reason, description) = match err.kind() {
        io::ErrorKind::NotFound => (
            SandboxErrorReason::NotFound,
            "no such file or directory".to_owned(),
        ),
        io::ErrorKind::AlreadyExists => {
            (SandboxErrorReason::AlreadyExists, "already exists".into())
        }
        io::ErrorKind::PermissionDenied => (
            SandboxErrorReason::PermissionDenied,
            "permission denied".into(),
        ),
        io::ErrorKind::IsADirectory => (SandboxErrorReason::IsDirectory, "is a directory".into()),
        io::ErrorKind::NotADirectory => {
            (SandboxErrorReason::NotADirectory, "not a directory".into())
        }
        io::ErrorKind::DirectoryNotEmpty => {
            (SandboxErrorReason::NotEmpty, "directory not empty".into())
        }
        _ => (SandboxErrorReason::Other, err.to_string()),
    };
    FlueError::Sandbox {
        message: format!("{operation} {path}: {description}"),
        reason,
        source: Some(BoxError::from(err)),
    }
}

/// A sandbox error for a failed step of running a command.
fn other_error(operation: &str, err: io::Error) -> FlueError {
    FlueError::Sandbox {
        message: format!("{operation}: {err}"),
        reason: SandboxErrorReason::Other,
        source: Some(BoxError::from(err)),
    }
}
