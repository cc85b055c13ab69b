//! A host: one store and the agent set currently served, swappable on reload.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use flue_core::{
    AgentRegistry, BoxFuture, FlueError, HarnessBuilder, MemoryStore, store::DynSessionStore,
};

use crate::sandbox::{Cleanups, OpenSandbox};
use crate::{AgentHarness, AgentSet, HarnessOptions, HostError, open_store};

/// What `flue run`, `flue serve` and `flue dev` hold: the conversation store and the current
/// [`AgentSet`].
///
/// Cheap to share (`Arc<Host>`). Harnesses opened from it use its store;
/// [`replace_agents`](Host::replace_agents) swaps the agent set for harnesses opened later,
/// while harnesses already open keep the configuration they were opened with.
///
/// A `Host` is also the [`AgentRegistry`] of a submission runtime
/// ([`AgentRuntime`](flue_core::AgentRuntime)): each harness the runtime builds gets its own
/// sandbox, deleted (Daytona) when the runtime drops the harness; [`Host::close`] awaits those
/// deletions and closes the MCP servers.
pub struct Host {
    store: Arc<dyn DynSessionStore>,
    agents: RwLock<Arc<AgentSet>>,
    options: HarnessOptions,
    /// Sandboxes [`Host::preflight`] opened, handed to the next harness of their agent.
    preopened: Mutex<BTreeMap<String, OpenSandbox>>,
    cleanups: Cleanups,
}

impl Host {
    /// A host on the workspace's own store, `.flue/flue.db` under the agent set's root
    /// (created on first use).
    pub fn open(agents: AgentSet) -> Result<Self, HostError> {
        let store = Arc::new(open_store(agents.root())?);
        Ok(Self::with_store(agents, store))
    }

    /// A host on another store (an embedder's, a test's memory store). Its harnesses answer
    /// MCP servers' questions with live pending actions
    /// ([`PendingActionElicitor`](flue_connectors::PendingActionElicitor)): listed with the
    /// conversation's actions and answered by any process, declined after the server's
    /// `elicitation_timeout_ms`.
    pub fn with_store(agents: AgentSet, store: Arc<dyn DynSessionStore>) -> Self {
        Self {
            store,
            agents: RwLock::new(Arc::new(agents)),
            options: HarnessOptions::new()
                .with_mcp_elicitor(Arc::new(flue_connectors::PendingActionElicitor)),
            preopened: Mutex::new(BTreeMap::new()),
            cleanups: Cleanups::default(),
        }
    }

    /// Overrides (`--model`, `--sandbox`, who answers MCP servers' questions) for every
    /// harness built through the [`AgentRegistry`] interface; they replace the defaults whole.
    #[must_use]
    pub fn with_harness_options(mut self, options: HarnessOptions) -> Self {
        self.options = options;
        self
    }

    /// Checks that agent `agent` can run, before any message is admitted: everything a
    /// harness build checks (configuration, roles, models and keys), with its sandbox opened
    /// and its MCP servers connected. The sandbox is kept for the next harness of the agent
    /// that the [`AgentRegistry`] interface builds. Returns warnings for the user.
    pub async fn preflight(&self, agent: &str) -> Result<Vec<String>, HostError> {
        let agents = self.agents();
        let prepared = agents.prepare(agent, &self.options).await?;
        let sandbox = agents.open_sandbox(&prepared).await?;
        let built = prepared
            .builder
            .with_sandbox(Arc::clone(&sandbox.sandbox))
            .with_store(Arc::new(MemoryStore::new()))
            .build()
            .await;
        if let Err(err) = built {
            sandbox.close().await;
            return Err(err.into());
        }
        let replaced = self
            .preopened
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(agent.to_owned(), sandbox);
        if let Some(replaced) = replaced {
            replaced.close().await;
        }
        Ok(prepared.warnings)
    }

    /// The conversation store.
    pub fn store(&self) -> &Arc<dyn DynSessionStore> {
        &self.store
    }

    /// The agent set harnesses are opened from now.
    pub fn agents(&self) -> Arc<AgentSet> {
        let agents = self.agents.read().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(&agents)
    }

    /// Serves `agents` from now on; returns the set it replaces.
    pub fn replace_agents(&self, agents: AgentSet) -> Arc<AgentSet> {
        let mut current = self.agents.write().unwrap_or_else(PoisonError::into_inner);
        std::mem::replace(&mut *current, Arc::new(agents))
    }

