//! Background tasks: a task started without waiting runs as the durable submission of a
//! conversation of its own, and its settlement comes back to the parent conversation as a
//! `task_result` signal, admitted before the child's settlement is stored (so a crash in
//! between delivers on the next attempt) under an idempotency key (so it is delivered once).
//!
//! A child's conversation id names its parent: `<parent id>~bg.<parent agent>.<hex>`, the
//! hex part derived from the starting call's idempotency key, so a start run again after a
//! crash finds the same child instead of starting another.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::background::{BackgroundRuntime, BackgroundTaskOptions};
use crate::error::{FlueError, Result};
use crate::store::Admission;
use crate::submission::runtime::{AgentRuntime, RuntimeInner};
use crate::submission::wire::{
    ConversationKey, DeliveredMessage, DispatchOptions, MessageOptions, Settlement, SubmissionState,
};
use crate::tool::ToolError;
use crate::util::{BoxFuture, new_ulid, new_uuid, now_ms};
use flue_protocol::event::{Event, Outcome};

/// What separates a background child's conversation id from its parent's.
const MARK: &str = "~bg.";
/// Signal type (and tag) of a background task's result delivered to its parent.
pub const TASK_RESULT_SIGNAL: &str = "task_result";

/// How many background tasks a runtime runs at once: per parent conversation and in all.
/// The excess waits with its submission `queued` (listed so) until a running one ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackgroundLimits {
    /// Children of one conversation running at once (default 4).
    pub per_conversation: usize,
    /// Background tasks running at once in this runtime (default 16).
    pub per_server: usize,
}

impl Default for BackgroundLimits {
    fn default() -> Self {
        Self {
            per_conversation: 4,
            per_server: 16,
        }
    }
}

impl BackgroundLimits {
    /// Limits of `per_conversation` and `per_server` tasks (each at least 1).
    pub fn new(per_conversation: usize, per_server: usize) -> Self {
        Self {
            per_conversation: per_conversation.max(1),
            per_server: per_server.max(1),
        }
    }
}

/// The running slots of a runtime's background tasks.
pub(crate) struct BackgroundSlots {
    limits: BackgroundLimits,
    server: Arc<Semaphore>,
    parents: Mutex<HashMap<ConversationKey, Arc<Semaphore>>>,
}

/// A background task's slot, held while its conversation is driven.
pub(crate) struct BackgroundPermit {
    _parent: OwnedSemaphorePermit,
    _server: OwnedSemaphorePermit,
}

impl BackgroundSlots {
    pub(crate) fn new(limits: BackgroundLimits) -> Self {
        Self {
            limits,
            server: Arc::new(Semaphore::new(limits.per_server)),
            parents: Mutex::new(HashMap::new()),
        }
    }

    /// Waits for a slot for `key` when it is a background child (`Ok(None)` for any other
    /// conversation); `Err(())` when `stopping` fires first.
    pub(crate) async fn acquire(
        &self,
        key: &ConversationKey,
        stopping: &CancellationToken,
    ) -> std::result::Result<Option<BackgroundPermit>, ()> {
        let Some(parent) = background_parent(key) else {
            return Ok(None);
        };
        let per_parent = Arc::clone(
            self.parents
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(parent)
                .or_insert_with(|| Arc::new(Semaphore::new(self.limits.per_conversation))),
        );
        if per_parent.available_permits() == 0 || self.server.available_permits() == 0 {
            tracing::info!(
                target: "flue_core::submission",
                conversation = %key.instance_id(),
                "background task queued: the running limit is reached"
            );
        }
        let permits = async {
            let parent = per_parent.acquire_owned().await.map_err(|_| ())?;
            let server = Arc::clone(&self.server)
                .acquire_owned()
                .await
                .map_err(|_| ())?;
            Ok(BackgroundPermit {
                _parent: parent,
                _server: server,
            })
        };
        tokio::select! {
            () = stopping.cancelled() => Err(()),
            permit = permits => permit.map(Some),
        }
    }
}

/// The handle of a started background task.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackgroundTask {
    /// The child's conversation.
    pub conversation: ConversationKey,
    /// The child's submission (the task's prompt): wait for it, read it, abort its conversation.
    pub submission_id: String,
}

