//! `flue mcp serve`: every agent of a workspace or bundle as an MCP tool, over stdio (a client
//! such as Claude Desktop starts `flue` itself) or over streamable HTTP (`--http`, with the
//! host, origin and token rules of `flue serve`). flue-host assembles the app as for
//! `flue serve`; flue-server's `McpAgents` speaks the protocol, with its HTTP sessions bounded
//! (`--max-sessions`, `--session-idle`). Over stdio, stdout carries the protocol and nothing
//! else, and a client that does not read it is not read from either.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, bail};
use flue_host::{App, Preflight, RuntimeMode, StoreChoice};
use flue_server::{MCP_PATH, McpSessionLimits, ServeOptions};
use tokio_util::sync::CancellationToken;

use crate::Exit;
use crate::args::McpServeArgs;
use crate::serve::{
    Exposure, broken_agents, cannot_bind, checked_models, load_agents, shutdown_signal,
};

/// Runs `flue mcp serve` until the client closes stdio (stdio), or SIGTERM or Ctrl-C.
pub(crate) async fn serve(args: McpServeArgs) -> anyhow::Result<Exit> {
    let http = if args.http {
        Some(Exposure::checked(
            &args.host,
            args.token.clone(),
            &args.allowed_hosts,
        )?)
    } else {
        None
    };
    let agents = crate::trust::ensure(load_agents(
        args.root.as_deref(),
        args.bundle.as_deref(),
        args.env_file.as_deref(),
    )?)?;
    let agents = checked_models(agents, args.allow_unknown_model)?;
    let opened = StoreChoice::Configured(args.store.clone())
        .open(&agents)
        .await
        .context("cannot open the conversation store")?;
    let app = App::builder(agents)
        .with_opened_store(opened)
        .with_mode(RuntimeMode::Server)
        .with_preflight(Preflight::All)
        .with_settlement_log()
        .start()
        .await
        .context("cannot start the submission runtime")?;
    if let Some(refusal) = broken_agents(&app) {
        for warning in app.close().await {
            tracing::warn!("{warning}");
        }
        return Err(refusal);
    }
    let Some(mcp) = app.mcp() else {
        bail!("the server was assembled without its runtime");
    };
    // `stop` ends the MCP sessions, which cancels (aborts) the calls still running: it fires
    // only after the drain let them finish.
    let stop = CancellationToken::new();
    let grace = Duration::from_secs(args.grace);
    let served = match http {
        Some(http) => {
            let listener =
                flue_server::bind(SocketAddr::new(http.ip, args.port), args.max_connections)
                    .map_err(|err| cannot_bind(http.ip, args.port, &err))?;
            let addr = listener.local_addr()?;
            eprintln!("flue mcp serve: listening on http://{addr}{MCP_PATH}");
            let options = ServeOptions {
                max_connections: args.max_connections,
                guard: Some(http.guard),
                ..ServeOptions::default()
            };
            let limits = McpSessionLimits {
                max_sessions: usize::try_from(args.max_sessions).unwrap_or(usize::MAX),
                idle_timeout: Duration::from_secs(args.session_idle),
            };
            let router = mcp.http_router(http.token, limits, stop.clone());
            let accepting = CancellationToken::new();
            let server = tokio::spawn(flue_server::serve(
                listener,
                router,
                options,
                accepting.clone().cancelled_owned(),
            ));
            shutdown_signal().await;
            accepting.cancel();
            drain(&app, grace).await;
            stop.cancel();
            // The sessions' SSE streams end with them; plain requests get a moment.
            let _ = tokio::time::timeout(Duration::from_millis(500), server).await;
            Ok(())
        }
        None => {
            let mut session = tokio::spawn(mcp.serve_stream(
                tokio::io::stdin(),
                tokio::io::stdout(),
                stop.clone(),
            ));
            // The client closing stdio ends the session (and its calls); a signal lets the
            // running calls finish first.
            let ended = tokio::select! {
                ended = &mut session => {
                    drain(&app, grace).await;
                    ended
                }
                () = shutdown_signal() => {
                    drain(&app, grace).await;
                    stop.cancel();
                    session.await
                }
            };
            match ended {
                Ok(ended) => ended.map_err(anyhow::Error::from),
                Err(err) => Err(anyhow::anyhow!("the MCP session task failed: {err}")),
            }
        }
    };
    for warning in app.close().await {
        tracing::warn!("{warning}");
    }
    served?;
    Ok(Exit::Success)
}

/// Stops admitting and gives the running calls `grace` to finish.
async fn drain(app: &App, grace: Duration) {
    tracing::info!("shutting down: admitting nothing more, letting running calls finish");
    let busy = app.drain(grace).await;
    if busy > 0 {
        tracing::warn!(
            busy,
            "grace period over; unfinished work is left to recovery at the next start"
        );
    }
}
