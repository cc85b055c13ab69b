//! [`ConversationStore`] for [`MemoryStore`]: conversations, streams and submissions in memory.
//!
//! Lock order: the conversations lock, then the sessions lock (appends of managed
//! conversations need both, atomically). Owners are alive while their registration lives in
//! this process.

use std::collections::HashMap;
use std::time::Duration;

use flue_protocol::{
    BatchBody, ConversationInfo, ConversationKey, DispatchReceipt, DurabilityConfig, Offset,
    SendCondition, Settlement, StreamBatch, StreamPage, SubmissionInfo, SubmissionState, WhenBusy,
};

use crate::error::{FlueError, Result};
use crate::record::StoredRecord;
use crate::store::conversation::{
    AbortReport, Acquire, Admission, Claim, ConversationStore, Fence, FencedAppend, HeadWatch,
    OwnerRegistration, ROOT_SESSION, aborted_settlement, duration_ms, instance_not_found,
    lease_lost,
};
use crate::store::{MemoryStore, SessionKey};
use crate::util::{BoxFuture, now_ms};

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
}

#[derive(Debug)]
enum MemoryBatch {
    Body(StreamBatch),
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
    message_json: String,
}

impl MemoryConversation {
    fn head(&self) -> Offset {
        Offset(self.stream.len() as u64)
    }

    fn push(&mut self, submission_id: Option<&str>, body: BatchBody) -> Offset {
        let offset = Offset(self.head().0 + 1);
        self.stream.push(MemoryBatch::Body(StreamBatch {
            offset,
            at: now_ms(),
            submission_id: submission_id.map(str::to_owned),
            body,
        }));
        offset
    }

    fn check_fence(&self, fence: &Fence) -> Result<()> {
        if self.owner.as_deref() == Some(fence.owner_id.as_str()) && self.epoch == fence.epoch {
            Ok(())
        } else {
            Err(lease_lost(fence, "another owner took the conversation"))
        }
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
        Some(conversation.push(
            Some(&settlement.submission_id),
            BatchBody::Settled(settlement.clone()),
        ))
    }
}

