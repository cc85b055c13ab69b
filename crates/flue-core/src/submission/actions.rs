//! Pending actions of durable conversations: list them, resolve one, interrupt them all.
//!
//! A submission whose attempt paused on tool calls is `waiting`: the pending actions are
//! records in the conversation's root session log and nobody owns the conversation. Any
//! process resolves one: it takes ownership (waiting while a live owner holds it), checks the
//! decision against the stored log, and appends the [`Record::ActionResolved`] under its fence
//! in the same transaction that makes the submission `queued` again. Its own driver then
//! resumes the submission from the log alone. The version-checked, fenced append is what makes
//! the first decision win: a second one finds the decision in the log and gets
//! [`FlueError::ActionAlreadyResolved`].

use flue_protocol::event::{Event, Outcome};
use flue_protocol::record::{
    ActionDecision, ActionInfo, ActionKind, ActionResolution, Record, StoredRecord,
};
use std::time::Duration;

use crate::error::{FlueError, Result};
use crate::standing::RuleInfo;
use crate::steps;
use crate::store::rules::ROOT_SESSION;
use crate::store::{Acquire, Fence, FencedAppend, SessionKey, SessionLog, SubmissionStatus};
use crate::submission::runtime::AgentRuntime;
use crate::submission::wire::{
    ConversationKey, DeliveredMessage, DispatchOptions, DispatchReceipt, Offset, Settlement,
    SubmissionInfo, SubmissionState,
};
use crate::task;
use crate::util::{now_ms, stamp_now};

/// How long a decision waits for a live owner to let the conversation go (it is running the
/// consequence of an earlier decision) before it gives up with `session_busy`.
const OWNER_WAIT: Duration = Duration::from_secs(60);

/// What a decision on a pending action did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolveReceipt {
    /// The waiting submission it resumed, if one was waiting.
    pub submission_id: Option<String>,
    /// The conversation's stream head after the decision was stored.
    pub offset: Offset,
}

/// A decision to store: where, at which version, and the records stored with it (the
/// standing rule an "always" grants).
struct Decided<'a> {
    session: &'a SessionKey,
    expected_version: u64,
    resolution: ActionResolution,
    extra: Vec<Record>,
}

/// What an interrupt did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterruptReceipt {
    /// The actions it answered as interrupted.
    pub interrupted: Vec<String>,
    /// The waiting submission it settled `aborted`, if one was waiting.
    pub settled: Option<String>,
    /// The receipt of the new message, when one was given.
    pub dispatched: Option<DispatchReceipt>,
}

impl AgentRuntime {
    /// Every action of the conversation's root session, pending and decided, in order, read
    /// from the store. [`FlueError::AgentInstanceNotFound`] for an unknown conversation.
    pub async fn actions(&self, key: &ConversationKey) -> Result<Vec<ActionInfo>> {
        let log = self.root_log(key).await?;
        let list = steps::actions(&records_of(log));
        task::with_task_actions(self.inner.store.as_ref(), &key.instance_id(), list).await
    }

    /// The conversation's state as stored: its latest [`StateChange`](flue_protocol::record::StateChange)
    /// (`None` while nothing wrote it). [`FlueError::AgentInstanceNotFound`] for an unknown
    /// conversation.
    pub async fn state(
        &self,
        key: &ConversationKey,
    ) -> Result<Option<flue_protocol::record::StateChange>> {
        let log = self.root_log(key).await?;
        Ok(crate::session::latest_state(&records_of(log)))
    }

