//! Command hooks: the Claude Code hooks contract, run on the host at the workspace root.
//!
//! A command hook is a shell command declared in an agent file's `hooks:` or flue.toml's
//! `[hooks]`, for one event name and an optional matcher. When its point comes, the runtime
//! runs the command with `bash -c` at the workspace root, outside the agent's sandbox, with
//! the host environment reduced to the local sandbox's allow-list (plus `FLUE_PROJECT_DIR`
//! and `CLAUDE_PROJECT_DIR`, the root), a time limit and bounded output, and writes a JSON
//! object to its standard input (`session_id`, `cwd`, `hook_event_name`, `tool_name`,
//! `tool_input`, ...), whatever its size (a small one is also in [`HOOK_INPUT_VAR`]). Exit 0
//! reads standard output (JSON decision fields when it is a JSON object); exit 2 blocks with
//! standard error as the reason; any other exit is a non-blocking error, reported. A hook that
//! cannot answer at all (timed out, killed, not found, JSON that does not parse) is a failure:
//! at a blocking point it blocks unless `onFailure` says `continue`; one flue could not even
//! start fails closed wherever hooks can stop something, whatever `onFailure` says
//! ([`HookFailure::cannot_start`]). Flue's tools are shown to hooks under Claude Code's names
//! and field names where one exists ([`claude_tool_name`]); docs/hooks.md has the table.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use regex::Regex;
use serde_json::{Map, Value, json};

use super::http::{
    HTTP_HOOK_MAX_RESPONSE_BYTES, HttpHookClient, HttpHookError, HttpHookTarget, fill_header,
};
use super::prompt::{DEFAULT_PROMPT_HOOK_TIMEOUT_SECS, Judgement, PromptHookTarget, read_answer};
use super::{Hook, HookContext, HookDecision, HookEvent, HookFailure, HookPoint, Verdict};
use crate::error::{FlueError, Result};
use crate::sandbox::{ExecOptions, LocalSandbox, TIMEOUT_EXIT_CODE};
use crate::util::BoxFuture;

/// Seconds a command hook may run when it sets no `timeout` (Claude Code's default).
pub const DEFAULT_HOOK_TIMEOUT_SECS: u64 = 60;

/// The longest `timeout` a command hook may set (10 minutes).
pub const MAX_HOOK_TIMEOUT_SECS: u64 = 600;

/// The environment variable that also holds the hook's input when it is at most
/// [`HOOK_INPUT_VAR_MAX_BYTES`] long (for scripts written before the input came on standard
/// input; it is absent for a larger one, so read standard input).
pub const HOOK_INPUT_VAR: &str = "FLUE_HOOK_INPUT";

/// The largest input also given in [`HOOK_INPUT_VAR`]: well below the 128 KiB the kernel allows
/// one environment variable.
pub const HOOK_INPUT_VAR_MAX_BYTES: usize = 32 * 1024;

/// Bytes kept of a hook's standard error.
const HOOK_STDERR_BYTES: usize = 64 * 1024;

/// Bytes kept of a hook's standard output at least; four times the input's size when that is
/// more, so that a hook can answer a replacement of anything it was given (a redacted tool
/// result, reply or prompt), escaped as JSON.
const HOOK_STDOUT_MIN_BYTES: usize = 1024 * 1024;

/// Characters of a failing hook's standard error quoted in its failure.
const STDERR_QUOTE_CHARS: usize = 600;

/// Field renames of one tool: (flue's field, Claude Code's field).
type FieldRenames = &'static [(&'static str, &'static str)];

/// Flue's tools under Claude Code's names, with the fields renamed on the way (flue's name
/// first). A tool not listed keeps its name and fields (MCP tools are already named
/// `mcp__<server>__<tool>`).
const TOOL_NAMES: &[(&str, &str, FieldRenames)] = &[
    ("bash", "Bash", &[]),
    ("read_file", "Read", &[("path", "file_path")]),
    ("write_file", "Write", &[("path", "file_path")]),
    ("create_file", "Write", &[("path", "file_path")]),
    ("edit_file", "Edit", &[("path", "file_path")]),
    ("glob", "Glob", &[]),
    ("search_files", "Grep", &[("include", "glob")]),
    ("list_directory", "LS", &[]),
    ("task", "Task", &[]),
];

