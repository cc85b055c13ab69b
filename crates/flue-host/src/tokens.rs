//! OAuth tokens of remote MCP servers, kept in the workspace's store file (`.flue/flue.db`) in a
//! table of flue-host's own, `mcp_oauth_tokens`, outside the conversation store's migrations.
//!
//! Tokens are read and written only here and by the MCP client through
//! [`McpTokenStore`](flue_connectors::McpTokenStore); they never reach the sandbox, logs,
//! transcripts or events.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use flue_connectors::McpTokenStore;
use flue_core::FlueError;
use rusqlite::{Connection, OptionalExtension, params};

use crate::root::store_path;

#[cfg(test)]
mod tests;

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS mcp_oauth_tokens (
    server TEXT NOT NULL,
    url TEXT NOT NULL,
    document TEXT NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (server, url)
)";

/// The tokens of one server (by name and url) in one workspace.
#[derive(Clone, Debug)]
pub(crate) struct SqliteTokenStore {
    path: PathBuf,
    server: String,
    url: String,
}

impl SqliteTokenStore {
    /// The tokens of server `server` at `url` in the workspace at `root`.
    pub(crate) fn new(root: &Path, server: &str, url: &str) -> Self {
        Self {
            path: store_path(root),
            server: server.to_owned(),
            url: url.to_owned(),
        }
    }
}

impl McpTokenStore for SqliteTokenStore {
    fn load(&self) -> Result<Option<String>, FlueError> {
        let connection = open(&self.path)?;
        connection
            .query_row(
                "SELECT document FROM mcp_oauth_tokens WHERE server = ?1 AND url = ?2",
                params![self.server, self.url],
                |row| row.get(0),
            )
            .optional()
            .map_err(|err| store_error(&self.path, err))
    }

    fn save(&self, document: &str) -> Result<(), FlueError> {
        let connection = open(&self.path)?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_secs());
        let now = i64::try_from(now).unwrap_or(i64::MAX);
        connection
            .execute(
                "INSERT INTO mcp_oauth_tokens (server, url, document, updated_at)
                 VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (server, url) DO UPDATE SET document = ?3, updated_at = ?4",
                params![self.server, self.url, document, now],
            )
            .map(|_| ())
            .map_err(|err| store_error(&self.path, err))
    }

    fn clear(&self) -> Result<(), FlueError> {
        let connection = open(&self.path)?;
        connection
            .execute(
                "DELETE FROM mcp_oauth_tokens WHERE server = ?1 AND url = ?2",
                params![self.server, self.url],
            )
            .map(|_| ())
            .map_err(|err| store_error(&self.path, err))
    }
}

/// Forgets every token of server `server` in the workspace at `root`; how many were stored.
pub(crate) fn forget(root: &Path, server: &str) -> Result<usize, FlueError> {
    let path = store_path(root);
    if !path.exists() {
        return Ok(0);
    }
    let connection = open(&path)?;
    connection
        .execute(
            "DELETE FROM mcp_oauth_tokens WHERE server = ?1",
            params![server],
        )
        .map_err(|err| store_error(&path, err))
}

/// The store file, with the tokens table in place.
fn open(path: &Path) -> Result<Connection, FlueError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|err| FlueError::store(format!("cannot create {}", parent.display()), err))?;
    }
    let connection = Connection::open(path).map_err(|err| store_error(path, err))?;
    connection
        .busy_timeout(Duration::from_secs(5))
        .and_then(|()| connection.execute(SCHEMA, []))
        .map_err(|err| store_error(path, err))?;
    Ok(connection)
}

fn store_error(path: &Path, err: rusqlite::Error) -> FlueError {
    FlueError::store(
        format!(
            "cannot use the MCP token table in {}: {err}",
            path.display()
        ),
        err,
    )
}
