//! `flue run`: one message through an agent, in process, as a durable submission.
//!
//! The message is admitted to the conversation (agent + `--id`) through the same submission
//! runtime a server uses, then this process runs the conversation's work until its own
//! submission settles. A conversation another process is working on is waited for (or
//! refused with `--no-wait`); work a killed run left unsettled is recovered first.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use flue_core::{
    AgentRegistry, AgentRuntime, BatchBody, ConversationKey, ConversationStore, DEFAULT_SESSION,
    DeliveredMessage, DispatchOptions, DispatchReceipt, ErrorInfo, FlueError, Outcome, Record,
    SessionStore, Settlement, SqliteStore, Usage, WhenBusy, check_conversation_id, new_ulid,
};
use flue_host::{
    AgentSet, Env, HarnessOptions, Host, HostError, agent_name_of_file, find_root, open_store,
};
use serde::Serialize;
use tokio::sync::broadcast::error::RecvError;

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
    #[serde(rename = "submissionId", skip_serializing_if = "Option::is_none")]
    submission_id: Option<String>,
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
        submission_id: None,
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
    envelope.agent = prepared.key.agent.clone();
    envelope.id = Some(prepared.key.id.clone());
    let result = submit(&args, &prepared).await;
    let Prepared { host, runtime, .. } = prepared;
    let mut warnings = Vec::new();
    if let Err(err) = runtime.shutdown().await {
        warnings.push(format!("stopping the runtime: {err}"));
    }
    warnings.extend(host.close().await);
    for warning in warnings {
        eprintln!("warning: {warning}");
    }
    let (receipt, settled) = match result {
        Ok(done) => done,
        Err(err) => {
            envelope.error = Some(err.to_info());
            return finish(&args, &envelope, Exit::Failure, &err.to_string());
        }
    };
    envelope.submission_id = Some(receipt.submission_id);
    let Settled { settlement, usage } = settled;
    envelope.usage = Some(usage);
    match settlement.outcome {
        Outcome::Completed => {
            let text = settlement.text.unwrap_or_default();
            envelope.outcome = "completed";
            if !args.json {
                // Exactly one trailing newline, whatever the model ended its text with.
                println!("{}", text.trim_end_matches(['\n', '\r']));
            }
            envelope.message = Some(text);
            finish(&args, &envelope, Exit::Success, "")
        }
        Outcome::Aborted => {
            envelope.outcome = "aborted";
            envelope.error = Some(
                settlement
                    .error
                    .unwrap_or_else(|| FlueError::Aborted.to_info()),
            );
            finish(&args, &envelope, Exit::Interrupted, "aborted")
        }
        _ => {
            envelope.outcome = "failed";
            let error = settlement.error.unwrap_or_else(|| ErrorInfo {
                kind: "submission_failed".to_owned(),
                message: "the submission failed".to_owned(),
            });
            let message = error.message.clone();
            envelope.error = Some(error);
            finish(&args, &envelope, Exit::Failure, &message)
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

/// A conversation ready for the message: the host serving its agent and a running runtime.
struct Prepared {
    key: ConversationKey,
    host: Arc<Host>,
    runtime: AgentRuntime,
}

/// A settled submission and the usage of its model turns.
struct Settled {
    settlement: Settlement,
    usage: Usage,
}

/// Loads the workspace, checks the agent can run and starts the submission runtime:
/// everything that can fail before the message is admitted.
async fn prepare(args: &RunArgs) -> Result<Prepared, SetupError> {
    let (agents, agent_name) = load(args)?;
    agents.agent(&agent_name)?;
    let store = Arc::new(open_store(agents.root())?);
    let id = match &args.id {
        Some(id) => {
            check_conversation_id(id)?;
            id.clone()
        }
        None => new_ulid(),
    };
    let key = ConversationKey::new(&agent_name, &id);
    if args.new && conversation_exists(store.as_ref(), &key).await? {
        return Err(SetupError::ConversationExists { id });
    }
    let mut options = HarnessOptions::new();
    if let Some(model) = &args.model {
        options = options.with_model(model);
    }
    if let Some(kind) = args.sandbox {
        options = options.with_sandbox(kind);
    }
    if let Some(role) = &args.role {
        options = options.with_role(role);
    }
    let host = Arc::new(
        Host::with_store(agents, Arc::clone(&store) as Arc<dyn SessionStore>)
            .with_harness_options(options),
    );
    let warnings = match host.preflight(&agent_name).await {
        Ok(warnings) => warnings,
        Err(err) => {
            host.close().await;
            return Err(err.into());
        }
    };
    for warning in warnings {
        eprintln!("warning: {warning}");
    }
    let started = AgentRuntime::builder(store, Arc::clone(&host) as Arc<dyn AgentRegistry>)
        .with_poll_interval(POLL_INTERVAL)
        .with_reconcile_interval(Some(RECONCILE_INTERVAL))
        .start()
        .await;
    let runtime = match started {
        Ok(runtime) => runtime,
        Err(err) => {
            host.close().await;
            return Err(err.into());
        }
    };
    if args.id.is_none() {
        eprintln!("conversation id: {id}");
    }
    Ok(Prepared { key, host, runtime })
}

/// How often the CLI's runtime looks at other processes' writes.
const POLL_INTERVAL: Duration = Duration::from_millis(25);
/// How often it looks for conversations whose owner died (the one it waits on, in practice).
const RECONCILE_INTERVAL: Duration = Duration::from_millis(200);

/// Whether the conversation exists, as a managed conversation or as plain sessions under its
/// id.
async fn conversation_exists(
    store: &SqliteStore,
    key: &ConversationKey,
) -> Result<bool, FlueError> {
    Ok(store.conversation(key).await?.is_some() || !store.list(&key.id).await?.is_empty())
}

/// Admits the message, renders its activity, forwards Ctrl-C as an abort, and waits for the
/// settlement.
async fn submit(
    args: &RunArgs,
    prepared: &Prepared,
) -> Result<(DispatchReceipt, Settled), FlueError> {
    let runtime = &prepared.runtime;
    let key = &prepared.key;
    let mut events = runtime.subscribe();
    let when_busy = if args.no_wait {
        WhenBusy::Fail
    } else {
        WhenBusy::Queue
    };
    let receipt = runtime
        .dispatch(
            key,
            DeliveredMessage::user(&args.message),
            DispatchOptions::default().with_when_busy(when_busy),
        )
        .await?;
    // The message is durable from here: a crash leaves it to the next run to finish.
    eprintln!("submission: {}", receipt.submission_id);
    if let Some(info) = runtime.conversation(key).await?
        && let Some(owner) = info.owner
        && owner != runtime.owner_id()
    {
        eprintln!(
            "conversation {:?} is busy: owner {owner} is working on it; waiting for its turn \
             (--no-wait fails instead)",
            key.id
        );
    }
    let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
    let submission_id = receipt.submission_id.clone();
    let forward = tokio::spawn(async move {
        loop {
            match events.recv().await {
                Ok(event) if event.submission_id.as_deref() == Some(&submission_id) => {
                    if sender.send(event.event).is_err() {
                        break;
                    }
                }
                Ok(_) | Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => break,
            }
        }
    });
    let renderer = tokio::spawn(render::to_stderr(receiver));
    let ctrl_c = {
        let runtime = runtime.clone();
        let key = key.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("\ninterrupted: aborting (the conversation is kept)");
                let _ = runtime.abort(&key).await;
            }
        })
    };
    let settled = runtime.wait(&receipt.submission_id).await;
    ctrl_c.abort();
    forward.abort();
    let _ = renderer.await;
    let settlement = settled?;
    let usage = submission_usage(runtime, key, &receipt).await?;
    Ok((receipt, Settled { settlement, usage }))
}

