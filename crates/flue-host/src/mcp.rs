//! The MCP servers of one harness: declarations to options (`${VAR}` expanded), one connection
//! per server, its live tool list attached to the agent and its subagents as a tool source,
//! closing when the harness is closed.

use std::path::Path;

use flue_build::{McpServerDecl, McpTransport, Workspace};
use std::sync::Arc;

use flue_connectors::{
    McpElicitor, McpHttpEndpoint, McpOAuth, McpOAuthGrant, McpOAuthRedirect, McpSampler,
    McpServerConnection, McpServerOptions, McpStdioCommand, McpTransport as WireTransport,
    connect_mcp_server,
};
use flue_core::{AgentConfig, AgentProfile, FlueError, tool::ToolSource};

use crate::Env;
use crate::tokens::SqliteTokenStore;

#[cfg(test)]
mod tests;

/// What connecting a server needs besides its declaration.
#[derive(Clone, Copy)]
struct Context<'a> {
    workspace: &'a Workspace,
    /// Where the agents work: a server's `cwd` is resolved against it (a bundle's workspace
    /// has no directory of its own).
    root: &'a Path,
    env: &'a Env,
    elicitor: Option<&'a Arc<dyn McpElicitor>>,
    sampler: Option<&'a Arc<dyn McpSampler>>,
}

/// The open MCP connections of one harness.
#[derive(Debug, Default)]
pub(crate) struct McpServers {
    /// Each server once, with the declaration it was opened from.
    connections: Vec<(McpServerDecl, McpServerConnection)>,
}

impl McpServers {
    /// Connects every MCP server agent `agent` and its subagents use (each distinct server
    /// once) and adds their tool lists to `config` and to the subagent profiles in it, as
    /// tool sources (a server's list changes when it says so). On failure
    /// the servers already open are closed and the error names the failing server.
    pub(crate) async fn connect(
        workspace: &Workspace,
        root: &Path,
        agent: &str,
        env: &Env,
        elicitor: Option<&Arc<dyn McpElicitor>>,
        sampler: Option<Arc<dyn McpSampler>>,
        config: &mut AgentConfig,
    ) -> Result<Self, FlueError> {
        let context = Context {
            workspace,
            root,
            env,
            elicitor,
            sampler: sampler.as_ref(),
        };
        let mut servers = Self::default();
        let attached = servers
            .attach(context, agent, &mut config.tool_sources)
            .await;
        let attached = match attached {
            Ok(()) => {
                servers
                    .attach_subagents(context, &mut config.subagents)
                    .await
            }
            Err(err) => Err(err),
        };
        match attached {
            Ok(()) => Ok(servers),
            Err(err) => {
                servers.close().await;
                Err(err)
            }
        }
    }

    /// Closes every connection; failures are returned as warnings.
    pub(crate) async fn close(self) -> Vec<String> {
        let mut warnings = Vec::new();
        for (_, connection) in self.connections {
            if let Err(err) = connection.close().await {
                warnings.push(err.to_string());
            }
        }
        warnings
    }

    async fn attach_subagents(
        &mut self,
        context: Context<'_>,
        profiles: &mut [AgentProfile],
    ) -> Result<(), FlueError> {
        for profile in profiles {
            if let Some(name) = profile.name.clone() {
                self.attach(context, &name, &mut profile.tool_sources)
                    .await?;
            }
            Box::pin(self.attach_subagents(context, &mut profile.subagents)).await?;
        }
        Ok(())
    }

    /// Adds the tool lists of agent `agent`'s servers to `sources`, connecting servers not
    /// open yet.
    async fn attach(
        &mut self,
        context: Context<'_>,
        agent: &str,
        sources: &mut Vec<Arc<dyn ToolSource>>,
    ) -> Result<(), FlueError> {
        for (name, decl) in context.workspace.mcp_servers(agent)? {
            let open = self
                .connections
                .iter()
                .position(|(open, connection)| connection.name() == name && *open == decl);
            let idx = match open {
                Some(idx) => idx,
                None => {
                    let mut options = options(&name, &decl, context.root, context.env)?;
                    if let Some(elicitor) = context.elicitor {
                        options = options.with_elicitor(elicitor.clone());
                    }
                    if let Some(sampler) = context.sampler.filter(|_| decl.sampling()) {
                        options = options.with_sampler(Arc::clone(sampler));
                    }
                    let connection = connect_mcp_server(&name, options).await?;
                    self.connections.push((decl, connection));
                    self.connections.len() - 1
                }
            };
            if let Some((_, connection)) = self.connections.get(idx) {
                sources.push(connection.tool_source());
            }
        }
        Ok(())
    }
}

