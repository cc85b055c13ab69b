//! Agent profiles and runtime configuration, their validation and their merge rules.
//!
//! An [`AgentConfig`] is what an agent file or a Rust program declares; [`AgentConfig::resolve`]
//! merges it over its optional [`AgentProfile`] baseline and validates the result into a
//! [`ResolvedAgent`]. Merge rules: the profile is the baseline, scalars set on the agent replace
//! the profile's, lists concatenate, and then a duplicate name is an error.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use flue_protocol::{Budget, DurabilityConfig, ThinkingLevel};
use serde::{Deserialize, Serialize};

use crate::error::{FlueError, Result};
use crate::hook::Hook;
use crate::permission::{PermissionRule, PermissionSource, check_permission_pattern};
use crate::store::NoteLimits;
use crate::tool::{Permission, ToolDefinition, ToolSource};
use crate::util::check_name;

/// Default limit on model turns in one operation.
pub const DEFAULT_MAX_TURNS: u32 = 100;

/// Automatic compaction settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompactionConfig {
    /// Token headroom kept free before automatic compaction (model-aware default, at most 20000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserve_tokens: Option<u64>,
    /// Recent tokens kept verbatim after compaction (default 8000, capped at half of the
    /// window minus the reserve so that small windows can still be compacted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_recent_tokens: Option<u64>,
    /// Model used for summaries (default: the session's model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// Compaction: either disabled (`false`: only the threshold trigger is off) or configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Compaction {
    /// `compaction: false`: no threshold compaction; overflow recovery and manual still work.
    Disabled,
    /// Threshold compaction with these settings.
    Enabled(CompactionConfig),
}

impl Default for Compaction {
    fn default() -> Self {
        Self::Enabled(CompactionConfig::default())
    }
}

/// A skill: a catalog entry and, optionally, its instruction body and resource files.
///
/// Skills come from two places: the workspace (`.agents/skills/`, discovered by flue-build and
/// passed with [`crate::harness::HarnessBuilder::with_workspace_skills`]) and code (registered on an
/// agent or profile with `with_skill`). The system prompt lists every available skill; running
/// one (`session.skill`, or the model's `load_skill` tool) injects its body for that call only.
///
/// ```
/// use flue_core::Skill;
/// let skill = Skill::new("code-review", "Reviews a change for bugs and style")
///     .with_body("Read the diff, then list problems by severity.")
///     .with_resource("checklist.md", b"- naming\n- tests\n".to_vec());
/// assert_eq!(skill.resources.len(), 1);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Skill {
    /// Skill name.
    pub name: String,
    /// What the skill is for (shown to the model).
    pub description: String,
    /// The markdown body injected when the skill runs, when packaged.
    pub body: Option<String>,
    /// Resource files of a folder skill, by path relative to the skill folder (`/`-separated).
    pub resources: BTreeMap<String, Vec<u8>>,
    /// JSON Schema of the structured result of running this skill (`session.skill`) when the
    /// call asks for none of its own (`result:` in a skill file).
    pub result: Option<serde_json::Value>,
}

impl Skill {
    /// A skill with a name and a description, without a body.
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            ..Self::default()
        }
    }

    /// Sets the instruction body.
    #[must_use]
    pub fn with_body(mut self, body: impl Into<String>) -> Self {
        self.body = Some(body.into());
        self
    }

    /// Requires a structured result matching `schema` when the skill runs and the call asks
    /// for none of its own.
    #[must_use]
    pub fn with_result(mut self, schema: serde_json::Value) -> Self {
        self.result = Some(schema);
        self
    }

    /// Adds a resource file at `path` (relative to the skill folder).
    #[must_use]
    pub fn with_resource(mut self, path: impl Into<String>, content: Vec<u8>) -> Self {
        self.resources.insert(path.into(), content);
        self
    }
}

