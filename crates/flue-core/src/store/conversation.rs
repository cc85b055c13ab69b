//! Conversation stores: durable submissions, one ordered stream per conversation, ownership.
//!
//! [`ConversationStore`] extends [`SessionStore`] with what the submission runtime needs, in a
//! shape that suits many processes on one database (SQLite and Postgres in flue-store):
//!
//! - **One sequence per conversation.** Every write that touches a conversation (the session
//!   records of its root and task sessions, and the admission, start, abort and settlement of
//!   its submissions) takes the conversation's next sequence number in the same transaction.
//!   Those numbers are the stream's [`Offset`]s.
//! - **Admission outside the log.** An admitted message is kept in its submission row, not in
//!   any session log, until an attempt starts it; the agent loop then appends the `User`
//!   record. Its `admitted` batch refers to the submission (the durable stores keep the
//!   message once), and a stream read puts the message back in the batch. So admission never moves a session's version, and the running
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
//! [`FlueError::LeaseLost`]: crate::error::FlueError::LeaseLost

use std::fmt;
use std::time::Duration;

use flue_protocol::record::StoredRecord;
use flue_protocol::{
    ConversationInfo, ConversationKey, DeliveredMessage, DispatchOptions, DispatchReceipt,
    DurabilityConfig, Offset, Settlement, StreamPage, SubmissionInfo, SubmissionState,
};
use tokio::sync::watch;

use crate::error::Result;
use crate::store::listing::{ListedConversation, ListingQuery};
use crate::store::{DynSessionStore, SessionKey, SessionStore};
use crate::util::BoxFuture;

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

/// A submission's lifecycle without its message ([`ConversationStore::submission_status`]).
#[derive(Clone, Debug, PartialEq)]
pub struct SubmissionStatus {
    /// Its conversation.
    pub conversation: ConversationKey,
    /// Lifecycle state.
    pub state: SubmissionState,
    /// True once an abort was requested.
    pub abort_requested: bool,
    /// The settlement, once settled.
    pub settlement: Option<Settlement>,
}

impl SubmissionStatus {
    /// The status of `info`.
    pub fn of(info: &SubmissionInfo) -> Self {
        Self {
            conversation: info.conversation.clone(),
            state: info.state,
            abort_requested: info.abort_requested,
            settlement: info.settlement.clone(),
        }
    }
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
    /// [`FlueError::AgentInstanceNotFound`]: crate::error::FlueError::AgentInstanceNotFound
    /// [`FlueError::AgentInstanceExists`]: crate::error::FlueError::AgentInstanceExists
    /// [`FlueError::ConversationBusy`]: crate::error::FlueError::ConversationBusy
    /// [`FlueError::SubmissionConflict`]: crate::error::FlueError::SubmissionConflict
    fn admit(&self, admission: &Admission) -> impl Future<Output = Result<DispatchReceipt>> + Send;

    /// A conversation's head and ownership, or `None` when it was never created.
    fn conversation(
        &self,
        key: &ConversationKey,
    ) -> impl Future<Output = Result<Option<ConversationInfo>>> + Send;

