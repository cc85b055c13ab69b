//! [`ConversationStore`] for [`MemoryStore`]: conversations, streams and submissions in memory.
//!
//! Lock order: the conversations lock, then the sessions lock (appends of managed
//! conversations need both, atomically). Owners are alive while their registration lives in
//! this process.

use std::collections::HashMap;
use std::time::Duration;

use flue_protocol::record::StoredRecord;
use flue_protocol::{
    BatchBody, ConversationInfo, ConversationKey, DispatchReceipt, DurabilityConfig, Offset,
    Settlement, StreamBatch, StreamPage, SubmissionInfo, SubmissionState,
};

use crate::error::Result;
use crate::store::listing::{
    ListedConversation, ListedStatus, ListingQuery, MAX_LISTING_LIMIT, Summary, merge_page,
};
use crate::store::rules::{
    self, AdmissionCheck, EarlierSubmission, FoundConversation, Ownership, ROOT_SESSION,
    duration_ms, instance_not_found,
};
use crate::store::txn;
use crate::store::{
    AbortReport, Acquire, Admission, Claim, ConversationStore, Fence, FencedAppend, HeadWatch,
    MemoryStore, OwnerRegistration, SessionKey, SubmissionStatus,
};
use crate::util::now_ms;

use super::MemorySession;

/// Conversations, their streams and submissions.
#[derive(Debug, Default)]
pub(super) struct MemoryConversations {
    conversations: HashMap<String, MemoryConversation>,
    submissions: HashMap<String, MemorySubmission>,
}

#[derive(Debug)]
struct MemoryConversation {
    key: ConversationKey,
    uid: String,
    created_at: u64,
    owner: Option<String>,
    epoch: u64,
    lease_until: u64,
    /// Submission ids in admission order.
    order: Vec<String>,
    stream: Vec<MemoryBatch>,
    /// What listings show, kept up to date by each write.
    summary: Summary,
    /// The time of the last batch.
    last_activity: u64,
}

#[derive(Debug)]
enum MemoryBatch {
    Body(StreamBatch),
    /// An admission: its message is its submission's (as the durable stores keep it).
    Admitted {
        at: u64,
        submission_id: String,
        accepted_at: u64,
    },
    Records {
        at: u64,
        submission_id: Option<String>,
        session: String,
        first: u64,
        count: u64,
    },
}

#[derive(Debug)]
struct MemorySubmission {
    info: SubmissionInfo,
    /// When it became `waiting`.
    waiting_since: Option<u64>,
    admitted_offset: Offset,
}

impl MemoryConversation {
    fn head(&self) -> Offset {
        Offset(self.stream.len() as u64)
    }

    fn push(&mut self, submission_id: Option<&str>, body: BatchBody) -> Offset {
        let offset = Offset(self.head().0 + 1);
        let at = now_ms();
        self.last_activity = at;
        self.stream.push(MemoryBatch::Body(StreamBatch {
            offset,
            at,
            submission_id: submission_id.map(str::to_owned),
            body,
        }));
        offset
    }

    fn check_fence(&self, fence: &Fence) -> Result<()> {
        rules::check_fence(
            fence,
            Some(Ownership {
                owner: self.owner.as_deref(),
                epoch: self.epoch,
            }),
        )
    }
}

impl MemoryConversations {
    fn unsettled<'a>(&'a self, conversation: &'a MemoryConversation) -> Vec<&'a SubmissionInfo> {
        conversation
            .order
            .iter()
            .filter_map(|id| self.submissions.get(id))
            .map(|submission| &submission.info)
            .filter(|info| info.state != SubmissionState::Settled)
            .collect()
    }

    /// Unsettled submissions that need work (a waiting one needs a decision first).
    fn needing_work(&self, conversation: &MemoryConversation) -> usize {
        self.unsettled(conversation)
            .into_iter()
            .filter(|info| info.state != SubmissionState::Waiting)
            .count()
    }

    fn info(&self, conversation: &MemoryConversation) -> ConversationInfo {
        ConversationInfo {
            key: conversation.key.clone(),
            uid: conversation.uid.clone(),
            head: conversation.head(),
            created_at: conversation.created_at,
            owner: conversation.owner.clone(),
            epoch: conversation.epoch,
            unsettled: self.needing_work(conversation) as u64,
        }
    }

