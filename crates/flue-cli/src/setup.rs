//! What a command that runs an agent reads before anything starts: the agents the command line
//! names (a workspace, one agent file or a bundle, over the environment and `.env`), the
//! message of `-m -` from stdin, and what can go wrong doing so.

use std::path::{Path, PathBuf};

use flue_core::FlueError;
use flue_host::{AgentSet, Env, HostError, agent_name_of_file, find_root};

use crate::args::RunArgs;
use crate::workspace::{canonical, current_dir, resolve_root};

/// Everything that can go wrong before the operation starts.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SetupError {
    /// Loading the workspace or opening the agent failed.
    #[error(transparent)]
    Host(#[from] HostError),
    /// `--new` with an id that exists.
    #[error("conversation {id:?} already exists; drop --new to continue it")]
    ConversationExists { id: String },
    /// A model its built-in provider's catalog does not list (see [`check_model`]).
    #[error("{message}")]
    UnknownModel { message: String },
}

impl From<FlueError> for SetupError {
    fn from(err: FlueError) -> Self {
        Self::Host(err.into())
    }
}

impl SetupError {
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Self::Host(err) => err.kind(),
            Self::ConversationExists { .. } => "conversation_exists",
            Self::UnknownModel { .. } => "unknown_model",
        }
    }
}

/// The agents for `args`: a source tree (the agent may be given as a file) or `--bundle`, with
/// the environment and `.env`; and the agent's name.
pub(crate) fn load(args: &RunArgs) -> Result<(AgentSet, String), SetupError> {
    if let Some(bundle) = &args.bundle {
        // The agent works in `--root` or the current directory.
        let root = match &args.root {
            Some(root) => resolve_root(Some(root))?,
            None => canonical(&current_dir()?, "the current directory")?,
        };
        let agents = AgentSet::from_bundle(bundle, &root, env(args, &root)?)?;
        return Ok((crate::trust::apply(agents), args.agent.clone()));
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
        None => {
            let (agents, warnings) =
                AgentSet::from_workspace_for_agent(&root, &args.agent, env(args, &root)?)?;
            for warning in warnings {
                eprintln!("warning: {}", crate::terminal::escape_controls(&warning));
            }
            (agents, args.agent.clone())
        }
    };
    Ok((crate::trust::apply(agents), agent_name))
}

/// Refuses a model its built-in provider's catalog does not know (most likely a typo, which
/// the provider would only answer with a 404 once the conversation exists), unless
/// `--allow-unknown-model`. Before anything is stored.
/// Also fails for an unknown agent.
pub(crate) fn check_model(
    agents: &AgentSet,
    agent_name: &str,
    args: &RunArgs,
) -> Result<(), SetupError> {
    let info = agents.agent(agent_name)?;
    if args.allow_unknown_model {
        return Ok(());
    }
    let model = args.model.as_deref().or(info.model.as_deref());
    match model.and_then(|model| agents.unknown_model(model)) {
        Some(message) => Err(SetupError::UnknownModel { message }),
        None => Ok(()),
    }
}

/// The process environment over `--env FILE` or the workspace's `.env`.
fn env(args: &RunArgs, root: &Path) -> Result<Env, HostError> {
    workspace_env(root, args.env_file.as_deref())
}

/// The process environment over `env_file` or `root`'s `.env`.
pub(crate) fn workspace_env(root: &Path, env_file: Option<&Path>) -> Result<Env, HostError> {
    // Variables that are not UTF-8 cannot be keys or URLs: left out rather than a panic.
    let vars = std::env::vars_os()
        .filter_map(|(key, value)| Some((key.into_string().ok()?, value.into_string().ok()?)));
    Env::for_root(vars, root, env_file)
}

/// `Some(path)` when the agent argument names a file rather than an agent: its folder made
/// canonical (so `hello.md`, `./agents/hello.md` and `../ws/agents/hello.md` find the same
/// workspace), its file name kept (a symlinked agent file keeps its own name).
fn agent_file_path(agent: &str) -> Option<PathBuf> {
    let looks_like_path = agent.contains('/') || agent.ends_with(".md");
    if !looks_like_path {
        return None;
    }
    let file = PathBuf::from(agent);
    let (Some(folder), Some(name)) = (file.parent(), file.file_name()) else {
        return Some(file);
    };
    let folder = if folder.as_os_str().is_empty() {
        Path::new(".")
    } else {
        folder
    };
    // A folder that does not exist: the agent file's own error (not found) says it better.
    Some(match std::fs::canonicalize(folder) {
        Ok(folder) => folder.join(name),
        Err(_) => file,
    })
}

/// The message of `-m -`: all of stdin (a message may be longer than one argument can be).
pub(crate) fn read_stdin_message() -> anyhow::Result<String> {
    use std::io::Read as _;
    let mut message = String::new();
    std::io::stdin()
        .read_to_string(&mut message)
        .map_err(|err| anyhow::anyhow!("cannot read the message from stdin (-m -): {err}"))?;
    if message.trim().is_empty() {
        anyhow::bail!("the message read from stdin (-m -) is empty");
    }
    // The newline `echo` or an editor leaves at the end is not part of the message.
    message.truncate(message.trim_end_matches(['\n', '\r']).len());
    Ok(message)
}

/// The JSON Schema `--result` gives for a new message (a file, or inline JSON starting with
/// `{`), checked; `None` without `--result` or when it answers a custom tool (`--confirm`).
pub(crate) fn result_schema(args: &RunArgs) -> Result<Option<serde_json::Value>, FlueError> {
    let Some(given) = args.result.as_deref() else {
        return Ok(None);
    };
    if args.confirm.is_some() {
        return Ok(None);
    }
    let invalid = |message: String| FlueError::InvalidRequest { message };
    let text = if given.trim_start().starts_with('{') {
        given.to_owned()
    } else {
        std::fs::read_to_string(given).map_err(|err| {
            invalid(format!(
                "--result {given}: cannot read the schema file ({err}); pass the path of a JSON \
                 Schema file, or the schema itself as JSON"
            ))
        })?
    };
    let schema: serde_json::Value = serde_json::from_str(&text).map_err(|err| {
        invalid(format!(
            "--result {given}: the schema is not JSON ({err}); write it as a JSON object such \
             as {{\"type\": \"object\", \"properties\": {{...}}}}"
        ))
    })?;
    flue_core::tool::check_schema(&schema)
        .map_err(|problem| invalid(format!("--result {given}: {problem}")))?;
    Ok(Some(schema))
}
