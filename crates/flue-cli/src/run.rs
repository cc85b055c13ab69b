//! `flue run`: one message through an agent, in process.

use std::path::{Path, PathBuf};

use flue_core::{
    DEFAULT_SESSION, ErrorInfo, FlueError, PromptOptions, PromptResponse, Session, Usage, new_ulid,
};
use flue_host::{
    AgentHarness, AgentSet, Env, HarnessOptions, Host, HostError, agent_name_of_file, find_root,
};
use serde::Serialize;

use crate::Exit;
use crate::args::RunArgs;
use crate::render;
use crate::workspace::{current_dir, resolve_root};

/// Everything that can go wrong before the operation starts.
#[derive(Debug, thiserror::Error)]
enum SetupError {
    /// Loading the workspace or opening the agent failed.
    #[error(transparent)]
    Host(#[from] HostError),
    /// `--new` with an id that exists.
    #[error("conversation {id:?} already exists; drop --new to continue it")]
    ConversationExists { id: String },
}

impl From<FlueError> for SetupError {
    fn from(err: FlueError) -> Self {
        Self::Host(err.into())
    }
}

impl SetupError {
    fn kind(&self) -> &'static str {
        match self {
            Self::Host(err) => err.kind(),
            Self::ConversationExists { .. } => "conversation_exists",
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
    drop(prepared.session);
    if let Some(renderer) = renderer {
        let _ = renderer.await;
    }
    let mut warnings = prepared.opened.close().await;
    warnings.extend(prepared.host.close().await);
    for warning in warnings {
        eprintln!("warning: {warning}");
    }
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
    /// The harness with its sandbox, closed when the run ends.
    opened: AgentHarness,
    /// The host, whose MCP servers are closed when the run ends.
    host: Host,
}

/// Loads the workspace and opens the conversation: everything that can fail before a model
/// call.
async fn prepare(args: &RunArgs) -> Result<Prepared, SetupError> {
    let (host, agent_name) = load(args)?;
    let agents = host.agents();
    agents.agent(&agent_name)?;
    let id = match &args.id {
        Some(id) => {
            if args.new && !host.store().list(id).await?.is_empty() {
                return Err(SetupError::ConversationExists { id: id.clone() });
            }
            id.clone()
        }
        None => new_ulid(),
    };
    let mut options = HarnessOptions::new();
    if let Some(model) = &args.model {
        options = options.with_model(model);
    }
    if let Some(kind) = args.sandbox {
        options = options.with_sandbox(kind);
    }
    let opened = match host.open_harness(&agent_name, &id, &options).await {
        Ok(opened) => opened,
        Err(err) => {
            host.close().await;
            return Err(err.into());
        }
    };
    let session = async {
        let session = opened.harness().session(DEFAULT_SESSION).await?;
        if let Some(role) = &args.role {
            session.set_role(Some(role))?;
        }
        Ok::<_, FlueError>(session)
    }
    .await;
    // Once the harness is open, every failure must close it.
    let session = match session {
        Ok(session) => session,
        Err(err) => {
            opened.close().await;
            host.close().await;
            return Err(err.into());
        }
    };
    for warning in opened.warnings() {
        eprintln!("warning: {warning}");
    }
    if args.id.is_none() {
        eprintln!("conversation id: {id}");
    }
    Ok(Prepared {
        id,
        agent: agent_name,
        session,
        opened,
        host,
    })
}

/// The host for `args`: a source tree (the agent may be given as a file) or `--bundle`, with
/// the environment and `.env`; and the agent's name.
fn load(args: &RunArgs) -> Result<(Host, String), SetupError> {
    if let Some(bundle) = &args.bundle {
        // The agent works in `--root` or the current directory.
        let root = match &args.root {
            Some(root) => resolve_root(Some(root))?,
            None => current_dir()?,
        };
        let agents = AgentSet::from_bundle(bundle, &root, env(args, &root)?)?;
        return Ok((Host::open(agents)?, args.agent.clone()));
    }
    let agent_file = agent_file_path(&args.agent);
    let root = match (&args.root, &agent_file) {
        (Some(root), _) => resolve_root(Some(root))?,
        (None, Some(file)) => file
            .parent()
            .and_then(find_root)
            .or_else(|| file.parent().map(Path::to_path_buf))
            .ok_or_else(|| HostError::RootNotFound {
                message: format!("cannot find a workspace for {}", file.display()),
            })?,
        (None, None) => resolve_root(None)?,
    };
    let (agents, agent_name) = match &agent_file {
        Some(file) => (
            AgentSet::from_agent_file(&root, file, env(args, &root)?)?,
            agent_name_of_file(file),
        ),
        None => (
            AgentSet::from_workspace(&root, env(args, &root)?)?,
            args.agent.clone(),
        ),
    };
    Ok((Host::open(agents)?, agent_name))
}

/// The process environment over `--env FILE` or the workspace's `.env`.
fn env(args: &RunArgs, root: &Path) -> Result<Env, HostError> {
    // Variables that are not UTF-8 cannot be keys or URLs: left out rather than a panic.
    let vars = std::env::vars_os()
        .filter_map(|(key, value)| Some((key.into_string().ok()?, value.into_string().ok()?)));
    Env::for_root(vars, root, args.env_file.as_deref())
}

/// `Some(path)` when the agent argument names a file rather than an agent.
fn agent_file_path(agent: &str) -> Option<PathBuf> {
    let looks_like_path = agent.contains('/') || agent.ends_with(".md");
    looks_like_path.then(|| PathBuf::from(agent))
}