/// The usage of the submission's model turns, summed from the stream (whichever process ran
/// them).
async fn submission_usage(
    runtime: &AgentRuntime,
    key: &ConversationKey,
    receipt: &DispatchReceipt,
) -> Result<Usage, FlueError> {
    let mut usage = Usage::default();
    let mut after = receipt.offset;
    loop {
        let page = runtime.read_stream(key, after, 256).await?;
        for batch in &page.batches {
            if batch.submission_id.as_deref() != Some(&receipt.submission_id) {
                continue;
            }
            if let BatchBody::Records { records, .. } = &batch.body {
                for stored in records {
                    if let Record::Assistant(message) = &stored.record {
                        usage += message.usage;
                    }
                }
            }
        }
        if page.up_to_date || page.next_offset <= after {
            break;
        }
        after = page.next_offset;
    }
    Ok(usage)
}

/// The agents for `args`: a source tree (the agent may be given as a file) or `--bundle`, with
/// the environment and `.env`; and the agent's name.
fn load(args: &RunArgs) -> Result<(AgentSet, String), SetupError> {
    if let Some(bundle) = &args.bundle {
        // The agent works in `--root` or the current directory.
        let root = match &args.root {
            Some(root) => resolve_root(Some(root))?,
            None => current_dir()?,
        };
        let agents = AgentSet::from_bundle(bundle, &root, env(args, &root)?)?;
        return Ok((agents, args.agent.clone()));
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
    Ok((agents, agent_name))
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
