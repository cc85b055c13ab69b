//! Tool permission policy: which calls run at once and which wait for a confirmation.
//!
//! Every tool carries its own default ([`ToolMeta::permission`]). An agent's rules override it.
//! A rule maps a tool name or a glob (`mcp__*`, `mcp__docs__*`, `*_file`; `*` and `?` only)
//! to [`Permission::AlwaysAllow`] or [`Permission::AlwaysAsk`]. Rules come from three
//! sources, which apply in this order, later ones winning:
//!
//! 1. [`PermissionSource::Defaults`]: the workspace's `flue.toml` `[defaults.permissions]`;
//! 2. [`PermissionSource::AgentFile`]: the agent file's `permissions:` mapping;
//! 3. [`PermissionSource::Code`]: `AgentConfig::with_permission` in library code.
//!
//! Within one source an exact name beats any glob, and a longer glob beats a shorter one.
//!
//! [`ToolMeta::permission`]: crate::tool::ToolMeta::permission

use globset::{Glob, GlobMatcher};
use serde::{Deserialize, Serialize};

use crate::error::{FlueError, Result};
use crate::tool::Permission;

/// Where a permission rule comes from; later sources override earlier ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum PermissionSource {
    /// Workspace defaults (`flue.toml`).
    Defaults,
    /// The agent file's `permissions:`.
    AgentFile,
    /// Library code.
    Code,
}

/// One rule: the tools whose name matches `pattern` get `permission`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PermissionRule {
    /// A tool name or a glob of `*` and `?`.
    pub pattern: String,
    /// The permission of the tools it matches.
    pub permission: Permission,
    /// Where the rule comes from.
    pub source: PermissionSource,
}

impl PermissionRule {
    /// A rule from `source`.
    pub fn new(
        pattern: impl Into<String>,
        permission: Permission,
        source: PermissionSource,
    ) -> Self {
        Self {
            pattern: pattern.into(),
            permission,
            source,
        }
    }
}

/// Checks a rule's pattern: a tool name of `[A-Za-z0-9_-]` with `*` and `?` wildcards. The
/// error says what is wrong, for messages that add the file and line.
pub fn check_permission_pattern(pattern: &str) -> std::result::Result<(), String> {
    if pattern.is_empty() {
        return Err("the tool pattern is empty".to_owned());
    }
    if let Some(bad) = pattern
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '*' | '?')))
    {
        return Err(format!(
            "the tool pattern {pattern:?} contains {bad:?}; use tool names with `*` and `?` \
             wildcards, e.g. `mcp__*` or `bash`"
        ));
    }
    Ok(())
}

/// The permission `rules` give `name` (a tool, or a capability named like one such as an MCP
/// server's `mcp__<server>__sampling`), whose own default is `default`; the same order as
/// for tool calls. Rules with an invalid pattern are skipped (`AgentConfig::resolve` reports
/// them).
pub fn decide_permission(rules: &[PermissionRule], name: &str, default: Permission) -> Permission {
    explain_permission(rules, name, default).0
}

/// What [`decide_permission`] decides, with the rule that decided it (`None`: the tool's own
/// default `default`), for listings that say why a tool asks first (the dev console).
pub fn explain_permission(
    rules: &[PermissionRule],
    name: &str,
    default: Permission,
) -> (Permission, Option<PermissionRule>) {
    let valid: Vec<PermissionRule> = rules
        .iter()
        .filter(|rule| check_permission_pattern(&rule.pattern).is_ok())
        .cloned()
        .collect();
    match PermissionPolicy::new(&valid) {
        Ok(policy) => {
            let (permission, rule) = policy.decide(name, default);
            (permission, rule.cloned())
        }
        Err(_) => (default, None),
    }
}

/// Compiled rules, deciding one tool's permission.
#[derive(Clone, Debug, Default)]
pub(crate) struct PermissionPolicy {
    rules: Vec<(GlobMatcher, PermissionRule)>,
}

impl PermissionPolicy {
    /// Compiles `rules`; an invalid pattern is a configuration error naming every bad one.
    pub(crate) fn new(rules: &[PermissionRule]) -> Result<Self> {
        let mut problems = Vec::new();
        let mut compiled = Vec::new();
        for rule in rules {
            if let Err(problem) = check_permission_pattern(&rule.pattern) {
                problems.push(problem);
                continue;
            }
            match Glob::new(&rule.pattern) {
                Ok(glob) => compiled.push((glob.compile_matcher(), rule.clone())),
                Err(err) => {
                    problems.push(format!("invalid tool pattern {:?}: {err}", rule.pattern));
                }
            }
        }
        if !problems.is_empty() {
            return Err(FlueError::config(problems.join("; ")));
        }
        Ok(Self { rules: compiled })
    }

    /// The permission of `tool`, whose own default is `default`, and the rule that decided it
    /// (`None`: the tool's default).
    pub(crate) fn decide(
        &self,
        tool: &str,
        default: Permission,
    ) -> (Permission, Option<&PermissionRule>) {
        let best = self
            .rules
            .iter()
            .filter(|(matcher, _)| matcher.is_match(tool))
            .map(|(_, rule)| rule)
            .max_by_key(|rule| {
                let exact = rule.pattern == tool;
                (rule.source, exact, rule.pattern.len())
            });
        match best {
            Some(rule) => (rule.permission, Some(rule)),
            None => (default, None),
        }
    }
}

#[cfg(test)]
mod tests;
