//! The store rules: what every session and conversation store decides the same way, written
//! once for every backend (the memory store here, SQLite and Postgres in flue-store).
//!
//! A backend reads its state inside its transaction, asks these functions, and writes what they
//! decide; the rules hold no state and do no I/O. They cover admission (send conditions,
//! idempotency keys, the busy policy, the batches and receipt an admission writes), fencing
//! (a stale fence, a session of another conversation, who may take a conversation over),
//! session versions, aborts and their settlements, claims, stream pages, and the JSON the
//! durable stores keep. Errors and their messages are the same whatever the backend, because
//! they are made here.
//!
//! An admission, for example, runs in four steps:
//!
//! ```text
//! read the conversation (uid, owner)     -> AdmissionCheck::new      (send condition)
//! read the earlier submission by the key -> AdmissionCheck::deduplicate
//! count the unsettled submissions        -> AdmissionCheck::check_busy
//! write created_batch, admitted_batch, the submission row -> AdmissionCheck::receipt
//! ```

use std::time::Duration;

use flue_protocol::event::Outcome;
use flue_protocol::record::{RECORD_FORMAT_VERSION, Record, StoredRecord};
use flue_protocol::submission::{
    BatchBody, ConversationKey, DeliveredMessage, DispatchReceipt, Offset, SendCondition,
    Settlement, StreamBatch, StreamPage, SubmissionInfo, SubmissionState, WhenBusy,
};
use flue_protocol::{Budget, DurabilityConfig};
use serde::{Deserialize, Serialize};

use crate::error::{FlueError, Result};
use crate::store::{
    AbortReport, Admission, AuditEntry, Claim, Fence, FencedAppend, SessionKey, SubmissionStatus,
    TrashEntry,
};
use crate::util::now_ms;

/// The root session every conversation has; submissions run on it.
pub const ROOT_SESSION: &str = "default";

/// The error for a missing conversation (or another incarnation than `uid`).
pub fn instance_not_found(key: &ConversationKey, uid: Option<&String>) -> FlueError {
    FlueError::AgentInstanceNotFound {
        agent: key.agent.clone(),
        id: key.id.clone(),
        uid: uid.cloned(),
    }
}

/// The error for a write whose fence is stale, saying why.
pub fn lease_lost(fence: &Fence, message: &str) -> FlueError {
    FlueError::LeaseLost {
        conversation: fence.key.to_string(),
        epoch: fence.epoch,
        message: message.to_owned(),
    }
}

/// The error for a write whose fence another owner replaced (a higher epoch, or no owner).
pub fn stale_fence(fence: &Fence) -> FlueError {
    lease_lost(fence, "another owner took the conversation")
}

/// The error for a plain [`SessionStore::append`](crate::store::SessionStore::append) to a session
/// of a managed conversation: only fenced appends may write there.
pub fn managed_conversation(instance_id: &str) -> FlueError {
    FlueError::LeaseLost {
        conversation: instance_id.to_owned(),
        epoch: 0,
        message: "this conversation is managed by the submission runtime; send messages with \
                  dispatch"
            .to_owned(),
    }
}

/// Whether a conversation, or a session of it, may be deleted: not while any of its
/// submissions is unsettled (`queued`, `running`, or `waiting` for a decision), because
/// someone holds a receipt for it and it would be lost. `unsettled` is their count, `owner`
/// the conversation's current owner: [`FlueError::ConversationBusy`] (kind `session_busy`).
/// The seed API's rule for `session.delete()` and `harness.sessions.delete()`; every store
/// applies it in the transaction that deletes (a session delete of an unmanaged instance
/// counts no submissions).
pub fn check_delete(key: &ConversationKey, owner: Option<String>, unsettled: u64) -> Result<()> {
    if unsettled == 0 {
        return Ok(());
    }
    Err(FlueError::ConversationBusy {
        agent: key.agent.clone(),
        id: key.id.clone(),
        owner,
        unsettled,
    })
}

/// Checks an append against the session's version (`None`: no such session); returns the
/// version, which is also the new one when there is nothing to append.
pub fn check_version(key: &SessionKey, expected_version: u64, actual: Option<u64>) -> Result<u64> {
    let Some(actual) = actual else {
        return Err(FlueError::SessionNotFound {
            session: key.session.clone(),
        });
    };
    if actual != expected_version {
        return Err(FlueError::VersionConflict {
            session: key.session.clone(),
            expected: expected_version,
            actual,
        });
    }
    Ok(actual)
}

