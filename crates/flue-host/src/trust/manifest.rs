//! What trust covers: every command a workspace supplies and every place it would send the
//! user's secrets, read from the validated workspace alone (nothing is run or connected).

use std::collections::BTreeSet;
use std::fmt;

use flue_build::{
    AgentFile, McpServerDecl, ProviderSettings, SandboxKind, SandboxSettings, StoreSettings,
    Timing, Workspace, WorkspaceConfig,
};
use flue_providers::BuiltinProvider;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::Env;

/// What kind of thing a [`TrustItem`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TrustKind {
    /// A hook command: runs on the host, outside any sandbox.
    Hook,
    /// A stdio MCP server: a command started on the host.
    McpCommand,
    /// A remote MCP server: an address the workspace chose, maybe with secrets in headers.
    McpServer,
    /// A sandbox that runs the model's commands on the host (`local`, `isolated`) or with
    /// the user's Daytona key.
    HostSandbox,
    /// A command tool of an agent whose sandbox is a host one.
    CommandTool,
    /// A schedule: runs an agent by itself, with no request.
    Schedule,
    /// A command scorer of an eval case (`evals/*.yaml`): a command run on the host.
    EvalScorer,
    /// A model provider endpoint or key variable the workspace chose.
    Provider,
    /// A database the workspace chose for conversations, maybe with a secret in its URL.
    Store,
    /// A base-URL variable set by the workspace's `.env`, where a built-in key would go.
    EnvFile,
}

/// One thing a workspace would run or send a secret to: its kind, the file that declares it,
/// and what it is in words (the command, the address, the variable names). Two items are the
/// same when all three are: a changed command is a new item.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TrustItem {
    /// What kind of thing it is.
    pub kind: TrustKind,
    /// The file that declares it, relative to the root (`flue.toml`, `agents/a.md`, `.env`).
    pub origin: String,
    /// What runs or where what goes, in words.
    pub detail: String,
}

impl TrustItem {
    fn new(kind: TrustKind, origin: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            kind,
            origin: origin.into(),
            detail: detail.into(),
        }
    }

    /// An eval case's command scorer, declared in `file` (read by the eval runner, which
    /// adds these to its agents' manifest).
    pub fn eval_scorer(file: &str, case: &str, command: &str) -> Self {
        Self::new(
            TrustKind::EvalScorer,
            file,
            format!("runs `{command}` on your machine to score eval case `{case}`"),
        )
    }

    /// A stable id of the item: the SHA-256 of its kind, origin and detail.
    pub fn digest(&self) -> String {
        let mut hash = Sha256::new();
        for part in [kind_tag(self.kind), &self.origin, &self.detail] {
            hash.update(part.len().to_le_bytes());
            hash.update(part.as_bytes());
        }
        hex(&hash.finalize())
    }
}

impl fmt::Display for TrustItem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.origin, self.detail)
    }
}

fn kind_tag(kind: TrustKind) -> &'static str {
    match kind {
        TrustKind::Hook => "hook",
        TrustKind::McpCommand => "mcp_command",
        TrustKind::McpServer => "mcp_server",
        TrustKind::HostSandbox => "host_sandbox",
        TrustKind::CommandTool => "command_tool",
        TrustKind::Schedule => "schedule",
        TrustKind::EvalScorer => "eval_scorer",
        TrustKind::Provider => "provider",
        TrustKind::Store => "store",
        TrustKind::EnvFile => "env_file",
    }
}

/// Everything of one workspace that needs trust, sorted, without repeats.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustManifest {
    items: Vec<TrustItem>,
}

impl TrustManifest {
    /// What `workspace` would run or send, with `env` telling which base-URL variables come
    /// from the workspace's own `.env`.
    pub fn of(workspace: &Workspace, env: &Env) -> Self {
        let mut items = BTreeSet::new();
        let config = &workspace.config;
        items.extend(config_items(config));
        for hook in &config.hooks {
            items.insert(hook_item(hook));
        }
        for agent in workspace.agents.values() {
            items.extend(agent_items(agent, config));
        }
        for schedule in workspace.schedules() {
            items.insert(TrustItem::new(
                TrustKind::Schedule,
                &schedule.path,
                format!(
                    "runs agent `{}` by itself on schedule `{}` ({}), with no request",
                    schedule.agent,
                    schedule.name,
                    timing(&schedule.timing)
                ),
            ));
        }
        items.extend(env_file_items(env));
        Self {
            items: items.into_iter().collect(),
        }
    }

    /// This manifest and `more`.
    #[must_use]
    pub fn with(self, more: impl IntoIterator<Item = TrustItem>) -> Self {
        let mut items = self.items;
        items.extend(more);
        Self::from_items(items)
    }

    /// What flue.toml's `[store]` alone needs (for the commands that only read
    /// conversations).
    pub fn of_store(config: &WorkspaceConfig) -> Self {
        Self {
            items: config.store.iter().map(store_item).collect(),
        }
    }

    /// A manifest of exactly `items`.
    pub(crate) fn from_items(mut items: Vec<TrustItem>) -> Self {
        items.sort();
        items.dedup();
        Self { items }
    }

