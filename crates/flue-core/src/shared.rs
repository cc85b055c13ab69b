//! The runtime state operations run against: one [`HarnessShared`] per harness and one
//! [`SessionShared`] (with its in-memory log, [`SessionState`]) per open session.
//!
//! This module is below the agent loop, compaction, tasks and the public `Session`/`Harness`
//! API: they all read and append the log through it, and it imports none of them. The
//! one-operation-per-session rule lives here, in [`SessionShared::begin`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use flue_protocol::record::Record;
use flue_protocol::{ACTION_SCOPE_PREFIX, WorkTiming};

use crate::config::ResolvedAgent;
use crate::error::{FlueError, Result};
use crate::log_cache::{CachedLog, LogCache};
use crate::model::ProviderRegistry;
use crate::overlay::CallOverlay;
use crate::permission::PermissionPolicy;
use crate::redact::Redactor;
use crate::role::Roles;
use crate::running_tasks::RunningTasks;
use crate::sandbox::Sandbox;
use crate::scope::AgentScope;
use crate::steps::LogIndex;
use crate::store::{DynAuditStore, DynSessionStore, SessionKey, SessionLog};
use crate::util::stamp_now;

/// Who runs a tool call: the harness and the scope (root agent or subagent) of its session.
/// The agent loop puts it in every call's [`crate::tool::ToolContext`] extension slot; an action
/// reads it there to open its child scope, so the loop names no action type.
#[derive(Clone)]
pub(crate) struct Caller {
    pub(crate) harness: Arc<HarnessShared>,
    pub(crate) scope: Arc<AgentScope>,
}

pub(crate) struct HarnessShared {
    pub(crate) instance_id: String,
    pub(crate) agent: ResolvedAgent,
    pub(crate) store: Arc<dyn DynSessionStore>,
    pub(crate) audit: Arc<dyn DynAuditStore>,
    pub(crate) providers: ProviderRegistry,
    pub(crate) sandbox: Arc<dyn Sandbox>,
    /// The sandbox seen from the agent's `cwd` (relative paths and commands start there).
    pub(crate) fs: Arc<dyn Sandbox>,
    pub(crate) workspace_context: Option<String>,
    /// What root sessions run as: the agent plus the workspace skills.
    pub(crate) root_scope: Arc<AgentScope>,
    /// The roles calls may name.
    pub(crate) roles: Roles,
    /// Known secret values, redacted from tool output before it is stored or emitted.
    pub(crate) redactor: Redactor,
    /// Which tool calls wait for a confirmation (the agent's rules over each tool's default).
    pub(crate) permissions: PermissionPolicy,
    /// Open sessions by stored name, so every handle to one session shares its busy flag.
    pub(crate) open_sessions: Mutex<HashMap<String, Weak<SessionShared>>>,
    /// Bumped when a decision on a live action is stored through this harness, waking the
    /// calls that wait for one (decisions of other processes arrive through the store).
    pub(crate) live_wake: tokio::sync::watch::Sender<u64>,
    /// Prepended to every session name this harness opens: empty for a harness built by
    /// [`crate::harness::HarnessBuilder`], `action:<invocation>:` (nested: one such part per level) for
    /// the child scope an action runs in. No name a caller passes can leave the prefix, so an
    /// action cannot reach the sessions of its caller.
    pub(crate) session_prefix: String,
    /// Cancels every operation of this harness's sessions: the running action's token in an
    /// action scope; none at the root.
    pub(crate) scope_cancel: Option<tokio_util::sync::CancellationToken>,
    /// Levels of action scopes above this harness: 0 at the root.
    pub(crate) action_depth: u32,
    /// Where the sessions this harness opens by name leave their logs when their last handle
    /// goes, and find them again (a runtime's harnesses; see `log_cache.rs`).
    pub(crate) log_cache: Option<Arc<LogCache>>,
    /// The tasks running now, so one can be aborted alone (the runtime's, shared by its
    /// harnesses and their action scopes).
    pub(crate) running_tasks: Arc<RunningTasks>,
    /// Verifies the conversation's standing approvals (none without a key).
    pub(crate) approval_key: Option<crate::standing::ApprovalKey>,
    /// The runtime serving this harness's conversation (background tasks); none outside one.
    pub(crate) background: Option<crate::background::BackgroundHandle>,
}

