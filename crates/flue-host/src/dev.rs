//! `flue dev`'s side of the assembly: an [`App`] on the dev database that serves the protocol
//! and the console, the build status the console shows (published on every rebuild, good or
//! bad), and the swap of a new build into the running app (a replaced agent set is closed once
//! no submission of this process runs).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use flue_server::{BuildStatus, ConsoleAccess, DevConsole, ServerConfig};
use serde::Serialize;
use tokio::sync::watch;

use crate::{AgentSet, App, HostError, RuntimeMode, ServeStore};

/// The dev database, relative to the workspace root: apart from `flue run`'s `.flue/flue.db`.
pub const DEV_DB_PATH: &str = ".flue/dev.db";

/// One problem of a failed build, as the console shows it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[non_exhaustive]
pub struct BuildProblem {
    /// The file, relative to the root (empty when the problem has no file).
    pub path: String,
    /// The line, when known.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
    /// The line `flue build` prints.
    pub text: String,
}

impl BuildProblem {
    /// A problem with no file.
    pub fn other(message: String) -> Self {
        Self {
            path: String::new(),
            line: None,
            text: message.clone(),
            message,
        }
    }

    /// Every problem a failed load reports.
    pub fn from_error(err: HostError) -> Vec<Self> {
        match err {
            HostError::Diagnostics(diagnostics) => diagnostics
                .as_slice()
                .iter()
                .map(|diagnostic| Self {
                    path: diagnostic.path.clone(),
                    line: diagnostic.line,
                    message: diagnostic.message.clone(),
                    text: diagnostic.to_string(),
                })
                .collect(),
            other => vec![Self::other(other.to_string())],
        }
    }
}

/// The console of a serving `app` (`flue serve --console`): its agents as `flue dev` shows
/// them (no rebuilds), the hints `flue run` prints, and `access` (read-only without a token).
/// `None` unless the app serves ([`RuntimeMode::Server`]).
pub fn serve_console(app: &App, access: ConsoleAccess) -> Option<DevConsole> {
    let server = app.server()?.clone();
    let status = Status::serving(&app.host().agents(), 1, 0.0, Vec::new()).published();
    // `flue serve` records no model call: the prompt view rebuilds each one from the log.
    let console = DevConsole::fixed(server, status).with_access(access);
    Some(with_host_views(
        console,
        app.host(),
        flue_server::PromptRecorder::default(),
    ))
}

/// What the console shows of the agents `host` serves: the hints `flue run` prints for
/// errors, the Agent tab's tools and files, and the prompt view (the calls `prompts` holds as
/// sent; the others with the agent's prompt as it is now).
fn with_host_views(
    console: DevConsole,
    host: &Arc<crate::Host>,
    prompts: flue_server::PromptRecorder,
) -> DevConsole {
    let hinting = Arc::clone(host);
    let hint: flue_server::ErrorHint =
        Arc::new(move |message: &str| crate::hints::connection_hint(&hinting.agents(), message));
    let details = crate::inspect::HostDetails {
        host: Arc::clone(host),
    };
    let serving = Arc::clone(host);
    let assembly: flue_server::PromptAssembly = Arc::new(move |agent: String| {
        let agents = serving.agents();
        Box::pin(async move {
            agents
                .assembled_prompt(&agent)
                .await
                .map_err(|err| err.to_string())
        })
    });
    console
        .with_error_hint(hint)
        .with_agent_details(Arc::new(details))
        .with_prompts(prompts, assembly)
}

/// What receives warnings produced in the background (closing a replaced agent set).
pub type WarningSink = Arc<dyn Fn(Vec<String>) + Send + Sync>;

/// A serving app for `flue dev`: its protocol router with the console, and the build status.
pub struct DevApp {
    app: App,
    server: flue_server::DurableRuntime,
    /// Where warnings of closing a replaced agent set go (they come after the reload).
    on_warnings: WarningSink,
    status: watch::Sender<Arc<BuildStatus>>,
    /// The status as last published, typed.
    current: Mutex<Status>,
    /// Replaced agent sets whose MCP servers are closed once no submission runs.
    retired: Arc<Mutex<Vec<Arc<AgentSet>>>>,
    /// The last model calls of this process, as sent (the console's prompt view).
    prompts: flue_server::PromptRecorder,
}