    /// The items, sorted.
    pub fn items(&self) -> &[TrustItem] {
        &self.items
    }

    /// True when the workspace needs no trust: nothing of it runs on the host or receives a
    /// secret.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The SHA-256 of every item's digest, in order: changes when any item does.
    pub fn digest(&self) -> String {
        let mut hash = Sha256::new();
        for item in &self.items {
            hash.update(item.digest().as_bytes());
            hash.update(b"\n");
        }
        hex(&hash.finalize())
    }
}

/// flue.toml's own items: its MCP servers, sandbox, providers and store.
fn config_items(config: &WorkspaceConfig) -> Vec<TrustItem> {
    let mut items: Vec<TrustItem> = config
        .mcp
        .iter()
        .map(|(name, decl)| mcp_item("flue.toml", name, decl))
        .collect();
    if let Some(sandbox) = &config.sandbox {
        items.extend(sandbox_item("flue.toml", sandbox.kind));
    }
    items.extend(config.providers.values().filter_map(provider_item));
    items.extend(config.store.iter().map(store_item));
    items
}

/// An agent file's items: hooks, MCP servers, a host sandbox and the command tools it runs.
fn agent_items(agent: &AgentFile, config: &WorkspaceConfig) -> Vec<TrustItem> {
    let mut items: Vec<TrustItem> = agent.hooks.iter().map(hook_item).collect();
    items.extend(
        agent
            .mcp
            .iter()
            .map(|(name, decl)| mcp_item(&agent.path, name, decl)),
    );
    let sandbox = SandboxSettings::resolve(
        config.sandbox.as_ref(),
        agent.sandbox,
        &agent.sandbox_options,
    );
    if let Some(kind) = agent.sandbox {
        items.extend(sandbox_item(&agent.path, kind));
    }
    if sandbox.kind != SandboxKind::Virtual {
        items.extend(agent.command_tools.iter().map(|tool| {
            TrustItem::new(
                TrustKind::CommandTool,
                &agent.path,
                format!(
                    "tool `{}` runs `{}` in the {} sandbox",
                    tool.name, tool.command, sandbox.kind
                ),
            )
        }));
    }
    items
}

fn hook_item(hook: &flue_core::hook::CommandHookSpec) -> TrustItem {
    let matcher = hook
        .matcher
        .as_deref()
        .map(|matcher| format!(" matching `{matcher}`"))
        .unwrap_or_default();
    if let Some(target) = &hook.http {
        return http_hook_item(hook, target, &matcher);
    }
    if let Some(target) = &hook.prompt {
        return prompt_hook_item(hook, target, &matcher);
    }
    let env = if hook.env.is_empty() {
        String::new()
    } else {
        format!(", seeing your {}", hook.env.join(", "))
    };
    TrustItem::new(
        TrustKind::Hook,
        &hook.declared_in,
        format!(
            "runs `{}` on your machine, outside any sandbox ({} hook{matcher}{env})",
            hook.command,
            hook.point.name()
        ),
    )
}

/// An http hook's item: its URL and header names (values may be secrets and are never shown),
/// and the variables its headers may carry.
fn http_hook_item(
    hook: &flue_core::hook::CommandHookSpec,
    target: &flue_core::hook::HttpHookTarget,
    matcher: &str,
) -> TrustItem {
    let headers = if target.headers.is_empty() {
        String::new()
    } else {
        let names: Vec<&str> = target
            .headers
            .iter()
            .map(|(name, _)| name.as_str())
            .collect();
        format!(", with headers {}", names.join(", "))
    };
    let env = if hook.env.is_empty() {
        String::new()
    } else {
        format!(", which may carry your {}", hook.env.join(", "))
    };
    TrustItem::new(
        TrustKind::Hook,
        &hook.declared_in,
        format!(
            "sends the conversation to `{}` ({} http hook{matcher}{headers}{env})",
            target.shown_url(),
            hook.point.name()
        ),
    )
}

/// A prompt hook's item: the model it asks (it runs nothing, but spends on the user's key and
/// may send the conversation to another provider) and the whole prompt, so a changed prompt
/// asks again.
fn prompt_hook_item(
    hook: &flue_core::hook::CommandHookSpec,
    target: &flue_core::hook::PromptHookTarget,
    matcher: &str,
) -> TrustItem {
    let model = target.model.as_deref().map_or_else(
        || "the agent's model".to_owned(),
        |model| format!("`{model}`"),
    );
    TrustItem::new(
        TrustKind::Hook,
        &hook.declared_in,
        format!(
            "asks {model} to judge the conversation with the prompt {:?} ({} prompt hook{matcher})",
            target.prompt,
            hook.point.name()
        ),
    )
}

