//! `flue serve`: every agent of a workspace or bundle over HTTP (flue-server's router on the
//! in-process runtime), with bind and token checks, tracing logs and graceful shutdown.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use flue_build::{Bundle, SandboxSettings, Workspace};
use flue_core::{
    BoxFuture, DEFAULT_SESSION, FlueError, Harness, ProviderRegistry, Session, SqliteStore,
};
use flue_server::{AgentHost, AgentInfo, LocalRuntime, ServerConfig};
use tokio_util::sync::CancellationToken;

use crate::Exit;
use crate::args::ServeArgs;
use crate::dotenv::EnvVars;
use crate::mcp::McpServers;
use crate::providers::Providers;
use crate::run::{bundle_scripts, current_dir};
use crate::sandbox::{self, OpenSandbox};
use crate::workspace::{open_store, resolve_root};

/// Runs `flue serve` until SIGTERM or Ctrl-C.
pub(crate) async fn serve(args: ServeArgs) -> anyhow::Result<Exit> {
    let token = args
        .token
        .clone()
        .or_else(|| std::env::var("FLUE_TOKEN").ok())
        .filter(|token| !token.is_empty());
    let ip: IpAddr = args
        .host
        .parse()
        .with_context(|| format!("--host {:?} is not an IP address", args.host))?;
    if !ip.is_loopback() && token.is_none() {
        bail!(
            "refusing to bind {ip}: a non-loopback address needs a token (--token or FLUE_TOKEN); \
             every request must then carry `Authorization: Bearer <token>`"
        );
    }
    let host = Arc::new(CliHost::load(&args)?);
    for warning in &host.warnings {
        tracing::warn!("{warning}");
    }
    let runtime = LocalRuntime::new(Arc::clone(&host) as Arc<dyn AgentHost>);
    let config = ServerConfig {
        token,
        cors_origins: args.cors_origins.clone(),
        ..ServerConfig::default()
    };
    let app = flue_server::router(Arc::new(runtime.clone()), config);
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(ip, args.port))
        .await
        .with_context(|| format!("cannot bind {ip}:{}", args.port))?;
    let addr = listener.local_addr()?;
    eprintln!("flue serve: listening on http://{addr}");
    tracing::info!(%addr, agents = host.agents().len(), "listening");

    let stop = CancellationToken::new();
    let server = tokio::spawn(flue_server::serve(
        listener,
        app,
        args.max_connections,
        stop.clone().cancelled_owned(),
    ));
    shutdown_signal().await;
    tracing::info!("shutting down: admitting nothing more, letting running turns finish");
    stop.cancel();
    let busy = runtime.shutdown(Duration::from_secs(args.grace)).await;
    if busy > 0 {
        tracing::warn!(
            busy,
            "grace period over; unfinished work is left to recovery at the next start"
        );
    }
    // Open SSE streams never end by themselves; give plain requests a moment, then stop.
    let _ = tokio::time::timeout(Duration::from_millis(500), server).await;
    host.close().await;
    tracing::info!("stopped");
    Ok(Exit::Success)
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Opens the workspace's agents for the runtime.
struct CliHost {
    root: PathBuf,
    workspace: Workspace,
    env: EnvVars,
    providers: ProviderRegistry,
    store: Arc<SqliteStore>,
    warnings: Vec<String>,
    /// What each open conversation holds open, closed at shutdown.
    open: Mutex<Vec<(McpServers, OpenSandbox)>>,
}

impl CliHost {
    fn load(args: &ServeArgs) -> anyhow::Result<Self> {
        let (root, workspace, scripts) = match &args.bundle {
            Some(bundle) => {
                let root = match &args.root {
                    Some(root) => resolve_root(Some(root))?,
                    None => current_dir()?,
                };
                let bundle =
                    Bundle::read(bundle).map_err(|diagnostics| anyhow::anyhow!("{diagnostics}"))?;
                (root, bundle.workspace().clone(), bundle.scripts().clone())
            }
            None => {
                let root = resolve_root(args.root.as_deref())?;
                let workspace = Workspace::load(&root)
                    .map_err(|diagnostics| anyhow::anyhow!("{diagnostics}"))?;
                (root, workspace, BTreeMap::new())
            }
        };
        let env = match &args.env_file {
            Some(path) => EnvVars::load(path, true)?,
            None => EnvVars::load(&root.join(".env"), false)?,
        };
        let mut providers = Providers::load(&root, &env, &workspace.config);
        bundle_scripts(&mut providers, &root, &scripts)?;
        let mut warnings = Vec::new();
        for name in workspace.agents.keys() {
            let config = workspace.agent_config(name)?;
            if let Err(err) = providers.check(config.model.as_deref()) {
                warnings.push(format!("agent {name}: {err}"));
            }
        }
        let store = Arc::new(open_store(&root)?);
        Ok(Self {
            root,
            workspace,
            env,
            providers: providers.registry,
            store,
            warnings,
            open: Mutex::new(Vec::new()),
        })
    }

    async fn close(&self) {
        let open: Vec<_> = match self.open.lock() {
            Ok(mut open) => open.drain(..).collect(),
            Err(poisoned) => poisoned.into_inner().drain(..).collect(),
        };
        for (mcp, sandbox) in open {
            mcp.close().await;
            sandbox.close().await;
        }
    }
}

impl AgentHost for CliHost {
    fn agents(&self) -> Vec<AgentInfo> {
        self.workspace
            .agents
            .values()
            .map(|agent| AgentInfo {
                name: agent.name.clone(),
                description: agent.description.clone(),
                model: agent
                    .model
                    .clone()
                    .or_else(|| self.workspace.config.defaults.model.clone()),
            })
            .collect()
    }

    fn open<'a>(
        &'a self,
        agent: &'a str,
        instance_id: &'a str,
    ) -> BoxFuture<'a, Result<Session, FlueError>> {
        Box::pin(async move {
            let Some(agent_file) = self.workspace.agents.get(agent) else {
                return Err(FlueError::config(format!("unknown agent {agent:?}")));
            };
            let settings = SandboxSettings::resolve(
                self.workspace.config.sandbox.as_ref(),
                agent_file.sandbox,
                &agent_file.sandbox_options,
            );
            let mut config = self.workspace.agent_config(agent)?;
            let sandbox = sandbox::open(&settings, &self.root, &self.env).await?;
            let mcp =
                match McpServers::connect(&self.workspace, agent, &self.env, &mut config).await {
                    Ok(mcp) => mcp,
                    Err(err) => {
                        sandbox.close().await;
                        return Err(err);
                    }
                };
            let opened = async {
                let harness = Harness::builder(config)
                    .with_instance_id(instance_id)
                    .with_store(Arc::clone(&self.store) as _)
                    .with_providers(self.providers.clone())
                    .with_sandbox(Arc::clone(&sandbox.sandbox))
                    .with_workspace_context(self.workspace.context.clone())
                    .with_workspace_skills(self.workspace.harness_skills())
                    .with_roles(self.workspace.harness_roles())
                    .build()
                    .await?;
                harness.session(DEFAULT_SESSION).await
            }
            .await;
            match opened {
                Ok(session) => {
                    if let Ok(mut open) = self.open.lock() {
                        open.push((mcp, sandbox));
                    }
                    Ok(session)
                }
                Err(err) => {
                    mcp.close().await;
                    sandbox.close().await;
                    Err(err)
                }
            }
        })
    }
}