impl HarnessShared {
    /// Drops a deleted session from the registry so the next open starts fresh.
    pub(crate) fn forget_session(&self, name: &str) {
        if let Ok(mut open) = self.open_sessions.lock() {
            open.remove(name);
        }
    }

    /// The isolated scope an action invoked from this harness runs in: the same agent,
    /// sandbox, store, providers, roles, secrets and permissions, sessions that run as `scope`
    /// (the caller's: the root agent, or the subagent of a task) in its `cwd`, a fresh registry
    /// of open sessions under a new session prefix, and operations cancelled by `cancel`.
    pub(crate) fn action_scope(
        &self,
        scope: Arc<AgentScope>,
        cancel: tokio_util::sync::CancellationToken,
    ) -> Self {
        Self {
            instance_id: self.instance_id.clone(),
            agent: self.agent.clone(),
            store: Arc::clone(&self.store),
            audit: Arc::clone(&self.audit),
            providers: self.providers.clone(),
            sandbox: Arc::clone(&self.sandbox),
            fs: crate::sandbox::in_cwd(&self.sandbox, &scope.cwd),
            workspace_context: self.workspace_context.clone(),
            root_scope: scope,
            roles: self.roles.clone(),
            redactor: self.redactor.clone(),
            permissions: self.permissions.clone(),
            open_sessions: Mutex::new(HashMap::new()),
            session_prefix: format!(
                "{}{}{}:",
                self.session_prefix,
                ACTION_SCOPE_PREFIX,
                crate::util::new_ulid()
            ),
            scope_cancel: Some(cancel),
            action_depth: self.action_depth + 1,
            live_wake: tokio::sync::watch::channel(0).0,
            log_cache: None,
            running_tasks: Arc::clone(&self.running_tasks),
            approval_key: self.approval_key.clone(),
            // An action's scope starts no background tasks.
            background: None,
        }
    }

    /// The system prompt of a root session's call without role or skill: the agent's
    /// instructions, the workspace context, then the list of skills.
    pub(crate) fn system_prompt(&self) -> String {
        CallOverlay::default().system_prompt(&self.root_scope, self.workspace_context.as_deref())
    }

    /// The system prompt of a root session's call in `role` (else the agent's default role)
    /// running `skill` (if any): exactly what its model gets.
    pub(crate) fn call_system_prompt(
        &self,
        role: Option<&str>,
        skill: Option<&str>,
    ) -> Result<String> {
        let role = role
            .map(str::to_owned)
            .or_else(|| self.root_scope.role.clone());
        let skill = skill
            .map(|name| self.root_scope.skills.get(name))
            .transpose()?;
        let overlay = CallOverlay::resolve(&self.roles, role, skill)?;
        Ok(overlay.system_prompt(&self.root_scope, self.workspace_context.as_deref()))
    }
}

pub(crate) struct SessionShared {
    pub(crate) harness: Arc<HarnessShared>,
    pub(crate) key: SessionKey,
    busy: AtomicBool,
    pub(crate) deleted: AtomicBool,
    /// Set once the session's deletion has succeeded; concurrent `delete` calls wait on the
    /// one running deletion instead of failing busy.
    pub(crate) deletion: tokio::sync::OnceCell<()>,
    /// The sandbox seen from the scope's `cwd`.
    pub(crate) fs: Arc<dyn Sandbox>,
    /// Held by the running operation for its whole duration; uncontended thanks to `busy`.
    pub(crate) state: tokio::sync::Mutex<SessionState>,
    /// The agent this session runs as.
    pub(crate) scope: Arc<AgentScope>,
    /// Levels below the root session: 0 for sessions opened by name, 1 for their tasks, ...
    pub(crate) depth: u32,
    /// The role of calls that name none; in memory only, never persisted.
    pub(crate) default_role: std::sync::Mutex<Option<String>>,
    /// When the session was created (ms since the epoch), as the store said when it was opened.
    created_at: u64,
    /// Whether the log goes to the harness's log cache when the last handle is dropped (the
    /// sessions opened by name).
    cached: bool,
}

