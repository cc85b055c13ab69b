//! Conversation stores: durable submissions, one ordered stream per conversation, ownership.
//!
//! [`ConversationStore`] extends [`SessionStore`] with what the submission runtime needs, in a
//! shape that suits many processes on one database (SQLite here; Postgres in flue-connectors):
//!
//! - **One sequence per conversation.** Every write that touches a conversation (the session
//!   records of its root and task sessions, and the admission, start, abort and settlement of
//!   its submissions) takes the conversation's next sequence number in the same transaction.
//!   Those numbers are the stream's [`Offset`]s.
//! - **Admission outside the log.** An admitted message is kept in its submission row and in an
//!   `admitted` batch, not in any session log, until an attempt starts it; the agent loop then
//!   appends the `User` record. So admission never moves a session's version, and the running
//!   owner's optimistic-concurrency appends are unaffected by new messages.
//! - **Ownership with fencing.** One owner processes a conversation at a time. Taking ownership
//!   bumps the conversation's epoch; every lifecycle write and every session append of a
//!   managed conversation carries a [`Fence`] that is checked in the same transaction, so an
//!   owner that lost its ownership writes nothing ([`FlueError::LeaseLost`]).
//! - **Liveness behind the trait.** Whether an owner is still alive is the store's business: the
//!   SQLite store holds an OS lock per owner next to the database (released by the kernel when
//!   the process dies), the Postgres store a session advisory lock on a dedicated connection
//!   (released by the database when that connection closes). A lease, renewed
//!   while working, covers owners that hang without dying.
//!
//! [`FlueError::LeaseLost`]: crate::FlueError::LeaseLost

use std::fmt;
use std::time::Duration;

use flue_protocol::{
    ConversationInfo, ConversationKey, DeliveredMessage, DispatchOptions, DispatchReceipt,
    DurabilityConfig, Offset, Settlement, StreamPage, SubmissionInfo,
};
use tokio::sync::watch;

use crate::error::{FlueError, Result};
use crate::event::Outcome;
use crate::record::StoredRecord;
use crate::store::{SessionKey, SessionStore};
use crate::util::{BoxFuture, now_ms};

/// A process's identity as a conversation owner. The owner counts as alive while this value
/// (and its store-specific guard, e.g. an OS file lock) lives; drop it on clean exit.
pub struct OwnerRegistration {
    owner_id: String,
    _guard: Box<dyn Send + Sync>,
}

impl OwnerRegistration {
    /// A registration keeping `guard` alive as long as itself (for store implementations).
    pub fn new(owner_id: impl Into<String>, guard: impl Send + Sync + 'static) -> Self {
        Self {
            owner_id: owner_id.into(),
            _guard: Box::new(guard),
        }
    }

    /// The owner id.
    pub fn owner_id(&self) -> &str {
        &self.owner_id
    }
}

impl fmt::Debug for OwnerRegistration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnerRegistration")
            .field("owner_id", &self.owner_id)
            .finish_non_exhaustive()
    }
}

/// Proof of ownership of one conversation: every fenced write carries it, and the store
/// rejects it once another owner took the conversation (a higher epoch).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Fence {
    /// The conversation.
    pub key: ConversationKey,
    /// The owner.
    pub owner_id: String,
    /// The epoch the owner got when it took the conversation.
    pub epoch: u64,
}

/// One admission, as the runtime hands it to [`ConversationStore::admit`].
#[derive(Clone, Debug, PartialEq)]
pub struct Admission {
    /// The conversation.
    pub key: ConversationKey,
    /// A fresh submission id (used unless an idempotency key matches an earlier one).
    pub submission_id: String,
    /// A fresh uid, used if this admission creates the conversation.
    pub new_uid: String,
    /// The message.
    pub message: DeliveredMessage,
    /// Admission time, ms since the epoch.
    pub accepted_at: u64,
    /// Idempotency key, send condition, busy policy.
    pub options: DispatchOptions,
}

/// What [`ConversationStore::acquire`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Acquire {
    /// The caller owns the conversation now.
    Owned(Fence),
    /// A live owner holds it; the caller must leave it alone.
    Held {
        /// The owner's id.
        owner_id: String,
    },
}

/// A submission claimed for an attempt by [`ConversationStore::claim_next`].
#[derive(Clone, Debug, PartialEq)]
pub struct Claim {
    /// The submission, as of the claim (state `running`, `attempts` already counting this one).
    pub submission: SubmissionInfo,
    /// The durability limits in force: the ones stored at its first attempt.
    pub durability: DurabilityConfig,
}