/// The name a hook sees for flue's tool `name`: Claude Code's (`bash` -> `Bash`,
/// `read_file` -> `Read`, ...) or the name itself.
pub fn claude_tool_name(name: &str) -> &str {
    TOOL_NAMES
        .iter()
        .find(|(flue, _, _)| *flue == name)
        .map_or(name, |(_, claude, _)| claude)
}

fn renames(name: &str) -> &'static [(&'static str, &'static str)] {
    TOOL_NAMES
        .iter()
        .find(|(flue, _, _)| *flue == name)
        .map_or(&[], |(_, _, renames)| renames)
}

/// A tool input as a hook sees it: flue's field names renamed to Claude Code's.
pub(super) fn to_claude_input(tool: &str, input: &Value) -> Value {
    rename_fields(
        input,
        renames(tool).iter().map(|(flue, claude)| (*flue, *claude)),
    )
}

/// A hook's `updatedInput` as the tool takes it: Claude Code's field names back to flue's.
fn from_claude_input(tool: &str, input: &Value) -> Value {
    rename_fields(
        input,
        renames(tool).iter().map(|(flue, claude)| (*claude, *flue)),
    )
}

fn rename_fields<'a>(input: &Value, pairs: impl Iterator<Item = (&'a str, &'a str)>) -> Value {
    let Value::Object(fields) = input else {
        return input.clone();
    };
    let mut fields = fields.clone();
    for (from, to) in pairs {
        if let Some(value) = fields.remove(from) {
            fields.insert(to.to_owned(), value);
        }
    }
    Value::Object(fields)
}

/// What a command hook's `matcher` selects: every tool (absent, empty or `*`), a name or a
/// `|` list of names (compared exactly; a `*` in them is a wildcard, as in `mcp__github__*`),
/// or a regular expression that must match the whole name. Tool points match the tool's Claude Code name or its flue name; `PreCompact`
/// matches its trigger, `SessionStart` its source; other points ignore the matcher.
#[derive(Clone, Debug)]
pub enum HookMatcher {
    /// Everything.
    All,
    /// Exact names.
    Names(Vec<String>),
    /// A regular expression over the whole name.
    Pattern(Regex),
}

impl HookMatcher {
    /// Parses a matcher. Fails with a sentence when the regular expression does not compile.
    pub fn parse(text: Option<&str>) -> std::result::Result<Self, String> {
        let text = text.map(str::trim).unwrap_or_default();
        if text.is_empty() || text == "*" {
            return Ok(Self::All);
        }
        let plain = text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '|');
        let globbed = !plain
            && text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '|' | '*'));
        if globbed {
            let pattern = text.replace('*', ".*");
            return Regex::new(&format!("^(?:{pattern})$"))
                .map(Self::Pattern)
                .map_err(|err| format!("`matcher` {text:?} is not a valid pattern: {err}"));
        }
        if plain {
            return Ok(Self::Names(
                text.split('|')
                    .filter(|name| !name.is_empty())
                    .map(str::to_owned)
                    .collect(),
            ));
        }
        Regex::new(&format!("^(?:{text})$"))
            .map(Self::Pattern)
            .map_err(|err| format!("`matcher` {text:?} is not a valid regular expression: {err}"))
    }

    /// Whether `name` is selected.
    pub fn matches(&self, name: &str) -> bool {
        match self {
            Self::All => true,
            Self::Names(names) => names.iter().any(|wanted| wanted == name),
            Self::Pattern(pattern) => pattern.is_match(name),
        }
    }
}

/// What a command hook does when it fails (times out, is killed, is not found, or answers
/// JSON that does not parse).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnFailure {
    /// Block at a blocking point (`PreToolUse` denies the call, `UserPromptSubmit` and
    /// `BeforeModelCall` end the operation); carry on elsewhere. The default.
    #[default]
    Block,
    /// Carry on everywhere; the failure is still reported.
    Continue,
}

