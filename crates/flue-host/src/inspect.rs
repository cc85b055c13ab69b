//! What the dev console's Agent tab shows about an agent ([`flue_server::AgentDetails`]): every
//! tool its model is offered with where it comes from and its policy, and the source of the
//! build's files (agents, skills, roles), read only by the name the build knows them by,
//! inside the workspace root and bounded (`flue_core::util::workspace_file`).
//!
//! The tools are the ones the agent loop offers (`Harness::offered_tools`, also read by
//! `flue tools` and `flue run --dry-run`), from a preview harness of the agent: its MCP
//! servers connect on the agent's first use, as for a conversation, and stay connected. Each
//! one's origin is `ToolDefinition::origin`; its policy comes from the agent's permission rules
//! over the tool's own default, as the agent loop decides it.

use std::sync::Arc;

use flue_core::permission::{PermissionSource, explain_permission};
use flue_core::tool::ToolOrigin;
use flue_core::util::workspace_file::{MAX_MARKDOWN_BYTES, WorkspaceFiles};
use flue_core::{Permission, ToolDefinition, permission::PermissionRule};
use flue_server::{AgentDetails, SourceFile, SourceKind, ToolRun, ToolsFuture};
use serde::Serialize;

use crate::Host;

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
            let (tools, permissions) = self
                .host
                .offered_tools(agent)
                .await
                .map_err(|err| format!("the tools of {agent:?} cannot be listed: {err}"))?;
            let tools = tool_views(&tools, &permissions);
            serde_json::to_value(tools).map_err(|err| err.to_string())
        })
    }

    fn run_tool<'a>(&'a self, agent: &'a str, run: ToolRun) -> ToolsFuture<'a> {
        Box::pin(async move {
            if !self.host.agents().workspace().agents.contains_key(agent) {
                return Err(format!("no agent {agent:?} in the build"));
            }
            let instance = flue_core::ConversationKey::new(agent, HAND_RUN_ID).instance_id();
            let opened = self
                .host
                .open_harness_here(agent, &instance)
                .await
                .map_err(|err| format!("agent {agent:?} cannot be opened: {err}"))?;
            let answer = run_by_hand(opened.harness(), agent, run).await;
            // Its sandbox and its MCP sessions of this run end here.
            let _ = opened.close().await;
            answer
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

/// The conversation id a tool run by hand is audited under (a file it changes is listed in
/// the audit log as this conversation's).
const HAND_RUN_ID: &str = "console-tool-runs";

/// Origins whose tools run outside a conversation: the others need one (a task, the state,
/// memory, a skill's loading, the runtime's own) or are answered by the application.
const HAND_RUNNABLE: &[ToolOrigin] = &[
    ToolOrigin::BuiltIn,
    ToolOrigin::Command,
    ToolOrigin::Mcp,
    ToolOrigin::Code,
];

/// Runs `run.tool` of `harness` with its policy applied: a tool that asks first runs only
/// confirmed; the output or the error is redacted as a conversation's would be.
async fn run_by_hand(
    harness: &flue_core::Harness,
    agent: &str,
    run: ToolRun,
) -> Result<serde_json::Value, String> {
    let tools = harness.offered_tools().map_err(|err| err.to_string())?;
    let Some(tool) = tools.iter().find(|tool| tool.name() == run.tool) else {
        return Err(format!("agent {agent:?} has no tool {:?}", run.tool));
    };
    let view = tool_view(&harness.agent().permissions, tool);
    if tool.is_external() || !HAND_RUNNABLE.contains(&tool.origin()) {
        let why = if tool.is_external() {
            view.why
        } else {
            format!("a {} tool runs only inside a conversation", view.origin)
        };
        return Ok(serde_json::json!({"outcome": "refused", "why": why}));
    }
    if view.policy == "always_ask" && !run.confirmed {
        return Ok(serde_json::json!({"outcome": "confirm", "why": view.why}));
    }
    let ctx = flue_core::ToolContext::new(Arc::clone(harness.fs()))
        .with_audit(Arc::clone(harness.audit_store()))
        .with_instance_id(harness.instance_id())
        .with_agent(agent);
    let mut answer = match tool.call(run.input, &ctx).await {
        Ok(output) => serde_json::json!({"outcome": "ok", "output": output}),
        Err(error) => serde_json::json!({"outcome": "error", "error": error}),
    };
    harness.redactor().redact_json(&mut answer);
    Ok(answer)
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
    /// Its [`ToolOrigin`] by name: `built-in`, `state`, `memory`, `command`, `custom`, `code`,
    /// `mcp`, `skills`, `task`, `result` or `runtime`.
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

/// The tools an agent is offered (`Harness::offered_tools`, in the order its model sees them),
/// each with its policy under `permissions`.
pub(crate) fn tool_views(
    tools: &[ToolDefinition],
    permissions: &[PermissionRule],
) -> Vec<ToolView> {
    tools
        .iter()
        .map(|tool| tool_view(permissions, tool))
        .collect()
}

fn tool_view(permissions: &[PermissionRule], tool: &ToolDefinition) -> ToolView {
    let origin = tool.origin();
    let description = tool
        .description()
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned();
    let server = match origin {
        ToolOrigin::Mcp => mcp_server(tool.name()),
        _ => None,
    };
    let (policy, why) = if tool.is_external() {
        (
            "application",
            "a custom tool: the application runs it and supplies the result".to_owned(),
        )
    } else if origin == ToolOrigin::Runtime {
        (
            "allow",
            "offered because some tools wait for a decision (not in tasks)".to_owned(),
        )
    } else {
        let (permission, rule) =
            explain_permission(permissions, tool.name(), tool.meta().permission);
        (policy_name(permission), why(rule.as_ref()))
    };
    ToolView {
        name: tool.name().to_owned(),
        origin: origin.name(),
        server,
        policy,
        why,
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
