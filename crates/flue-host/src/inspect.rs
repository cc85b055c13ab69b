//! What the dev console's Agent tab shows about an agent ([`flue_server::AgentDetails`]): every
//! tool its model is offered with where it comes from and its policy, and the source of the
//! build's files (agents, skills, roles), read only by the name the build knows them by,
//! inside the workspace root and bounded (`flue_core::util::workspace_file`).
//!
//! The tools are listed as a harness of the agent gets them: the agent's own (built-in, state,
//! command, custom), its MCP servers' current tools (the servers connect on the agent's first
//! use, as for a conversation, and stay connected), `load_skill` when skills exist, `task`
//! unless withheld, the memory tools with `memory:`, `finish` and `give_up` with `result:`,
//! and `permissions_check` when some tool waits for a decision. Each one's policy comes from
//! the agent's permission rules over the tool's own default, as the agent loop decides it.

use std::sync::Arc;

use flue_core::permission::{PermissionSource, explain_permission};
use flue_core::util::workspace_file::{MAX_MARKDOWN_BYTES, WorkspaceFiles};
use flue_core::{
    BUILTIN_TOOL_NAMES, FINISH_TOOL, GIVE_UP_TOOL, LOAD_SKILL_TOOL, PERMISSIONS_CHECK_TOOL,
    Permission, ResolvedAgent, STATE_TOOL_NAMES, TASK_TOOL, ToolDefinition,
};
use flue_server::{AgentDetails, SourceFile, SourceKind, ToolsFuture};
use serde::Serialize;

use crate::{AgentSet, Host};

/// The Agent tab's details from the host's current agent set.
pub(crate) struct HostDetails {
    pub(crate) host: Arc<Host>,
}

impl AgentDetails for HostDetails {
    fn tools<'a>(&'a self, agent: &'a str) -> ToolsFuture<'a> {
        Box::pin(async move {
            let agents = self.host.agents();
            if !agents.workspace().agents.contains_key(agent) {
                return Err(format!("no agent {agent:?} in the build"));
            }
            let resolved = self
                .host
                .resolved_config(agent)
                .await
                .map_err(|err| format!("the tools of {agent:?} cannot be listed: {err}"))?;
            let tools = tool_views(&agents, agent, &resolved);
            serde_json::to_value(tools).map_err(|err| err.to_string())
        })
    }

    fn source(&self, kind: SourceKind, name: &str) -> Option<Result<SourceFile, String>> {
        let agents = self.host.agents();
        let workspace = agents.workspace();
        let path = match kind {
            SourceKind::Agent => workspace.agents.get(name).map(|file| file.path.clone()),
            SourceKind::Skill => workspace.skills.get(name).map(|file| file.path.clone()),
            SourceKind::Role => workspace.roles.get(name).map(|file| file.path.clone()),
            _ => None,
        }?;
        Some(read_source(agents.root(), &path))
    }
}

/// The file `path` (relative to `root`, as the build names it), at most
/// [`MAX_MARKDOWN_BYTES`]; the error names the file and why.
fn read_source(root: &std::path::Path, path: &str) -> Result<SourceFile, String> {
    let files = WorkspaceFiles::open(root)
        .map_err(|err| format!("{path}: cannot open the workspace root: {err}"))?;
    let bytes = files
        .read(path, MAX_MARKDOWN_BYTES)
        .map_err(|err| format!("{path}: {err}"))?;
    Ok(SourceFile {
        path: path.to_owned(),
        text: String::from_utf8_lossy(&bytes).into_owned(),
    })
}

/// One tool as the Agent tab lists it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ToolView {
    pub(crate) name: String,
    /// `built-in`, `state`, `command`, `custom`, `code`, `mcp`, `skills`, `task`, `memory`,
    /// `result` or `runtime`.
    pub(crate) origin: &'static str,
    /// The MCP server of an `mcp` tool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) server: Option<String>,
    /// `allow` (runs at once), `always_ask` (waits for a person's decision) or `application`
    /// (a custom tool: the application answers it).
    pub(crate) policy: &'static str,
    /// Why: the rule that decided, or the tool's own default.
    pub(crate) why: String,
    /// The first line of its description.
    pub(crate) description: String,
}