/// A command hook as declared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandHookSpec {
    /// The point.
    pub point: HookPoint,
    /// The matcher, as written.
    pub matcher: Option<String>,
    /// The shell command.
    pub command: String,
    /// Seconds it may run (default [`DEFAULT_HOOK_TIMEOUT_SECS`]).
    pub timeout_secs: Option<u64>,
    /// What a failure does.
    pub on_failure: OnFailure,
    /// Host environment variables the hook sees beyond the allow-list (flue's `env`), by
    /// name: a hook gets no secret unless it is named here.
    pub env: Vec<String>,
    /// Where it was declared (`agents/review.md`, `flue.toml`), for reports.
    pub declared_in: String,
    /// An http hook's target: the input is POSTed there instead of run by `command` (which
    /// then holds the URL with its credentials hidden, to name the hook in reports); `env` names the variables its header
    /// values may use.
    pub http: Option<HttpHookTarget>,
    /// A prompt hook's prompt and model: a model judges the input instead of `command` being
    /// run (`command` then holds the prompt's first line, to name the hook in reports).
    pub prompt: Option<PromptHookTarget>,
}

impl CommandHookSpec {
    /// A hook at `point` running `command`, declared in `declared_in`.
    pub fn new(
        point: HookPoint,
        command: impl Into<String>,
        declared_in: impl Into<String>,
    ) -> Self {
        Self {
            point,
            matcher: None,
            command: command.into(),
            timeout_secs: None,
            on_failure: OnFailure::Block,
            env: Vec::new(),
            declared_in: declared_in.into(),
            http: None,
            prompt: None,
        }
    }

    /// A prompt hook at `point` whose input `target`'s model judges, declared in
    /// `declared_in`.
    pub fn prompt(
        point: HookPoint,
        target: PromptHookTarget,
        declared_in: impl Into<String>,
    ) -> Self {
        let label = target.label();
        Self {
            prompt: Some(target),
            ..Self::new(point, label, declared_in)
        }
    }

    /// An http hook at `point` POSTing its input to `target`, declared in `declared_in`.
    pub fn http(point: HookPoint, target: HttpHookTarget, declared_in: impl Into<String>) -> Self {
        let shown = target.shown_url();
        Self {
            http: Some(target),
            ..Self::new(point, shown, declared_in)
        }
    }

    /// Sets the matcher.
    #[must_use]
    pub fn with_matcher(mut self, matcher: impl Into<String>) -> Self {
        self.matcher = Some(matcher.into());
        self
    }

    /// Sets the time limit in seconds.
    #[must_use]
    pub fn with_timeout_secs(mut self, secs: u64) -> Self {
        self.timeout_secs = Some(secs);
        self
    }

    /// Every problem with the declaration, each a sentence naming the field.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if let Some(target) = &self.http {
            problems.extend(target.problems());
        } else if let Some(target) = &self.prompt {
            problems.extend(target.problems(self.point));
        } else if self.command.trim().is_empty() {
            problems.push("`command` is empty: give the command line to run".to_owned());
        }
        if let Some(secs) = self.timeout_secs
            && !(1..=MAX_HOOK_TIMEOUT_SECS).contains(&secs)
        {
            problems.push(format!(
                "`timeout` must be between 1 and {MAX_HOOK_TIMEOUT_SECS} seconds, got {secs}"
            ));
        }
        if let Err(problem) = HookMatcher::parse(self.matcher.as_deref()) {
            problems.push(problem);
        }
        for name in &self.env {
            let valid = !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                problems.push(format!(
                    "`env` entry {name:?} is not an environment variable name"
                ));
            }
        }
        problems
    }
}

/// A command hook, ready to run at the workspace root `root`.
pub struct CommandHook {
    spec: CommandHookSpec,
    matcher: HookMatcher,
    root: PathBuf,
    /// The host runner, opened at the first run.
    runner: OnceLock<LocalSandbox>,
    /// What sends an http hook's request (none: an http hook cannot start).
    http_client: Option<Arc<dyn HttpHookClient>>,
}