    /// Settles an unsettled submission of `conversation`; `None` when already settled.
    fn settle(&mut self, instance_id: &str, settlement: &Settlement) -> Option<Offset> {
        let submission = self.submissions.get_mut(&settlement.submission_id)?;
        if submission.info.state == SubmissionState::Settled
            || submission.info.conversation.instance_id() != instance_id
        {
            return None;
        }
        submission.info.state = SubmissionState::Settled;
        submission.info.settlement = Some(settlement.clone());
        let conversation = self.conversations.get_mut(instance_id)?;
        conversation.summary.settled(settlement);
        Some(conversation.push(
            Some(&settlement.submission_id),
            BatchBody::Settled(settlement.clone()),
        ))
    }
}

/// An abort request's transaction on the memory store: its lock held.
struct MemoryAbort<'a> {
    all: &'a mut MemoryConversations,
    key: &'a ConversationKey,
    instance_id: &'a str,
}

impl txn::AbortTransaction for MemoryAbort<'_> {
    async fn unsettled(&mut self) -> Result<Vec<(String, SubmissionState, u32)>> {
        let Some(conversation) = self.all.conversations.get(self.instance_id) else {
            return Ok(Vec::new());
        };
        Ok(self
            .all
            .unsettled(conversation)
            .into_iter()
            .map(|info| (info.submission_id.clone(), info.state, info.attempts))
            .collect())
    }

    async fn mark_abort_requested(&mut self) -> Result<()> {
        let ids: Vec<String> = self
            .unsettled()
            .await?
            .into_iter()
            .map(|(id, _, _)| id)
            .collect();
        for id in &ids {
            if let Some(submission) = self.all.submissions.get_mut(id) {
                submission.info.abort_requested = true;
            }
        }
        Ok(())
    }

    async fn push_batch(&mut self, body: &BatchBody) -> Result<Offset> {
        match self.all.conversations.get_mut(self.instance_id) {
            Some(conversation) => Ok(conversation.push(None, body.clone())),
            None => Err(instance_not_found(self.key, None)),
        }
    }

    async fn settle(&mut self, settlement: &Settlement) -> Result<Option<Offset>> {
        Ok(self.all.settle(self.instance_id, settlement))
    }
}

impl MemoryStore {
    fn with_owned<T>(
        &self,
        fence: &Fence,
        body: impl FnOnce(&mut MemoryConversations, &str) -> Result<T>,
    ) -> Result<T> {
        let instance_id = fence.key.instance_id();
        let mut all = self.conversations();
        all.conversations
            .get(&instance_id)
            .ok_or_else(|| instance_not_found(&fence.key, None))?
            .check_fence(fence)?;
        body(&mut all, &instance_id)
    }

    /// Whether `instance_id` belongs to a managed conversation (plain appends are refused).
    pub(super) fn is_managed(&self, instance_id: &str) -> bool {
        self.conversations().conversations.contains_key(instance_id)
    }

    /// The delete rule for a session of `instance_id` ([`rules::check_delete`]); checked under
    /// the conversations lock, which the caller keeps while it deletes.
    pub(super) fn check_session_delete(all: &MemoryConversations, instance_id: &str) -> Result<()> {
        match all.conversations.get(instance_id) {
            Some(conversation) => rules::check_delete(
                &conversation.key,
                conversation.owner.clone(),
                all.unsettled(conversation).len() as u64,
            ),
            None => Ok(()),
        }
    }
}

