//! Case files: `evals/*.yaml` read, validated and turned into [`Case`]s, every problem reported
//! at once with its file and line and what to write instead.
//!
//! ```yaml
//! agent: probe
//! cases:
//!   - name: echoes
//!     message: "hello there"
//!     expect:
//!       reply_contains: "You said: hello there"
//! ```
//!
//! The full shape is in docs/evals.md.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;

use flue_build::Diagnostic;
use flue_core::ThinkingLevel;
use flue_core::util::workspace_file::WorkspaceFiles;
use serde_json::Value as Json;

use crate::yaml::{self, Node, Value};

#[cfg(test)]
mod tests;

/// Where case files live, relative to the workspace root.
pub const EVALS_DIR: &str = "evals";

/// The default pass threshold of a scorer or judge.
pub(crate) const DEFAULT_SCORE_THRESHOLD: f64 = 0.5;

/// The default time a command scorer may take.
pub(crate) const DEFAULT_SCORER_TIMEOUT_MS: u64 = 60_000;

const FILE_KEYS: &[&str] = &["agent", "description", "judge_model", "cases"];
const CASE_KEYS: &[&str] = &[
    "name",
    "description",
    "agent",
    "message",
    "messages",
    "files",
    "initial_data",
    "initialData",
    "role",
    "model",
    "thinking",
    "result",
    "timeout_ms",
    "expect",
];
const EXPECT_KEYS: &[&str] = &[
    "reply_contains",
    "reply_not_contains",
    "reply_matches",
    "reply_equals",
    "result",
    "result_schema",
    "tool_calls",
    "tool_call_counts",
    "never_called",
    "files",
    "max_turns",
    "max_tokens",
    "max_cost_usd",
    "max_latency_ms",
    "scorers",
    "judge",
];
const FILE_CHECK_KEYS: &[&str] = &["exists", "contains", "not_contains", "equals", "matches"];
const SCORER_KEYS: &[&str] = &["name", "command", "threshold", "timeout_ms"];
const JUDGE_KEYS: &[&str] = &["name", "rubric", "model", "threshold"];
const TOOL_CALL_KEYS: &[&str] = &["name", "input"];

/// One case: the messages sent to a fresh conversation of `agent`, and what must hold after.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Case {
    /// Unique within its file.
    pub name: String,
    /// The case file, relative to the workspace root (`evals/probe.yaml`).
    pub file: String,
    /// The line of the case in its file.
    pub line: usize,
    /// The agent the messages go to.
    pub agent: String,
    /// The user messages, sent in order, each waiting for the last to settle.
    pub messages: Vec<String>,
    /// Files written into the conversation's sandbox before the first message (path, text).
    pub files: Vec<(String, String)>,
    /// Seeds the conversation's state (`initialData` of the HTTP protocol).
    pub initial_data: Option<Json>,
    /// A role for every message of the case.
    pub role: Option<String>,
    /// A model for every message of the case, instead of the agent's.
    pub model: Option<String>,
    /// A thinking level for every message of the case.
    pub thinking: Option<ThinkingLevel>,
    /// The JSON Schema of a structured result asked of every message.
    pub result: Option<Json>,
    /// How long the case may run before its conversation is aborted and the case fails.
    pub timeout_ms: Option<u64>,
    /// What must hold after the last message.
    pub expect: Expect,
}

