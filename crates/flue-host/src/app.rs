//! The serving assembly: from an agent set and a few settings, the store, the [`Host`], the
//! submission runtime ([`AgentRuntime`]) with its recovery, and, when serving, the HTTP router
//! and the MCP server, built in one place; and the drain and close that take them down. `flue run`, `flue chat`,
//! `flue serve` and `flue dev` all start an [`App`]; so can embedders.
//!
//! Starting the runtime is the recovery: work a killed process left unsettled in the store is
//! resumed (by this process, or, for a command that runs its own work only, when it is the
//! conversation it waits on).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use flue_core::{AgentRegistry, AgentRuntime, store::DynSessionStore};
use flue_server::{DurableRuntime, ServerConfig};

use crate::schedule::Scheduler;
use crate::{AgentSet, HarnessOptions, Host, HostError, ServeStore, StoreChoice};

/// Ownership lease on a shared (Postgres) store.
const SHARED_LEASE: Duration = Duration::from_secs(5);
/// The shortest lease accepted (renewals run every third of it).
const MIN_LEASE: Duration = Duration::from_millis(500);
/// Fallback poll of a shared store (notifications wake waiters at once).
const SHARED_POLL_INTERVAL: Duration = Duration::from_millis(250);
/// How often a node on a shared store looks for conversations whose owner died.
const SHARED_RECONCILE_INTERVAL: Duration = Duration::from_millis(250);
/// How often a command's runtime (`flue run`, `flue chat`) looks at other processes' writes.
const COMMAND_POLL_INTERVAL: Duration = Duration::from_millis(25);
/// How often it looks for conversations whose owner died (the one it waits on, in practice).
const COMMAND_RECONCILE_INTERVAL: Duration = Duration::from_millis(200);

/// How the runtime of an app works through conversations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum RuntimeMode {
    /// A command (`flue run`, `flue chat`): it works only on conversations it admitted to,
    /// polls often for other processes' writes, and serves no HTTP.
    #[default]
    Command,
    /// A server (`flue serve`, `flue dev`): it works on every conversation of the store
    /// (recovering what a killed server left), builds the HTTP router and fires the
    /// workspace's schedules (docs/schedules.md).
    Server,
}

/// Which agents are checked before anything is admitted (configuration, models and keys,
/// sandbox, MCP servers).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Preflight {
    /// None.
    #[default]
    None,
    /// One agent, the one a command talks to: a failure fails [`AppBuilder::start`].
    Agent(String),
    /// Every agent: a failure is reported in [`App::checks`] and the agent stays listed.
    All,
}

/// What the preflight found for one agent.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AgentCheck {
    /// The agent.
    pub agent: String,
    /// Warnings for the user (an agent that can run).
    pub warnings: Vec<String>,
    /// Why the agent cannot run, when it cannot.
    pub error: Option<String>,
}

/// The settings of an [`App`]; builder lite, started with [`AppBuilder::start`].
#[must_use]
pub struct AppBuilder {
    agents: AgentSet,
    store: StoreChoice,
    opened: Option<ServeStore>,
    harness_options: Option<HarnessOptions>,
    mode: RuntimeMode,
    preflight: Preflight,
    lease: Option<Duration>,
    settlement_log: bool,
}

