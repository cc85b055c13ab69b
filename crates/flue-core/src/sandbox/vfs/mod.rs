//! [`VirtualSandbox`]: an in-memory filesystem and an in-process bash interpreter (bashkit).
//!
//! Nothing here spawns a process or opens a socket: commands are interpreted by bashkit over
//! a virtual filesystem that lives in this process. The sandbox root (`/workspace` by default)
//! is a directory of that filesystem; the file operations of the [`Sandbox`] trait are
//! confined to it, with symlinks resolved by hand so that none leads out. Commands see the
//! whole virtual filesystem (bashkit adds `/etc`, `/tmp`, `/home/...`), none of the host.
//!
//! Each command runs on a fresh shell state (variables, functions, working directory), like
//! `bash -c` does: interpreters are pooled and reset to the state they had when built. Each
//! interpreter lives on a thread of its own with a large stack, so that a command that never
//! yields cannot hold up the caller's runtime, and is stopped through bashkit's stop flag on
//! timeout, abort or drop; a stack guard bounds recursion bashkit does not count.
//! Limits (commands, loop iterations, output, filesystem size, time) are set per sandbox;
//! bashkit's per-instance session limits are switched off, since one sandbox lives as long as
//! its harness.

#[cfg(test)]
mod tests;

mod seed;

use std::cell::Cell;
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, UNIX_EPOCH};

use bashkit::hooks::{HookAction, ToolEvent};
use bashkit::{
    Bash, ExecutionLimits, FileSystem, FileType, FsLimits, InMemoryFs, LimitExceeded, Metadata,
    SessionLimits, ShellState,
};
use tokio::sync::oneshot;

use crate::error::{BoxError, FlueError, Result, SandboxErrorReason};
use crate::sandbox::{
    ExecOptions, FileStat, MkdirOptions, RmOptions, Sandbox, ShellResult, TIMEOUT_EXIT_CODE,
    check_protected, normalize_path, protected_name,
};
use crate::util::BoxFuture;

/// The default sandbox root, and the working directory of commands.
pub const VIRTUAL_ROOT: &str = "/workspace";

/// The user name commands see (`whoami`, `$USER`); `$HOME` is `/home/flue`.
const USER_NAME: &str = "flue";

/// The host name commands see.
const HOST_NAME: &str = "flue-virtual";

/// Idle interpreters kept for reuse.
const POOL_SIZE: usize = 8;

/// Symlinks followed while resolving one path before giving up.
const MAX_SYMLINK_HOPS: usize = 40;

/// Stack reserved for the thread a command is interpreted on. Only the pages a command touches
/// are ever backed by memory.
const INTERPRETER_STACK_BYTES: usize = 64 * 1024 * 1024;

/// Stack a command may have in use when it calls a builtin (`eval`, `source`, `echo`, ...);
/// past it, the command ends with `limit_exceeded`. The rest of the stack is headroom for the
/// nesting bashkit bounds itself (functions, subshells, substitutions), which calls no builtin.
const STACK_GUARD_BYTES: usize = 32 * 1024 * 1024;

/// How long a command stopped by its timeout or an abort gets to wind down (it stops at its
/// next command, loop iteration or expansion) before `exec` returns without it.
const STOP_GRACE: Duration = Duration::from_secs(2);

thread_local! {
    /// The stack address at the start of this interpreter thread; 0 on other threads.
    static STACK_BASE: Cell<usize> = const { Cell::new(0) };
}

/// Limits of a [`VirtualSandbox`]. Hitting one ends the command with
/// [`SandboxErrorReason::LimitExceeded`] (or, for `max_time`, exit code 124).
///
/// bashkit's own guards apply on top, with its defaults: 10,000 variables holding 10 MB
/// together, 100,000 array entries, 32 MB of intermediate buffers at once, functions (and
/// `source`, `bash`) nested 16 deep, substitutions and subshells 32 deep, 10 MB of script.
/// Recursion that no counter sees (`eval` calling itself) is stopped by a stack guard.
///
/// ```
/// let limits = flue_core::sandbox::VirtualLimits::default().with_max_commands(1_000);
/// assert_eq!(limits.max_commands, 1_000);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct VirtualLimits {
    /// Commands one `exec` may run (default 100,000).
    pub max_commands: usize,
    /// Iterations of one loop (default 100,000).
    pub max_loop_iterations: usize,
    /// Iterations of all loops of one `exec` together (default 1,000,000).
    pub max_total_loop_iterations: usize,
    /// Bytes kept of each output stream; the rest is dropped with a note (default 1 MiB).
    pub max_output_bytes: usize,
    /// Bytes of all files together (default 100 MB).
    pub max_fs_bytes: u64,
    /// Bytes of one file (default 32 MB).
    pub max_file_bytes: u64,
    /// Number of files (default 50,000).
    pub max_files: u64,
    /// Number of directories (default 10,000).
    pub max_dirs: u64,
    /// Wall-clock limit of one `exec` (default 10 min); a longer [`ExecOptions::timeout`] is
    /// cut to it.
    pub max_time: Duration,
}

impl Default for VirtualLimits {
    fn default() -> Self {
        Self {
            max_commands: 100_000,
            max_loop_iterations: 100_000,
            max_total_loop_iterations: 1_000_000,
            max_output_bytes: 1024 * 1024,
            max_fs_bytes: 100_000_000,
            max_file_bytes: 32_000_000,
            max_files: 50_000,
            max_dirs: 10_000,
            max_time: Duration::from_secs(600),
        }
    }
}

impl VirtualLimits {
    /// Sets [`VirtualLimits::max_commands`].
    #[must_use]
    pub fn with_max_commands(mut self, count: usize) -> Self {
        self.max_commands = count;
        self
    }