/// One background task of a conversation, as [`AgentRuntime::background_tasks`] lists it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct BackgroundTaskInfo {
    /// The child's submission (the handle the `task` call returned).
    pub task_id: String,
    /// The agent the child runs as.
    pub agent: String,
    /// The child's conversation id.
    pub conversation: String,
    /// Where the submission is: `queued`, `running`, `waiting` or `settled`.
    pub state: SubmissionState,
    /// How it ended, once settled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// When it was started, ms since the epoch.
    pub accepted_at: u64,
}

/// The parent conversation of a background child, or `None` for any other conversation.
pub fn background_parent(child: &ConversationKey) -> Option<ConversationKey> {
    let (parent_id, rest) = child.id.rsplit_once(MARK)?;
    let (parent_agent, _hex) = rest.rsplit_once('.')?;
    Some(ConversationKey::new(parent_agent, parent_id))
}

/// How many background levels lie above `key` (0 for a conversation started by a message).
fn background_depth(key: &ConversationKey) -> u32 {
    u32::try_from(key.id.matches(MARK).count()).unwrap_or(u32::MAX)
}

/// The child conversation of `parent` running `agent`, named after `seed`.
fn child_key(parent: &ConversationKey, agent: &str, seed: &str) -> ConversationKey {
    let digest = Sha256::digest(seed.as_bytes());
    let hex: String = digest[..8]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    ConversationKey::new(agent, format!("{}{MARK}{}.{hex}", parent.id, parent.agent))
}

/// A conversation's harness's way back to the runtime serving it: what the `task` tool's
/// background flag and the `task_*` tools reach.
pub(crate) struct BackgroundLink {
    runtime: Weak<RuntimeInner>,
    parent: ConversationKey,
}

impl BackgroundLink {
    pub(crate) fn new(runtime: &Arc<RuntimeInner>, parent: ConversationKey) -> Self {
        Self {
            runtime: Arc::downgrade(runtime),
            parent,
        }
    }

    fn runtime(&self) -> std::result::Result<AgentRuntime, ToolError> {
        match self.runtime.upgrade() {
            Some(inner) => Ok(AgentRuntime { inner }),
            None => Err(ToolError::new(
                "runtime_stopped",
                "the runtime serving this conversation stopped",
            )),
        }
    }

    async fn start_task(
        &self,
        prompt: String,
        options: BackgroundTaskOptions,
    ) -> std::result::Result<Value, ToolError> {
        let runtime = self.runtime()?;
        let task = runtime
            .start_task(&self.parent, &prompt, options)
            .await
            .map_err(ToolError::from)?;
        Ok(json!({
            "task_id": task.submission_id,
            "conversation": task.conversation.id,
            "agent": task.conversation.agent,
            "state": "running",
            "note": "runs in the background; its result arrives as a `task_result` message",
        }))
    }

    /// The status of the child whose submission is `task_id`, when it is a child of ours.
    async fn task_status(&self, task_id: String) -> std::result::Result<Value, ToolError> {
        let runtime = self.runtime()?;
        let status = runtime.lifecycle(&task_id).await.map_err(ToolError::from)?;
        if background_parent(&status.conversation).as_ref() != Some(&self.parent) {
            return Err(ToolError::invalid_input(format!(
                "{task_id} is not a background task of this conversation"
            )));
        }
        Ok(status_json(
            &task_id,
            status.state,
            status.settlement.as_ref(),
        ))
    }

    async fn wait_task(
        &self,
        task_id: String,
        timeout: Duration,
        cancel: CancellationToken,
    ) -> std::result::Result<Value, ToolError> {
        // Checks the task is ours before waiting on it.
        self.task_status(task_id.clone()).await?;
        let runtime = self.runtime()?;
        tokio::select! {
            () = cancel.cancelled() => return Err(ToolError::from(FlueError::Aborted)),
            waited = tokio::time::timeout(timeout, runtime.wait(&task_id)) => {
                if let Ok(Err(err)) = waited {
                    return Err(ToolError::from(err));
                }
            }
        }
        self.task_status(task_id).await
    }

