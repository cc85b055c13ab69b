//! `flue serve`: every agent of a workspace or bundle over HTTP: flue-host assembles the
//! agents, flue-core's submission runtime makes the work durable, flue-server speaks the
//! protocol. Bind and token checks, tracing logs, recovery at start, graceful shutdown.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use flue_core::{AgentRegistry, AgentRuntime, DynSessionStore};
use flue_host::{AgentSet, Env, Host, open_serve_store};
use flue_server::{AgentInfo, DurableRuntime, ServerConfig};
use tokio_util::sync::CancellationToken;

use crate::Exit;
use crate::args::ServeArgs;
use crate::workspace::{current_dir, resolve_root};

/// Ownership lease on a shared (Postgres) store.
const SHARED_LEASE: Duration = Duration::from_secs(5);
/// The shortest lease accepted (renewals run every third of it).
const MIN_LEASE: Duration = Duration::from_millis(500);
/// Fallback poll of a shared store (notifications wake waiters at once).
const SHARED_POLL_INTERVAL: Duration = Duration::from_millis(250);
/// How often a node on a shared store looks for conversations whose owner died.
const SHARED_RECONCILE_INTERVAL: Duration = Duration::from_millis(250);

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
    raise_fd_limit(args.max_connections as u64 + 1_024);
    let agents = load(&args)?;
    let infos: Vec<AgentInfo> = agents
        .agents()
        .into_iter()
        .map(|agent| AgentInfo {
            name: agent.name,
            description: agent.description,
            model: agent.model,
        })
        .collect();
    let opened = open_serve_store(&agents, args.store.as_deref())
        .await
        .context("cannot open the conversation store")?;
    tracing::info!(store = %opened.description, shared = opened.shared, "conversation store");
    let store = opened.store;
    let host = Arc::new(Host::with_store(
        agents,
        Arc::clone(&store) as Arc<dyn DynSessionStore>,
    ));
    for agent in &infos {
        match host.preflight(&agent.name).await {
            Ok(warnings) => {
                for warning in warnings {
                    tracing::warn!(agent = %agent.name, "{warning}");
                }
            }
            Err(err) => tracing::warn!(agent = %agent.name, error = %err, "agent cannot run"),
        }
    }
    // Starting the runtime resumes the work a killed server left unsettled.
    let mut builder = AgentRuntime::builder(store, Arc::clone(&host) as Arc<dyn AgentRegistry>);
    let lease = args
        .lease_ms
        .map(Duration::from_millis)
        .or(opened.lease)
        .or(opened.shared.then_some(SHARED_LEASE));
    if let Some(lease) = lease {
        builder = builder.with_lease(lease.max(MIN_LEASE));
    }
    if opened.shared {
        // Other nodes' writes arrive as notifications; polls are only the fallback. Orphaned
        // work (a dead node's) is looked for often, so takeover follows death closely.
        builder = builder
            .with_poll_interval(SHARED_POLL_INTERVAL)
            .with_reconcile_interval(Some(SHARED_RECONCILE_INTERVAL));
    }
    let core = builder
        .start()
        .await
        .context("cannot start the submission runtime")?;
    tokio::spawn(log_settlements(core.subscribe()));
    let runtime = DurableRuntime::new(core, infos);
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
    tracing::info!(%addr, agents = runtime.agents_len(), "listening");

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
    for warning in host.close().await {
        tracing::warn!("{warning}");
    }
    tracing::info!("stopped");
    Ok(Exit::Success)
}

/// Resolves on SIGTERM or Ctrl-C.
pub(crate) async fn shutdown_signal() {
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

/// The agents of the workspace or bundle.
fn load(args: &ServeArgs) -> anyhow::Result<AgentSet> {
    let vars = || {
        // Variables that are not UTF-8 cannot be keys or URLs: left out rather than a panic.
        std::env::vars_os()
            .filter_map(|(key, value)| Some((key.into_string().ok()?, value.into_string().ok()?)))
    };
    let env = |root: &Path| Env::for_root(vars(), root, args.env_file.as_deref());
    Ok(match &args.bundle {
        Some(bundle) => {
            let root = match &args.root {
                Some(root) => resolve_root(Some(root))?,
                None => current_dir()?,
            };
            AgentSet::from_bundle(bundle, &root, env(&root)?)?
        }
        None => {
            let root = resolve_root(args.root.as_deref())?;
            AgentSet::from_workspace(&root, env(&root)?)?
        }
    })
}

/// One log line per settlement this process made.
async fn log_settlements(mut events: tokio::sync::broadcast::Receiver<flue_core::RuntimeEvent>) {
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
                    tracing::info!(
                        target: "flue_server::settlement",
                        conversation = %event.conversation.instance_id(),
                        submission = %submission_id,
                        outcome = ?outcome,
                        error = error.as_ref().map(|error| error.kind.as_str()),
                        "settled"
                    );
                }
            }
            Err(RecvError::Lagged(missed)) => {
                tracing::warn!(missed, "settlement log fell behind");
            }
            Err(RecvError::Closed) => return,
        }
    }
}

/// Raises the open-file limit toward `wanted` (each connection is a descriptor); the hard
/// limit caps it, and a failure only leaves the limit as it was.
fn raise_fd_limit(wanted: u64) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let target = wanted.min(hard);
        if target > soft && setrlimit(Resource::RLIMIT_NOFILE, target, hard).is_err() {
            tracing::warn!(soft, target, "cannot raise the open-file limit");
        }
        if target < wanted {
            tracing::warn!(
                limit = target,
                "the open-file limit caps concurrent connections"
            );
        }
    }
}