    /// Sets [`VirtualLimits::max_loop_iterations`].
    #[must_use]
    pub fn with_max_loop_iterations(mut self, count: usize) -> Self {
        self.max_loop_iterations = count;
        self
    }

    /// Sets [`VirtualLimits::max_total_loop_iterations`].
    #[must_use]
    pub fn with_max_total_loop_iterations(mut self, count: usize) -> Self {
        self.max_total_loop_iterations = count;
        self
    }

    /// Sets [`VirtualLimits::max_output_bytes`].
    #[must_use]
    pub fn with_max_output_bytes(mut self, bytes: usize) -> Self {
        self.max_output_bytes = bytes;
        self
    }

    /// Sets [`VirtualLimits::max_fs_bytes`].
    #[must_use]
    pub fn with_max_fs_bytes(mut self, bytes: u64) -> Self {
        self.max_fs_bytes = bytes;
        self
    }

    /// Sets [`VirtualLimits::max_file_bytes`].
    #[must_use]
    pub fn with_max_file_bytes(mut self, bytes: u64) -> Self {
        self.max_file_bytes = bytes;
        self
    }

    /// Sets [`VirtualLimits::max_files`].
    #[must_use]
    pub fn with_max_files(mut self, count: u64) -> Self {
        self.max_files = count;
        self
    }

    /// Sets [`VirtualLimits::max_dirs`].
    #[must_use]
    pub fn with_max_dirs(mut self, count: u64) -> Self {
        self.max_dirs = count;
        self
    }

    /// Sets [`VirtualLimits::max_time`].
    #[must_use]
    pub fn with_max_time(mut self, time: Duration) -> Self {
        self.max_time = time;
        self
    }

    fn fs_limits(&self) -> FsLimits {
        FsLimits::new()
            .max_total_bytes(self.max_fs_bytes)
            .max_file_size(self.max_file_bytes)
            .max_file_count(self.max_files)
            .max_dir_count(self.max_dirs)
    }

    fn execution_limits(&self) -> ExecutionLimits {
        ExecutionLimits::new()
            .max_commands(self.max_commands)
            .max_loop_iterations(self.max_loop_iterations)
            .max_total_loop_iterations(self.max_total_loop_iterations)
            .max_stdout_bytes(self.max_output_bytes)
            .max_stderr_bytes(self.max_output_bytes)
            .timeout(self.max_time)
    }
}

/// Builds a [`VirtualSandbox`]; `build` fails when the seed directory cannot be copied.
#[derive(Clone, Debug)]
pub struct VirtualSandboxBuilder {
    root: String,
    limits: VirtualLimits,
    seed: Option<seed::SeedSource>,
    seed_exclude: Vec<String>,
}

impl VirtualSandboxBuilder {
    /// Sets the sandbox root, an absolute path (default [`VIRTUAL_ROOT`]).
    #[must_use]
    pub fn with_root(mut self, root: impl Into<String>) -> Self {
        self.root = root.into();
        self
    }

    /// Sets the limits.
    #[must_use]
    pub fn with_limits(mut self, limits: VirtualLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Copies the host directory `dir` into the root when the sandbox is built.
    ///
    /// The copy is taken once; the host directory is only read, never changed. Regular files
    /// and directories are copied; symlinks are kept when they point inside `dir` and left out
    /// otherwise, like sockets and other special files.
    #[must_use]
    pub fn with_seed(mut self, dir: impl Into<PathBuf>) -> Self {
        self.seed = Some(seed::SeedSource {
            base: dir.into(),
            within: PathBuf::new(),
        });
        self
    }

    /// Copies the directory `relative` below the host directory `root` into the sandbox root,
    /// like [`with_seed`](Self::with_seed), and only if it really lies inside `root`.
    ///
    /// `build` refuses (`permission_denied`) a `relative` that is absolute, climbs with `..`,
    /// or passes through a symlink, so a seed taken from someone else's configuration cannot
    /// copy a host directory outside `root` (`~/.ssh`, `/etc`) into the sandbox.
    #[must_use]
    pub fn with_seed_in(mut self, root: impl Into<PathBuf>, relative: impl Into<PathBuf>) -> Self {
        self.seed = Some(seed::SeedSource {
            base: root.into(),
            within: relative.into(),
        });
        self
    }

    /// Names left out of the seed copy at any depth, such as `.git` or `node_modules`. A name
    /// ending in `*` matches every name starting with what precedes it (`.env*`).
    #[must_use]
    pub fn with_seed_exclude<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.seed_exclude = names.into_iter().map(Into::into).collect();
        self
    }

    /// Creates the filesystem, copies the seed and returns the sandbox.
    ///
    /// Fails with [`SandboxErrorReason::LimitExceeded`] when the seed is larger than the
    /// filesystem limits, and with the I/O error's reason when it cannot be read.
    pub async fn build(self) -> Result<VirtualSandbox> {
        let root = normalize_path("/", &self.root)?;
        if root == "/" {
            return Err(FlueError::config(
                "the virtual sandbox root must be a directory below `/`, such as /workspace",
            ));
        }
        let fs = Arc::new(InMemoryFs::with_limits(self.limits.fs_limits()));
        fs.add_dir(&root, 0o755);
        fs.add_dir(format!("/home/{USER_NAME}"), 0o755);
        fs.add_dir("/tmp", 0o1777);
        if let Some(seed_source) = &self.seed {
            let entries = seed::collect(seed_source, &self.seed_exclude, &self.limits).await?;
            seed::install(fs.as_ref(), &root, entries).await?;
        }
        let shared = Shared {
            fs,
            root,
            limits: self.limits,
            pool: Mutex::new(Vec::new()),
            running: Arc::new(AtomicUsize::new(0)),
            base_state: Mutex::new(None),
        };
        Ok(VirtualSandbox {
            shared: Arc::new(shared),
        })
    }
}

