//! The live tool list of one connection: marked stale by `notifications/tools/list_changed`,
//! listed again (`tools/list`) before the agent's next model turn.
//!
//! The connection's handler counts the notifications ([`ToolListChanges`]); [`McpTools`]
//! remembers which count its list reflects and, when the agent loop asks it to refresh and the
//! count moved, lists the server's tools again. Listing failures and tools that cannot be
//! adapted never fail the turn: the last good list (or the other tools) stay, with a warning.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use flue_core::{BoxFuture, ToolDefinition, tool::ToolSource};

use super::connection::{Client, adapt_tools, list_tools};

/// How many `notifications/tools/list_changed` a server has sent on one connection.
#[derive(Debug, Default)]
pub(crate) struct ToolListChanges(AtomicU64);

impl ToolListChanges {
    /// Counts one notification (called by the connection's handler).
    pub(crate) fn note(&self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }

    /// The notifications counted so far.
    pub(crate) fn count(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

/// The server's tools as a [`ToolSource`]: the list of the last `tools/list`, listed again
/// when the server announced a change since.
pub(crate) struct McpTools {
    label: String,
    client: Arc<Client>,
    changes: Arc<ToolListChanges>,
    listed: Mutex<Listed>,
    /// One refresh at a time: sessions running at once list the tools once.
    refreshing: tokio::sync::Mutex<()>,
}

/// A list and the count of change notifications it reflects.
struct Listed {
    seen: u64,
    tools: Vec<ToolDefinition>,
}

impl McpTools {
    /// The first list of server `server`, listed after `seen` change notifications.
    pub(crate) fn new(
        server: &str,
        client: Arc<Client>,
        changes: Arc<ToolListChanges>,
        (seen, tools): (u64, Vec<ToolDefinition>),
    ) -> Self {
        Self {
            label: format!("MCP server \"{server}\""),
            client,
            changes,
            listed: Mutex::new(Listed { seen, tools }),
            refreshing: tokio::sync::Mutex::new(()),
        }
    }

    fn listed(&self) -> std::sync::MutexGuard<'_, Listed> {
        self.listed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Lists the tools again when the server announced a change since the last listing.
    async fn refresh_now(&self) {
        // The server sends the notification before the answer of the call that changed the
        // list, but the handler counts it on a task of its own: let that task run first. Over
        // streamable HTTP it may come on another stream, after the answer: give it a moment.
        let due = self.client.change_notice_due();
        if due.is_zero() {
            tokio::task::yield_now().await;
        } else {
            tokio::time::sleep(due).await;
        }
        let _one_at_a_time = self.refreshing.lock().await;
        let wanted = self.changes.count();
        if self.listed().seen == wanted {
            return;
        }
        let tools = match list_tools(&self.client).await {
            Ok(listed) => {
                let (tools, problems) = adapt_tools(&self.client, listed);
                for problem in problems {
                    tracing::warn!(
                        target: "flue::mcp",
                        "a tool of the changed list is left out: {problem}"
                    );
                }
                Some(tools)
            }
            Err(err) => {
                // Kept until the next change: a server that cannot list now would slow down
                // every turn if each one asked again.
                tracing::warn!(
                    target: "flue::mcp",
                    "{} announced a changed tool list, but listing it failed; the previous \
                     list stays: {err}",
                    self.label
                );
                None
            }
        };
        let mut listed = self.listed();
        listed.seen = wanted;
        if let Some(tools) = tools {
            tracing::debug!(
                target: "flue::mcp",
                "{} now has {} tools",
                self.label,
                tools.len()
            );
            listed.tools = tools;
        }
    }
}

impl ToolSource for McpTools {
    fn label(&self) -> String {
        self.label.clone()
    }

    fn tools(&self) -> Vec<ToolDefinition> {
        self.listed().tools.clone()
    }

    fn refresh(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.refresh_now())
    }
}
