//! `flue dev`: every agent of a workspace over the same HTTP protocol as `flue serve`, rebuilt
//! whenever its files change, plus a console in the browser at `/`.
//!
//! flue-host assembles the serving app ([`DevApp`]: the dev database, the durable runtime,
//! the protocol's router with flue-server's console routes, the build status); this module
//! watches the files and drives the reloads. A reload builds a new [`AgentSet`] off the async
//! runtime and swaps it in, so every request sees a complete build: harnesses opened before
//! the swap keep the configuration they were opened with, so a running submission finishes on
//! the old build. A build that fails keeps the last good one serving; its diagnostics go to
//! stderr (the text of `flue build`) and to the console. Conversations live in `.flue/dev.db`,
//! kept across reloads and restarts.

mod watch;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use flue_host::{AgentSet, BuildProblem, DEV_DB_PATH, DevApp, Env, StoreChoice, watched_files};
use flue_server::{RequestGuard, ServeOptions};
use tokio_util::sync::CancellationToken;

use crate::Exit;
use crate::args::DevArgs;
use crate::terminal::escape_controls;
use crate::workspace::{canonical, resolve_root};

/// Runs `flue dev` until SIGTERM or Ctrl-C.
pub(crate) async fn dev(args: DevArgs) -> anyhow::Result<Exit> {
    let ip: IpAddr = args
        .host
        .parse()
        .with_context(|| format!("--host {:?} is not an IP address", args.host))?;
    if !ip.is_loopback() {
        bail!(
            "refusing to bind {ip}: `flue dev` serves a console without authentication and binds \
             loopback only (127.0.0.1 or ::1); use `flue serve --token` to serve on a network"
        );
    }
    flue_server::check_hosts(&args.allowed_hosts)?;
    let root = resolve_root(args.root.as_deref())?;
    // Canonical like the root: the watcher compares it with the absolute paths it reports.
    let env_file = match &args.env_file {
        Some(file) => Some(canonical(file, "--env")?),
        None => None,
    };
    let debounce = Duration::from_millis(args.debounce_ms);
    let (mut watcher, mut changes) = watch::Watcher::start(&root)?;

    // The first good build: until there is one, print what is wrong and wait for an edit.
    let started = Instant::now();
    let agents = loop {
        match load(&root, env_file.as_deref()) {
            Ok(agents) => break agents,
            Err(diagnostics) => {
                print_diagnostics(&diagnostics);
                eprintln!("flue dev: fix the workspace; it is rebuilt on every change");
                watcher.refresh(&root, env_file.as_slice());
                if watch::next_batch(&mut changes, debounce).await.is_none() {
                    bail!("the file watcher stopped");
                }
            }
        }
    };
    let build_ms = millis(started.elapsed());
    let agents = crate::trust::ensure_or_warn(agents);
    for why in agents.agents_with_unknown_models() {
        eprintln!("warning: {}", crate::terminal::escape_controls(&why));
    }
    watcher.refresh(&root, &watched_files(&agents, env_file.as_deref()));

    let n_agents = agents.agents().len();
    // Starting the app resumes the work a stopped `flue dev` left unsettled.
    let path = root.join(DEV_DB_PATH);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let store = StoreChoice::File(PathBuf::from(DEV_DB_PATH))
        .open(&agents)
        .await
        .with_context(|| format!("cannot open {}", path.display()))?;
    let app = DevApp::start(agents, store, build_ms, Arc::new(print_warnings))
        .await
        .context("cannot start the submission runtime")?;
    let app = Arc::new(app);
    let listener = flue_server::bind(SocketAddr::new(ip, args.port), args.max_connections)
        .map_err(|err| crate::serve::cannot_bind(ip, args.port, &err))?;
    let addr = listener.local_addr()?;
    eprintln!(
        "flue dev: serving {n_agents} agent(s) from {}",
        escape_controls(&root.display().to_string())
    );
    eprintln!("flue dev: console at http://{addr}/");
    eprintln!(
        "flue dev: watching agents/, .agents/, flue.toml, AGENTS.md, .env* and model scripts; \
         conversations in {DEV_DB_PATH}"
    );

    let stop = CancellationToken::new();
    // The console has no authentication: only loopback names (and the listed hosts) and the
    // console's own origin are served.
    let options = ServeOptions {
        max_connections: args.max_connections,
        header_timeout: Duration::from_millis(args.header_timeout_ms.max(1)),
        guard: Some(RequestGuard::loopback().with_hosts(&args.allowed_hosts)),
    };
    let server = tokio::spawn(flue_server::serve(
        listener,
        app.router(),
        options,
        stop.clone().cancelled_owned(),
    ));
    let reloads = tokio::spawn({
        let app = Arc::clone(&app);
        let root = root.clone();
        async move {
            while let Some(changed) = watch::next_batch(&mut changes, debounce).await {
                let files = reload(&app, &root, env_file.as_deref(), &changed).await;
                watcher.refresh(&root, &files);
            }
        }
    });
    crate::serve::shutdown_signal().await;
    eprintln!("flue dev: stopping");
    reloads.abort();
    // The reload task held the other reference; it is gone once the abort is through.
    let _ = reloads.await;
    stop.cancel();
    let busy = app.drain(Duration::from_secs(2)).await;
    if busy > 0 {
        eprintln!("flue dev: {busy} submission(s) left unfinished; they resume at the next start");
    }
    let _ = tokio::time::timeout(Duration::from_millis(300), server).await;
    match Arc::try_unwrap(app) {
        Ok(app) => print_warnings(app.close().await),
        Err(_) => eprintln!("flue dev: warning: the app is still in use; not closing it"),
    }
    Ok(Exit::Success)
}