/// The assertions of a case. Everything left out is not checked.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Expect {
    /// Texts the last reply contains, each.
    pub reply_contains: Vec<String>,
    /// Texts the last reply does not contain.
    pub reply_not_contains: Vec<String>,
    /// Regular expressions the last reply matches, each (kept as written; checked when read).
    pub reply_matches: Vec<String>,
    /// The whole last reply, leading and trailing whitespace aside.
    pub reply_equals: Option<String>,
    /// Values the structured result holds: a subset (objects by key, arrays item by item).
    pub result: Option<Json>,
    /// A JSON Schema the structured result matches.
    pub result_schema: Option<Json>,
    /// Tool calls that were made, in this order (others may come between).
    pub tool_calls: Vec<ToolCallExpect>,
    /// Exactly how often a tool was called.
    pub tool_call_counts: BTreeMap<String, u64>,
    /// Tools never called.
    pub never_called: Vec<String>,
    /// The sandbox's files after the last message.
    pub files: Vec<FileExpect>,
    /// At most this many model turns in all.
    pub max_turns: Option<u64>,
    /// At most this many tokens in all (input, cached input and output).
    pub max_tokens: Option<u64>,
    /// At most this cost in US dollars in all.
    pub max_cost_usd: Option<f64>,
    /// At most this long from the first message to the last settlement.
    pub max_latency_ms: Option<u64>,
    /// Scripts that read the transcript and print a score.
    pub scorers: Vec<CommandScorer>,
    /// Models that grade the transcript against a rubric.
    pub judges: Vec<Judge>,
}

/// An expected tool call: its name and, optionally, a subset of its input.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ToolCallExpect {
    /// The tool's name.
    pub name: String,
    /// Values the call's input holds (a subset, as for `result`).
    pub input: Option<Json>,
}

/// What a file in the sandbox must be after the case.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct FileExpect {
    /// The path, relative to the sandbox's working directory.
    pub path: String,
    /// Whether it exists (default: it must).
    pub exists: bool,
    /// Texts it contains.
    pub contains: Vec<String>,
    /// Texts it does not contain.
    pub not_contains: Vec<String>,
    /// Its whole text, leading and trailing whitespace aside.
    pub equals: Option<String>,
    /// A regular expression it matches.
    pub matches: Option<String>,
}

/// A command run in the workspace root with the case's transcript as JSON on stdin; its
/// stdout's first line is a score from 0 to 1, or `pass` / `fail`.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct CommandScorer {
    /// Its name in results (default: the command).
    pub name: String,
    /// Run by `sh -c`.
    pub command: String,
    /// The lowest passing score.
    pub threshold: f64,
    /// How long it may run.
    pub timeout_ms: u64,
}

/// A model asked to grade the transcript against a rubric, with a score from 0 to 1 and its
/// reasoning.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Judge {
    /// Its name in results (default: `judge`, numbered when there are several).
    pub name: String,
    /// What a good answer does, in words.
    pub rubric: String,
    /// The model that grades (`provider/model`).
    pub model: String,
    /// The lowest passing score.
    pub threshold: f64,
}

/// Every problem found in the case files, sorted by file and line. Never empty.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct CaseFileError(Vec<Diagnostic>);

impl CaseFileError {
    /// The problems.
    pub fn diagnostics(&self) -> &[Diagnostic] {
        &self.0
    }

    fn from_vec(mut diagnostics: Vec<Diagnostic>) -> Self {
        diagnostics.sort_by(|a, b| (&a.path, a.line).cmp(&(&b.path, b.line)));
        Self(diagnostics)
    }
}

impl fmt::Display for CaseFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: Vec<String> = self.0.iter().map(Diagnostic::to_string).collect();
        f.write_str(&lines.join("\n"))
    }
}

/// The case files of the workspace at `root`: `evals/*.yaml` and `evals/*.yml`, by name.
pub fn discover(root: &Path) -> Result<Vec<String>, CaseFileError> {
    let files = WorkspaceFiles::open(root).map_err(|err| {
        CaseFileError::from_vec(vec![Diagnostic::file(
            root.display().to_string(),
            format!("cannot open the workspace: {err}"),
        )])
    })?;
    let names = match files.list(EVALS_DIR) {
        Ok(names) => names,
        Err(err) if err.is_not_found() => Vec::new(),
        Err(err) => {
            return Err(CaseFileError::from_vec(vec![Diagnostic::file(
                EVALS_DIR,
                format!("cannot list the case files: {err}"),
            )]));
        }
    };
    let mut found: Vec<String> = names
        .into_iter()
        .filter(|name| name.ends_with(".yaml") || name.ends_with(".yml"))
        .map(|name| format!("{EVALS_DIR}/{name}"))
        .collect();
    found.sort();
    Ok(found)
}