impl std::fmt::Debug for AppBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppBuilder")
            .field("store", &self.store)
            .field("mode", &self.mode)
            .field("preflight", &self.preflight)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl AppBuilder {
    /// Which store to open (default: the workspace's `.flue/flue.db`).
    pub fn with_store(mut self, store: StoreChoice) -> Self {
        self.store = store;
        self
    }

    /// A store opened already ([`StoreChoice::open`]), used instead of opening one: for a
    /// caller that reads it before starting (`flue run --continue`).
    pub fn with_opened_store(mut self, opened: ServeStore) -> Self {
        self.opened = Some(opened);
        self
    }

    /// Overrides (`--model`, `--sandbox`, who answers MCP servers' questions) for every
    /// harness the runtime builds; see [`Host::with_harness_options`].
    pub fn with_harness_options(mut self, options: HarnessOptions) -> Self {
        self.harness_options = Some(options);
        self
    }

    /// How the runtime works (default: [`RuntimeMode::Command`]).
    pub fn with_mode(mut self, mode: RuntimeMode) -> Self {
        self.mode = mode;
        self
    }

    /// Which agents to check before starting (default: none).
    pub fn with_preflight(mut self, preflight: Preflight) -> Self {
        self.preflight = preflight;
        self
    }

    /// The ownership lease (`flue serve --lease-ms`); else flue.toml's `[store] lease_ms`, else
    /// 5 s on a shared store and the runtime's default otherwise. At least 500 ms.
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Logs one line per settlement this process makes (target `flue_server::settlement`,
    /// level info), as `flue serve` does.
    pub fn with_settlement_log(mut self) -> Self {
        self.settlement_log = true;
        self
    }

    /// Opens the store, builds the host, runs the preflight and starts the runtime (resuming
    /// the work left unsettled). A failure closes what was opened.
    pub async fn start(self) -> Result<App, HostError> {
        let approval_key = crate::approval_key::approval_key(self.agents.env())?;
        let opened = match self.opened {
            Some(opened) => opened,
            None => self.store.open(&self.agents).await?,
        };
        let mut host = Host::with_store(
            self.agents,
            Arc::clone(&opened.store) as Arc<dyn DynSessionStore>,
        );
        if let Some(options) = self.harness_options {
            host = host.with_harness_options(options);
        }
        let host = Arc::new(host);
        let mut checks = Vec::new();
        match &self.preflight {
            Preflight::None => {}
            Preflight::Agent(agent) => match host.preflight(agent).await {
                Ok(warnings) => checks.push(AgentCheck {
                    agent: agent.clone(),
                    warnings,
                    error: None,
                }),
                Err(err) => {
                    host.close().await;
                    return Err(err);
                }
            },
            Preflight::All => {
                for info in host.agents().agents() {
                    let check = match host.preflight(&info.name).await {
                        Ok(warnings) => AgentCheck {
                            agent: info.name,
                            warnings,
                            error: None,
                        },
                        Err(err) => AgentCheck {
                            agent: info.name,
                            warnings: Vec::new(),
                            error: Some(err.to_string()),
                        },
                    };
                    checks.push(check);
                }
            }
        }
        let mut builder = AgentRuntime::builder(
            Arc::clone(&opened.store),
            Arc::clone(&host) as Arc<dyn AgentRegistry>,
        );
        if let Some(key) = approval_key {
            builder = builder.with_approval_key(key);
        }
        builder = builder
            .with_background_limits(background_limits(&host.agents().workspace().config.tasks));
        match self.mode {
            RuntimeMode::Command => {
                builder = builder
                    .with_poll_interval(COMMAND_POLL_INTERVAL)
                    .with_reconcile_interval(Some(COMMAND_RECONCILE_INTERVAL))
                    .with_own_work_only();
            }
            RuntimeMode::Server => {
                let lease = self
                    .lease
                    .or(opened.lease)
                    .or(opened.shared.then_some(SHARED_LEASE));
                if let Some(lease) = lease {
                    builder = builder.with_lease(lease.max(MIN_LEASE));
                }
                if opened.shared {
                    // Other nodes' writes arrive as notifications; polls are only the
                    // fallback. Orphaned work (a dead node's) is looked for often, so takeover
                    // follows death closely.
                    builder = builder
                        .with_poll_interval(SHARED_POLL_INTERVAL)
                        .with_reconcile_interval(Some(SHARED_RECONCILE_INTERVAL));
                }
            }
        }
        let runtime = match builder.start().await {
            Ok(runtime) => runtime,
            Err(err) => {
                host.close().await;
                return Err(err.into());
            }
        };
        if self.settlement_log {
            tokio::spawn(log_settlements(runtime.subscribe(), Arc::downgrade(&host)));
        }
        let server = (self.mode == RuntimeMode::Server)
            .then(|| DurableRuntime::new(runtime.clone(), host.agents().agents()));
        let scheduler = server
            .as_ref()
            .map(|server| Scheduler::start(server.clone(), Arc::clone(&host)));
        Ok(App {
            host,
            runtime,
            server,
            scheduler: Mutex::new(scheduler),
            store: opened,
            checks,
            drained: AtomicBool::new(false),
        })
    }
}

/// A started app: the store, the host serving the agent set, the running submission runtime
/// and, in [`RuntimeMode::Server`], the runtime the HTTP router serves.
///
/// ```no_run
/// # async fn example() -> Result<(), flue_host::HostError> {
/// use std::path::Path;
/// use flue_host::{AgentSet, App, Env, RuntimeMode, StoreChoice};
///
/// let root = Path::new("my-agents");
/// let agents = AgentSet::from_workspace(root, Env::for_root(std::env::vars(), root, None)?)?;
/// let app = App::builder(agents)
///     .with_store(StoreChoice::Configured(None))
///     .with_mode(RuntimeMode::Server)
///     .start()
///     .await?;
/// let router = app.router(flue_server::ServerConfig::default());
/// # let _ = router;
/// // ... serve `router`; on shutdown:
/// app.drain(std::time::Duration::from_secs(10)).await;
/// for warning in app.close().await {
///     eprintln!("warning: {warning}");
/// }
/// # Ok(())
/// # }
/// ```
pub struct App {
    host: Arc<Host>,
    runtime: AgentRuntime,
    server: Option<DurableRuntime>,
    /// The firing loop of the schedules, in [`RuntimeMode::Server`] until drained.
    scheduler: Mutex<Option<Scheduler>>,
    store: ServeStore,
    checks: Vec<AgentCheck>,
    /// Set once [`App::drain`] stopped the runtime.
    drained: AtomicBool,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("store", &self.store)
            .field("serving", &self.server.is_some())
            .finish_non_exhaustive()
    }
}

impl App {
    /// The settings of an app serving `agents`.
    pub fn builder(agents: AgentSet) -> AppBuilder {
        AppBuilder {
            agents,
            store: StoreChoice::default(),
            opened: None,
            harness_options: None,
            mode: RuntimeMode::default(),
            preflight: Preflight::default(),
            lease: None,
            settlement_log: false,
        }
    }

