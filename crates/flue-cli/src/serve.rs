//! `flue serve`: every agent of a workspace or bundle over HTTP. flue-host assembles the app
//! (store, agents, the durable runtime and its recovery, the protocol's router); this module
//! checks the bind and the token, binds, logs, and shuts down gracefully.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use flue_host::{AgentSet, App, Env, Preflight, RuntimeMode, StoreChoice};
use flue_server::{ConsoleAccess, RequestGuard, ServeOptions, ServerConfig};
use tokio_util::sync::CancellationToken;

use crate::Exit;
use crate::args::ServeArgs;
use crate::workspace::{canonical, current_dir, resolve_root};

/// Runs `flue serve` until SIGTERM or Ctrl-C.
pub(crate) async fn serve(args: ServeArgs) -> anyhow::Result<Exit> {
    let Exposure { ip, token, guard } =
        Exposure::checked(&args.host, args.token.clone(), &args.allowed_hosts)?;
    flue_server::check_origins(&args.cors_origins)?;
    let guard = guard.with_cors_origins(&args.cors_origins);
    let max_connections = connection_limit(args.max_connections);
    let agents = load(&args)?;
    let opened = StoreChoice::Configured(args.store.clone())
        .open(&agents)
        .await
        .context("cannot open the conversation store")?;
    tracing::info!(store = %opened.description, shared = opened.shared, "conversation store");
    // Every agent is checked first; starting the runtime resumes the work a killed server left
    // unsettled.
    let mut builder = App::builder(agents)
        .with_opened_store(opened)
        .with_mode(RuntimeMode::Server)
        .with_preflight(Preflight::All)
        .with_settlement_log();
    if let Some(lease_ms) = args.lease_ms {
        builder = builder.with_lease(Duration::from_millis(lease_ms));
    }
    let app = builder
        .start()
        .await
        .context("cannot start the submission runtime")?;
    // An agent that cannot run would be listed and then fail every message sent to it.
    if let Some(refusal) = broken_agents(&app) {
        for warning in app.close().await {
            tracing::warn!("{warning}");
        }
        return Err(refusal);
    }
    let access = match &token {
        Some(token) => ConsoleAccess::Token(token.clone()),
        None => ConsoleAccess::ReadOnly,
    };
    let config = ServerConfig {
        token,
        cors_origins: args.cors_origins.clone(),
        inflight_body_limit: args.inflight_body_mib.saturating_mul(1024 * 1024).max(1024),
        ..ServerConfig::default()
    };
    let Some(mut router) = app.router(config) else {
        bail!("the server was assembled without its router");
    };
    if args.console {
        let Some(console) = flue_host::serve_console(&app, access.clone()) else {
            bail!("the server was assembled without its console");
        };
        router = flue_server::console_app(router, console);
    }
    let listener = flue_server::bind(SocketAddr::new(ip, args.port), max_connections)
        .map_err(|err| cannot_bind(ip, args.port, &err))?;
    let addr = listener.local_addr()?;
    eprintln!("flue serve: listening on http://{addr}");
    if args.console {
        let mode = match access {
            ConsoleAccess::Token(_) => "asks for the token",
            _ => "read-only: no token",
        };
        eprintln!("flue serve: console at http://{addr}/ ({mode})");
    }
    tracing::info!(%addr, agents = app.host().agents().agents().len(), "listening");

    let stop = CancellationToken::new();
    let options = ServeOptions {
        max_connections,
        header_timeout: Duration::from_millis(args.header_timeout_ms.max(1)),
        guard: Some(guard),
    };
    let server = tokio::spawn(flue_server::serve(
        listener,
        router,
        options,
        stop.clone().cancelled_owned(),
    ));
    shutdown_signal().await;
    tracing::info!("shutting down: admitting nothing more, letting running turns finish");
    stop.cancel();
    let busy = app.drain(Duration::from_secs(args.grace)).await;
    if busy > 0 {
        tracing::warn!(
            busy,
            "grace period over; unfinished work is left to recovery at the next start"
        );
    }
    // Open SSE streams never end by themselves; give plain requests a moment, then stop.
    let _ = tokio::time::timeout(Duration::from_millis(500), server).await;
    for warning in app.close().await {
        tracing::warn!("{warning}");
    }
    tracing::info!("stopped");
    Ok(Exit::Success)
}

/// Logs the preflight's warnings; the refusal to serve when an agent cannot run.
pub(crate) fn broken_agents(app: &App) -> Option<anyhow::Error> {
    let mut broken = Vec::new();
    for check in app.checks() {
        for warning in &check.warnings {
            tracing::warn!(agent = %check.agent, "{warning}");
        }
        if let Some(error) = &check.error {
            broken.push(format!("  agent `{}`: {error}", check.agent));
        }
    }
    if broken.is_empty() {
        return None;
    }
    Some(anyhow::anyhow!(
        "refusing to serve: {} cannot run\n{}\nfix the cause above, or move the agent's \
         file out of agents/ (for a bundle: rebuild it with `flue build`)",
        if broken.len() == 1 {
            "an agent".to_owned()
        } else {
            format!("{} agents", broken.len())
        },
        broken.join("\n")
    ))
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
    let agents = load_agents(
        args.root.as_deref(),
        args.bundle.as_deref(),
        args.env_file.as_deref(),
    )?;
    checked_models(crate::trust::ensure(agents)?, args.allow_unknown_model)
}

