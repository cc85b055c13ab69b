//! Sessions: named, append-only conversations and the operations that run on them.
//!
//! One operation runs at a time per session; a second one fails at once with
//! [`FlueError::SessionBusy`]. That rule is enforced in exactly one place,
//! `SessionShared::begin` (in `shared.rs`). Across processes, appends carry the expected version, so a
//! concurrent writer gets [`FlueError::VersionConflict`] instead of interleaving.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use flue_protocol::event::{Event, OperationKind};
use flue_protocol::record::{ActionDecision, ActionInfo, ActionResolution, PendingAction};
use flue_protocol::record::{Record, ShellExchange, Usage, UserMessage};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::agent_loop::Opening;
use crate::call::CallHandle;
use crate::compaction;
use crate::config::Skill;
use crate::error::{FlueError, Result};
use crate::model::TurnSink;
use crate::operation::{
    OperationContext, OperationOutput, PromptOptions, PromptResponse, SkillExtra, SkillOptions,
    TaskOptions, settle, user_message,
};
use crate::sandbox::{ExecOptions, Sandbox, ShellResult};
use crate::shared::SessionShared;
use crate::skill;
use crate::spans;
use crate::steps;
use crate::task::{self, Inherited};
use crate::util::or_cancel;

/// A named conversation inside a harness. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct Session {
    shared: Arc<SessionShared>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("key", &self.shared.key)
            .finish_non_exhaustive()
    }
}

impl Session {
    pub(crate) fn from_shared(shared: Arc<SessionShared>) -> Self {
        Self { shared }
    }

    /// The session name.
    pub fn name(&self) -> &str {
        &self.shared.key.session
    }

    /// The sandbox, for file operations that are not recorded in the conversation. Relative
    /// paths resolve against the session's working directory (the agent's `cwd`, or a task's).
    pub fn fs(&self) -> &Arc<dyn Sandbox> {
        &self.shared.fs
    }

    /// The session's records as last loaded or written by this process.
    pub async fn records(&self) -> Vec<Record> {
        self.shared.state.lock().await.records.clone()
    }

    /// The session's version (its record count) as last seen by this process.
    pub async fn version(&self) -> u64 {
        self.shared.state.lock().await.version
    }

    /// Sends `text` to the model and runs the agent loop until it answers.
    pub fn prompt(&self, text: &str, options: PromptOptions) -> CallHandle<PromptResponse> {
        let text = text.to_owned();
        self.model_call(OperationKind::Prompt, options, move |options| {
            Ok((user_message(text, &options.images), None))
        })
    }

    /// Runs one attempt of a durable submission on this (root) session: with `message`, as
    /// [`Session::prompt`] does; without one, resumes from the log alone (see
    /// `agent_loop::run`). `cancel` aborts the attempt.
    pub(crate) fn run_submission(
        &self,
        message: Option<UserMessage>,
        result: Option<serde_json::Value>,
        seed_state: Option<serde_json::Value>,
        cancel: CancellationToken,
        budget: Option<flue_protocol::Budget>,
        chosen: flue_protocol::MessageOptions,
    ) -> CallHandle<PromptResponse> {
        let kind = if chosen.skill.is_some() {
            OperationKind::Skill
        } else {
            OperationKind::Prompt
        };
        self.spawn_operation(kind, Some(cancel), move |shared, mut ctx| async move {
            ctx.budget = budget;
            // The message's skill (every attempt runs it: its instructions stay in the
            // system prompt of a resumed attempt too).
            let skill = chosen
                .skill
                .as_deref()
                .map(|name| shared.scope.skills.get(name))
                .transpose()?;
            let message = match (&skill, message) {
                (Some(skill), Some(message)) => Some(skill::skill_submission_message(
                    skill,
                    &chosen.args,
                    message,
                )),
                (_, message) => message,
            };
            let skill_result = skill.as_ref().and_then(|skill| skill.result.clone());
            let overlay = shared.overlay(chosen.role.as_deref(), skill)?;
            let opening = Opening {
                seed_state,
                ..Opening::message(message)
            };
            // The message's schema, else the skill's, else the agent's own (`result:` in
            // their files).
            let options = PromptOptions {
                model: chosen.model,
                thinking: chosen.thinking,
                result: result
                    .or(skill_result)
                    .or_else(|| shared.harness.agent.result.clone()),
                ..PromptOptions::default()
            };
            task::run_agent(shared, opening, options, overlay, ctx).await
        })
    }