    /// Decides one pending action of the conversation and resumes its waiting submission, in
    /// whichever process calls it: [`ActionDecision::Allow`] (the confirmed call runs once),
    /// [`ActionDecision::Deny`] (the model sees the denial), [`ActionDecision::Result`] (a
    /// custom tool's output). Returns once the decision is durable; this runtime then runs the
    /// submission (wait for it with [`AgentRuntime::wait_idle`]).
    ///
    /// Errors (nothing stored): [`FlueError::AgentInstanceNotFound`],
    /// [`FlueError::ActionNotFound`], [`FlueError::ActionAlreadyResolved`] (the first decision
    /// wins, in any process), [`FlueError::InvalidDecision`], [`FlueError::ConversationBusy`]
    /// when a live owner keeps the conversation longer than a minute, and
    /// [`FlueError::RuntimeStopped`] after shutdown.
    pub async fn resolve(
        &self,
        key: &ConversationKey,
        action_id: &str,
        decision: ActionDecision,
    ) -> Result<ResolveReceipt> {
        let always = decision == ActionDecision::AllowAlways;
        if always && self.inner.approval_key.is_none() {
            return Err(FlueError::InvalidDecision {
                action_id: action_id.to_owned(),
                message: "this server keeps no standing approvals (no approval key is set):                           answer allow instead"
                    .to_owned(),
            });
        }
        // "Always" is stored as an allow plus the rule it grants.
        let decision = if always {
            ActionDecision::Allow
        } else {
            decision
        };
        let conversation = key.to_string();
        // An action of a subagent (a task session below a waiting `task` call) is decided in
        // that session's log, under the same ownership.
        let root_records = records_of(self.root_log(key).await?);
        let in_root = steps::actions(&root_records)
            .iter()
            .any(|state| state.action.action_id == action_id);
        let live = steps::actions(&root_records).iter().any(|state| {
            state.action.action_id == action_id && state.action.kind == ActionKind::Elicitation
        });
        if live {
            return self.resolve_live(key, action_id, decision).await;
        }
        let nested = match in_root {
            true => None,
            false => {
                task::locate_action(
                    self.inner.store.as_ref(),
                    &key.instance_id(),
                    &root_records,
                    action_id,
                )
                .await?
            }
        };
        if let Some(session) = nested {
            return self
                .resolve_nested(key, &session, action_id, decision)
                .await;
        }
        let check = |log: &SessionLog| {
            steps::check_decision(
                &records_of(log.clone()),
                &conversation,
                action_id,
                &decision,
            )
            .map(|_| ())
        };
        let _serial = self.inner.resolving.lock().await;
        let (fence, log) = self.own_checked(key, check).await?;
        let action = match steps::check_decision(
            &records_of(log.clone()),
            &conversation,
            action_id,
            &decision,
        ) {
            Ok(action) => action,
            Err(err) => return Err(self.give_back(&fence, err).await),
        };
        let mut extra = Vec::new();
        if always {
            if action.kind != ActionKind::Confirmation {
                let err = FlueError::InvalidDecision {
                    action_id: action_id.to_owned(),
                    message: "only a confirmation can be allowed always".to_owned(),
                };
                return Err(self.give_back(&fence, err).await);
            }
            if let Some(approval_key) = &self.inner.approval_key {
                match crate::standing::grant(approval_key, &action.tool_name, action_id) {
                    Ok(rule) => extra.push(Record::Rule(rule)),
                    Err(problem) => {
                        let err = FlueError::InvalidDecision {
                            action_id: action_id.to_owned(),
                            message: format!(
                                "cannot keep a standing approval ({problem}): answer allow \
                                 instead"
                            ),
                        };
                        return Err(self.give_back(&fence, err).await);
                    }
                }
            }
        }
        let resolution = ActionResolution::of(&action, decision.clone());
        let waiting = match self.waiting_submission(key).await {
            Ok(waiting) => waiting,
            Err(err) => return Err(self.give_back(&fence, err).await),
        };
        let session = root_session(key);
        let decided = Decided {
            session: &session,
            expected_version: log.version,
            resolution,
            extra,
        };
        self.store_decision(key, &fence, waiting, decided).await
    }

    /// The standing approvals of the conversation ("always" answers), each with its status
    /// under this runtime's approval key. [`FlueError::AgentInstanceNotFound`] for an unknown
    /// conversation.
    pub async fn rules(&self, key: &ConversationKey) -> Result<Vec<RuleInfo>> {
        let log = self.root_log(key).await?;
        let key = self.inner.approval_key.as_ref();
        Ok(crate::standing::standing_rules(&records_of(log), key))
    }