/// `value` as the JSON a durable store keeps; `what` names it in the error.
///
/// The text is measured first and written into a buffer of its exact size: a buffer grown as
/// it is written would reach up to twice the size of a large message, and hold the old and the
/// new buffer at once while it grows.
pub fn to_json<T: Serialize + ?Sized>(value: &T, what: &str) -> Result<String> {
    let failed = |err: serde_json::Error| FlueError::store(format!("cannot serialise {what}"), err);
    let mut length = JsonLength(0);
    serde_json::to_writer(&mut length, value).map_err(failed)?;
    let mut json = Vec::with_capacity(length.0);
    serde_json::to_writer(&mut json, value).map_err(failed)?;
    String::from_utf8(json).map_err(|err| FlueError::store(format!("cannot serialise {what}"), err))
}

/// The length of `value`'s JSON, without writing it (0 when it cannot be serialised).
pub fn json_length<T: Serialize + ?Sized>(value: &T) -> usize {
    let mut length = JsonLength(0);
    match serde_json::to_writer(&mut length, value) {
        Ok(()) => length.0,
        Err(_) => 0,
    }
}

/// Counts the bytes written to it ([`to_json`]'s first pass).
struct JsonLength(usize);

impl std::io::Write for JsonLength {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Records as the JSON rows a durable store keeps, one per record.
pub fn records_json(records: &[StoredRecord]) -> Result<Vec<String>> {
    records
        .iter()
        .map(|record| to_json(record, "record"))
        .collect()
}

/// A stored record of `key` at `index` read back from its JSON; refuses a record format newer
/// than this build knows.
///
/// The header (`v`, `at`, the optional timing) and the record are read apart from the same
/// text: read as one [`StoredRecord`], which flattens the record into the header, serde buffers
/// the whole record and copies its text once more, which a large message pays at every read.
pub fn parse_record(key: &SessionKey, index: u64, text: &str) -> Result<StoredRecord> {
    let corrupt = |err: serde_json::Error| corrupt_record(key, index, err.to_string());
    let header: RecordHeader = serde_json::from_str(text).map_err(corrupt)?;
    if header.v > RECORD_FORMAT_VERSION {
        return Err(corrupt_record(
            key,
            index,
            format!(
                "record format {} is newer than this flue supports ({RECORD_FORMAT_VERSION}); \
                 upgrade flue",
                header.v
            ),
        ));
    }
    let record: Record = serde_json::from_str(text).map_err(corrupt)?;
    Ok(StoredRecord {
        v: header.v,
        at: header.at,
        started_at: header.started_at,
        duration_ms: header.duration_ms,
        record,
    })
}

/// The header of a stored record ([`parse_record`]); the record's own fields are skipped.
#[derive(Deserialize)]
struct RecordHeader {
    v: u32,
    at: u64,
    #[serde(default)]
    started_at: Option<u64>,
    #[serde(default)]
    duration_ms: Option<u64>,
}

/// The error for a stored record of `key` at `index` that cannot be read.
pub fn corrupt_record(key: &SessionKey, index: u64, message: String) -> FlueError {
    FlueError::CorruptRecord {
        session: key.session.clone(),
        index,
        message,
    }
}

/// An audit entry read back from its JSON.
pub fn audit_entry(json: &str) -> Result<AuditEntry> {
    serde_json::from_str(json).map_err(|err| FlueError::store("corrupt audit entry", err))
}

/// A trash entry read back from its JSON.
pub fn trash_entry(json: &str) -> Result<TrashEntry> {
    serde_json::from_str(json).map_err(|err| FlueError::store("corrupt trash entry", err))
}

/// A duration in whole milliseconds, saturating.
pub fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

// ---------------------------------------------------------------------------------------------
// Fencing and ownership.

/// Who owns a conversation, as a fenced write found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ownership<'a> {
    /// The owner, if any.
    pub owner: Option<&'a str>,
    /// The fencing epoch.
    pub epoch: u64,
}

/// Checks `fence` against the conversation's current ownership (`None`: no such
/// conversation): [`FlueError::AgentInstanceNotFound`] or [`FlueError::LeaseLost`] unless the
/// fence's owner holds it at the fence's epoch.
pub fn check_fence(fence: &Fence, current: Option<Ownership<'_>>) -> Result<()> {
    match current {
        None => Err(instance_not_found(&fence.key, None)),
        Some(Ownership {
            owner: Some(owner),
            epoch,
        }) if owner == fence.owner_id && epoch == fence.epoch => Ok(()),
        Some(_) => Err(stale_fence(fence)),
    }
}

