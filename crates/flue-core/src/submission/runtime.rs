//! The submission runtime: dispatch, wait, status, abort, stream reads and recovery scans.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use flue_protocol::event::{Event, Outcome};
use tokio::sync::{Notify, broadcast};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::error::{FlueError, Result};
use crate::log_cache::{LogCache, MAX_CACHED_BYTES, MAX_CACHED_RECORDS, MAX_CACHED_SESSIONS};
use crate::running_tasks::RunningTasks;
use crate::spans;
use crate::store::rules::ROOT_SESSION;
use crate::store::{
    Admission, DynConversationStore, OwnerRegistration, SessionKey, SubmissionStatus,
};
use crate::submission::background::{BackgroundLimits, BackgroundSlots};
use crate::submission::driver::{self, AttemptControl, StopReason};
use crate::submission::registry::AgentRegistry;
use crate::submission::wire::{
    ConversationInfo, ConversationKey, DeliveredMessage, DispatchOptions, DispatchReceipt, Offset,
    Settlement, StreamPage, SubmissionInfo,
};
use crate::submission::{check_conversation_id, check_message, redact_message};
use crate::util::{new_ulid, now_ms};

/// Default ownership lease: how long a conversation stays owned without renewal.
const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// Default interval of cross-process polls (settlement waits, abort requests, stream growth).
const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(50);
/// Default interval of recovery scans for conversations whose owner died.
const DEFAULT_RECONCILE_INTERVAL: Duration = Duration::from_secs(2);
/// Capacity of the in-process event broadcast; slower subscribers miss events.
const EVENT_CAPACITY: usize = 4096;

/// Builds an [`AgentRuntime`].
pub struct AgentRuntimeBuilder {
    store: Arc<dyn DynConversationStore>,
    agents: Arc<dyn AgentRegistry>,
    lease: Duration,
    poll_interval: Duration,
    reconcile_interval: Option<Duration>,
    own_work_only: bool,
    approval_key: Option<crate::standing::ApprovalKey>,
    background_limits: BackgroundLimits,
}

impl AgentRuntimeBuilder {
    /// Sets the key that signs and verifies standing approvals: with it, an
    /// [`ActionDecision::AllowAlways`](crate::ActionDecision::AllowAlways) also approves the
    /// tool's later calls in the conversation; without it, that decision is refused. Every
    /// process serving the same store needs the same key.
    #[must_use]
    pub fn with_approval_key(mut self, key: crate::standing::ApprovalKey) -> Self {
        self.approval_key = Some(key);
        self
    }

    /// Sets how many background tasks run at once (default: 4 per conversation, 16 in all);
    /// the excess waits queued.
    #[must_use]
    pub fn with_background_limits(mut self, limits: BackgroundLimits) -> Self {
        self.background_limits = limits;
        self
    }

    /// Makes this a runtime for one-shot processes such as `flue run`: it works only on
    /// conversations it dispatched to, and only until the submissions it dispatched there
    /// settled (the work queued before them included, first in first out). Then it hands the
    /// conversation over: released when idle, else its lease is dropped so that the process
    /// that admitted the remaining work takes it at once. Recovery scans likewise only look
    /// at conversations with submissions of this runtime.
    #[must_use]
    pub fn with_own_work_only(mut self) -> Self {
        self.own_work_only = true;
        self
    }

    /// Sets the ownership lease (default 30 s; renewed every third of it while working).
    #[must_use]
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Sets the interval of cross-process polls (default 50 ms).
    #[must_use]
    pub fn with_poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// Sets the interval of recovery scans for conversations whose owner died (default 2 s;
    /// `None` scans only at start).
    #[must_use]
    pub fn with_reconcile_interval(mut self, interval: Option<Duration>) -> Self {
        self.reconcile_interval = interval;
        self
    }