/// Rebuilds the workspace after `changed` files changed and swaps the new build in, or
/// reports why it cannot. Returns the files outside the watched folders to watch (model
/// scripts of the serving build, the `--env` file).
async fn reload(
    app: &DevApp,
    root: &Path,
    env_file: Option<&Path>,
    changed: &[PathBuf],
) -> Vec<PathBuf> {
    let started = Instant::now();
    let loaded = {
        let root = root.to_path_buf();
        let env_file = env_file.map(Path::to_path_buf);
        tokio::task::spawn_blocking(move || load(&root, env_file.as_deref()))
            .await
            .unwrap_or_else(|err| {
                Err(vec![BuildProblem::other(format!(
                    "the rebuild stopped: {err}"
                ))])
            })
    };
    let changed: Vec<String> = changed
        .iter()
        .map(|path| {
            path.strip_prefix(root)
                .unwrap_or(path)
                .display()
                .to_string()
        })
        .collect();
    match loaded {
        Ok(agents) => {
            if let Err(err) = agents.require_trust() {
                crate::trust::warn_untrusted(&err);
            }
            let files = watched_files(&agents, env_file);
            let build_ms = millis(started.elapsed());
            let n_agents = app.reloaded(agents, changed.clone(), build_ms);
            eprintln!(
                "flue dev: reloaded {n_agents} agent(s) in {build_ms:.0} ms ({})",
                escape_controls(&changed.join(", "))
            );
            files
        }
        Err(diagnostics) => {
            print_diagnostics(&diagnostics);
            eprintln!("flue dev: the last good build keeps serving");
            app.failed(diagnostics, changed);
            watched_files(&app.app().host().agents(), env_file)
        }
    }
}

/// The workspace at `root` as an agent set, or every problem with it.
fn load(root: &Path, env_file: Option<&Path>) -> Result<AgentSet, Vec<BuildProblem>> {
    Env::for_root(process_vars(), root, env_file)
        .and_then(|env| AgentSet::from_workspace(root, env))
        .map(crate::trust::apply)
        .map_err(BuildProblem::from_error)
}

/// The process environment (read anew on every reload: only `.env` files change it here).
fn process_vars() -> impl Iterator<Item = (String, String)> {
    // Variables that are not UTF-8 cannot be keys or URLs: left out rather than a panic.
    std::env::vars_os()
        .filter_map(|(key, value)| Some((key.into_string().ok()?, value.into_string().ok()?)))
}

/// Prints a failed build as `flue build` does.
fn print_diagnostics(diagnostics: &[BuildProblem]) {
    for diagnostic in diagnostics {
        eprintln!("{}", escape_controls(&diagnostic.text));
    }
    let count = diagnostics.len();
    let noun = if count == 1 { "problem" } else { "problems" };
    eprintln!("error: build failed with {count} {noun}");
}

#[allow(
    clippy::needless_pass_by_value,
    reason = "also the warning sink of the app, which hands the warnings over"
)]
fn print_warnings(warnings: Vec<String>) {
    for warning in warnings {
        eprintln!("flue dev: warning: {}", escape_controls(&warning));
    }
}

fn millis(elapsed: Duration) -> f64 {
    elapsed.as_secs_f64() * 1000.0
}