/// An in-memory filesystem and an in-process bash interpreter as a sandbox; the default.
///
/// No command spawns a process and there is no network: commands are interpreted by
/// [bashkit](https://docs.rs/bashkit) over a virtual filesystem. Its root, `/workspace`, is
/// the working directory and the only place the file operations reach. It starts empty, or
/// as a copy of a host directory ([`VirtualSandboxBuilder::with_seed`]); nothing is ever
/// written back to the host.
///
/// Each command starts from a fresh shell state: variables and `cd` do not carry over from
/// one `exec` to the next, files do. Background jobs (`cmd &`) are waited for before `exec`
/// returns. Limits ([`VirtualLimits`]) end runaway commands with a typed error.
///
/// Cloning is cheap; clones share the filesystem.
///
/// ```
/// use flue_core::{ExecOptions, Sandbox, VirtualSandbox};
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let sandbox = VirtualSandbox::new();
/// sandbox.write_file("notes.txt", b"one\ntwo\n").await.unwrap();
/// let res = sandbox.exec("wc -l < notes.txt", ExecOptions::new()).await.unwrap();
/// assert_eq!(res.stdout.trim(), "2");
/// assert!(sandbox.read_file("../etc/passwd").await.is_err());
/// # });
/// ```
#[derive(Clone)]
pub struct VirtualSandbox {
    shared: Arc<Shared>,
}

struct Shared {
    /// The filesystem, without bashkit's symlink-following layer: paths are resolved here.
    fs: Arc<InMemoryFs>,
    root: String,
    limits: VirtualLimits,
    /// Idle interpreters.
    pool: Mutex<Vec<Interpreter>>,
    /// Commands being interpreted (a stopped command may outlive its `exec` by the time it
    /// takes to reach its next check).
    running: Arc<AtomicUsize>,
    /// The shell state of a freshly built interpreter, restored before every command.
    base_state: Mutex<Option<ShellState>>,
}

impl std::fmt::Debug for VirtualSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VirtualSandbox")
            .field("root", &self.shared.root)
            .field("limits", &self.shared.limits)
            .finish_non_exhaustive()
    }
}

impl Default for VirtualSandbox {
    fn default() -> Self {
        Self::new()
    }
}

impl VirtualSandbox {
    /// An empty sandbox with the default root and limits.
    pub fn new() -> Self {
        let limits = VirtualLimits::default();
        let fs = Arc::new(InMemoryFs::with_limits(limits.fs_limits()));
        fs.add_dir(VIRTUAL_ROOT, 0o755);
        fs.add_dir(format!("/home/{USER_NAME}"), 0o755);
        fs.add_dir("/tmp", 0o1777);
        Self {
            shared: Arc::new(Shared {
                fs,
                root: VIRTUAL_ROOT.to_owned(),
                limits,
                pool: Mutex::new(Vec::new()),
                running: Arc::new(AtomicUsize::new(0)),
                base_state: Mutex::new(None),
            }),
        }
    }

    /// Starts building a sandbox with a seed, limits or another root.
    pub fn builder() -> VirtualSandboxBuilder {
        VirtualSandboxBuilder {
            root: VIRTUAL_ROOT.to_owned(),
            limits: VirtualLimits::default(),
            seed: None,
            seed_exclude: Vec::new(),
        }
    }

    /// The limits.
    pub fn limits(&self) -> &VirtualLimits {
        &self.shared.limits
    }

    /// A fresh interpreter over the shared filesystem, with the stack guard installed, on a
    /// thread of its own; and its shell state as built.
    fn new_interpreter(&self) -> Result<(Interpreter, ShellState)> {
        let fs: Arc<dyn FileSystem> = self.shared.fs.clone();
        let too_deep = Arc::new(AtomicBool::new(false));
        let stop_slot: Arc<OnceLock<Arc<AtomicBool>>> = Arc::default();
        let guard = StackGuard {
            too_deep: Arc::clone(&too_deep),
            stop_flag: Arc::clone(&stop_slot),
        };
        let bash = Bash::builder()
            .fs(fs)
            .cwd(&self.shared.root)
            .username(USER_NAME)
            .hostname(HOST_NAME)
            .limits(self.shared.limits.execution_limits())
            .session_limits(SessionLimits::unlimited())
            .before_tool(Box::new(move |event| guard.check(event)))
            .build();
        let stop_flag = bash.cancellation_token();
        // Set once, right after the build; the hook cannot fire before.
        let _ = stop_slot.set(Arc::clone(&stop_flag));
        let state = bash.shell_state();
        let jobs = spawn_worker(bash, Arc::clone(&self.shared.running))?;
        let interpreter = Interpreter {
            jobs,
            stop_flag,
            too_deep,
        };
        Ok((interpreter, state))
    }

    /// An idle interpreter, or a new one; and the state to reset it to.
    fn take_interpreter(&self) -> Result<(Interpreter, ShellState)> {
        let pooled = self.shared.pool.lock().ok().and_then(|mut pool| pool.pop());
        let base = self
            .shared
            .base_state
            .lock()
            .ok()
            .and_then(|state| state.clone());
        if let (Some(interpreter), Some(base)) = (pooled, base) {
            return Ok((interpreter, base));
        }
        let (interpreter, state) = self.new_interpreter()?;
        if let Ok(mut slot) = self.shared.base_state.lock() {
            slot.get_or_insert_with(|| state.clone());
        }
        Ok((interpreter, state))
    }

    /// Returns an interpreter whose command ran to its end to the pool.
    fn give_back(&self, interpreter: Interpreter) {
        if let Ok(mut pool) = self.shared.pool.lock()
            && pool.len() < POOL_SIZE
        {
            pool.push(interpreter);
        }
    }

