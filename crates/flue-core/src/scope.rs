//! The agent a session runs as: the root agent, or the subagent profile a task selected.
//!
//! Every session carries an [`AgentScope`]. A root session's scope is the harness's resolved
//! agent plus the workspace skills; a task's scope is derived from its parent's (see
//! `task::child_scope`). The agent loop reads instructions, tools, skills, model, thinking,
//! compaction and the turn limit from the scope, never from the harness, so a task runs with
//! its own configuration inside the shared harness.

use std::sync::Arc;

use flue_protocol::ThinkingLevel;

use crate::config::{AgentProfile, Compaction, ResolvedAgent, Skill};
use crate::error::{FlueError, Result};
use crate::skill::SkillCatalog;
use crate::tool::{ToolDefinition, ToolSource};

/// The configuration one session runs with.
#[derive(Clone, Debug)]
pub(crate) struct AgentScope {
    /// Instructions, placed before the workspace context.
    pub(crate) instructions: String,
    /// Default model specifier.
    pub(crate) model: Option<String>,
    /// Default thinking level.
    pub(crate) thinking: ThinkingLevel,
    /// Compaction settings (inherited by subagents that set none).
    pub(crate) compaction: Compaction,
    /// Model-callable tools of the agent (built-in session tools are added per call).
    pub(crate) tools: Vec<ToolDefinition>,
    /// Tool lists read again before each model turn, offered after `tools`.
    pub(crate) tool_sources: Vec<Arc<dyn ToolSource>>,
    /// The skills this session can run and load.
    pub(crate) skills: SkillCatalog,
    /// Profiles available to tasks.
    pub(crate) subagents: Vec<AgentProfile>,
    /// Whether the model is offered the `task` tool.
    pub(crate) task_tool: bool,
    /// Turn limit per operation.
    pub(crate) max_turns: u32,
    /// Working directory inside the sandbox.
    pub(crate) cwd: String,
    /// Default role of calls, unless a call or the session names another.
    pub(crate) role: Option<String>,
}

impl AgentScope {
    /// The scope of root sessions: the agent's registered skills plus the workspace skills. A
    /// registered skill with the name of a workspace skill is an [`FlueError::InvalidConfig`].
    pub(crate) fn root(
        agent: &ResolvedAgent,
        workspace_skills: &[Skill],
        cwd: String,
    ) -> Result<Self> {
        let mut problems = Vec::new();
        for skill in workspace_skills {
            if agent
                .skills
                .iter()
                .any(|registered| registered.name == skill.name)
            {
                problems.push(format!(
                    "skill {:?} is registered on the agent and also discovered in the workspace \
                     (.agents/skills/); rename one of them",
                    skill.name
                ));
            }
        }
        if !problems.is_empty() {
            return Err(FlueError::config(problems.join("; ")));
        }
        let all = agent.skills.iter().chain(workspace_skills).cloned();
        let tools = tools_and_actions(&agent.tools, &agent.actions);
        Ok(Self {
            instructions: agent.instructions.clone(),
            model: agent.model.clone(),
            thinking: agent.thinking,
            compaction: agent.compaction.clone(),
            tools,
            tool_sources: agent.tool_sources.clone(),
            skills: SkillCatalog::new(all)?,
            subagents: agent.subagents.clone(),
            task_tool: agent.task_tool,
            max_turns: agent.max_turns,
            cwd,
            role: agent.role.clone(),
        })
    }

    /// The names of the declared subagents, in declaration order.
    pub(crate) fn subagent_names(&self) -> Vec<String> {
        self.subagents
            .iter()
            .filter_map(|profile| profile.name.clone())
            .collect()
    }
}

/// A scope's tools: the declared tools, then each action as the tool the model calls.
pub(crate) fn tools_and_actions(
    tools: &[ToolDefinition],
    actions: &[ToolDefinition],
) -> Vec<ToolDefinition> {
    tools.iter().chain(actions).cloned().collect()
}