fn mcp_item(origin: &str, name: &str, decl: &McpServerDecl) -> TrustItem {
    match decl {
        McpServerDecl::Stdio(stdio) => {
            let mut command = stdio.command.clone();
            for arg in &stdio.args {
                command.push(' ');
                command.push_str(arg);
            }
            let env: Vec<String> = stdio
                .env
                .iter()
                .map(|(key, value)| format!("{key}={value}"))
                .collect();
            let cwd = stdio
                .cwd
                .as_deref()
                .map(|cwd| format!(" in `{cwd}`"))
                .unwrap_or_default();
            TrustItem::new(
                TrustKind::McpCommand,
                origin,
                format!(
                    "starts MCP server `{name}` on your machine: `{command}`{cwd}{}",
                    gets(&env)
                ),
            )
        }
        McpServerDecl::Remote(remote) => {
            let mut sent: Vec<String> = remote
                .headers
                .iter()
                .map(|(key, value)| format!("header {key}: {value}"))
                .collect();
            if let Some(secret) = remote
                .oauth
                .as_ref()
                .and_then(|oauth| oauth.client_secret.as_ref())
            {
                sent.push(format!("oauth client_secret {secret}"));
            }
            TrustItem::new(
                TrustKind::McpServer,
                origin,
                format!(
                    "connects to MCP server `{name}` at {}{}",
                    without_password(&remote.url),
                    sends(&sent)
                ),
            )
        }
    }
}

fn sandbox_item(origin: &str, kind: SandboxKind) -> Option<TrustItem> {
    let what = match kind {
        SandboxKind::Local => "runs the model's commands on your machine, as you (sandbox: local)",
        SandboxKind::Isolated => {
            "runs the model's commands on your machine in Linux namespaces (sandbox: isolated)"
        }
        SandboxKind::Daytona => {
            "runs the model's commands in a Daytona sandbox on your DAYTONA_API_KEY \
             (sandbox: daytona)"
        }
        _ => return None,
    };
    Some(TrustItem::new(TrustKind::HostSandbox, origin, what))
}

/// A `[providers.<id>]` table that sends a key somewhere or under a name the workspace chose:
/// a new provider, or a built-in one with another base URL, key variable or headers.
fn provider_item(settings: &ProviderSettings) -> Option<TrustItem> {
    let builtin = BuiltinProvider::find(&settings.id);
    let url = settings
        .base_url
        .clone()
        .or_else(|| builtin.map(|builtin| builtin.base_url.to_owned()))?;
    let key = settings
        .api_key_env
        .clone()
        .or_else(|| builtin.and_then(|builtin| builtin.api_key_env.map(str::to_owned)));
    if let Some(builtin) = builtin
        && url == builtin.base_url
        && key.as_deref() == builtin.api_key_env
        && settings.headers.is_empty()
    {
        return None;
    }
    let mut sent: Vec<String> = key.iter().map(|key| format!("your {key}")).collect();
    sent.extend(
        settings
            .headers
            .iter()
            .map(|(name, value)| format!("header {name}: {value}")),
    );
    Some(TrustItem::new(
        TrustKind::Provider,
        "flue.toml",
        format!(
            "sends model requests of provider `{}` to {url}{}",
            settings.id,
            sends(&sent)
        ),
    ))
}

fn store_item(store: &StoreSettings) -> TrustItem {
    TrustItem::new(
        TrustKind::Store,
        "flue.toml",
        format!(
            "keeps conversations in the database {}{}",
            without_password(&store.url),
            sends(&variables(&store.url))
        ),
    )
}

/// Base-URL variables of built-in providers that the workspace's own `.env` sets (and the
/// environment does not): the built-in key would go there.
fn env_file_items(env: &Env) -> Vec<TrustItem> {
    BuiltinProvider::ALL
        .iter()
        .filter_map(|builtin| {
            let var = builtin.base_url_env?;
            let url = env.workspace_file_value(var)?;
            let key = builtin
                .api_key_env
                .map(|key| format!(", where your {key} would be sent"))
                .unwrap_or_default();
            Some(TrustItem::new(
                TrustKind::EnvFile,
                ".env",
                format!("sets {var}={url}{key}"),
            ))
        })
        .collect()
}

/// `url` with a literal password in its user info shown as `***` (a `${VAR}` stays, naming
/// the variable).
fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let Some((userinfo, host)) = rest.rsplit_once('@') else {
        return url.to_owned();
    };
    match userinfo.split_once(':') {
        Some((user, password)) if !password.starts_with("${") => {
            format!("{scheme}://{user}:***@{host}")
        }
        _ => url.to_owned(),
    }
}

/// `${NAME}` references in `text`, as "your NAME".
fn variables(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else { break };
        names.push(format!("your {}", &after[..end]));
        rest = &after[end + 1..];
    }
    names
}

fn sends(what: &[String]) -> String {
    if what.is_empty() {
        String::new()
    } else {
        format!(", sending {}", what.join(", "))
    }
}

fn gets(env: &[String]) -> String {
    if env.is_empty() {
        String::new()
    } else {
        format!(" with environment {}", env.join(", "))
    }
}

fn timing(timing: &Timing) -> String {
    match timing {
        Timing::Every { interval_ms } => format!("every {}s", interval_ms / 1000),
        Timing::Cron {
            expression,
            timezone,
            ..
        } => format!("cron `{expression}` {timezone}"),
        _ => "a schedule".to_owned(),
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut out, byte| {
        let _ = write!(out, "{byte:02x}");
        out
    })
}