impl CommandHook {
    /// The hook of `spec`, run at `root` (the workspace root, an existing directory). Fails
    /// with [`FlueError::InvalidConfig`] naming every problem of the declaration.
    pub fn new(spec: CommandHookSpec, root: impl Into<PathBuf>) -> Result<Self> {
        let problems = spec.problems();
        if !problems.is_empty() {
            return Err(FlueError::config(format!(
                "{}: hook `{}`: {}",
                spec.declared_in,
                spec.command,
                problems.join("; ")
            )));
        }
        let matcher = HookMatcher::parse(spec.matcher.as_deref()).map_err(FlueError::config)?;
        Ok(Self {
            spec,
            matcher,
            root: root.into(),
            runner: OnceLock::new(),
            http_client: None,
        })
    }

    /// Sets what sends an http hook's request.
    #[must_use]
    pub fn with_http_client(mut self, client: Arc<dyn HttpHookClient>) -> Self {
        self.http_client = Some(client);
        self
    }

    /// The declaration.
    pub fn spec(&self) -> &CommandHookSpec {
        &self.spec
    }

    fn runner(&self) -> std::result::Result<&LocalSandbox, HookFailure> {
        if let Some(runner) = self.runner.get() {
            return Ok(runner);
        }
        let allowed = crate::sandbox::DEFAULT_ENV_ALLOWLIST
            .iter()
            .map(|name| (*name).to_owned())
            .chain(self.spec.env.iter().cloned());
        let runner = LocalSandbox::new(&self.root)
            .map_err(|err| self.not_started(format!("cannot open the workspace root: {err}")))?
            .with_output_limit(HOOK_STDERR_BYTES)
            .with_env_allowlist(allowed);
        Ok(self.runner.get_or_init(|| runner))
    }

    fn failure(&self, what: impl std::fmt::Display) -> HookFailure {
        HookFailure::new(self.about(what))
    }

    /// The failure of a hook flue could not start.
    fn not_started(&self, what: impl std::fmt::Display) -> HookFailure {
        HookFailure::cannot_start(self.about(what))
    }

    fn about(&self, what: impl std::fmt::Display) -> String {
        format!(
            "hook `{}` ({} in {}): {what}",
            self.spec.command,
            self.spec.point.name(),
            self.spec.declared_in
        )
    }

    /// The JSON the command reads on standard input.
    fn input(&self, event: &HookEvent, ctx: &HookContext) -> Value {
        let root = self.root.display().to_string();
        let mut input = Map::new();
        input.insert("session_id".into(), json!(ctx.instance_id));
        input.insert("flue_session".into(), json!(ctx.session));
        input.insert("agent".into(), json!(ctx.agent));
        input.insert("cwd".into(), json!(root));
        input.insert("hook_event_name".into(), json!(event.point().name()));
        input.insert("permission_mode".into(), json!("default"));
        // Claude Code names the agent a hook runs for; a subagent also by its own id.
        input.insert("agent_type".into(), json!(ctx.agent));
        if ctx.depth > 0 {
            input.insert("agent_id".into(), json!(ctx.session));
        }
        if let Some(state) = &ctx.state {
            input.insert("flue_state".into(), state.clone());
        }
        match event {
            HookEvent::SessionStart { source } => {
                input.insert("source".into(), json!(source));
            }
            HookEvent::UserPromptSubmit { prompt } => {
                input.insert("prompt".into(), json!(prompt));
            }
            HookEvent::BeforeModelCall { turn, model } => {
                input.insert("turn".into(), json!(turn));
                input.insert("model".into(), json!(model));
            }
            HookEvent::PreToolUse { call }
            | HookEvent::PostToolUse { call, .. }
            | HookEvent::PostToolUseFailure { call, .. }
            | HookEvent::PermissionRequest { call } => {
                input.insert("tool_name".into(), json!(claude_tool_name(&call.name)));
                input.insert("flue_tool_name".into(), json!(call.name));
                input.insert(
                    "tool_input".into(),
                    to_claude_input(&call.name, &call.input),
                );
                input.insert("tool_use_id".into(), json!(call.id));
                // An MCP tool is `mcp__<server>__<tool>`: hooks are told the server.
                if let Some(server) = call
                    .name
                    .strip_prefix("mcp__")
                    .and_then(|rest| rest.split_once("__"))
                    .map(|(server, _)| server)
                {
                    input.insert("mcp_server".into(), json!(server));
                }
            }
            HookEvent::Stop {
                reply,
                stop_hook_active,
                ..
            } => {
                input.insert("stop_hook_active".into(), json!(stop_hook_active));
                input.insert("last_assistant_message".into(), json!(reply));
            }
            HookEvent::PreCompact { trigger } => {
                input.insert("trigger".into(), json!(trigger));
                input.insert("custom_instructions".into(), json!(""));
            }
            HookEvent::SessionEnd { reason } => {
                input.insert("reason".into(), json!(reason));
            }
            HookEvent::Notification {
                message,
                notification_type,
            } => {
                input.insert("message".into(), json!(message));
                input.insert("notification_type".into(), json!(notification_type));
            }
            HookEvent::SubagentStart => {}
            HookEvent::PostCompact { trigger, summary } => {
                input.insert("trigger".into(), json!(trigger));
                input.insert("compact_summary".into(), json!(summary));
            }
        }
        if let HookEvent::PostToolUse { duration_ms, .. }
        | HookEvent::PostToolUseFailure { duration_ms, .. } = event
            && let Some(duration_ms) = duration_ms
        {
            input.insert("duration_ms".into(), json!(duration_ms));
        }
        if let HookEvent::PostToolUseFailure { result, .. } = event {
            input.insert("error".into(), json!(result.content));
            input.insert(
                "is_interrupt".into(),
                json!(result.error_kind.as_deref() == Some("interrupted")),
            );
        }
        if let HookEvent::PostToolUse { result, .. } = event {
            input.insert(
                "tool_response".into(),
                json!({"content": result.content, "is_error": result.is_error}),
            );
        }
        Value::Object(input)
    }

