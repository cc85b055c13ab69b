//! The harness: an initialized agent for one agent instance id.
//!
//! [`HarnessBuilder::build`] resolves the agent configuration, checks its model, discovers the
//! workspace context (`AGENTS.md` in the sandbox's working directory) and then opens named
//! [`Session`]s on demand. Every session of a harness shares its sandbox, store and providers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use flue_protocol::{ACTION_SCOPE_PREFIX, TASK_SESSION_PREFIX};
use tokio_util::sync::CancellationToken;

use crate::background::BackgroundHandle;
use crate::call::CallHandle;
use crate::config::{
    AgentConfig, AgentProfile, Compaction, CompactionConfig, ResolvedAgent, Skill,
};
use crate::error::{FlueError, Result, SandboxErrorReason};
use crate::log_cache::{CachedLog, LogCache};
use crate::model::{ProviderRegistry, ToolSchema};
use crate::permission::PermissionPolicy;
use crate::redact::Redactor;
use crate::role::{Role, Roles};
use crate::running_tasks::RunningTasks;
use crate::sandbox::{
    ExecOptions, Sandbox, SandboxFactory, ShellResult, VirtualSandbox, normalize_path,
};
use crate::scope::AgentScope;
use crate::session::Session;
use crate::shared::{HarnessShared, SessionShared};
use crate::steps::LogIndex;
use crate::store::{DynAuditStore, DynSessionStore, MemoryStore, SessionKey, SessionSummary};
use crate::tool::ToolDefinition;
use crate::util::{new_ulid, or_cancel};

/// Builds a [`Harness`]; `build` validates everything that can be checked before a model call.
///
/// ```no_run
/// # async fn demo() -> flue_core::Result<()> {
/// use std::sync::Arc;
/// use flue_core::{AgentConfig, Harness, LocalSandbox, ProviderRegistry, ScriptedProvider};
/// let root = std::path::PathBuf::from("my-agents");
/// let providers = ProviderRegistry::new().with_provider(Arc::new(ScriptedProvider::new(&root)));
/// let harness = Harness::builder(AgentConfig::new().with_model("scripted/script.json"))
///     .with_providers(providers)
///     .with_sandbox(Arc::new(LocalSandbox::new(&root)?))
///     .build()
///     .await?;
/// let session = harness.session("default").await?;
/// let reply = session.prompt("hello", Default::default()).await?;
/// println!("{}", reply.text);
/// # Ok(()) }
/// ```
pub struct HarnessBuilder {
    agent: AgentConfig,
    instance_id: Option<String>,
    store: Option<Arc<dyn DynSessionStore>>,
    providers: ProviderRegistry,
    sandbox: Option<Arc<dyn Sandbox>>,
    sandbox_factory: Option<Arc<dyn SandboxFactory>>,
    workspace_context: Option<Option<String>>,
    audit: Option<Arc<dyn DynAuditStore>>,
    workspace_skills: Vec<Skill>,
    roles: Vec<Role>,
    secrets: Vec<String>,
    /// Computes the agent's configuration per instance, replacing `agent`.
    initializer: Option<crate::initializer::Initializer>,
    /// Platform bindings handed to the initializer.
    env: Option<Arc<dyn std::any::Any + Send + Sync>>,
    /// The runtime's session logs kept between its harnesses of one conversation.
    log_cache: Option<Arc<LogCache>>,
    /// The runtime's running tasks (a harness built alone has its own).
    running_tasks: Option<Arc<RunningTasks>>,
    approval_key: Option<crate::standing::ApprovalKey>,
    /// The runtime serving the conversation, for background tasks.
    background: Option<BackgroundHandle>,
}

impl HarnessBuilder {
    /// Links the harness to the runtime serving its conversation, so that its root sessions
    /// can start background tasks.
    #[must_use]
    pub(crate) fn with_background(mut self, link: BackgroundHandle) -> Self {
        self.background = Some(link);
        self
    }

    /// Keeps the logs of the sessions the harness opens by name in `cache` between harnesses
    /// (the submission runtime's; see `log_cache.rs`).
    #[must_use]
    pub(crate) fn with_log_cache(mut self, cache: Arc<LogCache>) -> Self {
        self.log_cache = Some(cache);
        self
    }