/// Checks that a fenced append writes a session of the fence's own conversation.
pub fn check_fenced_session(append: &FencedAppend<'_>) -> Result<()> {
    if append.session.instance_id != append.fence.key.instance_id() {
        return Err(lease_lost(
            append.fence,
            "the session belongs to another conversation",
        ));
    }
    Ok(())
}

/// The holder `owner_id` must leave a conversation to if that holder is alive: another owner
/// whose lease has not run out. `None`: `owner_id` may take it (nobody holds it, the lease
/// expired, or it is `owner_id`'s own: a driver of its own stopped without releasing, and
/// taking it again bumps the epoch, fencing that driver off). The backend probes the
/// holder's liveness and answers [`Acquire::Held`](crate::store::Acquire::Held) if it lives.
pub fn contender<'a>(holder: Option<&'a str>, owner_id: &str, leased: bool) -> Option<&'a str> {
    holder.filter(|holder| *holder != owner_id && leased)
}

// ---------------------------------------------------------------------------------------------
// The commit schedule.

/// When a conversation store's write must reach the disk before it is answered.
///
/// Every write is committed before it is answered, so a process crash (kill -9) loses none
/// of them. A [`Commit::Sync`] write is also synced (one fsync of the SQLite WAL, a flushed
/// Postgres commit): it survives a power loss or an operating-system crash. A
/// [`Commit::WithNext`] write is not synced on its own; the journal is append-only, so the
/// next synced commit of the store makes it durable too, and a power loss before that takes
/// a suffix of such writes, never one from the middle. Each write is `WithNext` when what a
/// power loss could take from it is redone by recovery from what remains, and `Sync` when
/// someone acts on it once it is answered: a caller holds a receipt, a tool runs, a decision
/// was given, a settlement is reported. ARCHITECTURE.md ("The commit schedule") lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Commit {
    /// Synced before it is answered.
    Sync,
    /// Committed, and synced by the next [`Commit::Sync`] commit of the store.
    WithNext,
}

/// A conversation store's write, as the commit schedule sees it.
#[derive(Clone, Copy, Debug)]
pub enum Write<'a> {
    /// [`ConversationStore::admit`](crate::store::ConversationStore::admit).
    Admit,
    /// [`ConversationStore::request_abort`](crate::store::ConversationStore::request_abort).
    RequestAbort,
    /// [`ConversationStore::acquire`](crate::store::ConversationStore::acquire).
    Acquire,
    /// [`ConversationStore::renew`](crate::store::ConversationStore::renew).
    Renew,
    /// [`ConversationStore::release`](crate::store::ConversationStore::release).
    Release,
    /// [`ConversationStore::claim_next`](crate::store::ConversationStore::claim_next).
    Claim,
    /// [`ConversationStore::settle`](crate::store::ConversationStore::settle).
    Settle,
    /// [`ConversationStore::wait`](crate::store::ConversationStore::wait).
    Wait,
    /// [`ConversationStore::append_fenced`](crate::store::ConversationStore::append_fenced).
    Append(&'a FencedAppend<'a>),
}

/// How `write` is committed in a store whose crash takes its writers down with it (an
/// embedded database file: a power loss stops every process on the machine). See [`Commit`].
///
/// - An admission and an abort request are answered to their caller, who then counts on them.
/// - A settlement is reported (the `settled` batch and event, `flue run`'s reply), and a
///   pause (`wait`) hands the submission to whoever decides.
/// - An append syncs when it holds what the runtime acts on next: an assistant turn with tool
///   calls (the calls run next; after a power loss the stored call is answered `interrupted`
///   instead of asked again and run twice), an `ActionStarted` (confirmed calls run next),
///   an `ActionResolved` or a resumed pause (a decision someone gave, answered once).
/// - Everything else rides with the next synced commit: taking, renewing and releasing
///   ownership and claiming an attempt are redone by recovery; the message's `User` record is
///   appended again from the submission row; a lost tool result leaves a call that is
///   answered `interrupted`; a lost final turn is asked for again, because the settlement that
///   reports it is synced after it.
pub fn commit_of(write: Write<'_>) -> Commit {
    match write {
        Write::Admit | Write::RequestAbort | Write::Settle | Write::Wait => Commit::Sync,
        Write::Acquire | Write::Renew | Write::Release | Write::Claim => Commit::WithNext,
        Write::Append(append) => {
            let acted_on = append.resumes_waiting
                || append.records.iter().any(|stored| match &stored.record {
                    Record::Assistant(message) => message.tool_calls().next().is_some(),
                    Record::ActionStarted(_) | Record::ActionResolved(_) => true,
                    _ => false,
                });
            if acted_on {
                Commit::Sync
            } else {
                Commit::WithNext
            }
        }
    }
}

