//! [`LocalRuntime`]: a [`Backend`] over flue-core sessions in this process.
//!
//! Per conversation it keeps the stream of batches in memory, runs submissions one at a time
//! (first in, first out) on one worker task, and turns the session's events into chunks as
//! they happen (text and reasoning deltas, tool calls, task activity, compaction). The
//! session's records are as durable as its store; the stream and the queue live as long as
//! the process (a restart starts a new stream incarnation, and queued submissions that never
//! ran are lost). A durable submissions runtime replaces it behind the same trait.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use flue_core::{
    BoxFuture, CancellationToken, Event, FlueError, Image, PromptOptions, Session, new_ulid, now_ms,
};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::backend::{
    Admitted, AgentInfo, AttachmentBytes, Backend, BackendError, Batch, ConversationKey, Delivered,
    Delivery, Page, SendCondition, SubmissionStatus,
};
use crate::chunks::{attachment_id, decode_image, settlement_chunks, timestamp, user_message};
use crate::wire::{ChunkBody, Offset};

/// Opens agents for the runtime: implemented by the assembly layer (workspace or bundle) and
/// by embedders that define agents in code.
pub trait AgentHost: Send + Sync + 'static {
    /// Every agent this host can open.
    fn agents(&self) -> Vec<AgentInfo>;

    /// Opens the default session of agent `agent` for the instance `instance_id`
    /// (`<agent>/<id>`). Called once per conversation the first time it has work; the session
    /// is kept while the conversation lives.
    fn open<'a>(
        &'a self,
        agent: &'a str,
        instance_id: &'a str,
    ) -> BoxFuture<'a, Result<Session, FlueError>>;
}

/// The in-process runtime. Cheap to clone.
#[derive(Clone)]
pub struct LocalRuntime {
    inner: Arc<Inner>,
}

struct Inner {
    host: Arc<dyn AgentHost>,
    agents: Vec<AgentInfo>,
    names: HashSet<String>,
    conversations: Mutex<HashMap<ConversationKey, Arc<Conversation>>>,
    incarnation: Arc<str>,
    stopping: AtomicBool,
    /// Bumped whenever a worker stops, so shutdown can wait for them.
    idle: watch::Sender<usize>,
}

struct Conversation {
    key: ConversationKey,
    uid: String,
    head: watch::Sender<u64>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    batches: Vec<Arc<Batch>>,
    queue: VecDeque<Queued>,
    running: Option<(String, CancellationToken)>,
    worker: bool,
    statuses: HashMap<String, SubmissionStatus>,
    /// Images of admitted messages by attachment id (in memory, like the stream).
    attachments: HashMap<String, AttachmentBytes>,
    session: Option<Session>,
}

struct Queued {
    submission_id: String,
    message: Delivered,
}

impl LocalRuntime {
    /// A runtime serving the host's agents.
    pub fn new(host: Arc<dyn AgentHost>) -> Self {
        let agents = host.agents();
        let names = agents.iter().map(|agent| agent.name.clone()).collect();
        let (idle, _) = watch::channel(0);
        Self {
            inner: Arc::new(Inner {
                host,
                agents,
                names,
                conversations: Mutex::new(HashMap::new()),
                incarnation: Arc::from(format!("inc_{}", new_ulid())),
                stopping: AtomicBool::new(false),
                idle,
            }),
        }
    }

    /// Stops admitting, then waits up to `grace` for running and queued submissions to
    /// settle. Returns the number of conversations still busy when the grace ran out.
    pub async fn shutdown(&self, grace: Duration) -> usize {
        self.inner.stopping.store(true, Ordering::SeqCst);
        let mut idle = self.inner.idle.subscribe();
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            let busy = self.busy();
            if busy == 0 {
                return 0;
            }
            if tokio::time::timeout_at(deadline, idle.changed())
                .await
                .is_err()
            {
                return self.busy();
            }
        }
    }

    fn busy(&self) -> usize {
        lock(&self.inner.conversations)
            .values()
            .filter(|conversation| lock(&conversation.state).worker)
            .count()
    }

    fn conversation(&self, key: &ConversationKey) -> Result<Arc<Conversation>, BackendError> {
        if !self.inner.names.contains(&key.agent) {
            return Err(BackendError::UnknownAgent(key.agent.clone()));
        }
        lock(&self.inner.conversations)
            .get(key)
            .cloned()
            .ok_or_else(|| BackendError::StreamNotFound(key.conversation_id()))
    }
}