/// Connection options for one declaration: `${VAR}` in header and environment values taken
/// from `env`, a relative `cwd` resolved against the workspace `root` (the default).
pub(crate) fn options(
    server: &str,
    decl: &McpServerDecl,
    root: &Path,
    env: &Env,
) -> Result<McpServerOptions, FlueError> {
    let lookup = |name: &str| env.secret(name);
    let mut oauth = McpOAuth::default();
    let endpoint: flue_connectors::McpEndpoint = match decl {
        McpServerDecl::Remote(remote) => {
            let transport = match remote.transport {
                McpTransport::StreamableHttp => WireTransport::StreamableHttp,
                McpTransport::Sse => WireTransport::Sse,
                _ => {
                    return Err(FlueError::config(format!(
                        "mcp server `{server}`: this version of flue does not support its transport"
                    )));
                }
            };
            let mut endpoint = McpHttpEndpoint::new(&remote.url).with_transport(transport);
            for (name, value) in &remote.headers {
                let value = expand(value, lookup).map_err(|problem| {
                    FlueError::config(format!("mcp server `{server}`, header `{name}`: {problem}"))
                })?;
                endpoint = endpoint.with_header(name, value);
            }
            oauth.store = Some(Arc::new(SqliteTokenStore::new(root, server, &remote.url)));
            if let Some(decl) = &remote.oauth {
                oauth.client_id = decl.client_id.clone();
                oauth.client_secret = match &decl.client_secret {
                    Some(secret) => Some(expand(secret, lookup).map_err(|problem| {
                        FlueError::config(format!(
                            "mcp server `{server}`, oauth client_secret: {problem}"
                        ))
                    })?),
                    None => None,
                };
                oauth.client_metadata_url = decl.client_metadata_url.clone();
                oauth.scopes = decl.scopes.clone();
                if decl.client_credentials {
                    oauth.grant = McpOAuthGrant::ClientCredentials;
                }
                if decl.follow_redirect {
                    oauth.redirect = McpOAuthRedirect::Follow;
                }
            }
            endpoint.into()
        }
        McpServerDecl::Stdio(stdio) => {
            let cwd = stdio
                .cwd
                .as_deref()
                .map_or_else(|| root.to_path_buf(), |cwd| root.join(cwd));
            let mut command = McpStdioCommand::new(&stdio.command)
                .with_args(stdio.args.iter().map(String::as_str))
                .with_cwd(cwd);
            for (name, value) in &stdio.env {
                let value = expand(value, lookup).map_err(|problem| {
                    FlueError::config(format!(
                        "mcp server `{server}`, environment variable `{name}`: {problem}"
                    ))
                })?;
                command = command.with_env(name, value);
            }
            command.into()
        }
    };
    let mut options = McpServerOptions::new(endpoint).with_oauth(oauth);
    if let Some(timeout_ms) = decl.timeout_ms() {
        options = options.with_timeout(std::time::Duration::from_millis(timeout_ms));
    }
    if let Some(ms) = decl.elicitation_timeout_ms() {
        options = options.with_elicitation_timeout(std::time::Duration::from_millis(ms));
    }
    if decl.reset_timeout_on_progress() {
        options = options.with_reset_timeout_on_progress();
    }
    Ok(options)
}

/// The declaration of server `server`: flue.toml's, else the first agent's that declares it.
pub(crate) fn find_server<'w>(workspace: &'w Workspace, server: &str) -> Option<&'w McpServerDecl> {
    workspace.config.mcp.get(server).or_else(|| {
        workspace
            .agents
            .values()
            .find_map(|agent| agent.mcp.get(server))
    })
}

/// `text` with every `${NAME}` replaced by `lookup(NAME)`. Other `$` are kept. The error says
/// which variable is missing, never a value.
pub(crate) fn expand(
    text: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err("`${` without a closing `}`: write `${NAME}`".to_owned());
        };
        let name = &after[..end];
        let valid = name
            .chars()
            .next()
            .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(format!(
                "`${{{name}}}` is not a variable name: use letters, digits and `_`"
            ));
        }
        let Some(value) = lookup(name) else {
            return Err(format!(
                "`${{{name}}}` is not set: set {name} in the environment or in .env"
            ));
        };
        out.push_str(&value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}