    async fn cancel_task(&self, task_id: String) -> std::result::Result<Value, ToolError> {
        let mut value = self.task_status(task_id.clone()).await?;
        let runtime = self.runtime()?;
        runtime
            .cancel_background_task(&self.parent, &task_id)
            .await
            .map_err(ToolError::from)?;
        value["cancel_requested"] = json!(true);
        Ok(value)
    }
}

impl BackgroundRuntime for BackgroundLink {
    fn start(
        &self,
        prompt: String,
        options: BackgroundTaskOptions,
    ) -> BoxFuture<'_, std::result::Result<Value, ToolError>> {
        Box::pin(self.start_task(prompt, options))
    }

    fn status(&self, task_id: String) -> BoxFuture<'_, std::result::Result<Value, ToolError>> {
        Box::pin(self.task_status(task_id))
    }

    fn wait(
        &self,
        task_id: String,
        timeout: Duration,
        cancel: CancellationToken,
    ) -> BoxFuture<'_, std::result::Result<Value, ToolError>> {
        Box::pin(self.wait_task(task_id, timeout, cancel))
    }

    fn cancel(&self, task_id: String) -> BoxFuture<'_, std::result::Result<Value, ToolError>> {
        Box::pin(self.cancel_task(task_id))
    }
}

fn status_json(task_id: &str, state: SubmissionState, settlement: Option<&Settlement>) -> Value {
    let mut value = json!({ "task_id": task_id, "state": state_name(state) });
    if let Some(settlement) = settlement {
        value["outcome"] = json!(settlement.outcome);
        value["text"] = json!(settlement.text);
        if let Some(error) = &settlement.error {
            value["error"] = json!(error.message);
        }
    }
    value
}

fn state_name(state: SubmissionState) -> Value {
    serde_json::to_value(state).unwrap_or(Value::Null)
}

impl AgentRuntime {
    /// Starts a task of the conversation `parent` without waiting for it: the child runs as the
    /// durable submission of a conversation of its own (see [`background_parent`]), processed
    /// like any other (a crash resumes it), and once it settles its result is admitted to
    /// `parent` as a `task_result` signal, exactly once, which runs a turn of the parent (after
    /// what it is busy with). Background tasks nest at most [`MAX_TASK_DEPTH`](crate::MAX_TASK_DEPTH)
    /// levels.
    ///
    /// Errors: [`FlueError::DelegationDepthExceeded`], and those of [`AgentRuntime::dispatch`]
    /// (an agent the runtime does not serve, an id too long for a child's).
    pub async fn start_task(
        &self,
        parent: &ConversationKey,
        prompt: &str,
        options: BackgroundTaskOptions,
    ) -> Result<BackgroundTask> {
        let depth = background_depth(parent) + 1;
        if depth > crate::task::MAX_TASK_DEPTH {
            return Err(FlueError::DelegationDepthExceeded {
                depth,
                max: crate::task::MAX_TASK_DEPTH,
            });
        }
        let agent = options.agent.unwrap_or_else(|| parent.agent.clone());
        let seed = options.idempotency_key.unwrap_or_else(new_uuid);
        let conversation = child_key(parent, &agent, &seed);
        let mut chosen = MessageOptions::default();
        chosen.role = options.role;
        let message = DeliveredMessage::user(prompt).with_options(chosen);
        let dispatch = DispatchOptions::default().with_idempotency_key(format!("task:{seed}"));
        let receipt = self.dispatch(&conversation, message, dispatch).await?;
        Ok(BackgroundTask {
            conversation,
            submission_id: receipt.submission_id,
        })
    }
}

impl AgentRuntime {
    /// The background tasks started by the conversation `parent` (its own children, not
    /// theirs), oldest first. Walks the store's instance ids: its cost grows with the store.
    pub async fn background_tasks(
        &self,
        parent: &ConversationKey,
    ) -> Result<Vec<BackgroundTaskInfo>> {
        let mut tasks = Vec::new();
        for instance in self.store().instance_ids().await? {
            let Some((agent, id)) = instance.split_once(':') else {
                continue;
            };
            let child = ConversationKey::new(agent, id);
            if background_parent(&child).as_ref() != Some(parent) {
                continue;
            }
            if let Some(info) = self.first_submission(&child).await? {
                tasks.push(info);
            }
        }
        tasks.sort_by_key(|info| info.accepted_at);
        Ok(tasks)
    }