    /// Registers the tasks this harness runs in `tasks`, where the runtime aborts one.
    #[must_use]
    pub(crate) fn with_running_tasks(mut self, tasks: Arc<RunningTasks>) -> Self {
        self.running_tasks = Some(tasks);
        self
    }

    /// Sets the key that verifies the conversation's standing approvals ("always" answers,
    /// see [`crate::standing::ApprovalKey`]); without one, confirmations are asked every time.
    #[must_use]
    pub fn with_approval_key(mut self, key: crate::standing::ApprovalKey) -> Self {
        self.approval_key = Some(key);
        self
    }

    /// Sets the platform bindings an initializer reads through
    /// [`AgentInitializerContext::env`](crate::initializer::AgentInitializerContext::env).
    #[must_use]
    pub fn with_env(mut self, env: Arc<dyn std::any::Any + Send + Sync>) -> Self {
        self.env = Some(env);
        self
    }

    /// Adds secret values (API keys, `.env` values, tokens) to redact from everything tool
    /// output becomes: tool results and errors, `session.shell` exchanges, and error messages in
    /// events, before they are stored, sent to a model or emitted. Short values and plain
    /// words are skipped; see [`Redactor`] for the rules and the transforms found. Can be
    /// called more than once; the values add up.
    #[must_use]
    pub fn with_secrets<I, S>(mut self, secrets: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.secrets.extend(secrets.into_iter().map(Into::into));
        self
    }

    /// Sets where the file tools keep their audit log and trash (default: the session store's,
    /// see [`SessionStore::audit_store`](crate::store::SessionStore::audit_store); a store without one gets an in-memory log).
    #[must_use]
    pub fn with_audit_store(mut self, audit: Arc<dyn DynAuditStore>) -> Self {
        self.audit = Some(audit);
        self
    }

    /// Sets the agent instance id (default: a fresh ULID).
    #[must_use]
    pub fn with_instance_id(mut self, instance_id: impl Into<String>) -> Self {
        self.instance_id = Some(instance_id.into());
        self
    }