/// Reads and validates the case files `paths` (relative to `root`), every problem of every
/// file at once. `known_agents` are the workspace's agents, for checking `agent:`.
pub fn load(
    root: &Path,
    paths: &[String],
    known_agents: &[String],
) -> Result<Vec<Case>, CaseFileError> {
    let mut diagnostics = Vec::new();
    let mut cases = Vec::new();
    let files = match WorkspaceFiles::open(root) {
        Ok(files) => files,
        Err(err) => {
            return Err(CaseFileError::from_vec(vec![Diagnostic::file(
                root.display().to_string(),
                format!("cannot open the workspace: {err}"),
            )]));
        }
    };
    for path in paths {
        let text = match files.read(path, yaml::MAX_BYTES as u64 + 1) {
            Ok(bytes) => String::from_utf8(bytes).map_err(|_| "it is not UTF-8 text".to_owned()),
            Err(err) => Err(err.to_string()),
        };
        match text {
            Ok(text) => cases.extend(parse(path, &text, known_agents, &mut diagnostics)),
            Err(reason) => diagnostics.push(Diagnostic::file(
                path.as_str(),
                format!("cannot read the case file: {reason}"),
            )),
        }
    }
    if diagnostics.is_empty() {
        Ok(cases)
    } else {
        Err(CaseFileError::from_vec(diagnostics))
    }
}

/// Parses the text of case file `path`; problems go to `diagnostics` (the cases of a file with
/// problems are still returned, for callers that list them).
pub fn parse(
    path: &str,
    text: &str,
    known_agents: &[String],
    diagnostics: &mut Vec<Diagnostic>,
) -> Vec<Case> {
    let mut reader = Reader {
        path,
        known_agents,
        diagnostics,
    };
    let root = match yaml::parse(text) {
        Ok(Some(root)) => root,
        Ok(None) => {
            reader.file("the file is empty: give `agent:` and a list of `cases:`");
            return Vec::new();
        }
        Err(err) => {
            reader.at(err.line, err.message);
            return Vec::new();
        }
    };
    reader.file_node(&root)
}

/// Reads nodes of one file, collecting problems.
struct Reader<'a> {
    path: &'a str,
    known_agents: &'a [String],
    diagnostics: &'a mut Vec<Diagnostic>,
}