/// How `write` is committed in a database server that can crash while its writers live on
/// (Postgres): as [`commit_of`], except that claims and record appends sync too. A writer
/// that outlived the crash goes on from what it remembers: had its claim been lost, its
/// message would be marked unapplied under a stored `User` record; had a record been lost,
/// its next append would meet an older version and fail the attempt. A lost acquire or
/// release is harmless there as well: the writer's next fenced write fails (`lease_lost`), or
/// the conversation stays its own until the lease runs out.
pub fn commit_of_server(write: Write<'_>) -> Commit {
    match write {
        Write::Claim | Write::Append(_) => Commit::Sync,
        write => commit_of(write),
    }
}

// ---------------------------------------------------------------------------------------------
// Admission.

/// A conversation as an admission found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundConversation {
    /// Its uid (which incarnation it is).
    pub uid: String,
    /// Its owner, if any.
    pub owner: Option<String>,
}

/// The earlier submission with an admission's idempotency key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EarlierSubmission {
    /// Its id.
    pub submission_id: String,
    /// Its message, as stored ([`message_json`]).
    pub message_json: String,
    /// When it was admitted.
    pub accepted_at: u64,
    /// The offset of its `admitted` batch.
    pub admitted_offset: Offset,
}

/// An admission's message as the JSON stored with its submission (and compared by
/// idempotency keys).
///
/// The admission's budgets ([`DispatchOptions::budget`](flue_protocol::DispatchOptions::budget))
/// ride in the same JSON object, as its `budget` key (the message's own fields never use that
/// name), so that they are stored with the submission without a column of their own:
/// [`SubmissionRow::into_info`] reads them back.
pub fn message_json(admission: &Admission) -> Result<String> {
    stored_message_json(&admission.message, admission.options.budget)
}

/// The JSON [`message_json`] stores for `message` admitted with `budget` (for a store that
/// keeps the two apart and compares an idempotent retry with what it keeps).
pub fn stored_message_json(message: &DeliveredMessage, budget: Option<Budget>) -> Result<String> {
    let Some(budget) = budget.filter(|budget| !budget.is_empty()) else {
        return to_json(message, "message");
    };
    let mut value = serde_json::to_value(message)
        .map_err(|err| FlueError::store("cannot encode message", err))?;
    if let serde_json::Value::Object(map) = &mut value {
        let budget = serde_json::to_value(budget)
            .map_err(|err| FlueError::store("cannot encode budget", err))?;
        map.insert(MESSAGE_BUDGET_KEY.to_owned(), budget);
    }
    to_json(&value, "message")
}

/// The key of a stored message's budgets (see [`message_json`]).
const MESSAGE_BUDGET_KEY: &str = "budget";

/// The budgets stored in a message's JSON ([`message_json`]).
#[derive(Deserialize)]
struct StoredBudget {
    #[serde(default)]
    budget: Option<Budget>,
}

/// The rules of one admission, asked in order (see the module docs): the send condition when
/// made, then the idempotency key, then the busy policy; then what to write.
#[derive(Debug)]
pub struct AdmissionCheck<'a> {
    admission: &'a Admission,
    message_json: &'a str,
    found: Option<FoundConversation>,
}

impl<'a> AdmissionCheck<'a> {
    /// Applies the send condition to the conversation as found (`None`: it does not exist,
    /// and this admission creates it): [`FlueError::AgentInstanceNotFound`] for a
    /// [`SendCondition::Uid`] that does not match, [`FlueError::AgentInstanceExists`] for
    /// [`SendCondition::Create`] on an existing one.
    pub fn new(
        admission: &'a Admission,
        message_json: &'a str,
        found: Option<FoundConversation>,
    ) -> Result<Self> {
        let key = &admission.key;
        match (&admission.options.condition, &found) {
            (SendCondition::Uid(wanted), Some(conversation)) if *wanted != conversation.uid => {
                return Err(instance_not_found(key, Some(wanted)));
            }
            (SendCondition::Uid(wanted), None) => {
                return Err(instance_not_found(key, Some(wanted)));
            }
            (SendCondition::Create, Some(conversation)) => {
                return Err(FlueError::AgentInstanceExists {
                    agent: key.agent.clone(),
                    id: key.id.clone(),
                    uid: conversation.uid.clone(),
                });
            }
            _ => {}
        }
        Ok(Self {
            admission,
            message_json,
            found,
        })
    }

