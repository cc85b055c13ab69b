//! `flue dev`: every agent of a workspace over the same HTTP protocol as `flue serve`, rebuilt
//! whenever its files change, plus a console in the browser at `/`.
//!
//! A reload builds a new [`AgentSet`] off the async runtime and swaps it into the [`Host`]
//! (the submission runtime's registry) and the
//! [`DurableRuntime`](flue_server::DurableRuntime) (the router's agent list) in one step each,
//! so every request sees a complete build: harnesses opened before the swap keep the
//! configuration they were opened with, so a running submission finishes on the old
//! build. A build that fails keeps the last good one serving; its diagnostics go to stderr
//! (the text of `flue build`) and to the console. Conversations live in `.flue/dev.db`, kept
//! across reloads and restarts.

mod console;
mod watch;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use flue_core::{AgentRegistry, AgentRuntime, DynSessionStore};
use flue_host::{AgentSet, Env, Host, HostError};
use flue_store::SqliteStore;
use serde::Serialize;
use tokio::sync::watch as channel;
use tokio_util::sync::CancellationToken;

use crate::Exit;
use crate::args::DevArgs;
use crate::terminal::escape_controls;
use crate::workspace::resolve_root;

/// The dev database, relative to the workspace root: apart from `flue run`'s `.flue/flue.db`.
pub(crate) const DEV_DB_PATH: &str = ".flue/dev.db";

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
    let root = resolve_root(args.root.as_deref())?;
    let env_file = args.env_file.clone();
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
    watcher.refresh(&root, &watched_files(&agents, env_file.as_deref()));

    let store = Arc::new(open_dev_store(&root)?);
    let status = Status::serving(&agents, 1, build_ms, Vec::new());
    let infos = server_infos(&agents);
    let n_agents = infos.len();
    let host = Arc::new(Host::with_store(
        agents,
        Arc::clone(&store) as Arc<dyn DynSessionStore>,
    ));
    // Starting the runtime resumes the work a stopped `flue dev` left unsettled.
    let core = AgentRuntime::builder(
        Arc::clone(&store) as Arc<dyn flue_core::DynConversationStore>,
        Arc::clone(&host) as Arc<dyn AgentRegistry>,
    )
    .start()
    .await
    .context("cannot start the submission runtime")?;
    let runtime = flue_server::DurableRuntime::new(core, infos);
    let (status_tx, _) = channel::channel(Arc::new(status));
    let state = Arc::new(DevState {
        root: root.clone(),
        env_file,
        host: Arc::clone(&host),
        runtime: runtime.clone(),
        store,
        status: status_tx,
        retired: Mutex::new(Vec::new()),
    });

    let config = flue_server::ServerConfig::default();
    let app = flue_server::router(Arc::new(runtime.clone()), config)
        .merge(console::routes(Arc::clone(&state)));
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(ip, args.port))
        .await
        .with_context(|| format!("cannot bind {ip}:{}", args.port))?;
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
    let server = tokio::spawn(flue_server::serve(
        listener,
        app,
        1_024,
        stop.clone().cancelled_owned(),
    ));
    let reloads = tokio::spawn({
        let state = Arc::clone(&state);
        async move {
            while let Some(changed) = watch::next_batch(&mut changes, debounce).await {
                let files = state.reload(&changed).await;
                watcher.refresh(&state.root, &files);
            }
        }
    });
    crate::serve::shutdown_signal().await;
    eprintln!("flue dev: stopping");
    reloads.abort();
    stop.cancel();
    let busy = runtime.shutdown(Duration::from_secs(2)).await;
    if busy > 0 {
        eprintln!("flue dev: {busy} submission(s) left unfinished; they resume at the next start");
    }
    let _ = tokio::time::timeout(Duration::from_millis(300), server).await;
    let retired = std::mem::take(&mut *lock(&state.retired));
    for agents in retired {
        print_warnings(agents.close().await);
    }
    print_warnings(host.close().await);
    Ok(Exit::Success)
}

/// What the console and the reload task share.
struct DevState {
    root: PathBuf,
    env_file: Option<PathBuf>,
    host: Arc<Host>,
    runtime: flue_server::DurableRuntime,
    store: Arc<SqliteStore>,
    /// The build status the console long-polls; its generation grows with every reload.
    status: channel::Sender<Arc<Status>>,
    /// Replaced agent sets whose MCP servers are closed once no submission runs.
    retired: Mutex<Vec<Arc<AgentSet>>>,
}