/// What [`ConversationStore::request_abort`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AbortReport {
    /// Every unsettled submission that now carries an abort request.
    pub requested: Vec<String>,
    /// The queued ones among them, settled `aborted` on the spot.
    pub settled: Vec<String>,
}

/// A fenced append of session records (see [`ConversationStore::append_fenced`]).
#[derive(Clone, Copy, Debug)]
pub struct FencedAppend<'a> {
    /// The owner's fence.
    pub fence: &'a Fence,
    /// The submission the records belong to, if any (tags the stream batch).
    pub submission_id: Option<&'a str>,
    /// True for the append that carries the submission's input (marks it `input_applied` in the
    /// same transaction).
    pub applies_input: bool,
    /// True for the append that carries a decision on a pending action: in the same
    /// transaction, the conversation's `waiting` submission becomes `queued` again, its
    /// waiting time is taken off its wall-clock budget (`first_started_at` moves forward by
    /// it) and the attempt it paused in is given back (`attempts` goes down by one, so the
    /// next claim counts the same attempt again).
    pub resumes_waiting: bool,
    /// The session (one of the conversation's).
    pub session: &'a SessionKey,
    /// The session version the writer expects.
    pub expected_version: u64,
    /// The records.
    pub records: &'a [StoredRecord],
}

/// Notifications of a conversation's stream head, from writers sharing this store value.
///
/// In-process only: the SQLite store cannot see other processes' writes without polling, so
/// waiters combine this with a periodic read (see `AgentRuntime::wait_for_growth`). The Postgres
/// store feeds it from LISTEN/NOTIFY, so it also carries other processes' writes.
pub type HeadWatch = watch::Receiver<Offset>;

/// Durable submissions, conversation streams and ownership, on top of session storage.
///
/// Callers: `AgentRuntime` (flue-core) for everything; HTTP servers and CLIs read through the
/// runtime. Every method is atomic: concurrent callers, in one process or many, never both
/// observe success of conflicting operations. One contract suite
/// (`tests/it/conversation_contract.rs`) runs against every implementation.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a conversation store",
    label = "implement `flue_core::ConversationStore` for this type"
)]
pub trait ConversationStore: SessionStore {
    /// Admits a message durably, in one transaction: applies the send condition, the busy
    /// policy and the idempotency key, creates the conversation (with its `created` batch and
    /// its root session) when absent, inserts the submission `queued` and records its
    /// `admitted` batch.
    ///
    /// Errors: [`FlueError::AgentInstanceNotFound`], [`FlueError::AgentInstanceExists`],
    /// [`FlueError::ConversationBusy`], [`FlueError::SubmissionConflict`]; none writes anything.
    ///
    /// [`FlueError::AgentInstanceNotFound`]: crate::FlueError::AgentInstanceNotFound
    /// [`FlueError::AgentInstanceExists`]: crate::FlueError::AgentInstanceExists
    /// [`FlueError::ConversationBusy`]: crate::FlueError::ConversationBusy
    /// [`FlueError::SubmissionConflict`]: crate::FlueError::SubmissionConflict
    fn admit<'a>(&'a self, admission: &'a Admission) -> BoxFuture<'a, Result<DispatchReceipt>>;