/// Every tool agent `agent` (resolved as `resolved`) is offered, in the order its model sees
/// them, with its policy.
pub(crate) fn tool_views(
    agents: &AgentSet,
    agent: &str,
    resolved: &ResolvedAgent,
) -> Vec<ToolView> {
    let workspace = agents.workspace();
    let command_tools: Vec<&str> = workspace
        .agents
        .get(agent)
        .map(|file| {
            file.command_tools
                .iter()
                .map(|spec| spec.name.as_str())
                .collect()
        })
        .unwrap_or_default();
    let view = |tool: &ToolDefinition, origin: &'static str| {
        tool_view(resolved, tool.name(), origin, tool, tool.is_external())
    };
    let mut views: Vec<ToolView> = Vec::new();
    for tool in resolved.tools.iter().chain(&resolved.actions) {
        let name = tool.name();
        let origin = if tool.is_external() {
            "custom"
        } else if command_tools.contains(&name) {
            "command"
        } else if STATE_TOOL_NAMES.contains(&name) {
            "state"
        } else if BUILTIN_TOOL_NAMES.contains(&name) {
            "built-in"
        } else {
            "code"
        };
        views.push(view(tool, origin));
    }
    for source in &resolved.tool_sources {
        for tool in source.tools() {
            let mut tool_view = view(&tool, "mcp");
            tool_view.server = mcp_server(tool.name());
            views.push(tool_view);
        }
    }
    let runtime = |name: &str, origin: &'static str, description: &str| {
        let (permission, rule) =
            explain_permission(&resolved.permissions, name, Permission::AlwaysAllow);
        ToolView {
            name: name.to_owned(),
            origin,
            server: None,
            policy: policy_name(permission),
            why: why(rule.as_ref()),
            description: description.to_owned(),
        }
    };
    if resolved.memory.is_some() {
        for name in flue_core::tool::MEMORY_TOOL_NAMES {
            views.push(runtime(
                name,
                "memory",
                "Notes about the conversation's memory subject, kept across conversations.",
            ));
        }
    }
    if resolved.result.is_some() {
        views.push(runtime(
            FINISH_TOOL,
            "result",
            "Ends the operation with its structured result.",
        ));
        views.push(runtime(
            GIVE_UP_TOOL,
            "result",
            "Ends the operation without a result, saying why.",
        ));
    }
    if !resolved.skills.is_empty() || !workspace.skills.is_empty() {
        views.push(runtime(
            LOAD_SKILL_TOOL,
            "skills",
            "Loads one of the skills' instructions.",
        ));
    }
    if resolved.task_tool {
        views.push(runtime(
            TASK_TOOL,
            "task",
            "Delegates a self-contained piece of work to a subagent.",
        ));
    }
    if views.iter().any(|view| view.policy != "allow") {
        views.push(ToolView {
            name: PERMISSIONS_CHECK_TOOL.to_owned(),
            origin: "runtime",
            server: None,
            policy: "allow",
            why: "offered because some tools wait for a decision (not in tasks)".to_owned(),
            description: "Tells the model which of its tools pause before running.".to_owned(),
        });
    }
    views
}

fn tool_view(
    resolved: &ResolvedAgent,
    name: &str,
    origin: &'static str,
    tool: &ToolDefinition,
    external: bool,
) -> ToolView {
    let description = tool
        .description()
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned();
    if external {
        return ToolView {
            name: name.to_owned(),
            origin,
            server: None,
            policy: "application",
            why: "a custom tool: the application runs it and supplies the result".to_owned(),
            description,
        };
    }
    let (permission, rule) =
        explain_permission(&resolved.permissions, name, tool.meta().permission);
    ToolView {
        name: name.to_owned(),
        origin,
        server: None,
        policy: policy_name(permission),
        why: why(rule.as_ref()),
        description,
    }
}

fn policy_name(permission: Permission) -> &'static str {
    match permission {
        Permission::AlwaysAsk => "always_ask",
        Permission::AlwaysAllow => "allow",
    }
}

fn why(rule: Option<&flue_core::permission::PermissionRule>) -> String {
    match rule {
        Some(rule) => {
            let from = match rule.source {
                PermissionSource::Defaults => "flue.toml [defaults.permissions]",
                PermissionSource::AgentFile => "the agent file's permissions",
                PermissionSource::Code => "the agent's configuration",
                _ => "a permission rule",
            };
            format!("rule `{}` from {from}", rule.pattern)
        }
        None => "the tool's own default".to_owned(),
    }
}

/// The server of an MCP tool name `mcp__<server>__<tool>`.
fn mcp_server(name: &str) -> Option<String> {
    let rest = name.strip_prefix("mcp__")?;
    let (server, _) = rest.split_once("__")?;
    Some(server.to_owned())
}
