//! The OAuth tokens of remote MCP servers, in the workspace's store file (`.flue/flue.db`) in a
//! table of their own, `mcp_oauth_tokens`, outside the conversation store's migrations: one
//! JSON document per server name and url, created on first use.
//!
//! The documents are secrets: this table is read and written only through [`McpTokenTable`],
//! and nothing here logs or returns them except to its caller.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use flue_core::FlueError;
use rusqlite::{Connection, OptionalExtension, params};

#[cfg(test)]
mod tests;

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS mcp_oauth_tokens (
    server TEXT NOT NULL,
    url TEXT NOT NULL,
    document TEXT NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (server, url)
)";

/// How long a statement waits for another process's lock on the file.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The MCP OAuth token table of one store file. Each call opens the file (creating it, its
/// folder and the table when missing) and closes it again: tokens are read a few times a
/// session, and no connection stays open for them.
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// let tokens = flue_store::McpTokenTable::new(&dir.path().join(".flue/flue.db"));
/// tokens.save("docs", "https://mcp.example/mcp", "{\"access_token\":\"t\"}").unwrap();
/// assert!(tokens.load("docs", "https://mcp.example/mcp").unwrap().is_some());
/// assert_eq!(tokens.forget("docs").unwrap(), 1);
/// ```
#[derive(Clone, Debug)]
pub struct McpTokenTable {
    path: PathBuf,
}

impl McpTokenTable {
    /// The table in the store file at `path`.
    pub fn new(path: &Path) -> Self {
        Self {
            path: path.to_owned(),
        }
    }

    /// The token document of server `server` at `url`, if one is stored.
    pub fn load(&self, server: &str, url: &str) -> Result<Option<String>, FlueError> {
        let connection = self.open()?;
        connection
            .query_row(
                "SELECT document FROM mcp_oauth_tokens WHERE server = ?1 AND url = ?2",
                params![server, url],
                |row| row.get(0),
            )
            .optional()
            .map_err(|err| self.error(err))
    }

    /// Stores `document` as the tokens of server `server` at `url`, replacing what was there.
    pub fn save(&self, server: &str, url: &str, document: &str) -> Result<(), FlueError> {
        let connection = self.open()?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_secs());
        let now = i64::try_from(now).unwrap_or(i64::MAX);
        connection
            .execute(
                "INSERT INTO mcp_oauth_tokens (server, url, document, updated_at)
                 VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (server, url) DO UPDATE SET document = ?3, updated_at = ?4",
                params![server, url, document, now],
            )
            .map(|_| ())
            .map_err(|err| self.error(err))
    }

    /// Removes the tokens of server `server` at `url`.
    pub fn clear(&self, server: &str, url: &str) -> Result<(), FlueError> {
        let connection = self.open()?;
        connection
            .execute(
                "DELETE FROM mcp_oauth_tokens WHERE server = ?1 AND url = ?2",
                params![server, url],
            )
            .map(|_| ())
            .map_err(|err| self.error(err))
    }

    /// Removes every token of server `server`, at any url; how many there were. A store file
    /// that does not exist holds none and is not created.
    pub fn forget(&self, server: &str) -> Result<usize, FlueError> {
        if !self.path.exists() {
            return Ok(0);
        }
        let connection = self.open()?;
        connection
            .execute(
                "DELETE FROM mcp_oauth_tokens WHERE server = ?1",
                params![server],
            )
            .map_err(|err| self.error(err))
    }

    /// The store file, with the table in place.
    fn open(&self) -> Result<Connection, FlueError> {
        if let Some(parent) = self.path.parent() {
            std::fs::create_dir_all(parent).map_err(|err| {
                FlueError::store(format!("cannot create {}", parent.display()), err)
            })?;
        }
        let connection = Connection::open(&self.path).map_err(|err| self.error(err))?;
        connection
            .busy_timeout(BUSY_TIMEOUT)
            .and_then(|()| connection.execute(SCHEMA, []))
            .map_err(|err| self.error(err))?;
        Ok(connection)
    }

    fn error(&self, err: rusqlite::Error) -> FlueError {
        FlueError::store(
            format!(
                "cannot use the MCP token table in {}: {err}",
                self.path.display()
            ),
            err,
        )
    }
}
