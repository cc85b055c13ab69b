//! Roles: persona overlays applied to one call, never persisted.
//!
//! A [`Role`] adds a section to the system prompt of the call that names it (or of every call
//! of a session whose default role it is) and may choose the model and thinking level. Model
//! precedence for a call is: the call's own `model`, then the role's, then the agent's. Nothing
//! of a role is written to the session log: the next call starts without it.

use std::collections::BTreeMap;
use std::sync::Arc;

use flue_protocol::ThinkingLevel;

use crate::error::{FlueError, Result};

/// A persona overlay: who the model is for one call, and optionally which model it runs on.
///
/// ```
/// use flue_core::{Role, ThinkingLevel};
/// let role = Role::new("security-engineer", "Thinks like an attacker")
///     .with_instructions("You are a security engineer. Prioritise threat modelling.")
///     .with_thinking(ThinkingLevel::High);
/// assert_eq!(role.name, "security-engineer");
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Role {
    /// Role name (`.agents/roles/<name>.md`).
    pub name: String,
    /// What the role is for.
    pub description: String,
    /// The persona text added to the system prompt.
    pub instructions: String,
    /// Model override for calls in this role, `<provider>/<model>`.
    pub model: Option<String>,
    /// Thinking level for calls in this role.
    pub thinking: Option<ThinkingLevel>,
}

impl Role {
    /// A role with a name and a description.
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            ..Self::default()
        }
    }

    /// Sets the persona text.
    #[must_use]
    pub fn with_instructions(mut self, instructions: impl Into<String>) -> Self {
        self.instructions = instructions.into();
        self
    }

    /// Sets the model override.
    #[must_use]
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Sets the thinking level.
    #[must_use]
    pub fn with_thinking(mut self, thinking: ThinkingLevel) -> Self {
        self.thinking = Some(thinking);
        self
    }
}

/// The roles of a harness, by name.
#[derive(Clone, Debug, Default)]
pub(crate) struct Roles {
    roles: BTreeMap<String, Arc<Role>>,
}

impl Roles {
    /// Indexes `roles`; a repeated or invalid name is an [`FlueError::InvalidConfig`].
    pub(crate) fn new(roles: Vec<Role>) -> Result<Self> {
        let mut problems = Vec::new();
        let mut by_name = BTreeMap::new();
        for role in roles {
            if let Err(reason) = crate::util::check_name(&role.name) {
                problems.push(format!("role name {:?} {reason}", role.name));
            }
            if let Some(model) = &role.model
                && let Err(err) = crate::model::ModelSpec::parse(model)
            {
                problems.push(format!("role {:?}: {err}", role.name));
            }
            let name = role.name.clone();
            if by_name.insert(name.clone(), Arc::new(role)).is_some() {
                problems.push(format!("duplicate role {name:?}"));
            }
        }
        if !problems.is_empty() {
            return Err(FlueError::config(problems.join("; ")));
        }
        Ok(Self { roles: by_name })
    }

    /// The role called `name`, or [`FlueError::UnknownRole`] listing the roles.
    pub(crate) fn get(&self, name: &str) -> Result<Arc<Role>> {
        self.roles
            .get(name)
            .cloned()
            .ok_or_else(|| FlueError::UnknownRole {
                role: name.to_owned(),
                known: self.names(),
            })
    }

    /// The role names, sorted.
    pub(crate) fn names(&self) -> Vec<String> {
        self.roles.keys().cloned().collect()
    }

    /// Every role, by name.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Role> {
        self.roles.values().map(AsRef::as_ref)
    }
}