    /// Commands being interpreted now: commands in flight, and stopped commands still winding
    /// down.
    #[cfg(test)]
    fn running_commands(&self) -> usize {
        self.shared.running.load(Ordering::SeqCst)
    }

    async fn run(&self, command: &str, options: ExecOptions) -> Result<ShellResult> {
        let cancel = options.cancel.clone().unwrap_or_default();
        if cancel.is_cancelled() {
            return Err(FlueError::Aborted);
        }
        let cwd_text = options.cwd.as_deref().unwrap_or(&self.shared.root);
        let cwd = self.resolve(cwd_text, Follow::Final).await?;
        match cwd.found {
            Found::Entry(FileType::Directory) => {}
            Found::Entry(_) | Found::ThroughFile => {
                return Err(FlueError::sandbox(
                    SandboxErrorReason::NotADirectory,
                    format!("run in {cwd_text}: not a directory"),
                ));
            }
            Found::Missing => return Err(not_found("run in", cwd_text)),
        }

        let (interpreter, base) = self.take_interpreter()?;
        interpreter.too_deep.store(false, Ordering::SeqCst);
        let stop_flag = Arc::clone(&interpreter.stop_flag);
        stop_flag.store(false, Ordering::SeqCst);
        // bashkit's own deadline is `max_time`; a shorter timeout is enforced here.
        let max_time = self.shared.limits.max_time;
        let timeout = options
            .timeout
            .map_or(max_time, |timeout| timeout.min(max_time));

        // The interpreter runs on a thread of its own: interpretation does not yield to the
        // runtime for long stretches (a tight loop), so on the caller's runtime it would keep a
        // timer or an abort from ever being seen, and deep recursion needs a large stack. From
        // here, the command is stopped by raising bashkit's stop flag, which it checks at
        // every command, loop iteration and expansion step; dropping this future raises it too.
        let mut stop_on_drop = StopOnDrop(Some(Arc::clone(&stop_flag)));
        let (reply, mut receiver) = oneshot::channel();
        let job = Job {
            command: command.to_owned(),
            state: shell_state(&base, &cwd.path, &options.env),
            reply,
        };
        if interpreter.jobs.send(job).is_err() {
            return Err(interpreter_failed());
        }
        let ending = tokio::select! {
            biased;
            () = cancel.cancelled() => Ending::Aborted,
            () = tokio::time::sleep(timeout) => Ending::TimedOut,
            finished = &mut receiver => Ending::Finished(Box::new(finished.ok())),
        };
        let finished = match ending {
            Ending::Finished(finished) => *finished,
            Ending::Aborted | Ending::TimedOut => {
                // Let the command reach its next check, so that nothing it does lands after
                // this call returned; a command that does not stop in time is left behind
                // (its thread ends at its next check).
                stop_flag.store(true, Ordering::SeqCst);
                let wound_down = tokio::time::timeout(STOP_GRACE, &mut receiver).await;
                if matches!(wound_down, Ok(Ok(_))) && interpreter.too_deep.load(Ordering::SeqCst) {
                    return Err(stack_guard_error());
                }
                return match ending {
                    Ending::Aborted => Err(FlueError::Aborted),
                    _ => Ok(timed_out(timeout)),
                };
            }
        };
        let Some(result) = finished else {
            return Err(interpreter_failed());
        };
        if interpreter.too_deep.load(Ordering::SeqCst) {
            return Err(stack_guard_error());
        }
        match result {
            Ok(output) => {
                let limit = self.shared.limits.max_output_bytes;
                let mut stdout = output.stdout.text_lossy().into_owned();
                if output.stdout_truncated {
                    push_line(
                        &mut stdout,
                        &format!("[stdout truncated: kept the first {limit} bytes]"),
                    );
                }
                let mut stderr = output.stderr.text_lossy().into_owned();
                if output.stderr_truncated {
                    push_line(
                        &mut stderr,
                        &format!("[stderr truncated: kept the first {limit} bytes]"),
                    );
                }
                // Back in the pool it may serve another call at once: this one must not touch
                // its flag any more.
                stop_on_drop.disarm();
                self.give_back(interpreter);
                Ok(ShellResult {
                    stdout,
                    stderr,
                    exit_code: output.exit_code,
                })
            }
            // The stop flag is only raised above, after which this branch is not reached;
            // bashkit's own deadline (`max_time`) ends here.
            Err(
                bashkit::Error::Cancelled
                | bashkit::Error::ResourceLimit(LimitExceeded::Timeout(_)),
            ) => Ok(timed_out(timeout)),
            Err(err) => command_error(err),
        }
    }

    /// Resolves `path` (relative to the root) inside the root: parents are followed, the
    /// final component only with [`Follow::Final`]. Whatever the final component is, the
    /// path it finally leads to must lie inside the root.
    async fn resolve(&self, path: &str, follow: Follow) -> Result<Resolved> {
        let outside = || FlueError::PathOutsideSandbox {
            path: path.to_owned(),
        };
        let lexical = normalize_path(&self.shared.root, path)?;
        if !self.is_inside(&lexical) {
            return Err(outside());
        }
        check_protected(&self.shared.root, &lexical, path)?;
        let lexical = PathBuf::from(lexical);
        let (parent, name) = match (lexical.parent(), lexical.file_name()) {
            (Some(parent), Some(name)) if lexical != Path::new(&self.shared.root) => {
                (parent.to_path_buf(), name.to_owned())
            }
            // The root itself: followed in full.
            _ => return self.follow(&lexical, path).await,
        };
        let parent = self.follow(&parent, path).await?;
        match parent.found {
            Found::Entry(FileType::Directory) => {}
            Found::Entry(_) | Found::ThroughFile => {
                return Ok(Resolved {
                    path: parent.path.join(name),
                    found: Found::ThroughFile,
                });
            }
            Found::Missing => {
                return Ok(Resolved {
                    path: parent.path.join(name),
                    found: Found::Missing,
                });
            }
        }
        let unfollowed = parent.path.join(&name);
        let Ok(metadata) = self.shared.fs.lstat(&unfollowed).await else {
            return Ok(Resolved {
                path: unfollowed,
                found: Found::Missing,
            });
        };
        if metadata.file_type != FileType::Symlink {
            return Ok(Resolved {
                path: unfollowed,
                found: Found::Entry(metadata.file_type),
            });
        }
        // A symlink: where it leads must be inside, whether or not the caller follows it.
        let target = self.follow(&unfollowed, path).await?;
        match follow {
            Follow::Final => Ok(target),
            Follow::NotFinal => Ok(Resolved {
                path: unfollowed,
                found: Found::Entry(FileType::Symlink),
            }),
        }
    }