/// `agents`, refused when an agent's model is most likely misspelt (its built-in provider's
/// catalog does not know it), unless `allow_unknown`: a server cannot ask, and every message
/// to that agent would store a conversation only for the provider to answer 404.
pub(crate) fn checked_models(agents: AgentSet, allow_unknown: bool) -> anyhow::Result<AgentSet> {
    if allow_unknown {
        return Ok(agents.allowing_unknown_models());
    }
    let unknown = agents.agents_with_unknown_models();
    if unknown.is_empty() {
        return Ok(agents);
    }
    bail!(
        "refusing to serve: a model is not in its provider's catalog\n  {}",
        unknown.join("\n  ")
    )
}

/// The agents of the workspace at `root`, or of `bundle` working in `root`.
pub(crate) fn load_agents(
    root: Option<&Path>,
    bundle: Option<&Path>,
    env_file: Option<&Path>,
) -> anyhow::Result<AgentSet> {
    let vars = || {
        // Variables that are not UTF-8 cannot be keys or URLs: left out rather than a panic.
        std::env::vars_os()
            .filter_map(|(key, value)| Some((key.into_string().ok()?, value.into_string().ok()?)))
    };
    let env = |root: &Path| Env::for_root(vars(), root, env_file);
    let agents = match bundle {
        Some(bundle) => {
            let root = match root {
                Some(root) => resolve_root(Some(root))?,
                None => canonical(&current_dir()?, "the current directory")?,
            };
            AgentSet::from_bundle(bundle, &root, env(&root)?)?
        }
        None => {
            let root = resolve_root(root)?;
            AgentSet::from_workspace(&root, env(&root)?)?
        }
    };
    Ok(crate::trust::apply(agents))
}

/// The error of a failed bind of `ip:port`; a port in use gets the fix (`--port`).
pub(crate) fn cannot_bind(ip: IpAddr, port: u16, err: &std::io::Error) -> anyhow::Error {
    if err.kind() == std::io::ErrorKind::AddrInUse {
        anyhow::anyhow!(
            "cannot bind {ip}:{port}: another process uses that port; pick another with \
             `--port N`, or `--port 0` for any free one (the address is printed at start)"
        )
    } else {
        anyhow::anyhow!("cannot bind {ip}:{port}: {err}")
    }
}

/// `flue serve`'s connection cap when `--max-connections` is not given.
const DEFAULT_MAX_CONNECTIONS: usize = 20_000;

/// Descriptors kept for everything but connections (the store, MCP servers, sandboxes, logs).
const RESERVED_FDS: u64 = 1_024;

/// The connection cap: `asked`, or the default lowered to what the open-file limit allows.
/// Raises the open-file limit toward what the cap needs first (each connection is a
/// descriptor; the hard limit caps it). Only a cap the user asked for and cannot have is worth
/// a warning: the default adapts to the machine, said at info level.
fn connection_limit(asked: Option<usize>) -> usize {
    let wanted = asked.unwrap_or(DEFAULT_MAX_CONNECTIONS);
    let needed = u64::try_from(wanted)
        .unwrap_or(u64::MAX)
        .saturating_add(RESERVED_FDS);
    let Some(limit) = raise_fd_limit(needed) else {
        return wanted;
    };
    let room =
        usize::try_from(limit.saturating_sub(RESERVED_FDS.min(limit / 4))).unwrap_or(usize::MAX);
    if room >= wanted {
        return wanted;
    }
    if asked.is_some() {
        tracing::warn!(
            "the open-file limit ({limit}) caps concurrent connections at {room}, below \
             --max-connections {wanted}; raise the hard limit (`ulimit -Hn {needed}` as root, or \
             LimitNOFILE= in a systemd unit) or lower --max-connections"
        );
    } else {
        tracing::info!(
            limit,
            max_connections = room,
            "connections capped by the open-file limit"
        );
    }
    room
}

/// Raises the soft open-file limit toward `wanted`, capped by the hard limit; returns the
/// soft limit now in force (`None` when it cannot be read). A failure to raise it only
/// leaves the limit as it was.
fn raise_fd_limit(wanted: u64) -> Option<u64> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    let target = wanted.min(hard);
    if target <= soft {
        return Some(soft);
    }
    match setrlimit(Resource::RLIMIT_NOFILE, target, hard) {
        Ok(()) => Some(target),
        Err(_) => Some(soft),
    }
}

/// Who a server may be reached by, checked once for `flue serve` and `flue mcp serve --http`:
/// a non-loopback bind needs a token, and the token must be strong enough for the address.
pub(crate) struct Exposure {
    pub(crate) ip: IpAddr,
    pub(crate) token: Option<String>,
    pub(crate) guard: RequestGuard,
}

impl Exposure {
    pub(crate) fn checked(
        host: &str,
        token: Option<String>,
        allowed_hosts: &[String],
    ) -> anyhow::Result<Self> {
        // An empty FLUE_TOKEN counts as unset; an explicit `--token ""` is refused below.
        let token = token.or_else(|| {
            std::env::var("FLUE_TOKEN")
                .ok()
                .filter(|token| !token.is_empty())
        });
        let ip: IpAddr = host
            .parse()
            .with_context(|| format!("--host {host:?} is not an IP address"))?;
        if !ip.is_loopback() && token.is_none() {
            bail!(
                "refusing to bind {ip}: a non-loopback address needs a token (--token or \
                 FLUE_TOKEN); every request must then carry `Authorization: Bearer <token>`"
            );
        }
        if let Some(token) = &token {
            flue_server::check_token(token, ip)?;
        }
        flue_server::check_hosts(allowed_hosts)?;
        // A token protects against DNS rebinding (a page cannot add it), so with one any Host
        // is served unless hosts are listed; without one, only loopback names and the listed
        // hosts.
        let guard = if token.is_some() {
            RequestGuard::any_host()
        } else {
            RequestGuard::loopback()
        }
        .with_hosts(allowed_hosts);
        Ok(Self { ip, token, guard })
    }
}
