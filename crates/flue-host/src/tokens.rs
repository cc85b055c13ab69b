//! OAuth tokens of remote MCP servers: the MCP client's [`McpTokenStore`] over flue-store's
//! [`McpTokenTable`] in the workspace's store file (`.flue/flue.db`). flue-host never opens
//! that file itself.
//!
//! Tokens are read and written only here and by the MCP client; they never reach the sandbox,
//! logs, transcripts or events.

use std::path::Path;

use flue_connectors::McpTokenStore;
use flue_core::FlueError;
use flue_store::McpTokenTable;

use crate::root::store_path;

/// The tokens of one server (by name and url) in one workspace.
#[derive(Clone, Debug)]
pub(crate) struct SqliteTokenStore {
    table: McpTokenTable,
    server: String,
    url: String,
}

impl SqliteTokenStore {
    /// The tokens of server `server` at `url` in the workspace at `root`.
    pub(crate) fn new(root: &Path, server: &str, url: &str) -> Self {
        Self {
            table: McpTokenTable::new(&store_path(root)),
            server: server.to_owned(),
            url: url.to_owned(),
        }
    }
}

impl McpTokenStore for SqliteTokenStore {
    fn load(&self) -> Result<Option<String>, FlueError> {
        self.table.load(&self.server, &self.url)
    }

    fn save(&self, document: &str) -> Result<(), FlueError> {
        self.table.save(&self.server, &self.url, document)
    }

    fn clear(&self) -> Result<(), FlueError> {
        self.table.clear(&self.server, &self.url)
    }
}

/// Forgets every token of server `server` in the workspace at `root`; how many were stored.
pub(crate) fn forget(root: &Path, server: &str) -> Result<usize, FlueError> {
    McpTokenTable::new(&store_path(root)).forget(server)
}
