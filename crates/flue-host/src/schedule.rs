//! The firing loop of the workspace's schedules in a serving app (`flue serve`, `flue dev`):
//! each tick is admitted as a durable submission through the path every HTTP send takes
//! ([`DurableRuntime::admit`]), with the idempotency key [`Schedule::idempotency_key`] makes
//! of the schedule and the tick.
//!
//! Exactly once: the store keeps a conversation's idempotency keys for its lifetime and
//! admits one submission per key (the same key with the same message returns the first
//! receipt), so a tick fired by two nodes racing, or again after a restart, is admitted once.
//! This loop only decides which ticks to offer: every tick that falls due while it runs (late
//! ones included, in order), and at start, by the schedule's [`CatchUp`] policy, the most
//! recent tick at or before the start (`once`) or none (`skip`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use flue_build::{CatchUp, Schedule};
use flue_core::{ConversationKey, DispatchOptions, FlueError, spans::SPAN_TARGET};
use flue_server::DurableRuntime;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tracing::Instrument as _;

use crate::Host;

/// The most ticks offered at once after the loop fell behind (a suspended process); past it
/// only the latest is, as at a start with `catch_up = "once"`.
const MAX_BURST: usize = 60;
/// The longest sleep, so that a wall clock set forward is noticed.
const MAX_SLEEP: Duration = Duration::from_secs(30);
/// The wait before offering a tick again after the store failed.
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// How long stopping waits for an admission in flight.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// The running loop; stopped with [`Scheduler::stop`] (dropping it stops it too).
pub(crate) struct Scheduler {
    stop: watch::Sender<bool>,
    reload: Arc<Notify>,
    task: Option<JoinHandle<()>>,
}

impl Scheduler {
    /// Starts offering the ticks of the schedules of `host`'s agents (read again after each
    /// [`Scheduler::reloaded`]) to `server`.
    pub(crate) fn start(server: DurableRuntime, host: Arc<Host>) -> Self {
        let (stop, stopped) = watch::channel(false);
        let reload = Arc::new(Notify::new());
        let task = tokio::spawn(run(server, host, Arc::clone(&reload), stopped));
        Self {
            stop,
            reload,
            task: Some(task),
        }
    }

    /// The agent set changed: its schedules are read again now.
    pub(crate) fn reloaded(&self) {
        self.reload.notify_one();
    }