    /// The session's state document as stored (other processes' writes included): its latest
    /// [`StateChange`](flue_protocol::record::StateChange), `None` while nothing wrote it. A conversation's
    /// state lives in its root session (`default`).
    pub async fn state(&self) -> Result<Option<flue_protocol::record::StateChange>> {
        Ok(latest_state(&self.stored_records().await?))
    }

    /// The tool calls waiting for a decision, as stored (other processes' writes included).
    pub async fn pending_actions(&self) -> Result<Vec<PendingAction>> {
        let list = steps::actions(&self.stored_records().await?);
        let harness = &self.shared.harness;
        let list =
            task::with_task_actions(harness.store.as_ref(), &harness.instance_id, list).await?;
        Ok(list
            .into_iter()
            .filter(|info| info.decision.is_none())
            .map(|info| info.action)
            .collect())
    }

    /// Every action of the session, pending and decided, in order, as stored.
    pub async fn actions(&self) -> Result<Vec<ActionInfo>> {
        let list = steps::actions(&self.stored_records().await?);
        let harness = &self.shared.harness;
        task::with_task_actions(harness.store.as_ref(), &harness.instance_id, list).await
    }

    /// The session's log as stored: read without waiting for a running operation, so the
    /// live actions of its calls (an MCP server's question) are seen while they wait.
    async fn stored_records(&self) -> Result<Vec<flue_protocol::record::Record>> {
        let shared = &self.shared;
        let log = shared
            .harness
            .store
            .load(&shared.key, 0)
            .await?
            .ok_or_else(|| FlueError::SessionNotFound {
                session: shared.key.session.clone(),
            })?;
        Ok(log
            .records
            .into_iter()
            .map(|stored| stored.record)
            .collect())
    }

    /// Decides one pending action and resumes the paused operation from the stored log:
    /// [`ActionDecision::Allow`] runs the confirmed call (once: its start is stored first),
    /// [`ActionDecision::Deny`] answers it as an error the model sees, and
    /// [`ActionDecision::Result`] gives a custom tool's output. The loop then goes on, and may
    /// pause again (the response's `pending_actions`). Works in any process sharing the store.
    ///
    /// Errors: [`FlueError::ActionNotFound`], [`FlueError::ActionAlreadyResolved`] (the first
    /// decision wins), [`FlueError::InvalidDecision`], [`FlueError::SessionBusy`].
    pub fn resolve(&self, action_id: &str, decision: ActionDecision) -> CallHandle<PromptResponse> {
        let opening = Opening {
            decisions: vec![ActionResolution::new(action_id, decision)],
            ..Opening::default()
        };
        self.spawn_operation(OperationKind::Prompt, None, move |shared, ctx| async move {
            let overlay = shared.overlay(None, None)?;
            task::run_agent(shared, opening, PromptOptions::default(), overlay, ctx).await
        })
    }

