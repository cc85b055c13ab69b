//! flue.toml: workspace-wide settings.
//!
//! The file is deserialised into private `Raw*` types that mirror it one-to-one (serde with
//! `deny_unknown_fields`, values kept with their spans), then checked into the public
//! [`WorkspaceConfig`]. A new section (`[providers.*]`, `[store]`, `[server]`) is a field on
//! `RawConfig`, a public type, and one conversion function.

use std::collections::BTreeMap;
use std::ops::Range;

use flue_core::{Budget, Permission, ThinkingLevel};
use serde::Deserialize;
use toml::Spanned;

use crate::agent_file::PERMISSIONS;
use crate::diagnostic::Diagnostic;
use crate::fields;
use crate::mcp::{
    self, McpOAuthDecl, McpServerDecl, McpTransport, RemoteMcpServer, StdioMcpServer,
};
use crate::providers::{self, ProviderSettings, RawProvider};
use crate::sandbox::{
    self, SANDBOXES, SandboxKind, SandboxOptions, SandboxSettings, SeedSetting, unsupported,
};
use crate::schedule::{self, RawSchedule, Schedule};
use crate::suggest::did_you_mean;
use crate::toml_span::{PATH, line_of};

/// The keys of `[defaults]`.
const DEFAULTS_KEYS: &[&str] = &["model", "thinking", "permissions", "budget"];

/// Workspace-wide settings from flue.toml; all defaults when there is no file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkspaceConfig {
    /// `[defaults]`: settings for agents that leave them unset.
    pub defaults: Defaults,
    /// `[mcp.<name>]`: MCP servers every agent uses (an agent's own `mcp` entry of the same
    /// name replaces one). Same keys as an agent's `mcp` entries:
    ///
    /// ```toml
    /// [mcp.docs]
    /// url = "http://127.0.0.1:8931/mcp"
    /// headers = { Authorization = "Bearer ${DOCS_TOKEN}" }
    ///
    /// [mcp.files]
    /// command = "npx"
    /// args = ["-y", "@modelcontextprotocol/server-filesystem", "."]
    /// ```
    pub mcp: BTreeMap<String, McpServerDecl>,
    /// `[sandbox]`: the sandbox of agents without `sandbox:` (see
    /// [`SandboxSettings::resolve`]).
    ///
    /// ```toml
    /// [sandbox]
    /// kind = "isolated"
    /// network = true
    /// ```
    pub sandbox: Option<SandboxSettings>,
    /// `[providers.<id>]`: model providers declared or adjusted by the workspace, by id.
    pub providers: BTreeMap<String, ProviderSettings>,
    /// `[store]`: where `flue serve` keeps conversations when not in `.flue/flue.db`.
    ///
    /// ```toml
    /// [store]
    /// url = "postgres://flue:${PGPASSWORD}@db.internal:5432/flue"
    /// lease_ms = 5000
    /// ```
    pub store: Option<StoreSettings>,
    /// `[schedules.<name>]`: schedules with an `agent` key, the same keys as an agent file's
    /// `schedules:` entries otherwise (docs/schedules.md), in name order.
    pub schedules: Vec<Schedule>,
    /// `[hooks]`: command hooks every agent runs, before its own (docs/hooks.md), in the
    /// shape of Claude Code's settings.json `hooks` object.
    ///
    /// ```toml
    /// [[hooks.PreToolUse]]
    /// matcher = "Bash"
    /// hooks = [{ type = "command", command = "./hooks/no_rm.sh", timeout = 10 }]
    /// ```
    pub hooks: Vec<flue_core::hook::CommandHookSpec>,
    /// `[claude_code] settings = false`: the hooks of `.claude/settings.json` and
    /// `.claude/settings.local.json` are not read. Unset, they run too (after flue.toml's,
    /// before the agent file's), as Claude Code runs them.
    ///
    /// ```toml
    /// [claude_code]
    /// settings = false
    /// ```
    pub ignore_claude_settings: bool,
    /// `[tasks]`: how many background tasks `flue serve` runs at once.
    ///
    /// ```toml
    /// [tasks]
    /// max_background_per_conversation = 4
    /// max_background_per_server = 16
    /// ```
    pub tasks: TaskSettings,
    /// What flue.toml declares that flue skips or ignores (a hook event it has no point for,
    /// a hook key it does not read): warnings, not problems.
    pub notes: Vec<Diagnostic>,
}

