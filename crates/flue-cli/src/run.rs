//! `flue run`: one message through an agent, in process.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use flue_build::{Diagnostics, SandboxKind, Workspace};
use flue_core::{
    DEFAULT_SESSION, ErrorInfo, FlueError, Harness, LocalSandbox, PromptOptions, PromptResponse,
    Session, SessionStore, Usage, new_ulid,
};
use serde::Serialize;

use crate::Exit;
use crate::args::RunArgs;
use crate::dotenv::EnvVars;
use crate::providers::Providers;
use crate::render;
use crate::workspace::{open_store, resolve_root};

/// Everything that can go wrong before the operation starts.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SetupError {
    /// No workspace root.
    #[error("{message}")]
    RootNotFound { message: String },
    /// The agent name matches no agent file.
    #[error("unknown agent {name:?}: no agents/{name}.md under {root} (agents: {known})")]
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
    /// The agent asks for a sandbox this build cannot provide yet.
    #[error(
        "agent {agent:?} asks for `sandbox: {kind}`, which this version of flue does not provide \
         yet; use `sandbox: local` (or omit it) to run in the workspace directory"
    )]
    SandboxUnavailable { agent: String, kind: SandboxKind },
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
            Self::SandboxUnavailable { .. } => "sandbox_unavailable",
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
    if let Some(renderer) = renderer {
        let _ = renderer.await;
    }
    match result {
        Ok(response) => {
            envelope.outcome = "completed";
            envelope.usage = Some(response.usage);
            if !args.json {
                println!("{}", response.text);
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
}

/// Loads the workspace and opens the conversation: everything that can fail before a model
/// call.
async fn prepare(args: &RunArgs) -> Result<Prepared, SetupError> {
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
    let env = match &args.env_file {
        Some(path) => EnvVars::load(path, true),
        None => EnvVars::load(&root.join(".env"), false),
    }
    .map_err(SetupError::EnvFile)?;

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
    let Some(agent_file) = workspace.agents.get(&agent_name) else {
        return Err(SetupError::UnknownAgent {
            known: workspace
                .agents
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", "),
            name: agent_name,
            root: root.display().to_string(),
        });
    };
    // Until the virtual, isolated and Daytona sandboxes land, agents run in the workspace
    // directory through the local sandbox; asking for another kind is an error, not a surprise.
    match agent_file.sandbox {
        None | Some(SandboxKind::Local) => {}
        Some(kind) => {
            return Err(SetupError::SandboxUnavailable {
                agent: agent_name,
                kind,
            });
        }
    }
    let mut config = workspace.agent_config(&agent_name)?;
    if let Some(model) = &args.model {
        config.model = Some(model.clone());
    }
    let mut providers = Providers::load(&root, &env, &workspace.config);
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
    let harness = Harness::builder(config)
        .with_instance_id(id.clone())
        .with_store(store)
        .with_providers(providers.registry)
        .with_sandbox(Arc::new(LocalSandbox::new(&root)?))
        .build()
        .await?;
    let session = harness.session(DEFAULT_SESSION).await?;
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
    })
}

/// `Some(path)` when the agent argument names a file rather than an agent.
fn agent_file_path(agent: &str) -> Option<PathBuf> {
    let looks_like_path = agent.contains('/') || agent.ends_with(".md");
    looks_like_path.then(|| PathBuf::from(agent))
}