impl Reader<'_> {
    fn at(&mut self, line: usize, message: impl Into<String>) {
        self.diagnostics
            .push(Diagnostic::at(self.path, line, message));
    }

    fn file(&mut self, message: impl Into<String>) {
        self.diagnostics.push(Diagnostic::file(self.path, message));
    }

    fn file_node(&mut self, root: &Node) -> Vec<Case> {
        if !self.mapping(root, "the file", FILE_KEYS) {
            return Vec::new();
        }
        let file_agent = root.get("agent").and_then(|node| self.agent(node));
        let judge_model = root
            .get("judge_model")
            .and_then(|node| self.model(node, "judge_model"));
        let Some(list) = root.get("cases") else {
            self.at(
                root.line,
                "no `cases:`: add a list of cases, each with a `name` and a `message`",
            );
            return Vec::new();
        };
        let Value::Sequence(items) = &list.value else {
            self.at(
                list.line,
                format!(
                    "`cases` is {}; it must be a list of cases (`- name: ...`)",
                    list.kind()
                ),
            );
            return Vec::new();
        };
        if items.is_empty() {
            self.at(list.line, "`cases` is empty: add at least one case");
        }
        let mut seen = BTreeSet::new();
        let mut cases = Vec::new();
        for item in items {
            let defaults = Defaults {
                agent: file_agent.as_deref(),
                judge_model: judge_model.as_deref(),
            };
            if let Some(case) = self.case(item, &defaults) {
                if !seen.insert(case.name.clone()) {
                    self.at(
                        case.line,
                        format!(
                            "case `{}` is named twice in this file: give each case its own name",
                            case.name
                        ),
                    );
                }
                cases.push(case);
            }
        }
        cases
    }

    fn case(&mut self, node: &Node, defaults: &Defaults<'_>) -> Option<Case> {
        if !self.mapping(node, "a case", CASE_KEYS) {
            return None;
        }
        let name = match node.get("name") {
            Some(name) => self.case_name(name),
            None => {
                self.at(
                    node.line,
                    "this case has no `name`: add `name: <a-short-name>`",
                );
                None
            }
        };
        let agent = match node.get("agent") {
            Some(agent) => self.agent(agent),
            None => defaults.agent.map(str::to_owned).or_else(|| {
                self.at(
                    node.line,
                    "no agent for this case: add `agent: <name>` at the top of the file or to the case",
                );
                None
            }),
        };
        let messages = self.messages(node);
        let files = node
            .get("files")
            .map(|files| self.files(files))
            .unwrap_or_default();
        let initial_data = self.initial_data(node);
        let role = node.get("role").and_then(|role| self.string(role, "role"));
        let model = node
            .get("model")
            .and_then(|model| self.model(model, "model"));
        let thinking = node.get("thinking").and_then(|level| self.thinking(level));
        let result = node
            .get("result")
            .and_then(|schema| self.schema(schema, "result"));
        let timeout_ms = node
            .get("timeout_ms")
            .and_then(|n| self.count(n, "timeout_ms"));
        let expect = match node.get("expect") {
            Some(expect) => self.expect(expect, defaults)?,
            None => Expect::default(),
        };
        Some(Case {
            name: name?,
            file: self.path.to_owned(),
            line: node.line,
            agent: agent?,
            messages: messages?,
            files,
            initial_data,
            role,
            model,
            thinking,
            result,
            timeout_ms,
            expect,
        })
    }

    fn case_name(&mut self, node: &Node) -> Option<String> {
        let name = self.string(node, "name")?;
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !valid {
            self.at(
                node.line,
                format!(
                    "case name {name:?} is not a short name: use letters, digits, `-`, `_` and `.` \
                     (at most 64), e.g. `echoes-greeting`"
                ),
            );
            return None;
        }
        Some(name)
    }

    fn agent(&mut self, node: &Node) -> Option<String> {
        let agent = self.string(node, "agent")?;
        if self.known_agents.iter().any(|known| known == &agent) {
            return Some(agent);
        }
        let hint = flue_build::suggest_name(&agent, self.known_agents.iter().map(String::as_str))
            .map(|near| format!(" (did you mean `{near}`?)"))
            .unwrap_or_default();
        self.at(
            node.line,
            format!(
                "unknown agent `{agent}`{hint}; the workspace's agents: {}",
                list_or_none(self.known_agents)
            ),
        );
        None
    }

    fn messages(&mut self, node: &Node) -> Option<Vec<String>> {
        match (node.get("message"), node.get("messages")) {
            (Some(_), Some(both)) => {
                self.at(
                    both.line,
                    "a case has `message` or `messages`, not both: keep one",
                );
                None
            }
            (Some(message), None) => Some(vec![self.string(message, "message")?]),
            (None, Some(list)) => {
                let messages = self.strings(list, "messages")?;
                if messages.is_empty() {
                    self.at(list.line, "`messages` is empty: give at least one message");
                    return None;
                }
                Some(messages)
            }
            (None, None) => {
                self.at(
                    node.line,
                    "this case sends nothing: add `message: \"...\"` (or a list of `messages`)",
                );
                None
            }
        }
    }

    fn files(&mut self, node: &Node) -> Vec<(String, String)> {
        let Value::Mapping(entries) = &node.value else {
            self.at(
                node.line,
                format!(
                    "`files` is {}; it must map paths to their text (`src/a.py: |`)",
                    node.kind()
                ),
            );
            return Vec::new();
        };
        let mut files = Vec::new();
        for (key, value) in entries {
            let Some(path) = self.sandbox_path(key) else {
                continue;
            };
            if let Some(text) = self.string(value, &format!("files.{path}")) {
                files.push((path, text));
            }
        }
        files
    }

    /// A relative path inside the sandbox: no `..`, not absolute.
    fn sandbox_path(&mut self, node: &Node) -> Option<String> {
        let path = self.string(node, "a file path")?;
        let escapes = path.starts_with('/')
            || path.split('/').any(|part| part == "..")
            || path.is_empty()
            || path.contains('\0');
        if escapes {
            self.at(
                node.line,
                format!("file path {path:?} must be relative to the sandbox, without `..`: e.g. `src/main.py`"),
            );
            return None;
        }
        Some(path)
    }

    fn initial_data(&mut self, node: &Node) -> Option<Json> {
        let data = node
            .get("initial_data")
            .or_else(|| node.get("initialData"))?;
        let value = data.to_json();
        if !value.is_object() {
            self.at(
                data.line,
                format!(
                    "`initial_data` is {}; it seeds the conversation's state, a mapping",
                    data.kind()
                ),
            );
            return None;
        }
        Some(value)
    }

    fn thinking(&mut self, node: &Node) -> Option<ThinkingLevel> {
        let text = self.string(node, "thinking")?;
        match text.parse::<ThinkingLevel>() {
            Ok(level) => Some(level),
            Err(err) => {
                self.at(node.line, format!("`thinking`: {err}"));
                None
            }
        }
    }

    fn model(&mut self, node: &Node, field: &str) -> Option<String> {
        let model = self.string(node, field)?;
        match model.split_once('/') {
            Some((provider, name)) if !provider.is_empty() && !name.is_empty() => Some(model),
            _ => {
                self.at(
                    node.line,
                    format!("`{field}` {model:?} is not `provider/model`: e.g. `anthropic/claude-sonnet-4-6` or `scripted/script.json`"),
                );
                None
            }
        }
    }

    /// A JSON Schema given as YAML, checked to compile.
    fn schema(&mut self, node: &Node, field: &str) -> Option<Json> {
        let schema = node.to_json();
        if !schema.is_object() {
            self.at(
                node.line,
                format!(
                    "`{field}` is {}; it must be a JSON Schema (a mapping with `type:`)",
                    node.kind()
                ),
            );
            return None;
        }
        if let Err(err) = jsonschema::validator_for(&schema) {
            self.at(
                node.line,
                format!("`{field}` is not a valid JSON Schema: {err}"),
            );
            return None;
        }
        Some(schema)
    }

    fn expect(&mut self, node: &Node, defaults: &Defaults<'_>) -> Option<Expect> {
        if !self.mapping(node, "`expect`", EXPECT_KEYS) {
            return None;
        }
        let mut expect = Expect::default();
        let texts = |reader: &mut Self, key: &str| {
            node.get(key)
                .and_then(|list| reader.strings(list, key))
                .unwrap_or_default()
        };
        expect.reply_contains = texts(self, "reply_contains");
        expect.reply_not_contains = texts(self, "reply_not_contains");
        expect.reply_matches = texts(self, "reply_matches");
        if let Some(list) = node.get("reply_matches") {
            for pattern in &expect.reply_matches {
                self.regex(list, pattern);
            }
        }
        expect.reply_equals = node
            .get("reply_equals")
            .and_then(|text| self.string(text, "reply_equals"));
        expect.result = node.get("result").map(Node::to_json);
        expect.result_schema = node
            .get("result_schema")
            .and_then(|schema| self.schema(schema, "result_schema"));
        if let Some(calls) = node.get("tool_calls") {
            expect.tool_calls = self.tool_calls(calls);
        }
        if let Some(counts) = node.get("tool_call_counts") {
            expect.tool_call_counts = self.counts(counts);
        }
        expect.never_called = texts(self, "never_called");
        if let Some(files) = node.get("files") {
            expect.files = self.file_checks(files);
        }
        expect.max_turns = node
            .get("max_turns")
            .and_then(|n| self.count(n, "max_turns"));
        expect.max_tokens = node
            .get("max_tokens")
            .and_then(|n| self.count(n, "max_tokens"));
        expect.max_latency_ms = node
            .get("max_latency_ms")
            .and_then(|n| self.count(n, "max_latency_ms"));
        expect.max_cost_usd = node
            .get("max_cost_usd")
            .and_then(|n| self.number(n, "max_cost_usd", 0.0, f64::MAX));
        if let Some(scorers) = node.get("scorers") {
            expect.scorers = self.list_of(scorers, "scorers", Self::scorer);
        }
        if let Some(judges) = node.get("judge") {
            let mut judges =
                self.list_of(judges, "judge", |reader, node| reader.judge(node, defaults));
            if judges.len() > 1 {
                for (judge_idx, judge) in judges.iter_mut().enumerate() {
                    if judge.name == "judge" {
                        judge.name = format!("judge-{}", judge_idx + 1);
                    }
                }
            }
            expect.judges = judges;
        }
        Some(expect)
    }

    fn regex(&mut self, node: &Node, pattern: &str) {
        if let Err(err) = regex::Regex::new(pattern) {
            self.at(
                node.line,
                format!("{pattern:?} is not a valid regular expression: {err}"),
            );
        }
    }

    /// `[bash, read_file]` or `[{name: bash, input: {command: ls}}]`.
    fn tool_calls(&mut self, node: &Node) -> Vec<ToolCallExpect> {
        let Value::Sequence(items) = &node.value else {
            self.at(
                node.line,
                format!("`tool_calls` is {}; it must be a list of tool names or `{{name, input}}` mappings", node.kind()),
            );
            return Vec::new();
        };
        let mut calls = Vec::new();
        for item in items {
            match &item.value {
                Value::Scalar { .. } => {
                    if let Some(name) = self.string(item, "tool_calls") {
                        calls.push(ToolCallExpect { name, input: None });
                    }
                }
                Value::Mapping(_) => {
                    if !self.mapping(item, "a tool call", TOOL_CALL_KEYS) {
                        continue;
                    }
                    let Some(name) = item.get("name") else {
                        self.at(
                            item.line,
                            "this tool call has no `name`: add `name: <tool>`",
                        );
                        continue;
                    };
                    if let Some(name) = self.string(name, "name") {
                        let input = item.get("input").map(Node::to_json);
                        calls.push(ToolCallExpect { name, input });
                    }
                }
                Value::Sequence(_) => self.at(
                    item.line,
                    "a tool call is a name or a `{name, input}` mapping, not a list",
                ),
            }
        }
        calls
    }

    fn counts(&mut self, node: &Node) -> BTreeMap<String, u64> {
        let Value::Mapping(entries) = &node.value else {
            self.at(
                node.line,
                format!(
                    "`tool_call_counts` is {}; it must map tool names to counts (`bash: 2`)",
                    node.kind()
                ),
            );
            return BTreeMap::new();
        };
        let mut counts = BTreeMap::new();
        for (key, value) in entries {
            let Some(name) = self.string(key, "a tool name") else {
                continue;
            };
            if let Some(count) = self.count(value, &format!("tool_call_counts.{name}")) {
                counts.insert(name, count);
            }
        }
        counts
    }

    fn file_checks(&mut self, node: &Node) -> Vec<FileExpect> {
        let Value::Mapping(entries) = &node.value else {
            self.at(
                node.line,
                format!("`expect.files` is {}; it must map paths to checks (`out.txt: {{contains: done}}`)", node.kind()),
            );
            return Vec::new();
        };
        let mut checks = Vec::new();
        for (key, value) in entries {
            let Some(path) = self.sandbox_path(key) else {
                continue;
            };
            if let Some(check) = self.file_check(path, value) {
                checks.push(check);
            }
        }
        checks
    }

    fn file_check(&mut self, path: String, node: &Node) -> Option<FileExpect> {
        let mut check = FileExpect {
            path,
            exists: true,
            contains: Vec::new(),
            not_contains: Vec::new(),
            equals: None,
            matches: None,
        };
        // `path: true` / `path: false`: exists or not.
        if let Json::Bool(exists) = node.to_json() {
            check.exists = exists;
            return Some(check);
        }
        if !self.mapping(node, "a file check", FILE_CHECK_KEYS) {
            return None;
        }
        if let Some(exists) = node.get("exists") {
            match exists.to_json() {
                Json::Bool(value) => check.exists = value,
                _ => self.at(exists.line, "`exists` is true or false"),
            }
        }
        let texts = |reader: &mut Self, key: &str| {
            node.get(key)
                .and_then(|list| reader.strings(list, key))
                .unwrap_or_default()
        };
        check.contains = texts(self, "contains");
        check.not_contains = texts(self, "not_contains");
        check.equals = node
            .get("equals")
            .and_then(|text| self.string(text, "equals"));
        if let Some(pattern) = node.get("matches") {
            check.matches = self.string(pattern, "matches");
            if let Some(text) = &check.matches {
                let text = text.clone();
                self.regex(pattern, &text);
            }
        }
        Some(check)
    }

    fn scorer(&mut self, node: &Node) -> Option<CommandScorer> {
        // A bare string is the command.
        if let Value::Scalar { .. } = node.value {
            let command = self.string(node, "scorers")?;
            return Some(CommandScorer {
                name: command.clone(),
                command,
                threshold: DEFAULT_SCORE_THRESHOLD,
                timeout_ms: DEFAULT_SCORER_TIMEOUT_MS,
            });
        }
        if !self.mapping(node, "a scorer", SCORER_KEYS) {
            return None;
        }
        let Some(command) = node.get("command") else {
            self.at(
                node.line,
                "this scorer has no `command`: add `command: python3 evals/score.py`",
            );
            return None;
        };
        let command = self.string(command, "command")?;
        let name = node
            .get("name")
            .and_then(|name| self.string(name, "name"))
            .unwrap_or_else(|| command.clone());
        let threshold = node
            .get("threshold")
            .map_or(Some(DEFAULT_SCORE_THRESHOLD), |n| {
                self.number(n, "threshold", 0.0, 1.0)
            })?;
        let timeout_ms = node
            .get("timeout_ms")
            .map_or(Some(DEFAULT_SCORER_TIMEOUT_MS), |n| {
                self.count(n, "timeout_ms")
            })?;
        Some(CommandScorer {
            name,
            command,
            threshold,
            timeout_ms,
        })
    }

    fn judge(&mut self, node: &Node, defaults: &Defaults<'_>) -> Option<Judge> {
        if !self.mapping(node, "a judge", JUDGE_KEYS) {
            return None;
        }
        let Some(rubric) = node.get("rubric") else {
            self.at(
                node.line,
                "this judge has no `rubric`: say what a good answer does",
            );
            return None;
        };
        let rubric = self.string(rubric, "rubric")?;
        let model = match node.get("model") {
            Some(model) => self.model(model, "model")?,
            None => match defaults.judge_model {
                Some(model) => model.to_owned(),
                None => {
                    self.at(
                        node.line,
                        "this judge names no model: add `model: provider/model` (or `judge_model:` at the top of the file)",
                    );
                    return None;
                }
            },
        };
        let name = node
            .get("name")
            .and_then(|name| self.string(name, "name"))
            .unwrap_or_else(|| "judge".to_owned());
        let threshold = node
            .get("threshold")
            .map_or(Some(DEFAULT_SCORE_THRESHOLD), |n| {
                self.number(n, "threshold", 0.0, 1.0)
            })?;
        Some(Judge {
            name,
            rubric,
            model,
            threshold,
        })
    }

    /// One item or a list of them.
    fn list_of<T>(
        &mut self,
        node: &Node,
        _field: &str,
        mut item: impl FnMut(&mut Self, &Node) -> Option<T>,
    ) -> Vec<T> {
        match &node.value {
            Value::Sequence(items) => items.iter().filter_map(|node| item(self, node)).collect(),
            _ => item(self, node).into_iter().collect(),
        }
    }

    /// Checks `node` is a mapping with only `known` keys (a did-you-mean for the others).
    fn mapping(&mut self, node: &Node, place: &str, known: &[&str]) -> bool {
        let Value::Mapping(entries) = &node.value else {
            self.at(
                node.line,
                format!(
                    "{place} is {}; it must be a mapping of `key: value`",
                    node.kind()
                ),
            );
            return false;
        };
        let mut seen = BTreeSet::new();
        for (key, _) in entries {
            let Some(name) = key.as_str() else {
                self.at(key.line, format!("a key of {place} is not text"));
                continue;
            };
            if !seen.insert(name) {
                self.at(
                    key.line,
                    format!("`{name}` is given twice in {place}: keep one"),
                );
                continue;
            }
            if known.contains(&name) {
                continue;
            }
            let hint = flue_build::suggest_name(name, known.iter().copied())
                .map(|near| format!("did you mean `{near}`?"))
                .unwrap_or_else(|| format!("known keys: {}", known.join(", ")));
            self.at(
                key.line,
                format!("unknown key `{name}` in {place} ({hint})"),
            );
        }
        true
    }

    /// A scalar as text (numbers and booleans as written).
    fn string(&mut self, node: &Node, field: &str) -> Option<String> {
        match &node.value {
            Value::Scalar { text, .. } => Some(text.clone()),
            _ => {
                self.at(
                    node.line,
                    format!("`{field}` is {}; it must be text", node.kind()),
                );
                None
            }
        }
    }

    /// A text or a list of texts.
    fn strings(&mut self, node: &Node, field: &str) -> Option<Vec<String>> {
        match &node.value {
            Value::Scalar { .. } => Some(vec![self.string(node, field)?]),
            Value::Sequence(items) => items.iter().map(|item| self.string(item, field)).collect(),
            Value::Mapping(_) => {
                self.at(
                    node.line,
                    format!("`{field}` is a mapping; it must be a text or a list of texts"),
                );
                None
            }
        }
    }

    fn count(&mut self, node: &Node, field: &str) -> Option<u64> {
        match node.to_json() {
            Json::Number(number) if number.as_u64().is_some() => number.as_u64(),
            _ => {
                self.at(
                    node.line,
                    format!("`{field}` must be a whole number, 0 or more"),
                );
                None
            }
        }
    }

    fn number(&mut self, node: &Node, field: &str, min: f64, max: f64) -> Option<f64> {
        match node.to_json().as_f64() {
            Some(value) if (min..=max).contains(&value) => Some(value),
            _ if max <= 1.0 => {
                self.at(
                    node.line,
                    format!("`{field}` must be a number from {min} to {max}"),
                );
                None
            }
            _ => {
                self.at(
                    node.line,
                    format!("`{field}` must be a number, {min} or more"),
                );
                None
            }
        }
    }
}

/// What a file gives its cases unless they say otherwise.
struct Defaults<'a> {
    agent: Option<&'a str>,
    judge_model: Option<&'a str>,
}

fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        return "none (add agents/<name>.md)".to_owned();
    }
    names.join(", ")
}