    /// Sets the session store (default: a [`MemoryStore`]).
    #[must_use]
    pub fn with_store(mut self, store: Arc<dyn DynSessionStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Sets the model providers.
    #[must_use]
    pub fn with_providers(mut self, providers: ProviderRegistry) -> Self {
        self.providers = providers;
        self
    }

    /// Sets the sandbox (default: an empty [`VirtualSandbox`]).
    #[must_use]
    pub fn with_sandbox(mut self, sandbox: Arc<dyn Sandbox>) -> Self {
        self.sandbox = Some(sandbox);
        self
    }

    /// Creates the sandbox with `factory` at build time, unless one is set with
    /// [`HarnessBuilder::with_sandbox`].
    #[must_use]
    pub fn with_sandbox_factory(mut self, factory: Arc<dyn SandboxFactory>) -> Self {
        self.sandbox_factory = Some(factory);
        self
    }

    /// Sets the workspace context explicitly instead of discovering `AGENTS.md` in the sandbox;
    /// `None` means no context.
    #[must_use]
    pub fn with_workspace_context(mut self, context: Option<String>) -> Self {
        self.workspace_context = Some(context);
        self
    }

    /// Sets the workspace skills (discovered from `.agents/skills/`, e.g. by flue-build).
    /// Root sessions can run them alongside the agent's registered skills; a registered skill
    /// with the same name as a workspace skill fails `build`.
    #[must_use]
    pub fn with_workspace_skills(mut self, skills: Vec<Skill>) -> Self {
        self.workspace_skills = skills;
        self
    }

    /// Sets the roles calls may name (from `.agents/roles/`, e.g. by flue-build).
    #[must_use]
    pub fn with_roles(mut self, roles: Vec<Role>) -> Self {
        self.roles = roles;
        self
    }

    /// Checks what one message chooses for its run ([`flue_protocol::MessageOptions`]) against
    /// this agent, without building anything: the role must be one of the roles, the skill one
    /// the agent's root sessions can run (its own or the workspace's), and the model must
    /// resolve to a provider that accepts it ([`ModelProvider::check_model`](crate::model::ModelProvider::check_model)).
    /// Refusals are [`FlueError::InvalidRequest`] naming the field (`model`, `role`, `skill`)
    /// and what there is. An agent computed by an initializer is checked for its roles and
    /// model only (its skills exist per instance).
    pub async fn check_message_options(
        &self,
        options: &flue_protocol::MessageOptions,
    ) -> Result<()> {
        let invalid = |message: String| FlueError::InvalidRequest { message };
        if let Some(role) = &options.role {
            let roles = Roles::new(self.roles.clone())?;
            if roles.get(role).is_err() {
                let known = roles.names();
                return Err(invalid(format!(
                    "`role`: there is no role {role:?}; {} (.agents/roles/<name>.md)",
                    listing("the roles are", &known)
                )));
            }
        }
        if let Some(skill) = &options.skill
            && self.initializer.is_none()
        {
            let agent = self.agent.clone().resolve()?;
            let mut known: Vec<String> = agent
                .skills
                .iter()
                .chain(&self.workspace_skills)
                .map(|skill| skill.name.clone())
                .collect();
            known.sort();
            known.dedup();
            if !known.contains(skill) {
                return Err(invalid(format!(
                    "`skill`: agent {:?} has no skill {skill:?}; {}",
                    agent.name,
                    listing("its skills are", &known)
                )));
            }
        }
        if let Some(model) = &options.model {
            let (provider, spec) = self
                .providers
                .resolve(model)
                .map_err(|err| invalid(format!("`model`: {err}; use `<provider>/<model>`")))?;
            provider
                .check_model(&spec.model)
                .await
                .map_err(|err| invalid(format!("`model`: {err}")))?;
        }
        Ok(())
    }

    /// The redactor of the secrets given with [`HarnessBuilder::with_secrets`], as the harness
    /// will apply it: for what reaches the store before a harness exists (a message being
    /// admitted). Fails only where [`Redactor::new`] does.
    pub fn redactor(&self) -> Result<Redactor> {
        Redactor::new(&self.secrets)
    }

    /// Resolves and checks the configuration and returns the harness.
    pub async fn build(self) -> Result<Harness> {
        let instance_id = match self.instance_id {
            Some(id) => {
                check_instance_id(&id)?;
                id
            }
            None => new_ulid(),
        };
        let config = match &self.initializer {
            Some(initialize) => initialize(&crate::initializer::AgentInitializerContext::new(
                &instance_id,
                self.env.clone(),
            ))?,
            None => self.agent,
        };
        let mut agent = config.resolve()?;
        let roles = Roles::new(self.roles)?;
        check_role_references(&agent, &roles)?;
        for role in roles.iter() {
            if let Some(model) = &role.model {
                let (provider, spec) = self.providers.resolve(model)?;
                provider.check_model(&spec.model).await?;
            }
        }
        let redactor = Redactor::new(&self.secrets)?;
        let permissions = PermissionPolicy::new(&agent.permissions)?;
        let sandbox = match (self.sandbox, self.sandbox_factory) {
            (Some(sandbox), _) => sandbox,
            (None, Some(factory)) => factory.create(&instance_id).await?,
            (None, None) => Arc::new(VirtualSandbox::new()),
        };
        let cwd = match &agent.cwd {
            Some(cwd) => normalize_path(sandbox.cwd(), cwd)?,
            None => sandbox.cwd().to_owned(),
        };
        if let Some(model) = &agent.model {
            let (provider, spec) = self.providers.resolve(model)?;
            provider.check_model(&spec.model).await?;
        }
        if let Compaction::Enabled(CompactionConfig {
            model: Some(model), ..
        }) = &agent.compaction
        {
            let (provider, spec) = self.providers.resolve(model)?;
            provider.check_model(&spec.model).await?;
        }
        let workspace_context = match self.workspace_context {
            Some(context) => context,
            None => discover_workspace_context(sandbox.as_ref(), &cwd).await?,
        };
        let store: Arc<dyn DynSessionStore> =
            self.store.unwrap_or_else(|| Arc::new(MemoryStore::new()));
        let audit = self
            .audit
            .or_else(|| Arc::clone(&store).audit_store())
            .unwrap_or_else(|| Arc::new(MemoryStore::new()));
        if let Some(limits) = agent.memory {
            let Some(notes) = Arc::clone(&store).note_store() else {
                return Err(FlueError::config(format!(
                    "agent {:?} has `memory:` but its store keeps no memory notes; use the \
                     SQLite or Postgres store, or drop `memory:`",
                    agent.name
                )));
            };
            agent.tools.extend(crate::tool::memory_tools(
                notes,
                &agent.name,
                limits,
                redactor.clone(),
            )?);
        }
        let root_scope = Arc::new(AgentScope::root(
            &agent,
            &self.workspace_skills,
            cwd.clone(),
        )?);
        Ok(Harness {
            shared: Arc::new(HarnessShared {
                instance_id,
                root_scope,
                roles,
                agent,
                store,
                audit,
                providers: self.providers,
                fs: crate::sandbox::in_cwd(&sandbox, &cwd),
                sandbox,
                workspace_context,
                redactor,
                permissions,
                open_sessions: Mutex::new(HashMap::new()),
                live_wake: tokio::sync::watch::channel(0).0,
                session_prefix: String::new(),
                scope_cancel: None,
                action_depth: 0,
                log_cache: self.log_cache,
                running_tasks: self.running_tasks.unwrap_or_default(),
                approval_key: self.approval_key,
                background: self.background,
            }),
        })
    }
}

/// An initialized agent environment: sessions, sandbox access and the agent's configuration.
#[derive(Clone)]
pub struct Harness {
    shared: Arc<HarnessShared>,
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness")
            .field("instance_id", &self.shared.instance_id)
            .field("agent", &self.shared.agent.name)
            .finish_non_exhaustive()
    }
}

