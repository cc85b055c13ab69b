//! Turning a loaded workspace's agents into flue-core configuration.

use flue_core::{
    AgentConfig, AgentProfile, FlueError, Role, Skill, permission::PermissionRule,
    permission::PermissionSource,
};

use crate::agent_file::AgentFile;
use crate::role_file::RoleFile;
use crate::skill_file::SkillFile;
use crate::workspace::Workspace;

impl Workspace {
    /// The flue-core configuration of the agent `name`.
    ///
    /// - model and thinking: the agent's, else the flue.toml defaults (`model: false`: no
    ///   model, every call chooses one);
    /// - instructions: the file's body (`None` when empty); the workspace context
    ///   ([`Workspace::context`]) is not included;
    /// - tools: the built-in tools named in `tools`, then its command tools, then its custom
    ///   tools;
    /// - result: the agent's `result:` schema, for durable submissions that ask for none;
    /// - subagents: a profile per name, built recursively from their files (see below);
    /// - compaction, durability, max_turns, role, cwd: the agent's;
    /// - budget: the agent's limits, each unset one from flue.toml's `[defaults.budget]`;
    /// - permissions: the flue.toml `[defaults.permissions]`, then the agent's `permissions:`
    ///   (which win where both match; subagents run under the root agent's rules);
    /// - skills: none registered. A root agent runs with every workspace skill, which the
    ///   caller passes to the harness ([`Workspace::harness_skills`]); its `skills` list is
    ///   checked to exist at load.
    ///
    /// A subagent profile carries its own name, description, instructions, tools, subagents,
    /// role, the skills its `skills` list names (with their bodies and resources: a subagent
    /// is self-contained, so these are all the skills it gets), and its own model, thinking
    /// and compaction when its file sets them (unset, they are inherited from the parent at
    /// run time, so flue.toml defaults are not applied). It never carries durability.
    ///
    /// Fails with [`FlueError::InvalidConfig`] when there is no such agent, or with the error of
    /// a built-in tool that cannot be created.
    pub fn agent_config(&self, name: &str) -> Result<AgentConfig, FlueError> {
        let agent = self.agent_file(name)?;
        let defaults = &self.config.defaults;
        let mut config = AgentConfig::new()
            .with_name(&agent.name)
            .with_tools(tools(agent)?);
        config.description.clone_from(&agent.description);
        if agent.model_per_call {
            config = config.with_model_per_call();
        } else {
            config.model = agent.model.clone().or_else(|| defaults.model.clone());
        }
        config.instructions = instructions(agent);
        config.thinking = agent.thinking.or(defaults.thinking);
        config.compaction.clone_from(&agent.compaction);
        config.durability.clone_from(&agent.durability);
        config.max_turns = agent.max_turns;
        config.budget = match (agent.budget, defaults.budget) {
            (Some(own), Some(workspace)) => Some(own.or(workspace)),
            (own, workspace) => own.or(workspace),
        };
        config.task_tool = agent.task;
        config.role.clone_from(&agent.role);
        config.cwd.clone_from(&agent.cwd);
        // Hooks run at the workspace root: flue.toml's first, then the agent file's.
        let http_client: std::sync::Arc<dyn flue_core::hook::HttpHookClient> =
            std::sync::Arc::new(flue_providers::ReqwestHookClient::new());
        for spec in self.config.hooks.iter().chain(&agent.hooks) {
            let hook = flue_core::hook::CommandHook::new(spec.clone(), self.root.clone())?
                .with_http_client(std::sync::Arc::clone(&http_client));
            config = config.with_hook(std::sync::Arc::new(hook));
        }
        config.memory = agent.memory;
        config.hold_reply_until_stop = agent.hold_reply_until_stop;
        config.result.clone_from(&agent.result);
        let rules =
            defaults
                .permissions
                .iter()
                .map(|(pattern, permission)| (pattern, permission, PermissionSource::Defaults))
                .chain(agent.permissions.iter().map(|(pattern, permission)| {
                    (pattern, permission, PermissionSource::AgentFile)
                }));
        for (pattern, permission, source) in rules {
            config = config.with_permission_rule(PermissionRule::new(pattern, *permission, source));
        }
        let mut chain = vec![agent.name.clone()];
        for subagent in &agent.subagents {
            config = config.with_subagent(self.subagent_profile(subagent, &mut chain)?);
        }
        Ok(config)
    }

    /// The profile of the subagent `name`, reached through the agents in `chain`.
    fn subagent_profile(
        &self,
        name: &str,
        chain: &mut Vec<String>,
    ) -> Result<AgentProfile, FlueError> {
        if chain.iter().any(|entry| entry == name) {
            // Loading rejects cycles; this guards workspaces whose fields were edited since.
            return Err(FlueError::config(format!(
                "circular subagents: {} -> {name}",
                chain.join(" -> ")
            )));
        }
        let agent = self.agent_file(name)?;
        let mut profile = AgentProfile::new(&agent.name);
        profile.tools = tools(agent)?;
        chain.push(agent.name.clone());
        for subagent in &agent.subagents {
            profile
                .subagents
                .push(self.subagent_profile(subagent, chain)?);
        }
        chain.pop();
        profile.description.clone_from(&agent.description);
        profile.model.clone_from(&agent.model);
        profile.model_per_call = agent.model_per_call;
        profile.instructions = instructions(agent);
        profile.thinking = agent.thinking;
        profile.compaction.clone_from(&agent.compaction);
        profile.role.clone_from(&agent.role);
        profile.task_tool = agent.task;
        for skill in &agent.skills {
            let file = self.skills.get(skill).ok_or_else(|| {
                FlueError::config(format!(
                    "unknown skill `{skill}` in {}: add .agents/skills/{skill}.md",
                    agent.path
                ))
            })?;
            profile.skills.push(file.to_skill());
        }
        Ok(profile)
    }

    /// The workspace skills, for [`flue_core::HarnessBuilder::with_workspace_skills`].
    pub fn harness_skills(&self) -> Vec<Skill> {
        self.skills.values().map(SkillFile::to_skill).collect()
    }

    /// The roles, for [`flue_core::HarnessBuilder::with_roles`].
    pub fn harness_roles(&self) -> Vec<Role> {
        self.roles.values().map(RoleFile::to_role).collect()
    }

    fn agent_file(&self, name: &str) -> Result<&AgentFile, FlueError> {
        self.agents.get(name).ok_or_else(|| {
            let known: Vec<&str> = self.agents.keys().map(String::as_str).collect();
            FlueError::config(format!(
                "unknown agent `{name}`: there is no agents/{name}.md (known agents: {})",
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            ))
        })
    }
}

/// The built-in tools an agent file names, then its command tools.
fn tools(agent: &AgentFile) -> Result<Vec<flue_core::ToolDefinition>, FlueError> {
    let mut tools = flue_core::tool::builtin_tools(&agent.tools)?;
    for spec in &agent.command_tools {
        tools.push(spec.to_tool()?);
    }
    for decl in &agent.custom_tools {
        tools.push(decl.to_tool()?);
    }
    Ok(tools)
}

fn instructions(agent: &AgentFile) -> Option<String> {
    (!agent.instructions.is_empty()).then(|| agent.instructions.clone())
}