    /// Revokes the standing approval `rule_id`: the tool's later confirmations are asked
    /// again. Stored like a decision (owning the conversation for the append); revoking a
    /// revoked rule stores nothing. [`FlueError::InvalidRequest`] for an unknown rule.
    pub async fn revoke_rule(&self, key: &ConversationKey, rule_id: &str) -> Result<RuleInfo> {
        let _serial = self.inner.resolving.lock().await;
        let (fence, log) = self.own_checked(key, |_| Ok(())).await?;
        let version = log.version;
        let listed =
            crate::standing::standing_rules(&records_of(log), self.inner.approval_key.as_ref());
        let Some(mut rule) = listed.into_iter().find(|rule| rule.rule_id == rule_id) else {
            let err = FlueError::InvalidRequest {
                message: format!("the conversation has no standing rule {rule_id:?}"),
            };
            return Err(self.give_back(&fence, err).await);
        };
        if rule.status != "revoked" {
            let stored = stamp_now([Record::Rule(crate::standing::revocation(&rule))]);
            let appended = self
                .inner
                .store
                .append_fenced(FencedAppend {
                    fence: &fence,
                    submission_id: None,
                    applies_input: false,
                    resumes_waiting: false,
                    session: &root_session(key),
                    expected_version: version,
                    records: &stored,
                })
                .await;
            if let Err(err) = appended {
                return Err(self.give_back(&fence, err).await);
            }
            "revoked".clone_into(&mut rule.status);
        }
        self.hand_back(&fence).await;
        Ok(rule)
    }

    /// Interrupts a paused conversation: answers every pending action as interrupted (in the
    /// log, where the model will see it), settles the waiting submission `aborted`, then
    /// dispatches `message` when one is given. The one way to send new input while actions
    /// are pending; with nothing pending it only dispatches.
    pub async fn interrupt(
        &self,
        key: &ConversationKey,
        message: Option<DeliveredMessage>,
    ) -> Result<InterruptReceipt> {
        let serial = self.inner.resolving.lock().await;
        let (fence, log) = self.own_checked(key, |_| Ok(())).await?;
        let mut records = records_of(log.clone());
        // A waiting `task` call's subagent actions are interrupted with it.
        for action in steps::pending_actions(&records) {
            if let (ActionKind::Task, Some(session)) = (action.kind, &action.session) {
                let interrupted =
                    task::interrupt_task(self.inner.store.as_ref(), &key.instance_id(), session)
                        .await;
                if let Err(err) = interrupted {
                    return Err(self.give_back(&fence, err).await);
                }
            }
        }
        let decisions: Vec<Record> = steps::pending_actions(&records)
            .into_iter()
            .map(|action| {
                Record::ActionResolved(ActionResolution::of(&action, ActionDecision::Interrupted))
            })
            .collect();
        let interrupted: Vec<String> = decisions
            .iter()
            .filter_map(|record| match record {
                Record::ActionResolved(resolution) => Some(resolution.action_id.clone()),
                _ => None,
            })
            .collect();
        let waiting = match self.waiting_submission(key).await {
            Ok(waiting) => waiting,
            Err(err) => return Err(self.give_back(&fence, err).await),
        };
        if !decisions.is_empty() {
            records.extend(decisions.iter().cloned());
            let mut written = decisions;
            written.extend(
                steps::results_before_input(&records)
                    .into_iter()
                    .map(Record::ToolResult),
            );
            let stored = stamp_now(written);
            let session = root_session(key);
            let appended = self
                .inner
                .store
                .append_fenced(FencedAppend {
                    fence: &fence,
                    submission_id: waiting.as_ref().map(|info| info.submission_id.as_str()),
                    applies_input: false,
                    resumes_waiting: false,
                    session: &session,
                    expected_version: log.version,
                    records: &stored,
                })
                .await;
            if let Err(err) = appended {
                return Err(self.give_back(&fence, err).await);
            }
        }
        let mut settled = None;
        if let Some(info) = &waiting {
            let error = FlueError::SubmissionAborted {
                submission_id: info.submission_id.clone(),
            };
            let settlement = Settlement {
                submission_id: info.submission_id.clone(),
                outcome: Outcome::Aborted,
                text: None,
                data: None,
                error: Some(error.to_info()),
                attempts: info.attempts,
                settled_at: now_ms(),
            };
            match self.inner.store.settle(&fence, &settlement).await {
                Ok(true) => {
                    self.inner.emit(
                        key,
                        Some(&info.submission_id),
                        Event::SubmissionSettled {
                            submission_id: info.submission_id.clone(),
                            outcome: Outcome::Aborted,
                            error: settlement.error.clone(),
                        },
                    );
                    settled = Some(info.submission_id.clone());
                }
                Ok(false) => {}
                Err(err) => return Err(self.give_back(&fence, err).await),
            }
        }
        if !self.inner.store.release(&fence).await? {
            // Other work queued behind the waiting submission: our driver runs it.
            self.inner.kick(key);
        }
        drop(serial);
        let dispatched = match message {
            Some(message) => Some(
                self.dispatch(key, message, DispatchOptions::default())
                    .await?,
            ),
            None => None,
        };
        Ok(InterruptReceipt {
            interrupted,
            settled,
            dispatched,
        })
    }