impl Harness {
    /// Starts building a harness for `agent`.
    pub fn builder(agent: AgentConfig) -> HarnessBuilder {
        HarnessBuilder {
            agent,
            instance_id: None,
            store: None,
            providers: ProviderRegistry::new(),
            sandbox: None,
            sandbox_factory: None,
            workspace_context: None,
            audit: None,
            workspace_skills: Vec::new(),
            roles: Vec::new(),
            secrets: Vec::new(),
            initializer: None,
            env: None,
            log_cache: None,
            running_tasks: None,
            approval_key: None,
            background: None,
        }
    }

    /// A builder whose agent configuration `initialize` computes each time a harness is built,
    /// from the instance id and the bindings of [`HarnessBuilder::with_env`] (the counterpart
    /// of `defineAgent(initialize)`). An error it returns fails the build.
    pub fn initialized_by(
        initialize: impl Fn(&crate::initializer::AgentInitializerContext) -> Result<AgentConfig>
        + Send
        + Sync
        + 'static,
    ) -> HarnessBuilder {
        let mut builder = Self::builder(AgentConfig::new());
        builder.initializer = Some(Arc::new(initialize));
        builder
    }

    /// The agent instance id.
    pub fn instance_id(&self) -> &str {
        &self.shared.instance_id
    }

    /// Aborts the running task `session` (`task:<parent>:<uuid>`, at any depth) alone: the
    /// `task` call that waits for it gets a `task_aborted` tool result and its parent goes on
    /// (a task started by `session.task` returns [`FlueError::Aborted`]). Returns whether the
    /// task was running through this harness.
    pub fn abort_task(&self, session: &str) -> bool {
        self.shared
            .running_tasks
            .abort(&self.shared.instance_id, session)
    }

    /// The task sessions running now through this harness, sorted.
    pub fn running_tasks(&self) -> Vec<String> {
        self.shared.running_tasks.list(&self.shared.instance_id)
    }

    /// The resolved agent configuration.
    pub fn agent(&self) -> &ResolvedAgent {
        &self.shared.agent
    }

    /// The system prompt sessions start from (a call's role or skill adds to it).
    pub fn system_prompt(&self) -> String {
        self.shared.system_prompt()
    }

    /// The system prompt a root session's call gets, exactly as its model does: the agent's
    /// instructions, the workspace context, the call's `role` (else the agent's default role),
    /// the skill list, and the skill `skill` when the call runs one. Fails with
    /// `unknown_role` or `skill_not_registered` when a name does not exist.
    pub fn call_system_prompt(&self, role: Option<&str>, skill: Option<&str>) -> Result<String> {
        self.shared.call_system_prompt(role, skill)
    }