    /// Reads what the command answered.
    fn decision(
        &self,
        event: &HookEvent,
        exit_code: i32,
        stdout: &str,
        stderr: &str,
    ) -> std::result::Result<Outcome, HookFailure> {
        let point = event.point();
        match exit_code {
            0 => {}
            2 => {
                let reason = stderr.trim();
                let reason = if reason.is_empty() {
                    format!("blocked by hook `{}` (exit code 2)", self.spec.command)
                } else {
                    reason.to_owned()
                };
                let verdict = if point == HookPoint::PreToolUse {
                    Verdict::Deny
                } else {
                    Verdict::Block
                };
                return Ok(Outcome::Decided(HookDecision {
                    verdict,
                    reason: Some(reason),
                    ..HookDecision::default()
                }));
            }
            TIMEOUT_EXIT_CODE => {
                return Err(self.failure(format!(
                    "timed out after {} s (set `timeout` in seconds to allow longer)",
                    self.timeout().as_secs()
                )));
            }
            126 | 127 => {
                return Err(self.failure(format!(
                    "the command could not be run (exit code {exit_code}): {}",
                    quote(stderr)
                )));
            }
            code if !(0..=128).contains(&code) => {
                return Err(self.failure(format!(
                    "the command was killed (exit code {code}): {}",
                    quote(stderr)
                )));
            }
            code => {
                return Ok(Outcome::Error(format!(
                    "exit code {code} (a non-blocking error): {}",
                    quote(stderr)
                )));
            }
        }
        let text = stdout.trim();
        if !text.starts_with('{') {
            // Plain output is context for the model where Claude Code adds it as such.
            let context = matches!(point, HookPoint::UserPromptSubmit | HookPoint::SessionStart)
                && !text.is_empty();
            return Ok(Outcome::Decided(HookDecision {
                additional_context: context.then(|| text.to_owned()),
                ..HookDecision::default()
            }));
        }
        let output: Value = serde_json::from_str(text).map_err(|err| {
            let what = if self.spec.http.is_some() {
                "its response body"
            } else {
                "its standard output"
            };
            self.failure(format!("{what} is not valid JSON: {err}"))
        })?;
        Ok(Outcome::Decided(self.read_output(event, &output)))
    }