    /// Waits until the submission settles or pauses on pending actions (`waiting`), whichever
    /// process runs it, and returns its state then. [`FlueError::SubmissionNotFound`] for an
    /// unknown id.
    pub async fn wait_idle(&self, submission_id: &str) -> Result<SubmissionInfo> {
        self.wait_idle_lifecycle(submission_id).await?;
        self.status(submission_id).await
    }

    /// [`AgentRuntime::wait_idle`] returning the submission's lifecycle only: a large message
    /// is never read back while waiting.
    pub async fn wait_idle_lifecycle(&self, submission_id: &str) -> Result<SubmissionStatus> {
        let mut watch = None;
        loop {
            let status = self.lifecycle(submission_id).await?;
            if status.settlement.is_some() || status.state == SubmissionState::Waiting {
                return Ok(status);
            }
            match &mut watch {
                None => watch = Some(self.inner.store.watch_head(&status.conversation)),
                Some(watch) => {
                    let _ = tokio::time::timeout(self.inner.poll_interval, watch.changed()).await;
                }
            }
        }
    }

    /// [`AgentRuntime::resolve`] for a live action (an MCP server's question while a call runs).
    /// The call waits in the process that owns the conversation, so the decision is appended
    /// under that owner's current fence (read from the store; the version check makes the
    /// first decision win, the call's own timeout included) and reaches the call through the
    /// store's head watch. Nothing is resumed: the submission is running all along.
    async fn resolve_live(
        &self,
        key: &ConversationKey,
        action_id: &str,
        decision: ActionDecision,
    ) -> Result<ResolveReceipt> {
        if self.inner.stopping.is_cancelled() {
            return Err(FlueError::RuntimeStopped {
                message: "the submission runtime was shut down".into(),
            });
        }
        let conversation = key.to_string();
        let session = root_session(key);
        let mut last = None;
        for _ in 0..64 {
            let log = self.root_log(key).await?;
            let action = steps::check_decision(
                &records_of(log.clone()),
                &conversation,
                action_id,
                &decision,
            )?;
            let decision = steps::normalize_decision(&action, decision.clone())?;
            let info = self.inner.store.conversation(key).await?;
            let Some((owner_id, epoch)) = info.and_then(|info| Some((info.owner?, info.epoch)))
            else {
                return Err(FlueError::InvalidDecision {
                    action_id: action_id.to_owned(),
                    message: "the tool call that asked is no longer running; nothing waits for \
                              this answer"
                        .into(),
                });
            };
            let fence = Fence {
                key: key.clone(),
                owner_id,
                epoch,
            };
            let running = self
                .inner
                .store
                .unsettled(key)
                .await?
                .into_iter()
                .find(|info| info.state == SubmissionState::Running)
                .map(|info| info.submission_id);
            let stored = [StoredRecord::new(
                Record::ActionResolved(ActionResolution::of(&action, decision.clone())),
                now_ms(),
            )];
            let appended = self
                .inner
                .store
                .append_fenced(FencedAppend {
                    fence: &fence,
                    submission_id: running.as_deref(),
                    applies_input: false,
                    resumes_waiting: false,
                    session: &session,
                    expected_version: log.version,
                    records: &stored,
                })
                .await;
            match appended {
                Ok(_) => {
                    self.inner.emit(
                        key,
                        running.as_deref(),
                        Event::ActionResolved {
                            action_id: action_id.to_owned(),
                            decision,
                        },
                    );
                    return Ok(ResolveReceipt {
                        submission_id: running,
                        offset: self.head(key).await?,
                    });
                }
                // The running loop (or the call's timeout) wrote first, or the owner changed:
                // read again; a decision stored meanwhile is `action_already_resolved`.
                Err(err @ (FlueError::VersionConflict { .. } | FlueError::LeaseLost { .. })) => {
                    last = Some(err);
                }
                Err(err) => return Err(err),
            }
        }
        Err(last.unwrap_or_else(|| FlueError::Store {
            message: "the conversation kept changing underneath".into(),
            source: None,
        }))
    }

