//! Shared helpers for tests that run against every sandbox: the sandbox list, a workspace
//! fixture with the file tools' context, a failure-injecting sandbox, and tree snapshots.
//!
//! Adding a sandbox to every file-tool and apply-patch test is one line in [`SANDBOXES`]: a
//! name and a function that opens the sandbox over a host directory already holding the
//! test's files. A sandbox may copy that directory (the virtual one does), so tests write and
//! read files only through the sandbox once it is open ([`Fixture::write`],
//! [`Fixture::snapshot`]); the fixture keeps the host directory out of their reach.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use flue_core::{
    BoxFuture, ExecOptions, FlueError, LocalSandbox, MemoryStore, Result, Sandbox, ToolContext,
    ToolError, VirtualSandbox,
    error::SandboxErrorReason,
    sandbox::ShellResult,
    sandbox::{FileStat, MkdirOptions, RmOptions},
    tool::builtin_tool,
};
use serde_json::Value;
use tempfile::TempDir;

/// Opens a sandbox over a host directory holding the files a test starts from. The directory
/// outlives the sandbox.
pub type OpenSandbox = fn(PathBuf) -> BoxFuture<'static, Arc<dyn Sandbox>>;

/// Every sandbox the file tools are tested in.
pub const SANDBOXES: &[(&str, OpenSandbox)] = &[("local", open_local), ("virtual", open_virtual)];

/// The local sandbox, rooted at the directory itself.
pub fn open_local(dir: PathBuf) -> BoxFuture<'static, Arc<dyn Sandbox>> {
    Box::pin(async move { Arc::new(LocalSandbox::new(&dir).unwrap()) as Arc<dyn Sandbox> })
}

/// The virtual sandbox, seeded with a copy of the directory.
pub fn open_virtual(dir: PathBuf) -> BoxFuture<'static, Arc<dyn Sandbox>> {
    Box::pin(async move {
        let sandbox = VirtualSandbox::builder().with_seed(dir).build().await;
        Arc::new(sandbox.unwrap()) as Arc<dyn Sandbox>
    })
}

/// A sandbox opened over a fresh host directory, and a tool context with its own audit store.
pub struct Fixture {
    pub ctx: ToolContext,
    pub store: Arc<MemoryStore>,
    /// The host directory: the local sandbox's root, the virtual one's seed. Tests don't
    /// touch it.
    _dir: TempDir,
}

impl Fixture {
    /// `files` (path, content) written under a fresh directory, then `open` over it.
    pub async fn new(open: OpenSandbox, files: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        for (path, content) in files {
            let full = dir.path().join(path);
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(full, content).unwrap();
        }
        Self::open(open, dir).await
    }

    /// `open` over `dir`, which already holds the test's files.
    pub async fn open(open: OpenSandbox, dir: TempDir) -> Self {
        let sandbox = open(dir.path().to_owned()).await;
        let store = Arc::new(MemoryStore::new());
        let ctx = ToolContext::new(sandbox)
            .with_audit(store.clone())
            .with_instance_id("instance-1")
            .with_session("default")
            .with_agent("tester");
        Self {
            ctx,
            store,
            _dir: dir,
        }
    }

    /// The fixture with its sandbox replaced by `sandbox` (which wraps the current one).
    pub fn with_sandbox(mut self, sandbox: Arc<dyn Sandbox>) -> Self {
        self.ctx.sandbox = sandbox;
        self
    }

    /// Writes `content` to `path` (relative to the working directory) through the sandbox.
    pub async fn write(&self, path: &str, content: &[u8]) {
        let abs = format!("{}/{path}", self.ctx.cwd);
        self.ctx.sandbox.write_file(&abs, content).await.unwrap();
    }

    /// Calls a built-in tool: its `data` on success (after checking the `ok` envelope), or
    /// its error.
    pub async fn call(&self, tool: &str, input: Value) -> Result<Value, ToolError> {
        call(&self.ctx, tool, input).await
    }

    /// The error kind of a call that must fail.
    pub async fn fail(&self, tool: &str, input: Value) -> String {
        match self.call(tool, input.clone()).await {
            Ok(data) => panic!("{tool} {input} succeeded: {data}"),
            Err(err) => {
                assert!(
                    err.suggested_action.is_some(),
                    "{tool} {input}: {err:?} has no suggested action"
                );
                err.kind
            }
        }
    }

    /// Every file and directory in the sandbox, through the sandbox trait.
    pub async fn snapshot(&self) -> Tree {
        snapshot(self.ctx.sandbox.as_ref(), &self.ctx.cwd).await
    }
}

