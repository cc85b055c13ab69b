//! `flue run`: one message through an agent, in process.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use flue_build::{Bundle, Diagnostics, SandboxSettings, Workspace};
use flue_core::{
    DEFAULT_SESSION, ErrorInfo, FlueError, Harness, PromptOptions, PromptResponse,
    ScriptedProvider, Session, SessionStore, Usage, new_ulid,
};
use serde::Serialize;

use crate::Exit;
use crate::args::RunArgs;
use crate::dotenv::EnvVars;
use crate::mcp::McpServers;
use crate::providers::Providers;
use crate::render;
use crate::sandbox::{self, OpenSandbox};
use crate::workspace::{open_store, resolve_root};

/// Everything that can go wrong before the operation starts.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SetupError {
    /// No workspace root.
    #[error("{message}")]
    RootNotFound { message: String },
    /// The agent name matches no agent file.
    #[error("unknown agent {name:?}: no agents/{name}.md in {root} (agents: {known})")]
    UnknownAgent {
        name: String,
        root: String,
        known: String,
    },
    /// `--new` with an id that exists.
    #[error("conversation {id:?} already exists; drop --new to continue it")]
    ConversationExists { id: String },
    /// The env file is unreadable or malformed.
    #[error("{0:#}")]
    EnvFile(anyhow::Error),
    /// Workspace validation failed.
    #[error("{0}")]
    Diagnostics(Diagnostics),
    /// A runtime error.
    #[error(transparent)]
    Core(#[from] FlueError),
}

impl SetupError {
    fn kind(&self) -> &'static str {
        match self {
            Self::RootNotFound { .. } => "workspace_not_found",
            Self::UnknownAgent { .. } => "unknown_agent",
            Self::ConversationExists { .. } => "conversation_exists",
            Self::EnvFile(_) => "invalid_env_file",
            Self::Diagnostics(_) => "invalid_config",
            Self::Core(err) => err.kind(),
        }
    }
}

/// The one JSON object `--json` prints.
#[derive(Debug, Serialize)]
struct Envelope {
    id: Option<String>,
    agent: String,
    session: &'static str,
    outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ErrorInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Usage>,
}

/// Runs `flue run`.
pub(crate) async fn run(args: RunArgs) -> anyhow::Result<Exit> {
    let mut envelope = Envelope {
        id: args.id.clone(),
        agent: args.agent.clone(),
        session: DEFAULT_SESSION,
        outcome: "error",
        message: None,
        error: None,
        usage: None,
    };
    let prepared = match prepare(&args).await {
        Ok(prepared) => prepared,
        Err(err) => {
            envelope.error = Some(ErrorInfo {
                kind: err.kind().to_owned(),
                message: err.to_string(),
            });
            return finish(&args, &envelope, Exit::Failure, &err.to_string());
        }
    };
    envelope.agent = prepared.agent;
    envelope.id = Some(prepared.id);

    let mut handle = prepared
        .session
        .prompt(&args.message, PromptOptions::default());
    // `--role` is the session's default role for this run (set in `prepare`): never stored.
    let renderer = handle
        .take_events()
        .map(|events| tokio::spawn(render::to_stderr(events)));
    let cancel = handle.cancel_token();
    let ctrl_c = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("\ninterrupted: aborting (the conversation is kept)");
            cancel.cancel();
        }
    });
    let result: Result<PromptResponse, FlueError> = handle.await;
    ctrl_c.abort();
    prepared.mcp.close().await;
    if let Some(renderer) = renderer {
        let _ = renderer.await;
    }
    prepared.sandbox.close().await;
    match result {
        Ok(response) => {
            envelope.outcome = "completed";
            envelope.usage = Some(response.usage);
            if !args.json {
                // Exactly one trailing newline, whatever the model ended its text with.
                println!("{}", response.text.trim_end_matches(['\n', '\r']));
            }
            envelope.message = Some(response.text);
            finish(&args, &envelope, Exit::Success, "")
        }
        Err(FlueError::Aborted) => {
            envelope.outcome = "aborted";
            envelope.error = Some(FlueError::Aborted.to_info());
            finish(&args, &envelope, Exit::Interrupted, "aborted")
        }
        Err(err) => {
            envelope.outcome = "failed";
            envelope.error = Some(err.to_info());
            finish(&args, &envelope, Exit::Failure, &err.to_string())
        }
    }
}

/// Prints the JSON envelope or the error line, and returns the exit code.
fn finish(args: &RunArgs, envelope: &Envelope, exit: Exit, error: &str) -> anyhow::Result<Exit> {
    if args.json {
        println!("{}", serde_json::to_string(envelope)?);
    } else if exit != Exit::Success {
        eprintln!("error: {error}");
    }
    Ok(exit)
}

/// An opened conversation, ready for the message.
struct Prepared {
    id: String,
    agent: String,
    session: Session,
    /// The agent's MCP servers, open until the run ends.
    mcp: McpServers,
    /// The agent's sandbox, closed (Daytona: deleted) when the run ends.
    sandbox: OpenSandbox,
}