/// The setters [`AgentProfile`] and [`AgentConfig`] share, written once: each sets the field of
/// the same name, which both types declare (`model_per_call` also clears `model`).
macro_rules! agent_setters {
    () => {
        /// Sets the model specifier.
        #[must_use]
        pub fn with_model(mut self, model: impl Into<String>) -> Self {
            self.model = Some(model.into());
            self
        }

        /// `model: false`: every call must choose a model (see
        /// [`model_per_call`](Self::model_per_call)).
        #[must_use]
        pub fn with_model_per_call(mut self) -> Self {
            self.model = None;
            self.model_per_call = true;
            self
        }

        /// Offers (`true`, the default) or withholds the model's `task` tool (see
        /// [`AgentProfile::task_tool`]).
        #[must_use]
        pub fn with_task_tool(mut self, offered: bool) -> Self {
            self.task_tool = Some(offered);
            self
        }

        /// Sets the instructions.
        #[must_use]
        pub fn with_instructions(mut self, instructions: impl Into<String>) -> Self {
            self.instructions = Some(instructions.into());
            self
        }

        /// Adds a tool.
        #[must_use]
        pub fn with_tool(mut self, tool: ToolDefinition) -> Self {
            self.tools.push(tool);
            self
        }

        /// Adds a tool source: tools read again before each model turn (see [`ToolSource`]).
        #[must_use]
        pub fn with_tool_source(mut self, source: Arc<dyn ToolSource>) -> Self {
            self.tool_sources.push(source);
            self
        }

        /// Adds a skill.
        #[must_use]
        pub fn with_skill(mut self, skill: Skill) -> Self {
            self.skills.push(skill);
            self
        }

        /// Adds a subagent profile.
        #[must_use]
        pub fn with_subagent(mut self, subagent: AgentProfile) -> Self {
            self.subagents.push(subagent);
            self
        }

        /// Sets the thinking level.
        #[must_use]
        pub fn with_thinking(mut self, thinking: ThinkingLevel) -> Self {
            self.thinking = Some(thinking);
            self
        }

        /// Sets compaction.
        #[must_use]
        pub fn with_compaction(mut self, compaction: Compaction) -> Self {
            self.compaction = Some(compaction);
            self
        }

        /// Sets the default role.
        #[must_use]
        pub fn with_role(mut self, role: impl Into<String>) -> Self {
            self.role = Some(role.into());
            self
        }
    };
}

/// A reusable agent profile: a baseline for agents and a named subagent for tasks.
///
/// ```
/// use flue_core::AgentProfile;
/// let reviewer = AgentProfile::new("reviewer")
///     .with_model("anthropic/claude-sonnet-4-6")
///     .with_instructions("You review code carefully.");
/// assert!(reviewer.validate().is_ok());
/// ```
#[derive(Clone, Debug, Default)]
pub struct AgentProfile {
    /// Profile name; required to select it as a subagent.
    pub name: Option<String>,
    /// Human-readable description.
    pub description: Option<String>,
    /// Default model specifier `<provider>/<model>`.
    pub model: Option<String>,
    /// `model: false`: no default model, and none inherited from a parent agent; every call
    /// must choose one, or fails with [`FlueError::ModelNotConfigured`]. Excludes `model`.
    pub model_per_call: bool,
    /// Instructions, placed before the discovered workspace context.
    pub instructions: Option<String>,
    /// Registered skills.
    pub skills: Vec<Skill>,
    /// Model-callable tools.
    pub tools: Vec<ToolDefinition>,
    /// Tool lists that may change between turns (an MCP server's), offered after `tools`.
    pub tool_sources: Vec<Arc<dyn ToolSource>>,
    /// Actions: Rust behaviour offered to the model as framework-managed tools, each run in
    /// an isolated child scope, as the tools the model calls (added with `with_action`, see
    /// [`ActionDefinition`](crate::action::ActionDefinition)).
    pub actions: Vec<ToolDefinition>,
    /// Named profiles available to `session.task()`.
    pub subagents: Vec<AgentProfile>,
    /// Whether the model is offered the `task` tool (delegating to a declared subagent or to
    /// a fresh copy of this agent). `None`: offered; `Some(false)` (`task: false` in an agent
    /// file): not offered, though `session.task()` still runs the subagents.
    pub task_tool: Option<bool>,
    /// Default reasoning effort.
    pub thinking: Option<ThinkingLevel>,
    /// Compaction settings.
    pub compaction: Option<Compaction>,
    /// Durable-submission limits; rejected on subagent profiles.
    pub durability: Option<DurabilityConfig>,
    /// Default role (a persona overlay applied to each call unless the call names another).
    pub role: Option<String>,
}

