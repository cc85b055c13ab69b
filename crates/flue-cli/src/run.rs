//! `flue run`: one message through an agent, in process, as a durable submission.
//!
//! The message is admitted to the conversation (agent + `--id`) through the same submission
//! runtime a server uses, then this process runs the conversation's work until its own
//! submission settles. A conversation another process is working on is waited for (or
//! refused with `--no-wait`); work a killed run left unsettled is recovered first.

use std::io::IsTerminal as _;
use std::sync::Arc;

use flue_build::SandboxKind;
use flue_core::submission::RuntimeEvent;
use flue_core::{
    ActionDecision, AgentRuntime, BatchBody, ConversationKey, DEFAULT_SESSION, DeliveredMessage,
    DispatchOptions, ErrorInfo, FlueError, MessageOptions, Offset, Outcome, Record, Settlement,
    StopReason, Usage, record::PendingAction, store::DynConversationStore, submission::WhenBusy,
    util::new_ulid,
};
use flue_host::{AgentSet, App, HarnessOptions, Host, HostError, Preflight, StoreChoice};
use serde::Serialize;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};

use crate::Exit;
use crate::args::RunArgs;
use crate::interrupt::{Interrupt, Interrupts};
use crate::pauses::Answerer;
use crate::render::{self, Renderer, Target};
use crate::setup::{SetupError, load, read_stdin_message};
use crate::stdout::outln;
use crate::terminal::Output;

/// The one JSON object `--json` prints.
#[derive(Debug, Serialize)]
struct Envelope {
    id: Option<String>,
    agent: String,
    session: &'static str,
    /// The skill the message ran (`--skill`).
    #[serde(skip_serializing_if = "Option::is_none")]
    skill: Option<String>,
    #[serde(rename = "submissionId", skip_serializing_if = "Option::is_none")]
    submission_id: Option<String>,
    outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ErrorInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Usage>,
    /// Why the last model turn of the agent's session ended (`end_turn`, `refusal`, ...).
    #[serde(rename = "stopReason", skip_serializing_if = "Option::is_none")]
    stop_reason: Option<String>,
    /// The model's refusal in its own words, when its last turn refused and said why.
    #[serde(skip_serializing_if = "Option::is_none")]
    refusal: Option<String>,
    /// With the outcome `requires_action`: the tool calls that wait for a decision.
    #[serde(rename = "pendingActions", skip_serializing_if = "Vec::is_empty")]
    pending_actions: Vec<PendingAction>,
    /// The validated structured result (`--result`, or the agent's `result:`).
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<serde_json::Value>,
}

