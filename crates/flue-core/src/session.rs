//! Sessions: named, append-only conversations and the operations that run on them.
//!
//! One operation runs at a time per session; a second one fails at once with
//! [`FlueError::SessionBusy`]. That rule is enforced in exactly one place,
//! [`SessionShared::begin`]. Across processes, appends carry the expected version, so a
//! concurrent writer gets [`FlueError::VersionConflict`] instead of interleaving.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::agent_loop;
use crate::call::CallHandle;
use crate::compaction;
use crate::config::ThinkingLevel;
use crate::error::{FlueError, Result};
use crate::event::{ErrorInfo, Event, OperationKind, Outcome};
use crate::harness::HarnessShared;
use crate::model::TurnSink;
use crate::overlay::CallOverlay;
use crate::record::{
    Image, ModelRef, Record, ShellExchange, StoredRecord, Usage, UserContent, UserMessage,
};
use crate::redact::Redactor;
use crate::sandbox::{ExecOptions, Sandbox, ShellResult};
use crate::scope::AgentScope;
use crate::skill::{self, SkillOptions};
use crate::store::{SessionKey, SessionLog};
use crate::task::{self, Inherited, TaskOptions};
use crate::tool::ToolDefinition;
use crate::util::{now_ms, or_cancel};

/// Options of a model operation (`prompt`). Builder-lite: start from `default()`.
#[derive(Clone, Debug, Default)]
pub struct PromptOptions {
    /// Model specifier override for this operation.
    pub model: Option<String>,
    /// Reasoning effort override for this operation.
    pub thinking: Option<ThinkingLevel>,
    /// Extra tools for this operation.
    pub tools: Vec<ToolDefinition>,
    /// JSON Schema of a structured result: the operation then returns validated `data`.
    pub result: Option<Value>,
    /// Images attached to the user message.
    pub images: Vec<Image>,
    /// An outside cancellation signal, merged with the handle's own.
    pub cancel: Option<CancellationToken>,
    /// Role for this operation (instead of the session's default role).
    pub role: Option<String>,
}

impl PromptOptions {
    /// Sets the model override.
    #[must_use]
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Sets the thinking level override.
    #[must_use]
    pub fn with_thinking(mut self, thinking: ThinkingLevel) -> Self {
        self.thinking = Some(thinking);
        self
    }

    /// Adds a tool for this operation.
    #[must_use]
    pub fn with_tool(mut self, tool: ToolDefinition) -> Self {
        self.tools.push(tool);
        self
    }

    /// Requires a structured result matching `schema`.
    #[must_use]
    pub fn with_result(mut self, schema: Value) -> Self {
        self.result = Some(schema);
        self
    }

    /// Attaches an image.
    #[must_use]
    pub fn with_image(mut self, image: Image) -> Self {
        self.images.push(image);
        self
    }

    /// Merges an outside cancellation signal.
    #[must_use]
    pub fn with_cancel(mut self, cancel: CancellationToken) -> Self {
        self.cancel = Some(cancel);
        self
    }

    /// Runs this operation in `role`: a persona overlay for this call only.
    #[must_use]
    pub fn with_role(mut self, role: impl Into<String>) -> Self {
        self.role = Some(role.into());
        self
    }
}

/// What a model operation returns.
#[derive(Clone, Debug, PartialEq)]
pub struct PromptResponse {
    /// The final assistant text.
    pub text: String,
    /// Validated structured data, when a result schema was given.
    pub data: Option<Value>,
    /// Usage summed over every model turn of the operation.
    pub usage: Usage,
    /// The model of the operation's primary turns.
    pub model: ModelRef,
}

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

pub(crate) struct SessionShared {
    pub(crate) harness: Arc<HarnessShared>,
    pub(crate) key: SessionKey,
    busy: AtomicBool,
    deleted: AtomicBool,
    /// Set once the session's deletion has succeeded; concurrent `delete` calls wait on the
    /// one running deletion instead of failing busy.
    deletion: tokio::sync::OnceCell<()>,
    /// Held by the running operation for its whole duration; uncontended thanks to `busy`.
    pub(crate) state: tokio::sync::Mutex<SessionState>,
    /// The agent this session runs as.
    pub(crate) scope: Arc<AgentScope>,
    /// The sandbox seen from the scope's `cwd`.
    fs: Arc<dyn crate::sandbox::Sandbox>,
    /// Levels below the root session: 0 for sessions opened by name, 1 for their tasks, ...
    pub(crate) depth: u32,
    /// The role of calls that name none; in memory only, never persisted.
    default_role: std::sync::Mutex<Option<String>>,
}

