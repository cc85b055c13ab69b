//! The per-call overlay: what one call adds on top of its session's agent, never persisted.
//!
//! A [`CallOverlay`] holds the call's role (its own, else the session's default) and, for
//! `session.skill`, the skill being run. The agent loop takes it as an input: it builds the
//! call's system prompt from it and lets the role choose the model and thinking level when the
//! call does not. The session log holds only the conversation, so the next call starts clean.

use std::sync::Arc;

use flue_protocol::ThinkingLevel;

use crate::config::Skill;
use crate::error::Result;
use crate::role::{Role, Roles};
use crate::scope::AgentScope;
use crate::skill;

/// What one call adds to the system prompt and model choice.
#[derive(Clone, Debug, Default)]
pub(crate) struct CallOverlay {
    /// The call's role.
    pub(crate) role: Option<Arc<Role>>,
    /// The skill `session.skill` runs.
    pub(crate) skill: Option<Arc<Skill>>,
}

impl CallOverlay {
    /// The overlay of a call in `role` (the call's own role, else its session's default);
    /// [`crate::error::FlueError::UnknownRole`] when the role does not exist.
    pub(crate) fn resolve(
        roles: &Roles,
        role: Option<String>,
        skill: Option<Arc<Skill>>,
    ) -> Result<Self> {
        let role = role.map(|name| roles.get(&name)).transpose()?;
        Ok(Self { role, skill })
    }

    /// The role's model, which a call's own model overrides.
    pub(crate) fn model(&self) -> Option<String> {
        self.role.as_ref().and_then(|role| role.model.clone())
    }

    /// The role's thinking level, which a call's own level overrides.
    pub(crate) fn thinking(&self) -> Option<ThinkingLevel> {
        self.role.as_ref().and_then(|role| role.thinking)
    }

    /// The system prompt of the call: the agent's instructions, the workspace context, the
    /// role, the skill list, then the skill being run, separated by blank lines.
    pub(crate) fn system_prompt(
        &self,
        scope: &AgentScope,
        workspace_context: Option<&str>,
    ) -> String {
        let role = self.role.as_ref().map(|role| {
            format!(
                "# Role: {}\n\nFor this request you act in this role.\n\n{}",
                role.name,
                role.instructions.trim()
            )
        });
        let catalog = skill::catalog_section(&scope.skills);
        let running = self.skill.as_deref().map(skill::skill_section);
        let parts = [
            Some(scope.instructions.as_str()),
            workspace_context,
            role.as_deref(),
            catalog.as_deref(),
            running.as_deref(),
        ];
        let parts: Vec<&str> = parts
            .into_iter()
            .flatten()
            .map(str::trim)
            .filter(|part| !part.is_empty())
            .collect();
        parts.join("\n\n")
    }
}