/// `[store]` in flue.toml: a shared database for many `flue serve` processes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreSettings {
    /// `postgres://` (or `postgresql://`) URL, as written: `${VAR}` is expanded from the
    /// environment when the store is opened, so the password stays out of the file.
    pub url: String,
    /// Ownership lease in milliseconds (how long a crashed-but-connected node keeps a
    /// conversation); `None` for the default.
    pub lease_ms: Option<u64>,
}

/// `[tasks]` in flue.toml: limits of background tasks running at once (`None`: the runtime's
/// default, 4 per conversation and 16 per server); the excess waits queued.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskSettings {
    /// Background tasks of one conversation running at once.
    pub max_background_per_conversation: Option<usize>,
    /// Background tasks running at once in one `flue serve` process.
    pub max_background_per_server: Option<usize>,
}

impl WorkspaceConfig {
    /// The ids of every provider a model may name: the built-in ones, `scripted`, and the
    /// `[providers.<id>]` tables, sorted.
    pub fn provider_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = flue_providers::BuiltinProvider::ALL
            .iter()
            .map(|builtin| builtin.id.to_owned())
            .chain(["scripted".to_owned()])
            .chain(self.providers.keys().cloned())
            .collect();
        ids.sort();
        ids.dedup();
        ids
    }
}

/// `[defaults]` in flue.toml.
///
/// ```toml
/// [defaults]
/// model = "anthropic/claude-sonnet-4-6"
/// thinking = "low"
///
/// [defaults.permissions]
/// "mcp__*" = "always_ask"
/// bash = "always_ask"
///
/// [defaults.budget]
/// max_cost_usd = 0.50
/// conversation = { max_cost_usd = 5.0, max_turns = 200 }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Defaults {
    /// Model for agents without `model`, `<provider>/<model>`.
    pub model: Option<String>,
    /// Thinking level for agents without `thinking`.
    pub thinking: Option<ThinkingLevel>,
    /// `[defaults.permissions]`: tool permission rules every agent starts from; an agent
    /// file's `permissions:` override them (see `flue_core::permission::PermissionSource`).
    pub permissions: Vec<(String, Permission)>,
    /// `[defaults.budget]`: spending limits of every agent's submissions and conversations,
    /// the shape of an agent file's `budget:`; an agent's own limits replace them one by one.
    pub budget: Option<Budget>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    defaults: RawDefaults,
    sandbox: Option<RawSandbox>,
    #[serde(default)]
    mcp: BTreeMap<Spanned<String>, RawMcpServer>,
    #[serde(default)]
    providers: BTreeMap<Spanned<String>, Spanned<RawProvider>>,
    store: Option<Spanned<RawStore>>,
    #[serde(default)]
    schedules: BTreeMap<Spanned<String>, Spanned<RawSchedule>>,
    hooks: Option<Spanned<toml::Value>>,
    claude_code: Option<RawClaudeCode>,
    tasks: Option<RawTasks>,
}

/// `[tasks]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTasks {
    max_background_per_conversation: Option<Spanned<usize>>,
    max_background_per_server: Option<Spanned<usize>>,
}

/// `[claude_code]`: what of Claude Code's own configuration the workspace takes.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClaudeCode {
    settings: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStore {
    url: Option<Spanned<String>>,
    lease_ms: Option<Spanned<u64>>,
}

/// One `[mcp.<name>]` table: the keys of both server kinds, sorted out after deserialising.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMcpServer {
    url: Option<Spanned<String>>,
    transport: Option<Spanned<String>>,
    headers: Option<BTreeMap<String, String>>,
    oauth: Option<Spanned<RawOAuth>>,
    sampling: Option<bool>,
    timeout_ms: Option<Spanned<u64>>,
    elicitation_timeout_ms: Option<Spanned<u64>>,
    reset_timeout_on_progress: Option<bool>,
    command: Option<Spanned<String>>,
    args: Option<Vec<String>>,
    env: Option<BTreeMap<String, String>>,
    cwd: Option<Spanned<String>>,
}

