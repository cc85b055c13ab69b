//! The conversation driver: owns one conversation and runs its submissions one at a time.
//!
//! A driver takes ownership ([`ConversationStore::acquire`]; it gives up at once when a live
//! owner holds the conversation), builds the conversation's harness on a fenced view of the
//! store, then loops: claim the oldest unsettled submission, decide from its durable state
//! what to do (settle an abort, refuse an exhausted or expired one, start it with its message,
//! or resume it from the log), run the attempt under its deadline and the owner's lease, and
//! settle it. With nothing left it releases ownership (refused while work remains, which closes
//! the race with a concurrent dispatch).
//!
//! [`ConversationStore::acquire`]: crate::store::ConversationStore::acquire

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use flue_protocol::event::{ErrorInfo, Event, Outcome};
use flue_protocol::{DeliveredMessage, DurabilityConfig, MessageOptions, SubmissionInfo};
use tokio_util::sync::CancellationToken;

use crate::background::BackgroundHandle;
use crate::error::{FlueError, Result};
use crate::harness::Harness;
use crate::session::Session;
use crate::spans;
use crate::store::rules::ROOT_SESSION;
use crate::store::{Acquire, Claim, Fence};
use crate::submission::background::BackgroundLink;
use crate::submission::fenced::FencedSessions;
use crate::submission::runtime::{DriverSlot, RuntimeInner};
use crate::submission::wire::{ConversationKey, Settlement};
use crate::util::now_ms;

/// Why a running attempt was stopped from outside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum StopReason {
    None = 0,
    /// An abort of the conversation.
    Abort = 1,
    /// The submission's wall-clock budget ran out.
    Timeout = 2,
    /// Another owner took the conversation.
    LeaseLost = 3,
    /// The runtime is shutting down.
    Shutdown = 4,
}

/// Stops one running attempt.
pub(crate) struct AttemptControl {
    pub(crate) submission_id: String,
    cancel: CancellationToken,
    reason: Arc<AtomicU8>,
}

