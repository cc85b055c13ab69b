//! Which conversation store `flue serve` uses: `.flue/flue.db` (SQLite) by default, or a
//! Postgres database shared by many servers, chosen by `--store postgres://...` or flue.toml's
//! `[store] url`. `${VAR}` in the URL is expanded from the environment (and the value marked a
//! secret), so the password never sits in a file or a process listing; messages name the
//! variable, never the URL.

use std::sync::Arc;
use std::time::Duration;

use flue_connectors::{PostgresOptions, PostgresStore};
use flue_core::{ConversationStore, FlueError};

use crate::{AgentSet, HostError, open_store, store_path};

/// The store `flue serve` opened, with what the runtime needs to know about it.
pub struct ServeStore {
    /// The store.
    pub store: Arc<dyn ConversationStore>,
    /// True when other processes may share it actively (a Postgres database): the runtime
    /// then scans for orphaned work more often and relies on its notifications.
    pub shared: bool,
    /// The ownership lease from flue.toml (`[store] lease_ms`), if set.
    pub lease: Option<Duration>,
    /// What it is, for logs: a file path or `user@host:port/database` (never a password).
    pub description: String,
}

impl std::fmt::Debug for ServeStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeStore")
            .field("shared", &self.shared)
            .field("lease", &self.lease)
            .field("description", &self.description)
            .finish_non_exhaustive()
    }
}

/// Opens the store of `agents`' workspace: `url` (from `--store`) when given, else flue.toml's
/// `[store] url`, else the workspace's SQLite file.
pub async fn open_serve_store(
    agents: &AgentSet,
    url: Option<&str>,
) -> Result<ServeStore, HostError> {
    let settings = agents.workspace().config.store.as_ref();
    let (template, origin) = match (url, settings) {
        (Some(url), _) => (url.to_owned(), "--store"),
        (None, Some(settings)) => (settings.url.clone(), "flue.toml [store] url"),
        (None, None) => {
            let root = agents.root();
            return Ok(ServeStore {
                store: Arc::new(open_store(root)?),
                shared: false,
                lease: None,
                description: store_path(root).display().to_string(),
            });
        }
    };
    let lease = settings
        .and_then(|settings| settings.lease_ms)
        .map(Duration::from_millis);
    if !(template.starts_with("postgres://") || template.starts_with("postgresql://")) {
        return Err(HostError::Core(FlueError::Store {
            message: format!(
                "{origin} must be a postgres:// URL (leave it out to use {})",
                crate::DB_PATH
            ),
            source: None,
        }));
    }
    let env = agents.env();
    let url = crate::mcp::expand(&template, |name| env.secret(name)).map_err(|message| {
        HostError::Core(FlueError::Store {
            message: format!("{origin}: {message}"),
            source: None,
        })
    })?;
    let store = PostgresStore::connect(&url, PostgresOptions::default()).await?;
    Ok(ServeStore {
        description: store.database().to_owned(),
        store: Arc::new(store),
        shared: true,
        lease,
    })
}