    /// Registers this process as an owner, resumes the unsettled work of dead owners, and
    /// starts the periodic recovery scan. Must run inside a tokio runtime.
    pub async fn start(self) -> Result<AgentRuntime> {
        let registration = self.store.register_owner().await?;
        let (events, _) = broadcast::channel(EVENT_CAPACITY);
        let inner = Arc::new(RuntimeInner {
            owner_id: registration.owner_id().to_owned(),
            registration: Mutex::new(Some(registration)),
            store: self.store,
            agents: self.agents,
            lease: self.lease,
            poll_interval: self.poll_interval,
            events,
            drivers: Mutex::new(HashMap::new()),
            stopping: CancellationToken::new(),
            active: AtomicUsize::new(0),
            idle: Notify::new(),
            own_work_only: self.own_work_only,
            approval_key: self.approval_key,
            own: Mutex::new(HashMap::new()),
            background: BackgroundSlots::new(self.background_limits),
            submission_spans: Mutex::new(HashMap::new()),
            resolving: tokio::sync::Mutex::new(()),
            running_tasks: Arc::default(),
            logs: Arc::new(LogCache::new(
                MAX_CACHED_SESSIONS,
                MAX_CACHED_RECORDS,
                MAX_CACHED_BYTES,
            )),
        });
        inner.reconcile().await?;
        if let Some(interval) = self.reconcile_interval {
            let weak = Arc::downgrade(&inner);
            let stopping = inner.stopping.clone();
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        () = stopping.cancelled() => return,
                        () = tokio::time::sleep(interval) => {}
                    }
                    let Some(inner) = weak.upgrade() else { return };
                    // A failed scan is retried on the next tick; the work stays durable.
                    let _ = inner.reconcile().await;
                }
            });
        }
        Ok(AgentRuntime { inner })
    }
}

/// One event of the runtime's in-process event stream: a submission lifecycle event, or an
/// event of the operation running a submission, with its conversation.
#[derive(Clone, Debug, PartialEq)]
pub struct RuntimeEvent {
    /// The conversation.
    pub conversation: ConversationKey,
    /// The submission being processed, when there is one.
    pub submission_id: Option<String>,
    /// The event.
    pub event: Event,
}

/// Processes durable submissions of many conversations; one per process and store.
///
/// ```no_run
/// # async fn demo() -> flue_core::Result<()> {
/// use std::sync::Arc;
/// use flue_core::{
///     AgentConfig, AgentRuntime, ConversationKey, DeliveredMessage, Harness, StaticAgents,
/// };
/// use flue_store::SqliteStore;
/// let store = Arc::new(SqliteStore::open(std::path::Path::new(".flue/flue.db"))?);
/// let agents = StaticAgents::new()
///     .with_agent("hello", || Harness::builder(AgentConfig::new().with_model("scripted/s.json")));
/// let runtime = AgentRuntime::builder(store, Arc::new(agents)).start().await?;
/// let key = ConversationKey::new("hello", "ticket-42");
/// let receipt = runtime
///     .dispatch(&key, DeliveredMessage::user("hi"), Default::default())
///     .await?;
/// let reply = runtime.read(&receipt.submission_id).await?;
/// println!("{reply}");
/// runtime.shutdown().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct AgentRuntime {
    pub(crate) inner: Arc<RuntimeInner>,
}

/// What the runtime's tasks share.
pub(crate) struct RuntimeInner {
    pub(crate) owner_id: String,
    /// Keeps this process visible as a live owner; taken (dropped) at shutdown.
    registration: Mutex<Option<OwnerRegistration>>,
    pub(crate) store: Arc<dyn DynConversationStore>,
    pub(crate) agents: Arc<dyn AgentRegistry>,
    pub(crate) lease: Duration,
    pub(crate) poll_interval: Duration,
    pub(crate) events: broadcast::Sender<RuntimeEvent>,
    /// The conversations this runtime is driving (owns, or is trying to own).
    drivers: Mutex<HashMap<ConversationKey, Arc<DriverSlot>>>,
    pub(crate) stopping: CancellationToken,
    /// Driver tasks alive; `idle` fires when it drops to zero.
    active: AtomicUsize,
    idle: Notify,
    /// See [`AgentRuntimeBuilder::with_own_work_only`].
    pub(crate) own_work_only: bool,
    /// With `own_work_only`: the submissions this runtime dispatched and has not seen settled.
    own: Mutex<HashMap<ConversationKey, Vec<String>>>,
    /// The running slots of background tasks.
    pub(crate) background: BackgroundSlots,
    /// The telemetry spans of the submissions this runtime admitted, until they settle (only
    /// while a subscriber records them): their attempts nest under them.
    submission_spans: Mutex<HashMap<String, tracing::Span>>,
    /// Serializes this runtime's decisions on pending actions (they share one owner id, so
    /// two at once would fence each other off).
    pub(crate) resolving: tokio::sync::Mutex<()>,
    /// The root session logs of the conversations driven lately, kept between their
    /// harnesses so that the next message reads only what was appended since.
    pub(crate) logs: Arc<LogCache>,
    /// The tasks this runtime's harnesses run now, so one can be aborted alone.
    pub(crate) running_tasks: Arc<RunningTasks>,
    /// See [`AgentRuntimeBuilder::with_approval_key`].
    pub(crate) approval_key: Option<crate::standing::ApprovalKey>,
}