    /// Every conversation, of any agent, with this id (for CLIs that take `--id` alone).
    fn conversations_with_id(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Vec<ConversationInfo>>> + Send;

    /// Conversations with unsettled submissions, oldest first (for recovery scans).
    fn pending_conversations(&self) -> impl Future<Output = Result<Vec<ConversationInfo>>> + Send;

    /// Every conversation, oldest first (by creation, then instance id): what
    /// `flue session list` shows.
    fn all_conversations(&self) -> impl Future<Output = Result<Vec<ConversationInfo>>> + Send;

    /// A page of conversations, most recently active first (by last write, then instance id),
    /// as `query` asks, with the summary each write kept up to date: what listings show
    /// (`flue session list`, the console). Costs the page, not the store.
    fn list_conversations(
        &self,
        query: &ListingQuery,
    ) -> impl Future<Output = Result<Vec<ListedConversation>>> + Send;

    /// How many conversations the store holds.
    fn count_conversations(&self) -> impl Future<Output = Result<u64>> + Send;

    /// The conversations with unsettled submissions that `owner_id` could take now, oldest
    /// first: for the periodic recovery scan, which runs often on a shared database.
    ///
    /// The default is [`ConversationStore::pending_conversations`] (every such conversation;
    /// `acquire` then leaves the held ones alone). A store may leave out those a live owner
    /// other than `owner_id` holds under an unexpired lease, so that a scan costs one query.
    fn orphaned_conversations(
        &self,
        owner_id: &str,
    ) -> impl Future<Output = Result<Vec<ConversationInfo>>> + Send {
        let _ = owner_id;
        self.pending_conversations()
    }

    /// One submission, or `None` when the id is unknown.
    fn submission(
        &self,
        submission_id: &str,
    ) -> impl Future<Output = Result<Option<SubmissionInfo>>> + Send;

    /// One submission's lifecycle without its message, or `None` when the id is unknown:
    /// what waits and polls read, so that they do not read a large message back each time.
    /// The default reads the whole submission; the durable stores leave the message out.
    fn submission_status(
        &self,
        submission_id: &str,
    ) -> impl Future<Output = Result<Option<SubmissionStatus>>> + Send {
        async move {
            Ok(self
                .submission(submission_id)
                .await?
                .map(|info| SubmissionStatus::of(&info)))
        }
    }

    /// The unsettled submissions of a conversation, in admission order.
    fn unsettled(
        &self,
        key: &ConversationKey,
    ) -> impl Future<Output = Result<Vec<SubmissionInfo>>> + Send;

    /// Up to `limit` batches after `after`. [`FlueError::AgentInstanceNotFound`] for an unknown
    /// conversation, [`FlueError::OffsetOutOfRange`] past the head. Never blocks writers.
    ///
    /// [`FlueError::AgentInstanceNotFound`]: crate::error::FlueError::AgentInstanceNotFound
    /// [`FlueError::OffsetOutOfRange`]: crate::error::FlueError::OffsetOutOfRange
    fn read_stream(
        &self,
        key: &ConversationKey,
        after: Offset,
        limit: usize,
    ) -> impl Future<Output = Result<StreamPage>> + Send;

    /// Watches the head of a conversation's stream (see [`HeadWatch`]).
    fn watch_head(&self, key: &ConversationKey) -> HeadWatch;

    /// Records an abort request on every unsettled submission of the conversation, settles the
    /// queued ones `aborted` at once, and leaves the running one to its owner (or to recovery,
    /// when the owner is gone). Idempotent.
    fn request_abort(
        &self,
        key: &ConversationKey,
    ) -> impl Future<Output = Result<AbortReport>> + Send;

    /// Deletes a conversation in one transaction: its stream, submissions and their messages,
    /// and every session of its instance (the root session, its tasks' and its actions'
    /// sessions); returns whether anything was there. While a submission is unsettled
    /// (`queued`, `running`, `waiting`) it deletes nothing and fails with
    /// [`FlueError::ConversationBusy`] ([`rules::check_delete`](crate::store::rules::check_delete)).
    /// The instance's audit log and trash are kept (they record workspace files, which outlive
    /// the conversation). The next message to the same key starts a new conversation (a new
    /// `uid`).
    ///
    /// [`FlueError::ConversationBusy`]: crate::error::FlueError::ConversationBusy
    fn delete_conversation(
        &self,
        key: &ConversationKey,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Registers this process as a potential owner; it counts as alive while the registration
    /// lives.
    fn register_owner(&self) -> impl Future<Output = Result<OwnerRegistration>> + Send;

    /// Whether an owner is alive (its registration lives, in any process).
    fn owner_alive(&self, owner_id: &str) -> impl Future<Output = Result<bool>> + Send;

    /// Takes ownership for `owner_id` when nobody holds the conversation, when its owner is
    /// dead or its lease expired, or when `owner_id` itself holds it (a driver of its own
    /// stopped without releasing); the epoch goes up, fencing off the previous holder. `lease`
    /// is how long the ownership lasts without [`ConversationStore::renew`].
    fn acquire(
        &self,
        key: &ConversationKey,
        owner_id: &str,
        lease: Duration,
    ) -> impl Future<Output = Result<Acquire>> + Send;

    /// Extends the lease; [`FlueError::LeaseLost`] when another owner took over.
    ///
    /// [`FlueError::LeaseLost`]: crate::error::FlueError::LeaseLost
    fn renew(&self, fence: &Fence, lease: Duration) -> impl Future<Output = Result<()>> + Send;

    /// Gives ownership up, unless unsettled submissions remain (then returns `false` and the
    /// caller stays the owner). [`FlueError::LeaseLost`] when another owner took over.
    ///
    /// [`FlueError::LeaseLost`]: crate::error::FlueError::LeaseLost
    fn release(&self, fence: &Fence) -> impl Future<Output = Result<bool>> + Send;

    /// Starts the next attempt: the oldest unsettled submission (an interrupted `running` one
    /// before any `queued` one) becomes `running`, its attempt count goes up by one, a
    /// `started` batch is recorded, and `durability` is stored at its first attempt. `None`
    /// when nothing is unsettled.
    fn claim_next(
        &self,
        fence: &Fence,
        durability: &DurabilityConfig,
    ) -> impl Future<Output = Result<Option<Claim>>> + Send;

    /// Settles a submission and records its `settled` batch; `false` (writing nothing) when it
    /// was settled already: the first terminal state wins.
    fn settle(
        &self,
        fence: &Fence,
        settlement: &Settlement,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Appends session records of a managed conversation under its fence: the session version
    /// check of [`SessionStore::append`] plus the fence, and one `records` batch on the stream.
    fn append_fenced(&self, append: FencedAppend<'_>) -> impl Future<Output = Result<u64>> + Send;

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
    /// [`ConversationInfo::unsettled`]: flue_protocol::submission::ConversationInfo::unsettled
    fn wait(
        &self,
        fence: &Fence,
        submission_id: &str,
        actions: &[String],
    ) -> impl Future<Output = Result<bool>> + Send;
}

/// [`ConversationStore`] with boxed futures, so that it can be used as `Arc<dyn DynConversationStore>`.
///
/// Implemented for every [`ConversationStore`]; implement that trait, not this one.
pub trait DynConversationStore: DynSessionStore {
    /// See [`ConversationStore::admit`].
    fn admit<'a>(&'a self, admission: &'a Admission) -> BoxFuture<'a, Result<DispatchReceipt>>;
    /// See [`ConversationStore::conversation`].
    fn conversation<'a>(
        &'a self,
        key: &'a ConversationKey,
    ) -> BoxFuture<'a, Result<Option<ConversationInfo>>>;
    /// See [`ConversationStore::conversations_with_id`].
    fn conversations_with_id<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<ConversationInfo>>>;
    /// See [`ConversationStore::pending_conversations`].
    fn pending_conversations(&self) -> BoxFuture<'_, Result<Vec<ConversationInfo>>>;
    /// See [`ConversationStore::all_conversations`].
    fn all_conversations(&self) -> BoxFuture<'_, Result<Vec<ConversationInfo>>>;
    /// See [`ConversationStore::list_conversations`].
    fn list_conversations<'a>(
        &'a self,
        query: &'a ListingQuery,
    ) -> BoxFuture<'a, Result<Vec<ListedConversation>>>;
    /// See [`ConversationStore::count_conversations`].
    fn count_conversations(&self) -> BoxFuture<'_, Result<u64>>;
    /// See [`ConversationStore::orphaned_conversations`].
    fn orphaned_conversations<'a>(
        &'a self,
        owner_id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<ConversationInfo>>>;
    /// See [`ConversationStore::submission`].
    fn submission<'a>(
        &'a self,
        submission_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<SubmissionInfo>>>;
    /// See [`ConversationStore::submission_status`].
    fn submission_status<'a>(
        &'a self,
        submission_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<SubmissionStatus>>>;
    /// See [`ConversationStore::unsettled`].
    fn unsettled<'a>(
        &'a self,
        key: &'a ConversationKey,
    ) -> BoxFuture<'a, Result<Vec<SubmissionInfo>>>;
    /// See [`ConversationStore::read_stream`].
    fn read_stream<'a>(
        &'a self,
        key: &'a ConversationKey,
        after: Offset,
        limit: usize,
    ) -> BoxFuture<'a, Result<StreamPage>>;
    /// See [`ConversationStore::watch_head`].
    fn watch_head(&self, key: &ConversationKey) -> HeadWatch;
    /// See [`ConversationStore::request_abort`].
    fn request_abort<'a>(&'a self, key: &'a ConversationKey) -> BoxFuture<'a, Result<AbortReport>>;
    /// See [`ConversationStore::delete_conversation`].
    fn delete_conversation<'a>(&'a self, key: &'a ConversationKey) -> BoxFuture<'a, Result<bool>>;
    /// See [`ConversationStore::register_owner`].
    fn register_owner(&self) -> BoxFuture<'_, Result<OwnerRegistration>>;
    /// See [`ConversationStore::owner_alive`].
    fn owner_alive<'a>(&'a self, owner_id: &'a str) -> BoxFuture<'a, Result<bool>>;
    /// See [`ConversationStore::acquire`].
    fn acquire<'a>(
        &'a self,
        key: &'a ConversationKey,
        owner_id: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<Acquire>>;
    /// See [`ConversationStore::renew`].
    fn renew<'a>(&'a self, fence: &'a Fence, lease: Duration) -> BoxFuture<'a, Result<()>>;
    /// See [`ConversationStore::release`].
    fn release<'a>(&'a self, fence: &'a Fence) -> BoxFuture<'a, Result<bool>>;
    /// See [`ConversationStore::claim_next`].
    fn claim_next<'a>(
        &'a self,
        fence: &'a Fence,
        durability: &'a DurabilityConfig,
    ) -> BoxFuture<'a, Result<Option<Claim>>>;
    /// See [`ConversationStore::settle`].
    fn settle<'a>(
        &'a self,
        fence: &'a Fence,
        settlement: &'a Settlement,
    ) -> BoxFuture<'a, Result<bool>>;
    /// See [`ConversationStore::append_fenced`].
    fn append_fenced<'a>(&'a self, append: FencedAppend<'a>) -> BoxFuture<'a, Result<u64>>;
    /// See [`ConversationStore::wait`].
    fn wait<'a>(
        &'a self,
        fence: &'a Fence,
        submission_id: &'a str,
        actions: &'a [String],
    ) -> BoxFuture<'a, Result<bool>>;
}

