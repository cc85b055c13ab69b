//! Opening the sandbox an agent runs in, from its resolved settings.
//!
//! The kind comes from the caller's override (`--sandbox`), then the agent's `sandbox:`, then
//! flue.toml's `[sandbox]`, else virtual. A virtual sandbox starts as a copy of the workspace root (or of
//! its `seed`), without `.flue/` and `.env*` files; nothing is written back. A Daytona
//! sandbox created for a harness is deleted when the harness is closed.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use flue_build::{SandboxKind, SandboxSettings, SeedSetting};
use flue_connectors::{DaytonaConfig, DaytonaSandbox, IsolatedSandbox};
use flue_core::{
    BoxFuture, ExecOptions, FlueError, LocalSandbox, Result, Sandbox, VirtualSandbox,
    error::SandboxErrorReason,
    sandbox::ShellResult,
    sandbox::VirtualLimits,
    sandbox::{FileStat, MkdirOptions, RmOptions},
};

use crate::Env;

/// Names never copied into a virtual sandbox: the conversation store and env files.
const ALWAYS_EXCLUDED: &[&str] = &[".flue", ".env*"];

/// Names left out of the seed copy unless `exclude` says otherwise.
const DEFAULT_EXCLUDED: &[&str] = &[".git", "node_modules", "target"];

/// The sandbox of one harness, and what must happen when the harness is closed.
pub(crate) struct OpenSandbox {
    pub(crate) sandbox: Arc<dyn Sandbox>,
    daytona: Option<Arc<DaytonaSandbox>>,
}

impl OpenSandbox {
    /// Deletes a Daytona sandbox created for this harness; a failure is returned as a
    /// warning, not an error.
    pub(crate) async fn close(self) -> Option<String> {
        let daytona = self.daytona?;
        match daytona.cleanup().await {
            Ok(()) => None,
            Err(err) => Some(format!(
                "could not delete Daytona sandbox {}: {err}",
                daytona.id()
            )),
        }
    }
}

impl OpenSandbox {
    /// The sandbox as a harness holds it: one that deletes a Daytona sandbox when the last
    /// holder drops it, with the deletion's task pushed to `cleanups` so that a host can
    /// await it before the process exits.
    pub(crate) fn into_owned(self, cleanups: &Cleanups) -> Arc<dyn Sandbox> {
        match self.daytona {
            None => self.sandbox,
            Some(daytona) => Arc::new(DeleteOnDrop {
                inner: self.sandbox,
                daytona: Some(daytona),
                cleanups: cleanups.clone(),
            }),
        }
    }
}

/// Background deletions of sandboxes, awaited by [`Cleanups::wait`].
#[derive(Clone, Default)]
pub(crate) struct Cleanups {
    tasks: Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<Option<String>>>>>,
}

impl Cleanups {
    fn push(&self, task: tokio::task::JoinHandle<Option<String>>) {
        if let Ok(mut tasks) = self.tasks.lock() {
            tasks.push(task);
        }
    }

    /// Waits for every deletion started so far; returns failures as warnings.
    pub(crate) async fn wait(&self) -> Vec<String> {
        let tasks = match self.tasks.lock() {
            Ok(mut tasks) => std::mem::take(&mut *tasks),
            Err(_) => Vec::new(),
        };
        let mut warnings = Vec::new();
        for task in tasks {
            if let Ok(Some(warning)) = task.await {
                warnings.push(warning);
            }
        }
        warnings
    }
}

/// A Daytona sandbox deleted when its last holder (a harness) drops it.
struct DeleteOnDrop {
    inner: Arc<dyn Sandbox>,
    daytona: Option<Arc<DaytonaSandbox>>,
    cleanups: Cleanups,
}

impl Drop for DeleteOnDrop {
    fn drop(&mut self) {
        if let Some(daytona) = self.daytona.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let sandbox = OpenSandbox {
                sandbox: Arc::clone(&self.inner),
                daytona: Some(daytona),
            };
            self.cleanups.push(runtime.spawn(sandbox.close()));
        }
    }
}

impl Sandbox for DeleteOnDrop {
    fn cwd(&self) -> &str {
        self.inner.cwd()
    }