/// One conversation's driver, as the rest of the runtime sees it.
#[derive(Default)]
pub(crate) struct DriverSlot {
    /// Bumped by every dispatch that finds the driver running: new work may exist.
    pub(crate) kicks: AtomicU64,
    /// The attempt running now, so an abort in this process can stop it at once.
    pub(crate) attempt: Mutex<Option<AttemptControl>>,
}

impl DriverSlot {
    pub(crate) fn attempt(&self) -> MutexGuard<'_, Option<AttemptControl>> {
        self.attempt.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl RuntimeInner {
    fn drivers(&self) -> MutexGuard<'_, HashMap<ConversationKey, Arc<DriverSlot>>> {
        self.drivers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The span of a submission this runtime admitted, while it is unsettled.
    pub(crate) fn submission_span(&self, submission_id: &str) -> Option<tracing::Span> {
        self.submission_spans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(submission_id)
            .cloned()
    }

    pub(crate) fn emit(&self, key: &ConversationKey, submission_id: Option<&str>, event: Event) {
        if let Event::SubmissionSettled {
            submission_id,
            outcome,
            error,
        } = &event
        {
            let span = self
                .submission_spans
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(submission_id);
            if let Some(span) = span {
                spans::record_outcome(&span, *outcome, error.as_ref().map(|e| e.kind.as_str()));
            }
        }
        // No subscriber is fine: events are live-only.
        let _ = self.events.send(RuntimeEvent {
            conversation: key.clone(),
            submission_id: submission_id.map(str::to_owned),
            event,
        });
    }

    /// Whether a driver of this runtime works on `key` now.
    pub(crate) fn is_driving(&self, key: &ConversationKey) -> bool {
        self.drivers().contains_key(key)
    }

    /// Makes sure a driver works on `key`: tells the running one, or starts one.
    pub(crate) fn kick(self: &Arc<Self>, key: &ConversationKey) {
        let mut drivers = self.drivers();
        self.kick_locked(&mut drivers, key);
    }

    fn kick_locked(
        self: &Arc<Self>,
        drivers: &mut HashMap<ConversationKey, Arc<DriverSlot>>,
        key: &ConversationKey,
    ) {
        if let Some(slot) = drivers.get(key) {
            slot.kicks.fetch_add(1, Ordering::AcqRel);
            return;
        }
        if self.stopping.is_cancelled() {
            return;
        }
        let slot = Arc::new(DriverSlot::default());
        drivers.insert(key.clone(), Arc::clone(&slot));
        self.active.fetch_add(1, Ordering::AcqRel);
        let inner = Arc::clone(self);
        let key = key.clone();
        tokio::spawn(async move {
            let seen = driver::drive(&inner, &key, &slot).await;
            {
                let mut drivers = inner.drivers();
                drivers.remove(&key);
                // A dispatch that raced with the release: its work needs a new driver.
                if seen.is_some_and(|seen| slot.kicks.load(Ordering::Acquire) != seen) {
                    inner.kick_locked(&mut drivers, &key);
                }
            }
            if inner.active.fetch_sub(1, Ordering::AcqRel) == 1 {
                inner.idle.notify_waiters();
            }
        });
    }

    /// With `own_work_only`: whether a submission this runtime dispatched to `key` is not
    /// settled yet (forgetting the settled ones).
    pub(crate) async fn has_own_unsettled(&self, key: &ConversationKey) -> Result<bool> {
        let ids = self
            .own
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .cloned()
            .unwrap_or_default();
        let mut any = false;
        let mut settled = Vec::new();
        for id in ids {
            match self.store.submission_status(&id).await? {
                Some(status) if status.settlement.is_some() => settled.push(id),
                // Unsettled, or being admitted right now.
                _ => any = true,
            }
        }
        let mut own = self.own.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(current) = own.get_mut(key) {
            current.retain(|id| !settled.contains(id));
        }
        Ok(any)
    }

    fn forget_own(&self, key: &ConversationKey, submission_id: &str) {
        if let Some(ids) = self
            .own
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(key)
        {
            ids.retain(|id| id != submission_id);
        }
    }

    pub(crate) fn remember_own(&self, key: &ConversationKey, submission_id: &str) {
        self.own
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key.clone())
            .or_default()
            .push(submission_id.to_owned());
    }

