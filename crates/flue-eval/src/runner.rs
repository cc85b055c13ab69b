//! Running cases: each repetition of each case in a conversation of its own, through the same
//! durable runtime `flue run` uses (so every case is a stored conversation that
//! `flue session show` opens), a bounded number at once; then its assertions, scorers and
//! judges; the run saved after every finished case.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flue_core::{
    AgentRuntime, BatchBody, CancellationToken, ConversationKey, DeliveredMessage, DispatchOptions,
    ErrorInfo, FlueError, MessageOptions, Offset, Outcome,
};
use flue_host::{
    AgentSet, App, ConversationSandboxes, HarnessOptions, HostError, Preflight, StoreChoice,
};
use futures::StreamExt as _;

use crate::assertion::{self, Check};
use crate::case_file::Case;
use crate::cassette::{Cassette, CassetteError};
use crate::report::{CaseRun, EvalRun, case_key};
use crate::scorer;
use crate::store::{RunStore, RunStoreError};
use crate::transcript::Transcript;

/// How to run (plain settings; start from `EvalOptions::default()`).
#[derive(Clone, Debug)]
pub struct EvalOptions {
    /// Case runs at once (at least 1).
    pub concurrency: usize,
    /// Runs of each case (at least 1).
    pub repeat: u32,
    /// The lowest overall pass rate that passes the run (0 to 1).
    pub threshold: f64,
    /// The run compared against, recorded with the run.
    pub baseline: Option<String>,
    /// The environment command scorers get (`PATH`, `HOME`); the caller reads it.
    pub scorer_env: Vec<(String, String)>,
    /// Stops the run: no case run starts after it fires, the running ones are aborted (their
    /// conversations settle `aborted`) and left out of the results, and the run is stored
    /// unfinished, for `--resume`.
    pub cancel: CancellationToken,
    /// Records the run's model traffic into, or replays it from, this cassette.
    pub cassette: Option<Arc<Cassette>>,
    /// The store the cases' conversations and the run are kept in (default: the workspace's
    /// `.flue/flue.db`).
    pub store: StoreChoice,
}

impl Default for EvalOptions {
    fn default() -> Self {
        Self {
            concurrency: 1,
            repeat: 1,
            threshold: 1.0,
            baseline: None,
            scorer_env: Vec::new(),
            cancel: CancellationToken::new(),
            cassette: None,
            store: StoreChoice::Workspace,
        }
    }
}

/// Told about the run as it goes (the CLI draws its progress from it).
pub trait Progress: Send + Sync {
    /// A case run started.
    fn started(&self, case: &Case, repetition: u32);
    /// A case run finished; `done` of `total` have.
    fn finished(&self, result: &CaseRun, done: usize, total: usize);
}