    /// Follows every symlink on `lexical` (absolute, normalized), refusing any that leads
    /// out of the root. `shown` is the path as the caller gave it, for errors.
    async fn follow(&self, lexical: &Path, shown: &str) -> Result<Resolved> {
        let outside = || FlueError::PathOutsideSandbox {
            path: shown.to_owned(),
        };
        let mut done = PathBuf::from("/");
        let mut todo: Vec<String> = normal_components(lexical);
        todo.reverse();
        let mut hops = 0;
        while let Some(part) = todo.pop() {
            // Reaching flue's store or a secrets file through a symlink is refused too.
            if let Some(reason) = protected_name(&part) {
                return Err(FlueError::ProtectedPath {
                    path: shown.to_owned(),
                    reason: reason.to_owned(),
                });
            }
            let candidate = done.join(&part);
            let Ok(metadata) = self.shared.fs.lstat(&candidate).await else {
                todo.reverse();
                let rest: PathBuf = todo.iter().collect();
                return Ok(Resolved {
                    path: candidate.join(rest),
                    found: Found::Missing,
                });
            };
            match metadata.file_type {
                FileType::Directory => done = candidate,
                FileType::Symlink => {
                    hops += 1;
                    if hops > MAX_SYMLINK_HOPS {
                        return Err(FlueError::sandbox(
                            SandboxErrorReason::Other,
                            format!("resolve {shown}: too many levels of symbolic links"),
                        ));
                    }
                    let target = self
                        .shared
                        .fs
                        .read_link(&candidate)
                        .await
                        .map_err(|err| vfs_error("resolve", shown, err))?;
                    let target_text = target.to_string_lossy();
                    let base = done.to_string_lossy();
                    let joined = normalize_path(&base, &target_text).map_err(|_| outside())?;
                    if !self.is_inside(&joined) {
                        return Err(outside());
                    }
                    let mut expanded = normal_components(Path::new(&joined));
                    expanded.reverse();
                    todo.extend(expanded);
                    done = PathBuf::from("/");
                }
                other => {
                    if todo.is_empty() {
                        return Ok(Resolved {
                            path: candidate,
                            found: Found::Entry(other),
                        });
                    }
                    todo.reverse();
                    let rest: PathBuf = todo.iter().collect();
                    return Ok(Resolved {
                        path: candidate.join(rest),
                        found: Found::ThroughFile,
                    });
                }
            }
        }
        if !self.is_inside(&done.to_string_lossy()) {
            return Err(outside());
        }
        Ok(Resolved {
            path: done,
            found: Found::Entry(FileType::Directory),
        })
    }

    /// Whether the absolute, normalized `path` is the root or below it.
    fn is_inside(&self, path: &str) -> bool {
        let root = self.shared.root.as_str();
        path == root
            || path
                .strip_prefix(root)
                .is_some_and(|rest| rest.starts_with('/'))
    }

    async fn read_bytes(&self, path: &str) -> Result<Vec<u8>> {
        let resolved = self.resolve(path, Follow::Final).await?;
        match resolved.found {
            Found::Entry(FileType::Directory) => Err(FlueError::sandbox(
                SandboxErrorReason::IsDirectory,
                format!("read {path}: is a directory"),
            )),
            Found::Entry(_) => self
                .shared
                .fs
                .read_file(&resolved.path)
                .await
                .map_err(|err| vfs_error("read", path, err)),
            Found::ThroughFile => Err(not_a_directory("read", path)),
            Found::Missing => Err(not_found("read", path)),
        }
    }

    async fn write(&self, path: &str, content: &[u8]) -> Result<()> {
        let resolved = self.resolve(path, Follow::Final).await?;
        match resolved.found {
            Found::Entry(FileType::Directory) => {
                return Err(FlueError::sandbox(
                    SandboxErrorReason::IsDirectory,
                    format!("write {path}: is a directory"),
                ));
            }
            Found::ThroughFile => return Err(not_a_directory("write", path)),
            Found::Entry(_) => {}
            Found::Missing => {
                if let Some(parent) = resolved.path.parent() {
                    self.shared
                        .fs
                        .mkdir(parent, true)
                        .await
                        .map_err(|err| vfs_error("write", path, err))?;
                }
            }
        }
        self.shared
            .fs
            .write_file(&resolved.path, content)
            .await
            .map_err(|err| vfs_error("write", path, err))
    }

    async fn stat_path(&self, path: &str) -> Result<FileStat> {
        let resolved = self.resolve(path, Follow::NotFinal).await?;
        match resolved.found {
            Found::Entry(_) => {
                let metadata = self
                    .shared
                    .fs
                    .lstat(&resolved.path)
                    .await
                    .map_err(|err| vfs_error("stat", path, err))?;
                Ok(file_stat(&metadata))
            }
            Found::ThroughFile => Err(not_a_directory("stat", path)),
            Found::Missing => Err(not_found("stat", path)),
        }
    }