    /// [`AgentRuntime::resolve`] for an action of the task session `session`.
    async fn resolve_nested(
        &self,
        key: &ConversationKey,
        session: &SessionKey,
        action_id: &str,
        decision: ActionDecision,
    ) -> Result<ResolveReceipt> {
        let _serial = self.inner.resolving.lock().await;
        let (fence, _) = self.own_checked(key, |_| Ok(())).await?;
        let checked = async {
            let log = self.inner.store.load(session, 0).await?.ok_or_else(|| {
                FlueError::SessionNotFound {
                    session: session.session.clone(),
                }
            })?;
            let version = log.version;
            let action =
                steps::check_decision(&records_of(log), &session.session, action_id, &decision)?;
            let waiting = self.waiting_submission(key).await?;
            Ok::<_, FlueError>((version, action, waiting))
        }
        .await;
        let (version, action, waiting) = match checked {
            Ok(checked) => checked,
            Err(err) => return Err(self.give_back(&fence, err).await),
        };
        let resolution = ActionResolution::of(&action, decision);
        let decided = Decided {
            session,
            expected_version: version,
            resolution,
            extra: Vec::new(),
        };
        self.store_decision(key, &fence, waiting, decided).await
    }

    /// Stores `resolution` in `session` under `fence` (owned by this runtime), tells the
    /// runtime's listeners, and hands a waiting submission back to the driver (or releases the
    /// conversation when none waits).
    async fn store_decision(
        &self,
        key: &ConversationKey,
        fence: &Fence,
        waiting: Option<SubmissionInfo>,
        decided: Decided<'_>,
    ) -> Result<ResolveReceipt> {
        let Decided {
            session,
            expected_version,
            resolution,
            extra,
        } = decided;
        let action_id = resolution.action_id.clone();
        let decision = resolution.decision.clone();
        let mut written = vec![Record::ActionResolved(resolution)];
        written.extend(extra);
        let stored = stamp_now(written);
        let appended = self
            .inner
            .store
            .append_fenced(FencedAppend {
                fence,
                submission_id: waiting.as_ref().map(|info| info.submission_id.as_str()),
                applies_input: false,
                resumes_waiting: true,
                session,
                expected_version,
                records: &stored,
            })
            .await;
        if let Err(err) = appended {
            return Err(self.give_back(fence, err).await);
        }
        self.inner.emit(
            key,
            waiting.as_ref().map(|info| info.submission_id.as_str()),
            Event::ActionResolved {
                action_id,
                decision,
            },
        );
        match &waiting {
            Some(info) => {
                if self.inner.own_work_only {
                    self.inner.remember_own(key, &info.submission_id);
                }
                // Our driver takes the conversation over (same owner) and resumes it.
                self.inner.kick(key);
            }
            None => {
                let _ = self.inner.store.release(fence).await;
            }
        }
        Ok(ResolveReceipt {
            submission_id: waiting.map(|info| info.submission_id),
            offset: self.head(key).await?,
        })
    }