/// Runs `flue run`.
pub(crate) async fn run(mut args: RunArgs) -> anyhow::Result<Exit> {
    if args.message.as_deref() == Some("-") {
        args.message = Some(read_stdin_message()?);
    }
    if args.dry_run {
        return crate::tools::dry_run(&args).await;
    }
    let mut envelope = Envelope {
        id: args.id.clone(),
        agent: args.agent.clone(),
        session: DEFAULT_SESSION,
        skill: args.skill.clone(),
        submission_id: None,
        outcome: "error",
        message: None,
        error: None,
        usage: None,
        stop_reason: None,
        refusal: None,
        pending_actions: Vec::new(),
        data: None,
    };
    if let Err(err) = crate::setup::result_schema(&args) {
        envelope.error = Some(err.to_info());
        let output = Output::new(flue_core::Redactor::default());
        return finish(&args, &output, &envelope, Exit::Failure, &err.to_string());
    }
    // `--skill` is an option of the message, admitted and fenced like any other.
    let chosen = match message_options(&args) {
        Ok(chosen) => chosen,
        Err(err) => {
            envelope.error = Some(ErrorInfo {
                kind: "invalid_request".to_owned(),
                message: err.to_string(),
            });
            let output = Output::new(flue_core::Redactor::default());
            return finish(&args, &output, &envelope, Exit::Failure, &err.to_string());
        }
    };
    // Ctrl-C and SIGTERM (what `timeout`, systemd and containers send) are watched from the
    // start: one arriving during setup ends the run before the message is sent.
    let mut interrupts = Interrupts::watch();
    let prepared = tokio::select! {
        prepared = prepare(&args) => prepared,
        interrupt = interrupts.next() => {
            envelope.outcome = "aborted";
            envelope.error = Some(FlueError::Aborted.to_info());
            let output = Output::new(flue_core::Redactor::default());
            return finish(&args, &output, &envelope, interrupt.exit(), "aborted");
        }
    };
    let prepared = match prepared {
        Ok(prepared) => prepared,
        Err(err) => {
            envelope.error = Some(ErrorInfo {
                kind: err.kind().to_owned(),
                message: err.to_string(),
            });
            let output = Output::new(flue_core::Redactor::default());
            let mut message = err.to_string();
            if let Some(hint) = model_hint(&args, &err) {
                message = format!("{message}\nhint: {hint}");
            }
            return finish(&args, &output, &envelope, Exit::Failure, &message);
        }
    };
    envelope.agent = prepared.key.agent.clone();
    envelope.id = Some(prepared.key.id.clone());
    // Everything printed from here on is redacted of the secrets the environment holds.
    let output = Output::new(
        flue_core::Redactor::new(prepared.host.agents().env().secrets()).unwrap_or_default(),
    );
    let started_at = flue_core::util::now_ms();
    let result = submit_with(
        &args,
        chosen,
        &prepared,
        &output,
        &mut interrupts,
        Typing::Ignored,
    )
    .await;
    let Prepared {
        host,
        app,
        key: prepared_key,
    } = prepared;
    // The runtime stopped, the sandboxes and MCP servers closed.
    let warnings = app.close().await;
    let sampled = host.agents().mcp_sampling_usage();
    if sampled.input_tokens + sampled.output_tokens > 0 {
        eprintln!(
            "mcp sampling used the agent's model: {} input and {} output tokens",
            sampled.input_tokens, sampled.output_tokens
        );
    }
    for warning in warnings {
        eprintln!("warning: {}", output.stderr_text(&warning));
    }
    let (started, finished, interrupt, streamed) = match result {
        Ok(done) => done,
        Err(err) => {
            envelope.error = Some(err.to_info());
            return finish(&args, &output, &envelope, Exit::Failure, &err.to_string());
        }
    };
    envelope.submission_id = Some(started.submission_id);
    let (settlement, usage) = match finished {
        Finished::Settled(Settled {
            settlement,
            usage,
            last_stop,
        }) => {
            if let Some((reason, refusal)) = last_stop {
                envelope.stop_reason = Some(reason.as_str().to_owned());
                envelope.refusal = refusal;
            }
            (settlement, usage)
        }
        Finished::Waiting { pending, usage } => {
            envelope.outcome = "requires_action";
            envelope.usage = Some(usage);
            let hint = crate::pauses::resume_hint(
                &prepared_agent(&envelope),
                envelope.id.as_deref().unwrap_or_default(),
                &pending,
            );
            envelope.pending_actions = pending;
            if !args.json && !args.jsonl {
                eprintln!("{}", output.stderr_text(&hint));
            }
            return finish(&args, &output, &envelope, Exit::ActionRequired, "");
        }
    };
    if args.verbose && !args.json {
        eprintln!("[submission: {}]", render::usage_text(&usage));
    } else if !args.json && !args.jsonl && !args.quiet && std::io::stderr().is_terminal() {
        // The usage line a person at a terminal sees after the reply (`-q` leaves it out).
        let line = format!("[{}]", render::usage_text(&usage));
        eprintln!(
            "{}",
            crate::term::Style::DIM.paint(&line, crate::term::stderr_colored())
        );
    }
    envelope.usage = Some(usage);
    match settlement.outcome {
        Outcome::Completed => {
            let text = settlement.text.unwrap_or_default();
            envelope.outcome = "completed";
            // A structured result is what stdout gets: the validated JSON alone.
            if let Some(data) = settlement.data {
                if !args.json && !args.jsonl {
                    outln!(
                        "{}",
                        serde_json::to_string_pretty(&data).unwrap_or_default()
                    )?;
                }
                envelope.data = Some(data);
                envelope.message = Some(text);
                discarded_edits_notice(&host, &prepared_key, args.sandbox, started_at).await;
                return finish(&args, &output, &envelope, Exit::Success, "");
            }
            // Streamed to stdout on a terminal already (see `submit`), unless what streamed was
            // not this reply (another process wrote it).
            let shown_already =
                !args.json && std::io::stdout().is_terminal() && streamed.trim() == text.trim();
            if !args.json && !args.jsonl && !shown_already {
                // Exactly one trailing newline, whatever the model ended its text with.
                let reply = output.stdout_text(&text);
                outln!("{}", reply.trim_end_matches(['\n', '\r']))?;
            }
            envelope.message = Some(text);
            discarded_edits_notice(&host, &prepared_key, args.sandbox, started_at).await;
            finish(&args, &output, &envelope, Exit::Success, "")
        }
        Outcome::Aborted => {
            envelope.outcome = "aborted";
            envelope.error = Some(
                settlement
                    .error
                    .unwrap_or_else(|| FlueError::Aborted.to_info()),
            );
            let exit = interrupt.map_or(Exit::Interrupted, Interrupt::exit);
            finish(&args, &output, &envelope, exit, "aborted")
        }
        _ => {
            envelope.outcome = "failed";
            let error = settlement.error.unwrap_or_else(|| ErrorInfo {
                kind: "submission_failed".to_owned(),
                message: "the submission failed".to_owned(),
            });
            let mut message = error.message.clone();
            if let Some(hint) = connection_hint(&host.agents(), &message) {
                message = format!("{message}\nhint: {hint}");
            }
            // The model refused or stopped early: its own exit code, so that scripts can tell
            // it from a failure of flue or the provider.
            let exit = if MODEL_STOP_KINDS.contains(&error.kind.as_str()) {
                Exit::ModelStopped
            } else {
                Exit::Failure
            };
            envelope.error = Some(error);
            finish(&args, &output, &envelope, exit, &message)
        }
    }
}