/// Loads the workspace and opens the conversation: everything that can fail before a model
/// call.
async fn prepare(args: &RunArgs) -> Result<Prepared, SetupError> {
    let loaded = match &args.bundle {
        Some(bundle) => load_bundle(args, bundle)?,
        None => load_source(args)?,
    };
    let Loaded {
        root,
        workspace,
        agent_name,
        scripts,
    } = loaded;
    let env = match &args.env_file {
        Some(path) => EnvVars::load(path, true),
        None => EnvVars::load(&root.join(".env"), false),
    }
    .map_err(SetupError::EnvFile)?;
    let Some(agent_file) = workspace.agents.get(&agent_name) else {
        return Err(SetupError::UnknownAgent {
            known: workspace
                .agents
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", "),
            name: agent_name,
            root: args
                .bundle
                .as_deref()
                .unwrap_or(&root)
                .display()
                .to_string(),
        });
    };
    let mut sandbox_settings = SandboxSettings::resolve(
        workspace.config.sandbox.as_ref(),
        agent_file.sandbox,
        &agent_file.sandbox_options,
    );
    if let Some(kind) = args.sandbox {
        sandbox_settings = sandbox_settings.with_kind(kind);
    }
    let mut config = workspace.agent_config(&agent_name)?;
    if let Some(model) = &args.model {
        config.model = Some(model.clone());
    }
    let mut providers = Providers::load(&root, &env, &workspace.config);
    bundle_scripts(&mut providers, &root, &scripts)?;
    providers.check(config.model.as_deref())?;
    let warning = config
        .model
        .as_deref()
        .and_then(|model| providers.warning(model));

    let store = Arc::new(open_store(&root)?);
    let id = match &args.id {
        Some(id) => {
            if args.new && !store.list(id).await?.is_empty() {
                return Err(SetupError::ConversationExists { id: id.clone() });
            }
            id.clone()
        }
        None => new_ulid(),
    };
    let sandbox = sandbox::open(&sandbox_settings, &root, &env).await?;
    let mcp = match McpServers::connect(&workspace, &agent_name, &env, &mut config).await {
        Ok(mcp) => mcp,
        Err(err) => {
            sandbox.close().await;
            return Err(err.into());
        }
    };
    let opened = async {
        let harness = Harness::builder(config)
            .with_instance_id(id.clone())
            .with_store(store)
            .with_providers(providers.registry)
            .with_sandbox(Arc::clone(&sandbox.sandbox))
            .with_workspace_context(workspace.context.clone())
            .with_workspace_skills(workspace.harness_skills())
            .with_roles(workspace.harness_roles())
            .build()
            .await?;
        let session = harness.session(DEFAULT_SESSION).await?;
        if let Some(role) = &args.role {
            session.set_role(Some(role))?;
        }
        Ok::<_, FlueError>(session)
    }
    .await;
    // Once the sandbox and MCP servers are open, every failure must close them.
    let session = match opened {
        Ok(session) => session,
        Err(err) => {
            mcp.close().await;
            sandbox.close().await;
            return Err(err.into());
        }
    };
    if let Some(warning) = warning {
        eprintln!("warning: {warning}");
    }
    if args.id.is_none() {
        eprintln!("conversation id: {id}");
    }
    Ok(Prepared {
        id,
        agent: agent_name,
        session,
        mcp,
        sandbox,
    })
}

/// A validated workspace, where the agent works, and the scripts a bundle carries.
struct Loaded {
    root: PathBuf,
    workspace: Workspace,
    agent_name: String,
    scripts: BTreeMap<String, Vec<u8>>,
}

/// The workspace from the source tree (the agent may be given as a file).
fn load_source(args: &RunArgs) -> Result<Loaded, SetupError> {
    let agent_file = agent_file_path(&args.agent);
    let root = match (&args.root, &agent_file) {
        (Some(root), _) => resolve_root(Some(root))?,
        (None, Some(file)) => file
            .parent()
            .and_then(crate::workspace::find_root)
            .or_else(|| file.parent().map(Path::to_path_buf))
            .ok_or_else(|| SetupError::RootNotFound {
                message: format!("cannot find a workspace for {}", file.display()),
            })?,
        (None, None) => resolve_root(None)?,
    };
    let workspace = match &agent_file {
        Some(file) => Workspace::load_with_agent_file(&root, file),
        None => Workspace::load(&root),
    }
    .map_err(SetupError::Diagnostics)?;
    let agent_name = match &agent_file {
        Some(file) => file
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_owned(),
        None => args.agent.clone(),
    };
    Ok(Loaded {
        root,
        workspace,
        agent_name,
        scripts: BTreeMap::new(),
    })
}

/// The workspace from a bundle; the agent works in `--root` or the current directory.
fn load_bundle(args: &RunArgs, bundle: &Path) -> Result<Loaded, SetupError> {
    let root = match &args.root {
        Some(root) => resolve_root(Some(root))?,
        None => current_dir()?,
    };
    let bundle = Bundle::read(bundle).map_err(SetupError::Diagnostics)?;
    Ok(Loaded {
        root,
        workspace: bundle.workspace().clone(),
        agent_name: args.agent.clone(),
        scripts: bundle.scripts().clone(),
    })
}

pub(crate) fn current_dir() -> Result<PathBuf, SetupError> {
    #[allow(
        clippy::disallowed_methods,
        reason = "the CLI is where the process cwd is read"
    )]
    std::env::current_dir().map_err(|err| SetupError::RootNotFound {
        message: format!("cannot read the current directory: {err}"),
    })
}

/// Gives the scripted provider the scripts a bundle carries (a source tree has none).
pub(crate) fn bundle_scripts(
    providers: &mut Providers,
    root: &Path,
    scripts: &BTreeMap<String, Vec<u8>>,
) -> Result<(), FlueError> {
    if scripts.is_empty() {
        return Ok(());
    }
    let mut scripted = ScriptedProvider::new(root);
    for (model, source) in scripts {
        scripted = scripted.with_script(model, &String::from_utf8_lossy(source))?;
    }
    providers.registry.insert(Arc::new(scripted));
    Ok(())
}

/// `Some(path)` when the agent argument names a file rather than an agent.
fn agent_file_path(agent: &str) -> Option<PathBuf> {
    let looks_like_path = agent.contains('/') || agent.ends_with(".md");
    looks_like_path.then(|| PathBuf::from(agent))
}