impl ConversationStore for MemoryStore {
    async fn admit(&self, admission: &Admission) -> Result<DispatchReceipt> {
        let key = &admission.key;
        let instance_id = key.instance_id();
        let message_json = rules::message_json(admission)?;
        let mut all = self.conversations();
        let existing = all.conversations.get(&instance_id);
        let found = existing.map(|conversation| FoundConversation {
            uid: conversation.uid.clone(),
            owner: conversation.owner.clone(),
        });
        let check = AdmissionCheck::new(admission, &message_json, found)?;
        if let (Some(idempotency_key), Some(conversation)) = (check.idempotency_key(), existing) {
            let earlier = conversation
                .order
                .iter()
                .filter_map(|id| all.submissions.get(id))
                .find(|submission| {
                    submission.info.idempotency_key.as_deref() == Some(idempotency_key)
                })
                .map(|earlier| {
                    Ok::<_, crate::error::FlueError>(EarlierSubmission {
                        submission_id: earlier.info.submission_id.clone(),
                        message_json: rules::stored_message_json(
                            &earlier.info.message,
                            earlier.info.budget,
                        )?,
                        accepted_at: earlier.info.accepted_at,
                        admitted_offset: earlier.admitted_offset,
                    })
                })
                .transpose()?;
            if let Some(receipt) = check.deduplicate(earlier)? {
                return Ok(receipt);
            }
        }
        if check.checks_busy()
            && let Some(conversation) = existing
        {
            check.check_busy(all.needing_work(conversation) as u64)?;
        }
        if let Some(created) = check.created_batch() {
            let now = now_ms();
            let mut conversation = MemoryConversation {
                key: key.clone(),
                uid: admission.new_uid.clone(),
                created_at: now,
                owner: None,
                epoch: 0,
                lease_until: 0,
                order: Vec::new(),
                stream: Vec::new(),
                summary: Summary::created(
                    &admission.message,
                    admission.options.idempotency_key.as_deref(),
                ),
                last_activity: now,
            };
            conversation.push(None, created);
            all.conversations.insert(instance_id.clone(), conversation);
            self.sessions()
                .entry(SessionKey::new(instance_id.clone(), ROOT_SESSION))
                .or_insert_with(|| MemorySession {
                    records: Vec::new(),
                    created_at: now,
                    updated_at: now,
                });
        }
        let Some(conversation) = all.conversations.get_mut(&instance_id) else {
            return Err(instance_not_found(key, None));
        };
        let admitted = check.admitted_batch();
        let offset = Offset(conversation.head().0 + 1);
        if !conversation.order.is_empty() {
            conversation.summary.admitted(&admission.message);
        }
        conversation.last_activity = now_ms();
        conversation.stream.push(MemoryBatch::Admitted {
            at: conversation.last_activity,
            submission_id: admitted.submission_id.to_owned(),
            accepted_at: admitted.accepted_at,
        });
        conversation.order.push(admission.submission_id.clone());
        let position = conversation.order.len() as u64;
        all.submissions.insert(
            admission.submission_id.clone(),
            MemorySubmission {
                info: SubmissionInfo {
                    submission_id: admission.submission_id.clone(),
                    conversation: key.clone(),
                    state: SubmissionState::Queued,
                    message: admission.message.clone(),
                    accepted_at: admission.accepted_at,
                    position,
                    attempts: 0,
                    first_started_at: None,
                    input_applied: false,
                    abort_requested: false,
                    durability: None,
                    idempotency_key: admission.options.idempotency_key.clone(),
                    trace_parent: admission.options.trace_parent.clone(),
                    budget: admission.options.budget.filter(|budget| !budget.is_empty()),
                    settlement: None,
                },
                waiting_since: None,
                admitted_offset: offset,
            },
        );
        drop(all);
        self.heads.notify(&instance_id, offset);
        Ok(check.receipt(offset))
    }

    async fn list_conversations(&self, query: &ListingQuery) -> Result<Vec<ListedConversation>> {
        let all = self.conversations();
        let mut rows: Vec<&MemoryConversation> = all
            .conversations
            .values()
            .filter(|c| query.admits(&c.key, c.last_activity, &c.summary))
            .collect();
        rows.sort_by(|a, b| {
            (b.last_activity, b.key.instance_id()).cmp(&(a.last_activity, a.key.instance_id()))
        });
        let managed: Vec<ListedConversation> = rows
            .into_iter()
            .take(query.limit.min(MAX_LISTING_LIMIT))
            .map(|conversation| {
                let unsettled = all.unsettled(conversation);
                let waiting = unsettled
                    .iter()
                    .filter(|info| info.state == SubmissionState::Waiting)
                    .count() as u64;
                let pending = unsettled.len() as u64;
                ListedConversation::new(
                    conversation.key.clone(),
                    conversation.created_at,
                    conversation.last_activity,
                    ListedStatus::of(waiting, pending - waiting, conversation.summary.failed),
                    pending,
                    conversation.summary.clone(),
                )
            })
            .collect();
        // Lock order: the conversations lock (held), then the sessions lock.
        let unmanaged: Vec<ListedConversation> = self
            .sessions()
            .iter()
            .filter(|(key, _)| {
                key.session == ROOT_SESSION && !all.conversations.contains_key(&key.instance_id)
            })
            .filter_map(|(key, session)| {
                ListedConversation::unmanaged(
                    &key.instance_id,
                    session.created_at,
                    session.updated_at,
                    session.records.len() as u64,
                )
            })
            .filter(|row| query.admits(&row.key, row.last_activity, &row.summary))
            .collect();
        Ok(merge_page(managed, unmanaged, query.limit))
    }