impl Backend for LocalRuntime {
    fn agents(&self) -> Vec<AgentInfo> {
        self.inner.agents.clone()
    }

    fn has_agent(&self, agent: &str) -> bool {
        self.inner.names.contains(agent)
    }

    fn dispatch<'a>(
        &'a self,
        key: &'a ConversationKey,
        delivery: Delivery,
    ) -> BoxFuture<'a, Result<Admitted, BackendError>> {
        Box::pin(async move {
            if self.inner.stopping.load(Ordering::SeqCst) {
                return Err(BackendError::ShuttingDown);
            }
            if !self.inner.names.contains(&key.agent) {
                return Err(BackendError::UnknownAgent(key.agent.clone()));
            }
            let conversation = {
                let mut conversations = lock(&self.inner.conversations);
                match (conversations.get(key), &delivery.condition) {
                    (Some(existing), SendCondition::CreateOnly) => {
                        return Err(BackendError::InstanceExists {
                            id: key.conversation_id(),
                            uid: existing.uid.clone(),
                        });
                    }
                    (Some(existing), SendCondition::Uid(uid)) if *uid != existing.uid => {
                        return Err(BackendError::InstanceNotFound(key.conversation_id()));
                    }
                    (None, SendCondition::Uid(_)) => {
                        return Err(BackendError::InstanceNotFound(key.conversation_id()));
                    }
                    (Some(existing), _) => Arc::clone(existing),
                    (None, _) => {
                        let (head, _) = watch::channel(0);
                        let created = Arc::new(Conversation {
                            key: key.clone(),
                            uid: format!("inst_{}", new_ulid()),
                            head,
                            state: Mutex::new(State::default()),
                        });
                        conversations.insert(key.clone(), Arc::clone(&created));
                        created
                    }
                }
            };
            let submission_id = format!("sub_{}", new_ulid());
            let message = user_message(&submission_id, &delivery.message);
            let (offset, start_worker) = {
                let mut state = lock(&conversation.state);
                let offset =
                    conversation.append(&mut state, vec![ChunkBody::MessageAppended { message }]);
                if let Delivered::User { images, .. } = &delivery.message {
                    for (idx, image) in images.iter().enumerate() {
                        let bytes = decode_image(&image.data).unwrap_or_default();
                        state.attachments.insert(
                            attachment_id(&submission_id, idx),
                            AttachmentBytes {
                                mime_type: image.mime_type.clone(),
                                bytes,
                            },
                        );
                    }
                }
                state.queue.push_back(Queued {
                    submission_id: submission_id.clone(),
                    message: delivery.message,
                });
                state.statuses.insert(
                    submission_id.clone(),
                    SubmissionStatus {
                        submission_id: submission_id.clone(),
                        state: "queued",
                        outcome: None,
                        error: None,
                    },
                );
                let start_worker = !state.worker;
                state.worker = true;
                (offset, start_worker)
            };
            if start_worker {
                tokio::spawn(work(Arc::clone(&self.inner), Arc::clone(&conversation)));
            }
            Ok(Admitted {
                submission_id,
                uid: conversation.uid.clone(),
                offset,
            })
        })
    }

    fn read<'a>(
        &'a self,
        key: &'a ConversationKey,
        after: Offset,
        max_batches: usize,
    ) -> BoxFuture<'a, Result<Page, BackendError>> {
        Box::pin(async move {
            let conversation = self.conversation(key)?;
            let state = lock(&conversation.state);
            let head = Offset(state.batches.len() as u64);
            if after > head {
                return Err(BackendError::OffsetBeyondHead {
                    offset: after,
                    head,
                });
            }
            let start = usize::try_from(after.0).unwrap_or(usize::MAX);
            let batches = state
                .batches
                .iter()
                .skip(start)
                .take(max_batches)
                .cloned()
                .collect();
            Ok(Page {
                batches,
                head,
                incarnation: Arc::clone(&self.inner.incarnation),
            })
        })
    }

    fn head<'a>(&'a self, key: &'a ConversationKey) -> BoxFuture<'a, Result<Offset, BackendError>> {
        Box::pin(async move {
            let conversation = self.conversation(key)?;
            let state = lock(&conversation.state);
            Ok(Offset(state.batches.len() as u64))
        })
    }

    fn changed<'a>(&'a self, key: &'a ConversationKey, after: Offset) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let Ok(conversation) = self.conversation(key) else {
                return std::future::pending().await;
            };
            let mut head = conversation.head.subscribe();
            // An error means the conversation was dropped: nothing more will come.
            if head.wait_for(|head| *head > after.0).await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    }

    fn abort<'a>(&'a self, key: &'a ConversationKey) -> BoxFuture<'a, Result<bool, BackendError>> {
        Box::pin(async move {
            let conversation = match self.conversation(key) {
                Ok(conversation) => conversation,
                Err(BackendError::StreamNotFound(_)) => return Ok(false),
                Err(err) => return Err(err),
            };
            let mut state = lock(&conversation.state);
            let mut had_work = false;
            if let Some((_, cancel)) = &state.running {
                cancel.cancel();
                had_work = true;
            }
            let queued: Vec<Queued> = state.queue.drain(..).collect();
            for item in queued {
                had_work = true;
                let error = aborted_error();
                conversation.settle(&mut state, &item.submission_id, "aborted", Some(error));
            }
            Ok(had_work)
        })
    }

    fn attachment<'a>(
        &'a self,
        key: &'a ConversationKey,
        attachment_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<AttachmentBytes>, BackendError>> {
        Box::pin(async move {
            let conversation = self.conversation(key)?;
            let state = lock(&conversation.state);
            Ok(state.attachments.get(attachment_id).cloned())
        })
    }

    fn submission<'a>(
        &'a self,
        key: &'a ConversationKey,
        submission_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<SubmissionStatus>, BackendError>> {
        Box::pin(async move {
            let conversation = self.conversation(key)?;
            let state = lock(&conversation.state);
            Ok(state.statuses.get(submission_id).cloned())
        })
    }
}