impl std::fmt::Debug for DevApp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevApp")
            .field("app", &self.app)
            .finish_non_exhaustive()
    }
}

impl DevApp {
    /// Starts `agents` (the first good build, which took `build_ms`) on `store`, the dev
    /// database (`StoreChoice::File(DEV_DB_PATH)`, kept across reloads and restarts), resuming
    /// the work a stopped `flue dev` left unsettled. Warnings of closing replaced agent sets
    /// later go to `on_warnings`.
    pub async fn start(
        mut agents: AgentSet,
        store: ServeStore,
        build_ms: f64,
        on_warnings: WarningSink,
    ) -> Result<Self, HostError> {
        let prompts = flue_server::PromptRecorder::new();
        agents.record_prompts(&prompts);
        let status = Status::serving(&agents, 1, build_ms, Vec::new());
        let app = App::builder(agents)
            .with_opened_store(store)
            .with_mode(RuntimeMode::Server)
            .start()
            .await?;
        let Some(server) = app.server().cloned() else {
            return Err(HostError::Core(flue_core::FlueError::config(
                "the dev app was built without its router",
            )));
        };
        let (sender, _) = watch::channel(Arc::new(status.published()));
        Ok(Self {
            app,
            server,
            on_warnings,
            status: sender,
            current: Mutex::new(status),
            retired: Arc::default(),
            prompts,
        })
    }

    /// The app underneath.
    pub fn app(&self) -> &App {
        &self.app
    }

    /// The protocol's router (default limits, no token) with the console's routes.
    pub fn router(&self) -> axum::Router {
        // A failure in the console gets the hint `flue run` prints, from the agents serving.
        let console = DevConsole::new(self.server.clone(), self.status.subscribe());
        let console = with_host_views(console, self.app.host(), self.prompts.clone());
        let config = ServerConfig {
            workspace_root: Some(self.app.host().agents().root().to_path_buf()),
            ..ServerConfig::default()
        };
        flue_server::router(self.server.clone(), config).merge(flue_server::console_routes(console))
    }

    /// Serves a rebuilt workspace (triggered by `changed`, relative to the root; it took
    /// `build_ms`) from now on; returns how many agents it serves.
    pub fn reloaded(&self, mut agents: AgentSet, changed: Vec<String>, build_ms: f64) -> usize {
        agents.record_prompts(&self.prompts);
        let n_agents = agents.agents().len();
        let mut current = lock(&self.current);
        let mut status = Status::serving(&agents, current.build + 1, build_ms, changed);
        status.generation = current.generation + 1;
        let old = self.app.replace_agents(agents);
        self.status.send_replace(Arc::new(status.published()));
        *current = status;
        drop(current);
        self.retire(old);
        n_agents
    }

    /// Publishes a failed rebuild (triggered by `changed`): the last good build keeps serving.
    pub fn failed(&self, problems: Vec<BuildProblem>, changed: Vec<String>) {
        let mut current = lock(&self.current);
        current.generation += 1;
        current.ok = false;
        current.diagnostics = problems;
        current.changed = changed;
        current.at = flue_core::util::iso8601_ms(flue_core::util::now_ms());
        self.status.send_replace(Arc::new(current.published()));
    }

    /// Stops admitting, waits up to `grace` for this process's submissions, stops the
    /// runtime; returns how many were left unsettled (they resume at the next start).
    pub async fn drain(&self, grace: Duration) -> usize {
        self.app.drain(grace).await
    }

    /// Closes the replaced agent sets still held, then the app; returns failures as warnings.
    pub async fn close(self) -> Vec<String> {
        let retired = std::mem::take(&mut *lock(&self.retired));
        let mut warnings = Vec::new();
        for agents in retired {
            warnings.extend(agents.close().await);
        }
        warnings.extend(self.app.close().await);
        warnings
    }