    fn exec<'a>(
        &'a self,
        command: &'a str,
        options: ExecOptions,
    ) -> BoxFuture<'a, Result<ShellResult>> {
        self.inner.exec(command, options)
    }

    fn read_file_bytes<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Vec<u8>>> {
        self.inner.read_file_bytes(path)
    }

    fn write_file<'a>(&'a self, path: &'a str, content: &'a [u8]) -> BoxFuture<'a, Result<()>> {
        self.inner.write_file(path, content)
    }

    fn stat<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<FileStat>> {
        self.inner.stat(path)
    }

    fn readdir<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Vec<String>>> {
        self.inner.readdir(path)
    }

    fn mkdir<'a>(&'a self, path: &'a str, options: MkdirOptions) -> BoxFuture<'a, Result<()>> {
        self.inner.mkdir(path, options)
    }

    fn rm<'a>(&'a self, path: &'a str, options: RmOptions) -> BoxFuture<'a, Result<()>> {
        self.inner.rm(path, options)
    }
}

/// Opens the sandbox `settings` describe for the workspace at `root`.
pub(crate) async fn open(
    settings: &SandboxSettings,
    root: &Path,
    env: &Env,
) -> Result<OpenSandbox> {
    let options = &settings.options;
    let timeout = options.timeout_ms.map(Duration::from_millis);
    let (sandbox, daytona): (Arc<dyn Sandbox>, _) = match settings.kind {
        SandboxKind::Local => (Arc::new(LocalSandbox::new(root)?), None),
        SandboxKind::Isolated => {
            let mut builder = IsolatedSandbox::builder(root);
            if options.network == Some(true) {
                builder = builder.with_network();
            }
            (Arc::new(builder.build().await?), None)
        }
        SandboxKind::Daytona => {
            let daytona = Arc::new(DaytonaSandbox::connect(daytona_config(settings, env)?).await?);
            (daytona.clone() as Arc<dyn Sandbox>, Some(daytona))
        }
        // Virtual, and any kind added later.
        _ => (Arc::new(virtual_sandbox(settings, root).await?), None),
    };
    let sandbox = match timeout {
        Some(max_time) => Arc::new(MaxTime {
            inner: sandbox,
            max_time,
        }),
        None => sandbox,
    };
    Ok(OpenSandbox { sandbox, daytona })
}

async fn virtual_sandbox(settings: &SandboxSettings, root: &Path) -> Result<VirtualSandbox> {
    let options = &settings.options;
    let mut limits = VirtualLimits::default();
    if let Some(timeout_ms) = options.timeout_ms {
        limits = limits.with_max_time(Duration::from_millis(timeout_ms));
    }
    let mut builder = VirtualSandbox::builder().with_limits(limits);
    // The seed is always a directory below the root, opened without following symlinks, so
    // a bundle's `sandbox.seed` cannot reach `~/.ssh` or `/etc` even through a symlink in the
    // workspace (loading already refused absolute paths and `..`).
    let seed = match &options.seed {
        None => Some(""),
        Some(SeedSetting::Dir(dir)) => Some(dir.as_str()),
        Some(SeedSetting::Empty) => None,
        Some(_) => {
            return Err(FlueError::config(
                "this version of flue does not know the sandbox seed setting",
            ));
        }
    };
    if let Some(seed) = seed {
        let mut exclude: BTreeSet<String> = ALWAYS_EXCLUDED
            .iter()
            .map(|name| (*name).to_owned())
            .collect();
        match &options.exclude {
            Some(names) => exclude.extend(names.iter().cloned()),
            None => exclude.extend(DEFAULT_EXCLUDED.iter().map(|name| (*name).to_owned())),
        }
        builder = builder.with_seed_in(root, seed).with_seed_exclude(exclude);
        return builder.build().await.map_err(|err| match err {
            FlueError::Sandbox {
                message,
                reason,
                source,
            } if !seed.is_empty() => FlueError::Sandbox {
                message: format!("`sandbox.seed: {seed}`: {message}"),
                reason,
                source,
            },
            other => other,
        });
    }
    builder.build().await
}

fn daytona_config(settings: &SandboxSettings, env: &Env) -> Result<DaytonaConfig> {
    let options = &settings.options;
    let Some(key) = env.secret("DAYTONA_API_KEY").filter(|key| !key.is_empty()) else {
        return Err(FlueError::sandbox(
            SandboxErrorReason::Unavailable,
            "the daytona sandbox needs an API key: set DAYTONA_API_KEY in the environment or in \
             the workspace's .env file",
        ));
    };
    let mut config = DaytonaConfig::new(key);
    if let Some(url) = options
        .api_url
        .clone()
        .or_else(|| env.get("DAYTONA_API_URL"))
    {
        config = config.with_api_url(url);
    }
    if let Some(snapshot) = &options.snapshot {
        config = config.with_snapshot(snapshot);
    }
    if let Some(id) = &options.sandbox_id {
        config = config.with_sandbox_id(id);
    }
    if options.network == Some(true) {
        config = config.with_network();
    }
    Ok(config)
}