    /// The idempotency key to look an earlier submission of the conversation up by, when
    /// there is one to look for (the admission has a key and the conversation exists).
    pub fn idempotency_key(&self) -> Option<&'a str> {
        self.found.as_ref()?;
        self.admission.options.idempotency_key.as_deref()
    }

    /// The receipt of the earlier submission with the same key and message (nothing is
    /// written); [`FlueError::SubmissionConflict`] when its message differs; `None` when
    /// there is none and the admission goes on.
    pub fn deduplicate(
        &self,
        earlier: Option<EarlierSubmission>,
    ) -> Result<Option<DispatchReceipt>> {
        let (Some(earlier), Some(found), Some(key)) = (
            earlier,
            &self.found,
            &self.admission.options.idempotency_key,
        ) else {
            return Ok(None);
        };
        if earlier.message_json != self.message_json {
            return Err(FlueError::SubmissionConflict {
                key: key.clone(),
                submission_id: earlier.submission_id,
            });
        }
        Ok(Some(DispatchReceipt {
            submission_id: earlier.submission_id,
            accepted_at: earlier.accepted_at,
            uid: found.uid.clone(),
            offset: earlier.admitted_offset,
            deduplicated: true,
        }))
    }

    /// Whether the busy policy needs the count of unsettled submissions that need work
    /// ([`WhenBusy::Fail`] on an existing conversation).
    pub fn checks_busy(&self) -> bool {
        self.admission.options.when_busy == WhenBusy::Fail && self.found.is_some()
    }

    /// Applies the busy policy to the count of unsettled submissions that need work (a
    /// waiting one needs a decision, not work): [`FlueError::ConversationBusy`].
    pub fn check_busy(&self, unsettled: u64) -> Result<()> {
        match &self.found {
            Some(found) if self.checks_busy() && unsettled > 0 => {
                Err(FlueError::ConversationBusy {
                    agent: self.admission.key.agent.clone(),
                    id: self.admission.key.id.clone(),
                    owner: found.owner.clone(),
                    unsettled,
                })
            }
            _ => Ok(()),
        }
    }

    /// The `created` batch to record first, when this admission creates the conversation
    /// (with its root session, [`ROOT_SESSION`], and the uid [`Admission::new_uid`]).
    pub fn created_batch(&self) -> Option<BatchBody> {
        self.found.is_none().then(|| BatchBody::Created {
            uid: self.admission.new_uid.clone(),
        })
    }

    /// The `admitted` batch to record, as a durable store keeps it: without the message,
    /// which its submission holds (see [`AdmittedRef`]).
    pub fn admitted_batch(&self) -> AdmittedRef<'a> {
        AdmittedRef {
            kind: AdmittedTag::Admitted,
            submission_id: &self.admission.submission_id,
            accepted_at: self.admission.accepted_at,
        }
    }

    /// The receipt of the admission, once its `admitted` batch is at `offset`.
    pub fn receipt(self, offset: Offset) -> DispatchReceipt {
        let uid = match self.found {
            Some(found) => found.uid,
            None => self.admission.new_uid.clone(),
        };
        DispatchReceipt {
            submission_id: self.admission.submission_id.clone(),
            accepted_at: self.admission.accepted_at,
            uid,
            offset,
            deduplicated: false,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Submissions: states, claims, aborts, settlements.

/// The name a durable store keeps a submission state under.
pub fn state_name(state: SubmissionState) -> &'static str {
    state.as_str()
}

/// A state read back from its [`state_name`]; `None` for a name no flue writes.
pub fn parse_state(name: &str) -> Option<SubmissionState> {
    match name {
        "queued" => Some(SubmissionState::Queued),
        "running" => Some(SubmissionState::Running),
        "settled" => Some(SubmissionState::Settled),
        "waiting" => Some(SubmissionState::Waiting),
        _ => None,
    }
}

/// A state read back where a wrong name must not stop the write (claims, aborts): a name no
/// flue writes reads as [`SubmissionState::Waiting`], which is never claimed and which an
/// abort settles.
pub fn stored_state(name: &str) -> SubmissionState {
    parse_state(name).unwrap_or(SubmissionState::Waiting)
}

/// A submission as a durable store keeps it: plain columns, JSON for the rest.
#[derive(Clone, Debug)]
pub struct SubmissionRow<'a> {
    /// `submission_id`.
    pub submission_id: String,
    /// `instance_id` (the conversation's).
    pub instance_id: &'a str,
    /// `position` (admission order in the conversation).
    pub position: u64,
    /// `state` ([`state_name`]).
    pub state: &'a str,
    /// `message` (JSON).
    pub message: &'a str,
    /// `accepted_at`.
    pub accepted_at: u64,
    /// `attempts`.
    pub attempts: u32,
    /// `first_started_at`.
    pub first_started_at: Option<u64>,
    /// `input_applied`.
    pub input_applied: bool,
    /// `abort_requested`.
    pub abort_requested: bool,
    /// `idempotency_key`.
    pub idempotency_key: Option<String>,
    /// `settlement` (JSON).
    pub settlement: Option<&'a str>,
    /// `durability` (JSON).
    pub durability: Option<&'a str>,
    /// `trace_parent`.
    pub trace_parent: Option<String>,
}