    /// The tools a root session's model is offered in a submission, as it sees them: the
    /// agent's own (built-in, state, memory, custom, code and command tools), the current tools
    /// of its tool sources (MCP servers), then `load_skill` when there are skills, `task`
    /// unless the agent withholds it, `finish` and `give_up` when the agent has `result:`,
    /// and `permissions_check` when some tool waits for a decision. A call's extra tools (and
    /// its own result schema) come on top.
    pub fn tool_schemas(&self) -> Result<Vec<ToolSchema>> {
        Ok(self
            .offered_tools()?
            .iter()
            .map(ToolDefinition::schema)
            .collect())
    }

    /// The tools a root session's model is offered in a submission, in the order it sees
    /// them, each with its [`origin`](ToolDefinition::origin): the same list the agent loop
    /// offers (see [`Harness::tool_schemas`]). For listings: the `task` tool here describes
    /// the one a call gets but does not run.
    pub fn offered_tools(&self) -> Result<Vec<ToolDefinition>> {
        let scope = &self.shared.root_scope;
        let task = if scope.task_tool {
            Some(crate::task::listed_task_tool(scope, &self.shared)?)
        } else {
            None
        };
        crate::agent_loop::listed_tools(&self.shared, task)
    }

    /// The names of the skills root sessions can run: the agent's and the workspace's, sorted.
    pub fn skill_names(&self) -> Vec<String> {
        self.shared.root_scope.skills.names()
    }

    /// The names of the roles calls may name, sorted.
    pub fn role_names(&self) -> Vec<String> {
        self.shared.roles.names()
    }

    /// The harness of an action scope (see [`crate::action::ActionContext::harness`]).
    pub(crate) fn from_shared(shared: Arc<HarnessShared>) -> Self {
        Self { shared }
    }

    /// Gets or creates the session `name`. Names starting with `task:` or `action:` are
    /// reserved.
    pub async fn session(&self, name: &str) -> Result<Session> {
        check_session_name(name)?;
        let key = self.key(name);
        match self.shared.store.create(&key).await {
            Ok(()) | Err(FlueError::SessionAlreadyExists { .. }) => {}
            Err(err) => return Err(err),
        }
        self.open(name).await
    }

