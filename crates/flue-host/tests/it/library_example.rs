//! The serving example docs/library.md shows, compiled here (a test in `app.rs` keeps the
//! page's copy equal to the code below this header).

use std::path::Path;
use std::time::Duration;

use flue_host::{AgentSet, App, Env, RuntimeMode, StoreChoice, TrustPolicy, TrustStore};
use flue_server::ServerConfig;

/// Serves every agent of the workspace at `root` on `addr` until `stop` resolves.
pub async fn serve_workspace(
    root: &Path,
    addr: &str,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Box<dyn std::error::Error>> {
    let env = Env::for_root(std::env::vars(), root, None)?;
    // Hooks, MCP servers, host sandboxes, schedules and the workspace's own endpoints run
    // only where the user trusted the workspace (`flue trust`); a program serving a
    // workspace of its own may pass `TrustPolicy::Granted` instead.
    let trust = TrustStore::for_user(|name| std::env::var(name).ok())
        .map_or(TrustPolicy::Denied, TrustPolicy::Recorded);
    let agents = AgentSet::from_workspace(root, env)?.with_trust(trust);
    // The store (flue.toml's `[store] url`, else .flue/flue.db), the host, the durable
    // runtime (resuming what a killed process left) and the router, assembled in one place.
    let app = App::builder(agents)
        .with_store(StoreChoice::Configured(None))
        .with_mode(RuntimeMode::Server)
        .start()
        .await?;
    let Some(router) = app.router(ServerConfig::default()) else {
        return Err("a server app has a router".into());
    };
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let options = flue_server::ServeOptions {
        max_connections: 1_024,
        ..flue_server::ServeOptions::default()
    };
    flue_server::serve(listener, router, options, stop).await?;
    // Admit nothing more, give running work 10 s, then close sandboxes and MCP servers.
    app.drain(Duration::from_secs(10)).await;
    for warning in app.close().await {
        eprintln!("warning: {warning}");
    }
    Ok(())
}