    async fn list(&self, path: &str) -> Result<Vec<String>> {
        let resolved = self.resolve(path, Follow::Final).await?;
        match resolved.found {
            Found::Entry(FileType::Directory) => {}
            Found::Entry(_) | Found::ThroughFile => return Err(not_a_directory("list", path)),
            Found::Missing => return Err(not_found("list", path)),
        }
        let entries = self
            .shared
            .fs
            .read_dir(&resolved.path)
            .await
            .map_err(|err| vfs_error("list", path, err))?;
        let mut names: Vec<String> = entries
            .into_iter()
            .map(|entry| entry.name)
            .filter(|name| protected_name(name).is_none())
            .collect();
        names.sort();
        Ok(names)
    }

    async fn make_dir(&self, path: &str, options: MkdirOptions) -> Result<()> {
        let resolved = self.resolve(path, Follow::NotFinal).await?;
        match resolved.found {
            Found::Entry(FileType::Directory) if options.recursive => return Ok(()),
            Found::Entry(FileType::Symlink) if options.recursive => {
                let target = self.resolve(path, Follow::Final).await?;
                if matches!(target.found, Found::Entry(FileType::Directory)) {
                    return Ok(());
                }
                return Err(already_exists("create directory", path));
            }
            Found::Entry(_) => return Err(already_exists("create directory", path)),
            Found::ThroughFile => {
                return Err(FlueError::sandbox(
                    SandboxErrorReason::NotADirectory,
                    format!("create directory {path}: a parent is not a directory"),
                ));
            }
            Found::Missing => {}
        }
        if !options.recursive {
            let parent_exists = match resolved.path.parent() {
                Some(parent) => matches!(
                    self.shared.fs.lstat(parent).await,
                    Ok(Metadata {
                        file_type: FileType::Directory,
                        ..
                    })
                ),
                None => true,
            };
            if !parent_exists {
                return Err(not_found("create directory", path));
            }
        }
        self.shared
            .fs
            .mkdir(&resolved.path, options.recursive)
            .await
            .map_err(|err| vfs_error("create directory", path, err))
    }

    /// Why the tree below the directory `dir` holds a protected entry, if it does (symlinks
    /// are not followed).
    async fn protected_below(&self, dir: &Path) -> Result<Option<&'static str>> {
        let mut pending = vec![dir.to_path_buf()];
        while let Some(dir) = pending.pop() {
            let shown = dir.to_string_lossy();
            let entries = self
                .shared
                .fs
                .read_dir(&dir)
                .await
                .map_err(|err| vfs_error("remove", &shown, err))?;
            for entry in entries {
                if let Some(reason) = protected_name(&entry.name) {
                    return Ok(Some(reason));
                }
                if entry.metadata.file_type == FileType::Directory {
                    pending.push(dir.join(&entry.name));
                }
            }
        }
        Ok(None)
    }

    async fn remove(&self, path: &str, options: RmOptions) -> Result<()> {
        let resolved = self.resolve(path, Follow::NotFinal).await?;
        if resolved.path == Path::new(&self.shared.root) {
            return Err(FlueError::sandbox(
                SandboxErrorReason::PermissionDenied,
                format!("remove {path}: refusing to remove the sandbox root"),
            ));
        }
        match resolved.found {
            Found::Missing | Found::ThroughFile if options.force => return Ok(()),
            Found::Missing => return Err(not_found("remove", path)),
            Found::ThroughFile => return Err(not_a_directory("remove", path)),
            Found::Entry(FileType::Directory) if !options.recursive => {
                return Err(FlueError::sandbox(
                    SandboxErrorReason::IsDirectory,
                    format!("remove {path}: is a directory (set recursive to remove it)"),
                ));
            }
            Found::Entry(FileType::Directory) => {
                // A tree holding a protected entry is refused whole, as in the local sandbox.
                if let Some(reason) = self.protected_below(&resolved.path).await? {
                    return Err(FlueError::ProtectedPath {
                        path: path.to_owned(),
                        reason: reason.to_owned(),
                    });
                }
            }
            Found::Entry(_) => {}
        }
        self.shared
            .fs
            .remove(&resolved.path, options.recursive)
            .await
            .map_err(|err| vfs_error("remove", path, err))
    }
}

impl Sandbox for VirtualSandbox {
    fn cwd(&self) -> &str {
        &self.shared.root
    }

    fn exec<'a>(
        &'a self,
        command: &'a str,
        options: ExecOptions,
    ) -> BoxFuture<'a, Result<ShellResult>> {
        Box::pin(self.run(command, options))
    }

    fn read_file_bytes<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Vec<u8>>> {
        Box::pin(self.read_bytes(path))
    }

    fn write_file<'a>(&'a self, path: &'a str, content: &'a [u8]) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.write(path, content))
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

/// Whether a resolution follows the final component when it is a symlink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Follow {
    Final,
    NotFinal,
}

/// Where a path led.
#[derive(Debug)]
struct Resolved {
    /// The virtual path reached: every symlink resolved (but a final one not followed).
    path: PathBuf,
    found: Found,
}

#[derive(Debug)]
enum Found {
    /// An entry of this type is there.
    Entry(FileType),
    /// Nothing is there (nor at some parent).
    Missing,
    /// A parent is a file.
    ThroughFile,
}

/// How a command's wait ended.
enum Ending {
    /// The interpreter thread handed back its result (`None`: it panicked).
    Finished(Box<Option<bashkit::Result<bashkit::ExecResult>>>),
    TimedOut,
    Aborted,
}

/// A pooled interpreter: the channel to the thread it lives on, and its flags. Dropping it
/// ends the thread once its current command (if any) has ended.
struct Interpreter {
    jobs: std::sync::mpsc::Sender<Job>,
    /// bashkit's stop flag, checked between interpretation steps.
    stop_flag: Arc<AtomicBool>,
    /// Raised by the stack guard when the command nested too deep.
    too_deep: Arc<AtomicBool>,
}