impl DevState {
    /// Rebuilds the workspace after `changed` files changed and swaps the new build in, or
    /// reports why it cannot. Returns the files outside the watched folders to watch (model
    /// scripts of the serving build, the `--env` file).
    async fn reload(self: &Arc<Self>, changed: &[PathBuf]) -> Vec<PathBuf> {
        let started = Instant::now();
        let root = self.root.clone();
        let env_file = self.env_file.clone();
        let loaded = tokio::task::spawn_blocking(move || load(&root, env_file.as_deref()))
            .await
            .unwrap_or_else(|err| {
                Err(vec![DiagnosticView::other(format!(
                    "the rebuild stopped: {err}"
                ))])
            });
        let changed: Vec<String> = changed
            .iter()
            .map(|path| {
                path.strip_prefix(&self.root)
                    .unwrap_or(path)
                    .display()
                    .to_string()
            })
            .collect();
        let previous = self.status.borrow().clone();
        match loaded {
            Ok(agents) => {
                let files = watched_files(&agents, self.env_file.as_deref());
                let infos = server_infos(&agents);
                let build_ms = millis(started.elapsed());
                let mut status =
                    Status::serving(&agents, previous.build + 1, build_ms, changed.clone());
                status.generation = previous.generation + 1;
                let n_agents = infos.len();
                let old = self.host.replace_agents(agents);
                self.runtime.set_agents(infos);
                self.status.send_replace(Arc::new(status));
                eprintln!(
                    "flue dev: reloaded {n_agents} agent(s) in {build_ms:.0} ms ({})",
                    escape_controls(&changed.join(", "))
                );
                self.retire(old);
                files
            }
            Err(diagnostics) => {
                print_diagnostics(&diagnostics);
                eprintln!("flue dev: the last good build keeps serving");
                let mut status = (*previous).clone();
                status.generation += 1;
                status.ok = false;
                status.diagnostics = diagnostics;
                status.changed = changed;
                status.at = flue_core::iso8601_ms(flue_core::now_ms());
                self.status.send_replace(Arc::new(status));
                watched_files(&self.host.agents(), self.env_file.as_deref())
            }
        }
    }

    /// Closes a replaced agent set's MCP servers once no submission of this process runs
    /// (one may still use them), or after ten minutes.
    fn retire(self: &Arc<Self>, old: Arc<AgentSet>) {
        lock(&self.retired).push(Arc::clone(&old));
        let state = Arc::clone(self);
        tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(600);
            while state.runtime.unsettled_submissions().await > 0 && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            lock(&state.retired).retain(|held| !Arc::ptr_eq(held, &old));
            print_warnings(old.close().await);
        });
    }
}

/// What the console shows about the build: the agents serving and, after a failed rebuild,
/// its diagnostics.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Status {
    /// Grows by one with every rebuild, good or bad.
    generation: u64,
    /// How many good builds there were; the serving one is this one.
    build: u64,
    /// False when the last rebuild failed (the previous good build keeps serving).
    ok: bool,
    /// When the last rebuild ran (ISO 8601).
    at: String,
    /// How long the last good build took, ms.
    build_ms: f64,
    /// The files whose change triggered the last rebuild, relative to the root.
    changed: Vec<String>,
    root: String,
    agents: Vec<AgentView>,
    skills: Vec<NamedView>,
    roles: Vec<NamedView>,
    diagnostics: Vec<DiagnosticView>,
}

impl Status {
    fn serving(agents: &AgentSet, build: u64, build_ms: f64, changed: Vec<String>) -> Self {
        let workspace = agents.workspace();
        Self {
            generation: build,
            build,
            ok: true,
            at: flue_core::iso8601_ms(flue_core::now_ms()),
            build_ms,
            changed,
            root: agents.root().display().to_string(),
            agents: agents
                .agents()
                .into_iter()
                .filter_map(|info| {
                    let file = workspace.agents.get(&info.name)?;
                    Some(AgentView {
                        name: info.name,
                        description: info.description,
                        model: info.model,
                        path: file.path.clone(),
                        tools: file.tools.clone(),
                        skills: file.skills.clone(),
                        subagents: file.subagents.clone(),
                        mcp: file.mcp.keys().cloned().collect(),
                        sandbox: file.sandbox.map(|kind| kind.as_str().to_owned()),
                        role: file.role.clone(),
                    })
                })
                .collect(),
            skills: workspace
                .skills
                .values()
                .map(|skill| NamedView {
                    name: skill.name.clone(),
                    description: skill.description.clone(),
                })
                .collect(),
            roles: workspace
                .roles
                .values()
                .map(|role| NamedView {
                    name: role.name.clone(),
                    description: role.description.clone(),
                })
                .collect(),
            diagnostics: Vec::new(),
        }
    }
}

