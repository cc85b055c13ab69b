//! Starting a stdio MCP server: the process, its environment, and the tail of its stderr.

use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use process_wrap::tokio::{CommandWrap, ProcessGroup};
use rmcp::transport::TokioChildProcess;
use tokio::io::AsyncReadExt;
use tokio::process::ChildStderr;
use tokio::sync::Notify;

use super::options::McpStdioCommand;

/// Host variables a server process inherits; everything else must be declared in `env`.
const ENV_ALLOWLIST: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM",
    "TMPDIR",
];

/// How much of a server's stderr is kept for error messages.
const STDERR_TAIL_BYTES: usize = 2048;

/// The last bytes a server wrote to stderr, kept for error messages.
#[derive(Clone, Debug, Default)]
pub(crate) struct StderrTail {
    bytes: Arc<Mutex<VecDeque<u8>>>,
    /// Set once stderr reached its end (the server closed it or exited).
    ended: Arc<AtomicBool>,
    ended_notify: Arc<Notify>,
}

/// Spawns `command` in its own process group with a filtered environment and piped stdio.
pub(crate) fn spawn(command: &McpStdioCommand) -> std::io::Result<(TokioChildProcess, StderrTail)> {
    let mut process = tokio::process::Command::new(&command.command);
    process.args(&command.args).env_clear();
    for name in ENV_ALLOWLIST {
        if let Some(value) = std::env::var_os(name) {
            process.env(name, value);
        }
    }
    process.envs(&command.env);
    if let Some(cwd) = &command.cwd {
        process.current_dir(cwd);
    }
    let mut wrapped = CommandWrap::from(process);
    wrapped.wrap(ProcessGroup::leader());
    let (child, stderr) = TokioChildProcess::builder(wrapped)
        .stderr(Stdio::piped())
        .spawn()?;
    let tail = StderrTail::default();
    if let Some(stderr) = stderr {
        tokio::spawn(tail.clone().collect(stderr));
    }
    Ok((child, tail))
}

impl StderrTail {
    /// The kept text, trimmed; empty when the server wrote nothing.
    pub(crate) fn text(&self) -> String {
        let bytes: Vec<u8> = match self.bytes.lock() {
            Ok(guard) => guard.iter().copied().collect(),
            Err(poisoned) => poisoned.into_inner().iter().copied().collect(),
        };
        String::from_utf8_lossy(&bytes).trim().to_owned()
    }

    /// Waits, at most `limit`, until stderr has ended. A server that died usually wrote why
    /// just before; its last words reach the tail only after the transport noticed the death,
    /// so errors about a dead server wait for them first.
    pub(crate) async fn settle(&self, limit: Duration) {
        let ended = self.ended_notify.notified();
        if self.ended.load(Ordering::Acquire) {
            return;
        }
        let _ = tokio::time::timeout(limit, ended).await;
    }

    async fn collect(self, stderr: ChildStderr) {
        self.read_to_end(stderr).await;
        self.ended.store(true, Ordering::Release);
        self.ended_notify.notify_waiters();
    }

    async fn read_to_end(&self, mut stderr: ChildStderr) {
        let mut chunk = [0u8; 1024];
        loop {
            let read = match stderr.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(read) => read,
            };
            let Some(new) = chunk.get(..read) else {
                return;
            };
            let mut bytes = match self.bytes.lock() {
                Ok(guard) => guard,
                Err(poisoned) => poisoned.into_inner(),
            };
            bytes.extend(new);
            let excess = bytes.len().saturating_sub(STDERR_TAIL_BYTES);
            bytes.drain(..excess);
        }
    }
}