impl AttemptControl {
    /// Records why (the first reason wins) and cancels the attempt.
    pub(crate) fn stop(&self, reason: StopReason) {
        let _ = self.reason.compare_exchange(
            StopReason::None as u8,
            reason as u8,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        self.cancel.cancel();
    }
}

fn stop_reason(value: u8) -> StopReason {
    match value {
        1 => StopReason::Abort,
        2 => StopReason::Timeout,
        3 => StopReason::LeaseLost,
        4 => StopReason::Shutdown,
        _ => StopReason::None,
    }
}

/// What one processed claim led to.
enum Next {
    /// Claim the next submission.
    Continue,
    /// Stop driving without releasing (lost ownership, shutdown, store failure).
    Stop,
}

/// Drives `key` until it is idle and released, or ownership is lost. Returns the kick count
/// seen just before a successful release (`None` when it did not release), so the caller can
/// tell whether a dispatch raced with the release.
pub(crate) async fn drive(
    inner: &Arc<RuntimeInner>,
    key: &ConversationKey,
    slot: &DriverSlot,
) -> Option<u64> {
    // A background task waits here, its submission queued, while the running limit is reached.
    let Ok(_permit) = inner.background.acquire(key, &inner.stopping).await else {
        return None;
    };
    let fence = match inner.store.acquire(key, &inner.owner_id, inner.lease).await {
        Ok(Acquire::Owned(fence)) => fence,
        Ok(Acquire::Held { .. }) | Err(_) => return None,
    };
    let fenced = Arc::new(FencedSessions::new(
        Arc::clone(&inner.store),
        fence.clone(),
        ROOT_SESSION,
    ));
    let mut harness: Option<Result<Harness>> = None;
    loop {
        if inner.stopping.is_cancelled() {
            return None;
        }
        let seen = slot.kicks.load(Ordering::Acquire);
        if inner.own_work_only {
            match inner.has_own_unsettled(key).await {
                Ok(true) => {}
                Ok(false) => return hand_over(inner, &fence, seen).await,
                Err(_) => return None,
            }
        }
        let built = match &harness {
            Some(built) => built,
            None => harness.insert(build_harness(inner, key, &fenced).await),
        };
        let durability = match built {
            Ok(harness) => harness.agent().durability.clone(),
            Err(_) => flue_protocol::DurabilityConfig::default(),
        };
        let claim = match inner.store.claim_next(&fence, &durability).await {
            Ok(Some(claim)) => claim,
            Ok(None) => match inner.store.release(&fence).await {
                Ok(true) => return Some(seen),
                Ok(false) => continue,
                Err(_) => return None,
            },
            Err(_) => return None,
        };
        let harness = match built {
            Ok(harness) => Ok(harness.clone()),
            Err(err) => Err(err.to_info()),
        };
        match process(inner, &fence, &fenced, slot, harness, claim).await {
            Next::Continue => {}
            Next::Stop => return None,
        }
    }
}

/// Ends a one-shot runtime's turn on a conversation: released when nothing is left, else
/// its lease is dropped so that the process that admitted the remaining work takes over now.
async fn hand_over(inner: &RuntimeInner, fence: &Fence, seen: u64) -> Option<u64> {
    match inner.store.release(fence).await {
        Ok(true) => Some(seen),
        Ok(false) => {
            let _ = inner.store.renew(fence, Duration::ZERO).await;
            None
        }
        Err(_) => None,
    }
}

pub(super) async fn build_harness(
    inner: &Arc<RuntimeInner>,
    key: &ConversationKey,
    fenced: &Arc<FencedSessions>,
) -> Result<Harness> {
    let mut builder = inner
        .agents
        .harness_builder(&key.agent)
        .await?
        .with_instance_id(key.instance_id())
        .with_store(Arc::clone(fenced) as Arc<dyn crate::store::DynSessionStore>)
        .with_log_cache(Arc::clone(&inner.logs))
        .with_running_tasks(Arc::clone(&inner.running_tasks))
        .with_background(Arc::new(BackgroundLink::new(inner, key.clone())) as BackgroundHandle);
    if let Some(approval_key) = &inner.approval_key {
        builder = builder.with_approval_key(approval_key.clone());
    }
    builder.build().await
}

/// What a driver runs an attempt with.
struct Driving<'a> {
    inner: &'a Arc<RuntimeInner>,
    fence: &'a Fence,
    fenced: &'a Arc<FencedSessions>,
    slot: &'a DriverSlot,
}

/// Runs one claimed submission to its settlement (or leaves it to recovery): a claim that
/// must not run is settled at once; otherwise the conversation's session opens, the attempt
/// runs under its deadline and the owner's lease, and what it returned is settled.
async fn process(
    inner: &Arc<RuntimeInner>,
    fence: &Fence,
    fenced: &Arc<FencedSessions>,
    slot: &DriverSlot,
    harness: Result<Harness, ErrorInfo>,
    mut claim: Claim,
) -> Next {
    let input = AttemptInput::take(&mut claim);
    let submission = &claim.submission;
    let attempt = Attempt {
        submission_id: &submission.submission_id,
        attempts: submission.attempts,
        timeout_ms: claim.durability.timeout_ms,
    };
    let attempt_span = announce(inner, fence, submission);
    let first_started_at = submission.first_started_at.unwrap_or_else(now_ms);
    let deadline_ms = first_started_at.saturating_add(claim.durability.timeout_ms);
    if let Some(settlement) = refusal(submission, &claim.durability, deadline_ms, &attempt) {
        return settle(inner, fence, settlement).await;
    }
    let session = match open_session(harness, attempt.submission_id).await {
        Ok(session) => session,
        Err(error) => return settle(inner, fence, attempt.failed(error)).await,
    };
    let driving = Driving {
        inner,
        fence,
        fenced,
        slot,
    };
    let run = run_attempt(
        &driving,
        &session,
        submission,
        input,
        &attempt_span,
        deadline_ms,
    );
    let (result, reason) = run.await;
    conclude(inner, fence, &attempt, result, reason).await
}

