//! Live model output of the durable backend: the text and reasoning deltas of the model turn in
//! progress, per conversation, held in memory until the turn's record is durable.
//!
//! The durable stream records one batch per model turn, so without this an SSE reader would see
//! a reply appear a turn at a time. [`LiveTurns`] follows the runtime's in-process events: a
//! turn opens at its first delta (with the `message-started` of the submission's reply) and
//! closes when the runtime says the turn was stored (`turn_end`), a tool starts, or the
//! submission settles. Readers at the durable head send the open turn's chunks as they arrive
//! (see `live.rs`); nothing waits for them.
//!
//! Consistency with offsets: a live chunk never advances an offset. Once live chunks of a
//! submission reached any reader, that submission is *streamed*, and the durable batches of its
//! turns are sent in updates as a `conversation-reset` (the snapshot through that batch)
//! instead of their deltas, so a reader that saw the live text, or resumes from an offset
//! after seeing it, replaces it rather than appending it twice. The streamed set is bounded
//! (oldest forgotten first) and lives as long as the process.
//!
//! The follower is the server's one consumer of the runtime's events: besides the protocol's
//! live turns it hands the events the dev console shows live (deltas, turn ends, tasks and
//! their progress, compaction, provider retries; see `console.rs`) to the console's readers, so both SSE
//! streams are fed from here.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use flue_core::{Event, submission::RuntimeEvent};
use tokio::sync::{broadcast, watch};

use crate::backend::{LiveChunks, LiveCursor};
use crate::chunks::timestamp;
use crate::live_tasks::LiveTasks;
use crate::wire::ChunkBody;

/// How many streamed submissions are remembered.
const STREAMED_CAPACITY: usize = 65_536;

/// How many shown events a console reader may fall behind before it misses some (the
/// runtime's own broadcast holds as many).
const SHOWN_CAPACITY: usize = 4096;

/// Live turns of every conversation of one runtime, and the events the console shows live.
pub(crate) struct LiveTurns {
    state: Mutex<State>,
    shown: broadcast::Sender<Shown>,
    /// The running tasks, for a console reader that connects while they run.
    tasks: LiveTasks,
}

impl Default for LiveTurns {
    fn default() -> Self {
        Self {
            state: Mutex::default(),
            shown: broadcast::channel(SHOWN_CAPACITY).0,
            tasks: LiveTasks::default(),
        }
    }
}

/// What a console reader receives.
#[derive(Clone, Debug)]
pub(crate) enum Shown {
    /// One event the console shows live.
    Event(Arc<RuntimeEvent>),
    /// The follower fell behind the runtime: events were missed.
    Lagged,
}

#[derive(Default)]
struct State {
    /// The open turn per conversation (`<agent>/<id>`).
    open: HashMap<String, Turn>,
    /// A wake-up per conversation with live readers: its value grows with every change.
    watchers: HashMap<String, watch::Sender<u64>>,
    /// When `watchers` reaches this size, entries without receivers are dropped (doubling, so
    /// the sweep costs O(1) per subscription amortized).
    prune_at: usize,
    /// The last turn number handed out.
    last_turn: u64,
    /// Submissions whose live chunks reached a reader, oldest first.
    streamed: HashSet<String>,
    streamed_order: VecDeque<String>,
}

struct Turn {
    number: u64,
    submission_id: String,
    chunks: Vec<ChunkBody>,
}

