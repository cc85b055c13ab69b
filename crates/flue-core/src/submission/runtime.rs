//! The submission runtime: dispatch, wait, status, abort, stream reads and recovery scans.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast;

use crate::error::{FlueError, Result};
use crate::event::Event;
use crate::store::ConversationStore;
use crate::submission::registry::AgentRegistry;
use crate::submission::wire::{
    ConversationInfo, ConversationKey, DeliveredMessage, DispatchOptions, DispatchReceipt, Offset,
    Settlement, StreamPage, SubmissionInfo,
};

/// Default ownership lease: how long a conversation stays owned without renewal.
const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// Default interval of cross-process polls (settlement waits, abort requests, stream growth).
const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(50);
/// Default interval of recovery scans for conversations whose owner died.
const DEFAULT_RECONCILE_INTERVAL: Duration = Duration::from_secs(2);

/// Builds an [`AgentRuntime`].
pub struct AgentRuntimeBuilder {
    store: Arc<dyn ConversationStore>,
    agents: Arc<dyn AgentRegistry>,
    lease: Duration,
    poll_interval: Duration,
    reconcile_interval: Option<Duration>,
}

impl AgentRuntimeBuilder {
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
        let _ = (
            &self.store,
            &self.agents,
            self.lease,
            self.poll_interval,
            self.reconcile_interval,
        );
        Err(not_yet("AgentRuntimeBuilder::start"))
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
///     AgentConfig, AgentRuntime, ConversationKey, DeliveredMessage, Harness, SqliteStore,
///     StaticAgents,
/// };
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
    store: Arc<dyn ConversationStore>,
    events: broadcast::Sender<RuntimeEvent>,
}

impl std::fmt::Debug for AgentRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentRuntime").finish_non_exhaustive()
    }
}

impl AgentRuntime {
    /// Starts building a runtime on `store` serving `agents`.
    pub fn builder(
        store: Arc<dyn ConversationStore>,
        agents: Arc<dyn AgentRegistry>,
    ) -> AgentRuntimeBuilder {
        AgentRuntimeBuilder {
            store,
            agents,
            lease: DEFAULT_LEASE,
            poll_interval: DEFAULT_POLL_INTERVAL,
            reconcile_interval: Some(DEFAULT_RECONCILE_INTERVAL),
        }
    }

    /// This runtime's owner id (as stored on the conversations it owns).
    pub fn owner_id(&self) -> &str {
        ""
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn ConversationStore> {
        &self.store
    }

    /// Admits `message` to the conversation `key` and returns once it is durable, without
    /// waiting for the model. This runtime then processes the conversation unless a live owner
    /// (in any process) already does, in which case that owner picks the submission up.
    ///
    /// Errors (nothing admitted): [`FlueError::UnknownAgent`],
    /// [`FlueError::InvalidConversationId`], [`FlueError::InvalidRequest`] (an empty signal
    /// type, a bad tag name), and the store's admission errors
    /// ([`ConversationStore::admit`]).
    pub async fn dispatch(
        &self,
        key: &ConversationKey,
        message: DeliveredMessage,
        options: DispatchOptions,
    ) -> Result<DispatchReceipt> {
        let _ = (key, message, options);
        Err(not_yet("AgentRuntime::dispatch"))
    }

    /// Waits until the submission settles and returns its settlement, whichever process runs
    /// it. [`FlueError::SubmissionNotFound`] for an unknown id.
    pub async fn wait(&self, submission_id: &str) -> Result<Settlement> {
        let _ = submission_id;
        Err(not_yet("AgentRuntime::wait"))
    }

    /// Waits for the submission's reply: the final text when it completed, else its error
    /// ([`FlueError::SubmissionAborted`], [`FlueError::SubmissionTimeout`],
    /// [`FlueError::SubmissionRetryExhausted`], [`FlueError::SubmissionInterrupted`] or
    /// [`FlueError::SubmissionFailed`] carrying the operation's error).
    pub async fn read(&self, submission_id: &str) -> Result<String> {
        let _ = submission_id;
        Err(not_yet("AgentRuntime::read"))
    }

    /// The submission's current state; [`FlueError::SubmissionNotFound`] for an unknown id.
    pub async fn status(&self, submission_id: &str) -> Result<SubmissionInfo> {
        let _ = submission_id;
        Err(not_yet("AgentRuntime::status"))
    }

    /// Aborts the conversation's running submission and every queued one, whichever process
    /// runs them. Returns `true` when there was unsettled work. Queued submissions settle
    /// `aborted` at once; the running one settles `aborted` as soon as its owner sees the
    /// request (within one poll interval), or at recovery when its owner is gone.
    pub async fn abort(&self, key: &ConversationKey) -> Result<bool> {
        let _ = key;
        Err(not_yet("AgentRuntime::abort"))
    }

    /// The conversation's head and ownership, or `None` when it does not exist.
    pub async fn conversation(&self, key: &ConversationKey) -> Result<Option<ConversationInfo>> {
        self.store.conversation(key).await
    }

    /// Up to `limit` stream batches after `after` (see [`ConversationStore::read_stream`]).
    pub async fn read_stream(
        &self,
        key: &ConversationKey,
        after: Offset,
        limit: usize,
    ) -> Result<StreamPage> {
        self.store.read_stream(key, after, limit).await
    }

    /// Waits until the conversation's head passes `after`, or `timeout` elapses; returns the
    /// head. Wakes at once for writes of this process and within one poll interval for writes
    /// of other processes.
    pub async fn wait_for_growth(
        &self,
        key: &ConversationKey,
        after: Offset,
        timeout: Duration,
    ) -> Result<Offset> {
        let _ = (key, after, timeout);
        Err(not_yet("AgentRuntime::wait_for_growth"))
    }

    /// Subscribes to this process's runtime events (lifecycle and operation events of the
    /// submissions this runtime runs). Slow subscribers miss events (they are live-only); the
    /// durable truth is the stream.
    pub fn subscribe(&self) -> broadcast::Receiver<RuntimeEvent> {
        self.events.subscribe()
    }

    /// Stops taking work, aborts running attempts at their next await, waits for them to stop,
    /// and releases every conversation this runtime owns (interrupted submissions stay
    /// unsettled and are resumed by the next runtime).
    pub async fn shutdown(self) -> Result<()> {
        Err(not_yet("AgentRuntime::shutdown"))
    }
}

fn not_yet(what: &str) -> FlueError {
    FlueError::RuntimeStopped {
        message: format!("{what} is not implemented yet"),
    }
}