    /// Answers a live action of this session (an MCP server's question while a call runs, kind
    /// [`ActionKind::Elicitation`](flue_protocol::record::ActionKind::Elicitation)) with
    /// [`ActionDecision::Accept`] (content checked against the requested schema, defaults
    /// filled in), [`ActionDecision::Decline`] or [`ActionDecision::Cancel`]. The call waiting
    /// for it, in this process or another sharing the store, goes on with the answer; no
    /// operation starts. Returns once the decision is stored.
    ///
    /// Errors: [`FlueError::ActionNotFound`], [`FlueError::ActionAlreadyResolved`] (the first
    /// decision wins, the call's own timeout included), [`FlueError::InvalidDecision`] (a bad
    /// answer, or an action that is not a live one: use [`Session::resolve`]).
    pub async fn answer(&self, action_id: &str, decision: ActionDecision) -> Result<()> {
        let shared = &self.shared;
        let store = &shared.harness.store;
        for _ in 0..64 {
            let log =
                store
                    .load(&shared.key, 0)
                    .await?
                    .ok_or_else(|| FlueError::SessionNotFound {
                        session: shared.key.session.clone(),
                    })?;
            let records: Vec<flue_protocol::record::Record> =
                log.records.into_iter().map(|s| s.record).collect();
            let action =
                steps::check_decision(&records, &shared.key.session, action_id, &decision)?;
            if action.kind != flue_protocol::record::ActionKind::Elicitation {
                return Err(FlueError::InvalidDecision {
                    action_id: action_id.to_owned(),
                    message: "this action pauses the operation: decide it with `resolve`".into(),
                });
            }
            let decision = steps::normalize_decision(&action, decision.clone())?;
            let stored = [flue_protocol::record::StoredRecord::new(
                flue_protocol::record::Record::ActionResolved(ActionResolution::of(
                    &action, decision,
                )),
                crate::util::now_ms(),
            )];
            match store.append(&shared.key, log.version, &stored).await {
                Ok(_) => {
                    shared.wake_live();
                    return Ok(());
                }
                Err(FlueError::VersionConflict { .. }) => {}
                Err(err) => return Err(err),
            }
        }
        Err(FlueError::SessionBusy {
            session: shared.key.session.clone(),
        })
    }

    /// Interrupts a paused operation: answers every pending action as interrupted, then, with
    /// `message`, sends it as [`Session::prompt`] does; without one, stops there (no model
    /// call). The one way to send new input while actions are pending.
    pub fn interrupt(&self, message: Option<&str>) -> CallHandle<PromptResponse> {
        let message = message.map(UserMessage::text);
        self.spawn_operation(OperationKind::Prompt, None, move |shared, ctx| async move {
            let decisions = {
                let mut state = shared.state.lock().await;
                shared.sync(&mut state).await?;
                state
                    .index
                    .pending_actions()
                    .into_iter()
                    .map(|action| ActionResolution::of(&action, ActionDecision::Interrupted))
                    .collect()
            };
            let opening = Opening {
                stop: message.is_none(),
                message,
                decisions,
                ..Opening::default()
            };
            let overlay = shared.overlay(None, None)?;
            task::run_agent(shared, opening, PromptOptions::default(), overlay, ctx).await
        })
    }