/// What a submission's message brings to each of its attempts.
struct AttemptInput {
    delivered: DeliveredMessage,
    result_schema: Option<serde_json::Value>,
    seed_state: Option<serde_json::Value>,
    chosen: MessageOptions,
}

impl AttemptInput {
    fn take(claim: &mut Claim) -> Self {
        // The message moves into its `User` record (or is dropped, when a previous attempt
        // applied it): the claim does not hold a copy of it while the attempt runs.
        let mut delivered = std::mem::replace(
            &mut claim.submission.message,
            DeliveredMessage::user(String::new()),
        );
        // The result schema stays: every attempt (a resumed pause too) asks for the same
        // result.
        let result_schema = delivered.result_schema().cloned();
        let seed_state = delivered.take_initial_data();
        // So do the message's choices (model, thinking level, role, skill).
        let chosen = delivered.options().clone();
        Self {
            delivered,
            result_schema,
            seed_state,
            chosen,
        }
    }
}

/// The submission an attempt settles.
struct Attempt<'a> {
    submission_id: &'a str,
    attempts: u32,
    timeout_ms: u64,
}

impl Attempt<'_> {
    fn settlement(
        &self,
        outcome: Outcome,
        text: Option<String>,
        error: Option<ErrorInfo>,
    ) -> Settlement {
        Settlement {
            submission_id: self.submission_id.to_owned(),
            outcome,
            text,
            data: None,
            error,
            attempts: self.attempts,
            settled_at: now_ms(),
        }
    }

    fn failed(&self, error: ErrorInfo) -> Settlement {
        self.settlement(Outcome::Failed, None, Some(error))
    }

    fn aborted(&self) -> Settlement {
        let error = FlueError::SubmissionAborted {
            submission_id: self.submission_id.to_owned(),
        };
        self.settlement(Outcome::Aborted, None, Some(error.to_info()))
    }

    fn timed_out(&self) -> Settlement {
        let error = FlueError::SubmissionTimeout {
            submission_id: self.submission_id.to_owned(),
            timeout_ms: self.timeout_ms,
        };
        self.failed(error.to_info())
    }
}

/// Logs and announces the attempt; returns its span.
fn announce(inner: &RuntimeInner, fence: &Fence, submission: &SubmissionInfo) -> tracing::Span {
    let submission_id = submission.submission_id.as_str();
    let attempts = submission.attempts;
    tracing::debug!(
        target: "flue_core::submission",
        conversation = %fence.key.instance_id(),
        submission = submission_id,
        attempt = attempts,
        "attempt"
    );
    let attempt_span = spans::attempt(
        inner.submission_span(submission_id).as_ref(),
        submission.trace_parent.as_deref(),
        submission_id,
        attempts,
    );
    inner.emit(
        &fence.key,
        Some(submission_id),
        Event::SubmissionRunning {
            submission_id: submission_id.to_owned(),
            attempt: attempts,
        },
    );
    attempt_span
}

/// The settlement of a claim that must not run: an abort was requested, its attempts are
/// spent, or its deadline passed.
fn refusal(
    submission: &SubmissionInfo,
    durability: &DurabilityConfig,
    deadline_ms: u64,
    attempt: &Attempt<'_>,
) -> Option<Settlement> {
    if submission.abort_requested {
        return Some(attempt.aborted());
    }
    if attempt.attempts > durability.max_attempts {
        let error = FlueError::SubmissionRetryExhausted {
            submission_id: attempt.submission_id.to_owned(),
            attempts: attempt.attempts - 1,
            max_attempts: durability.max_attempts,
        };
        // This claim is not an attempt: it only found the budget spent.
        return Some(Settlement {
            attempts: attempt.attempts - 1,
            ..attempt.failed(error.to_info())
        });
    }
    (now_ms() >= deadline_ms).then(|| attempt.timed_out())
}