/// `[mcp.<name>.oauth]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOAuth {
    client_id: Option<String>,
    client_secret: Option<String>,
    client_metadata_url: Option<String>,
    scopes: Option<Vec<String>>,
    grant: Option<String>,
    redirect: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSandbox {
    kind: Option<Spanned<String>>,
    seed: Option<Spanned<toml::Value>>,
    exclude: Option<Spanned<Vec<String>>>,
    network: Option<Spanned<bool>>,
    timeout_ms: Option<Spanned<u64>>,
    snapshot: Option<Spanned<String>>,
    sandbox_id: Option<Spanned<String>>,
    api_url: Option<Spanned<String>>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDefaults {
    model: Option<Spanned<String>>,
    thinking: Option<Spanned<String>>,
    #[serde(default)]
    permissions: BTreeMap<Spanned<String>, Spanned<String>>,
    budget: Option<Spanned<Budget>>,
}

/// Most problems of the unknown-key and wrong-type sort reported from one flue.toml.
const MAX_TOML_PROBLEMS: usize = 50;

/// Parses and checks the text of flue.toml, reporting every problem found. A syntax error
/// stops there (the rest cannot be read reliably); an unknown key or a value of the wrong type
/// is reported, its line set aside (a table header's whole table), and the rest read again, so
/// that every such problem is reported in one go.
pub(crate) fn parse(text: &str, diagnostics: &mut Vec<Diagnostic>) -> WorkspaceConfig {
    let mut current = text.to_owned();
    let mut n_problems = 0;
    // Header lines of tables that had a line set aside: their table-level checks (a required
    // key missing) may only be echoes of that line, so they are not reported this time.
    let mut touched_headers: Vec<usize> = Vec::new();
    let raw: RawConfig = loop {
        let error = match toml::from_str(&current) {
            Ok(raw) => break raw,
            Err(error) => error,
        };
        let line = error.span().map_or(1, |span| line_of(&current, &span));
        diagnostics.push(Diagnostic::at(PATH, line, toml_message(error.message())));
        n_problems += 1;
        let is_syntax_error = current.parse::<toml::Table>().is_err();
        let set_aside = match error.span() {
            Some(span) if !is_syntax_error && n_problems < MAX_TOML_PROBLEMS => {
                blank_lines(&current, &span)
            }
            _ => None,
        };
        match set_aside {
            Some(next) => {
                touched_headers.extend(header_line_above(&current, line));
                current = next;
            }
            None => return WorkspaceConfig::default(),
        }
    };
    let text = current.as_str();
    let first_checked = diagnostics.len();
    let mut notes = Vec::new();
    let config = WorkspaceConfig {
        defaults: defaults(text, raw.defaults, diagnostics),
        sandbox: raw
            .sandbox
            .and_then(|sandbox| sandbox_settings(text, sandbox, diagnostics)),
        mcp: mcp_servers(text, raw.mcp, diagnostics),
        providers: providers::check(text, raw.providers, diagnostics),
        store: raw
            .store
            .and_then(|store| store_settings(text, store, diagnostics)),
        schedules: raw
            .schedules
            .into_iter()
            .filter_map(|(name, raw)| schedule::from_toml(text, &name, raw, diagnostics))
            .collect(),
        hooks: raw
            .hooks
            .map(|hooks| toml_hooks(text, hooks, diagnostics, &mut notes))
            .unwrap_or_default(),
        ignore_claude_settings: raw.claude_code.and_then(|claude_code| claude_code.settings)
            == Some(false),
        tasks: raw
            .tasks
            .map(|tasks| task_settings(text, tasks, diagnostics))
            .unwrap_or_default(),
        notes,
    };
    let mut idx = first_checked;
    while idx < diagnostics.len() {
        if diagnostics[idx]
            .line
            .is_some_and(|line| touched_headers.contains(&line))
        {
            diagnostics.remove(idx);
        } else {
            idx += 1;
        }
    }
    config
}

/// The 1-based line of the table header above `line` (or on it), if any.
fn header_line_above(text: &str, line: usize) -> Option<usize> {
    let lines: Vec<&str> = text.split('\n').collect();
    (0..line.min(lines.len()))
        .rev()
        .find(|idx| lines[*idx].trim_start().starts_with('['))
        .map(|idx| idx + 1)
}

/// `[store]` checked: a Postgres URL, and a lease of at least 500 ms.
/// `[hooks]`: read as the JSON it mirrors, every problem reported at the table.
fn toml_hooks(
    text: &str,
    raw: Spanned<toml::Value>,
    diagnostics: &mut Vec<Diagnostic>,
    notes: &mut Vec<Diagnostic>,
) -> Vec<flue_core::hook::CommandHookSpec> {
    let line = line_of(text, &raw.span());
    let value = serde_json::to_value(raw.into_inner()).unwrap_or_default();
    let parsed = crate::hooks::parse(&value, PATH);
    for finding in &parsed.problems {
        let line = crate::hooks::line_of(text, line, finding);
        let message = format!("[hooks]: {}", finding.message);
        diagnostics.push(Diagnostic::at(PATH, line, message));
    }
    for finding in &parsed.notes {
        let line = crate::hooks::line_of(text, line, finding);
        let message = format!("[hooks]: {}", finding.message);
        notes.push(Diagnostic::at(PATH, line, message));
    }
    parsed.specs
}

fn task_settings(text: &str, raw: RawTasks, diagnostics: &mut Vec<Diagnostic>) -> TaskSettings {
    let mut positive = |key: &str, value: Option<Spanned<usize>>| {
        let value = value?;
        if *value.get_ref() == 0 {
            diagnostics.push(Diagnostic::at(
                PATH,
                line_of(text, &value.span()),
                format!("`tasks.{key}` must be at least 1"),
            ));
            return None;
        }
        Some(value.into_inner())
    };
    TaskSettings {
        max_background_per_conversation: positive(
            "max_background_per_conversation",
            raw.max_background_per_conversation,
        ),
        max_background_per_server: positive(
            "max_background_per_server",
            raw.max_background_per_server,
        ),
    }
}

fn store_settings(
    text: &str,
    raw: Spanned<RawStore>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<StoreSettings> {
    let line = line_of(text, &raw.span());
    let raw = raw.into_inner();
    let Some(url) = raw.url else {
        diagnostics.push(Diagnostic::at(
            PATH,
            line,
            "`[store]` needs `url = \"postgres://user:${PASSWORD_VAR}@host:5432/database\"`"
                .to_owned(),
        ));
        return None;
    };
    let url_line = line_of(text, &url.span());
    let url = url.into_inner();
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        diagnostics.push(Diagnostic::at(
            PATH,
            url_line,
            "`store.url` must be a postgres:// URL (the default store, .flue/flue.db, needs no \
             [store] section)"
                .to_owned(),
        ));
        return None;
    }
    let lease_ms = match raw.lease_ms {
        Some(lease) if *lease.get_ref() < 500 => {
            diagnostics.push(Diagnostic::at(
                PATH,
                line_of(text, &lease.span()),
                format!(
                    "`store.lease_ms = {}` is too short: use at least 500 (renewals run every \
                     third of it)",
                    lease.get_ref()
                ),
            ));
            return None;
        }
        lease => lease.map(Spanned::into_inner),
    };
    Some(StoreSettings { url, lease_ms })
}

/// `[mcp.<name>.oauth]` checked: known words, an https or http client metadata url, and the
/// client credentials grant only with an id and a secret.
fn oauth(name: &str, raw: RawOAuth) -> Result<McpOAuthDecl, String> {
    let client_credentials = match raw.grant.as_deref() {
        None => false,
        Some(grant) => fields::one_of_str(grant, "oauth grant", mcp::GRANTS)?,
    };
    let follow_redirect = match raw.redirect.as_deref() {
        None => false,
        Some(redirect) => fields::one_of_str(redirect, "oauth redirect", mcp::REDIRECTS)?,
    };
    if let Some(url) = &raw.client_metadata_url {
        mcp::check_url(&format!("mcp.{name}.oauth.client_metadata_url"), url)?;
    }
    if client_credentials && (raw.client_id.is_none() || raw.client_secret.is_none()) {
        return Err(format!(
            "mcp server `{name}`: `grant = \"client_credentials\"` needs `client_id` and `client_secret`"
        ));
    }
    Ok(McpOAuthDecl {
        client_id: raw.client_id,
        client_secret: raw.client_secret,
        client_metadata_url: raw.client_metadata_url,
        scopes: raw.scopes.unwrap_or_default(),
        client_credentials,
        follow_redirect,
    })
}

/// `[mcp.<name>]` tables as server declarations; bad ones are reported and left out.
fn mcp_servers(
    text: &str,
    raw: BTreeMap<Spanned<String>, RawMcpServer>,
    diagnostics: &mut Vec<Diagnostic>,
) -> BTreeMap<String, McpServerDecl> {
    let mut servers = BTreeMap::new();
    for (name, server) in raw {
        let line = line_of(text, &name.span());
        let name = name.into_inner();
        let mut report = |line: usize, message: String| {
            diagnostics.push(Diagnostic::at(PATH, line, message));
        };
        if !mcp::is_server_name(&name) {
            report(
                line,
                format!("invalid mcp server name `{name}`: use letters, digits, `-` and `_`"),
            );
            continue;
        }
        let remote_keys = [
            ("url", server.url.is_some()),
            ("transport", server.transport.is_some()),
            ("headers", server.headers.is_some()),
            ("oauth", server.oauth.is_some()),
        ];
        let stdio_keys = [
            ("command", server.command.is_some()),
            ("args", server.args.is_some()),
            ("env", server.env.is_some()),
            ("cwd", server.cwd.is_some()),
        ];
        let set = |keys: &[(&'static str, bool)]| -> Vec<&'static str> {
            keys.iter()
                .filter(|(_, set)| *set)
                .map(|(key, _)| *key)
                .collect()
        };
        let timeout_ms = match server.timeout_ms {
            Some(timeout) if *timeout.get_ref() == 0 => {
                report(
                    line_of(text, &timeout.span()),
                    format!("`mcp.{name}.timeout_ms` must be a whole number of at least 1, got 0"),
                );
                continue;
            }
            timeout => timeout.map(Spanned::into_inner),
        };
        let elicitation_timeout_ms = match server.elicitation_timeout_ms {
            Some(timeout) if *timeout.get_ref() == 0 => {
                report(
                    line_of(text, &timeout.span()),
                    format!(
                        "`mcp.{name}.elicitation_timeout_ms` must be a whole number of at least 1, got 0"
                    ),
                );
                continue;
            }
            timeout => timeout.map(Spanned::into_inner),
        };
        let reset_timeout_on_progress = server.reset_timeout_on_progress.unwrap_or(false);
        let decl = match (server.url, server.command) {
            (Some(_), Some(_)) => {
                report(
                    line,
                    format!("mcp server `{name}` sets both `url` and `command`: keep one"),
                );
                continue;
            }
            (None, None) => {
                report(
                    line,
                    format!(
                        "mcp server `{name}` needs `url` (remote server) or `command` (local process)"
                    ),
                );
                continue;
            }
            (Some(url), None) => {
                if let Some(key) = set(&stdio_keys).first() {
                    report(
                        line,
                        format!(
                            "`{key}` in mcp server `{name}` only applies to `command` servers: remove it"
                        ),
                    );
                    continue;
                }
                let url_line = line_of(text, &url.span());
                let url = url.into_inner();
                if let Err(message) = mcp::check_url(&format!("mcp.{name}.url"), &url) {
                    report(url_line, message);
                    continue;
                }
                let transport = match server.transport {
                    None => McpTransport::default(),
                    Some(transport) => {
                        match fields::one_of_str(
                            transport.get_ref(),
                            "mcp transport",
                            mcp::TRANSPORTS,
                        ) {
                            Ok(transport) => transport,
                            Err(message) => {
                                report(line_of(text, &transport.span()), message);
                                continue;
                            }
                        }
                    }
                };
                let oauth = match server.oauth {
                    None => None,
                    Some(raw) => {
                        let oauth_line = line_of(text, &raw.span());
                        match oauth(&name, raw.into_inner()) {
                            Ok(oauth) => Some(oauth),
                            Err(message) => {
                                report(oauth_line, message);
                                continue;
                            }
                        }
                    }
                };
                McpServerDecl::Remote(RemoteMcpServer {
                    url,
                    transport,
                    headers: server.headers.unwrap_or_default(),
                    oauth,
                    sampling: server.sampling.unwrap_or(false),
                    timeout_ms,
                    elicitation_timeout_ms,
                    reset_timeout_on_progress,
                })
            }
            (None, Some(command)) => {
                if let Some(key) = set(&remote_keys).first() {
                    report(
                        line,
                        format!(
                            "`{key}` in mcp server `{name}` only applies to `url` servers: remove it"
                        ),
                    );
                    continue;
                }
                let command_line = line_of(text, &command.span());
                let command = command.into_inner();
                if command.trim().is_empty() {
                    report(
                        command_line,
                        format!("`mcp.{name}.command` must not be empty"),
                    );
                    continue;
                }
                let cwd = match server.cwd {
                    Some(cwd) if cwd.get_ref().trim().is_empty() => {
                        report(
                            line_of(text, &cwd.span()),
                            format!("`mcp.{name}.cwd` must not be empty"),
                        );
                        continue;
                    }
                    cwd => cwd.map(Spanned::into_inner),
                };
                McpServerDecl::Stdio(StdioMcpServer {
                    command,
                    args: server.args.unwrap_or_default(),
                    env: server.env.unwrap_or_default(),
                    cwd,
                    sampling: server.sampling.unwrap_or(false),
                    timeout_ms,
                    elicitation_timeout_ms,
                    reset_timeout_on_progress,
                })
            }
        };
        servers.insert(name, decl);
    }
    servers
}

/// `[sandbox]`: the kind (default virtual) and options that apply to it.
fn sandbox_settings(
    text: &str,
    raw: RawSandbox,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<SandboxSettings> {
    let mut valid = true;
    let mut kind = SandboxKind::Virtual;
    if let Some(word) = &raw.kind {
        match fields::one_of_str(word.get_ref(), "sandbox", SANDBOXES) {
            Ok(parsed) => kind = parsed,
            Err(message) => {
                diagnostics.push(Diagnostic::at(PATH, line_of(text, &word.span()), message));
                valid = false;
            }
        }
    }
    let mut lines = Vec::new();
    let mut options = SandboxOptions::default();
    if let Some(seed) = raw.seed {
        lines.push(("seed", line_of(text, &seed.span())));
        match seed.get_ref() {
            toml::Value::String(dir) if !dir.trim().is_empty() => {
                match sandbox::seed_dir("sandbox.seed", dir) {
                    Ok(setting) => options.seed = Some(setting),
                    Err(message) => {
                        diagnostics.push(Diagnostic::at(
                            PATH,
                            line_of(text, &seed.span()),
                            message,
                        ));
                        valid = false;
                    }
                }
            }
            toml::Value::Boolean(false) => options.seed = Some(SeedSetting::Empty),
            _ => {
                diagnostics.push(Diagnostic::at(
                    PATH,
                    line_of(text, &seed.span()),
                    "`sandbox.seed` must be a directory path or `false` (an empty workspace)",
                ));
                valid = false;
            }
        }
    }
    if let Some(exclude) = raw.exclude {
        let line = line_of(text, &exclude.span());
        lines.push(("exclude", line));
        match sandbox::check_exclude("sandbox.exclude", exclude.into_inner()) {
            Ok(names) => options.exclude = Some(names),
            Err(message) => {
                diagnostics.push(Diagnostic::at(PATH, line, message));
                valid = false;
            }
        }
    }
    if let Some(network) = raw.network {
        lines.push(("network", line_of(text, &network.span())));
        options.network = Some(network.into_inner());
    }
    if let Some(timeout) = raw.timeout_ms {
        lines.push(("timeout_ms", line_of(text, &timeout.span())));
        if *timeout.get_ref() == 0 {
            diagnostics.push(Diagnostic::at(
                PATH,
                line_of(text, &timeout.span()),
                "`sandbox.timeout_ms` must be at least 1",
            ));
            valid = false;
        }
        options.timeout_ms = Some(timeout.into_inner());
    }
    for (key, value, slot) in [
        ("snapshot", raw.snapshot, &mut options.snapshot),
        ("sandbox_id", raw.sandbox_id, &mut options.sandbox_id),
        ("api_url", raw.api_url, &mut options.api_url),
    ] {
        if let Some(value) = value {
            lines.push((key, line_of(text, &value.span())));
            *slot = Some(value.into_inner());
        }
    }
    for (key, message) in unsupported(kind, &options, sandbox::Syntax::Toml) {
        let line = lines
            .iter()
            .find(|(name, _)| *name == key)
            .map_or(1, |(_, line)| *line);
        diagnostics.push(Diagnostic::at(PATH, line, message));
        valid = false;
    }
    valid.then_some(SandboxSettings { kind, options })
}

fn defaults(text: &str, raw: RawDefaults, diagnostics: &mut Vec<Diagnostic>) -> Defaults {
    let mut defaults = Defaults::default();
    if let Some(model) = raw.model {
        match fields::model_spec(model.get_ref()) {
            Ok(()) => defaults.model = Some(model.into_inner()),
            Err(message) => {
                diagnostics.push(Diagnostic::at(PATH, line_of(text, &model.span()), message));
            }
        }
    }
    for (pattern, permission) in raw.permissions {
        let line = line_of(text, &pattern.span());
        if let Err(problem) = flue_core::permission::check_permission_pattern(pattern.get_ref()) {
            diagnostics.push(Diagnostic::at(
                PATH,
                line,
                format!("[defaults.permissions]: {problem}"),
            ));
            continue;
        }
        match fields::one_of_str(permission.get_ref(), "permission", PERMISSIONS) {
            Ok(permission) => defaults
                .permissions
                .push((pattern.into_inner(), permission)),
            Err(message) => diagnostics.push(Diagnostic::at(
                PATH,
                line_of(text, &permission.span()),
                format!("[defaults.permissions] {message}"),
            )),
        }
    }
    if let Some(budget) = raw.budget {
        match budget.get_ref().check() {
            Ok(()) => defaults.budget = Some(budget.into_inner()),
            Err(problem) => diagnostics.push(Diagnostic::at(
                PATH,
                line_of(text, &budget.span()),
                format!("[defaults.budget]: {problem}"),
            )),
        }
    }
    if let Some(thinking) = raw.thinking {
        let levels = fields::thinking_levels();
        match fields::one_of_str(thinking.get_ref(), "thinking level", &levels) {
            Ok(level) => defaults.thinking = Some(level),
            Err(message) => {
                diagnostics.push(Diagnostic::at(
                    PATH,
                    line_of(text, &thinking.span()),
                    message,
                ));
            }
        }
    }
    defaults
}

/// `text` with the lines `span` touches emptied (their newlines kept, so line numbers stay), and
/// a table header's whole table with it; `None` when nothing would change.
fn blank_lines(text: &str, span: &Range<usize>) -> Option<String> {
    let first = line_of(text, span) - 1;
    let last = line_of(
        text,
        &(span.end.saturating_sub(1).max(span.start)..span.end),
    ) - 1;
    let lines: Vec<&str> = text.split('\n').collect();
    let mut end = last;
    if lines
        .get(first)
        .is_some_and(|line| line.trim_start().starts_with('['))
    {
        while end + 1 < lines.len() && !lines[end + 1].trim_start().starts_with('[') {
            end += 1;
        }
    }
    if (first..=end).all(|idx| lines.get(idx).is_none_or(|line| line.trim().is_empty())) {
        return None;
    }
    let blanked: Vec<&str> = lines
        .iter()
        .enumerate()
        .map(|(idx, line)| {
            if (first..=end).contains(&idx) {
                ""
            } else {
                line
            }
        })
        .collect();
    Some(blanked.join("\n"))
}

/// Our wording for a toml/serde message: unknown fields become unknown keys with a suggestion,
/// anything else is prefixed and lowercased.
fn toml_message(message: &str) -> String {
    let message = message.trim();
    if let Some(rest) = message.strip_prefix("unknown field `") {
        // "unknown field `x`, expected `a` or `b`" / "expected one of `a`, `b`".
        let mut parts = rest.split('`');
        let key = parts.next().unwrap_or_default();
        let known: Vec<&str> = parts.skip(1).step_by(2).collect();
        let suggestion = did_you_mean(key, known.iter().copied());
        if !suggestion.is_empty() {
            return format!("unknown key `{key}`{suggestion}");
        }
        if known.contains(&"defaults") && DEFAULTS_KEYS.contains(&key) {
            return format!("unknown key `{key}` at the top level: put it under [defaults]");
        }
        if known.is_empty() {
            return format!("unknown key `{key}`: this table takes no keys yet");
        }
        return format!(
            "unknown key `{key}` (known keys here: {})",
            known.join(", ")
        );
    }
    let mut chars = message.chars();
    let first = chars
        .next()
        .map(|c| c.to_lowercase().collect::<String>())
        .unwrap_or_default();
    format!(
        "invalid flue.toml: {first}{}",
        chars.as_str().replace('\n', "; ")
    )
}