impl Conversation {
    /// Appends one batch and wakes readers; returns the new head.
    fn append(&self, state: &mut State, chunks: Vec<ChunkBody>) -> Offset {
        let offset = Offset(state.batches.len() as u64 + 1);
        state.batches.push(Arc::new(Batch::new(offset, chunks)));
        self.head.send_replace(offset.0);
        offset
    }

    /// Records a submission's settlement (and the advisory of a failed or aborted one).
    fn settle(&self, state: &mut State, submission_id: &str, outcome: &str, error: Option<Value>) {
        let chunks = settlement_chunks(submission_id, outcome, error.clone(), now_ms());
        self.append(state, chunks);
        state.statuses.insert(
            submission_id.to_owned(),
            SubmissionStatus {
                submission_id: submission_id.to_owned(),
                state: "settled",
                outcome: Some(outcome.to_owned()),
                error,
            },
        );
        tracing::info!(
            target: "flue_server::settlement",
            conversation = %self.key.conversation_id(),
            submission = submission_id,
            outcome,
            "settled"
        );
    }
}

/// The worker of one conversation: runs its queue to the end, one submission at a time.
async fn work(inner: Arc<Inner>, conversation: Arc<Conversation>) {
    loop {
        let next = {
            let mut state = lock(&conversation.state);
            match state.queue.pop_front() {
                Some(next) => {
                    let cancel = CancellationToken::new();
                    state.running = Some((next.submission_id.clone(), cancel.clone()));
                    if let Some(status) = state.statuses.get_mut(&next.submission_id) {
                        status.state = "running";
                    }
                    Some((next, cancel, state.session.clone()))
                }
                None => {
                    state.worker = false;
                    state.running = None;
                    None
                }
            }
        };
        let Some((next, cancel, session)) = next else {
            inner.idle.send_modify(|count| *count += 1);
            return;
        };
        let outcome = run_one(&inner, &conversation, &next, cancel, session).await;
        let mut state = lock(&conversation.state);
        state.running = None;
        let (outcome, error) = match outcome {
            Ok(()) => ("completed", None),
            Err(FlueError::Aborted) => ("aborted", Some(aborted_error())),
            Err(err) => {
                let info = err.to_info();
                (
                    "failed",
                    Some(json!({"name": "FlueError", "type": info.kind, "message": info.message})),
                )
            }
        };
        conversation.settle(&mut state, &next.submission_id, outcome, error);
    }
}