    /// Closes a replaced agent set's MCP servers once no submission of this process runs
    /// (one may still use them), or after ten minutes.
    fn retire(&self, old: Arc<AgentSet>) {
        lock(&self.retired).push(Arc::clone(&old));
        let retired = Arc::clone(&self.retired);
        let server = self.server.clone();
        let on_warnings = Arc::clone(&self.on_warnings);
        tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(600);
            while server.unsettled_submissions().await > 0 && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            lock(&retired).retain(|held| !Arc::ptr_eq(held, &old));
            on_warnings(old.close().await);
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
    diagnostics: Vec<BuildProblem>,
}

impl Status {
    fn serving(agents: &AgentSet, build: u64, build_ms: f64, changed: Vec<String>) -> Self {
        let workspace = agents.workspace();
        Self {
            generation: build,
            build,
            ok: true,
            at: flue_core::util::iso8601_ms(flue_core::util::now_ms()),
            build_ms,
            changed,
            root: agents.root().display().to_string(),
            agents: agents
                .agents()
                .into_iter()
                .filter_map(|info| {
                    let file = workspace.agents.get(&info.name)?;
                    let (tools, ask) = tool_views(workspace, &info.name);
                    let models = agents.model_choices(&info.name);
                    Some(AgentView {
                        name: info.name,
                        description: info.description,
                        model: info.model,
                        path: file.path.clone(),
                        tools,
                        command_tools: file
                            .command_tools
                            .iter()
                            .map(|spec| spec.name.clone())
                            .collect(),
                        ask,
                        skills: file.skills.clone(),
                        subagents: file.subagents.clone(),
                        mcp: file.mcp.keys().cloned().collect(),
                        sandbox: file.sandbox.map(|kind| kind.as_str().to_owned()),
                        role: file.role.clone(),
                        models,
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

    /// The status as the console's route serves it.
    fn published(&self) -> BuildStatus {
        BuildStatus {
            generation: self.generation,
            body: serde_json::to_value(self).unwrap_or_default(),
        }
    }
}

/// The names of agent `agent`'s own tools (built-in and command tools, as the model is offered
/// them), and of those that ask before each call (`always_ask`, by the tool's default or a
/// permission rule of flue.toml or the agent file).
fn tool_views(workspace: &flue_build::Workspace, agent: &str) -> (Vec<String>, Vec<String>) {
    let Ok(config) = workspace.agent_config(agent) else {
        return (Vec::new(), Vec::new());
    };
    let mut tools = Vec::new();
    let mut ask = Vec::new();
    for tool in &config.tools {
        let name = tool.name().to_owned();
        let permission = flue_core::permission::decide_permission(
            &config.permissions,
            &name,
            tool.meta().permission,
        );
        if permission == flue_core::Permission::AlwaysAsk {
            ask.push(name.clone());
        }
        tools.push(name);
    }
    (tools, ask)
}

/// One agent as the console lists it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct AgentView {
    name: String,
    description: Option<String>,
    model: Option<String>,
    /// Its file, relative to the root.
    path: String,
    /// Its own tools: built-in and command tools.
    tools: Vec<String>,
    /// Which of `tools` are command tools.
    command_tools: Vec<String>,
    /// Which of `tools` ask before each call.
    ask: Vec<String>,
    skills: Vec<String>,
    subagents: Vec<String>,
    /// Its MCP servers' names.
    mcp: Vec<String>,
    sandbox: Option<String>,
    role: Option<String>,
    /// The models a message may pick (the composer's model picker): the agent's first.
    models: Vec<String>,
}

/// A skill or a role.
#[derive(Clone, Debug, Serialize)]
struct NamedView {
    name: String,
    description: String,
}

/// The files a reload reads that the watched folders may not hold: the scripts of the agents
/// on the scripted model (`scripted/<path>`) and the `--env` file.
pub fn watched_files(agents: &AgentSet, env_file: Option<&Path>) -> Vec<PathBuf> {
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

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
