//! Which conversation store an app uses, and the one place stores are built: `.flue/flue.db`
//! (SQLite) by default, `flue dev`'s own file, memory, or a Postgres database shared by many
//! servers, chosen by `--store postgres://...` or flue.toml's `[store] url`. `${VAR}` in the URL is expanded from the environment (and the value marked a
//! secret), so the password never sits in a file or a process listing; messages name the
//! variable, never the URL.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use flue_build::{StoreSettings, Workspace};
use flue_core::{FlueError, MemoryStore, store::DynConversationStore};
use flue_store::{PostgresOptions, PostgresStore, SqliteStore};

use crate::{AgentSet, Env, HostError, TrustManifest, TrustPolicy, store_path};

/// Where an app keeps its conversations.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub enum StoreChoice {
    /// The workspace's own SQLite file, `.flue/flue.db` under the root (created on first use).
    #[default]
    Workspace,
    /// `flue serve`'s choice: this `postgres://` URL when given (`--store`), else flue.toml's
    /// `[store] url`, else the workspace's SQLite file. `${VAR}` in a URL comes from the
    /// agent set's environment.
    Configured(Option<String>),
    /// A SQLite file at this path, relative to the root unless absolute (`flue dev`'s
    /// `.flue/dev.db`); its folder is created.
    File(PathBuf),
    /// A store in memory, gone with the process.
    Memory,
}

impl StoreChoice {
    /// Opens the store for `agents`' workspace.
    pub async fn open(&self, agents: &AgentSet) -> Result<ServeStore, HostError> {
        match self {
            Self::Workspace => workspace_file(agents.root()),
            Self::Configured(url) => open_serve_store(agents, url.as_deref()).await,
            Self::File(path) => open_file(&agents.root().join(path)),
            Self::Memory => Ok(ServeStore {
                store: Arc::new(MemoryStore::new()),
                shared: false,
                lease: None,
                description: "memory".to_owned(),
            }),
        }
    }
}

/// Opens the workspace's conversation store, creating it on first use.
pub fn open_store(root: &Path) -> Result<SqliteStore, HostError> {
    Ok(SqliteStore::open(&store_path(root))?)
}

/// Opens the SQLite store at `path` (`flue dev`'s, say), creating it on first use.
pub fn open_store_at(path: &Path) -> Result<SqliteStore, HostError> {
    Ok(SqliteStore::open(path)?)
}

/// The store `flue serve` opened, with what the runtime needs to know about it.
pub struct ServeStore {
    /// The store.
    pub store: Arc<dyn DynConversationStore>,
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
    let config = &agents.workspace().config;
    if url.is_none() {
        // flue.toml's database is the workspace's choice, and its URL may carry a secret.
        agents
            .trust_policy()
            .require(agents.root(), &TrustManifest::of_store(config))?;
    }
    let settings = config.store.as_ref();
    match configured_url(url, settings) {
        Some((template, origin)) => open_postgres(&template, origin, settings, agents.env()).await,
        None => {
            let root = agents.root();
            Ok(ServeStore {
                store: Arc::new(open_store(root)?),
                shared: false,
                lease: None,
                description: store_path(root).display().to_string(),
            })
        }
    }
}

/// The store the inspection commands (`flue session list|show`, `flue audit`, `flue trash`)
/// read, chosen as `flue serve` chooses it: `url` (their `--store`), else flue.toml's
/// `[store] url` (flue.toml alone is read, so a broken agent file does not hide the
/// conversations), else `.flue/flue.db`. `None` when that is the SQLite file and it does
/// not exist yet (nothing ran in the workspace). flue.toml's URL is used only when `trust`
/// covers it.
pub async fn open_inspect_store(
    root: &Path,
    url: Option<&str>,
    env: &Env,
    trust: &TrustPolicy,
) -> Result<Option<ServeStore>, HostError> {
    let config = match url {
        // `--store` wins: flue.toml is not needed (nor may it break the command).
        Some(_) => None,
        None => Some(Workspace::load_config(root).map_err(HostError::Diagnostics)?),
    };
    if let Some(config) = &config {
        trust.require(root, &TrustManifest::of_store(config))?;
    }
    let settings = config.as_ref().and_then(|config| config.store.as_ref());
    match configured_url(url, settings) {
        Some((template, origin)) => open_postgres(&template, origin, settings, env)
            .await
            .map(Some),
        None => {
            let path = store_path(root);
            if !path.is_file() {
                return Ok(None);
            }
            Ok(Some(ServeStore {
                store: Arc::new(open_store(root)?),
                shared: false,
                lease: None,
                description: path.display().to_string(),
            }))
        }
    }
}

/// The URL template to use and where it came from, when the store is not the SQLite file.
fn configured_url(
    url: Option<&str>,
    settings: Option<&StoreSettings>,
) -> Option<(String, &'static str)> {
    match (url, settings) {
        (Some(url), _) => Some((url.to_owned(), "--store")),
        (None, Some(settings)) => Some((settings.url.clone(), "flue.toml [store] url")),
        (None, None) => None,
    }
}

async fn open_postgres(
    template: &str,
    origin: &str,
    settings: Option<&StoreSettings>,
    env: &Env,
) -> Result<ServeStore, HostError> {
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
    let url = crate::mcp::expand(template, |name| env.secret(name)).map_err(|message| {
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

/// The workspace's own SQLite file.
fn workspace_file(root: &Path) -> Result<ServeStore, HostError> {
    Ok(ServeStore {
        store: Arc::new(open_store(root)?),
        shared: false,
        lease: None,
        description: store_path(root).display().to_string(),
    })
}

/// A SQLite file at `path`, its folder created.
fn open_file(path: &Path) -> Result<ServeStore, HostError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|err| {
            HostError::Core(flue_core::FlueError::store(
                format!("cannot create {}", parent.display()),
                err,
            ))
        })?;
    }
    let store = SqliteStore::open(path)?;
    Ok(ServeStore {
        store: Arc::new(store),
        shared: false,
        lease: None,
        description: path.display().to_string(),
    })
}