/// Runs one submission, streaming its events into the conversation.
async fn run_one(
    inner: &Inner,
    conversation: &Conversation,
    queued: &Queued,
    cancel: CancellationToken,
    session: Option<Session>,
) -> Result<(), FlueError> {
    let session = match session {
        Some(session) => session,
        None => {
            // The same instance id the durable runtime gives the conversation's sessions.
            let instance_id =
                flue_core::ConversationKey::new(&conversation.key.agent, &conversation.key.id)
                    .instance_id();
            let opening = inner.host.open(&conversation.key.agent, &instance_id);
            let opened = flue_core::or_cancel(opening, &cancel).await??;
            lock(&conversation.state).session = Some(opened.clone());
            opened
        }
    };
    let (text, images) = prompt_input(&queued.message);
    let options = PromptOptions {
        images,
        cancel: Some(cancel),
        ..PromptOptions::default()
    };
    let mut handle = session.prompt(&text, options);
    let mut projector = Projector::new(&queued.submission_id);
    if let Some(mut events) = handle.take_events() {
        let mut buffer = Vec::new();
        while let Some(event) = events.recv().await {
            projector.project(event, &mut buffer);
            while let Ok(event) = events.try_recv() {
                projector.project(event, &mut buffer);
            }
            if !buffer.is_empty() {
                let chunks = std::mem::take(&mut buffer);
                let mut state = lock(&conversation.state);
                conversation.append(&mut state, chunks);
            }
        }
    }
    let result = handle.await;
    let mut tail = Vec::new();
    projector.finish(&mut tail);
    if !tail.is_empty() {
        let mut state = lock(&conversation.state);
        conversation.append(&mut state, tail);
    }
    result.map(|_| ())
}

/// Turns one submission's events into chunks. Every model step of the submission folds into
/// one assistant message (its id minted at the first step).
struct Projector {
    submission_id: String,
    message_id: Option<String>,
    open: bool,
    turn_id: String,
    tools: HashMap<String, Instant>,
}

impl Projector {
    fn new(submission_id: &str) -> Self {
        Self {
            submission_id: submission_id.to_owned(),
            message_id: None,
            open: false,
            turn_id: format!("turn_{}", new_ulid()),
            tools: HashMap::new(),
        }
    }

    /// The message id, opening (or continuing) the response when it is not open.
    fn start(&mut self, out: &mut Vec<ChunkBody>) -> String {
        let message_id = self
            .message_id
            .get_or_insert_with(|| format!("msg_{}", new_ulid()))
            .clone();
        if !self.open {
            self.open = true;
            out.push(ChunkBody::MessageStarted {
                message_id: message_id.clone(),
                submission_id: Some(self.submission_id.clone()),
                turn_id: Some(self.turn_id.clone()),
                timestamp: Some(timestamp()),
            });
        }
        message_id
    }

    /// The message id without reopening a closed response.
    fn message(&mut self, out: &mut Vec<ChunkBody>) -> String {
        match &self.message_id {
            Some(id) => id.clone(),
            None => self.start(out),
        }
    }