impl AgentProfile {
    /// A named profile.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: Some(name.into()),
            ..Self::default()
        }
    }

    /// Sets the description.
    #[must_use]
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    agent_setters!();

    /// Validates names, duplicates, subagent cycles and subagent restrictions, reporting every
    /// problem at once in one [`FlueError::InvalidConfig`].
    pub fn validate(&self) -> Result<()> {
        let mut problems = Vec::new();
        self.collect_problems("profile", &mut Vec::new(), &mut problems);
        problems_to_result(&problems)
    }

    fn collect_problems(
        &self,
        label: &str,
        ancestors: &mut Vec<String>,
        problems: &mut Vec<String>,
    ) {
        if let Some(name) = &self.name
            && let Err(reason) = check_name(name)
        {
            problems.push(format!("{label} name {name:?} {reason}"));
        }
        if let Some(model) = &self.model
            && let Err(err) = crate::model::ModelSpec::parse(model)
        {
            problems.push(format!("{label}: {err}"));
        }
        if self.model_per_call && self.model.is_some() {
            problems.push(format!(
                "{label}: sets both a model and `model: false` (a model chosen per call); keep one"
            ));
        }
        check_duplicates(
            label,
            "skill",
            self.skills.iter().map(|s| s.name.as_str()),
            problems,
        );
        check_duplicates(
            label,
            "tool",
            self.tools.iter().map(ToolDefinition::name),
            problems,
        );
        check_duplicates(
            label,
            "action",
            self.actions.iter().map(ToolDefinition::name),
            problems,
        );
        for action in &self.actions {
            if self.tools.iter().any(|tool| tool.name() == action.name()) {
                problems.push(format!(
                    "{label}: action {:?} has the name of a tool; the model calls both by name, \
                     rename one",
                    action.name()
                ));
            }
        }
        let subagent_names = self.subagents.iter().filter_map(|p| p.name.as_deref());
        check_duplicates(label, "subagent", subagent_names, problems);
        for skill in &self.skills {
            if let Err(reason) = check_name(&skill.name) {
                problems.push(format!("{label}: skill name {:?} {reason}", skill.name));
            }
        }
        let own_name = self.name.clone();
        if let Some(name) = &own_name {
            ancestors.push(name.clone());
        }
        for subagent in &self.subagents {
            let Some(sub_name) = &subagent.name else {
                problems.push(format!("{label}: every subagent profile needs a name"));
                continue;
            };
            if ancestors.contains(sub_name) {
                let mut cycle = ancestors.clone();
                cycle.push(sub_name.clone());
                problems.push(format!("circular subagents: {}", cycle.join(" -> ")));
                continue;
            }
            if subagent.durability.is_some() {
                problems.push(format!(
                    "subagent {sub_name:?}: durability is not allowed on subagent profiles"
                ));
            }
            subagent.collect_problems(&format!("subagent {sub_name:?}"), ancestors, problems);
        }
        if own_name.is_some() {
            ancestors.pop();
        }
    }
}