/// The conversation's root session, or why the attempt cannot run: an agent no longer in
/// the build interrupts the submission.
async fn open_session(
    harness: Result<Harness, ErrorInfo>,
    submission_id: &str,
) -> std::result::Result<Session, ErrorInfo> {
    let harness = match harness {
        Ok(harness) => harness,
        Err(error) if error.kind == "agent_not_found" => {
            let error = FlueError::SubmissionInterrupted {
                submission_id: submission_id.to_owned(),
                reason: error.message,
            };
            return Err(error.to_info());
        }
        Err(error) => return Err(error),
    };
    harness
        .session(ROOT_SESSION)
        .await
        .map_err(|err| err.to_info())
}

/// Runs the attempt under its deadline and the owner's lease, its events forwarded to the
/// runtime's subscribers. Returns its result and why it was stopped from outside, if it was.
async fn run_attempt(
    driving: &Driving<'_>,
    session: &Session,
    submission: &SubmissionInfo,
    input: AttemptInput,
    attempt_span: &tracing::Span,
    deadline_ms: u64,
) -> (Result<crate::operation::PromptResponse>, StopReason) {
    let Driving {
        inner,
        fence,
        fenced,
        slot,
    } = *driving;
    let submission_id = submission.submission_id.as_str();
    let message = (!submission.input_applied).then(|| input.delivered.into_user_message());
    fenced.begin_submission(submission_id, message.is_some());
    let cancel = CancellationToken::new();
    let reason = Arc::new(AtomicU8::new(StopReason::None as u8));
    let control = AttemptControl {
        submission_id: submission_id.to_owned(),
        cancel: cancel.clone(),
        reason: Arc::clone(&reason),
    };
    *slot.attempt() = Some(control);
    // The operation's span (and everything under it) nests under the attempt's.
    let mut handle = attempt_span.in_scope(|| {
        session.run_submission(
            message,
            input.result_schema,
            input.seed_state,
            cancel.clone(),
            submission.budget,
            input.chosen,
        )
    });
    let forwarder = handle.take_events().map(|mut events| {
        let inner = Arc::clone(inner);
        let key = fence.key.clone();
        let submission_id = submission_id.to_owned();
        tokio::spawn(async move {
            while let Some(event) = events.recv().await {
                inner.emit(&key, Some(&submission_id), event);
            }
        })
    });
    let result = supervise(inner, fence, slot, submission_id, deadline_ms, handle).await;
    if let Some(forwarder) = forwarder {
        let _ = forwarder.await;
    }
    *slot.attempt() = None;
    fenced.end_submission();
    (result, stop_reason(reason.load(Ordering::Acquire)))
}

/// Settles what an attempt returned, or leaves the submission to the next attempt (a lost
/// lease, a shutdown, a store failure).
async fn conclude(
    inner: &Arc<RuntimeInner>,
    fence: &Fence,
    attempt: &Attempt<'_>,
    result: Result<crate::operation::PromptResponse>,
    reason: StopReason,
) -> Next {
    match result {
        Ok(response) if response.requires_action() => {
            wait_for_actions(inner, fence, attempt.submission_id, &response).await
        }
        // Finished work is never discarded, whatever stopped the attempt meanwhile.
        Ok(response) => {
            let settlement = Settlement {
                data: response.data,
                ..attempt.settlement(Outcome::Completed, Some(response.text), None)
            };
            settle(inner, fence, settlement).await
        }
        Err(FlueError::LeaseLost { .. }) => Next::Stop,
        Err(err) => match reason {
            StopReason::LeaseLost | StopReason::Shutdown => Next::Stop,
            StopReason::Abort => settle(inner, fence, attempt.aborted()).await,
            StopReason::Timeout => settle(inner, fence, attempt.timed_out()).await,
            StopReason::None => match err {
                // A store failure is not the submission's fault: leave it to the next attempt.
                FlueError::Store { .. } | FlueError::RuntimeStopped { .. } => Next::Stop,
                err => settle(inner, fence, attempt.failed(err.to_info())).await,
            },
        },
    }
}

