//! Agent registries: how the runtime gets a harness for a conversation's agent.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::error::{FlueError, Result};
use crate::harness::HarnessBuilder;
use crate::redact::Redactor;
use crate::submission::wire::MessageOptions;
use crate::util::BoxFuture;
use flue_protocol::ConversationKey;

/// What an agent list shows about one agent: `GET /_flue/agents` on the wire, `flue serve`'s
/// and `flue dev`'s agent list. Grows over time: build it with [`AgentInfo::new`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct AgentInfo {
    /// The agent's name (its file name without `.md`; the URL segment).
    pub name: String,
    /// The agent's description, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The agent's model, `<provider>/<model>`, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The JSON Schema of the structured result its submissions settle with when they ask for
    /// none (`result:` in its file), if it declares one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
}

impl AgentInfo {
    /// An agent with a name only.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: None,
            model: None,
            result: None,
        }
    }

    /// Sets the description.
    #[must_use]
    pub fn with_description(mut self, description: Option<String>) -> Self {
        self.description = description;
        self
    }

    /// Sets the model specifier.
    #[must_use]
    pub fn with_model(mut self, model: Option<String>) -> Self {
        self.model = model;
        self
    }

    /// Sets the result schema.
    #[must_use]
    pub fn with_result(mut self, result: Option<serde_json::Value>) -> Self {
        self.result = result;
        self
    }
}

/// The agents a runtime serves, by name.
///
/// Implemented by the assembly layer (a workspace or bundle: providers, sandboxes, MCP servers)
/// and by embedders in code ([`StaticAgents`]). The runtime calls
/// [`AgentRegistry::harness_builder`] each time it starts working on a conversation of that
/// agent, then sets the conversation's instance id and store on the builder (overriding any the
/// registry set) and builds it; it calls [`AgentRegistry::contains`] on every dispatch.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an agent registry",
    label = "implement `flue_core::AgentRegistry` for this type"
)]
pub trait AgentRegistry: Send + Sync {
    /// The agent names, sorted.
    fn agent_names(&self) -> Vec<String>;

    /// Whether `agent` is served. The default looks it up in [`AgentRegistry::agent_names`].
    fn contains(&self, agent: &str) -> bool {
        self.agent_names().iter().any(|name| name == agent)
    }

    /// A harness builder for `agent`, fully configured except for instance id and store.
    /// [`FlueError::UnknownAgent`] when the agent is not served.
    fn harness_builder<'a>(&'a self, agent: &'a str) -> BoxFuture<'a, Result<HarnessBuilder>>;

    /// The conversation `key` was deleted: drop what the registry keeps of it outside the
    /// store (the transcript copies its hooks read). Called after the store deleted it; the
    /// default keeps nothing.
    fn forget_conversation<'a>(&'a self, key: &'a ConversationKey) -> BoxFuture<'a, ()> {
        let _ = key;
        Box::pin(async {})
    }

    /// Whether `agent` may run at all now, checked on every dispatch before anything is
    /// stored: an error refuses the message with its kind and message (a workspace the user
    /// has not trusted, say). The default lets every served agent run.
    fn check_runnable<'a>(&'a self, agent: &'a str) -> BoxFuture<'a, Result<()>> {
        let _ = agent;
        Box::pin(async { Ok(()) })
    }

    /// Checks what a message to `agent` chooses for its run (its model, role and skill; see
    /// [`MessageOptions`]) before the message is admitted: [`FlueError::InvalidRequest`]
    /// naming the field refuses it, and nothing is stored. Called by every dispatch whose
    /// message chooses something. The default asks the agent's harness builder
    /// ([`HarnessBuilder::check_message_options`]); a registry whose builders are costly to
    /// make (one that opens a sandbox) answers from its configuration instead.
    fn check_options<'a>(
        &'a self,
        agent: &'a str,
        options: &'a MessageOptions,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.harness_builder(agent)
                .await?
                .check_message_options(options)
                .await
        })
    }

    /// The redactor of the secrets `agent`'s harnesses know, which the runtime applies to a
    /// message's text (body, images, a signal's attribute values, a skill's arguments) before
    /// admitting it: the stored submission (served as the conversation's snapshot and stream)
    /// then holds no secret that the session record it becomes would not. Called by every
    /// dispatch.
    /// The default asks the agent's harness builder ([`HarnessBuilder::redactor`]); a
    /// registry whose builders are costly to make answers from its configuration instead.
    fn redactor<'a>(&'a self, agent: &'a str) -> BoxFuture<'a, Result<Redactor>> {
        Box::pin(async move { self.harness_builder(agent).await?.redactor() })
    }
}

type BuilderFn = dyn Fn() -> HarnessBuilder + Send + Sync;

/// A registry of agents defined in code: a name and a function making its harness builder.
///
/// ```
/// use flue_core::{AgentConfig, Harness, StaticAgents};
/// let agents = StaticAgents::new()
///     .with_agent("hello", || Harness::builder(AgentConfig::new().with_model("scripted/s.json")));
/// assert_eq!(flue_core::AgentRegistry::agent_names(&agents), vec!["hello".to_owned()]);
/// ```
#[derive(Clone, Default)]
pub struct StaticAgents {
    agents: BTreeMap<String, Arc<BuilderFn>>,
}

impl StaticAgents {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) an agent.
    #[must_use]
    pub fn with_agent(
        mut self,
        name: impl Into<String>,
        builder: impl Fn() -> HarnessBuilder + Send + Sync + 'static,
    ) -> Self {
        self.agents.insert(name.into(), Arc::new(builder));
        self
    }
}

impl fmt::Debug for StaticAgents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StaticAgents")
            .field("agents", &self.agents.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl AgentRegistry for StaticAgents {
    fn agent_names(&self) -> Vec<String> {
        self.agents.keys().cloned().collect()
    }

    fn contains(&self, agent: &str) -> bool {
        self.agents.contains_key(agent)
    }

    fn harness_builder<'a>(&'a self, agent: &'a str) -> BoxFuture<'a, Result<HarnessBuilder>> {
        Box::pin(async move {
            let builder = self
                .agents
                .get(agent)
                .ok_or_else(|| FlueError::UnknownAgent {
                    agent: agent.to_owned(),
                    known: self.agent_names(),
                })?;
            Ok(builder())
        })
    }
}