    /// The decision fields of a JSON answer (Claude Code's, and flue's additions).
    fn read_output(&self, event: &HookEvent, output: &Value) -> HookDecision {
        let text = |value: Option<&Value>| value.and_then(Value::as_str).map(str::to_owned);
        let specific = output.get("hookSpecificOutput");
        let field = |name: &str| specific.and_then(|specific| specific.get(name));
        let mut decision = HookDecision {
            additional_context: text(field("additionalContext")),
            ..HookDecision::default()
        };
        match output.get("decision").and_then(Value::as_str) {
            Some("block") => {
                decision.verdict = if event.point() == HookPoint::PreToolUse {
                    Verdict::Deny
                } else {
                    Verdict::Block
                };
                decision.reason = text(output.get("reason"));
            }
            Some("approve") => {
                decision.verdict = Verdict::Allow;
                decision.reason = text(output.get("reason"));
            }
            _ => {}
        }
        if event.point() == HookPoint::PreToolUse {
            match field("permissionDecision").and_then(Value::as_str) {
                Some("allow") => decision.verdict = Verdict::Allow,
                Some("deny") => decision.verdict = Verdict::Deny,
                Some("ask") => decision.verdict = Verdict::Ask,
                _ => {}
            }
            if let Some(reason) = text(field("permissionDecisionReason")) {
                decision.reason = Some(reason);
            }
            if let (Some(input), Some(call)) = (field("updatedInput"), event.call()) {
                decision.updated_input = Some(from_claude_input(&call.name, input));
            }
        }
        if event.point() == HookPoint::PermissionRequest {
            // Claude Code's answer: `decision: {behavior: allow | deny, message}`.
            let answer = field("decision");
            let behavior = answer.and_then(|answer| answer.get("behavior"));
            match behavior.and_then(Value::as_str) {
                Some("allow") => decision.verdict = Verdict::Allow,
                Some("deny") => {
                    decision.verdict = Verdict::Deny;
                    decision.reason = text(answer.and_then(|answer| answer.get("message")))
                        .or_else(|| Some(format!("denied by hook `{}`", self.spec.command)));
                }
                _ => {}
            }
        }
        decision.replacement = match event.point() {
            HookPoint::PostToolUse => field("updatedToolOutput")
                .or_else(|| field("updatedMCPToolOutput"))
                .map(|value| match value {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                }),
            HookPoint::UserPromptSubmit => text(field("updatedPrompt")),
            HookPoint::Stop | HookPoint::SubagentStop => text(field("updatedReply")),
            _ => None,
        };
        // Checked (an object, within the size limit, at a point that stores it) by the runner.
        decision.state = field("updatedState").cloned();
        if output.get("continue").and_then(Value::as_bool) == Some(false) {
            decision.verdict = Verdict::Tripwire;
            decision.reason = text(output.get("stopReason"))
                .or(decision.reason)
                .or_else(|| Some(format!("hook `{}` said to stop", self.spec.command)));
        }
        if decision.verdict == Verdict::Block && decision.reason.is_none() {
            decision.reason = Some(format!("blocked by hook `{}`", self.spec.command));
        }
        decision
    }

    /// Writes the conversation so far as a Claude Code transcript (`ctx.transcript`) to
    /// `.flue/transcripts/` at the workspace root (appending what is new when the file holds
    /// the start of it), and returns its path; `None` (logged) when it cannot be written.
    async fn write_transcript(&self, ctx: &HookContext) -> Option<PathBuf> {
        let transcript = ctx.transcript.as_ref()?;
        let path = super::transcript::file_path(&self.root, &ctx.instance_id, &ctx.session);
        match super::transcript::write(&path, transcript.as_bytes()).await {
            Ok(()) => Some(path),
            Err(err) => {
                tracing::warn!(
                    "{}",
                    self.about(format!("cannot write its transcript: {err}"))
                );
                None
            }
        }
    }