    /// Session management: get, create, delete and list.
    pub fn sessions(&self) -> Sessions<'_> {
        Sessions { harness: self }
    }

    /// The redactor built from [`HarnessBuilder::with_secrets`], for frontends that print or
    /// forward text of their own (replies, transcripts).
    pub fn redactor(&self) -> &Redactor {
        &self.shared.redactor
    }

    /// The audit log and trash of the file tools (see [`AuditStore`](crate::store::AuditStore)).
    pub fn audit_store(&self) -> &Arc<dyn DynAuditStore> {
        &self.shared.audit
    }

    /// The sandbox, for file operations that are not recorded in any conversation. Relative
    /// paths resolve against the agent's configured `cwd` (else the sandbox's own).
    pub fn fs(&self) -> &Arc<dyn Sandbox> {
        &self.shared.fs
    }

    /// Runs a command in the sandbox without recording it in any conversation. Its output is
    /// returned as the command printed it: nothing is redacted (use [`Harness::redactor`] before
    /// showing or storing it). It runs in the agent's configured `cwd` unless `options` name
    /// another (a relative one resolves against it).
    pub fn shell(&self, command: &str, options: ExecOptions) -> CallHandle<ShellResult> {
        let sandbox = Arc::clone(&self.shared.fs);
        let cancel = options.cancel.clone().unwrap_or_else(|| {
            self.shared
                .scope_cancel
                .as_ref()
                .map_or_else(CancellationToken::new, CancellationToken::child_token)
        });
        let options = ExecOptions {
            cancel: Some(cancel.clone()),
            ..options
        };
        let command = command.to_owned();
        let (_events_tx, events_rx) = tokio::sync::mpsc::unbounded_channel();
        let op_cancel = cancel.clone();
        CallHandle::spawn(
            async move { or_cancel(sandbox.exec(&command, options), &op_cancel).await? },
            cancel,
            events_rx,
        )
    }

    /// The stored key of the session `name`: inside an action scope, under its prefix.
    fn key(&self, name: &str) -> SessionKey {
        SessionKey::new(
            self.shared.instance_id.clone(),
            format!("{}{name}", self.shared.session_prefix),
        )
    }

    /// Opens an existing session, sharing its in-memory state with other open handles.
    async fn open(&self, name: &str) -> Result<Session> {
        if let Some(existing) = self.lookup_open(name) {
            return Ok(existing);
        }
        let key = self.key(name);
        let stored_name = key.session.clone();
        let log = self.load(&key).await?;
        let fresh = Arc::new(SessionShared::opened(Arc::clone(&self.shared), key, log));
        let mut open = self.shared.open_sessions.lock().map_err(|_| poisoned())?;
        // Another caller may have opened it while we loaded; keep theirs.
        if let Some(existing) = open.get(&stored_name).and_then(Weak::upgrade) {
            return Ok(Session::from_shared(existing));
        }
        open.retain(|_, weak| weak.strong_count() > 0);
        open.insert(stored_name, Arc::downgrade(&fresh));
        Ok(Session::from_shared(fresh))
    }

    /// The log of `key`: the runtime's cached copy brought up to date with the records
    /// appended after it (nothing else is read), else the whole stored log.
    async fn load(&self, key: &SessionKey) -> Result<CachedLog> {
        let store = &self.shared.store;
        let not_found = || FlueError::SessionNotFound {
            session: key.session.clone(),
        };
        if let Some(mut cached) = self
            .shared
            .log_cache
            .as_ref()
            .and_then(|cache| cache.take(key))
        {
            let tail = store
                .load(key, cached.version)
                .await?
                .ok_or_else(not_found)?;
            let tail_version = tail.version;
            let continues = tail.created_at == cached.created_at
                && u64::try_from(tail.records.len())
                    .is_ok_and(|n| cached.version.checked_add(n) == Some(tail_version));
            if continues {
                let tail: Vec<_> = tail
                    .records
                    .into_iter()
                    .map(|stored| stored.record)
                    .collect();
                cached.index.extend(&tail);
                cached.records.extend(tail);
                cached.version = tail_version;
                return Ok(cached);
            }
            // The session was deleted and created again meanwhile: read it whole.
        }
        let log = store.load(key, 0).await?.ok_or_else(not_found)?;
        let records: Vec<_> = log
            .records
            .into_iter()
            .map(|stored| stored.record)
            .collect();
        Ok(CachedLog {
            version: log.version,
            created_at: log.created_at,
            index: LogIndex::of(&records),
            records,
        })
    }

    fn lookup_open(&self, name: &str) -> Option<Session> {
        let open = self.shared.open_sessions.lock().ok()?;
        open.get(&self.key(name).session)
            .and_then(Weak::upgrade)
            .map(Session::from_shared)
    }
}

/// Session management for one harness.
#[derive(Debug)]
pub struct Sessions<'a> {
    harness: &'a Harness,
}

impl Sessions<'_> {
    /// Loads an existing session; [`FlueError::SessionNotFound`] if missing.
    pub async fn get(&self, name: &str) -> Result<Session> {
        check_session_name(name)?;
        self.harness.open(name).await
    }

    /// Creates a session; [`FlueError::SessionAlreadyExists`] if present.
    pub async fn create(&self, name: &str) -> Result<Session> {
        check_session_name(name)?;
        self.harness
            .shared
            .store
            .create(&self.harness.key(name))
            .await?;
        self.harness.open(name).await
    }

    /// Deletes a session's stored state (and its task sessions); missing is fine;
    /// [`FlueError::SessionBusy`] while an operation runs on it, and
    /// [`FlueError::ConversationBusy`] (kind `session_busy`) while the conversation it belongs
    /// to has a submission queued, running or waiting (the store refuses; nothing is deleted).
    pub async fn delete(&self, name: &str) -> Result<()> {
        check_session_name(name)?;
        match self.harness.lookup_open(name) {
            Some(session) => session.delete().await,
            None => {
                let shared = &self.harness.shared;
                let key = self.harness.key(name);
                if let Some(cache) = &shared.log_cache {
                    cache.forget(&key);
                }
                crate::task::delete_task_sessions(shared, &key.session).await?;
                shared.store.delete(&key).await
            }
        }
    }

    /// The stored sessions of this agent instance: at the root every one (task sessions and
    /// the sessions of action scopes included); inside an action scope only the sessions it
    /// opened, named as it named them.
    pub async fn list(&self) -> Result<Vec<SessionSummary>> {
        let shared = &self.harness.shared;
        let sessions = shared.store.list(&shared.instance_id).await?;
        if shared.session_prefix.is_empty() {
            return Ok(sessions);
        }
        Ok(sessions
            .into_iter()
            .filter_map(|summary| {
                let name = summary.session.strip_prefix(&shared.session_prefix)?;
                // Sessions of action scopes nested below this one stay out.
                if name.starts_with(ACTION_SCOPE_PREFIX) {
                    return None;
                }
                Some(SessionSummary {
                    session: name.to_owned(),
                    ..summary
                })
            })
            .collect())
    }
}