/// The error kinds of an operation the model ended abnormally (`FlueError::ModelStopped`).
const MODEL_STOP_KINDS: [&str; 4] = [
    "model_refusal",
    "content_filter",
    "context_window_exceeded",
    "model_stopped",
];

/// The agent argument to repeat in a resume command.
fn prepared_agent(envelope: &Envelope) -> String {
    envelope.agent.clone()
}

/// Prints the JSON envelope or the error line (redacted, escaped), and returns the exit code.
fn finish(
    args: &RunArgs,
    output: &Output,
    envelope: &Envelope,
    exit: Exit,
    error: &str,
) -> anyhow::Result<Exit> {
    if args.jsonl {
        crate::jsonl::write_line(output, Some("settlement"), envelope);
        if exit != Exit::Success && exit != Exit::ActionRequired {
            eprintln!("error: {}", output.stderr_text(error));
        }
    } else if args.json {
        outln!("{}", output.json_line(envelope)?)?;
    } else if exit != Exit::Success && exit != Exit::ActionRequired {
        eprintln!("error: {}", output.stderr_text(error));
    }
    Ok(exit)
}

/// A conversation ready for the message: the app (host, store, running runtime) serving its
/// agent.
pub(crate) struct Prepared {
    pub(crate) key: ConversationKey,
    pub(crate) host: Arc<Host>,
    pub(crate) app: App,
}

/// A settled submission and the usage of its model turns.
pub(crate) struct Settled {
    pub(crate) settlement: Settlement,
    pub(crate) usage: Usage,
    /// Why the last model turn of the agent's session ended, and its refusal text.
    pub(crate) last_stop: Option<(StopReason, Option<String>)>,
}

/// How the run's submission ended up: settled, or waiting for decisions nobody here gave.
pub(crate) enum Finished {
    Settled(Settled),
    Waiting {
        pending: Vec<PendingAction>,
        usage: Usage,
    },
}

/// The submission this run works on: the one it dispatched, or the one it resumed.
pub(crate) struct Started {
    submission_id: String,
    /// Where its batches start (for summing usage).
    offset: Offset,
}