    /// Starts a driver for every conversation with unsettled work that none of ours drives;
    /// the driver takes ownership only when the current owner is gone.
    async fn reconcile(self: &Arc<Self>) -> Result<()> {
        for conversation in self.store.orphaned_conversations(&self.owner_id).await? {
            // Ours too: a driver of ours that stopped without releasing (a store failure)
            // left it owned; a new driver takes it again under a new epoch.
            if self.own_work_only && !self.has_own_unsettled(&conversation.key).await? {
                continue;
            }
            self.kick(&conversation.key);
        }
        Ok(())
    }
}

impl std::fmt::Debug for AgentRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentRuntime")
            .field("owner_id", &self.inner.owner_id)
            .finish_non_exhaustive()
    }
}

impl AgentRuntime {
    /// Starts building a runtime on `store` serving `agents`.
    pub fn builder(
        store: Arc<dyn DynConversationStore>,
        agents: Arc<dyn AgentRegistry>,
    ) -> AgentRuntimeBuilder {
        AgentRuntimeBuilder {
            store,
            agents,
            lease: DEFAULT_LEASE,
            poll_interval: DEFAULT_POLL_INTERVAL,
            reconcile_interval: Some(DEFAULT_RECONCILE_INTERVAL),
            own_work_only: false,
            approval_key: None,
            background_limits: BackgroundLimits::default(),
        }
    }