/// Checks a conversation (agent instance) id, the CLI's `--id` and the HTTP server's
/// `/agents/<agent>/<id>`: every frontend calls this before using an id a user gave.
///
/// An id is 1 to [`MAX_INSTANCE_ID_CHARS`](flue_protocol::MAX_INSTANCE_ID_CHARS) characters, none of
/// them whitespace, a control character (terminal escapes), an invisible formatting character
/// (bidirectional overrides, zero-width spaces) or a slash (`/`, `\`), and is not `.` or `..`.
/// Ticket numbers (`PROJ-1234`, `#812`), email addresses, user ids, UUIDs and ULIDs all pass;
/// ids name conversations in URLs, logs and terminals, where the refused characters would
/// mislead. The rule is flue-protocol's [`check_instance_id`](flue_protocol::check_instance_id).
///
/// Fails with [`FlueError::InvalidInstanceId`] (kind `invalid_id`) saying what is wrong.
///
/// ```
/// assert!(flue_core::check_instance_id("alice@example.com").is_ok());
/// assert!(flue_core::check_instance_id("PROJ-1234").is_ok());
/// let err = flue_core::check_instance_id("two words").unwrap_err();
/// assert_eq!(err.kind(), "invalid_id");
/// ```
pub fn check_instance_id(id: &str) -> Result<()> {
    flue_protocol::check_instance_id(id).map_err(FlueError::from)
}

/// Rejects empty, overlong and reserved session names.
pub(crate) fn check_session_name(name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        "a session name must not be empty"
    } else if name.len() > 256 {
        "a session name is at most 256 bytes"
    } else if name.starts_with(TASK_SESSION_PREFIX) {
        "names starting with \"task:\" are reserved for task sessions"
    } else if name.starts_with(ACTION_SCOPE_PREFIX) {
        "names starting with \"action:\" are reserved for the sessions of action scopes"
    } else if name.chars().any(char::is_control) {
        "a session name must not contain control characters"
    } else {
        return Ok(());
    };
    Err(FlueError::InvalidSessionName {
        name: name.to_owned(),
        reason: reason.to_owned(),
    })
}

/// The agent's default role and every subagent's exist among `roles`.
fn check_role_references(agent: &ResolvedAgent, roles: &Roles) -> Result<()> {
    fn visit(profiles: &[AgentProfile], roles: &Roles, problems: &mut Vec<String>) {
        for profile in profiles {
            if let Some(role) = &profile.role
                && let Err(err) = roles.get(role)
            {
                let name = profile.name.as_deref().unwrap_or("?");
                problems.push(format!("subagent {name:?}: {err}"));
            }
            visit(&profile.subagents, roles, problems);
        }
    }
    let mut problems = Vec::new();
    if let Some(role) = &agent.role
        && let Err(err) = roles.get(role)
    {
        problems.push(format!("agent {:?}: {err}", agent.name));
    }
    visit(&agent.subagents, roles, &mut problems);
    if problems.is_empty() {
        return Ok(());
    }
    Err(FlueError::config(problems.join("; ")))
}

fn poisoned() -> FlueError {
    FlueError::RuntimeStopped {
        message: "a session registry lock was poisoned by a panic".into(),
    }
}

async fn discover_workspace_context(sandbox: &dyn Sandbox, cwd: &str) -> Result<Option<String>> {
    let path = normalize_path(cwd, "AGENTS.md")?;
    match sandbox.read_file(&path).await {
        Ok(text) => Ok(Some(text)),
        Err(FlueError::Sandbox {
            reason: SandboxErrorReason::NotFound,
            ..
        }) => Ok(None),
        Err(err) => Err(err),
    }
}

/// `"<what> a, b"`, or `"there are none"`.
fn listing(what: &str, names: &[String]) -> String {
    if names.is_empty() {
        "there are none".to_owned()
    } else {
        format!("{what} {}", names.join(", "))
    }
}