impl<T: ConversationStore> DynConversationStore for T {
    fn admit<'a>(&'a self, admission: &'a Admission) -> BoxFuture<'a, Result<DispatchReceipt>> {
        Box::pin(ConversationStore::admit(self, admission))
    }

    fn conversation<'a>(
        &'a self,
        key: &'a ConversationKey,
    ) -> BoxFuture<'a, Result<Option<ConversationInfo>>> {
        Box::pin(ConversationStore::conversation(self, key))
    }

    fn conversations_with_id<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<ConversationInfo>>> {
        Box::pin(ConversationStore::conversations_with_id(self, id))
    }

    fn pending_conversations(&self) -> BoxFuture<'_, Result<Vec<ConversationInfo>>> {
        Box::pin(ConversationStore::pending_conversations(self))
    }

    fn all_conversations(&self) -> BoxFuture<'_, Result<Vec<ConversationInfo>>> {
        Box::pin(ConversationStore::all_conversations(self))
    }

    fn list_conversations<'a>(
        &'a self,
        query: &'a ListingQuery,
    ) -> BoxFuture<'a, Result<Vec<ListedConversation>>> {
        Box::pin(ConversationStore::list_conversations(self, query))
    }

    fn count_conversations(&self) -> BoxFuture<'_, Result<u64>> {
        Box::pin(ConversationStore::count_conversations(self))
    }

    fn orphaned_conversations<'a>(
        &'a self,
        owner_id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<ConversationInfo>>> {
        Box::pin(ConversationStore::orphaned_conversations(self, owner_id))
    }

    fn submission<'a>(
        &'a self,
        submission_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<SubmissionInfo>>> {
        Box::pin(ConversationStore::submission(self, submission_id))
    }

    fn submission_status<'a>(
        &'a self,
        submission_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<SubmissionStatus>>> {
        Box::pin(ConversationStore::submission_status(self, submission_id))
    }

    fn unsettled<'a>(
        &'a self,
        key: &'a ConversationKey,
    ) -> BoxFuture<'a, Result<Vec<SubmissionInfo>>> {
        Box::pin(ConversationStore::unsettled(self, key))
    }

    fn read_stream<'a>(
        &'a self,
        key: &'a ConversationKey,
        after: Offset,
        limit: usize,
    ) -> BoxFuture<'a, Result<StreamPage>> {
        Box::pin(ConversationStore::read_stream(self, key, after, limit))
    }

    fn watch_head(&self, key: &ConversationKey) -> HeadWatch {
        ConversationStore::watch_head(self, key)
    }

    fn request_abort<'a>(&'a self, key: &'a ConversationKey) -> BoxFuture<'a, Result<AbortReport>> {
        Box::pin(ConversationStore::request_abort(self, key))
    }

    fn delete_conversation<'a>(&'a self, key: &'a ConversationKey) -> BoxFuture<'a, Result<bool>> {
        Box::pin(ConversationStore::delete_conversation(self, key))
    }

    fn register_owner(&self) -> BoxFuture<'_, Result<OwnerRegistration>> {
        Box::pin(ConversationStore::register_owner(self))
    }

    fn owner_alive<'a>(&'a self, owner_id: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(ConversationStore::owner_alive(self, owner_id))
    }

    fn acquire<'a>(
        &'a self,
        key: &'a ConversationKey,
        owner_id: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<Acquire>> {
        Box::pin(ConversationStore::acquire(self, key, owner_id, lease))
    }

    fn renew<'a>(&'a self, fence: &'a Fence, lease: Duration) -> BoxFuture<'a, Result<()>> {
        Box::pin(ConversationStore::renew(self, fence, lease))
    }

    fn release<'a>(&'a self, fence: &'a Fence) -> BoxFuture<'a, Result<bool>> {
        Box::pin(ConversationStore::release(self, fence))
    }

    fn claim_next<'a>(
        &'a self,
        fence: &'a Fence,
        durability: &'a DurabilityConfig,
    ) -> BoxFuture<'a, Result<Option<Claim>>> {
        Box::pin(ConversationStore::claim_next(self, fence, durability))
    }

    fn settle<'a>(
        &'a self,
        fence: &'a Fence,
        settlement: &'a Settlement,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(ConversationStore::settle(self, fence, settlement))
    }

    fn append_fenced<'a>(&'a self, append: FencedAppend<'a>) -> BoxFuture<'a, Result<u64>> {
        Box::pin(ConversationStore::append_fenced(self, append))
    }

    fn wait<'a>(
        &'a self,
        fence: &'a Fence,
        submission_id: &'a str,
        actions: &'a [String],
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(ConversationStore::wait(self, fence, submission_id, actions))
    }
}

/// Head watchers of one store value: one `watch` channel per conversation with subscribers.
///
/// For store implementations: [`ConversationStore::watch_head`] returns [`HeadWatchers::watch`],
/// and every write that moves a conversation's head calls [`HeadWatchers::notify`] once it is
/// durable.
#[derive(Debug, Default)]
pub struct HeadWatchers {
    senders: std::sync::Mutex<std::collections::HashMap<String, watch::Sender<Offset>>>,
}

impl HeadWatchers {
    /// A receiver for `instance_id`, starting at `Offset::START` (callers compare with the
    /// head they read from the store).
    pub fn watch(&self, instance_id: &str) -> HeadWatch {
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
    pub fn notify(&self, instance_id: &str, head: Offset) {
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
pub struct LocalOwners {
    owners: std::sync::Mutex<std::collections::HashMap<String, std::sync::Weak<()>>>,
}

impl LocalOwners {
    /// Registers a fresh owner.
    pub fn register(&self) -> OwnerRegistration {
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
    pub fn alive(&self, owner_id: &str) -> bool {
        self.owners
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(owner_id)
            .is_some_and(|weak| weak.strong_count() > 0)
    }
}