/// What an agent declares: an optional profile baseline plus its own settings.
///
/// ```
/// use flue_core::AgentConfig;
/// let agent = AgentConfig::new().with_model("scripted/hello.json").with_instructions("Be brief.");
/// let resolved = agent.resolve().unwrap();
/// assert_eq!(resolved.model.as_deref(), Some("scripted/hello.json"));
/// ```
#[derive(Clone, Debug, Default)]
pub struct AgentConfig {
    /// Agent name (used in transcripts and the CLI).
    pub name: Option<String>,
    /// Baseline profile.
    pub profile: Option<AgentProfile>,
    /// Overrides the profile description.
    pub description: Option<String>,
    /// Overrides the profile model.
    pub model: Option<String>,
    /// `model: false`: overrides the profile's model with none, so that every call must choose
    /// one ([`FlueError::ModelNotConfigured`] otherwise). A `model` set here wins over it, so a
    /// frontend's model override (`flue run --model`) supplies the model.
    pub model_per_call: bool,
    /// Overrides the profile instructions.
    pub instructions: Option<String>,
    /// Skills added to the profile's.
    pub skills: Vec<Skill>,
    /// Tools added to the profile's.
    pub tools: Vec<ToolDefinition>,
    /// Tool sources added to the profile's (see [`ToolSource`]).
    pub tool_sources: Vec<Arc<dyn ToolSource>>,
    /// Actions added to the profile's, as the tools the model calls (added with `with_action`).
    pub actions: Vec<ToolDefinition>,
    /// Subagents added to the profile's.
    pub subagents: Vec<AgentProfile>,
    /// Overrides the profile's `task_tool` (see [`AgentProfile::task_tool`]).
    pub task_tool: Option<bool>,
    /// Overrides the profile thinking level.
    pub thinking: Option<ThinkingLevel>,
    /// Overrides the profile compaction.
    pub compaction: Option<Compaction>,
    /// Overrides the profile durability.
    pub durability: Option<DurabilityConfig>,
    /// Working directory inside the sandbox (default: the sandbox's own).
    pub cwd: Option<String>,
    /// Limit on model turns per operation (default [`DEFAULT_MAX_TURNS`]).
    pub max_turns: Option<u32>,
    /// Budgets of each submission and of each conversation of the agent (none by default);
    /// a dispatch's own budgets replace them limit by limit.
    pub budget: Option<Budget>,
    /// Overrides the profile's default role.
    pub role: Option<String>,
    /// Tool permission rules, over each tool's own default (see [`AgentConfig::with_permission`]).
    pub permissions: Vec<PermissionRule>,
    /// Hooks, asked in this order at the loop's points (see [`AgentConfig::with_hook`]); they
    /// run in every session of the agent, its tasks included.
    pub hooks: Vec<Arc<dyn Hook>>,
    /// Memory across conversations (`memory:` in an agent file), off when `None`: the memory
    /// tools over the store's notes, within these bounds (see [`AgentConfig::with_memory`]).
    pub memory: Option<NoteLimits>,
    /// JSON Schema of the structured result of every durable submission to this agent that
    /// asks for none of its own (`result:` in an agent file); see [`AgentConfig::with_result`].
    pub result: Option<serde_json::Value>,
    /// Holds the final reply back until the `Stop` hooks pass (see
    /// [`AgentConfig::with_hold_reply_until_stop`]).
    pub hold_reply_until_stop: bool,
}

impl AgentConfig {
    /// Holds the final reply back until the `Stop` hooks pass: a root session's text deltas
    /// are sent when their turn ends with tool calls, and the final reply's only once no
    /// `Stop` hook blocked it (then as one delta, with a hook's replacement), so a blocked
    /// reply never streams. Text streams per turn instead of live.
    #[must_use]
    pub fn with_hold_reply_until_stop(mut self) -> Self {
        self.hold_reply_until_stop = true;
        self
    }

    /// Gives the agent memory across conversations: the tools `memory_write`,
    /// `memory_search` and `memory_delete` over the session store's notes
    /// ([`NoteStore`](crate::store::NoteStore)) about the subject each conversation is bound to
    /// ([`NoteStore::bind_subject`](crate::store::NoteStore::bind_subject)), within `limits`.
    /// Building the harness fails when its store keeps no notes.
    #[must_use]
    pub fn with_memory(mut self, limits: NoteLimits) -> Self {
        self.memory = Some(limits);
        self
    }