impl MemoryStore {
    fn admit_now(&self, admission: &Admission) -> Result<DispatchReceipt> {
        let key = &admission.key;
        let instance_id = key.instance_id();
        let message_json = serde_json::to_string(&admission.message)
            .map_err(|err| FlueError::store("cannot serialise message", err))?;
        let mut all = self.conversations();
        let existing = all.conversations.get(&instance_id);
        match (&admission.options.condition, existing) {
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
        if let (Some(idempotency_key), Some(conversation)) =
            (&admission.options.idempotency_key, existing)
        {
            let earlier = conversation
                .order
                .iter()
                .filter_map(|id| all.submissions.get(id))
                .find(|submission| {
                    submission.info.idempotency_key.as_deref() == Some(idempotency_key)
                });
            if let Some(earlier) = earlier {
                if earlier.message_json != message_json {
                    return Err(FlueError::SubmissionConflict {
                        key: idempotency_key.clone(),
                        submission_id: earlier.info.submission_id.clone(),
                    });
                }
                return Ok(DispatchReceipt {
                    submission_id: earlier.info.submission_id.clone(),
                    accepted_at: earlier.info.accepted_at,
                    uid: conversation.uid.clone(),
                    offset: earlier.admitted_offset,
                    deduplicated: true,
                });
            }
        }
        if admission.options.when_busy == WhenBusy::Fail
            && let Some(conversation) = existing
        {
            let unsettled = all.needing_work(conversation) as u64;
            if unsettled > 0 {
                return Err(FlueError::ConversationBusy {
                    agent: key.agent.clone(),
                    id: key.id.clone(),
                    owner: conversation.owner.clone(),
                    unsettled,
                });
            }
        }
        if !all.conversations.contains_key(&instance_id) {
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
            };
            conversation.push(
                None,
                BatchBody::Created {
                    uid: admission.new_uid.clone(),
                },
            );
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
        let offset = conversation.push(
            Some(&admission.submission_id),
            BatchBody::Admitted {
                submission_id: admission.submission_id.clone(),
                message: admission.message.clone(),
                accepted_at: admission.accepted_at,
            },
        );
        conversation.order.push(admission.submission_id.clone());
        let position = conversation.order.len() as u64;
        let uid = conversation.uid.clone();
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
                    settlement: None,
                },
                waiting_since: None,
                admitted_offset: offset,
                message_json,
            },
        );
        drop(all);
        self.heads.notify(&instance_id, offset);
        Ok(DispatchReceipt {
            submission_id: admission.submission_id.clone(),
            accepted_at: admission.accepted_at,
            uid,
            offset,
            deduplicated: false,
        })
    }

    fn read_stream_now(
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
        if after > head {
            return Err(FlueError::OffsetOutOfRange {
                conversation: key.to_string(),
                offset: after.0,
                head: head.0,
            });
        }
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
        let next_offset = batches.last().map_or(after, |batch| batch.offset);
        Ok(StreamPage {
            up_to_date: next_offset == head,
            next_offset,
            batches,
        })
    }

    fn request_abort_now(&self, key: &ConversationKey) -> Result<AbortReport> {
        let instance_id = key.instance_id();
        let mut all = self.conversations();
        let Some(conversation) = all.conversations.get(&instance_id) else {
            return Ok(AbortReport::default());
        };
        let unsettled: Vec<(String, SubmissionState, u32)> = all
            .unsettled(conversation)
            .into_iter()
            .map(|info| (info.submission_id.clone(), info.state, info.attempts))
            .collect();
        if unsettled.is_empty() {
            return Ok(AbortReport::default());
        }
        let requested: Vec<String> = unsettled.iter().map(|(id, _, _)| id.clone()).collect();
        for id in &requested {
            if let Some(submission) = all.submissions.get_mut(id) {
                submission.info.abort_requested = true;
            }
        }
        let mut head = match all.conversations.get_mut(&instance_id) {
            Some(conversation) => conversation.push(
                None,
                BatchBody::AbortRequested {
                    submission_ids: requested.clone(),
                },
            ),
            None => return Err(instance_not_found(key, None)),
        };
        let mut settled = Vec::new();
        for (submission_id, state, attempts) in unsettled {
            if state == SubmissionState::Running {
                continue;
            }
            let settlement = aborted_settlement(&submission_id, attempts);
            if let Some(offset) = all.settle(&instance_id, &settlement) {
                head = offset;
            }
            settled.push(submission_id);
        }
        drop(all);
        self.heads.notify(&instance_id, head);
        Ok(AbortReport { requested, settled })
    }

    fn acquire_now(
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
        if let Some(current) = &conversation.owner
            && current != owner_id
            && conversation.lease_until > now_ms()
            && self.local_owners.alive(current)
        {
            return Ok(Acquire::Held {
                owner_id: current.clone(),
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

    fn claim_next_now(
        &self,
        fence: &Fence,
        durability: &DurabilityConfig,
    ) -> Result<Option<Claim>> {
        let claimed = self.with_owned(fence, |all, instance_id| {
            let Some(conversation) = all.conversations.get(instance_id) else {
                return Ok(None);
            };
            // A waiting submission holds the line: nothing behind it runs before it resumes.
            let Some(next) = all
                .unsettled(conversation)
                .first()
                .filter(|info| info.state != SubmissionState::Waiting)
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

    fn append_fenced_now(&self, append: FencedAppend<'_>) -> Result<u64> {
        let instance_id = append.fence.key.instance_id();
        if append.session.instance_id != instance_id {
            return Err(lease_lost(
                append.fence,
                "the session belongs to another conversation",
            ));
        }
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
            conversation.stream.push(MemoryBatch::Records {
                at: now_ms(),
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

    /// Whether `instance_id` belongs to a managed conversation (plain appends are refused).
    pub(super) fn is_managed(&self, instance_id: &str) -> bool {
        self.conversations().conversations.contains_key(instance_id)
    }
}

impl ConversationStore for MemoryStore {
    fn admit<'a>(&'a self, admission: &'a Admission) -> BoxFuture<'a, Result<DispatchReceipt>> {
        Box::pin(async move { self.admit_now(admission) })
    }

    fn conversation<'a>(
        &'a self,
        key: &'a ConversationKey,
    ) -> BoxFuture<'a, Result<Option<ConversationInfo>>> {
        Box::pin(async move {
            let all = self.conversations();
            Ok(all
                .conversations
                .get(&key.instance_id())
                .map(|conversation| all.info(conversation)))
        })
    }

    fn all_conversations(&self) -> BoxFuture<'_, Result<Vec<ConversationInfo>>> {
        Box::pin(async move {
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
        })
    }

    fn conversations_with_id<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<ConversationInfo>>> {
        Box::pin(async move {
            let all = self.conversations();
            let mut found: Vec<ConversationInfo> = all
                .conversations
                .values()
                .filter(|conversation| conversation.key.id == id)
                .map(|conversation| all.info(conversation))
                .collect();
            found.sort_by(|a, b| (a.created_at, &a.key).cmp(&(b.created_at, &b.key)));
            Ok(found)
        })
    }

    fn pending_conversations(&self) -> BoxFuture<'_, Result<Vec<ConversationInfo>>> {
        Box::pin(async move {
            let all = self.conversations();
            let mut found: Vec<ConversationInfo> = all
                .conversations
                .values()
                .map(|conversation| all.info(conversation))
                .filter(|info| info.unsettled > 0)
                .collect();
            found.sort_by(|a, b| (a.created_at, &a.key).cmp(&(b.created_at, &b.key)));
            Ok(found)
        })
    }

    fn submission<'a>(
        &'a self,
        submission_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<SubmissionInfo>>> {
        Box::pin(async move {
            Ok(self
                .conversations()
                .submissions
                .get(submission_id)
                .map(|submission| submission.info.clone()))
        })
    }

    fn unsettled<'a>(
        &'a self,
        key: &'a ConversationKey,
    ) -> BoxFuture<'a, Result<Vec<SubmissionInfo>>> {
        Box::pin(async move {
            let all = self.conversations();
            Ok(all
                .conversations
                .get(&key.instance_id())
                .map(|conversation| all.unsettled(conversation).into_iter().cloned().collect())
                .unwrap_or_default())
        })
    }

    fn read_stream<'a>(
        &'a self,
        key: &'a ConversationKey,
        after: Offset,
        limit: usize,
    ) -> BoxFuture<'a, Result<StreamPage>> {
        Box::pin(async move { self.read_stream_now(key, after, limit) })
    }

    fn watch_head(&self, key: &ConversationKey) -> HeadWatch {
        self.heads.watch(&key.instance_id())
    }

    fn request_abort<'a>(&'a self, key: &'a ConversationKey) -> BoxFuture<'a, Result<AbortReport>> {
        Box::pin(async move { self.request_abort_now(key) })
    }

    fn register_owner(&self) -> BoxFuture<'_, Result<OwnerRegistration>> {
        Box::pin(async move { Ok(self.local_owners.register()) })
    }

    fn owner_alive<'a>(&'a self, owner_id: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move { Ok(self.local_owners.alive(owner_id)) })
    }

    fn acquire<'a>(
        &'a self,
        key: &'a ConversationKey,
        owner_id: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<Acquire>> {
        Box::pin(async move { self.acquire_now(key, owner_id, lease) })
    }

    fn renew<'a>(&'a self, fence: &'a Fence, lease: Duration) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let instance_id = fence.key.instance_id();
            let mut all = self.conversations();
            let conversation = all
                .conversations
                .get_mut(&instance_id)
                .ok_or_else(|| instance_not_found(&fence.key, None))?;
            conversation.check_fence(fence)?;
            conversation.lease_until = now_ms().saturating_add(duration_ms(lease));
            Ok(())
        })
    }

    fn release<'a>(&'a self, fence: &'a Fence) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
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
        })
    }

    fn claim_next<'a>(
        &'a self,
        fence: &'a Fence,
        durability: &'a DurabilityConfig,
    ) -> BoxFuture<'a, Result<Option<Claim>>> {
        Box::pin(async move { self.claim_next_now(fence, durability) })
    }

    fn settle<'a>(
        &'a self,
        fence: &'a Fence,
        settlement: &'a Settlement,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let head = self.with_owned(fence, |all, instance_id| {
                Ok(all.settle(instance_id, settlement))
            })?;
            Ok(head.is_some_and(|head| {
                self.heads.notify(&fence.key.instance_id(), head);
                true
            }))
        })
    }

    fn append_fenced<'a>(&'a self, append: FencedAppend<'a>) -> BoxFuture<'a, Result<u64>> {
        Box::pin(async move { self.append_fenced_now(append) })
    }

    fn wait<'a>(
        &'a self,
        fence: &'a Fence,
        submission_id: &'a str,
        actions: &'a [String],
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
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
        })
    }
}