/// Paused on pending actions: the submission waits, owned by nobody, until any process
/// resolves one (which makes it `queued` again).
async fn wait_for_actions(
    inner: &RuntimeInner,
    fence: &Fence,
    submission_id: &str,
    response: &crate::operation::PromptResponse,
) -> Next {
    let actions: Vec<String> = response
        .pending_actions
        .iter()
        .map(|action| action.action_id.clone())
        .collect();
    match inner.store.wait(fence, submission_id, &actions).await {
        Ok(true) => {
            inner.emit(
                &fence.key,
                Some(submission_id),
                Event::SubmissionWaiting {
                    submission_id: submission_id.to_owned(),
                    actions,
                },
            );
            Next::Continue
        }
        Ok(false) => Next::Continue,
        Err(_) => Next::Stop,
    }
}

/// Awaits the attempt while enforcing its deadline, watching for abort requests of other
/// processes, renewing the lease and honouring shutdown.
async fn supervise(
    inner: &RuntimeInner,
    fence: &Fence,
    slot: &DriverSlot,
    submission_id: &str,
    deadline_ms: u64,
    handle: crate::call::CallHandle<crate::operation::PromptResponse>,
) -> Result<crate::operation::PromptResponse> {
    let stop = |reason| {
        if let Some(attempt) = slot.attempt().as_ref() {
            attempt.stop(reason);
        }
    };
    let until_deadline = Duration::from_millis(deadline_ms.saturating_sub(now_ms()));
    let deadline = tokio::time::sleep(until_deadline);
    tokio::pin!(deadline);
    let mut polls = tokio::time::interval_at(
        tokio::time::Instant::now() + inner.poll_interval,
        inner.poll_interval,
    );
    polls.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let renew_every = (inner.lease / 3).max(Duration::from_millis(10));
    let mut renewals =
        tokio::time::interval_at(tokio::time::Instant::now() + renew_every, renew_every);
    renewals.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut handle = std::future::IntoFuture::into_future(handle);
    // Each one-shot branch is disabled once it fired, so the loop never spins on it.
    let mut deadline_passed = false;
    let mut stopping_seen = false;
    loop {
        tokio::select! {
            result = &mut handle => return result,
            () = &mut deadline, if !deadline_passed => {
                deadline_passed = true;
                stop(StopReason::Timeout);
            }
            () = inner.stopping.cancelled(), if !stopping_seen => {
                stopping_seen = true;
                stop(StopReason::Shutdown);
            }
            _ = polls.tick() => {
                if let Ok(Some(status)) = inner.store.submission_status(submission_id).await
                    && status.abort_requested
                {
                    stop(StopReason::Abort);
                }
            }
            _ = renewals.tick() => {
                if let Err(FlueError::LeaseLost { .. }) = inner.store.renew(fence, inner.lease).await {
                    stop(StopReason::LeaseLost);
                }
            }
        }
    }
}

/// Settles and emits the event once the settlement is durable. A background child's
/// result is admitted to its parent first: a crash in between delivers it again, once.
async fn settle(inner: &Arc<RuntimeInner>, fence: &Fence, settlement: Settlement) -> Next {
    if let Err(err) = inner.deliver_background(&fence.key, &settlement).await {
        tracing::warn!(
            target: "flue_core::submission",
            submission = %settlement.submission_id,
            error = %err,
            "cannot deliver the background task's result; the next attempt delivers it"
        );
        return Next::Stop;
    }
    match inner.store.settle(fence, &settlement).await {
        Ok(true) => {
            inner.emit(
                &fence.key,
                Some(&settlement.submission_id),
                Event::SubmissionSettled {
                    submission_id: settlement.submission_id.clone(),
                    outcome: settlement.outcome,
                    error: settlement.error.clone(),
                },
            );
            Next::Continue
        }
        Ok(false) => Next::Continue,
        Err(err) => {
            tracing::warn!(
                target: "flue_core::submission",
                submission = %settlement.submission_id,
                error = %err,
                "cannot record the settlement; the next owner settles it"
            );
            Next::Stop
        }
    }
}