/// One command for an interpreter thread.
struct Job {
    command: String,
    /// The shell state the command starts from.
    state: ShellState,
    reply: oneshot::Sender<bashkit::Result<bashkit::ExecResult>>,
}

/// The `before_tool` hook of every interpreter: refuses a builtin call, and stops the
/// command, once the interpreter thread's stack is used past [`STACK_GUARD_BYTES`]. This
/// bounds recursion bashkit counts nowhere (`cmd='eval "$cmd"'; eval "$cmd"`), which would
/// otherwise overflow the stack and abort the process.
struct StackGuard {
    too_deep: Arc<AtomicBool>,
    stop_flag: Arc<OnceLock<Arc<AtomicBool>>>,
}

impl StackGuard {
    fn check(&self, event: ToolEvent) -> HookAction<ToolEvent> {
        if stack_in_use() <= STACK_GUARD_BYTES {
            return HookAction::Continue(event);
        }
        self.too_deep.store(true, Ordering::SeqCst);
        if let Some(stop_flag) = self.stop_flag.get() {
            stop_flag.store(true, Ordering::SeqCst);
        }
        HookAction::Cancel("commands nested too deeply".to_owned())
    }
}

/// Raises an interpreter's stop flag when dropped (the `exec` future went away), unless
/// disarmed first.
struct StopOnDrop(Option<Arc<AtomicBool>>);

impl StopOnDrop {
    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Some(flag) = &self.0 {
            flag.store(true, Ordering::SeqCst);
        }
    }
}

/// Counts a command being interpreted until dropped.
struct RunningGuard(Arc<AtomicUsize>);

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Starts the thread `bash` lives on (a large stack, a current-thread runtime): it runs the
/// jobs sent to it one after the other, until the sender is dropped.
fn spawn_worker(bash: Bash, running: Arc<AtomicUsize>) -> Result<std::sync::mpsc::Sender<Job>> {
    let (jobs, inbox) = std::sync::mpsc::channel::<Job>();
    let spawned = std::thread::Builder::new()
        .name("flue-virtual-bash".to_owned())
        .stack_size(INTERPRETER_STACK_BYTES)
        .spawn(move || {
            STACK_BASE.with(|base| base.set(stack_address()));
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
            else {
                // Dropping the inbox fails the job that was sent.
                return;
            };
            let mut bash = bash;
            let stop_flag = bash.cancellation_token();
            while let Ok(job) = inbox.recv() {
                running.fetch_add(1, Ordering::SeqCst);
                let _running = RunningGuard(Arc::clone(&running));
                bash.restore_shell_state(&job.state);
                // bashkit checks the stop flag between steps, but a step that waits (`sleep`,
                // a `read` from a pipe) does not look at it: such a command is dropped at its
                // wait, so an abort ends it at once rather than after the whole grace.
                let result = runtime.block_on(async {
                    tokio::select! {
                        biased;
                        result = bash.exec(&job.command) => Some(result),
                        () = raised(&stop_flag) => None,
                    }
                });
                let Some(result) = result else {
                    // Stopped inside a step: this interpreter is not used again (its caller
                    // does not pool it), and the dropped reply tells the caller it stopped.
                    break;
                };
                let _ = job.reply.send(result);
            }
            // Background work of bashkit's (a parse on the blocking pool) is not waited for.
            runtime.shutdown_background();
        });
    match spawned {
        Ok(_detached) => Ok(jobs),
        Err(err) => Err(FlueError::Sandbox {
            message: format!("the virtual sandbox cannot start a thread for commands: {err}"),
            reason: SandboxErrorReason::Other,
            source: Some(BoxError::from(err)),
        }),
    }
}

/// How often a running command's stop flag is looked at while it waits inside a step.
const STOP_POLL: Duration = Duration::from_millis(5);

/// Returns once `flag` is raised.
async fn raised(flag: &AtomicBool) {
    while !flag.load(Ordering::SeqCst) {
        tokio::time::sleep(STOP_POLL).await;
    }
}

/// The error of a command whose interpreter thread went away (a panic inside bashkit, or a
/// runtime that could not start).
fn interpreter_failed() -> FlueError {
    FlueError::sandbox(
        SandboxErrorReason::Other,
        "the virtual sandbox's interpreter failed while running the command (it panicked or \
         could not start); the command may have been partly run",
    )
}

/// The address of a local of the calling frame: how far down the stack the caller is.
#[inline(never)]
fn stack_address() -> usize {
    let marker = 0_u8;
    std::ptr::from_ref(std::hint::black_box(&marker)).addr()
}

/// Bytes of stack in use on this interpreter thread (0 on any other thread).
fn stack_in_use() -> usize {
    let base = STACK_BASE.with(Cell::get);
    if base == 0 {
        return 0;
    }
    base.abs_diff(stack_address())
}

/// The error of a command stopped by the stack guard.
fn stack_guard_error() -> FlueError {
    FlueError::sandbox(
        SandboxErrorReason::LimitExceeded,
        "the command hit a limit of the virtual sandbox: commands nested too deeply (`eval` or \
         `source` calling itself); end the recursion",
    )
}

/// The shell state a command starts from: the base state in `cwd`, with `env` exported.
fn shell_state(base: &ShellState, cwd: &Path, env: &BTreeMap<String, String>) -> ShellState {
    let mut state = base.clone();
    state.cwd = cwd.to_path_buf();
    let cwd_text = cwd.to_string_lossy().into_owned();
    state.env.insert("PWD".to_owned(), cwd_text.clone());
    state.variables.insert("PWD".to_owned(), cwd_text);
    for (key, value) in env {
        state.env.insert(key.clone(), value.clone());
        state.variables.insert(key.clone(), value.clone());
    }
    state
}