/// Why an eval could not run at all (a failing case is a result, not an error).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EvalError {
    /// The workspace or an agent could not be opened.
    #[error(transparent)]
    Host(#[from] HostError),
    /// The run could not be stored.
    #[error(transparent)]
    Store(#[from] RunStoreError),
    /// The cassette could not be written.
    #[error(transparent)]
    Cassette(#[from] CassetteError),
    /// A case cannot run as written (say, it seeds files into the workspace itself).
    #[error("{0}")]
    Case(String),
}

/// Runs `cases` of the workspace `agents` comes from and stores the run in its store.
/// `resume` continues a run that was cut short: its finished case runs are kept and the
/// missing ones run.
pub async fn run(
    mut agents: AgentSet,
    cases: &[Case],
    options: &EvalOptions,
    resume: Option<EvalRun>,
    progress: &dyn Progress,
) -> Result<EvalRun, EvalError> {
    refuse_seeding_the_workspace(&agents, cases)?;
    if let Some(cassette) = &options.cassette {
        agents.wrap_providers(|provider| cassette.wrap(provider));
    }
    let root = agents.root().to_path_buf();
    let mut run = resume.unwrap_or_else(|| EvalRun {
        id: flue_core::util::new_ulid(),
        started_at: flue_core::util::now_ms(),
        finished_at: None,
        repeat: options.repeat.max(1),
        threshold: options.threshold,
        baseline: options.baseline.clone(),
        cases: cases
            .iter()
            .map(|case| case_key(&case.file, &case.name))
            .collect(),
        results: Vec::new(),
    });
    run.finished_at = None;
    let done: BTreeSet<(String, u32)> = run.done().into_iter().collect();
    let jobs: Vec<(&Case, u32)> = cases
        .iter()
        .flat_map(|case| (1..=run.repeat).map(move |repetition| (case, repetition)))
        .filter(|(case, repetition)| {
            !done.contains(&(case_key(&case.file, &case.name), *repetition))
        })
        .collect();
    let sandboxes = Arc::new(ConversationSandboxes::new());
    let used: BTreeSet<&str> = cases.iter().map(|case| case.agent.as_str()).collect();
    let preflight = match used.iter().next() {
        Some(agent) if used.len() == 1 => Preflight::Agent((*agent).to_owned()),
        _ => Preflight::All,
    };
    let app = App::builder(agents)
        .with_store(options.store.clone())
        .with_harness_options(
            HarnessOptions::new().with_conversation_sandboxes(Arc::clone(&sandboxes)),
        )
        .with_preflight(preflight)
        .start()
        .await?;
    if let Some(failed) = app
        .checks()
        .iter()
        .find(|check| used.contains(check.agent.as_str()) && check.error.is_some())
    {
        let message = format!(
            "agent `{}` cannot run: {}",
            failed.agent,
            failed.error.clone().unwrap_or_default()
        );
        let _ = app.close().await;
        return Err(HostError::from(FlueError::config(message)).into());
    }
    // The run is a record of the store its cases' conversations are in.
    let store = RunStore::new(Arc::clone(&app.store().store).eval_run_store(), &root);
    if let Err(err) = store.save(&run).await {
        let _ = app.close().await;
        return Err(err.into());
    }
    let context = Context {
        app: &app,
        sandboxes: &sandboxes,
        root: root.clone(),
        run_id: run.id.clone(),
        options,
    };
    let total = jobs.len() + run.results.len();
    let cancel = &options.cancel;
    let context = &context;
    let mut finished = futures::stream::iter(jobs)
        .map(|(case, repetition)| async move {
            // Stopped: what has not started, does not.
            if cancel.is_cancelled() {
                return None;
            }
            progress.started(case, repetition);
            let result = context.run_case(case, repetition).await;
            // Cut short by the stop: not a result, it runs again on `--resume`.
            (!cancel.is_cancelled()).then_some(result)
        })
        .buffer_unordered(options.concurrency.max(1));
    let mut saved = Ok(());
    while let Some(result) = finished.next().await {
        let Some(result) = result else {
            continue;
        };
        run.results.push(result);
        if let Some(last) = run.results.last() {
            progress.finished(last, run.results.len(), total);
        }
        // Every finished case is on disk before the next is reported.
        if let Err(err) = store.save(&run).await {
            saved = Err(err);
        }
    }
    drop(finished);
    let _ = app.close().await;
    if let Some(cassette) = &options.cassette {
        cassette.save()?;
    }
    saved?;
    if !cancel.is_cancelled() {
        run.finished_at = Some(flue_core::util::now_ms());
        store.save(&run).await?;
    }
    Ok(run)
}

/// A case's `files:` would be written into the workspace itself when its agent runs in the
/// `local` sandbox: refused before anything runs.
fn refuse_seeding_the_workspace(agents: &AgentSet, cases: &[Case]) -> Result<(), EvalError> {
    let workspace = agents.workspace();
    for case in cases.iter().filter(|case| !case.files.is_empty()) {
        let kind = workspace
            .agents
            .get(&case.agent)
            .and_then(|file| file.sandbox)
            .or_else(|| {
                workspace
                    .config
                    .sandbox
                    .as_ref()
                    .map(|settings| settings.kind)
            })
            .unwrap_or_default();
        if kind == flue_build::SandboxKind::Local {
            return Err(EvalError::Case(format!(
                "{}:{}: case `{}` writes `files:` into its sandbox, but agent `{}` runs in the \
                 local sandbox, the workspace itself: run the agent in the virtual sandbox for \
                 evals (`sandbox: virtual`), or drop the case's `files:`",
                case.file, case.line, case.name, case.agent
            )));
        }
    }
    Ok(())
}

/// What every case run shares.
struct Context<'a> {
    app: &'a App,
    sandboxes: &'a Arc<ConversationSandboxes>,
    root: PathBuf,
    run_id: String,
    options: &'a EvalOptions,
}

impl Context<'_> {
    async fn run_case(&self, case: &Case, repetition: u32) -> CaseRun {
        let id = format!(
            "eval-{}-{}-{repetition}",
            self.run_id.to_ascii_lowercase(),
            case.name
        );
        let key = ConversationKey::new(&case.agent, &id);
        let files = case
            .files
            .iter()
            .map(|(path, text)| (path.clone(), text.clone().into_bytes()))
            .collect();
        self.sandboxes.seed(&key.instance_id(), files);
        let mut transcript = Transcript {
            case: case.name.clone(),
            file: case.file.clone(),
            agent: case.agent.clone(),
            conversation: id.clone(),
            repetition,
            messages: case.messages.clone(),
            ..Transcript::default()
        };
        let runtime = self.app.runtime();
        let started = Instant::now();
        let mut timed_out = false;
        let sent = {
            let sending = send_all(runtime, &key, case, &mut transcript);
            tokio::pin!(sending);
            let limit = case.timeout_ms.map_or(Duration::MAX, Duration::from_millis);
            tokio::select! {
                sent = &mut sending => sent,
                // Either way the conversation's work stops and settles `aborted`; its log
                // stays whole.
                () = self.options.cancel.cancelled() => {
                    let _ = runtime.abort(&key).await;
                    sending.await
                }
                () = tokio::time::sleep(limit) => {
                    timed_out = true;
                    let _ = runtime.abort(&key).await;
                    sending.await
                }
            }
        };
        if let Err(err) = sent {
            transcript.outcome = "failed".to_owned();
            transcript.error = Some(err.to_info());
        }
        transcript.latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        if let Err(err) = read_records(runtime, &key, &mut transcript).await {
            transcript.error.get_or_insert(err.to_info());
        }
        self.read_files(case, &key, &mut transcript).await;
        let mut checks = assertion::check(&case.expect, &transcript);
        if let Some(limit) = case.timeout_ms.filter(|_| timed_out) {
            checks.insert(
                0,
                Check::new(
                    "timeout_ms",
                    false,
                    format!("the case ran longer than {limit} ms and was aborted"),
                ),
            );
        }
        checks.extend(self.scores(case, &transcript).await);
        CaseRun {
            file: case.file.clone(),
            case: case.name.clone(),
            repetition,
            agent: case.agent.clone(),
            conversation: id,
            passed: checks.iter().all(|check| check.passed),
            outcome: transcript.outcome.clone(),
            checks,
            reply: transcript.reply.clone(),
            turns: transcript.turns,
            tokens: transcript.tokens(),
            cost_usd: transcript.cost_usd(),
            latency_ms: transcript.latency_ms,
        }
    }

    /// The files `expect.files` names, from the sandbox the case ran in (released after).
    async fn read_files(&self, case: &Case, key: &ConversationKey, transcript: &mut Transcript) {
        let sandbox = self.sandboxes.take(&key.instance_id());
        for file in &case.expect.files {
            let text = match &sandbox {
                Some(sandbox) => sandbox.read_file(&file.path).await.ok(),
                None => None,
            };
            transcript.files.insert(file.path.clone(), text);
        }
    }

    async fn scores(&self, case: &Case, transcript: &Transcript) -> Vec<Check> {
        let mut checks = Vec::new();
        for command in &case.expect.scorers {
            checks.push(
                scorer::run_command(command, &self.root, &self.options.scorer_env, transcript)
                    .await,
            );
        }
        for judge in &case.expect.judges {
            checks.push(scorer::run_judge(judge, &self.app.host().agents(), transcript).await);
        }
        checks
    }
}