/// Calls a built-in file tool through its definition, checking the `{ok, data}` envelope.
pub async fn call(ctx: &ToolContext, tool: &str, input: Value) -> Result<Value, ToolError> {
    let output = builtin_tool(tool).unwrap().call(input, ctx).await?;
    assert_eq!(output["ok"], Value::Bool(true), "{tool}: {output}");
    Ok(output["data"].clone())
}

/// A tree: relative path -> `None` for a directory, the bytes for a file.
pub type Tree = BTreeMap<String, Option<Vec<u8>>>;

/// Snapshots the tree under `root` through the sandbox trait.
pub async fn snapshot(sandbox: &dyn Sandbox, root: &str) -> Tree {
    let mut tree = Tree::new();
    let mut pending = vec![(root.to_owned(), String::new())];
    while let Some((abs, rel)) = pending.pop() {
        for name in sandbox.readdir(&abs).await.unwrap() {
            let child_abs = format!("{abs}/{name}");
            let child_rel = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            if sandbox.stat(&child_abs).await.unwrap().is_dir {
                tree.insert(child_rel.clone(), None);
                pending.push((child_abs, child_rel));
            } else {
                let bytes = sandbox.read_file_bytes(&child_abs).await.unwrap();
                tree.insert(child_rel, Some(bytes));
            }
        }
    }
    tree
}

/// Snapshots a host directory (missing: empty).
pub fn host_tree(dir: &Path) -> Tree {
    fn walk(dir: &Path, rel: &str, tree: &mut Tree) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            let child_rel = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            if entry.file_type().unwrap().is_dir() {
                tree.insert(child_rel.clone(), None);
                walk(&entry.path(), &child_rel, tree);
            } else {
                tree.insert(child_rel, Some(std::fs::read(entry.path()).unwrap()));
            }
        }
    }
    let mut tree = Tree::new();
    walk(dir, "", &mut tree);
    tree
}

/// A tree as text, for readable assertion diffs.
pub fn show(tree: &Tree) -> BTreeMap<String, String> {
    tree.iter()
        .map(|(path, content)| {
            let shown = match content {
                None => "<dir>".to_owned(),
                Some(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            };
            (path.clone(), shown)
        })
        .collect()
}

/// A sandbox that delegates to another but fails chosen operations: writes to paths ending
/// with one of `fail_writes`, and any access to paths containing one of `deny`
/// (permission denied).
pub struct FaultySandbox {
    pub inner: Arc<dyn Sandbox>,
    pub fail_writes: Vec<String>,
    pub deny: Vec<String>,
    /// Paths written, in order (successful or not).
    pub writes: Mutex<Vec<String>>,
}

impl FaultySandbox {
    pub fn new(inner: Arc<dyn Sandbox>) -> Self {
        Self {
            inner,
            fail_writes: Vec::new(),
            deny: Vec::new(),
            writes: Mutex::new(Vec::new()),
        }
    }

    fn check(&self, path: &str) -> Result<()> {
        if self
            .deny
            .iter()
            .any(|denied| path.contains(denied.as_str()))
        {
            return Err(FlueError::sandbox(
                SandboxErrorReason::PermissionDenied,
                format!("access {path}: permission denied"),
            ));
        }
        Ok(())
    }
}

impl Sandbox for FaultySandbox {
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
        Box::pin(async move {
            self.check(path)?;
            self.inner.read_file_bytes(path).await
        })
    }

    fn write_file<'a>(&'a self, path: &'a str, content: &'a [u8]) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.writes.lock().unwrap().push(path.to_owned());
            self.check(path)?;
            if self
                .fail_writes
                .iter()
                .any(|suffix| path.ends_with(suffix.as_str()))
            {
                return Err(FlueError::sandbox(
                    SandboxErrorReason::Other,
                    format!("write {path}: disk full"),
                ));
            }
            self.inner.write_file(path, content).await
        })
    }

    fn stat<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<FileStat>> {
        Box::pin(async move {
            self.check(path)?;
            self.inner.stat(path).await
        })
    }

    fn readdir<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Vec<String>>> {
        self.inner.readdir(path)
    }

    fn mkdir<'a>(&'a self, path: &'a str, options: MkdirOptions) -> BoxFuture<'a, Result<()>> {
        self.inner.mkdir(path, options)
    }

    fn rm<'a>(&'a self, path: &'a str, options: RmOptions) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.check(path)?;
            self.inner.rm(path, options).await
        })
    }
}
