//! A host: one store and the agent set currently served, swappable on reload.

use std::sync::{Arc, PoisonError, RwLock};

use flue_core::SessionStore;

use crate::{AgentHarness, AgentSet, HarnessOptions, HostError, open_store};

/// What `flue run`, `flue serve` and `flue dev` hold: the conversation store and the current
/// [`AgentSet`].
///
/// Cheap to share (`Arc<Host>`). Harnesses opened from it use its store;
/// [`replace_agents`](Host::replace_agents) swaps the agent set for harnesses opened later,
/// while harnesses already open keep the configuration they were opened with.
pub struct Host {
    store: Arc<dyn SessionStore>,
    agents: RwLock<Arc<AgentSet>>,
}

impl Host {
    /// A host on the workspace's own store, `.flue/flue.db` under the agent set's root
    /// (created on first use).
    pub fn open(agents: AgentSet) -> Result<Self, HostError> {
        let store = Arc::new(open_store(agents.root())?);
        Ok(Self::with_store(agents, store))
    }

    /// A host on another store (an embedder's, a test's memory store).
    pub fn with_store(agents: AgentSet, store: Arc<dyn SessionStore>) -> Self {
        Self {
            store,
            agents: RwLock::new(Arc::new(agents)),
        }
    }

    /// The conversation store.
    pub fn store(&self) -> &Arc<dyn SessionStore> {
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
        self.agents().close().await
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