/// One agent as the console lists it.
#[derive(Clone, Debug, Serialize)]
struct AgentView {
    name: String,
    description: Option<String>,
    model: Option<String>,
    /// Its file, relative to the root.
    path: String,
    tools: Vec<String>,
    skills: Vec<String>,
    subagents: Vec<String>,
    /// Its MCP servers' names.
    mcp: Vec<String>,
    sandbox: Option<String>,
    role: Option<String>,
}

/// A skill or a role.
#[derive(Clone, Debug, Serialize)]
struct NamedView {
    name: String,
    description: String,
}

/// One problem of a failed build.
#[derive(Clone, Debug, Serialize)]
struct DiagnosticView {
    /// The file, relative to the root (empty when the problem has no file).
    path: String,
    line: Option<usize>,
    message: String,
    /// The line `flue build` prints.
    text: String,
}

impl DiagnosticView {
    fn other(message: String) -> Self {
        Self {
            path: String::new(),
            line: None,
            text: message.clone(),
            message,
        }
    }
}

/// The workspace at `root` as an agent set, or every problem with it.
fn load(root: &Path, env_file: Option<&Path>) -> Result<AgentSet, Vec<DiagnosticView>> {
    let loaded = Env::for_root(process_vars(), root, env_file)
        .and_then(|env| AgentSet::from_workspace(root, env));
    loaded.map_err(|err| match err {
        HostError::Diagnostics(diagnostics) => diagnostics
            .as_slice()
            .iter()
            .map(|diagnostic| DiagnosticView {
                path: diagnostic.path.clone(),
                line: diagnostic.line,
                message: diagnostic.message.clone(),
                text: diagnostic.to_string(),
            })
            .collect(),
        other => vec![DiagnosticView::other(other.to_string())],
    })
}

/// The process environment (read anew on every reload: only `.env` files change it here).
fn process_vars() -> impl Iterator<Item = (String, String)> {
    // Variables that are not UTF-8 cannot be keys or URLs: left out rather than a panic.
    std::env::vars_os()
        .filter_map(|(key, value)| Some((key.into_string().ok()?, value.into_string().ok()?)))
}

/// Prints a failed build as `flue build` does.
fn print_diagnostics(diagnostics: &[DiagnosticView]) {
    for diagnostic in diagnostics {
        eprintln!("{}", escape_controls(&diagnostic.text));
    }
    let count = diagnostics.len();
    let noun = if count == 1 { "problem" } else { "problems" };
    eprintln!("error: build failed with {count} {noun}");
}

fn print_warnings(warnings: Vec<String>) {
    for warning in warnings {
        eprintln!("flue dev: warning: {}", escape_controls(&warning));
    }
}

/// The agents as the router lists them.
fn server_infos(agents: &AgentSet) -> Vec<flue_server::AgentInfo> {
    agents
        .agents()
        .into_iter()
        .map(|agent| flue_server::AgentInfo {
            name: agent.name,
            description: agent.description,
            model: agent.model,
        })
        .collect()
}

/// The files a reload reads that the watched folders may not hold: the scripts of the agents
/// on the scripted model (`scripted/<path>`) and the `--env` file.
fn watched_files(agents: &AgentSet, env_file: Option<&Path>) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = agents
        .agents()
        .into_iter()
        .filter_map(|agent| agent.model)
        .filter_map(|model| {
            let script = model.strip_prefix("scripted/")?;
            Some(agents.root().join(script))
        })
        .collect();
    paths.extend(env_file.map(Path::to_path_buf));
    paths.sort();
    paths.dedup();
    paths
}

/// Opens (creating) the dev database.
fn open_dev_store(root: &Path) -> anyhow::Result<SqliteStore> {
    let path = root.join(DEV_DB_PATH);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    SqliteStore::open(&path).with_context(|| format!("cannot open {}", path.display()))
}

fn millis(elapsed: Duration) -> f64 {
    elapsed.as_secs_f64() * 1000.0
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