    /// Sets the permission of the tools matching `pattern` (a tool name, or a glob with `*`
    /// and `?` such as `mcp__*`): [`Permission::AlwaysAsk`] pauses each call until it is
    /// confirmed. Rules set here win over the agent file's and the workspace defaults; within
    /// one source an exact name beats a glob and a longer glob a shorter one. A bad pattern
    /// fails `resolve` with [`FlueError::InvalidConfig`].
    ///
    /// ```
    /// use flue_core::{AgentConfig, Permission};
    /// let agent = AgentConfig::new()
    ///     .with_permission("mcp__*", Permission::AlwaysAsk)
    ///     .with_permission("bash", Permission::AlwaysAsk);
    /// assert_eq!(agent.resolve().unwrap().permissions.len(), 2);
    /// ```
    #[must_use]
    pub fn with_permission(mut self, pattern: impl Into<String>, permission: Permission) -> Self {
        self.permissions.push(PermissionRule::new(
            pattern,
            permission,
            PermissionSource::Code,
        ));
        self
    }

    /// Adds a hook (see [`crate::hook`]): asked at its points after the hooks added before it.
    #[must_use]
    pub fn with_hook(mut self, hook: Arc<dyn Hook>) -> Self {
        self.hooks.push(hook);
        self
    }

    /// Adds a permission rule from any source (flue-build adds the workspace defaults and the
    /// agent file's rules this way).
    #[must_use]
    pub fn with_permission_rule(mut self, rule: PermissionRule) -> Self {
        self.permissions.push(rule);
        self
    }

    /// An empty configuration.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the agent name.
    #[must_use]
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Sets the baseline profile.
    #[must_use]
    pub fn with_profile(mut self, profile: AgentProfile) -> Self {
        self.profile = Some(profile);
        self
    }

    agent_setters!();

    /// Adds tools.
    #[must_use]
    pub fn with_tools(mut self, tools: impl IntoIterator<Item = ToolDefinition>) -> Self {
        self.tools.extend(tools);
        self
    }

    /// Sets the working directory inside the sandbox.
    #[must_use]
    pub fn with_cwd(mut self, cwd: impl Into<String>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }

    /// Sets the durable-submission limits (attempts, wall-clock timeout).
    #[must_use]
    pub fn with_durability(mut self, durability: DurabilityConfig) -> Self {
        self.durability = Some(durability);
        self
    }

