//! One agent file (`agents/<name>.md`): its settings, read and checked on their own.
//!
//! Checks that need the rest of the workspace (subagents and skills exist, a model is set
//! somewhere, no cycles) live in the workspace module.

use std::collections::BTreeMap;

use flue_core::store::NoteLimits;
use flue_core::{
    Budget, BudgetLimits, DurabilityConfig, Permission, ThinkingLevel, config::Compaction,
    config::CompactionConfig,
};
use gray_matter::Pod;

use crate::diagnostic::Diagnostic;
use crate::fields::{self, Report};
use crate::frontmatter::{self, KeyLines};
use crate::mcp::{self, McpServerDecl};
use crate::sandbox::{self, SandboxKind, SandboxOptions};
use crate::schedule::{self, Schedule};

/// An agent as declared by its file: the frontmatter settings and the instructions body.
///
/// Unset settings are `None` or empty; [`crate::Workspace::agent_config`] applies the
/// flue.toml defaults.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AgentFile {
    /// The agent's name: the file stem (`reviewer` for `agents/reviewer.md`).
    pub name: String,
    /// The file, relative to the workspace root with `/` separators; a file outside the root
    /// keeps the path it was given by.
    pub path: String,
    /// `description`: what the agent is for.
    pub description: Option<String>,
    /// `model`: `<provider>/<model>`, checked for shape.
    pub model: Option<String>,
    /// `model: false`: no model of its own and no flue.toml default; every call chooses one
    /// (`flue run --model`).
    pub model_per_call: bool,
    /// `thinking`: reasoning effort.
    pub thinking: Option<ThinkingLevel>,
    /// `skills`: names of skills under `.agents/skills/`, all present.
    pub skills: Vec<String>,
    /// `subagents`: names of other agents in `agents/`, all present, without cycles.
    pub subagents: Vec<String>,
    /// `task`: `false` withholds the model's `task` tool (delegating to a subagent or to a
    /// fresh copy of this agent), offered by default.
    pub task: Option<bool>,
    /// `tools`: names of built-in tools, all known.
    pub tools: Vec<String>,
    /// `tools`: the command tools declared inline, in order, each checked
    /// ([`flue_core::tool::CommandToolSpec::to_tool`] succeeds).
    pub command_tools: Vec<flue_core::tool::CommandToolSpec>,
    /// `tools`: the custom tools declared inline (`custom: true`), answered by the
    /// application, in order, each checked ([`crate::CustomToolDecl::to_tool`] succeeds).
    pub custom_tools: Vec<crate::CustomToolDecl>,
    /// `result`: the JSON Schema of the structured result of every message to this agent that
    /// asks for none (inline, or read from the file it names relative to the agent file),
    /// checked.
    pub result: Option<serde_json::Value>,
    /// `mcp`: MCP servers by name, checked for shape only.
    pub mcp: BTreeMap<String, McpServerDecl>,
    /// `sandbox`: where the agent's commands run.
    pub sandbox: Option<SandboxKind>,
    /// The options given with `sandbox: { kind: ..., ... }`, checked against the kind.
    pub sandbox_options: SandboxOptions,
    /// `compaction`: `false` or settings.
    pub compaction: Option<Compaction>,
    /// `durability`: limits for durable submissions.
    pub durability: Option<DurabilityConfig>,
    /// `max_turns`: limit on model turns per operation, at least 1.
    pub max_turns: Option<u32>,
    /// `budget`: spending limits of each submission (`max_cost_usd`, `max_turns`) and of the
    /// conversation (`conversation: {max_cost_usd, max_turns}`).
    pub budget: Option<Budget>,
    /// `role`: the default role of the agent's calls (a role under `.agents/roles/`).
    pub role: Option<String>,
    /// `permissions`: tool names or globs (`mcp__*`, `bash`) mapped to `always_allow` or
    /// `always_ask`, sorted by pattern.
    pub permissions: Vec<(String, Permission)>,
    /// `cwd`: the working directory inside the sandbox where the agent's relative paths and
    /// commands start (relative to the sandbox's own), for root sessions.
    pub cwd: Option<String>,
    /// `schedules`: messages or signals sent to the agent on a cron line or an interval, by
    /// name.
    pub schedules: Vec<Schedule>,
    /// `hooks`: command hooks in the shape of Claude Code's settings.json `hooks` object
    /// (docs/hooks.md); a subagent's are not used (tasks run under the root agent's hooks).
    pub hooks: Vec<flue_core::hook::CommandHookSpec>,
    /// What the file declares that flue skips or ignores (a hook event flue has no point for,
    /// a hook key it does not read): warnings, not problems.
    pub notes: Vec<Diagnostic>,
    /// `memory`: `true`, or the bounds (`max_note_bytes`, `max_notes`, `max_subject_bytes`),
    /// for memory across conversations; off when unset or `false`.
    pub memory: Option<NoteLimits>,
    /// `hold_reply_until_stop`: the final reply streams only once the `Stop` hooks passed it.
    pub hold_reply_until_stop: bool,
    /// The markdown body, without leading blank lines and trailing whitespace.
    pub instructions: String,
}

