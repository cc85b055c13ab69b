//! The tasks running now in this process, by instance and task session, so that a user can
//! abort one child (at any depth) without aborting the operation that delegated to it.
//!
//! Every task run registers its own cancellation token (a child of its parent's) for as long
//! as it runs. Aborting it cancels that token only and marks the run as aborted by the user:
//! the `task` call that waits for it then answers the parent with a `task_aborted` tool result
//! and the parent's loop goes on. The registry is per process: a task runs where its
//! conversation's owner runs, so only that process can abort it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio_util::sync::CancellationToken;

/// The running tasks of one runtime (or of one harness used alone).
#[derive(Debug, Default)]
pub(crate) struct RunningTasks {
    /// By (instance id, task session).
    tasks: Mutex<HashMap<(String, String), Arc<RunningTask>>>,
}

/// One task run's control.
#[derive(Debug)]
struct RunningTask {
    cancel: CancellationToken,
    by_user: AtomicBool,
}

/// A task run's place in the registry, removed when dropped (the run ended).
#[derive(Debug)]
pub(crate) struct Registration {
    tasks: Arc<RunningTasks>,
    id: (String, String),
    task: Arc<RunningTask>,
}

impl RunningTasks {
    fn lock(&self) -> MutexGuard<'_, HashMap<(String, String), Arc<RunningTask>>> {
        self.tasks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers the run of `session` with its own token `cancel` until the returned guard
    /// drops.
    pub(crate) fn register(
        self: &Arc<Self>,
        instance: &str,
        session: &str,
        cancel: CancellationToken,
    ) -> Registration {
        let id = (instance.to_owned(), session.to_owned());
        let task = Arc::new(RunningTask {
            cancel,
            by_user: AtomicBool::new(false),
        });
        self.lock().insert(id.clone(), Arc::clone(&task));
        Registration {
            tasks: Arc::clone(self),
            id,
            task,
        }
    }

    /// Aborts the running task `session` of `instance`; whether it was running here.
    pub(crate) fn abort(&self, instance: &str, session: &str) -> bool {
        let task = self
            .lock()
            .get(&(instance.to_owned(), session.to_owned()))
            .cloned();
        let Some(task) = task else {
            return false;
        };
        task.by_user.store(true, Ordering::SeqCst);
        task.cancel.cancel();
        true
    }

    /// The task sessions of `instance` running now, sorted.
    pub(crate) fn list(&self, instance: &str) -> Vec<String> {
        let mut sessions: Vec<String> = self
            .lock()
            .keys()
            .filter(|(owner, _)| owner == instance)
            .map(|(_, session)| session.clone())
            .collect();
        sessions.sort();
        sessions
    }
}

impl Registration {
    /// Whether a user aborted this run (rather than its parent's abort reaching it).
    pub(crate) fn aborted_by_user(&self) -> bool {
        self.task.by_user.load(Ordering::SeqCst)
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut tasks = self.tasks.lock();
        // A run of the same session registered since (a resumed task) keeps its place.
        if tasks
            .get(&self.id)
            .is_some_and(|task| Arc::ptr_eq(task, &self.task))
        {
            tasks.remove(&self.id);
        }
    }
}