    /// Closes what the current agent set holds open (its MCP servers); returns failures as
    /// warnings. A set replaced earlier is closed by whoever holds it
    /// ([`replace_agents`](Host::replace_agents) returns it).
    pub async fn close(&self) -> Vec<String> {
        let preopened = std::mem::take(
            &mut *self
                .preopened
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        let mut warnings = Vec::new();
        for (_, sandbox) in preopened {
            warnings.extend(sandbox.close().await);
        }
        warnings.extend(self.cleanups.wait().await);
        warnings.extend(self.agents().close().await);
        warnings
    }

    async fn registry_builder(&self, agent: &str) -> Result<HarnessBuilder, HostError> {
        let agents = self.agents();
        let prepared = agents.prepare(agent, &self.options).await?;
        let preopened = self
            .preopened
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(agent);
        let sandbox = match preopened {
            Some(sandbox) => sandbox,
            None => agents.open_sandbox(&prepared).await?,
        };
        let sandbox = sandbox.into_owned(&self.cleanups);
        // Seeded conversations get their files written once the instance id is known.
        Ok(match &self.options.conversation_sandboxes {
            Some(sandboxes) => {
                prepared
                    .builder
                    .with_sandbox_factory(Arc::new(crate::sandbox::SeedingFactory {
                        sandbox,
                        sandboxes: Arc::clone(sandboxes),
                    }))
            }
            None => prepared.builder.with_sandbox(sandbox),
        })
    }

    /// The tools agent `agent` of the current agent set offers its model, and its permission
    /// rules, with this host's options. See [`AgentSet::offered_tools`].
    pub(crate) async fn offered_tools(
        &self,
        agent: &str,
    ) -> Result<
        (
            Vec<flue_core::ToolDefinition>,
            Vec<flue_core::permission::PermissionRule>,
        ),
        HostError,
    > {
        self.agents().offered_tools(agent, &self.options).await
    }

    /// Opens agent `agent` for `instance_id` with this host's options (the console's tools run
    /// by hand). See [`Host::open_harness`].
    pub(crate) async fn open_harness_here(
        &self,
        agent: &str,
        instance_id: &str,
    ) -> Result<AgentHarness, HostError> {
        self.open_harness(agent, instance_id, &self.options).await
    }

    /// Opens agent `agent` for conversation `instance_id` from the current agent set, on the
    /// host's store. See [`AgentSet::open`].
    pub async fn open_harness(
        &self,
        agent: &str,
        instance_id: &str,
        options: &HarnessOptions,
    ) -> Result<AgentHarness, HostError> {
        let agents = self.agents();
        agents
            .open(agent, instance_id, Arc::clone(&self.store), options)
            .await
    }
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("agents", &self.agents())
            .finish_non_exhaustive()
    }
}

impl AgentRegistry for Host {
    fn agent_names(&self) -> Vec<String> {
        self.agents().workspace().agents.keys().cloned().collect()
    }

    fn contains(&self, agent: &str) -> bool {
        self.agents().workspace().agents.contains_key(agent)
    }

    fn forget_conversation<'a>(&'a self, key: &'a flue_core::ConversationKey) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            // The copies command hooks read as `transcript_path` go with the conversation.
            let agents = self.agents();
            let removed = flue_core::hook::remove_transcripts(agents.root(), &key.instance_id());
            if let Err(err) = removed {
                tracing::warn!("cannot remove the hook transcripts of {key}: {err}");
            }
        })
    }

    fn harness_builder<'a>(
        &'a self,
        agent: &'a str,
    ) -> BoxFuture<'a, flue_core::Result<HarnessBuilder>> {
        Box::pin(async move { self.registry_builder(agent).await.map_err(FlueError::from) })
    }

    /// A workspace the user has not trusted runs no agent that needs trust.
    fn check_runnable<'a>(&'a self, agent: &'a str) -> BoxFuture<'a, flue_core::Result<()>> {
        let _ = agent;
        Box::pin(async move {
            self.agents()
                .require_trust()
                .map_err(|err| FlueError::InvalidRequest {
                    message: err.to_string(),
                })
        })
    }

    /// From the configuration alone (the default would open a sandbox).
    fn check_options<'a>(
        &'a self,
        agent: &'a str,
        options: &'a flue_core::MessageOptions,
    ) -> BoxFuture<'a, flue_core::Result<()>> {
        Box::pin(async move { self.agents().check_options(agent, options).await })
    }

    /// The env's secrets, as every harness of the set gets them (the default would open a
    /// sandbox at every dispatch).
    fn redactor<'a>(
        &'a self,
        _agent: &'a str,
    ) -> BoxFuture<'a, flue_core::Result<flue_core::Redactor>> {
        Box::pin(async move { self.agents().redactor() })
    }
}