/// Caps every command's time limit at `max_time` (`timeout_ms`); shorter ones stay.
struct MaxTime {
    inner: Arc<dyn Sandbox>,
    max_time: Duration,
}

impl Sandbox for MaxTime {
    fn cwd(&self) -> &str {
        self.inner.cwd()
    }

    fn exec<'a>(
        &'a self,
        command: &'a str,
        mut options: ExecOptions,
    ) -> BoxFuture<'a, Result<ShellResult>> {
        options.timeout = Some(
            options
                .timeout
                .map_or(self.max_time, |timeout| timeout.min(self.max_time)),
        );
        self.inner.exec(command, options)
    }

    fn read_file_bytes<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Vec<u8>>> {
        self.inner.read_file_bytes(path)
    }

    fn write_file<'a>(&'a self, path: &'a str, content: &'a [u8]) -> BoxFuture<'a, Result<()>> {
        self.inner.write_file(path, content)
    }

    fn stat<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<FileStat>> {
        self.inner.stat(path)
    }

    fn readdir<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Vec<String>>> {
        self.inner.readdir(path)
    }

    fn mkdir<'a>(&'a self, path: &'a str, options: MkdirOptions) -> BoxFuture<'a, Result<()>> {
        self.inner.mkdir(path, options)
    }

    fn rm<'a>(&'a self, path: &'a str, options: RmOptions) -> BoxFuture<'a, Result<()>> {
        self.inner.rm(path, options)
    }
}

/// Files to write into one sandbox: (path, content).
type SeedFiles = Vec<(String, Vec<u8>)>;

/// Files to write into chosen conversations' sandboxes before their first turn, and a hold on
/// those sandboxes for reading them afterwards: what an eval case needs (its initial files in,
/// the files the agent left behind out). Shared between the caller and the host's harness
/// builds ([`HarnessOptions::with_conversation_sandboxes`](crate::HarnessOptions)).
///
/// Only conversations given with [`ConversationSandboxes::seed`] are touched or held; every
/// other conversation gets its sandbox as usual.
#[derive(Default)]
pub struct ConversationSandboxes {
    seeds: std::sync::Mutex<std::collections::HashMap<String, SeedFiles>>,
    held: std::sync::Mutex<std::collections::HashMap<String, Arc<dyn Sandbox>>>,
}

impl std::fmt::Debug for ConversationSandboxes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConversationSandboxes")
            .finish_non_exhaustive()
    }
}

impl ConversationSandboxes {
    /// An empty set: no conversation seeded.
    pub fn new() -> Self {
        Self::default()
    }

    /// Writes `files` (`(path, content)`, paths relative to the sandbox's working directory)
    /// into the sandbox of conversation `instance_id` (`<agent>:<id>`) when its harness is
    /// built, and holds that sandbox until [`ConversationSandboxes::take`].
    pub fn seed(&self, instance_id: &str, files: Vec<(String, Vec<u8>)>) {
        lock(&self.seeds).insert(instance_id.to_owned(), files);
    }

    /// The sandbox conversation `instance_id` ran in, when it was seeded and a harness of it
    /// was built; released from the hold.
    pub fn take(&self, instance_id: &str) -> Option<Arc<dyn Sandbox>> {
        lock(&self.seeds).remove(instance_id);
        lock(&self.held).remove(instance_id)
    }

    /// The files for `instance_id`, when it was seeded.
    fn files(&self, instance_id: &str) -> Option<Vec<(String, Vec<u8>)>> {
        lock(&self.seeds).get(instance_id).cloned()
    }

    fn hold(&self, instance_id: &str, sandbox: Arc<dyn Sandbox>) {
        lock(&self.held).insert(instance_id.to_owned(), sandbox);
    }
}

fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Hands a harness its already opened sandbox, after writing the seeded files of the
/// conversation it is built for (the instance id is known only at build time).
pub(crate) struct SeedingFactory {
    pub(crate) sandbox: Arc<dyn Sandbox>,
    pub(crate) sandboxes: Arc<ConversationSandboxes>,
}

impl flue_core::sandbox::SandboxFactory for SeedingFactory {
    fn create<'a>(&'a self, instance_id: &'a str) -> BoxFuture<'a, Result<Arc<dyn Sandbox>>> {
        Box::pin(async move {
            let Some(files) = self.sandboxes.files(instance_id) else {
                return Ok(Arc::clone(&self.sandbox));
            };
            for (path, content) in &files {
                self.sandbox.write_file(path, content).await?;
            }
            self.sandboxes.hold(instance_id, Arc::clone(&self.sandbox));
            Ok(Arc::clone(&self.sandbox))
        })
    }
}