impl SubmissionRow<'_> {
    /// The submission it holds; [`FlueError::Store`] when a column cannot be read back.
    pub fn into_info(self) -> Result<SubmissionInfo> {
        let submission_id = self.submission_id;
        let corrupt = |what: &str, err: serde_json::Error| {
            FlueError::store(format!("corrupt {what} of submission {submission_id}"), err)
        };
        let message = serde_json::from_str(self.message).map_err(|err| corrupt("message", err))?;
        let budget = serde_json::from_str::<StoredBudget>(self.message)
            .map_err(|err| corrupt("message budget", err))?
            .budget;
        let settlement = self
            .settlement
            .map(serde_json::from_str::<Settlement>)
            .transpose()
            .map_err(|err| corrupt("settlement", err))?;
        let durability = self
            .durability
            .map(serde_json::from_str::<DurabilityConfig>)
            .transpose()
            .map_err(|err| corrupt("durability", err))?;
        let Some(state) = parse_state(self.state) else {
            return Err(FlueError::Store {
                message: format!(
                    "unknown state {:?} of submission {submission_id}",
                    self.state
                ),
                source: None,
            });
        };
        let conversation =
            ConversationKey::from_instance_id(self.instance_id).ok_or_else(|| {
                FlueError::Store {
                    message: format!("malformed instance id {:?}", self.instance_id),
                    source: None,
                }
            })?;
        Ok(SubmissionInfo {
            submission_id,
            conversation,
            state,
            message,
            accepted_at: self.accepted_at,
            position: self.position,
            attempts: self.attempts,
            first_started_at: self.first_started_at,
            input_applied: self.input_applied,
            abort_requested: self.abort_requested,
            durability,
            idempotency_key: self.idempotency_key,
            trace_parent: self.trace_parent,
            budget,
            settlement,
        })
    }
}

/// A submission's lifecycle read back from its columns (`instance_id`, `state`,
/// `abort_requested`, `settlement` as JSON), for
/// [`ConversationStore::submission_status`](crate::store::ConversationStore::submission_status).
pub fn submission_status(
    submission_id: &str,
    instance_id: &str,
    state: &str,
    abort_requested: bool,
    settlement: Option<&str>,
) -> Result<SubmissionStatus> {
    let settlement = settlement
        .map(serde_json::from_str::<Settlement>)
        .transpose()
        .map_err(|err| {
            FlueError::store(
                format!("corrupt settlement of submission {submission_id}"),
                err,
            )
        })?;
    let Some(state) = parse_state(state) else {
        return Err(FlueError::Store {
            message: format!("unknown state {state:?} of submission {submission_id}"),
            source: None,
        });
    };
    let conversation =
        ConversationKey::from_instance_id(instance_id).ok_or_else(|| FlueError::Store {
            message: format!("malformed instance id {instance_id:?}"),
            source: None,
        })?;
    Ok(SubmissionStatus {
        conversation,
        state,
        abort_requested,
        settlement,
    })
}

/// Whether the oldest unsettled submission of a conversation (in `state`) may be claimed for
/// an attempt: a waiting one holds the line, nothing behind it runs before it resumes.
pub fn claimable(state: SubmissionState) -> bool {
    matches!(state, SubmissionState::Queued | SubmissionState::Running)
}

/// The claim of `submission` (already `running`, its attempt counted), under the durability
/// limits stored at its first attempt, or `durability` when none are.
pub fn claim(submission: SubmissionInfo, durability: &DurabilityConfig) -> Claim {
    let durability = submission
        .durability
        .clone()
        .unwrap_or_else(|| durability.clone());
    Claim {
        submission,
        durability,
    }
}