    /// Stops the loop, letting an admission in flight finish (up to a few seconds).
    pub(crate) async fn stop(mut self) {
        let _ = self.stop.send(true);
        if let Some(mut task) = self.task.take()
            && tokio::time::timeout(STOP_GRACE, &mut task).await.is_err()
        {
            task.abort();
        }
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// What became of one offered tick.
enum Fired {
    /// Admitted, deduplicated, or refused for good: the next tick is next.
    Done,
    /// The store failed: offer it again later.
    Retry,
    /// The runtime is shutting down.
    Stopped,
}

async fn run(
    server: DurableRuntime,
    host: Arc<Host>,
    reload: Arc<Notify>,
    mut stopped: watch::Receiver<bool>,
) {
    // The last tick handled per schedule, keyed by everything that makes it what it is: a
    // schedule changed by a reload starts over with its catch-up policy.
    let mut cursors: HashMap<String, u64> = HashMap::new();
    loop {
        if *stopped.borrow() {
            return;
        }
        let agents = host.agents();
        // A schedule runs an agent with no request: only in a workspace the user trusts
        // (read anew each round, so trust given while the server runs takes effect).
        let schedules: Vec<Schedule> = if agents.is_trusted() {
            agents
                .workspace()
                .schedules()
                .into_iter()
                .cloned()
                .collect()
        } else {
            Vec::new()
        };
        drop(agents);
        let now = now_ms();
        let mut wake: Option<u64> = None;
        let mut current = Vec::with_capacity(schedules.len());
        for schedule in &schedules {
            let identity = format!("{schedule:?}");
            let mut cursor = *cursors
                .entry(identity.clone())
                .or_insert_with(|| initial_cursor(schedule, now));
            for tick in due_ticks(schedule, cursor, now) {
                if *stopped.borrow() {
                    return;
                }
                match fire(&server, schedule, tick).await {
                    Fired::Done => cursor = tick,
                    Fired::Retry => {
                        let retry = now_ms().saturating_add(millis(RETRY_AFTER));
                        wake = Some(wake.map_or(retry, |wake| wake.min(retry)));
                        break;
                    }
                    Fired::Stopped => return,
                }
            }
            cursors.insert(identity.clone(), cursor);
            current.push(identity);
            if let Some(next) = schedule.next_after(cursor) {
                wake = Some(wake.map_or(next, |wake| wake.min(next)));
            }
        }
        cursors.retain(|identity, _| current.contains(identity));
        let sleep = wake.map_or(MAX_SLEEP, |wake| {
            Duration::from_millis(wake.saturating_sub(now_ms())).min(MAX_SLEEP)
        });
        tokio::select! {
            () = tokio::time::sleep(sleep) => {}
            () = reload.notified() => {}
            _ = stopped.changed() => return,
        }
    }
}

/// The cursor of a schedule first seen at `now`: with `once`, just before the latest tick at
/// or before `now` (so that tick is offered); with `skip`, `now`.
fn initial_cursor(schedule: &Schedule, now: u64) -> u64 {
    match schedule.catch_up {
        CatchUp::Skip => now,
        _ => schedule
            .latest_at_or_before(now)
            .map_or(now, |latest| latest.saturating_sub(1)),
    }
}

/// The ticks after `cursor` up to `now`, in order; past [`MAX_BURST`], only the latest.
fn due_ticks(schedule: &Schedule, cursor: u64, now: u64) -> Vec<u64> {
    let mut ticks = Vec::new();
    let mut at = cursor;
    while let Some(tick) = schedule.next_after(at) {
        if tick > now {
            break;
        }
        if ticks.len() == MAX_BURST {
            return schedule.latest_at_or_before(now).into_iter().collect();
        }
        ticks.push(tick);
        at = tick;
    }
    ticks
}

/// Admits one tick, inside a `flue.schedule` span (the submission's span nests under it).
async fn fire(server: &DurableRuntime, schedule: &Schedule, tick: u64) -> Fired {
    let tick_text = Schedule::tick_text(tick);
    let key = ConversationKey::new(&schedule.agent, schedule.conversation_for(tick));
    let idempotency_key = schedule.idempotency_key(tick);
    let span = tracing::info_span!(
        target: SPAN_TARGET,
        "flue.schedule",
        otel.name = format!("flue.schedule {}", schedule.name),
        otel.kind = "internal",
        gen_ai.agent.name = %schedule.agent,
        gen_ai.conversation.id = %key.instance_id(),
        flue.schedule.name = %schedule.name,
        flue.schedule.tick = %tick_text,
    );
    let options = DispatchOptions::default().with_idempotency_key(idempotency_key);
    let admitted = server
        .admit(&key, schedule.message_for(tick), options)
        .instrument(span)
        .await;
    match admitted {
        Ok(receipt) => {
            tracing::info!(
                target: "flue::schedule",
                schedule = %schedule.name,
                tick = %tick_text,
                conversation = %key.instance_id(),
                submission = %receipt.submission_id,
                deduplicated = receipt.deduplicated,
                "tick admitted"
            );
            Fired::Done
        }
        Err(FlueError::RuntimeStopped { .. }) => Fired::Stopped,
        Err(err @ FlueError::Store { .. }) => {
            tracing::warn!(
                target: "flue::schedule",
                schedule = %schedule.name,
                tick = %tick_text,
                error = %err,
                "cannot admit the tick; retrying"
            );
            Fired::Retry
        }
        Err(err) => {
            // Refused for good: another message under the same key (the schedule was edited
            // after the tick was fired), an agent no longer served, an invalid id.
            tracing::warn!(
                target: "flue::schedule",
                schedule = %schedule.name,
                tick = %tick_text,
                error = %err,
                kind = err.kind(),
                "tick not admitted"
            );
            Fired::Done
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, millis)
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