    /// Runs an http hook: POSTs `input` and reads a 2xx body as a command's standard output
    /// after exit 0. No answer fails like a hook that cannot start (closed wherever hooks can
    /// stop something); another status or an unreadable body is a failure.
    async fn post(
        &self,
        target: &HttpHookTarget,
        event: &HookEvent,
        ctx: &HookContext,
        input: String,
    ) -> std::result::Result<HookDecision, HookFailure> {
        let client = self
            .http_client
            .as_ref()
            .ok_or_else(|| self.not_started("no HTTP client is set for http hooks"))?;
        let headers = target
            .headers
            .iter()
            .map(|(name, value)| (name.clone(), fill_header(value, &self.spec.env)))
            .collect();
        let sent = client.post(
            &target.url,
            headers,
            input,
            self.timeout(),
            HTTP_HOOK_MAX_RESPONSE_BYTES,
        );
        let answer = tokio::select! {
            answer = sent => answer,
            () = ctx.cancel.cancelled() => {
                return Err(self.failure("cannot run: the operation was aborted"));
            }
        };
        let response = match answer {
            Ok(response) => response,
            Err(HttpHookError::Unreachable(why)) => {
                return Err(self.not_started(format!("no answer: {why}")));
            }
            Err(HttpHookError::BadBody(why)) => {
                return Err(self.failure(format!("its answer could not be read: {why}")));
            }
        };
        if !(200..300).contains(&response.status) {
            return Err(self.failure(format!(
                "answered HTTP {}: {}",
                response.status,
                quote(&response.body)
            )));
        }
        match self.decision(event, 0, &response.body, "")? {
            Outcome::Decided(decision) => Ok(decision),
            Outcome::Error(message) => Ok(non_blocking(&self.failure(message))),
        }
    }

    /// Runs a prompt hook: the model judges `input` with the prompt. `ok: false` blocks at
    /// `Stop` and `SubagentStop` (the model answers again) and ends the operation elsewhere,
    /// as Claude Code's `continue: false`. No answer (no model, a provider error, the time
    /// limit) fails like a hook that cannot start; an answer without a boolean `ok` is a
    /// failure.
    async fn judge(
        &self,
        target: &PromptHookTarget,
        event: &HookEvent,
        ctx: &HookContext,
        input: &str,
    ) -> std::result::Result<HookDecision, HookFailure> {
        let model = ctx
            .model
            .as_ref()
            .ok_or_else(|| self.not_started("no model is available to prompt hooks here"))?;
        let text = target.request_text(input);
        let asked = model.judge(target.model.as_deref(), &text, &ctx.cancel);
        let answer = match tokio::time::timeout(self.timeout(), asked).await {
            Err(_) => {
                return Err(self.not_started(format!(
                    "the model gave no answer within {} s (set `timeout` in seconds to allow \
                     longer)",
                    self.timeout().as_secs()
                )));
            }
            Ok(Err(FlueError::Aborted)) => {
                return Err(self.failure("cannot run: the operation was aborted"));
            }
            Ok(Err(err)) => {
                return Err(self.not_started(format!("the model could not be asked: {err}")));
            }
            Ok(Ok(answer)) => answer,
        };
        let judgement = read_answer(&answer).map_err(|why| {
            self.failure(format!(
                "the model's answer {why}; a prompt hook answers {{\"ok\": true}} or \
                 {{\"ok\": false, \"reason\": ...}}: {}",
                quote(&answer)
            ))
        })?;
        let Judgement::NotOk(reason) = judgement else {
            return Ok(HookDecision::proceed());
        };
        let reason =
            reason.unwrap_or_else(|| format!("blocked by prompt hook `{}`", self.spec.command));
        Ok(match event.point() {
            HookPoint::Stop | HookPoint::SubagentStop => HookDecision::block(reason),
            _ => HookDecision::tripwire(reason),
        })
    }

    fn timeout(&self) -> Duration {
        let default = if self.spec.prompt.is_some() {
            DEFAULT_PROMPT_HOOK_TIMEOUT_SECS
        } else {
            DEFAULT_HOOK_TIMEOUT_SECS
        };
        Duration::from_secs(self.spec.timeout_secs.unwrap_or(default))
    }
}

/// What a command answered, short of a failure.
enum Outcome {
    Decided(HookDecision),
    /// A non-blocking error (exit codes other than 0 and 2): reported, no decision.
    Error(String),
}

fn quote(stderr: &str) -> String {
    let trimmed = stderr.trim();
    if trimmed.is_empty() {
        return "no output on standard error".to_owned();
    }
    let count = trimmed.chars().count();
    if count <= STDERR_QUOTE_CHARS {
        return trimmed.to_owned();
    }
    let tail: String = trimmed.chars().skip(count - STDERR_QUOTE_CHARS).collect();
    format!("...{tail}")
}