/// The settlement of a submission aborted before (or instead of) finishing.
pub fn aborted_settlement(submission_id: &str, attempts: u32) -> Settlement {
    Settlement {
        submission_id: submission_id.to_owned(),
        outcome: Outcome::Aborted,
        text: None,
        data: None,
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

/// What an abort request writes (see
/// [`ConversationStore::request_abort`](crate::store::ConversationStore::request_abort)).
#[derive(Clone, Debug, PartialEq)]
pub struct AbortPlan {
    /// Every unsettled submission: each gets `abort_requested`, all in one `abort_requested`
    /// batch.
    pub requested: Vec<String>,
    /// The settlements to write after that batch, in order: the queued and waiting
    /// submissions, settled `aborted` at once (the running one is its owner's to stop).
    pub settlements: Vec<Settlement>,
}

impl AbortPlan {
    /// The batch recording the request.
    pub fn requested_batch(&self) -> BatchBody {
        BatchBody::AbortRequested {
            submission_ids: self.requested.clone(),
        }
    }

    /// What the caller is told once the plan is written.
    pub fn report(self) -> AbortReport {
        AbortReport {
            requested: self.requested,
            settled: self
                .settlements
                .into_iter()
                .map(|settlement| settlement.submission_id)
                .collect(),
        }
    }
}

/// The abort of a conversation's unsettled submissions (id, state, attempts, in admission
/// order); `None` when there are none, and the abort writes nothing.
pub fn plan_abort(
    unsettled: impl IntoIterator<Item = (String, SubmissionState, u32)>,
) -> Option<AbortPlan> {
    let mut requested = Vec::new();
    let mut settlements = Vec::new();
    for (submission_id, state, attempts) in unsettled {
        if state != SubmissionState::Running {
            settlements.push(aborted_settlement(&submission_id, attempts));
        }
        requested.push(submission_id);
    }
    (!requested.is_empty()).then_some(AbortPlan {
        requested,
        settlements,
    })
}

// ---------------------------------------------------------------------------------------------
// Streams.

/// Checks a stream read's `after` against the conversation's head:
/// [`FlueError::OffsetOutOfRange`] past it.
pub fn check_offset(key: &ConversationKey, after: Offset, head: Offset) -> Result<()> {
    if after > head {
        return Err(FlueError::OffsetOutOfRange {
            conversation: key.to_string(),
            offset: after.0,
            head: head.0,
        });
    }
    Ok(())
}

/// The page of a stream read: `batches` after `after`, with the conversation's `head`.
pub fn stream_page(after: Offset, head: Offset, batches: Vec<StreamBatch>) -> StreamPage {
    let next_offset = batches.last().map_or(after, |batch| batch.offset);
    StreamPage {
        up_to_date: next_offset == head,
        next_offset,
        batches,
    }
}

/// The `admitted` batch as a durable store writes it: `{"type": "admitted", "submission_id",
/// "accepted_at"}`, the message left out. The submission's row holds the message already
/// (as sent, for idempotency keys and for recovery); a stream read takes it from there
/// ([`StoredBatch::Admitted`]), so readers see the same `admitted` batch as when the message
/// was stored in the batch too, as stores written before did (those still read as they are).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct AdmittedRef<'a> {
    #[serde(rename = "type")]
    kind: AdmittedTag,
    /// The submission whose row holds the message.
    pub submission_id: &'a str,
    /// Admission time, ms since the epoch.
    pub accepted_at: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum AdmittedTag {
    Admitted,
}

/// A stream batch as a durable store keeps it: a range of session records (read from the
/// session when the batch is read), an admission (its message read from its submission), or
/// any other body as JSON.
#[derive(Clone, Debug, PartialEq)]
pub enum StoredBatch {
    /// `count` records of `session` from index `first`.
    Records {
        /// The session (one of the conversation's).
        session: String,
        /// The index of the first record.
        first: u64,
        /// How many.
        count: u64,
    },
    /// An admission whose message is in its submission's row ([`AdmittedRef`]).
    Admitted {
        /// The submission.
        submission_id: String,
        /// Admission time, ms since the epoch.
        accepted_at: u64,
    },
    /// Any other body.
    Body(BatchBody),
}

/// What a backend read for a [`StoredBatch`] before [`StoredBatch::into_batch`]: the records
/// of [`StoredBatch::record_range`], the message of [`StoredBatch::admitted_submission`] (read
/// with [`parse_message`]; `None` when there is no such submission), or nothing.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum BatchContent {
    /// A body batch needs nothing.
    #[default]
    Nothing,
    /// The records of a records batch.
    Records(Vec<StoredRecord>),
    /// The message of an admission's submission.
    Message(Option<DeliveredMessage>),
}

impl StoredBatch {
    /// The session records a records batch points at, to read before [`StoredBatch::into_batch`]:
    /// the session of conversation `instance_id` and the index range `from..until`.
    pub fn record_range(&self, instance_id: &str) -> Option<(SessionKey, u64, u64)> {
        match self {
            Self::Records {
                session,
                first,
                count,
            } => Some((
                SessionKey::new(instance_id, session.clone()),
                *first,
                first + count,
            )),
            Self::Admitted { .. } | Self::Body(_) => None,
        }
    }

    /// The submission whose message (its stored JSON) an admission batch needs, to read
    /// before [`StoredBatch::into_batch`].
    pub fn admitted_submission(&self) -> Option<&str> {
        match self {
            Self::Admitted { submission_id, .. } => Some(submission_id),
            Self::Records { .. } | Self::Body(_) => None,
        }
    }

    /// The stream batch at `offset` of `key`, with what `content` holds: the records of a
    /// records batch, the message of an admission. [`FlueError::Store`] for an admission
    /// whose submission is missing.
    pub fn into_batch(
        self,
        key: &ConversationKey,
        offset: Offset,
        at: u64,
        submission_id: Option<String>,
        content: BatchContent,
    ) -> Result<StreamBatch> {
        let body = match self {
            Self::Records { session, first, .. } => BatchBody::Records {
                session,
                first_index: first,
                records: match content {
                    BatchContent::Records(records) => records,
                    BatchContent::Nothing | BatchContent::Message(_) => Vec::new(),
                },
            },
            Self::Admitted {
                submission_id: admitted,
                accepted_at,
            } => {
                let BatchContent::Message(Some(message)) = content else {
                    return Err(FlueError::Store {
                        message: format!(
                            "stream batch {offset} of {key} admits submission {admitted}, \
                             which is missing"
                        ),
                        source: None,
                    });
                };
                BatchBody::Admitted {
                    submission_id: admitted,
                    message,
                    accepted_at,
                }
            }
            Self::Body(body) => body,
        };
        Ok(StreamBatch {
            offset,
            at,
            submission_id,
            body,
        })
    }
}

/// A submission's message read back from its stored JSON ([`message_json`]).
pub fn parse_message(submission_id: &str, json: &str) -> Result<DeliveredMessage> {
    serde_json::from_str(json).map_err(|err| {
        FlueError::store(
            format!("corrupt message of submission {submission_id}"),
            err,
        )
    })
}

/// The fields of a stored `admitted` batch: without `message` when written as an
/// [`AdmittedRef`], with it when written by a store of an earlier version.
#[derive(Deserialize)]
struct StoredAdmitted {
    submission_id: String,
    accepted_at: u64,
    #[serde(default)]
    message: Option<DeliveredMessage>,
}

/// Only the tag of a stored batch body: read first, without copying the rest.
#[derive(Deserialize)]
struct BodyTag<'a> {
    #[serde(rename = "type", borrow)]
    kind: std::borrow::Cow<'a, str>,
}