    /// Runs a skill, named (`"triage"`) or packaged (`&skill`, see [`crate::skill_ref::SkillRef`]): records
    /// a user message naming it and its arguments, and puts the skill's instructions into the
    /// system prompt of this call only. An unknown name fails with
    /// [`FlueError::SkillNotRegistered`], listing the session's skills; a packaged skill whose
    /// name belongs to a different registered or workspace skill is
    /// [`FlueError::InvalidConfig`].
    pub fn skill<'a>(
        &self,
        skill: impl Into<crate::skill_ref::SkillRef<'a>>,
        options: SkillOptions,
    ) -> CallHandle<PromptResponse> {
        let resolved = skill.into().resolve(&self.shared.scope.skills);
        let (mut options, SkillExtra { args }) = options.split();
        // The call's schema, else the skill's own (`result:` in its file).
        if options.result.is_none()
            && let Ok(found) = &resolved
        {
            options.result.clone_from(&found.result);
        }
        self.model_call(OperationKind::Skill, options, move |options| {
            let found = resolved?;
            let message = skill::skill_message(&found, &args, &options.images);
            Ok((message, Some(found)))
        })
    }

    /// Delegates `text` to a detached child session `task:<name>:<uuid>` with a fresh history
    /// in the same sandbox, and returns its final answer. See [`TaskOptions`] for the subagent,
    /// and the crate docs for what a subagent inherits. Fails with
    /// [`FlueError::SubagentNotDeclared`] or [`FlueError::DelegationDepthExceeded`] before
    /// anything is created. The child's transcript stays in the store, named after this
    /// session; aborting this call aborts the child.
    pub fn task(&self, text: &str, options: TaskOptions) -> CallHandle<PromptResponse> {
        let text = text.to_owned();
        let outer_cancel = options.cancel.clone();
        self.spawn_operation(
            OperationKind::Task,
            outer_cancel,
            move |shared, ctx| async move {
                let inherited = Inherited::from_scope(&shared.scope);
                let outcome = task::run_task(
                    &shared,
                    &text,
                    options,
                    &inherited,
                    &ctx.cancel,
                    &ctx.sink,
                    false,
                )
                .await?;
                Ok((outcome.response, outcome.usage))
            },
        )
    }

    /// Sets the role of this session's calls that name none (`None`: no role). Kept in memory
    /// for every handle of this session in this process; never persisted. An unknown role is
    /// [`FlueError::UnknownRole`].
    pub fn set_role(&self, role: Option<&str>) -> Result<()> {
        if let Some(role) = role {
            self.shared.harness.roles.get(role)?;
        }
        let mut default_role =
            self.shared
                .default_role
                .lock()
                .map_err(|_| FlueError::RuntimeStopped {
                    message: "a session's role lock was poisoned by a panic".into(),
                })?;
        *default_role = role.map(str::to_owned);
        Ok(())
    }

    /// The role of this session's calls that name none.
    pub fn role(&self) -> Option<String> {
        self.shared.default_role()
    }

    /// Runs a command in the sandbox and records the exchange in the conversation (the names
    /// of supplied environment variables are recorded, never their values). Known secret values
    /// are redacted from the output before it is recorded and returned (see
    /// [`HarnessBuilder::with_secrets`](crate::harness::HarnessBuilder::with_secrets)).
    pub fn shell(&self, command: &str, options: ExecOptions) -> CallHandle<ShellResult> {
        let command = command.to_owned();
        let outer_cancel = options.cancel.clone();
        self.spawn_operation(
            OperationKind::Shell,
            outer_cancel,
            move |shared, ctx| async move {
                let mut state = shared.state.lock().await;
                shared.sync(&mut state).await?;
                let sandbox = Arc::clone(&shared.fs);
                let cwd = options.cwd.clone();
                let env_keys: Vec<String> = options.env.keys().cloned().collect();
                let exec_options = ExecOptions {
                    cwd: Some(cwd.clone().unwrap_or_else(|| shared.scope.cwd.clone())),
                    cancel: Some(ctx.cancel.clone()),
                    ..options
                };
                let mut result =
                    or_cancel(sandbox.exec(&command, exec_options), &ctx.cancel).await??;
                let redactor = &shared.harness.redactor;
                redactor.redact_in_place(&mut result.stdout);
                redactor.redact_in_place(&mut result.stderr);
                let exchange = ShellExchange {
                    command,
                    cwd,
                    env_keys,
                    stdout: result.stdout.clone(),
                    stderr: result.stderr.clone(),
                    exit_code: result.exit_code,
                };
                shared
                    .append(&mut state, vec![Record::Shell(exchange)])
                    .await?;
                Ok((result, Usage::default()))
            },
        )
    }

    /// Compacts the conversation now: folds older history into a summary and keeps the recent
    /// records verbatim, as automatic compaction does (`compaction: false` does not prevent
    /// it). Resolves without work when there is nothing to compact; rejects when the summary
    /// fails or is aborted, leaving the session unchanged; [`FlueError::SessionBusy`] while
    /// another operation runs.
    pub fn compact(&self) -> CallHandle<()> {
        self.spawn_operation(OperationKind::Compact, None, compaction::run_manual)
    }

    /// Deletes the session's stored state. [`FlueError::SessionBusy`] while an operation runs,
    /// [`FlueError::ConversationBusy`] while its conversation has a submission queued, running
    /// or waiting (the store's rule, in any process);
    /// afterwards this handle is unusable. Calls made while a deletion runs (from any handle
    /// to the session) wait for it and share its outcome; once it succeeded, `delete` resolves
    /// at once. A failed deletion can be retried.
    pub async fn delete(&self) -> Result<()> {
        let shared = &self.shared;
        shared
            .deletion
            .get_or_try_init(|| async {
                let _guard = shared.begin()?;
                task::delete_task_sessions(&shared.harness, &shared.key.session).await?;
                shared.harness.store.delete(&shared.key).await?;
                shared.deleted.store(true, Ordering::Release);
                shared.harness.forget_session(&shared.key.session);
                Ok::<(), FlueError>(())
            })
            .await?;
        Ok(())
    }

    /// Spawns a model call on this session (`prompt`, `skill`): `opening` gives its user
    /// message and the skill it runs, if any; the call runs in its own role, else the
    /// session's.
    fn model_call<F>(
        &self,
        kind: OperationKind,
        options: PromptOptions,
        opening: F,
    ) -> CallHandle<PromptResponse>
    where
        F: FnOnce(&PromptOptions) -> Result<(UserMessage, Option<Arc<Skill>>)> + Send + 'static,
    {
        let outer_cancel = options.cancel.clone();
        self.spawn_operation(kind, outer_cancel, move |shared, ctx| async move {
            let (message, skill) = opening(&options)?;
            let overlay = shared.overlay(options.role.as_deref(), skill)?;
            let opening = Opening::message(Some(message));
            task::run_agent(shared, opening, options, overlay, ctx).await
        })
    }

    /// Spawns one operation: claims the session, wires cancellation and events, and emits the
    /// start and end events around `body`.
    fn spawn_operation<T, F, Fut>(
        &self,
        kind: OperationKind,
        outer_cancel: Option<CancellationToken>,
        body: F,
    ) -> CallHandle<T>
    where
        T: OperationOutput + Send + 'static,
        F: FnOnce(Arc<SessionShared>, OperationContext) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<(T, Usage)>> + Send + 'static,
    {
        let guard = match self.shared.begin() {
            Ok(guard) => guard,
            Err(err) => return CallHandle::failed(err),
        };
        let cancel = operation_cancel(outer_cancel, self.shared.harness.scope_cancel.as_ref());
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let sink = TurnSink::new(events_tx);
        let shared = Arc::clone(&self.shared);
        let ctx = OperationContext::new(cancel.clone(), sink.clone());
        let failed_usage = std::sync::Arc::clone(&ctx.failed_usage);
        let span = spans::operation(
            kind,
            &shared.harness.agent.name,
            &shared.harness.instance_id,
            &shared.key.session,
            shared.depth,
        );
        let operation_span = span.clone();
        let operation = async move {
            let _guard = guard;
            sink.send(Event::OperationStart {
                session: shared.key.session.clone(),
                operation: kind,
            });
            let redactor = shared.harness.redactor.clone();
            let result = body(shared, ctx).await;
            let failed_usage = *failed_usage
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let (outcome, usage, error) = settle(&result, failed_usage, &redactor, &operation_span);
            sink.send(Event::OperationEnd {
                outcome,
                usage,
                error,
            });
            result.map(|(value, _)| value)
        };
        CallHandle::spawn(operation.instrument(span), cancel, events_rx)
    }
}

/// An operation's token: a child of the caller's, and inside an action scope also cancelled
/// with the action (a small task links the two until either fires).
fn operation_cancel(
    outer: Option<CancellationToken>,
    scope: Option<&CancellationToken>,
) -> CancellationToken {
    match (outer, scope) {
        (None, None) => CancellationToken::new(),
        (Some(outer), None) => outer.child_token(),
        (None, Some(scope)) => scope.child_token(),
        (Some(outer), Some(scope)) => {
            let cancel = scope.child_token();
            let linked = cancel.clone();
            tokio::spawn(async move {
                tokio::select! {
                    () = outer.cancelled() => linked.cancel(),
                    () = linked.cancelled() => {}
                }
            });
            cancel
        }
    }
}

/// The latest state change of `records`.
pub(crate) fn latest_state(
    records: &[flue_protocol::record::Record],
) -> Option<flue_protocol::record::StateChange> {
    records.iter().rev().find_map(|record| match record {
        flue_protocol::record::Record::State(change) => Some(change.clone()),
        _ => None,
    })
}