/// The in-memory copy of a session log.
#[derive(Default)]
pub(crate) struct SessionState {
    pub(crate) version: u64,
    pub(crate) records: Vec<Record>,
    /// What the loop asks about the whole log, kept up to date with `records`.
    pub(crate) index: LogIndex,
}

impl SessionState {
    /// Adds records appended to the log (the one way `records` grows).
    pub(crate) fn extend(&mut self, records: Vec<Record>) {
        self.index.extend(&records);
        self.records.extend(records);
    }
}

impl Drop for SessionShared {
    /// Leaves the log to the harness's log cache, so that the next harness of the runtime
    /// opening this session reads only what was appended after it.
    fn drop(&mut self) {
        if !self.cached || self.deleted.load(Ordering::Acquire) {
            return;
        }
        let Some(cache) = &self.harness.log_cache else {
            return;
        };
        let state = std::mem::take(self.state.get_mut());
        cache.put(
            self.key.clone(),
            CachedLog {
                version: state.version,
                created_at: self.created_at,
                records: state.records,
                index: state.index,
            },
        );
    }
}

/// Proof that an operation owns its session; releases it on drop (including on panic).
pub(crate) struct OperationGuard {
    shared: Arc<SessionShared>,
}

impl Drop for OperationGuard {
    fn drop(&mut self) {
        self.shared.busy.store(false, Ordering::Release);
    }
}

impl SessionShared {
    /// A root session opened by name from a log already in memory; when its last handle goes,
    /// the log goes to the harness's log cache, if it has one.
    pub(crate) fn opened(harness: Arc<HarnessShared>, key: SessionKey, log: CachedLog) -> Self {
        let scope = Arc::clone(&harness.root_scope);
        let mut shared = Self::new_task(
            harness,
            key,
            SessionLog {
                version: log.version,
                records: Vec::new(),
                created_at: log.created_at,
                updated_at: log.created_at,
            },
            scope,
            0,
        );
        let state = shared.state.get_mut();
        state.records = log.records;
        state.index = log.index;
        shared.cached = shared.harness.log_cache.is_some();
        shared
    }

    /// A session running as `scope` at `depth` below the root (a task session when above 0).
    pub(crate) fn new_task(
        harness: Arc<HarnessShared>,
        key: SessionKey,
        log: SessionLog,
        scope: Arc<AgentScope>,
        depth: u32,
    ) -> Self {
        Self {
            fs: crate::sandbox::in_cwd(&harness.sandbox, &scope.cwd),
            harness,
            key,
            busy: AtomicBool::new(false),
            deleted: AtomicBool::new(false),
            deletion: tokio::sync::OnceCell::new(),
            state: tokio::sync::Mutex::new({
                let records: Vec<Record> = log
                    .records
                    .into_iter()
                    .map(|stored| stored.record)
                    .collect();
                SessionState {
                    version: log.version,
                    index: LogIndex::of(&records),
                    records,
                }
            }),
            default_role: std::sync::Mutex::new(scope.role.clone()),
            created_at: log.created_at,
            cached: false,
            scope,
            depth,
        }
    }

    /// The role of calls that name none.
    pub(crate) fn default_role(&self) -> Option<String> {
        self.default_role.lock().map_or(None, |role| role.clone())
    }