/// Loads the workspace, checks the agent can run and starts the submission runtime:
/// everything that can fail before the message is admitted.
/// The budgets the flags give (`None`: none), checked: a cost must be a positive number.
fn dispatch_budget(
    flags: &crate::args::BudgetArgs,
) -> Result<Option<flue_core::Budget>, FlueError> {
    let budget = flue_core::Budget {
        max_cost_usd: flags.max_cost_usd,
        max_turns: flags.max_turns,
        conversation: flue_core::BudgetLimits {
            max_cost_usd: flags.conversation_max_cost_usd,
            max_turns: flags.conversation_max_turns,
        },
    };
    if budget.is_empty() {
        return Ok(None);
    }
    budget
        .check()
        .map_err(|problem| FlueError::InvalidRequest {
            message: format!("{problem} (the --max-cost-usd / --conversation-max-cost-usd flags)"),
        })?;
    Ok(Some(budget))
}

pub(crate) async fn prepare(args: &RunArgs) -> Result<Prepared, SetupError> {
    // Before anything is loaded or created: a bad id is the caller's to fix.
    if let Some(id) = &args.id {
        flue_core::check_instance_id(id)?;
    }
    let (agents, agent_name) = load(args)?;
    crate::setup::check_model(&agents, &agent_name, args)?;
    let agents = crate::trust::ensure(agents)?;
    let opened = StoreChoice::Workspace.open(&agents).await?;
    let store = Arc::clone(&opened.store);
    let id = match &args.id {
        Some(id) => id.clone(),
        None if args.continue_last => {
            let id = crate::workspace::latest_conversation(&*store, &agent_name)
                .await?
                .ok_or_else(|| {
                    HostError::from(FlueError::config(format!(
                        "agent `{agent_name}` has no conversation to continue yet; drop \
                         --continue to start one"
                    )))
                })?;
            eprintln!("continuing conversation {id}");
            id
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
    options = options.with_mcp_elicitor(crate::elicit::elicitor(args.yes));
    options = options.with_mcp_sampling_approver(crate::elicit::sampling_approver(args.yes));
    // The agent is checked before anything is admitted; starting the runtime recovers work a
    // killed run left unsettled.
    let app = App::builder(agents)
        .with_opened_store(opened)
        .with_harness_options(options)
        .with_preflight(Preflight::Agent(agent_name.clone()))
        .start()
        .await?;
    for check in app.checks() {
        for warning in &check.warnings {
            eprintln!("warning: {}", crate::terminal::escape_controls(warning));
        }
    }
    if let Some(subject) = &args.memory_subject {
        // Before the message: its turn may already use the memory.
        flue_core::store::check_subject(subject)?;
        let Some(notes) = Arc::clone(app.runtime().store()).note_store() else {
            return Err(FlueError::config("this store keeps no memory notes").into());
        };
        notes.bind_subject(&key.instance_id(), subject).await?;
    }
    if args.id.is_none() && !args.continue_last {
        eprintln!("conversation id: {id}");
    }
    let host = Arc::clone(app.host());
    Ok(Prepared { key, host, app })
}

/// Whether the conversation exists, as a managed conversation or as plain sessions under its
/// id.
async fn conversation_exists(
    store: &dyn DynConversationStore,
    key: &ConversationKey,
) -> Result<bool, FlueError> {
    Ok(store.conversation(key).await?.is_some() || !store.list(&key.id).await?.is_empty())
}

/// What the message chooses for its run besides the agent's configuration: the skill and its
/// `--arg`s (read once: an argument may come from stdin).
fn message_options(args: &RunArgs) -> anyhow::Result<MessageOptions> {
    let Some(skill) = &args.skill else {
        return Ok(MessageOptions::default());
    };
    let skill_args = crate::tools::parse_skill_args(&args.skill_args)?;
    Ok(skill_args.into_iter().fold(
        MessageOptions::default().with_skill(skill),
        |options, (name, value)| options.with_arg(name, value),
    ))
}

/// What a line typed while the work runs does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Typing {
    /// Nothing is read until the work ends (`flue run`).
    Ignored,
    /// While tasks run, `/tasks` lists them and `/abort N` aborts one (`flue chat` on a
    /// terminal).
    TaskCommands,
}

/// Admits the message (or resumes a paused conversation with `--confirm` / `--tool-result`),
/// renders its activity, answers the actions it pauses on when someone can (`--yes`, a
/// terminal), turns Ctrl-C or SIGTERM into an abort of the conversation, and waits until the
/// submission settles or waits on actions nobody here answers; also says which signal, if
/// any, aborted it, and what the last model turn streamed.
pub(crate) async fn submit_with(
    args: &RunArgs,
    chosen: MessageOptions,
    prepared: &Prepared,
    output: &Output,
    interrupts: &mut Interrupts,
    typing: Typing,
) -> Result<(Started, Finished, Option<Interrupt>, String), FlueError> {
    let runtime = prepared.app.runtime();
    let key = &prepared.key;
    let mut events = runtime.subscribe();
    let started = match resume_decision(args)? {
        Some((action_id, decision)) => {
            let receipt = runtime.resolve(key, &action_id, decision).await?;
            let Some(submission_id) = receipt.submission_id else {
                return Err(FlueError::InvalidRequest {
                    message: format!(
                        "action {action_id} was decided, but no submission of conversation {:?} \
                         was waiting on it",
                        key.id
                    ),
                });
            };
            eprintln!("submission: {submission_id}");
            // Its usage counts from its admission, before the pause too.
            Started {
                submission_id,
                offset: Offset::START,
            }
        }
        None => {
            let message = args.message.as_deref().unwrap_or_default();
            let mut delivered = DeliveredMessage::user(message);
            if !chosen.is_empty() {
                delivered = delivered.with_options(chosen);
            }
            if let Some(schema) = crate::setup::result_schema(args)? {
                delivered = delivered.with_result(schema);
            }
            let when_busy = if args.no_wait {
                WhenBusy::Fail
            } else {
                WhenBusy::Queue
            };
            let receipt = runtime
                .dispatch(
                    key,
                    delivered,
                    dispatch_budget(&args.budget)?.into_iter().fold(
                        DispatchOptions::default().with_when_busy(when_busy),
                        DispatchOptions::with_budget,
                    ),
                )
                .await?;
            // The message is durable from here: a crash leaves it to the next run to finish.
            eprintln!("submission: {}", receipt.submission_id);
            Started {
                submission_id: receipt.submission_id,
                offset: receipt.offset,
            }
        }
    };
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
    // Rendered here, between the waits: everything the runtime emitted before the submission
    // went idle is on the screen before a question is asked.
    // A structured result alone goes to stdout: the model's text streams to stderr then.
    let structured = args.result.is_some()
        || prepared
            .host
            .agents()
            .agent(&key.agent)
            .is_ok_and(|info| info.result.is_some());
    let mut renderer = Renderer::new(
        output.clone(),
        args.verbose,
        Target::for_text(args.json || args.jsonl || structured),
    );
    if !args.json && !args.jsonl && std::io::stderr().is_terminal() {
        renderer = renderer.with_status();
        if typing == Typing::TaskCommands {
            renderer = renderer.with_abort_command();
        }
    }
    // The status line's clock; it only draws on a terminal.
    let mut ticks = tokio::time::interval(std::time::Duration::from_millis(100));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let submission_id = started.submission_id.clone();
    let show = |renderer: &mut Renderer, event: &RuntimeEvent, interrupted: bool| {
        // After Ctrl-C the reply stops on the screen where it was (the stored reply keeps
        // what the model streamed until the abort reached it).
        let late_delta = interrupted
            && matches!(
                event.event,
                flue_core::Event::TextDelta { .. } | flue_core::Event::ThinkingDelta { .. }
            );
        if event.submission_id.as_deref() == Some(&submission_id) && !late_delta {
            if args.jsonl {
                crate::jsonl::write_line(output, None, &event.event);
            }
            renderer.render(&event.event);
            renderer.write_out();
        }
    };
    let mut events_open = true;
    let answerer = Answerer::for_run(args.yes);
    let mut interrupt = None;
    let outcome = loop {
        // The first signal aborts the conversation's work: running commands are killed,
        // unanswered tool calls answered `aborted`, questions withdrawn, and the log left
        // consistent.
        let idle = {
            let wait = runtime.wait_idle(&started.submission_id);
            tokio::pin!(wait);
            loop {
                // A line is read only while tasks run: it can name one of them.
                let commands = typing == Typing::TaskCommands
                    && interrupt.is_none()
                    && !renderer.running_tasks().is_empty();
                tokio::select! {
                    idle = &mut wait => break idle,
                    typed = crate::input::ask(""), if commands => {
                        if let crate::input::Reply::Line(line) = typed {
                            task_command(line.trim(), &mut renderer, runtime, key);
                            renderer.write_out();
                        }
                    }
                    _ = ticks.tick() => {
                        renderer.tick();
                        renderer.write_out();
                    }
                    received = events.recv(), if events_open => match received {
                        Ok(event) => show(&mut renderer, &event, interrupt.is_some()),
                        Err(RecvError::Lagged(_)) => {}
                        Err(RecvError::Closed) => events_open = false,
                    },
                    signalled = interrupts.next(), if interrupt.is_none() => {
                        renderer.finish();
                        renderer.write_out();
                        interrupt = Some(signalled);
                        abort_on(runtime, key, output, signalled).await;
                    }
                }
            }
        };
        // What the runtime emitted before going idle is buffered already.
        loop {
            match events.try_recv() {
                Ok(event) => show(&mut renderer, &event, interrupt.is_some()),
                Err(TryRecvError::Lagged(_)) => {}
                Err(_) => break,
            }
        }
        let info = match idle {
            Ok(info) => info,
            Err(err) => break Err(err),
        };
        if let Some(settlement) = info.settlement {
            break Ok(Ok(settlement));
        }
        let pending: Vec<PendingAction> = runtime
            .actions(key)
            .await?
            .into_iter()
            .filter(|info| info.decision.is_none())
            .map(|info| info.action)
            .collect();
        let Some(action) = pending.first() else {
            break Ok(Err(pending));
        };
        if interrupt.is_some() {
            // Aborted, yet still waiting (the abort did not reach it): ask nothing more.
            break Ok(Err(pending));
        }
        renderer.finish();
        renderer.write_out();
        // Ctrl-C or SIGTERM at the question aborts like anywhere else.
        let answered = tokio::select! {
            answered = answerer.answer(action, output) => answered,
            signalled = interrupts.next() => {
                interrupt = Some(signalled);
                interrupt_pause(runtime, key, output, signalled).await;
                continue;
            }
        };
        match answered {
            Some(decision) => match decide(runtime, key, action, decision, output).await {
                Ok(()) | Err(FlueError::ActionAlreadyResolved { .. }) => {}
                Err(err) => break Err(err),
            },
            None => break Ok(Err(pending)),
        }
    };
    renderer.finish();
    renderer.write_out();
    let streamed = renderer.last_text().to_owned();
    let (usage, last_stop) = submission_usage(runtime, key, &started).await?;
    let finished = match outcome? {
        Ok(settlement) => Finished::Settled(Settled {
            settlement,
            usage,
            last_stop,
        }),
        Err(pending) => Finished::Waiting { pending, usage },
    };
    Ok((started, finished, interrupt, streamed))
}

/// Answers a line typed while tasks run: `/tasks` lists them, `/abort N` aborts the N-th
/// alone (its parent goes on); anything else says what works now.
fn task_command(
    line: &str,
    renderer: &mut Renderer,
    runtime: &AgentRuntime,
    key: &ConversationKey,
) {
    if line.is_empty() {
        return;
    }
    let running = renderer.running_tasks();
    if line == "/tasks" {
        for task in renderer.task_lines() {
            renderer.note(&task);
        }
        return;
    }
    let Some(argument) = line.strip_prefix("/abort") else {
        renderer.note(
            "(a reply is being written: /tasks lists its running tasks, /abort N aborts one; \
             Ctrl-C aborts the reply)",
        );
        return;
    };
    let chosen = argument
        .trim()
        .parse::<usize>()
        .ok()
        .and_then(|number| running.get(number.checked_sub(1)?));
    match chosen {
        Some(session) if runtime.abort_task(key, session) => {
            renderer.note(&format!("aborting task {session} alone; the reply goes on"));
        }
        Some(session) => renderer.note(&format!("task {session} is not running any more")),
        None => renderer.note(&format!(
            "/abort takes the number of a running task, 1 to {} (/tasks lists them)",
            running.len()
        )),
    }
}

/// Stores the terminal's decision on `action`. "Always" becomes a standing rule of the
/// conversation; where the runtime keeps none (no approval key), the call is allowed once.
async fn decide(
    runtime: &AgentRuntime,
    key: &ConversationKey,
    action: &PendingAction,
    decision: ActionDecision,
    output: &Output,
) -> Result<(), FlueError> {
    let always = decision == ActionDecision::AllowAlways;
    match runtime.resolve(key, &action.action_id, decision).await {
        Ok(_) if always => {
            eprintln!(
                "{}",
                output.stderr_text(&format!(
                    "{} is allowed from now on in this conversation (`/tools` in `flue chat` \
                     lists and revokes it)",
                    action.tool_name
                ))
            );
            Ok(())
        }
        Ok(_) => Ok(()),
        Err(FlueError::InvalidDecision { message, .. }) if always => {
            eprintln!(
                "warning: {}",
                output.stderr_text(&format!("allowed this once only: {message}"))
            );
            runtime
                .resolve(key, &action.action_id, ActionDecision::Allow)
                .await
                .map(|_| ())
        }
        Err(err) => Err(err),
    }
}

/// Aborts the conversation's work after `signalled`, and withdraws the questions waiting on the
/// terminal (an MCP server's question belongs to the work being aborted).
async fn abort_on(
    runtime: &AgentRuntime,
    key: &ConversationKey,
    output: &Output,
    signalled: Interrupt,
) {
    eprintln!(
        "\n{}: aborting (the conversation is kept)",
        signalled.describe()
    );
    crate::input::cancel_questions();
    if let Err(err) = runtime.abort(key).await {
        eprintln!(
            "warning: {}",
            output.stderr_text(&format!("aborting: {err}"))
        );
    }
}

/// Ends the pause the submission waits in after `signalled` at a question: its pending actions
/// are answered `interrupted` (in the log, where the model will see them next time) and the
/// submission settles `aborted`, so the conversation takes new messages.
async fn interrupt_pause(
    runtime: &AgentRuntime,
    key: &ConversationKey,
    output: &Output,
    signalled: Interrupt,
) {
    eprintln!(
        "\n{}: aborting (the conversation is kept)",
        signalled.describe()
    );
    if let Err(err) = runtime.interrupt(key, None).await {
        eprintln!(
            "warning: {}",
            output.stderr_text(&format!("interrupting the pause: {err}"))
        );
        abort_on(runtime, key, output, signalled).await;
    }
}

/// The decision `--confirm [--deny | --result JSON]` or `--tool-result --value` asks for, if
/// any.
fn resume_decision(args: &RunArgs) -> Result<Option<(String, ActionDecision)>, FlueError> {
    if let Some(action_id) = &args.confirm {
        let decision = match (&args.deny, &args.result) {
            (Some(message), _) => ActionDecision::Deny {
                message: Some(message.clone()),
            },
            (None, Some(text)) => ActionDecision::Result {
                value: serde_json::from_str(text).map_err(|err| FlueError::InvalidRequest {
                    message: format!(
                        "--result is not JSON ({err}); with --confirm it is the custom tool's \
                         result: quote text as a JSON string, e.g. --result '\"shipped\"'"
                    ),
                })?,
                is_error: false,
            },
            (None, None) => ActionDecision::Allow,
        };
        return Ok(Some((action_id.clone(), decision)));
    }
    if let Some(action_id) = &args.tool_result {
        let text = args.value.as_deref().unwrap_or_default();
        let value = serde_json::from_str(text).map_err(|err| FlueError::InvalidRequest {
            message: format!(
                "--value is not JSON ({err}); quote text as a JSON string, e.g. --value '\"shipped\"'"
            ),
        })?;
        return Ok(Some((
            action_id.clone(),
            ActionDecision::Result {
                value,
                is_error: false,
            },
        )));
    }
    Ok(None)
}

/// The usage of the submission's model turns, MCP sampling and prompt hooks, summed from the
/// stream (whichever process ran them).
async fn submission_usage(
    runtime: &AgentRuntime,
    key: &ConversationKey,
    receipt: &Started,
) -> Result<(Usage, Option<(StopReason, Option<String>)>), FlueError> {
    let mut usage = Usage::default();
    let mut last_stop = None;
    let mut after = receipt.offset;
    loop {
        let page = runtime.read_stream(key, after, 256).await?;
        for batch in &page.batches {
            if batch.submission_id.as_deref() != Some(&receipt.submission_id) {
                continue;
            }
            if let BatchBody::Records {
                records, session, ..
            } = &batch.body
            {
                for stored in records {
                    match &stored.record {
                        Record::Assistant(message) => {
                            usage += message.usage;
                            if session == DEFAULT_SESSION {
                                last_stop =
                                    Some((message.stop_reason.clone(), refusal_of(message)));
                            }
                        }
                        // An MCP server's sampling during a tool call ran on the agent's model.
                        Record::Sampling(exchange) => usage += exchange.usage,
                        // A turn that failed after the provider reported what it used.
                        Record::FailedTurn(failed) => usage += failed.usage,
                        // A prompt hook's judgement.
                        Record::Hook(hook) => usage += hook.usage.unwrap_or_default(),
                        _ => {}
                    }
                }
            }
        }
        if page.up_to_date || page.next_offset <= after {
            break;
        }
        after = page.next_offset;
    }
    Ok((usage, last_stop))
}

/// The refusal parts of a turn as one text, when it has any.
fn refusal_of(message: &flue_core::AssistantMessage) -> Option<String> {
    let parts: Vec<&str> = message
        .content
        .iter()
        .filter_map(|part| match part {
            flue_core::AssistantContent::Refusal { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join("\n"))
}

/// After a run in the virtual sandbox, says how many files the agent changed there (they are
/// gone with the sandbox) and how to keep such edits.
pub(crate) async fn discarded_edits_notice(
    host: &Host,
    key: &ConversationKey,
    sandbox: Option<SandboxKind>,
    since_ms: u64,
) {
    let kind = crate::tools::sandbox_kind(&host.agents(), &key.agent, sandbox);
    if kind != SandboxKind::Virtual {
        return;
    }
    let Some(audit) = Arc::clone(host.store()).audit_store() else {
        return;
    };
    let Ok(entries) = audit.list_audit(&key.instance_id()).await else {
        return;
    };
    let changed: std::collections::BTreeSet<String> = entries
        .into_iter()
        .filter(|entry| {
            entry.at >= since_ms && entry.ok && entry.sha256_before != entry.sha256_after
        })
        .flat_map(|entry| entry.path.into_iter().chain(entry.destination_path))
        .collect();
    if changed.is_empty() {
        return;
    }
    let noun = if changed.len() == 1 { "file" } else { "files" };
    eprintln!(
        "note: the agent changed {} {noun} in the virtual sandbox, an in-memory copy of the \
         workspace discarded when flue exits; the workspace's own files are unchanged. \
         Run with --sandbox local to let the agent edit them, or see the changes with \
         `flue audit --id {} --diff`",
        changed.len(),
        key.id
    );
}

/// For a model specifier without a known provider (`--model gpt-4o`, `opnai/gpt-4o`): the one
/// it most likely meant.
fn model_hint(args: &RunArgs, err: &SetupError) -> Option<String> {
    let message = err.to_string();
    if !(message.contains("invalid model specifier") || message.contains("unknown provider")) {
        return None;
    }
    // The specifier is quoted in the message: `--model`'s, or the agent's own.
    let spec = args
        .model
        .clone()
        .filter(|model| message.contains(&format!("{model:?}")))
        .or_else(|| message.split('"').nth(1).map(str::to_owned))
        .or_else(|| args.model.clone())?;
    let known: Vec<String> = match message.split_once("known providers: ") {
        Some((_, rest)) => rest
            .trim_end_matches(')')
            .split(", ")
            .map(str::to_owned)
            .collect(),
        None => flue_build::WorkspaceConfig::default().provider_ids(),
    };
    let known: Vec<&str> = known.iter().map(String::as_str).collect();
    let suggested = flue_build::suggest_model(&spec, &known)?;
    Some(format!(
        "did you mean `{suggested}`? Models are named PROVIDER/MODEL"
    ))
}

/// For a failure to reach a provider: where its URL was configured (flue-host knows the
/// provider settings).
pub(crate) fn connection_hint(agents: &AgentSet, message: &str) -> Option<String> {
    flue_host::connection_hint(agents, message)
}