    /// This runtime's owner id (as stored on the conversations it owns).
    pub fn owner_id(&self) -> &str {
        &self.inner.owner_id
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn DynConversationStore> {
        &self.inner.store
    }

    /// The agents served.
    pub fn agents(&self) -> &Arc<dyn AgentRegistry> {
        &self.inner.agents
    }

    /// Checks what a message to `agent` chooses for its run (model, thinking level, role,
    /// skill; see [`MessageOptions`](flue_protocol::submission::MessageOptions)) as [`AgentRuntime::dispatch`] does
    /// before admitting it, through [`AgentRegistry::check_options`](crate::submission::AgentRegistry::check_options):
    /// [`FlueError::InvalidRequest`] naming the field. Nothing to check passes at once.
    pub async fn check_options(
        &self,
        agent: &str,
        options: &flue_protocol::submission::MessageOptions,
    ) -> Result<()> {
        if options.is_empty() {
            return Ok(());
        }
        self.inner.agents.check_options(agent, options).await
    }

    /// Admits `message` to the conversation `key` and returns once it is durable, without
    /// waiting for the model. This runtime then processes the conversation unless a live owner
    /// (in any process) already does, in which case that owner picks the submission up.
    ///
    /// Errors (nothing admitted): [`FlueError::UnknownAgent`],
    /// [`FlueError::InvalidInstanceId`] (the id, or `<agent>:<id>`, breaks the id rule), [`FlueError::InvalidRequest`] (an empty signal
    /// type, a bad tag name, a model, role or skill the agent does not have), [`FlueError::RuntimeStopped`] after shutdown, and the store's
    /// admission errors ([`ConversationStore::admit`](crate::store::ConversationStore::admit)).
    pub async fn dispatch(
        &self,
        key: &ConversationKey,
        mut message: DeliveredMessage,
        mut options: DispatchOptions,
    ) -> Result<DispatchReceipt> {
        if self.inner.stopping.is_cancelled() {
            return Err(FlueError::RuntimeStopped {
                message: "the submission runtime was shut down".into(),
            });
        }
        check_conversation_id(&key.id)?;
        // The conversation's instance id must pass the same rule (it adds the agent name).
        check_conversation_id(&key.instance_id())?;
        if !self.inner.agents.contains(&key.agent) {
            return Err(FlueError::UnknownAgent {
                agent: key.agent.clone(),
                known: self.inner.agents.agent_names(),
            });
        }
        check_message(&message)?;
        self.inner.agents.check_runnable(&key.agent).await?;
        self.check_options(&key.agent, message.options()).await?;
        let redactor = self.inner.agents.redactor(&key.agent).await?;
        redact_message(&redactor, &mut message);
        let blocking = self.blocking_actions(key).await?;
        if !blocking.is_empty() {
            return Err(FlueError::ActionsPending {
                session: key.to_string(),
                actions: blocking,
            });
        }
        // An invalid caller trace context is dropped, never stored.
        options.trace_parent = options
            .trace_parent
            .as_deref()
            .and_then(spans::trace_parent);
        let admission = Admission {
            key: key.clone(),
            submission_id: new_ulid(),
            new_uid: new_ulid(),
            message,
            accepted_at: now_ms(),
            options,
        };
        if self.inner.own_work_only {
            self.inner.remember_own(key, &admission.submission_id);
        }
        let span = spans::submission(&key.agent, &key.instance_id(), &admission.submission_id);
        if let Some(parent) = super::background_parent(key) {
            spans::record_task_parent(&span, &parent.instance_id());
        }
        let admitted = self
            .inner
            .store
            .admit(&admission)
            .instrument(span.clone())
            .await;
        if !span.is_disabled()
            && let Ok(receipt) = &admitted
            && receipt.submission_id == admission.submission_id
        {
            self.inner
                .submission_spans
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(receipt.submission_id.clone(), span);
        }
        let receipt = match admitted {
            Ok(receipt) => receipt,
            Err(err) => {
                self.inner.forget_own(key, &admission.submission_id);
                return Err(err);
            }
        };
        if self.inner.own_work_only && receipt.submission_id != admission.submission_id {
            self.inner.remember_own(key, &receipt.submission_id);
        }
        self.inner.emit(
            key,
            Some(&receipt.submission_id),
            Event::SubmissionQueued {
                submission_id: receipt.submission_id.clone(),
            },
        );
        self.inner.kick(key);
        Ok(receipt)
    }

    /// Waits until the submission settles and returns its settlement, whichever process runs
    /// it. [`FlueError::SubmissionNotFound`] for an unknown id.
    pub async fn wait(&self, submission_id: &str) -> Result<Settlement> {
        let mut watch = None;
        loop {
            // The status alone: a large message is not read back at every head move.
            let status = self.lifecycle(submission_id).await?;
            if let Some(settlement) = status.settlement {
                return Ok(settlement);
            }
            match &mut watch {
                // Subscribe, then read again: a settlement between the two reads is not missed.
                None => watch = Some(self.inner.store.watch_head(&status.conversation)),
                // Wakes at once for this process's writes, within a poll for other processes'.
                Some(watch) => {
                    let _ = tokio::time::timeout(self.inner.poll_interval, watch.changed()).await;
                }
            }
        }
    }

    /// Waits for the submission's reply: the final text when it completed, else its error
    /// ([`FlueError::SubmissionAborted`], [`FlueError::SubmissionTimeout`],
    /// [`FlueError::SubmissionRetryExhausted`], [`FlueError::SubmissionInterrupted`] or
    /// [`FlueError::SubmissionFailed`] carrying the operation's error).
    pub async fn read(&self, submission_id: &str) -> Result<String> {
        let settlement = self.wait(submission_id).await?;
        if settlement.outcome == Outcome::Completed {
            return Ok(settlement.text.unwrap_or_default());
        }
        let info = self.status(submission_id).await?;
        Err(settlement_error(&info, &settlement))
    }

    /// The submission's lifecycle without its message (cheaper than
    /// [`AgentRuntime::status`] for a large message); [`FlueError::SubmissionNotFound`] for an
    /// unknown id.
    pub async fn lifecycle(&self, submission_id: &str) -> Result<SubmissionStatus> {
        self.inner
            .store
            .submission_status(submission_id)
            .await?
            .ok_or_else(|| FlueError::SubmissionNotFound {
                submission_id: submission_id.to_owned(),
            })
    }

    /// The submission's current state; [`FlueError::SubmissionNotFound`] for an unknown id.
    pub async fn status(&self, submission_id: &str) -> Result<SubmissionInfo> {
        self.inner
            .store
            .submission(submission_id)
            .await?
            .ok_or_else(|| FlueError::SubmissionNotFound {
                submission_id: submission_id.to_owned(),
            })
    }

    /// Aborts the conversation's running submission and every queued one, whichever process
    /// runs them. Returns `true` when there was unsettled work. Queued submissions settle
    /// `aborted` at once; the running one settles `aborted` as soon as its owner sees the
    /// request (at once in this process, within one poll interval in another), or at recovery
    /// when its owner is gone.
    pub async fn abort(&self, key: &ConversationKey) -> Result<bool> {
        let report = self.inner.store.request_abort(key).await?;
        for submission_id in &report.settled {
            // A background child aborted before it ran: its parent still hears of it.
            let error = FlueError::SubmissionAborted {
                submission_id: submission_id.clone(),
            };
            let settlement = Settlement {
                submission_id: submission_id.clone(),
                outcome: Outcome::Aborted,
                text: None,
                data: None,
                error: Some(error.to_info()),
                attempts: 0,
                settled_at: now_ms(),
            };
            self.inner.deliver_background(key, &settlement).await?;
            self.inner.emit(
                key,
                Some(submission_id),
                Event::SubmissionSettled {
                    submission_id: submission_id.clone(),
                    outcome: Outcome::Aborted,
                    error: Some(
                        FlueError::SubmissionAborted {
                            submission_id: submission_id.clone(),
                        }
                        .to_info(),
                    ),
                },
            );
        }
        let slot = self.inner.drivers().get(key).cloned();
        if let Some(slot) = slot
            && let Some(attempt) = slot.attempt().as_ref()
            && report.requested.contains(&attempt.submission_id)
        {
            attempt.stop(StopReason::Abort);
        }
        if report.requested.len() > report.settled.len() {
            // The running one may belong to a dead owner: recovery settles it.
            self.inner.kick(key);
        }
        Ok(!report.requested.is_empty())
    }

    /// Aborts one running task of the conversation (its task session `session`, at any
    /// depth) without aborting the submission: the `task` call waiting for it gets a
    /// `task_aborted` tool result and the parent goes on. Returns whether the task was running
    /// in this process (a task runs where its conversation's owner runs).
    pub fn abort_task(&self, key: &ConversationKey, session: &str) -> bool {
        self.inner.running_tasks.abort(&key.instance_id(), session)
    }

    /// The task sessions of the conversation running in this process now, sorted.
    pub fn running_tasks(&self, key: &ConversationKey) -> Vec<String> {
        self.inner.running_tasks.list(&key.instance_id())
    }

    /// Deletes a conversation: its stream, submissions and every session (the root session and
    /// its task and action sessions), in one store transaction, whichever process created it.
    /// Returns whether anything was there (deleting a missing conversation is not an error).
    /// Refused with [`FlueError::ConversationBusy`] (kind `session_busy`) while a submission
    /// is queued, running or waiting for a decision: abort it first. The audit log and trash
    /// of its file tools are kept. The next message to the key starts a new conversation.
    pub async fn delete(&self, key: &ConversationKey) -> Result<bool> {
        check_conversation_id(&key.id)?;
        let deleted = self.inner.store.delete_conversation(key).await?;
        self.inner.agents.forget_conversation(key).await;
        // A root log this runtime kept for the conversation's next message is stale now.
        self.inner
            .logs
            .forget(&SessionKey::new(key.instance_id(), ROOT_SESSION));
        Ok(deleted)
    }

    /// The conversation's head and ownership, or `None` when it does not exist.
    pub async fn conversation(&self, key: &ConversationKey) -> Result<Option<ConversationInfo>> {
        self.inner.store.conversation(key).await
    }

    /// Up to `limit` stream batches after `after` (see [`ConversationStore::read_stream`](crate::store::ConversationStore::read_stream)).
    pub async fn read_stream(
        &self,
        key: &ConversationKey,
        after: Offset,
        limit: usize,
    ) -> Result<StreamPage> {
        self.inner.store.read_stream(key, after, limit).await
    }

    /// Waits until the conversation's head passes `after`, or `timeout` elapses; returns the
    /// head. Wakes at once for writes of this process and within one poll interval for writes
    /// of other processes. [`FlueError::AgentInstanceNotFound`] when it does not exist.
    pub async fn wait_for_growth(
        &self,
        key: &ConversationKey,
        after: Offset,
        timeout: Duration,
    ) -> Result<Offset> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut watch = self.inner.store.watch_head(key);
        loop {
            let head = self
                .inner
                .store
                .conversation(key)
                .await?
                .ok_or_else(|| FlueError::AgentInstanceNotFound {
                    agent: key.agent.clone(),
                    id: key.id.clone(),
                    uid: None,
                })?
                .head;
            let now = tokio::time::Instant::now();
            if head > after || now >= deadline {
                return Ok(head);
            }
            let wait = self.inner.poll_interval.min(deadline - now);
            let _ = tokio::time::timeout(wait, watch.changed()).await;
        }
    }