    /// Cancels the background task `task_id` of `parent` (aborts its conversation's work);
    /// `false` when it had already settled. [`FlueError::SubmissionNotFound`] when `task_id`
    /// is not a background task of `parent`.
    pub async fn cancel_background_task(
        &self,
        parent: &ConversationKey,
        task_id: &str,
    ) -> Result<bool> {
        let status = self.lifecycle(task_id).await?;
        if background_parent(&status.conversation).as_ref() != Some(parent) {
            return Err(FlueError::SubmissionNotFound {
                submission_id: task_id.to_owned(),
            });
        }
        self.abort(&status.conversation).await
    }

    /// The task of a child conversation: its first admitted submission.
    async fn first_submission(
        &self,
        child: &ConversationKey,
    ) -> Result<Option<BackgroundTaskInfo>> {
        let page = self
            .read_stream(child, crate::submission::wire::Offset::START, 8)
            .await?;
        let Some((task_id, accepted_at)) =
            page.batches.iter().find_map(|batch| match &batch.body {
                crate::submission::wire::BatchBody::Admitted {
                    submission_id,
                    accepted_at,
                    ..
                } => Some((submission_id.clone(), *accepted_at)),
                _ => None,
            })
        else {
            return Ok(None);
        };
        let status = self.lifecycle(&task_id).await?;
        Ok(Some(BackgroundTaskInfo {
            task_id,
            agent: child.agent.clone(),
            conversation: child.id.clone(),
            state: status.state,
            outcome: status.settlement.map(|settlement| settlement.outcome),
            accepted_at,
        }))
    }
}

impl RuntimeInner {
    /// Admits the settlement of a background child's submission to its parent as a
    /// `task_result` signal (nothing for any other conversation). Runs before the settlement
    /// is stored: a crash in between delivers again on the next attempt, and the idempotency
    /// key makes that the same submission.
    pub(crate) async fn deliver_background(
        self: &Arc<Self>,
        child: &ConversationKey,
        settlement: &Settlement,
    ) -> Result<()> {
        let Some(parent) = background_parent(child) else {
            return Ok(());
        };
        let admission = Admission {
            key: parent.clone(),
            submission_id: new_ulid(),
            new_uid: new_ulid(),
            message: result_message(child, settlement),
            accepted_at: now_ms(),
            options: DispatchOptions::default()
                .with_idempotency_key(format!("task-result:{}", settlement.submission_id)),
        };
        let receipt = match self.store.admit(&admission).await {
            Ok(receipt) => receipt,
            // Delivered before, with another text (an attempt that ended differently).
            Err(FlueError::SubmissionConflict { .. }) => return Ok(()),
            Err(err) => return Err(err),
        };
        if !receipt.deduplicated {
            self.emit(
                &parent,
                Some(&receipt.submission_id),
                Event::SubmissionQueued {
                    submission_id: receipt.submission_id.clone(),
                },
            );
        }
        self.kick(&parent);
        Ok(())
    }
}

/// The `task_result` signal of a child's settlement.
fn result_message(child: &ConversationKey, settlement: &Settlement) -> DeliveredMessage {
    let outcome = match settlement.outcome {
        Outcome::Completed => "completed",
        Outcome::Aborted => "aborted",
        _ => "failed",
    };
    let body = match (&settlement.text, &settlement.error) {
        (Some(text), _) if settlement.outcome == Outcome::Completed => text.clone(),
        (_, Some(error)) => error.message.clone(),
        _ => String::new(),
    };
    let attributes = BTreeMap::from([
        ("task_id".to_owned(), settlement.submission_id.clone()),
        ("conversation".to_owned(), child.id.clone()),
        ("agent".to_owned(), child.agent.clone()),
        ("outcome".to_owned(), outcome.to_owned()),
    ]);
    DeliveredMessage::Signal {
        signal_type: TASK_RESULT_SIGNAL.to_owned(),
        body,
        attributes,
        tag_name: Some(TASK_RESULT_SIGNAL.to_owned()),
        initial_data: None,
        options: Box::default(),
    }
}