/// The in-memory copy of a session log.
pub(crate) struct SessionState {
    pub(crate) version: u64,
    pub(crate) records: Vec<Record>,
}

/// Proof that an operation owns its session; releases it on drop (including on panic).
pub(crate) struct OperationGuard {
    shared: Arc<SessionShared>,
}

impl Drop for OperationGuard {
    fn drop(&mut self) {
        self.shared.busy.store(false, Ordering::Release);
    }
}

impl SessionShared {
    pub(crate) fn new(harness: Arc<HarnessShared>, key: SessionKey, log: SessionLog) -> Self {
        let scope = Arc::clone(&harness.root_scope);
        Self::new_task(harness, key, log, scope, 0)
    }

    /// A session running as `scope` at `depth` below the root (a task session when above 0).
    pub(crate) fn new_task(
        harness: Arc<HarnessShared>,
        key: SessionKey,
        log: SessionLog,
        scope: Arc<AgentScope>,
        depth: u32,
    ) -> Self {
        Self {
            fs: crate::sandbox::in_cwd(&harness.sandbox, &scope.cwd),
            harness,
            key,
            busy: AtomicBool::new(false),
            deleted: AtomicBool::new(false),
            deletion: tokio::sync::OnceCell::new(),
            state: tokio::sync::Mutex::new(SessionState {
                version: log.version,
                records: log
                    .records
                    .into_iter()
                    .map(|stored| stored.record)
                    .collect(),
            }),
            default_role: std::sync::Mutex::new(scope.role.clone()),
            scope,
            depth,
        }
    }

    /// The role of calls that name none.
    pub(crate) fn default_role(&self) -> Option<String> {
        self.default_role.lock().map_or(None, |role| role.clone())
    }

    /// The overlay of a model call naming `call_role` (or none) and running `skill` (or none).
    fn overlay(
        &self,
        call_role: Option<&str>,
        skill: Option<Arc<crate::config::Skill>>,
    ) -> Result<CallOverlay> {
        let role = call_role.map(str::to_owned).or_else(|| self.default_role());
        CallOverlay::resolve(&self.harness.roles, role, skill)
    }

    /// Claims the session for one operation: the single place that enforces exclusivity.
    pub(crate) fn begin(self: &Arc<Self>) -> Result<OperationGuard> {
        if self.deleted.load(Ordering::Acquire) {
            return Err(FlueError::SessionNotFound {
                session: self.key.session.clone(),
            });
        }
        self.busy
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .map_err(|_| FlueError::SessionBusy {
                session: self.key.session.clone(),
            })?;
        Ok(OperationGuard {
            shared: Arc::clone(self),
        })
    }

    /// Brings `state` up to date with records other writers appended.
    pub(crate) async fn sync(&self, state: &mut SessionState) -> Result<()> {
        let log = self
            .harness
            .store
            .load(&self.key, state.version)
            .await?
            .ok_or_else(|| FlueError::SessionNotFound {
                session: self.key.session.clone(),
            })?;
        state
            .records
            .extend(log.records.into_iter().map(|stored| stored.record));
        state.version = log.version;
        Ok(())
    }