    /// Subscribes to this process's runtime events (lifecycle and operation events of the
    /// submissions this runtime runs). Slow subscribers miss events (they are live-only); the
    /// durable truth is the stream.
    pub fn subscribe(&self) -> broadcast::Receiver<RuntimeEvent> {
        self.inner.events.subscribe()
    }

    /// Stops taking work, aborts running attempts at their next await, waits for them to stop,
    /// and gives up this process's owner registration, so another runtime can resume the
    /// interrupted submissions at once (they stay unsettled; the attempt counts).
    pub async fn shutdown(self) -> Result<()> {
        self.inner.stopping.cancel();
        let slots: Vec<Arc<DriverSlot>> = self.inner.drivers().values().cloned().collect();
        for slot in slots {
            if let Some(attempt) = slot.attempt().as_ref() {
                attempt.stop(StopReason::Shutdown);
            }
        }
        loop {
            let idle = self.inner.idle.notified();
            if self.inner.active.load(Ordering::Acquire) == 0 {
                break;
            }
            let _ = tokio::time::timeout(self.inner.poll_interval, idle).await;
        }
        drop(
            self.inner
                .registration
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        Ok(())
    }
}

/// The typed error of a settlement that did not complete.
fn settlement_error(info: &SubmissionInfo, settlement: &Settlement) -> FlueError {
    let submission_id = settlement.submission_id.clone();
    let durability = info.durability.clone().unwrap_or_default();
    let Some(error) = settlement.error.clone() else {
        return FlueError::SubmissionAborted { submission_id };
    };
    match (settlement.outcome, error.kind.as_str()) {
        (Outcome::Aborted, _) | (_, "submission_aborted") => {
            FlueError::SubmissionAborted { submission_id }
        }
        (_, "submission_timeout") => FlueError::SubmissionTimeout {
            submission_id,
            timeout_ms: durability.timeout_ms,
        },
        (_, "submission_retry_exhausted") => FlueError::SubmissionRetryExhausted {
            submission_id,
            attempts: settlement.attempts,
            max_attempts: durability.max_attempts,
        },
        (_, "submission_interrupted") => FlueError::SubmissionInterrupted {
            submission_id,
            reason: error.message,
        },
        _ => FlueError::SubmissionFailed {
            submission_id,
            error,
        },
    }
}