impl LiveTurns {
    /// Follows `events` until the runtime stops or `turns` is dropped.
    pub(crate) async fn follow(
        turns: Weak<LiveTurns>,
        mut events: broadcast::Receiver<RuntimeEvent>,
    ) {
        loop {
            let event = events.recv().await;
            let Some(turns) = turns.upgrade() else {
                return;
            };
            match event {
                Ok(event) => {
                    turns.tasks.apply(&event);
                    if turns.shown.receiver_count() > 0 && console_shows(&event.event) {
                        let _ = turns.shown.send(Shown::Event(Arc::new(event.clone())));
                    }
                    turns.apply(event);
                }
                // Missed events: the open turns are incomplete, so drop them; their durable
                // records follow.
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    turns.clear();
                    let _ = turns.shown.send(Shown::Lagged);
                }
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    }

    fn apply(&self, event: RuntimeEvent) {
        let conversation = event.conversation.to_string();
        let mut state = self.lock();
        match event.event {
            Event::TextDelta { text } | Event::ThinkingDelta { text } if text.is_empty() => {}
            Event::TextDelta { text } => {
                state.delta(&conversation, event.submission_id, "text", text);
            }
            Event::ThinkingDelta { text } => {
                state.delta(&conversation, event.submission_id, "reasoning", text);
            }
            Event::TurnEnd { .. }
            | Event::ToolStart { .. }
            | Event::SubmissionSettled { .. }
            | Event::SubmissionRunning { .. }
                if state.open.remove(&conversation).is_some() =>
            {
                state.wake(&conversation);
            }
            _ => {}
        }
    }

    fn clear(&self) {
        let mut state = self.lock();
        let open: Vec<String> = state.open.drain().map(|(key, _)| key).collect();
        for conversation in open {
            state.wake(&conversation);
        }
    }

    /// The open turn's chunks after `cursor` (all of them when the turn is not the cursor's).
    pub(crate) fn read(&self, conversation: &str, cursor: LiveCursor) -> Option<LiveChunks> {
        let state = self.lock();
        let turn = state.open.get(conversation)?;
        let first_index = if turn.number == cursor.turn {
            cursor.index
        } else {
            0
        };
        Some(LiveChunks {
            turn: turn.number,
            submission_id: turn.submission_id.clone(),
            first_index,
            chunks: turn.chunks.get(first_index..).unwrap_or_default().to_vec(),
        })
    }

    /// The events that draw the conversation's running tasks as they are now (for a console
    /// reader that connects after they started).
    pub(crate) fn task_replay(&self, conversation: &str) -> Vec<RuntimeEvent> {
        self.tasks.replay(conversation)
    }

    /// The events the console shows live, from now on.
    pub(crate) fn subscribe_shown(&self) -> broadcast::Receiver<Shown> {
        self.shown.subscribe()
    }

    /// A receiver that changes with every live change of `conversation`.
    pub(crate) fn watch(&self, conversation: &str) -> watch::Receiver<u64> {
        let mut state = self.lock();
        if state.watchers.len() >= state.prune_at {
            state
                .watchers
                .retain(|_, sender| sender.receiver_count() > 0);
            state.prune_at = (state.watchers.len() * 2).max(1024);
        }
        state
            .watchers
            .entry(conversation.to_owned())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    /// Remembers that live chunks of `submission_id` reached a reader.
    pub(crate) fn mark_streamed(&self, submission_id: &str) {
        let mut state = self.lock();
        if state.streamed.insert(submission_id.to_owned()) {
            state.streamed_order.push_back(submission_id.to_owned());
            while state.streamed_order.len() > STREAMED_CAPACITY {
                if let Some(oldest) = state.streamed_order.pop_front() {
                    state.streamed.remove(&oldest);
                }
            }
        }
    }

    /// Whether live chunks of `submission_id` reached a reader.
    pub(crate) fn streamed(&self, submission_id: &str) -> bool {
        self.lock().streamed.contains(submission_id)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl State {
    fn delta(
        &mut self,
        conversation: &str,
        submission_id: Option<String>,
        kind: &str,
        text: String,
    ) {
        let Some(submission_id) = submission_id else {
            return;
        };
        let message_id = format!("reply_{submission_id}");
        let reopen = self
            .open
            .get(conversation)
            .is_none_or(|turn| turn.submission_id != submission_id);
        if reopen {
            self.last_turn += 1;
            let started = ChunkBody::MessageStarted {
                message_id: message_id.clone(),
                submission_id: Some(submission_id.clone()),
                turn_id: None,
                timestamp: Some(timestamp()),
            };
            self.open.insert(
                conversation.to_owned(),
                Turn {
                    number: self.last_turn,
                    submission_id,
                    chunks: vec![started],
                },
            );
        }
        if let Some(turn) = self.open.get_mut(conversation) {
            turn.chunks.push(ChunkBody::MessageDelta {
                message_id,
                kind: kind.to_owned(),
                delta: text,
            });
        }
        self.wake(conversation);
    }

    fn wake(&mut self, conversation: &str) {
        if let Some(sender) = self.watchers.get(conversation) {
            if sender.receiver_count() == 0 {
                self.watchers.remove(conversation);
            } else {
                sender.send_modify(|version| *version += 1);
            }
        }
    }
}

/// The events the console shows live; the rest reach it through the durable stream.
fn console_shows(event: &Event) -> bool {
    match event {
        Event::TextDelta { .. }
        | Event::ThinkingDelta { .. }
        | Event::TurnEnd { .. }
        | Event::TaskStart { .. }
        | Event::TaskEnd { .. }
        | Event::CompactionStart { .. }
        | Event::CompactionEnd { .. }
        | Event::ProviderRetry { .. } => true,
        // A running task's progress under its call: its retries, tools, turns (tokens and
        // cost) and whether it thinks or writes; its records come from the stored transcript.
        Event::TaskActivity { event, .. } => matches!(
            **event,
            Event::ProviderRetry { .. }
                | Event::ToolStart { .. }
                | Event::ToolEnd { .. }
                | Event::TurnEnd { .. }
                | Event::TextDelta { .. }
                | Event::ThinkingDelta { .. }
        ),
        _ => false,
    }
}

/// Keeps `turns` following the runtime's events on the current tokio runtime, if any.
pub(crate) fn spawn_follower(turns: &Arc<LiveTurns>, events: broadcast::Receiver<RuntimeEvent>) {
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        handle.spawn(LiveTurns::follow(Arc::downgrade(turns), events));
    }
}