    pub(crate) async fn blocking_actions(&self, key: &ConversationKey) -> Result<Vec<String>> {
        if self.waiting_submission(key).await?.is_none() {
            return Ok(Vec::new());
        }
        let log = self.root_log(key).await?;
        Ok(steps::pending_actions(&records_of(log))
            .into_iter()
            .map(|action| action.action_id)
            .collect())
    }

    /// Takes ownership of the conversation once `check` passes on its stored log, checking
    /// again under ownership. While a live owner holds it, re-reads the log (a decision it
    /// stores meanwhile fails `check` at once) and retries until [`OWNER_WAIT`] passes.
    pub(super) async fn own_checked(
        &self,
        key: &ConversationKey,
        check: impl Fn(&SessionLog) -> Result<()>,
    ) -> Result<(Fence, SessionLog)> {
        if self.inner.stopping.is_cancelled() {
            return Err(FlueError::RuntimeStopped {
                message: "the submission runtime was shut down".into(),
            });
        }
        let deadline = tokio::time::Instant::now() + OWNER_WAIT;
        loop {
            check(&self.root_log(key).await?)?;
            // Our own driver still holds it (it just paused, or runs an earlier decision):
            // taking it under the same owner id would fence that driver off mid-write.
            if self.inner.is_driving(key) {
                if tokio::time::Instant::now() >= deadline {
                    return Err(FlueError::ConversationBusy {
                        agent: key.agent.clone(),
                        id: key.id.clone(),
                        owner: Some(self.inner.owner_id.clone()),
                        unsettled: 1,
                    });
                }
                tokio::time::sleep(self.inner.poll_interval).await;
                continue;
            }
            match self
                .inner
                .store
                .acquire(key, &self.inner.owner_id, self.inner.lease)
                .await?
            {
                Acquire::Owned(fence) => {
                    let log = match self.root_log(key).await {
                        Ok(log) => log,
                        Err(err) => return Err(self.give_back(&fence, err).await),
                    };
                    if let Err(err) = check(&log) {
                        return Err(self.give_back(&fence, err).await);
                    }
                    return Ok((fence, log));
                }
                Acquire::Held { owner_id } => {
                    if tokio::time::Instant::now() >= deadline {
                        return Err(FlueError::ConversationBusy {
                            agent: key.agent.clone(),
                            id: key.id.clone(),
                            owner: Some(owner_id),
                            unsettled: 1,
                        });
                    }
                    tokio::time::sleep(self.inner.poll_interval).await;
                }
            }
        }
    }

    /// Releases ownership taken for a decision that failed, and returns the failure.
    pub(super) async fn give_back(&self, fence: &Fence, err: FlueError) -> FlueError {
        self.hand_back(fence).await;
        err
    }

    /// Releases the conversation taken for a write.
    async fn hand_back(&self, fence: &Fence) {
        if let Ok(false) = self.inner.store.release(fence).await {
            // Work remains (queued behind): run it rather than sit on the conversation.
            self.inner.kick(&fence.key);
        }
    }

    async fn waiting_submission(&self, key: &ConversationKey) -> Result<Option<SubmissionInfo>> {
        Ok(self
            .inner
            .store
            .unsettled(key)
            .await?
            .into_iter()
            .find(|info| info.state == SubmissionState::Waiting))
    }

    async fn root_log(&self, key: &ConversationKey) -> Result<SessionLog> {
        self.inner
            .store
            .load(&root_session(key), 0)
            .await?
            .ok_or_else(|| FlueError::AgentInstanceNotFound {
                agent: key.agent.clone(),
                id: key.id.clone(),
                uid: None,
            })
    }

    async fn head(&self, key: &ConversationKey) -> Result<Offset> {
        Ok(self
            .inner
            .store
            .conversation(key)
            .await?
            .map_or(Offset::START, |info| info.head))
    }
}

fn root_session(key: &ConversationKey) -> SessionKey {
    SessionKey::new(key.instance_id(), ROOT_SESSION)
}

fn records_of(log: SessionLog) -> Vec<Record> {
    log.records
        .into_iter()
        .map(|stored| stored.record)
        .collect()
}