    /// The host: the store and the agent set served now.
    pub fn host(&self) -> &Arc<Host> {
        &self.host
    }

    /// The submission runtime.
    pub fn runtime(&self) -> &AgentRuntime {
        &self.runtime
    }

    /// The store and what is known about it (shared, lease, a description for logs).
    pub fn store(&self) -> &ServeStore {
        &self.store
    }

    /// What the preflight found, one entry per agent checked.
    pub fn checks(&self) -> &[AgentCheck] {
        &self.checks
    }

    /// The runtime the router serves, in [`RuntimeMode::Server`].
    pub fn server(&self) -> Option<&DurableRuntime> {
        self.server.as_ref()
    }

    /// The protocol's router over this app's runtime (`None` unless [`RuntimeMode::Server`]).
    /// Rewinds restore files in the agents' root unless `config` names another workspace.
    pub fn router(&self, mut config: ServerConfig) -> Option<axum::Router> {
        let server = self.server.as_ref()?;
        if config.workspace_root.is_none() {
            config.workspace_root = Some(self.host.agents().root().to_path_buf());
        }
        Some(flue_server::router(server.clone(), config))
    }

    /// The agents of this app's runtime as an MCP server (`None` unless
    /// [`RuntimeMode::Server`]): `flue mcp serve` over stdio or streamable HTTP.
    pub fn mcp(&self) -> Option<flue_server::McpAgents> {
        let server = self.server.as_ref()?;
        Some(flue_server::McpAgents::new(server.clone()))
    }

    /// Serves `agents` from now on, in the host and in the router's agent list; returns the
    /// set it replaces (its owner closes it once nothing uses it). Harnesses opened before
    /// keep the configuration they were opened with.
    pub fn replace_agents(&self, agents: AgentSet) -> Arc<AgentSet> {
        let infos = agents.agents();
        let old = self.host.replace_agents(agents);
        if let Some(server) = &self.server {
            server.set_agents(infos);
        }
        if let Some(scheduler) = self
            .scheduler
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            scheduler.reloaded();
        }
        old
    }

    /// Stops firing schedules (an admission in flight finishes first).
    async fn stop_schedules(&self) {
        let scheduler = self
            .scheduler
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(scheduler) = scheduler {
            scheduler.stop().await;
        }
    }

    /// Stops firing schedules and admitting (a server answers 503 from then on), waits up to
    /// `grace` for the submissions this process admitted to settle, then stops the runtime:
    /// unfinished
    /// attempts stop at a boundary and are left to recovery. Returns how many were still
    /// unsettled (always 0 for a command, whose caller waited already; its runtime stops in
    /// [`App::close`]).
    pub async fn drain(&self, grace: Duration) -> usize {
        self.stop_schedules().await;
        match &self.server {
            Some(server) => {
                self.drained.store(true, Ordering::SeqCst);
                server.shutdown(grace).await
            }
            None => 0,
        }
    }

    /// Stops the runtime (when [`App::drain`] did not) and closes what the host holds open
    /// (sandboxes, MCP servers); returns failures as warnings.
    pub async fn close(self) -> Vec<String> {
        let mut warnings = Vec::new();
        self.stop_schedules().await;
        if !self.drained.load(Ordering::SeqCst)
            && let Err(err) = self.runtime.shutdown().await
        {
            warnings.push(format!("stopping the runtime: {err}"));
        }
        warnings.extend(self.host.close().await);
        warnings
    }
}

/// One log line per settlement this process made; a failure's line carries the hint `flue run`
/// prints for it (where an unreachable provider's URL is set), when there is one.
async fn log_settlements(
    mut events: tokio::sync::broadcast::Receiver<flue_core::submission::RuntimeEvent>,
    host: std::sync::Weak<Host>,
) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        match events.recv().await {
            Ok(event) => {
                if let flue_core::Event::SubmissionSettled {
                    submission_id,
                    outcome,
                    error,
                } = &event.event
                {
                    let hint = error.as_ref().and_then(|error| {
                        let host = host.upgrade()?;
                        crate::hints::connection_hint(&host.agents(), &error.message)
                    });
                    tracing::info!(
                        target: "flue_server::settlement",
                        conversation = %event.conversation.instance_id(),
                        submission = %submission_id,
                        outcome = ?outcome,
                        error = error.as_ref().map(|error| error.kind.as_str()),
                        hint,
                        "settled"
                    );
                }
            }
            Err(RecvError::Lagged(missed)) => {
                tracing::warn!(target: "flue::serve", missed, "settlement log fell behind");
            }
            Err(RecvError::Closed) => return,
        }
    }
}

/// flue.toml's `[tasks]` limits over the runtime's defaults.
fn background_limits(
    settings: &flue_build::TaskSettings,
) -> flue_core::submission::BackgroundLimits {
    let defaults = flue_core::submission::BackgroundLimits::default();
    flue_core::submission::BackgroundLimits::new(
        settings
            .max_background_per_conversation
            .unwrap_or(defaults.per_conversation),
        settings
            .max_background_per_server
            .unwrap_or(defaults.per_server),
    )
}