    async fn count_conversations(&self) -> Result<u64> {
        Ok(self.conversations().conversations.len() as u64)
    }

    async fn conversation(&self, key: &ConversationKey) -> Result<Option<ConversationInfo>> {
        let all = self.conversations();
        Ok(all
            .conversations
            .get(&key.instance_id())
            .map(|conversation| all.info(conversation)))
    }

    async fn all_conversations(&self) -> Result<Vec<ConversationInfo>> {
        let all = self.conversations();
        let mut found: Vec<ConversationInfo> = all
            .conversations
            .values()
            .map(|conversation| all.info(conversation))
            .collect();
        found.sort_by(|a, b| {
            (a.created_at, a.key.instance_id()).cmp(&(b.created_at, b.key.instance_id()))
        });
        Ok(found)
    }

    async fn conversations_with_id(&self, id: &str) -> Result<Vec<ConversationInfo>> {
        let all = self.conversations();
        let mut found: Vec<ConversationInfo> = all
            .conversations
            .values()
            .filter(|conversation| conversation.key.id == id)
            .map(|conversation| all.info(conversation))
            .collect();
        found.sort_by(|a, b| (a.created_at, &a.key).cmp(&(b.created_at, &b.key)));
        Ok(found)
    }

    async fn pending_conversations(&self) -> Result<Vec<ConversationInfo>> {
        let all = self.conversations();
        let mut found: Vec<ConversationInfo> = all
            .conversations
            .values()
            .map(|conversation| all.info(conversation))
            .filter(|info| info.unsettled > 0)
            .collect();
        found.sort_by(|a, b| (a.created_at, &a.key).cmp(&(b.created_at, &b.key)));
        Ok(found)
    }

    async fn submission(&self, submission_id: &str) -> Result<Option<SubmissionInfo>> {
        Ok(self
            .conversations()
            .submissions
            .get(submission_id)
            .map(|submission| submission.info.clone()))
    }

    async fn submission_status(&self, submission_id: &str) -> Result<Option<SubmissionStatus>> {
        Ok(self
            .conversations()
            .submissions
            .get(submission_id)
            .map(|submission| SubmissionStatus::of(&submission.info)))
    }

    async fn unsettled(&self, key: &ConversationKey) -> Result<Vec<SubmissionInfo>> {
        let all = self.conversations();
        Ok(all
            .conversations
            .get(&key.instance_id())
            .map(|conversation| all.unsettled(conversation).into_iter().cloned().collect())
            .unwrap_or_default())
    }

    async fn read_stream(
        &self,
        key: &ConversationKey,
        after: Offset,
        limit: usize,
    ) -> Result<StreamPage> {
        let instance_id = key.instance_id();
        let all = self.conversations();
        let conversation = all
            .conversations
            .get(&instance_id)
            .ok_or_else(|| instance_not_found(key, None))?;
        let head = conversation.head();
        rules::check_offset(key, after, head)?;
        let sessions = self.sessions();
        let start = usize::try_from(after.0).unwrap_or(usize::MAX);
        let mut batches = Vec::new();
        for (idx, batch) in conversation
            .stream
            .iter()
            .enumerate()
            .skip(start)
            .take(limit.max(1))
        {
            let offset = Offset(idx as u64 + 1);
            batches.push(match batch {
                MemoryBatch::Body(batch) => batch.clone(),
                MemoryBatch::Admitted {
                    at,
                    submission_id,
                    accepted_at,
                } => rules::StoredBatch::Admitted {
                    submission_id: submission_id.clone(),
                    accepted_at: *accepted_at,
                }
                .into_batch(
                    key,
                    offset,
                    *at,
                    Some(submission_id.clone()),
                    rules::BatchContent::Message(
                        all.submissions
                            .get(submission_id)
                            .map(|submission| submission.info.message.clone()),
                    ),
                )?,
                MemoryBatch::Records {
                    at,
                    submission_id,
                    session,
                    first,
                    count,
                } => {
                    let records: Vec<StoredRecord> = sessions
                        .get(&SessionKey::new(instance_id.clone(), session.clone()))
                        .map(|log| {
                            let from = usize::try_from(*first).unwrap_or(usize::MAX);
                            let until = usize::try_from(first + count).unwrap_or(usize::MAX);
                            log.records
                                .get(from.min(log.records.len())..until.min(log.records.len()))
                                .map(<[StoredRecord]>::to_vec)
                                .unwrap_or_default()
                        })
                        .unwrap_or_default();
                    StreamBatch {
                        offset,
                        at: *at,
                        submission_id: submission_id.clone(),
                        body: BatchBody::Records {
                            session: session.clone(),
                            first_index: *first,
                            records,
                        },
                    }
                }
            });
        }
        Ok(rules::stream_page(after, head, batches))
    }