    fn project(&mut self, event: Event, out: &mut Vec<ChunkBody>) {
        match event {
            Event::TextDelta { text } => self.delta("text", text, out),
            Event::ThinkingDelta { text } => self.delta("reasoning", text, out),
            Event::ToolStart {
                call_id,
                name,
                input,
            } => {
                let message_id = self.message(out);
                self.tools.insert(call_id.clone(), Instant::now());
                out.push(ChunkBody::ToolInput {
                    message_id,
                    tool_call_id: call_id,
                    tool_name: name,
                    input,
                    timestamp: Some(timestamp()),
                });
            }
            Event::ToolEnd {
                call_id,
                is_error,
                output,
                ..
            } => {
                let duration_ms = self.tools.remove(&call_id).map(|started| {
                    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
                });
                if is_error {
                    out.push(ChunkBody::ToolOutputError {
                        tool_call_id: call_id,
                        error_text: output,
                        duration_ms,
                        timestamp: Some(timestamp()),
                    });
                } else {
                    let output = serde_json::from_str(&output).unwrap_or(Value::String(output));
                    out.push(ChunkBody::ToolOutput {
                        tool_call_id: call_id,
                        output,
                        duration_ms,
                        timestamp: Some(timestamp()),
                    });
                }
            }
            Event::TurnEnd { .. } => {
                self.close(out);
                self.turn_id = format!("turn_{}", new_ulid());
            }
            Event::TaskStart {
                session,
                agent,
                depth,
                ..
            } => {
                let message_id = self.message(out);
                out.push(ChunkBody::DataPart {
                    message_id,
                    name: task_part_name(&session),
                    data: json!({"session": session, "agent": agent, "depth": depth, "state": "running"}),
                });
            }
            Event::TaskEnd {
                session,
                agent,
                depth,
                outcome,
                error,
                ..
            } => {
                let message_id = self.message(out);
                out.push(ChunkBody::DataPart {
                    message_id,
                    name: task_part_name(&session),
                    data: json!({
                        "session": session, "agent": agent, "depth": depth,
                        "state": outcome, "error": error,
                    }),
                });
            }
            Event::CompactionStart {
                reason,
                estimated_tokens,
            } => {
                let message_id = self.message(out);
                out.push(ChunkBody::DataPart {
                    message_id,
                    name: "compaction".to_owned(),
                    data: json!({"state": "running", "reason": reason, "estimatedTokens": estimated_tokens}),
                });
            }
            Event::CompactionEnd {
                messages_before,
                messages_after,
                tokens_before,
                tokens_after,
                error,
                ..
            } => {
                let message_id = self.message(out);
                out.push(ChunkBody::DataPart {
                    message_id,
                    name: "compaction".to_owned(),
                    data: json!({
                        "state": if error.is_some() { "failed" } else { "done" },
                        "messagesBefore": messages_before, "messagesAfter": messages_after,
                        "tokensBefore": tokens_before, "tokensAfter": tokens_after,
                        "error": error,
                    }),
                });
            }
            _ => {}
        }
    }

    fn delta(&mut self, kind: &str, text: String, out: &mut Vec<ChunkBody>) {
        let message_id = self.start(out);
        out.push(ChunkBody::MessageDelta {
            message_id,
            kind: kind.to_owned(),
            delta: text,
        });
    }

    fn close(&mut self, out: &mut Vec<ChunkBody>) {
        if self.open {
            self.open = false;
            if let Some(message_id) = &self.message_id {
                out.push(ChunkBody::MessageCompleted {
                    message_id: message_id.clone(),
                    timestamp: Some(timestamp()),
                });
            }
        }
    }

    fn finish(&mut self, out: &mut Vec<ChunkBody>) {
        self.close(out);
    }
}

fn task_part_name(session: &str) -> String {
    let suffix = session.rsplit(':').next().unwrap_or(session);
    format!("task-{suffix}")
}

/// What the model sees of a delivered message.
fn prompt_input(message: &Delivered) -> (String, Vec<Image>) {
    match message {
        Delivered::User { text, images } => (
            text.clone(),
            images
                .iter()
                .map(|image| Image {
                    data: image.data.clone(),
                    mime_type: image.mime_type.clone(),
                })
                .collect(),
        ),
        Delivered::Signal {
            signal_type,
            body,
            attributes,
            tag_name,
        } => {
            let tag = tag_name.as_deref().unwrap_or("signal");
            let mut open = format!("<{tag} type=\"{}\"", escape_attr(signal_type));
            for (name, value) in attributes {
                if name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
                {
                    open.push_str(&format!(" {name}=\"{}\"", escape_attr(value)));
                }
            }
            (format!("{open}>\n{body}\n</{tag}>"), Vec::new())
        }
    }
}

fn escape_attr(value: &str) -> String {
    value
        .replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
}

fn aborted_error() -> Value {
    json!({
        "name": "SubmissionAbortedError",
        "type": "submission_aborted",
        "message": "The submission was aborted.",
        "details": "The conversation's work was aborted (POST .../abort).",
    })
}

/// Locks a mutex; a poisoned lock (a panic elsewhere) still yields the data.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