/// Reads back stream row `seq` of `key` from its columns: `session`, `first_idx` and
/// `n_records` for a records batch, `body` (JSON) for the others.
pub fn stored_batch(
    key: &ConversationKey,
    seq: u64,
    session: Option<String>,
    first_idx: Option<i64>,
    n_records: Option<i64>,
    body: Option<&str>,
) -> Result<StoredBatch> {
    let corrupt = |err: serde_json::Error| FlueError::store("corrupt stream batch", err);
    match (session, first_idx, n_records, body) {
        (Some(session), Some(first), Some(count), _) => Ok(StoredBatch::Records {
            session,
            first: u64::try_from(first).unwrap_or_default(),
            count: u64::try_from(count).unwrap_or_default(),
        }),
        (_, _, _, Some(body)) => {
            let tag: BodyTag<'_> = serde_json::from_str(body).map_err(corrupt)?;
            if tag.kind != "admitted" {
                return serde_json::from_str(body)
                    .map(StoredBatch::Body)
                    .map_err(corrupt);
            }
            let admitted: StoredAdmitted = serde_json::from_str(body).map_err(corrupt)?;
            Ok(match admitted.message {
                Some(message) => StoredBatch::Body(BatchBody::Admitted {
                    submission_id: admitted.submission_id,
                    message,
                    accepted_at: admitted.accepted_at,
                }),
                None => StoredBatch::Admitted {
                    submission_id: admitted.submission_id,
                    accepted_at: admitted.accepted_at,
                },
            })
        }
        _ => Err(FlueError::Store {
            message: format!("stream batch {seq} of {key} is empty"),
            source: None,
        }),
    }
}