    fn watch_head(&self, key: &ConversationKey) -> HeadWatch {
        self.heads.watch(&key.instance_id())
    }

    async fn delete_conversation(&self, key: &ConversationKey) -> Result<bool> {
        let instance_id = key.instance_id();
        // Lock order: conversations, then sessions.
        let mut all = self.conversations();
        Self::check_session_delete(&all, &instance_id)?;
        let mut found = false;
        if let Some(conversation) = all.conversations.remove(&instance_id) {
            found = true;
            for id in &conversation.order {
                all.submissions.remove(id);
            }
        }
        let mut sessions = self.sessions();
        let before = sessions.len();
        sessions.retain(|session, _| session.instance_id != instance_id);
        Ok(found || sessions.len() != before)
    }

    async fn request_abort(&self, key: &ConversationKey) -> Result<AbortReport> {
        let instance_id = key.instance_id();
        let mut all = self.conversations();
        let mut tx = MemoryAbort {
            all: &mut all,
            key,
            instance_id: &instance_id,
        };
        let (report, head) = txn::run_ready(txn::request_abort(&mut tx))??;
        drop(all);
        if let Some(head) = head {
            self.heads.notify(&instance_id, head);
        }
        Ok(report)
    }

    async fn register_owner(&self) -> Result<OwnerRegistration> {
        Ok(self.local_owners.register())
    }

    async fn owner_alive(&self, owner_id: &str) -> Result<bool> {
        Ok(self.local_owners.alive(owner_id))
    }

    async fn acquire(
        &self,
        key: &ConversationKey,
        owner_id: &str,
        lease: Duration,
    ) -> Result<Acquire> {
        let mut all = self.conversations();
        let conversation = all
            .conversations
            .get_mut(&key.instance_id())
            .ok_or_else(|| instance_not_found(key, None))?;
        let leased = conversation.lease_until > now_ms();
        if let Some(holder) = rules::contender(conversation.owner.as_deref(), owner_id, leased)
            && self.local_owners.alive(holder)
        {
            return Ok(Acquire::Held {
                owner_id: holder.to_owned(),
            });
        }
        conversation.owner = Some(owner_id.to_owned());
        conversation.epoch += 1;
        conversation.lease_until = now_ms().saturating_add(duration_ms(lease));
        Ok(Acquire::Owned(Fence {
            key: key.clone(),
            owner_id: owner_id.to_owned(),
            epoch: conversation.epoch,
        }))
    }

    async fn renew(&self, fence: &Fence, lease: Duration) -> Result<()> {
        let instance_id = fence.key.instance_id();
        let mut all = self.conversations();
        let conversation = all
            .conversations
            .get_mut(&instance_id)
            .ok_or_else(|| instance_not_found(&fence.key, None))?;
        conversation.check_fence(fence)?;
        conversation.lease_until = now_ms().saturating_add(duration_ms(lease));
        Ok(())
    }

    async fn release(&self, fence: &Fence) -> Result<bool> {
        self.with_owned(fence, |all, instance_id| {
            let Some(conversation) = all.conversations.get(instance_id) else {
                return Ok(false);
            };
            if all.needing_work(conversation) > 0 {
                return Ok(false);
            }
            if let Some(conversation) = all.conversations.get_mut(instance_id) {
                conversation.owner = None;
                conversation.lease_until = 0;
            }
            Ok(true)
        })
    }

