//! The running tasks of each conversation as the console's live route shows them, kept so that
//! a page opened while tasks run learns them at once instead of waiting for their end.
//!
//! Live events are not stored or replayed, and a task announces itself once (`task_start`). So
//! the runtime's one follower (`turns.rs`) hands every event here, and for each running task
//! this keeps the events a reader needs to draw it as it is now: its `task_start`, its turn
//! ends (its tokens and cost so far) and its latest activity (its current tool, or thinking or
//! writing). A task's end drops it; a settled submission drops its conversation's tasks.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use flue_core::Event;
use flue_core::submission::RuntimeEvent;

/// The running tasks of every conversation of one runtime.
#[derive(Default)]
pub(crate) struct LiveTasks {
    /// By conversation (`<agent>/<id>`), the running tasks in the order they started.
    conversations: Mutex<HashMap<String, Vec<RunningTask>>>,
}

/// What a reader needs to draw one running task.
struct RunningTask {
    session: String,
    start: RuntimeEvent,
    turn_ends: Vec<RuntimeEvent>,
    latest: Option<RuntimeEvent>,
}

impl LiveTasks {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Vec<RunningTask>>> {
        self.conversations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes one event of the runtime into account.
    pub(crate) fn apply(&self, event: &RuntimeEvent) {
        let conversation = event.conversation.to_string();
        match &event.event {
            Event::TaskStart { session, .. } => {
                self.lock()
                    .entry(conversation)
                    .or_default()
                    .push(RunningTask {
                        session: session.clone(),
                        start: event.clone(),
                        turn_ends: Vec::new(),
                        latest: None,
                    });
            }
            Event::TaskEnd { session, .. } => {
                let mut conversations = self.lock();
                if let Some(tasks) = conversations.get_mut(&conversation) {
                    tasks.retain(|task| &task.session != session);
                    if tasks.is_empty() {
                        conversations.remove(&conversation);
                    }
                }
            }
            Event::TaskActivity {
                session,
                event: inner,
                ..
            } => {
                let mut conversations = self.lock();
                let Some(task) = conversations
                    .get_mut(&conversation)
                    .and_then(|tasks| tasks.iter_mut().find(|task| &task.session == session))
                else {
                    return;
                };
                match inner.as_ref() {
                    Event::TurnEnd { .. } => task.turn_ends.push(event.clone()),
                    Event::ToolStart { .. }
                    | Event::ToolEnd { .. }
                    | Event::TextDelta { .. }
                    | Event::ThinkingDelta { .. } => task.latest = Some(event.clone()),
                    _ => {}
                }
            }
            Event::SubmissionSettled { .. } => {
                self.lock().remove(&conversation);
            }
            _ => {}
        }
    }

    /// The events that draw `conversation`'s running tasks as they are now, in order.
    pub(crate) fn replay(&self, conversation: &str) -> Vec<RuntimeEvent> {
        let conversations = self.lock();
        let Some(tasks) = conversations.get(conversation) else {
            return Vec::new();
        };
        tasks
            .iter()
            .flat_map(|task| {
                std::iter::once(task.start.clone())
                    .chain(task.turn_ends.iter().cloned())
                    .chain(task.latest.clone())
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