    /// The overlay of a model call naming `call_role` (or none) and running `skill` (or none).
    pub(crate) fn overlay(
        &self,
        call_role: Option<&str>,
        skill: Option<Arc<crate::config::Skill>>,
    ) -> Result<CallOverlay> {
        let role = call_role.map(str::to_owned).or_else(|| self.default_role());
        CallOverlay::resolve(&self.harness.roles, role, skill)
    }

    /// Claims the session for one operation: the single place that enforces exclusivity.
    pub(crate) fn begin(self: &Arc<Self>) -> Result<OperationGuard> {
        if self.deleted.load(Ordering::Acquire) {
            return Err(FlueError::SessionNotFound {
                session: self.key.session.clone(),
            });
        }
        self.busy
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .map_err(|_| FlueError::SessionBusy {
                session: self.key.session.clone(),
            })?;
        Ok(OperationGuard {
            shared: Arc::clone(self),
        })
    }

    /// Brings `state` up to date with records other writers appended.
    pub(crate) async fn sync(&self, state: &mut SessionState) -> Result<()> {
        let log = self
            .harness
            .store
            .load(&self.key, state.version)
            .await?
            .ok_or_else(|| FlueError::SessionNotFound {
                session: self.key.session.clone(),
            })?;
        state.extend(
            log.records
                .into_iter()
                .map(|stored| stored.record)
                .collect(),
        );
        state.version = log.version;
        Ok(())
    }

    /// Appends records durably, then to the in-memory copy. Known secret values are redacted
    /// from every record first: this is the one write path of model replies, tool results and
    /// messages, so what is stored (and so served as a transcript, replayed as events or shown
    /// in the console) never holds a secret, whoever quoted it.
    pub(crate) async fn append(
        &self,
        state: &mut SessionState,
        records: Vec<Record>,
    ) -> Result<()> {
        self.append_timed(state, records, |_| None).await
    }

    /// [`SessionShared::append`], storing with each record when its work began and how long
    /// it took, as `timing` says (a model call, a tool call's run, a compaction).
    pub(crate) async fn append_timed(
        &self,
        state: &mut SessionState,
        mut records: Vec<Record>,
        timing: impl Fn(&Record) -> Option<WorkTiming>,
    ) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        for record in &mut records {
            self.harness.redactor.redact_value(record);
        }
        // The records move into the stored form and back: a large message is not copied.
        let stored: Vec<_> = stamp_now(records)
            .into_iter()
            .map(|stored| {
                let timing = timing(&stored.record);
                stored.with_timing(timing)
            })
            .collect();
        loop {
            match self
                .harness
                .store
                .append(&self.key, state.version, &stored)
                .await
            {
                Ok(version) => {
                    state.version = version;
                    state.extend(stored.into_iter().map(|stored| stored.record).collect());
                    return Ok(());
                }
                // A running call stored a live action (an MCP server's question) or its
                // decision meanwhile: take those in and append after them. Anything else is a
                // real conflict.
                Err(err @ FlueError::VersionConflict { .. }) => {
                    if !self.take_in_live_records(state).await? {
                        return Err(err);
                    }
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// Reads what other writers appended after `state`; when all of it belongs to live actions
    /// ([`crate::elicitation::is_live_record`]), adds it to `state` and returns `true`.
    async fn take_in_live_records(&self, state: &mut SessionState) -> Result<bool> {
        let Some(log) = self.harness.store.load(&self.key, state.version).await? else {
            return Ok(false);
        };
        if log.records.is_empty() {
            return Ok(false);
        }
        let mut seen = state.records.clone();
        for stored in &log.records {
            if !crate::elicitation::is_live_record(&stored.record, &seen) {
                return Ok(false);
            }
            seen.push(stored.record.clone());
        }
        state.extend(
            log.records
                .into_iter()
                .map(|stored| stored.record)
                .collect(),
        );
        state.version = log.version;
        Ok(true)
    }

    /// Wakes the calls of this harness that wait for a live action's decision.
    pub(crate) fn wake_live(&self) {
        self.harness.live_wake.send_modify(|count| *count += 1);
    }
}