/// Sends the case's messages one after the other, each once the last settled; stops at the
/// first that does not complete.
async fn send_all(
    runtime: &AgentRuntime,
    key: &ConversationKey,
    case: &Case,
    transcript: &mut Transcript,
) -> Result<(), FlueError> {
    for (message_idx, message) in case.messages.iter().enumerate() {
        let mut delivered = DeliveredMessage::user(message).with_options(message_options(case));
        if let Some(schema) = &case.result {
            delivered = delivered.with_result(schema.clone());
        }
        if message_idx == 0
            && let Some(data) = &case.initial_data
        {
            delivered = delivered.with_initial_data(data.clone());
        }
        let receipt = runtime
            .dispatch(key, delivered, DispatchOptions::default())
            .await?;
        let info = runtime.wait_idle(&receipt.submission_id).await?;
        let Some(settlement) = info.settlement else {
            // Paused on a decision nobody gives in an eval: settled as interrupted.
            transcript.outcome = "requires_action".to_owned();
            transcript.error = Some(ErrorInfo {
                kind: "requires_action".to_owned(),
                message: "the agent paused for a decision (a confirmation, a custom tool's \
                          result, a question); evals answer none: allow the tool in the \
                          agent's permissions"
                    .to_owned(),
            });
            let _ = runtime.interrupt(key, None).await;
            return Ok(());
        };
        transcript.outcome = outcome_name(&settlement.outcome).to_owned();
        transcript.error = settlement.error;
        transcript.data = settlement.data;
        if settlement.outcome != Outcome::Completed {
            return Ok(());
        }
        let reply = settlement.text.unwrap_or_default();
        transcript.replies.push(reply.clone());
        transcript.reply = reply;
    }
    Ok(())
}

fn message_options(case: &Case) -> MessageOptions {
    let mut options = MessageOptions::default();
    options.model.clone_from(&case.model);
    options.role.clone_from(&case.role);
    options.thinking = case.thinking;
    options
}

fn outcome_name(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Completed => "completed",
        Outcome::Aborted => "aborted",
        _ => "failed",
    }
}

/// Every record of the conversation, every session, in stream order.
async fn read_records(
    runtime: &AgentRuntime,
    key: &ConversationKey,
    transcript: &mut Transcript,
) -> Result<(), FlueError> {
    let mut after = Offset::START;
    loop {
        let page = runtime.read_stream(key, after, 256).await?;
        for batch in &page.batches {
            if let BatchBody::Records {
                records, session, ..
            } = &batch.body
            {
                transcript.add_records(session, records.iter().map(|stored| &stored.record));
            }
        }
        if page.up_to_date || page.next_offset <= after {
            return Ok(());
        }
        after = page.next_offset;
    }
}
