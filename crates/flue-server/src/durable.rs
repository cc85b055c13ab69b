//! [`DurableRuntime`]: the router's runtime, flue-core's durable submissions runtime
//! ([`AgentRuntime`]) with the agents served and the live output of turns in progress. Admission, the per-conversation stream, abort and status are the
//! runtime's; this module only projects its durable batches into protocol chunks.
//!
//! The projection is a pure function of one batch (ids are derived from the submission and
//! the batch offset), so any reader at any offset, in any process, after any restart, sees the
//! same chunks at the same positions.

#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use flue_core::store::HeadWatch;
use flue_core::{
    AgentInfo, AgentRuntime, AssistantContent, BatchBody, ConversationKey, DEFAULT_SESSION,
    DeliveredMessage, DispatchOptions, FlueError, Record, StreamBatch, submission::DispatchReceipt,
    submission::SubmissionState,
};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::backend::{
    Admitted, Attachment, AttachmentBytes, BackendError, Batch, Decision, Delivered, Delivery,
    Interrupted, LiveChunks, LiveCursor, Page, Resolved, SubmissionStatus,
};
use crate::chunks::{decode_image, iso8601, parse_attachment_id, settlement_chunks, user_message};
use crate::turns::{LiveTurns, Shown, spawn_follower};
use crate::wire::{ChunkBody, Offset};

/// How often the store is looked at for writes other processes made to a conversation that
/// readers wait on (writes of this process wake them at once): one look per conversation, for
/// all its waiting readers.
const CROSS_PROCESS_POLL: Duration = Duration::from_secs(5);

/// The runtime the router serves: flue-core's [`AgentRuntime`], the agents it lists and
/// checks, and the live output of turns in progress. Cheap to clone.
#[derive(Clone)]
pub struct DurableRuntime {
    inner: Arc<Inner>,
}

struct Inner {
    runtime: AgentRuntime,
    /// The agents served and their names; replaced whole by [`DurableRuntime::set_agents`].
    agents: RwLock<Arc<Served>>,
    stopping: AtomicBool,
    /// Submissions this process admitted and has not seen settle (for graceful shutdown).
    admitted: Mutex<HashSet<String>>,
    /// Model output of turns in progress, ahead of their durable records.
    turns: Arc<LiveTurns>,
    /// The cross-process poll of each conversation with waiting readers: the head it last saw.
    polls: Mutex<HashMap<String, Arc<watch::Sender<u64>>>>,
}

/// The agents served at one time.
struct Served {
    agents: Vec<AgentInfo>,
    names: HashSet<String>,
}

impl Served {
    fn new(agents: Vec<AgentInfo>) -> Self {
        let names = agents.iter().map(|agent| agent.name.clone()).collect();
        Self { agents, names }
    }
}