/// An agent file as parsed, with what the workspace checks need beyond the public fields.
pub(crate) struct ParsedAgent {
    /// The agent.
    pub(crate) file: AgentFile,
    /// Where the frontmatter's keys are.
    pub(crate) lines: KeyLines,
    /// Whether the frontmatter has a `model` key (valid or not).
    pub(crate) declares_model: bool,
    /// `result:` names a schema file, which the loader reads (relative to this file).
    pub(crate) result_file: Option<String>,
}

/// The frontmatter keys an agent file may use.
pub(crate) const AGENT_KEYS: &[&str] = &[
    "description",
    "model",
    "thinking",
    "skills",
    "subagents",
    "task",
    "tools",
    "mcp",
    "sandbox",
    "compaction",
    "durability",
    "max_turns",
    "budget",
    "role",
    "permissions",
    "cwd",
    "schedules",
    "hooks",
    "memory",
    "result",
    "hold_reply_until_stop",
];

const COMPACTION_KEYS: &[&str] = &["reserve_tokens", "keep_recent_tokens", "model"];
const DURABILITY_KEYS: &[&str] = &["max_attempts", "timeout_ms"];
const MEMORY_KEYS: &[&str] = &["max_note_bytes", "max_notes", "max_subject_bytes"];

/// Parses the agent `name` from `text`, the file at `path`, reporting every problem. Returns
/// `None` only when the file as a whole is unusable (no readable frontmatter); a bad setting is
/// reported and left unset.
pub(crate) fn parse(
    name: &str,
    path: &str,
    text: &str,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<ParsedAgent> {
    let document = frontmatter::parse(path, text, diagnostics)?;
    let mut file = AgentFile {
        name: name.to_owned(),
        path: path.to_owned(),
        instructions: document.body,
        ..AgentFile::default()
    };
    let mut report = Report::new(path, &document.lines, diagnostics);
    let mut result_file = None;
    for (key, value) in &document.fields {
        if key == "result" {
            match report.check(&[key], crate::result_schema::parse(value)) {
                Some(crate::result_schema::ResultDecl::Inline(schema)) => {
                    file.result = Some(schema);
                }
                Some(crate::result_schema::ResultDecl::File(name)) => result_file = Some(name),
                None => {}
            }
            continue;
        }
        read_field(&mut file, key, value, &mut report);
    }
    let declares_model = document.fields.iter().any(|(key, _)| key == "model");
    Some(ParsedAgent {
        file,
        lines: document.lines,
        declares_model,
        result_file,
    })
}

fn read_field(file: &mut AgentFile, key: &str, value: &Pod, report: &mut Report<'_>) {
    let keys = [key];
    match key {
        "description" => file.description = report.check(&keys, fields::string(key, value)),
        "model" => match value {
            Pod::Boolean(false) => file.model_per_call = true,
            Pod::Boolean(true) => report.error(
                &keys,
                "`model` must be `<provider>/<model>`, or `false` to choose the model per call \
                 (`flue run --model`), got true",
            ),
            _ => file.model = report.check(&keys, fields::model(key, value)),
        },
        "thinking" => {
            let levels = fields::thinking_levels();
            file.thinking =
                report.check(&keys, fields::one_of(key, value, "thinking level", &levels));
        }
        "skills" => {
            file.skills = report
                .check(&keys, fields::name_list(key, value))
                .unwrap_or_default();
        }
        "subagents" => {
            file.subagents = report
                .check(&keys, fields::name_list(key, value))
                .unwrap_or_default();
        }
        "task" => file.task = report.check(&keys, fields::boolean(key, value)),
        "tools" => {
            let declared = crate::tools::parse(value, report);
            (file.tools, file.command_tools, file.custom_tools) =
                (declared.builtins, declared.commands, declared.custom);
        }
        "mcp" => file.mcp = mcp::parse(value, report),
        "sandbox" => {
            (file.sandbox, file.sandbox_options) = sandbox::parse_frontmatter(value, report);
        }
        "compaction" => file.compaction = compaction(value, report),
        "durability" => file.durability = durability(value, report),
        "max_turns" => file.max_turns = report.check(&keys, fields::positive_u32(key, value)),
        "budget" => file.budget = budget(value, report),
        "role" => file.role = report.check(&keys, fields::string(key, value)),
        "permissions" => file.permissions = permissions(value, report),
        "cwd" => file.cwd = report.check(&keys, cwd(value)),
        "schedules" => {
            let (agent, path) = (file.name.clone(), file.path.clone());
            file.schedules = schedule::parse(&agent, &path, value, report);
        }
        "hooks" => {
            let parsed = crate::hooks::parse(&crate::tools::to_json(value), &file.path);
            for finding in &parsed.problems {
                let line = report.hooks_line(key, finding);
                report.error_at_line(line, finding.message.clone());
            }
            for finding in &parsed.notes {
                let line = report.hooks_line(key, finding);
                file.notes
                    .push(Diagnostic::at(&file.path, line, finding.message.clone()));
            }
            file.hooks = parsed.specs;
        }
        "memory" => file.memory = memory(value, report),
        "hold_reply_until_stop" => {
            file.hold_reply_until_stop = report
                .check(&keys, fields::boolean(key, value))
                .unwrap_or(false);
        }
        _ => report.unknown_key(&keys, "", AGENT_KEYS),
    }
}

/// A working directory: a non-empty path without NUL that does not climb out with `..`.
fn cwd(value: &Pod) -> Result<String, String> {
    let path = fields::string("cwd", value)?;
    if path.trim().is_empty() || path.contains('\0') {
        return Err("`cwd` must be a directory path like `src` or `packages/app`".to_owned());
    }
    if path.split('/').any(|part| part == "..") {
        return Err(format!(
            "`cwd` must not climb with `..`, got {path:?}: name a directory inside the workspace"
        ));
    }
    Ok(path)
}

fn compaction(value: &Pod, report: &mut Report<'_>) -> Option<Compaction> {
    let entries = match value {
        Pod::Boolean(false) => return Some(Compaction::Disabled),
        Pod::Boolean(true) => return Some(Compaction::default()),
        other => {
            let expected = "`false` or a mapping with reserve_tokens, keep_recent_tokens and model";
            report.check(
                &["compaction"],
                fields::mapping("compaction", other, expected),
            )?
        }
    };
    let mut config = CompactionConfig::default();
    let mut valid = true;
    for (key, value) in entries {
        let keys = ["compaction", key.as_str()];
        let dotted = format!("compaction.{key}");
        let ok = match key.as_str() {
            "reserve_tokens" => report
                .check(&keys, fields::u64_at_least(&dotted, value, 0))
                .map(|tokens| config.reserve_tokens = Some(tokens)),
            "keep_recent_tokens" => report
                .check(&keys, fields::u64_at_least(&dotted, value, 0))
                .map(|tokens| config.keep_recent_tokens = Some(tokens)),
            "model" => report
                .check(&keys, fields::model(&dotted, value))
                .map(|model| config.model = Some(model)),
            _ => {
                report.unknown_key(&keys, " in `compaction`", COMPACTION_KEYS);
                None
            }
        };
        valid &= ok.is_some();
    }
    valid.then_some(Compaction::Enabled(config))
}

/// `permissions:`: every entry checked, the valid ones kept.
fn permissions(value: &Pod, report: &mut Report<'_>) -> Vec<(String, Permission)> {
    let expected = "a mapping of tool names or globs (such as `mcp__*`) to always_allow or \
                    always_ask";
    let Some(entries) = report.check(
        &["permissions"],
        fields::mapping("permissions", value, expected),
    ) else {
        return Vec::new();
    };
    let mut rules = Vec::new();
    for (pattern, value) in entries {
        let keys = ["permissions", pattern.as_str()];
        let dotted = format!("permissions.{pattern}");
        let checked = flue_core::permission::check_permission_pattern(pattern)
            .map_err(|problem| format!("`permissions`: {problem}"));
        let Some(()) = report.check(&keys, checked) else {
            continue;
        };
        if let Some(permission) = report.check(
            &keys,
            fields::one_of(&dotted, value, "permission", PERMISSIONS),
        ) {
            rules.push((pattern.clone(), permission));
        }
    }
    rules
}

/// The permission words, as the agent file and flue.toml spell them.
pub(crate) const PERMISSIONS: &[(&str, Permission)] = &[
    ("always_allow", Permission::AlwaysAllow),
    ("always_ask", Permission::AlwaysAsk),
];

/// The keys of `budget:`, and of its `conversation:`.
const BUDGET_KEYS: &[&str] = &["max_cost_usd", "max_turns", "conversation"];
const BUDGET_LIMIT_KEYS: &[&str] = &["max_cost_usd", "max_turns"];

/// `budget:` (also flue.toml's `[defaults.budget]`, read as the same shape): each limit
/// checked, every problem reported with its dotted key.
pub(crate) fn budget(value: &Pod, report: &mut Report<'_>) -> Option<Budget> {
    let expected = "a mapping with max_cost_usd, max_turns and conversation";
    let entries = report.check(&["budget"], fields::mapping("budget", value, expected))?;
    let mut budget = Budget::default();
    let mut valid = true;
    for (key, value) in entries {
        let keys = ["budget", key.as_str()];
        let ok = if key == "conversation" {
            budget_limits(value, report).map(|limits| budget.conversation = limits)
        } else {
            limit(&keys, value, report).map(|limit| match limit {
                Limit::Cost(cost) => budget.max_cost_usd = Some(cost),
                Limit::Turns(turns) => budget.max_turns = Some(turns),
            })
        };
        valid &= ok.is_some();
    }
    valid.then_some(budget)
}

enum Limit {
    Cost(f64),
    Turns(u32),
}

/// One limit of a budget, at `keys` (`max_cost_usd` or `max_turns`).
fn limit(keys: &[&str], value: &Pod, report: &mut Report<'_>) -> Option<Limit> {
    let dotted = keys.join(".");
    match keys.last().copied().unwrap_or_default() {
        "max_cost_usd" => report
            .check(keys, fields::positive_usd(&dotted, value))
            .map(Limit::Cost),
        "max_turns" => report
            .check(keys, fields::positive_u32(&dotted, value))
            .map(Limit::Turns),
        _ => {
            let (place, known) = if keys.len() > 2 {
                (" in `budget.conversation`", BUDGET_LIMIT_KEYS)
            } else {
                (" in `budget`", BUDGET_KEYS)
            };
            report.unknown_key(keys, place, known);
            None
        }
    }
}

fn budget_limits(value: &Pod, report: &mut Report<'_>) -> Option<BudgetLimits> {
    let expected = "a mapping with max_cost_usd and max_turns";
    let entries = report.check(
        &["budget", "conversation"],
        fields::mapping("budget.conversation", value, expected),
    )?;
    let mut limits = BudgetLimits::default();
    let mut valid = true;
    for (key, value) in entries {
        let keys = ["budget", "conversation", key.as_str()];
        let ok = limit(&keys, value, report).map(|limit| match limit {
            Limit::Cost(cost) => limits.max_cost_usd = Some(cost),
            Limit::Turns(turns) => limits.max_turns = Some(turns),
        });
        valid &= ok.is_some();
    }
    valid.then_some(limits)
}

/// `memory: true | false | {max_note_bytes, max_notes, max_subject_bytes}`.
fn memory(value: &Pod, report: &mut Report<'_>) -> Option<NoteLimits> {
    let expected = "`true`, `false` or a mapping with max_note_bytes, max_notes and \
                    max_subject_bytes";
    let entries = match value {
        Pod::Boolean(false) => return None,
        Pod::Boolean(true) => return Some(NoteLimits::default()),
        other => report.check(&["memory"], fields::mapping("memory", other, expected))?,
    };
    let mut limits = NoteLimits::default();
    let mut valid = true;
    for (key, value) in entries {
        let keys = ["memory", key.as_str()];
        let dotted = format!("memory.{key}");
        let bound = report.check(&keys, fields::u64_at_least(&dotted, value, 1));
        let ok = match key.as_str() {
            "max_note_bytes" => bound.map(|bound| limits.max_note_bytes = bound),
            "max_notes" => bound.map(|bound| limits.max_notes = bound),
            "max_subject_bytes" => bound.map(|bound| limits.max_subject_bytes = bound),
            _ => {
                report.unknown_key(&keys, " in `memory`", MEMORY_KEYS);
                None
            }
        };
        valid &= ok.is_some();
    }
    valid.then_some(limits)
}

fn durability(value: &Pod, report: &mut Report<'_>) -> Option<DurabilityConfig> {
    let expected = "a mapping with max_attempts and timeout_ms";
    let entries = report.check(
        &["durability"],
        fields::mapping("durability", value, expected),
    )?;
    let mut config = DurabilityConfig::default();
    let mut valid = true;
    for (key, value) in entries {
        let keys = ["durability", key.as_str()];
        let dotted = format!("durability.{key}");
        let ok = match key.as_str() {
            "max_attempts" => report
                .check(&keys, fields::positive_u32(&dotted, value))
                .map(|attempts| config.max_attempts = attempts),
            "timeout_ms" => report
                .check(&keys, fields::u64_at_least(&dotted, value, 1))
                .map(|timeout| config.timeout_ms = timeout),
            _ => {
                report.unknown_key(&keys, " in `durability`", DURABILITY_KEYS);
                None
            }
        };
        valid &= ok.is_some();
    }
    valid.then_some(config)
}