    /// Appends records durably, then to the in-memory copy.
    pub(crate) async fn append(
        &self,
        state: &mut SessionState,
        records: Vec<Record>,
    ) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let at = now_ms();
        let stored: Vec<StoredRecord> = records
            .iter()
            .cloned()
            .map(|record| StoredRecord::new(record, at))
            .collect();
        state.version = self
            .harness
            .store
            .append(&self.key, state.version, &stored)
            .await?;
        state.records.extend(records);
        Ok(())
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
        let mut content = vec![UserContent::Text {
            text: text.to_owned(),
        }];
        content.extend(options.images.iter().cloned().map(UserContent::Image));
        let message = UserMessage { content };
        self.spawn_operation(
            OperationKind::Prompt,
            options.cancel.clone(),
            move |shared, ctx| async move {
                let overlay = shared.overlay(options.role.as_deref(), None)?;
                agent_loop::run(shared, Some(message), options, overlay, ctx).await
            },
        )
    }

    /// Runs one attempt of a durable submission on this (root) session: with `message`, as
    /// [`Session::prompt`] does; without one, resumes from the log alone (see
    /// `agent_loop::run`). `cancel` aborts the attempt.
    pub(crate) fn run_submission(
        &self,
        message: Option<UserMessage>,
        cancel: CancellationToken,
    ) -> CallHandle<PromptResponse> {
        self.spawn_operation(
            OperationKind::Prompt,
            Some(cancel),
            move |shared, ctx| async move {
                let overlay = shared.overlay(None, None)?;
                agent_loop::run(shared, message, PromptOptions::default(), overlay, ctx).await
            },
        )
    }

    /// Runs a skill, named (`"triage"`) or packaged (`&skill`, see [`crate::SkillRef`]): records
    /// a user message naming it and its arguments, and puts the skill's instructions into the
    /// system prompt of this call only. An unknown name fails with
    /// [`FlueError::SkillNotRegistered`], listing the session's skills; a packaged skill whose
    /// name belongs to a different registered or workspace skill is
    /// [`FlueError::InvalidConfig`].
    pub fn skill<'a>(
        &self,
        skill: impl Into<crate::SkillRef<'a>>,
        options: SkillOptions,
    ) -> CallHandle<PromptResponse> {
        let skill = skill.into();
        let resolved = skill.resolve(&self.shared.scope.skills);
        let outer_cancel = options.cancel.clone();
        self.spawn_operation(
            OperationKind::Skill,
            outer_cancel,
            move |shared, ctx| async move {
                let found = resolved?;
                let (args, options) = options.into_parts();
                let message = skill::skill_message(&found, &args, &options.images);
                let overlay = shared.overlay(options.role.as_deref(), Some(found))?;
                agent_loop::run(shared, Some(message), options, overlay, ctx).await
            },
        )
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
                let outcome =
                    task::run_task(&shared, &text, options, &inherited, &ctx.cancel, &ctx.sink)
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
    /// [`HarnessBuilder::with_secrets`](crate::HarnessBuilder::with_secrets)).
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

    /// Deletes the session's stored state. [`FlueError::SessionBusy`] while an operation runs;
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

    /// Spawns one operation: claims the session, wires cancellation and events, and emits the
    /// start and end events around `body`.
    fn spawn_operation<T, F, Fut>(
        &self,
        kind: OperationKind,
        outer_cancel: Option<CancellationToken>,
        body: F,
    ) -> CallHandle<T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<SessionShared>, OperationContext) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<(T, Usage)>> + Send + 'static,
    {
        let guard = match self.shared.begin() {
            Ok(guard) => guard,
            Err(err) => return CallHandle::failed(err),
        };
        let cancel = outer_cancel.map_or_else(CancellationToken::new, |outer| outer.child_token());
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let sink = TurnSink::new(events_tx);
        let shared = Arc::clone(&self.shared);
        let ctx = OperationContext {
            cancel: cancel.clone(),
            sink: sink.clone(),
        };
        let operation = async move {
            let _guard = guard;
            sink.send(Event::OperationStart {
                session: shared.key.session.clone(),
                operation: kind,
            });
            let redactor = shared.harness.redactor.clone();
            let result = body(shared, ctx).await;
            let (outcome, usage, error) = match &result {
                Ok((_, usage)) => (Outcome::Completed, *usage, None),
                Err(FlueError::Aborted) => (Outcome::Aborted, Usage::default(), None),
                Err(err) => (
                    Outcome::Failed,
                    Usage::default(),
                    Some(redacted_info(&redactor, err)),
                ),
            };
            sink.send(Event::OperationEnd {
                outcome,
                usage,
                error,
            });
            result.map(|(value, _)| value)
        };
        CallHandle::spawn(operation, cancel, events_rx)
    }
}

/// The wire shape of `err` with known secret values redacted from its message.
pub(crate) fn redacted_info(redactor: &Redactor, err: &FlueError) -> ErrorInfo {
    let mut info = err.to_info();
    redactor.redact_in_place(&mut info.message);
    info
}

/// What every operation body receives.
pub(crate) struct OperationContext {
    pub(crate) cancel: CancellationToken,
    pub(crate) sink: TurnSink,
}