    /// A conversation's head and ownership, or `None` when it was never created.
    fn conversation<'a>(
        &'a self,
        key: &'a ConversationKey,
    ) -> BoxFuture<'a, Result<Option<ConversationInfo>>>;

    /// Every conversation, of any agent, with this id (for CLIs that take `--id` alone).
    fn conversations_with_id<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<ConversationInfo>>>;

    /// Conversations with unsettled submissions, oldest first (for recovery scans).
    fn pending_conversations(&self) -> BoxFuture<'_, Result<Vec<ConversationInfo>>>;

    /// Every conversation, oldest first (by creation, then instance id): what
    /// `flue session list` shows.
    fn all_conversations(&self) -> BoxFuture<'_, Result<Vec<ConversationInfo>>>;

    /// The conversations with unsettled submissions that `owner_id` could take now, oldest
    /// first: for the periodic recovery scan, which runs often on a shared database.
    ///
    /// The default is [`ConversationStore::pending_conversations`] (every such conversation;
    /// `acquire` then leaves the held ones alone). A store may leave out those a live owner
    /// other than `owner_id` holds under an unexpired lease, so that a scan costs one query.
    fn orphaned_conversations<'a>(
        &'a self,
        owner_id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<ConversationInfo>>> {
        let _ = owner_id;
        self.pending_conversations()
    }

    /// One submission, or `None` when the id is unknown.
    fn submission<'a>(
        &'a self,
        submission_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<SubmissionInfo>>>;

    /// The unsettled submissions of a conversation, in admission order.
    fn unsettled<'a>(
        &'a self,
        key: &'a ConversationKey,
    ) -> BoxFuture<'a, Result<Vec<SubmissionInfo>>>;

    /// Up to `limit` batches after `after`. [`FlueError::AgentInstanceNotFound`] for an unknown
    /// conversation, [`FlueError::OffsetOutOfRange`] past the head. Never blocks writers.
    ///
    /// [`FlueError::AgentInstanceNotFound`]: crate::FlueError::AgentInstanceNotFound
    /// [`FlueError::OffsetOutOfRange`]: crate::FlueError::OffsetOutOfRange
    fn read_stream<'a>(
        &'a self,
        key: &'a ConversationKey,
        after: Offset,
        limit: usize,
    ) -> BoxFuture<'a, Result<StreamPage>>;

    /// Watches the head of a conversation's stream (see [`HeadWatch`]).
    fn watch_head(&self, key: &ConversationKey) -> HeadWatch;

    /// Records an abort request on every unsettled submission of the conversation, settles the
    /// queued ones `aborted` at once, and leaves the running one to its owner (or to recovery,
    /// when the owner is gone). Idempotent.
    fn request_abort<'a>(&'a self, key: &'a ConversationKey) -> BoxFuture<'a, Result<AbortReport>>;

    /// Registers this process as a potential owner; it counts as alive while the registration
    /// lives.
    fn register_owner(&self) -> BoxFuture<'_, Result<OwnerRegistration>>;

    /// Whether an owner is alive (its registration lives, in any process).
    fn owner_alive<'a>(&'a self, owner_id: &'a str) -> BoxFuture<'a, Result<bool>>;

    /// Takes ownership for `owner_id` when nobody holds the conversation, when its owner is
    /// dead or its lease expired, or when `owner_id` itself holds it (a driver of its own
    /// stopped without releasing); the epoch goes up, fencing off the previous holder. `lease`
    /// is how long the ownership lasts without [`ConversationStore::renew`].
    fn acquire<'a>(
        &'a self,
        key: &'a ConversationKey,
        owner_id: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<Acquire>>;

    /// Extends the lease; [`FlueError::LeaseLost`] when another owner took over.
    ///
    /// [`FlueError::LeaseLost`]: crate::FlueError::LeaseLost
    fn renew<'a>(&'a self, fence: &'a Fence, lease: Duration) -> BoxFuture<'a, Result<()>>;

    /// Gives ownership up, unless unsettled submissions remain (then returns `false` and the
    /// caller stays the owner). [`FlueError::LeaseLost`] when another owner took over.
    ///
    /// [`FlueError::LeaseLost`]: crate::FlueError::LeaseLost
    fn release<'a>(&'a self, fence: &'a Fence) -> BoxFuture<'a, Result<bool>>;

    /// Starts the next attempt: the oldest unsettled submission (an interrupted `running` one
    /// before any `queued` one) becomes `running`, its attempt count goes up by one, a
    /// `started` batch is recorded, and `durability` is stored at its first attempt. `None`
    /// when nothing is unsettled.
    fn claim_next<'a>(
        &'a self,
        fence: &'a Fence,
        durability: &'a DurabilityConfig,
    ) -> BoxFuture<'a, Result<Option<Claim>>>;

    /// Settles a submission and records its `settled` batch; `false` (writing nothing) when it
    /// was settled already: the first terminal state wins.
    fn settle<'a>(
        &'a self,
        fence: &'a Fence,
        settlement: &'a Settlement,
    ) -> BoxFuture<'a, Result<bool>>;

    /// Appends session records of a managed conversation under its fence: the session version
    /// check of [`SessionStore::append`] plus the fence, and one `records` batch on the stream.
    fn append_fenced<'a>(&'a self, append: FencedAppend<'a>) -> BoxFuture<'a, Result<u64>>;

    /// Pauses a `running` submission on pending actions: it becomes `waiting` (remembering
    /// when), and a `waiting` batch naming `actions` is recorded. A waiting submission is
    /// unsettled but needs no work: it is left out of [`ConversationInfo::unsettled`], of
    /// [`ConversationStore::pending_conversations`] and of the check in
    /// [`ConversationStore::release`]; [`ConversationStore::claim_next`] returns `None` while
    /// it is the oldest unsettled one (the submissions behind it wait too);
    /// [`ConversationStore::request_abort`] settles it `aborted` at once, like a queued one.
    /// A fenced append with [`FencedAppend::resumes_waiting`] makes it `queued` again.
    /// Returns `false` (writing nothing) when the submission is not `running`.
    ///
    /// Callers: the submission driver, when an attempt ends with `requires_action`.
    ///
    /// [`ConversationInfo::unsettled`]: crate::ConversationInfo::unsettled
    fn wait<'a>(
        &'a self,
        fence: &'a Fence,
        submission_id: &'a str,
        actions: &'a [String],
    ) -> BoxFuture<'a, Result<bool>>;
}