impl Hook for CommandHook {
    fn name(&self) -> String {
        let kind = if self.spec.http.is_some() {
            "http"
        } else if self.spec.prompt.is_some() {
            "prompt"
        } else {
            "command"
        };
        format!("{kind} `{}` ({})", self.spec.command, self.spec.declared_in)
    }

    fn handles(&self, event: &HookEvent) -> bool {
        if event.point() != self.spec.point {
            return false;
        }
        match event {
            HookEvent::PreToolUse { call }
            | HookEvent::PostToolUse { call, .. }
            | HookEvent::PostToolUseFailure { call, .. }
            | HookEvent::PermissionRequest { call } => {
                self.matcher.matches(claude_tool_name(&call.name))
                    || self.matcher.matches(&call.name)
            }
            HookEvent::PreCompact { trigger } | HookEvent::PostCompact { trigger, .. } => {
                self.matcher.matches(trigger)
            }
            HookEvent::Notification {
                notification_type, ..
            } => self.matcher.matches(notification_type),
            HookEvent::SessionStart { source } => self.matcher.matches(source),
            _ => true,
        }
    }

    fn fails_open(&self) -> bool {
        self.spec.on_failure == OnFailure::Continue
    }

    fn touches_host_files(&self) -> bool {
        self.spec.http.is_none() && self.spec.prompt.is_none()
    }

    fn decide<'a>(
        &'a self,
        event: &'a HookEvent,
        ctx: &'a HookContext,
    ) -> BoxFuture<'a, std::result::Result<HookDecision, HookFailure>> {
        Box::pin(async move {
            let mut input = self.input(event, ctx);
            // A prompt hook's model reads no files: it gets no transcript path.
            if let Some(target) = &self.spec.prompt {
                return self.judge(target, event, ctx, &input.to_string()).await;
            }
            if let Some(path) = self.write_transcript(ctx).await
                && let Value::Object(fields) = &mut input
            {
                fields.insert("transcript_path".into(), json!(path.display().to_string()));
            }
            let input = input.to_string();
            if let Some(target) = &self.spec.http {
                return self.post(target, event, ctx, input).await;
            }
            let runner = self.runner()?;
            let root = self.root.display().to_string();
            let mut options = ExecOptions::new()
                .with_timeout(self.timeout())
                .with_cancel(ctx.cancel.clone())
                .with_env("FLUE_PROJECT_DIR", root.clone())
                .with_env("CLAUDE_PROJECT_DIR", root);
            if input.len() <= HOOK_INPUT_VAR_MAX_BYTES {
                options = options.with_env(HOOK_INPUT_VAR, input.clone());
            }
            let stdout_limit = HOOK_STDOUT_MIN_BYTES.max(input.len().saturating_mul(4));
            let result = runner
                .exec_with_input(
                    &self.spec.command,
                    options,
                    input.into_bytes(),
                    stdout_limit,
                )
                .await
                .map_err(|err| match err {
                    FlueError::Aborted => self.failure(format!("cannot run: {err}")),
                    err => self.not_started(format!("cannot run: {err}")),
                })?;
            match self.decision(event, result.exit_code, &result.stdout, &result.stderr)? {
                Outcome::Decided(decision) => Ok(decision),
                Outcome::Error(message) => Ok(non_blocking(&self.failure(message))),
            }
        })
    }
}

/// A non-blocking error: no decision, with the error kept as the reason so the runner can
/// report it. Marked by [`NON_BLOCKING_PREFIX`].
fn non_blocking(failure: &HookFailure) -> HookDecision {
    HookDecision {
        verdict: Verdict::Continue,
        reason: Some(format!("{NON_BLOCKING_PREFIX}{}", failure.message)),
        ..HookDecision::default()
    }
}

/// How a command hook's non-blocking error (an exit code other than 0 and 2) starts its
/// reason; the runner reports such a decision as an `error`.
pub(crate) const NON_BLOCKING_PREFIX: &str = "non-blocking error: ";

#[cfg(test)]
mod tests;