/// The result of a command stopped by its time limit.
fn timed_out(timeout: Duration) -> ShellResult {
    ShellResult {
        stdout: String::new(),
        stderr: format!("[command timed out after {} ms]", timeout.as_millis()),
        exit_code: TIMEOUT_EXIT_CODE,
    }
}

/// A command that bashkit refused or could not finish: a failed command the model can read
/// (bad syntax, a failing builtin), or a typed error (a limit, an internal failure).
fn command_error(err: bashkit::Error) -> Result<ShellResult> {
    match err {
        bashkit::Error::Parse { .. } => Ok(ShellResult {
            stdout: String::new(),
            stderr: format!("bash: {err}"),
            exit_code: 2,
        }),
        bashkit::Error::Execution(_)
        | bashkit::Error::Io(_)
        | bashkit::Error::Regex(_)
        | bashkit::Error::CommandFailure(_)
        | bashkit::Error::LineAbort(_) => Ok(ShellResult {
            stdout: String::new(),
            stderr: format!("bash: {err}"),
            exit_code: 1,
        }),
        bashkit::Error::ResourceLimit(limit) => Err(FlueError::Sandbox {
            message: format!(
                "the command hit a limit of the virtual sandbox: {limit}; split the work into \
                 smaller commands, or raise the limit"
            ),
            reason: SandboxErrorReason::LimitExceeded,
            source: Some(BoxError::from(limit)),
        }),
        other => Err(FlueError::Sandbox {
            message: format!("the virtual sandbox failed to run the command: {other}"),
            reason: SandboxErrorReason::Other,
            source: Some(BoxError::from(other)),
        }),
    }
}

/// The metadata of the sandbox API.
fn file_stat(metadata: &Metadata) -> FileStat {
    let mtime_ms = metadata
        .modified
        .duration_since(UNIX_EPOCH)
        .ok()
        .map(|elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX));
    FileStat {
        is_file: metadata.file_type == FileType::File,
        is_dir: metadata.file_type == FileType::Directory,
        is_symlink: Some(metadata.file_type == FileType::Symlink),
        size: Some(metadata.size),
        mtime_ms,
    }
}

/// The normal components of an absolute, normalized path.
fn normal_components(path: &Path) -> Vec<String> {
    path.components()
        .filter_map(|part| match part {
            Component::Normal(name) => Some(name.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect()
}

/// Appends `line` on a line of its own.
fn push_line(text: &mut String, line: &str) {
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(line);
}

fn not_found(operation: &str, path: &str) -> FlueError {
    FlueError::sandbox(
        SandboxErrorReason::NotFound,
        format!("{operation} {path}: no such file or directory"),
    )
}

fn not_a_directory(operation: &str, path: &str) -> FlueError {
    FlueError::sandbox(
        SandboxErrorReason::NotADirectory,
        format!("{operation} {path}: not a directory"),
    )
}

fn already_exists(operation: &str, path: &str) -> FlueError {
    FlueError::sandbox(
        SandboxErrorReason::AlreadyExists,
        format!("{operation} {path}: already exists"),
    )
}

/// A sandbox error for a failed virtual filesystem operation on `path` (as the caller gave it).
fn vfs_error(operation: &str, path: &str, err: bashkit::Error) -> FlueError {
    let description = match &err {
        bashkit::Error::Io(io) => io.to_string(),
        other => other.to_string(),
    };
    let reason = match &err {
        bashkit::Error::Io(io) => match io.kind() {
            std::io::ErrorKind::NotFound => SandboxErrorReason::NotFound,
            std::io::ErrorKind::AlreadyExists => SandboxErrorReason::AlreadyExists,
            std::io::ErrorKind::PermissionDenied => SandboxErrorReason::PermissionDenied,
            std::io::ErrorKind::NotADirectory => SandboxErrorReason::NotADirectory,
            std::io::ErrorKind::IsADirectory => SandboxErrorReason::IsDirectory,
            std::io::ErrorKind::DirectoryNotEmpty => SandboxErrorReason::NotEmpty,
            // A path bashkit refuses whatever the limits (too long, too deep, a control
            // character): the caller must change the path, as in the local sandbox.
            std::io::ErrorKind::InvalidInput if is_path_rule_message(&description) => {
                SandboxErrorReason::Other
            }
            _ if is_limit_message(&description) => SandboxErrorReason::LimitExceeded,
            _ if description == "is a directory" => SandboxErrorReason::IsDirectory,
            _ if description == "not a directory" => SandboxErrorReason::NotADirectory,
            _ if description == "directory not empty" => SandboxErrorReason::NotEmpty,
            _ => SandboxErrorReason::Other,
        },
        bashkit::Error::ResourceLimit(_) => SandboxErrorReason::LimitExceeded,
        _ => SandboxErrorReason::Other,
    };
    let message = if reason == SandboxErrorReason::LimitExceeded {
        format!(
            "{operation} {path}: {description}; the virtual sandbox's filesystem limits are \
             set with `VirtualLimits`"
        )
    } else {
        format!("{operation} {path}: {description}")
    };
    FlueError::Sandbox {
        message,
        reason,
        source: Some(BoxError::from(err)),
    }
}

/// Whether a bashkit filesystem error message reports a path it refuses whatever the limits
/// (bashkit's `FsLimitExceeded` path variants, which `VirtualLimits` does not set).
fn is_path_rule_message(message: &str) -> bool {
    [
        "filename too long",
        "path too long",
        "path too deep",
        "unsafe character",
    ]
    .iter()
    .any(|start| message.starts_with(start))
}

/// Whether a bashkit filesystem error message reports a limit.
fn is_limit_message(message: &str) -> bool {
    message.contains("limit") || message.starts_with("filesystem full")
}