/// Head watchers of one store value: one `watch` channel per conversation with subscribers.
#[derive(Debug, Default)]
pub(crate) struct HeadWatchers {
    senders: std::sync::Mutex<std::collections::HashMap<String, watch::Sender<Offset>>>,
}

impl HeadWatchers {
    /// A receiver for `instance_id`, starting at `Offset::START` (callers compare with the
    /// head they read from the store).
    pub(crate) fn watch(&self, instance_id: &str) -> HeadWatch {
        let mut senders = self
            .senders
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        senders
            .entry(instance_id.to_owned())
            .or_insert_with(|| watch::channel(Offset::START).0)
            .subscribe()
    }

    /// Tells the subscribers of `instance_id` that the head is now `head`.
    pub(crate) fn notify(&self, instance_id: &str, head: Offset) {
        let mut senders = self
            .senders
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(sender) = senders.get(instance_id) {
            if sender.receiver_count() == 0 {
                senders.remove(instance_id);
            } else {
                sender.send_if_modified(|current| {
                    let grew = head > *current;
                    if grew {
                        *current = head;
                    }
                    grew
                });
            }
        }
    }
}

/// Owners registered in this process, for stores without an OS-level liveness signal (the
/// memory store, in-memory SQLite): an owner is alive while its registration's token lives.
#[derive(Debug, Default)]
pub(crate) struct LocalOwners {
    owners: std::sync::Mutex<std::collections::HashMap<String, std::sync::Weak<()>>>,
}

impl LocalOwners {
    /// Registers a fresh owner.
    pub(crate) fn register(&self) -> OwnerRegistration {
        let owner_id = crate::util::new_ulid();
        let token = std::sync::Arc::new(());
        let mut owners = self
            .owners
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        owners.retain(|_, weak| weak.strong_count() > 0);
        owners.insert(owner_id.clone(), std::sync::Arc::downgrade(&token));
        OwnerRegistration::new(owner_id, token)
    }

    /// Whether the owner's registration still lives.
    pub(crate) fn alive(&self, owner_id: &str) -> bool {
        self.owners
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(owner_id)
            .is_some_and(|weak| weak.strong_count() > 0)
    }
}

/// The root session every conversation has; submissions run on it.
pub(crate) const ROOT_SESSION: &str = "default";

/// The settlement of a submission aborted before (or instead of) finishing.
pub(crate) fn aborted_settlement(submission_id: &str, attempts: u32) -> Settlement {
    Settlement {
        submission_id: submission_id.to_owned(),
        outcome: Outcome::Aborted,
        text: None,
        error: Some(
            FlueError::SubmissionAborted {
                submission_id: submission_id.to_owned(),
            }
            .to_info(),
        ),
        attempts,
        settled_at: now_ms(),
    }
}

/// The error for a missing conversation (or another incarnation than `uid`).
pub(crate) fn instance_not_found(key: &ConversationKey, uid: Option<&String>) -> FlueError {
    FlueError::AgentInstanceNotFound {
        agent: key.agent.clone(),
        id: key.id.clone(),
        uid: uid.cloned(),
    }
}

/// The error for a write whose fence is stale.
pub(crate) fn lease_lost(fence: &Fence, message: &str) -> FlueError {
    FlueError::LeaseLost {
        conversation: fence.key.to_string(),
        epoch: fence.epoch,
        message: message.to_owned(),
    }
}

/// A duration in whole milliseconds, saturating.
pub(crate) fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