    async fn claim_next(
        &self,
        fence: &Fence,
        durability: &DurabilityConfig,
    ) -> Result<Option<Claim>> {
        let claimed = self.with_owned(fence, |all, instance_id| {
            let Some(conversation) = all.conversations.get(instance_id) else {
                return Ok(None);
            };
            let Some(next) = all
                .unsettled(conversation)
                .first()
                .filter(|info| rules::claimable(info.state))
                .map(|info| info.submission_id.clone())
            else {
                return Ok(None);
            };
            let Some(submission) = all.submissions.get_mut(&next) else {
                return Ok(None);
            };
            submission.info.state = SubmissionState::Running;
            submission.info.attempts += 1;
            submission.info.first_started_at.get_or_insert_with(now_ms);
            let durability = submission
                .info
                .durability
                .get_or_insert_with(|| durability.clone())
                .clone();
            let info = submission.info.clone();
            let Some(conversation) = all.conversations.get_mut(instance_id) else {
                return Ok(None);
            };
            let head = conversation.push(
                Some(&next),
                BatchBody::Started {
                    submission_id: next.clone(),
                    attempt: info.attempts,
                },
            );
            Ok(Some((
                Claim {
                    submission: info,
                    durability,
                },
                head,
            )))
        })?;
        Ok(claimed.map(|(claim, head)| {
            self.heads.notify(&fence.key.instance_id(), head);
            claim
        }))
    }

    async fn settle(&self, fence: &Fence, settlement: &Settlement) -> Result<bool> {
        let head = self.with_owned(fence, |all, instance_id| {
            Ok(all.settle(instance_id, settlement))
        })?;
        Ok(head.is_some_and(|head| {
            self.heads.notify(&fence.key.instance_id(), head);
            true
        }))
    }

    async fn append_fenced(&self, append: FencedAppend<'_>) -> Result<u64> {
        rules::check_fenced_session(&append)?;
        let instance_id = append.fence.key.instance_id();
        let (version, head) = self.with_owned(append.fence, |all, instance_id| {
            let mut sessions = self.sessions();
            let version = super::append_records(
                &mut sessions,
                append.session,
                append.expected_version,
                append.records,
            )?;
            if append.records.is_empty() {
                return Ok((version, None));
            }
            let Some(conversation) = all.conversations.get_mut(instance_id) else {
                return Err(instance_not_found(&append.fence.key, None));
            };
            conversation.last_activity = now_ms();
            conversation.summary.appended(
                &append.session.session,
                append.expected_version,
                append.records,
            );
            conversation.stream.push(MemoryBatch::Records {
                at: conversation.last_activity,
                submission_id: append.submission_id.map(str::to_owned),
                session: append.session.session.clone(),
                first: append.expected_version,
                count: append.records.len() as u64,
            });
            let head = conversation.head();
            if append.resumes_waiting {
                let now = now_ms();
                let order = conversation.order.clone();
                for id in order {
                    if let Some(submission) = all.submissions.get_mut(&id)
                        && submission.info.state == SubmissionState::Waiting
                    {
                        let waited =
                            now.saturating_sub(submission.waiting_since.take().unwrap_or(now));
                        submission.info.state = SubmissionState::Queued;
                        submission.info.attempts = submission.info.attempts.saturating_sub(1);
                        submission.info.first_started_at = submission
                            .info
                            .first_started_at
                            .map(|started| started.saturating_add(waited));
                    }
                }
            }
            if append.applies_input
                && let Some(submission) = append
                    .submission_id
                    .and_then(|id| all.submissions.get_mut(id))
                && submission.info.state == SubmissionState::Running
            {
                submission.info.input_applied = true;
            }
            Ok((version, Some(head)))
        })?;
        if let Some(head) = head {
            self.heads.notify(&instance_id, head);
        }
        Ok(version)
    }

    async fn wait(&self, fence: &Fence, submission_id: &str, actions: &[String]) -> Result<bool> {
        let head = self.with_owned(fence, |all, instance_id| {
            let Some(submission) = all.submissions.get_mut(submission_id) else {
                return Ok(None);
            };
            if submission.info.state != SubmissionState::Running
                || submission.info.conversation.instance_id() != instance_id
            {
                return Ok(None);
            }
            submission.info.state = SubmissionState::Waiting;
            submission.waiting_since = Some(now_ms());
            Ok(all.conversations.get_mut(instance_id).map(|conversation| {
                conversation.push(
                    Some(submission_id),
                    BatchBody::Waiting {
                        submission_id: submission_id.to_owned(),
                        actions: actions.to_vec(),
                    },
                )
            }))
        })?;
        Ok(head.is_some_and(|head| {
            self.heads.notify(&fence.key.instance_id(), head);
            true
        }))
    }
}