    /// Sets the budgets of each submission and conversation (see [`Budget`]).
    #[must_use]
    pub fn with_budget(mut self, budget: Budget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Sets the turn limit.
    #[must_use]
    pub fn with_max_turns(mut self, max_turns: u32) -> Self {
        self.max_turns = Some(max_turns);
        self
    }

    /// Requires a structured result matching `schema` from every durable submission (an
    /// HTTP message, `flue run`) that does not ask for its own: the submission settles with the
    /// validated `data`. A schema that does not compile fails `resolve`.
    #[must_use]
    pub fn with_result(mut self, schema: serde_json::Value) -> Self {
        self.result = Some(schema);
        self
    }

    /// Merges the agent over its profile and validates the result, reporting all problems.
    pub fn resolve(self) -> Result<ResolvedAgent> {
        let profile = self.profile.unwrap_or_default();
        let mut skills = profile.skills;
        skills.extend(self.skills);
        let mut tools = profile.tools;
        tools.extend(self.tools);
        let mut tool_sources = profile.tool_sources;
        tool_sources.extend(self.tool_sources);
        let mut actions = profile.actions;
        actions.extend(self.actions);
        let mut subagents = profile.subagents;
        subagents.extend(self.subagents);
        let merged = AgentProfile {
            name: self.name.or(profile.name),
            description: self.description.or(profile.description),
            model_per_call: self.model.is_none()
                && (self.model_per_call || (profile.model_per_call && profile.model.is_none())),
            model: self
                .model
                .or_else(|| (!self.model_per_call).then_some(profile.model).flatten()),
            instructions: self.instructions.or(profile.instructions),
            skills,
            tools,
            tool_sources,
            actions,
            subagents,
            task_tool: self.task_tool.or(profile.task_tool),
            thinking: self.thinking.or(profile.thinking),
            compaction: self.compaction.or(profile.compaction),
            durability: self.durability.or(profile.durability),
            role: self.role.or(profile.role),
        };
        let mut problems = Vec::new();
        merged.collect_problems("agent", &mut Vec::new(), &mut problems);
        if self.max_turns == Some(0) {
            problems.push("max_turns must be at least 1".to_owned());
        }
        if let Some(Err(problem)) = self.budget.map(|budget| budget.check()) {
            problems.push(problem);
        }
        for rule in &self.permissions {
            if let Err(problem) = check_permission_pattern(&rule.pattern) {
                problems.push(format!("permissions: {problem}"));
            }
        }
        if let Some(schema) = &self.result
            && let Err(problem) = crate::tool::check_schema(schema)
        {
            problems.push(format!("result: {problem}"));
        }
        problems_to_result(&problems)?;
        Ok(ResolvedAgent {
            name: merged.name.unwrap_or_else(|| "agent".to_owned()),
            description: merged.description,
            model: merged.model,
            instructions: merged.instructions.unwrap_or_default(),
            skills: merged.skills,
            tools: merged.tools,
            tool_sources: merged.tool_sources,
            actions: merged.actions,
            subagents: merged.subagents,
            task_tool: merged.task_tool.unwrap_or(true),
            thinking: merged.thinking.unwrap_or_default(),
            compaction: merged.compaction.unwrap_or_default(),
            durability: merged.durability.unwrap_or_default(),
            cwd: self.cwd,
            max_turns: self.max_turns.unwrap_or(DEFAULT_MAX_TURNS),
            budget: self.budget.unwrap_or_default(),
            role: merged.role,
            permissions: self.permissions,
            hooks: self.hooks,
            memory: self.memory,
            result: self.result,
            hold_reply_until_stop: self.hold_reply_until_stop,
        })
    }
}

/// A merged, validated agent configuration, ready for a harness.
#[derive(Clone, Debug)]
pub struct ResolvedAgent {
    /// Agent name.
    pub name: String,
    /// Description.
    pub description: Option<String>,
    /// Default model specifier, if any (operations may still set one).
    pub model: Option<String>,
    /// Instructions.
    pub instructions: String,
    /// Skills.
    pub skills: Vec<Skill>,
    /// Tools.
    pub tools: Vec<ToolDefinition>,
    /// Tool sources, whose tools are read before each model turn (see [`ToolSource`]).
    pub tool_sources: Vec<Arc<dyn ToolSource>>,
    /// Actions, as the tools the model calls (offered to the model after the tools).
    pub actions: Vec<ToolDefinition>,
    /// Subagent profiles.
    pub subagents: Vec<AgentProfile>,
    /// Whether the model is offered the `task` tool (see [`AgentProfile::task_tool`]).
    pub task_tool: bool,
    /// Thinking level.
    pub thinking: ThinkingLevel,
    /// Compaction.
    pub compaction: Compaction,
    /// Durability.
    pub durability: DurabilityConfig,
    /// Working directory inside the sandbox.
    pub cwd: Option<String>,
    /// Turn limit per operation.
    pub max_turns: u32,
    /// Budgets of each submission and conversation (empty: none).
    pub budget: Budget,
    /// Default role of the agent's sessions.
    pub role: Option<String>,
    /// Tool permission rules (checked by `resolve`).
    pub permissions: Vec<PermissionRule>,
    /// Hooks, in the order they are asked.
    pub hooks: Vec<Arc<dyn Hook>>,
    /// Memory across conversations, when on (see [`AgentConfig::with_memory`]).
    pub memory: Option<NoteLimits>,
    /// JSON Schema of the structured result of durable submissions that ask for none.
    pub result: Option<serde_json::Value>,
    /// The final reply is held back until the `Stop` hooks pass.
    pub hold_reply_until_stop: bool,
}

fn check_duplicates<'a>(
    label: &str,
    what: &str,
    names: impl Iterator<Item = &'a str>,
    problems: &mut Vec<String>,
) {
    let mut seen = BTreeSet::new();
    let mut reported = BTreeSet::new();
    for name in names {
        if !seen.insert(name) && reported.insert(name) {
            problems.push(format!("{label}: duplicate {what} {name:?}"));
        }
    }
}

fn problems_to_result(problems: &[String]) -> Result<()> {
    if problems.is_empty() {
        return Ok(());
    }
    Err(FlueError::config(problems.join("; ")))
}

#[cfg(test)]
mod tests;