impl DurableRuntime {
    /// Serves `agents` (their names must be the runtime registry's) through `runtime`.
    ///
    /// Called within a tokio runtime, it streams model output live to SSE readers (see
    /// `turns.rs`); elsewhere every chunk comes from a durable batch.
    pub fn new(runtime: AgentRuntime, agents: Vec<AgentInfo>) -> Self {
        let turns = Arc::new(LiveTurns::default());
        spawn_follower(&turns, runtime.subscribe());
        Self {
            inner: Arc::new(Inner {
                runtime,
                agents: RwLock::new(Arc::new(Served::new(agents))),
                stopping: AtomicBool::new(false),
                admitted: Mutex::new(HashSet::new()),
                turns,
                polls: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// How many agents are served.
    pub fn agents_len(&self) -> usize {
        self.served().agents.len()
    }

    /// Serves `agents` from now on (a reloaded workspace; the runtime registry must serve the
    /// same names). Requests already past their agent check finish as they began.
    pub fn set_agents(&self, agents: Vec<AgentInfo>) {
        let served = Arc::new(Served::new(agents));
        *self
            .inner
            .agents
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = served;
    }

    /// How many submissions this process admitted are not settled yet.
    pub async fn unsettled_submissions(&self) -> usize {
        self.unsettled().await
    }

    fn served(&self) -> Arc<Served> {
        Arc::clone(
            &self
                .inner
                .agents
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// The runtime underneath.
    pub fn runtime(&self) -> &AgentRuntime {
        &self.inner.runtime
    }

    /// Stops admitting (503 from then on), waits up to `grace` for the submissions this
    /// process admitted to settle, then shuts the runtime down: unfinished attempts stop at a
    /// boundary and are left to recovery. Returns how many were still unsettled.
    pub async fn shutdown(&self, grace: Duration) -> usize {
        self.inner.stopping.store(true, Ordering::SeqCst);
        let deadline = tokio::time::Instant::now() + grace;
        let mut unsettled = self.unsettled().await;
        while unsettled > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
            unsettled = self.unsettled().await;
        }
        if let Err(err) = self.inner.runtime.clone().shutdown().await {
            tracing::warn!(error = %err, "runtime shutdown");
        }
        unsettled
    }

    async fn unsettled(&self) -> usize {
        let ids: Vec<String> = lock(&self.inner.admitted).iter().cloned().collect();
        for id in ids {
            let settled = match self.inner.runtime.lifecycle(&id).await {
                Ok(status) => status.state == SubmissionState::Settled,
                Err(_) => true,
            };
            if settled {
                lock(&self.inner.admitted).remove(&id);
            }
        }
        lock(&self.inner.admitted).len()
    }

    fn check_agent(&self, key: &ConversationKey) -> Result<(), BackendError> {
        if !self.served().names.contains(&key.agent) {
            return Err(BackendError::UnknownAgent(key.agent.clone()));
        }
        Ok(())
    }

    pub(crate) fn agents(&self) -> Vec<AgentInfo> {
        self.served().agents.clone()
    }

    pub(crate) fn has_agent(&self, agent: &str) -> bool {
        self.served().names.contains(agent)
    }

    pub(crate) async fn dispatch(
        &self,
        key: &ConversationKey,
        delivery: Delivery,
    ) -> Result<Admitted, BackendError> {
        let message = match delivery.message {
            Delivered::User { text, images } => DeliveredMessage::User {
                body: text,
                images: images
                    .into_iter()
                    .map(|image| flue_core::Image {
                        data: image.data,
                        mime_type: image.mime_type,
                    })
                    .collect(),
                result: delivery.result,
                initial_data: delivery.initial_data,
                options: Box::default(),
            },
            Delivered::Signal {
                signal_type,
                body,
                attributes,
                tag_name,
            } => DeliveredMessage::Signal {
                signal_type,
                body,
                attributes: attributes.into_iter().collect(),
                tag_name,
                initial_data: delivery.initial_data,
                options: Box::default(),
            },
        };
        let message = message.with_options(delivery.options);
        let options = DispatchOptions {
            condition: delivery.condition,
            trace_parent: delivery.trace_parent,
            idempotency_key: delivery.idempotency_key,
            budget: delivery.budget,
            ..DispatchOptions::default()
        };
        let receipt = self
            .admit(key, message, options)
            .await
            .map_err(backend_error)?;
        Ok(Admitted {
            submission_id: receipt.submission_id,
            uid: receipt.uid,
            offset: Offset(receipt.offset.0),
            deduplicated: receipt.deduplicated,
        })
    }

    /// Admits `message` to conversation `key` by the path every HTTP send takes: the agent
    /// must be served, nothing is admitted once [`DurableRuntime::shutdown`] began, and the
    /// submission counts among those a graceful shutdown waits for. For senders inside the
    /// process, such as schedules.
    ///
    /// Errors: [`FlueError::RuntimeStopped`] once shutting down, [`FlueError::UnknownAgent`],
    /// and the runtime's admission errors ([`AgentRuntime::dispatch`]).
    pub async fn admit(
        &self,
        key: &ConversationKey,
        message: DeliveredMessage,
        options: DispatchOptions,
    ) -> Result<DispatchReceipt, FlueError> {
        if self.inner.stopping.load(Ordering::SeqCst) {
            return Err(FlueError::RuntimeStopped {
                message: "the server is shutting down".to_owned(),
            });
        }
        if !self.served().names.contains(&key.agent) {
            let mut known: Vec<String> = self.served().names.iter().cloned().collect();
            known.sort();
            return Err(FlueError::UnknownAgent {
                agent: key.agent.clone(),
                known,
            });
        }
        let receipt = self.inner.runtime.dispatch(key, message, options).await?;
        lock(&self.inner.admitted).insert(receipt.submission_id.clone());
        Ok(receipt)
    }

    pub(crate) async fn read(
        &self,
        key: &ConversationKey,
        after: Offset,
        max_batches: usize,
    ) -> Result<Page, BackendError> {
        self.check_agent(key)?;
        let page = self
            .inner
            .runtime
            .read_stream(key, flue_core::Offset(after.0), max_batches)
            .await
            .map_err(backend_error)?;
        let next = page.batches.last().map_or(after.0, |batch| batch.offset.0);
        let head = if page.up_to_date {
            Offset(page.next_offset.0.max(next))
        } else {
            Offset(page.next_offset.0.max(next) + 1)
        };
        let batches = page
            .batches
            .iter()
            .map(|batch| {
                let ends_live_turn = live_turn_of(batch);
                let replaces_live = ends_live_turn
                    .as_deref()
                    .is_some_and(|submission_id| self.inner.turns.streamed(submission_id));
                Arc::new(Batch {
                    offset: Offset(batch.offset.0),
                    chunks: project(batch),
                    ends_live_turn,
                    replaces_live,
                })
            })
            .collect();
        Ok(Page {
            batches,
            head,
            incarnation: Arc::from(format!("inc_{key}")),
        })
    }

    pub(crate) async fn head(&self, key: &ConversationKey) -> Result<Offset, BackendError> {
        self.check_agent(key)?;
        match self
            .inner
            .runtime
            .conversation(key)
            .await
            .map_err(backend_error)?
        {
            Some(info) => Ok(Offset(info.head.0)),
            None => Err(BackendError::StreamNotFound(key.to_string())),
        }
    }

    /// Returns once the conversation's head is past `after` (see [`HeadWaiter`]).
    pub(crate) async fn changed(&self, key: &ConversationKey, after: Offset) {
        self.head_waiter(key).changed(after).await;
    }

    /// A waiter for the head of `key`, to keep across waits (an SSE reader holds one).
    pub(crate) fn head_waiter(&self, key: &ConversationKey) -> HeadWaiter {
        if self.check_agent(key).is_err() {
            return HeadWaiter {
                runtime: self.clone(),
                key: key.clone(),
                watches: None,
                looked: true,
            };
        }
        // Subscribed before the waiter's one look at the store: a write that lands in
        // between is seen either way.
        let store = self.inner.runtime.store().watch_head(key);
        let polled = self.poll(key);
        HeadWaiter {
            runtime: self.clone(),
            key: key.clone(),
            watches: Some((store, polled)),
            looked: false,
        }
    }

    /// A receiver of the cross-process poll of `key`, starting that poll if nobody waits on
    /// the conversation yet.
    fn poll(&self, key: &ConversationKey) -> watch::Receiver<u64> {
        let id = key.to_string();
        let mut polls = lock(&self.inner.polls);
        if let Some(sender) = polls.get(&id) {
            return sender.subscribe();
        }
        let (sender, receiver) = watch::channel(0);
        let sender = Arc::new(sender);
        polls.insert(id, Arc::clone(&sender));
        tokio::spawn(poll_head(Arc::downgrade(&self.inner), key.clone(), sender));
        receiver
    }
    pub(crate) async fn actions(
        &self,
        key: &ConversationKey,
    ) -> Result<Vec<flue_core::record::ActionInfo>, BackendError> {
        self.check_agent(key)?;
        self.inner.runtime.actions(key).await.map_err(backend_error)
    }

    pub(crate) async fn rules(
        &self,
        key: &ConversationKey,
    ) -> Result<Vec<flue_core::standing::RuleInfo>, BackendError> {
        self.check_agent(key)?;
        self.inner.runtime.rules(key).await.map_err(backend_error)
    }

    pub(crate) async fn revoke_rule(
        &self,
        key: &ConversationKey,
        rule_id: &str,
    ) -> Result<flue_core::standing::RuleInfo, BackendError> {
        self.check_agent(key)?;
        self.inner
            .runtime
            .revoke_rule(key, rule_id)
            .await
            .map_err(backend_error)
    }

    pub(crate) async fn state(
        &self,
        key: &ConversationKey,
    ) -> Result<Option<flue_core::record::StateChange>, BackendError> {
        self.check_agent(key)?;
        self.inner.runtime.state(key).await.map_err(backend_error)
    }

    pub(crate) async fn resolve(
        &self,
        key: &ConversationKey,
        action_id: &str,
        decision: Decision,
    ) -> Result<Resolved, BackendError> {
        self.check_agent(key)?;
        if self.inner.stopping.load(Ordering::Acquire) {
            return Err(BackendError::ShuttingDown);
        }
        let receipt = self
            .inner
            .runtime
            .resolve(key, action_id, decision)
            .await
            .map_err(backend_error)?;
        if let Some(submission_id) = &receipt.submission_id {
            lock(&self.inner.admitted).insert(submission_id.clone());
        }
        Ok(Resolved {
            submission_id: receipt.submission_id,
            offset: Offset(receipt.offset.0),
        })
    }

    pub(crate) async fn interrupt(
        &self,
        key: &ConversationKey,
        message: Option<String>,
    ) -> Result<Interrupted, BackendError> {
        self.check_agent(key)?;
        if self.inner.stopping.load(Ordering::Acquire) {
            return Err(BackendError::ShuttingDown);
        }
        let receipt = self
            .inner
            .runtime
            .interrupt(key, message.map(DeliveredMessage::user))
            .await
            .map_err(backend_error)?;
        let submission_id = receipt
            .dispatched
            .map(|dispatched| dispatched.submission_id);
        if let Some(submission_id) = &submission_id {
            lock(&self.inner.admitted).insert(submission_id.clone());
        }
        Ok(Interrupted {
            interrupted: receipt.interrupted,
            settled: receipt.settled,
            submission_id,
        })
    }

    /// Aborts one running task of the conversation alone; whether it ran in this process.
    pub(crate) fn abort_task(
        &self,
        key: &ConversationKey,
        session: &str,
    ) -> Result<bool, BackendError> {
        self.check_agent(key)?;
        Ok(self.inner.runtime.abort_task(key, session))
    }

    pub(crate) async fn abort(&self, key: &ConversationKey) -> Result<bool, BackendError> {
        self.check_agent(key)?;
        match self.inner.runtime.abort(key).await {
            Ok(aborted) => Ok(aborted),
            Err(FlueError::AgentInstanceNotFound { .. }) => Ok(false),
            Err(err) => Err(backend_error(err)),
        }
    }

    /// Deletes the conversation (see [`AgentRuntime::delete`]): `false` when there was none;
    /// [`BackendError::ConversationBusy`] while a submission is unsettled.
    pub(crate) async fn delete(&self, key: &ConversationKey) -> Result<bool, BackendError> {
        self.check_agent(key)?;
        match self.inner.runtime.delete(key).await {
            Ok(deleted) => Ok(deleted),
            Err(FlueError::ConversationBusy { unsettled, .. }) => {
                Err(BackendError::ConversationBusy {
                    conversation: format!("{}/{}", key.agent, key.id),
                    unsettled,
                })
            }
            Err(err) => Err(backend_error(err)),
        }
    }

    pub(crate) async fn attachment(
        &self,
        key: &ConversationKey,
        attachment_id: &str,
    ) -> Result<Option<AttachmentBytes>, BackendError> {
        self.check_agent(key)?;
        // The id names the submission and the image's index: its bytes are those of the
        // admitted message, stored once with the submission.
        let Some((submission_id, idx)) = parse_attachment_id(attachment_id) else {
            return Ok(None);
        };
        let info = match self.inner.runtime.status(submission_id).await {
            Ok(info) => info,
            Err(FlueError::SubmissionNotFound { .. }) => return Ok(None),
            Err(err) => return Err(backend_error(err)),
        };
        if info.conversation != *key {
            return Ok(None);
        }
        let DeliveredMessage::User { images, .. } = &info.message else {
            return Ok(None);
        };
        let Some(image) = images.get(idx) else {
            return Ok(None);
        };
        let Some(bytes) = decode_image(&image.data) else {
            return Err(BackendError::Internal(FlueError::InvalidRequest {
                message: format!("attachment {attachment_id:?} is not valid base64 in the store"),
            }));
        };
        Ok(Some(AttachmentBytes {
            mime_type: image.mime_type.clone(),
            bytes,
        }))
    }

    pub(crate) fn live(&self, key: &ConversationKey, cursor: LiveCursor) -> Option<LiveChunks> {
        self.inner.turns.read(&key.to_string(), cursor)
    }

    pub(crate) async fn live_changed(&self, key: &ConversationKey) {
        let mut watch = self.inner.turns.watch(&key.to_string());
        if watch.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// The runtime's events the dev console shows live, from the one follower of its events.
    pub(crate) fn shown_events(&self) -> tokio::sync::broadcast::Receiver<Shown> {
        self.inner.turns.subscribe_shown()
    }

    /// The events that draw the conversation's running tasks as they are now.
    pub(crate) fn running_task_events(
        &self,
        key: &ConversationKey,
    ) -> Vec<flue_core::submission::RuntimeEvent> {
        self.inner.turns.task_replay(&key.to_string())
    }

    pub(crate) fn mark_streamed(&self, submission_id: &str) {
        self.inner.turns.mark_streamed(submission_id);
    }

    pub(crate) async fn submission(
        &self,
        key: &ConversationKey,
        submission_id: &str,
    ) -> Result<Option<SubmissionStatus>, BackendError> {
        self.check_agent(key)?;
        let info = match self.inner.runtime.lifecycle(submission_id).await {
            Ok(info) => info,
            Err(FlueError::SubmissionNotFound { .. }) => return Ok(None),
            Err(err) => return Err(backend_error(err)),
        };
        if info.conversation != *key {
            return Ok(None);
        }
        let state = match info.state {
            SubmissionState::Queued => "queued",
            SubmissionState::Running => "running",
            SubmissionState::Waiting => "waiting",
            SubmissionState::Settled => "settled",
            _ => "unknown",
        };
        Ok(Some(SubmissionStatus {
            submission_id: submission_id.to_owned(),
            state,
            outcome: info
                .settlement
                .as_ref()
                .map(|settlement| outcome_name(settlement.outcome).to_owned()),
            data: info
                .settlement
                .as_ref()
                .and_then(|settlement| settlement.data.clone()),
            error: info
                .settlement
                .and_then(|settlement| settlement.error)
                .map(|error| error_value(&error)),
        }))
    }
}

/// The submission whose model turn with text or reasoning this batch records.
fn live_turn_of(batch: &StreamBatch) -> Option<String> {
    let BatchBody::Records {
        session, records, ..
    } = &batch.body
    else {
        return None;
    };
    let streams = session == DEFAULT_SESSION
        && records.iter().any(|stored| match &stored.record {
            Record::Assistant(message) => message.content.iter().any(|content| {
                matches!(content, AssistantContent::Text { text } | AssistantContent::Thinking { text, .. } if !text.is_empty())
            }),
            _ => false,
        });
    if streams {
        batch.submission_id.clone()
    } else {
        None
    }
}

/// The `data-stop` part of an assistant turn that did not end normally: `{stopReason,
/// refusal?}`.
fn stop_data(message: &flue_core::AssistantMessage) -> Option<Value> {
    let reason = &message.stop_reason;
    if reason.is_normal() || *reason == flue_core::StopReason::Aborted {
        return None;
    }
    let mut data = json!({"stopReason": reason.as_str()});
    let refusal: Vec<&str> = message
        .content
        .iter()
        .filter_map(|part| match part {
            AssistantContent::Refusal { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    if !refusal.is_empty() {
        data["refusal"] = json!(refusal.join("\n"));
    }
    Some(data)
}

/// One durable batch as chunks.
fn project(batch: &StreamBatch) -> Vec<ChunkBody> {
    let at = Some(iso8601(batch.at));
    match &batch.body {
        BatchBody::Admitted {
            submission_id,
            message,
            ..
        } => {
            let mut shown = user_message(submission_id, &delivered(message));
            // What the message chose for its run (an addition: clients show it, and a retry
            // sends it again).
            if !message.options().is_empty() {
                shown.parts.push(json!({
                    "type": "data-options",
                    "data": message.options(),
                }));
            }
            vec![ChunkBody::MessageAppended { message: shown }]
        }
        BatchBody::Records {
            session, records, ..
        } if session == DEFAULT_SESSION => {
            let mut chunks = Vec::new();
            for (idx, stored) in records.iter().enumerate() {
                let reply_id = match &batch.submission_id {
                    Some(submission_id) => format!("reply_{submission_id}"),
                    None => format!("reply_{}_{idx}", batch.offset.0),
                };
                match &stored.record {
                    // A submission's input is shown once, at its admission.
                    Record::User(message) if batch.submission_id.is_none() => {
                        chunks.push(ChunkBody::MessageAppended {
                            message: user_message(
                                &format!("{}_{idx}", batch.offset.0),
                                &Delivered::User {
                                    text: message.joined_text(),
                                    images: Vec::new(),
                                },
                            ),
                        });
                    }
                    Record::Assistant(message) => {
                        chunks.push(ChunkBody::MessageStarted {
                            message_id: reply_id.clone(),
                            submission_id: batch.submission_id.clone(),
                            turn_id: Some(format!("turn_{}_{idx}", batch.offset.0)),
                            timestamp: at.clone(),
                        });
                        for content in &message.content {
                            match content {
                                AssistantContent::Text { text } if !text.is_empty() => {
                                    chunks.push(ChunkBody::MessageDelta {
                                        message_id: reply_id.clone(),
                                        kind: "text".to_owned(),
                                        delta: text.clone(),
                                    });
                                }
                                AssistantContent::Thinking { text, .. } if !text.is_empty() => {
                                    chunks.push(ChunkBody::MessageDelta {
                                        message_id: reply_id.clone(),
                                        kind: "reasoning".to_owned(),
                                        delta: text.clone(),
                                    });
                                }
                                AssistantContent::ToolCall(call) => {
                                    chunks.push(ChunkBody::ToolInput {
                                        message_id: reply_id.clone(),
                                        tool_call_id: call.id.clone(),
                                        tool_name: call.name.clone(),
                                        input: call.input.clone(),
                                        timestamp: at.clone(),
                                    });
                                }
                                _ => {}
                            }
                        }
                        // Extension: a turn that did not end normally says why (and the
                        // refusal in the model's words), so a reader never takes a refused
                        // or cut-off answer for a finished one.
                        if let Some(data) = stop_data(message) {
                            chunks.push(ChunkBody::DataPart {
                                message_id: reply_id.clone(),
                                name: "stop".to_owned(),
                                data,
                            });
                        }
                        chunks.push(ChunkBody::MessageCompleted {
                            message_id: reply_id,
                            timestamp: at.clone(),
                        });
                    }
                    Record::ToolResult(result) => {
                        if result.is_error {
                            chunks.push(ChunkBody::ToolOutputError {
                                tool_call_id: result.call_id.clone(),
                                error_text: result.content.clone(),
                                duration_ms: None,
                                timestamp: at.clone(),
                            });
                        } else {
                            chunks.push(ChunkBody::ToolOutput {
                                tool_call_id: result.call_id.clone(),
                                output: serde_json::from_str(&result.content)
                                    .unwrap_or_else(|_| Value::String(result.content.clone())),
                                duration_ms: None,
                                timestamp: at.clone(),
                            });
                        }
                        // What the tool emitted for UI readers: one `data-<name>` part each.
                        for emitted in &result.data {
                            chunks.push(ChunkBody::DataPart {
                                message_id: reply_id.clone(),
                                name: emitted.name.clone(),
                                data: emitted.data.clone(),
                            });
                        }
                    }
                    // Extension: pauses as data parts of the reply, `data-action-<id>`, whose
                    // `state` goes from `pending` to the decision.
                    Record::ActionRequired(action) => {
                        chunks.push(ChunkBody::DataPart {
                            message_id: reply_id,
                            name: format!("action-{}", action.action_id),
                            data: action_data(action, None),
                        });
                    }
                    Record::ActionResolved(resolution) => {
                        let required = records.iter().find_map(|stored| match &stored.record {
                            Record::ActionRequired(action)
                                if action.action_id == resolution.action_id =>
                            {
                                Some(action)
                            }
                            _ => None,
                        });
                        // Decided in a later batch: the part names the call and the decision,
                        // not the input.
                        let data = match required {
                            Some(action) => action_data(action, Some(&resolution.decision)),
                            None => {
                                let mut data = json!({
                                    "actionId": resolution.action_id,
                                    "toolCallId": resolution.call_id,
                                    "toolName": resolution.tool_name,
                                    "state": crate::chunks::action_state(Some(&resolution.decision)),
                                });
                                crate::chunks::decision_fields(&mut data, &resolution.decision);
                                data
                            }
                        };
                        chunks.push(ChunkBody::DataPart {
                            message_id: reply_id,
                            name: format!("action-{}", resolution.action_id),
                            data,
                        });
                    }
                    Record::Compaction(summary) if batch.submission_id.is_some() => {
                        chunks.push(ChunkBody::DataPart {
                            message_id: reply_id,
                            name: "compaction".to_owned(),
                            data: json!({"state": "done", "tokensBefore": summary.tokens_before}),
                        });
                    }
                    _ => {}
                }
            }
            chunks
        }
        BatchBody::Settled(settlement) => settlement_chunks(
            &settlement.submission_id,
            outcome_name(settlement.outcome),
            settlement.error.as_ref().map(error_value),
            settlement.data.clone(),
            settlement.settled_at,
        ),
        _ => Vec::new(),
    }
}

/// The `data-action-<id>` part of a pending or decided action.
fn action_data(
    action: &flue_core::record::PendingAction,
    decision: Option<&flue_core::ActionDecision>,
) -> Value {
    crate::chunks::action_json(&flue_core::record::ActionInfo {
        action: action.clone(),
        decision: decision.cloned(),
    })
}

fn delivered(message: &DeliveredMessage) -> Delivered {
    match message {
        DeliveredMessage::User { body, images, .. } => Delivered::User {
            text: body.clone(),
            images: images
                .iter()
                .map(|image| Attachment {
                    data: image.data.clone(),
                    mime_type: image.mime_type.clone(),
                    filename: None,
                })
                .collect(),
        },
        DeliveredMessage::Signal {
            signal_type,
            body,
            attributes,
            tag_name,
            ..
        } => Delivered::Signal {
            signal_type: signal_type.clone(),
            body: body.clone(),
            attributes: attributes
                .iter()
                .map(|(name, value)| (name.clone(), value.clone()))
                .collect(),
            tag_name: tag_name.clone(),
        },
        _ => Delivered::User {
            text: String::new(),
            images: Vec::new(),
        },
    }
}

fn outcome_name(outcome: flue_core::Outcome) -> &'static str {
    match outcome {
        flue_core::Outcome::Completed => "completed",
        flue_core::Outcome::Aborted => "aborted",
        _ => "failed",
    }
}

/// A settlement error on the wire: `{name, type, message}`.
fn error_value(error: &flue_core::ErrorInfo) -> Value {
    json!({"name": "FlueError", "type": error.kind, "message": error.message})
}

/// Maps the runtime's errors onto the protocol's.
pub(crate) fn backend_error(err: FlueError) -> BackendError {
    match err {
        FlueError::UnknownAgent { agent, .. } => BackendError::UnknownAgent(agent),
        FlueError::AgentInstanceNotFound {
            agent,
            id,
            uid: None,
        } => BackendError::StreamNotFound(format!("{agent}/{id}")),
        FlueError::AgentInstanceNotFound { agent, id, .. } => {
            BackendError::InstanceNotFound(format!("{agent}/{id}"))
        }
        FlueError::AgentInstanceExists { agent, id, uid } => BackendError::InstanceExists {
            id: format!("{agent}/{id}"),
            uid,
        },
        FlueError::OffsetOutOfRange { offset, head, .. } => BackendError::OffsetBeyondHead {
            offset: Offset(offset),
            head: Offset(head),
        },
        FlueError::InvalidRequest { message } | FlueError::InvalidDecision { message, .. } => {
            BackendError::InvalidRequest(message)
        }
        FlueError::InvalidInstanceId { reason, .. } => BackendError::InvalidRequest(reason),
        FlueError::RuntimeStopped { .. } => BackendError::ShuttingDown,
        FlueError::ActionNotFound {
            action_id, session, ..
        } => BackendError::ActionNotFound {
            conversation: session,
            action_id,
        },
        FlueError::ActionAlreadyResolved { action_id } => {
            BackendError::ActionAlreadyResolved(action_id)
        }
        FlueError::ActionsPending { actions, .. } => BackendError::ActionsPending(actions),
        FlueError::SubmissionConflict { key, submission_id } => {
            BackendError::SubmissionConflict { key, submission_id }
        }
        FlueError::ConversationBusy { .. } => BackendError::InvalidRequest(
            "the conversation is busy with an earlier decision; retry shortly".to_owned(),
        ),
        other => BackendError::Internal(other),
    }
}

/// Waits for a conversation's head to pass an offset: writes of this process through the
/// store's head watch (at once), other processes' through the conversation's one shared
/// cross-process poll (within [`CROSS_PROCESS_POLL`]). Holds no timer of its own, and looks at
/// the store itself once, at its first wait (what landed before it subscribed).
pub(crate) struct HeadWaiter {
    runtime: DurableRuntime,
    key: ConversationKey,
    /// The store's head watch and the poll's; `None` for a conversation of an agent not served
    /// (it never changes).
    watches: Option<(HeadWatch, watch::Receiver<u64>)>,
    /// Whether the one look at the store was made.
    looked: bool,
}

impl HeadWaiter {
    /// Returns once the head is past `after`.
    pub(crate) async fn changed(&mut self, after: Offset) {
        let Some((store, polled)) = &mut self.watches else {
            return std::future::pending().await;
        };
        if !self.looked {
            self.looked = true;
            if let Ok(Some(info)) = self.runtime.inner.runtime.conversation(&self.key).await
                && info.head.0 > after.0
            {
                return;
            }
        }
        let mut store_open = true;
        let mut poll_open = true;
        loop {
            if store.borrow_and_update().0 > after.0 || *polled.borrow_and_update() > after.0 {
                return;
            }
            // A closed watch is never polled again (it would answer at once, forever).
            tokio::select! {
                changed = store.changed(), if store_open => store_open = changed.is_ok(),
                changed = polled.changed(), if poll_open => poll_open = changed.is_ok(),
                else => return std::future::pending().await,
            }
        }
    }
}

/// The cross-process poll of one conversation: looks at its head now and every
/// [`CROSS_PROCESS_POLL`] while anyone waits on it, and stops (forgetting itself) once nobody
/// does or the runtime is gone.
async fn poll_head(inner: Weak<Inner>, key: ConversationKey, sender: Arc<watch::Sender<u64>>) {
    loop {
        {
            let Some(inner) = inner.upgrade() else {
                return;
            };
            if sender.receiver_count() == 0 {
                // Checked again under the lock that new subscribers take.
                let mut polls = lock(&inner.polls);
                if sender.receiver_count() == 0 {
                    let id = key.to_string();
                    if polls
                        .get(&id)
                        .is_some_and(|current| Arc::ptr_eq(current, &sender))
                    {
                        polls.remove(&id);
                    }
                    return;
                }
            }
            if let Ok(Some(info)) = inner.runtime.conversation(&key).await {
                sender.send_if_modified(|seen| {
                    let grew = info.head.0 > *seen;
                    if grew {
                        *seen = info.head.0;
                    }
                    grew
                });
            }
        }
        tokio::time::sleep(CROSS_PROCESS_POLL).await;
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
