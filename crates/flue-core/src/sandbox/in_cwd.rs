//! A view of a sandbox from another working directory: what `harness.fs()`, `session.fs()`
//! and `shell` use when the agent (or a task) configures a `cwd`.
//!
//! Relative paths, and commands run without a `cwd` of their own, resolve against the
//! configured directory instead of the sandbox's default. Absolute paths pass through
//! unchanged, and the wrapped sandbox keeps every confinement check (a path resolved here still
//! cannot leave the sandbox's root).

use std::sync::Arc;

use crate::error::Result;
use crate::sandbox::{
    ExecOptions, FileStat, MkdirOptions, RmOptions, Sandbox, ShellResult, normalize_path,
};
use crate::util::BoxFuture;

/// `sandbox` as seen from `cwd` (an absolute sandbox path): the sandbox itself when that is its
/// own working directory.
pub(crate) fn in_cwd(sandbox: &Arc<dyn Sandbox>, cwd: &str) -> Arc<dyn Sandbox> {
    if sandbox.cwd() == cwd {
        return Arc::clone(sandbox);
    }
    Arc::new(InCwd {
        inner: Arc::clone(sandbox),
        cwd: cwd.to_owned(),
    })
}

struct InCwd {
    inner: Arc<dyn Sandbox>,
    cwd: String,
}

impl InCwd {
    fn resolve(&self, path: &str) -> Result<String> {
        normalize_path(&self.cwd, path)
    }
}

impl Sandbox for InCwd {
    fn cwd(&self) -> &str {
        &self.cwd
    }

    fn exec<'a>(
        &'a self,
        command: &'a str,
        mut options: ExecOptions,
    ) -> BoxFuture<'a, Result<ShellResult>> {
        Box::pin(async move {
            let cwd = match &options.cwd {
                Some(cwd) => self.resolve(cwd)?,
                None => self.cwd.clone(),
            };
            options.cwd = Some(cwd);
            self.inner.exec(command, options).await
        })
    }

    fn read_file_bytes<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Vec<u8>>> {
        Box::pin(async move { self.inner.read_file_bytes(&self.resolve(path)?).await })
    }

    fn write_file<'a>(&'a self, path: &'a str, content: &'a [u8]) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move { self.inner.write_file(&self.resolve(path)?, content).await })
    }

    fn replace_file<'a>(&'a self, path: &'a str, content: &'a [u8]) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move { self.inner.replace_file(&self.resolve(path)?, content).await })
    }

    fn stat<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<FileStat>> {
        Box::pin(async move { self.inner.stat(&self.resolve(path)?).await })
    }

    fn readdir<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Vec<String>>> {
        Box::pin(async move { self.inner.readdir(&self.resolve(path)?).await })
    }

    fn mkdir<'a>(&'a self, path: &'a str, options: MkdirOptions) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move { self.inner.mkdir(&self.resolve(path)?, options).await })
    }

    fn rm<'a>(&'a self, path: &'a str, options: RmOptions) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move { self.inner.rm(&self.resolve(path)?, options).await })
    }

    fn read_file<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<String>> {
        Box::pin(async move { self.inner.read_file(&self.resolve(path)?).await })
    }

    fn exists<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move { self.inner.exists(&self.resolve(path)?).await })
    }
}
