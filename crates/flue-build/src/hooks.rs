//! `hooks:` in agent files, `[hooks]` in flue.toml and the `hooks` of Claude Code's
//! `.claude/settings.json`: command and http hooks in the shape of that `hooks` object.
//!
//! The value maps an event name (`PreToolUse`, `PostToolUse`, `UserPromptSubmit`, `Stop`,
//! `SubagentStop`, `PreCompact`, `SessionStart`, `SessionEnd`, and flue's `BeforeModelCall`)
//! to a list of groups `{matcher, hooks: [{type: command, command, timeout, onFailure}]}`
//! (an http hook has `url`, `headers` and `allowedEnvVars` instead of `command`, a prompt
//! hook `prompt` and `model`).
//! What flue does not run (an event it has no point for, a key it does not read) is a note
//! naming its place, and is skipped; a wrong value of a key flue reads is a problem. The
//! valid hooks are kept.

use flue_core::hook::{CommandHookSpec, HookPoint, HttpHookTarget, OnFailure, PromptHookTarget};
use serde_json::Value;

/// The keys of one group.
const GROUP_KEYS: &[&str] = &["matcher", "hooks"];

/// The keys of one command hook.
const HOOK_KEYS: &[&str] = &["type", "command", "timeout", "onFailure", "env"];

/// The keys of one http hook (`allowedEnvVars` is Claude Code's name for `env` there).
const HTTP_HOOK_KEYS: &[&str] = &[
    "type",
    "url",
    "headers",
    "allowedEnvVars",
    "timeout",
    "onFailure",
    "env",
];

/// The keys of one prompt hook.
const PROMPT_HOOK_KEYS: &[&str] = &["type", "prompt", "model", "timeout", "onFailure"];

/// The types of hook flue runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum HookType {
    Command,
    Http,
    Prompt,
}

/// Claude Code hook keys flue accepts and does not act on, with what that means.
const IGNORED_HOOK_KEYS: &[(&str, &str)] = &[
    (
        "statusMessage",
        "Claude Code's spinner text while the hook runs; flue does not show it",
    ),
    (
        "async",
        "flue waits for every hook and uses its decision, as for a hook without `async`",
    ),
    ("once", "flue runs the hook every time its event comes"),
];

/// Claude Code's hook events flue has no point for (docs/hooks.md says why for each).
const CLAUDE_EVENTS_NOT_RUN: &[&str] = &[
    "PostToolBatch",
    "PermissionDenied",
    "UserPromptExpansion",
    "StopFailure",
    "Elicitation",
    "ElicitationResult",
    "TeammateIdle",
    "TaskCreated",
    "TaskCompleted",
    "Setup",
    "InstructionsLoaded",
    "CwdChanged",
    "FileChanged",
    "ConfigChange",
    "WorktreeCreate",
    "WorktreeRemove",
    "PreModelSwitch",
    "PostModelSwitch",
    "MessageDisplay",
    "DirectoryAdded",
];

/// What a `hooks` value declares: the hooks flue runs, the problems (wrong values of what flue
/// reads) and the notes (what it skips or ignores).
#[derive(Debug, Default)]
pub(crate) struct ParsedHooks {
    pub(crate) specs: Vec<CommandHookSpec>,
    pub(crate) problems: Vec<Finding>,
    pub(crate) notes: Vec<Finding>,
}

/// One problem or note: the event key it is under, the hook (counted across the event's
/// groups) and the key it is about (to find its line), and the sentence, which names the place
/// (`hooks.PreToolUse[0].hooks[1].timeout`).
#[derive(Debug)]
pub(crate) struct Finding {
    pub(crate) event: Option<String>,
    pub(crate) hook_ordinal: Option<usize>,
    pub(crate) key: Option<String>,
    pub(crate) message: String,
}

impl Finding {
    fn new(event: Option<&str>, key: Option<&str>, message: String) -> Self {
        Self {
            event: event.map(str::to_owned),
            hook_ordinal: None,
            key: key.map(str::to_owned),
            message,
        }
    }
}

/// The 1-based line of a finding in `text`, whose `hooks` value starts at line `from`: the
/// first line from there naming its event, then its hook's `type` (every hook has one), then
/// its key (the last line found when one is not).
pub(crate) fn line_of(text: &str, from: usize, finding: &Finding) -> usize {
    let event_line = finding
        .event
        .as_deref()
        .and_then(|event| line_naming(text, from, event))
        .unwrap_or(from);
    let mut hook_line = event_line;
    if let Some(ordinal) = finding.hook_ordinal {
        for _ in 0..=ordinal {
            match line_naming(text, hook_line, "type") {
                Some(line) => hook_line = line + 1,
                None => break,
            }
        }
        hook_line = hook_line.saturating_sub(1).max(event_line);
    }
    finding
        .key
        .as_deref()
        .and_then(|key| line_naming(text, hook_line, key))
        .unwrap_or(hook_line)
}

/// The first line at or after `from` (1-based) holding `word` as a whole word.
fn line_naming(text: &str, from: usize, word: &str) -> Option<usize> {
    let is_word_char = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.split('\n')
        .enumerate()
        .skip(from.saturating_sub(1))
        .find(|(_, line)| {
            line.match_indices(word).any(|(at, _)| {
                let before = line[..at].chars().next_back();
                let after = line[at + word.len()..].chars().next();
                !before.is_some_and(is_word_char) && !after.is_some_and(is_word_char)
            })
        })
        .map(|(idx, _)| idx + 1)
}

/// The hooks of a `hooks` value declared in `declared_in`, with every problem and note.
pub(crate) fn parse(value: &Value, declared_in: &str) -> ParsedHooks {
    let mut parsed = ParsedHooks::default();
    let Value::Object(events) = value else {
        parsed.problems.push(Finding::new(
            None,
            None,
            "`hooks` must be a mapping of event names (such as `PreToolUse`) to lists of \
             `{matcher, hooks: [{type: command, command}]}`"
                .to_owned(),
        ));
        return parsed;
    };
    for (event, groups) in events {
        let Some(point) = HookPoint::from_name(event) else {
            parsed
                .notes
                .push(Finding::new(Some(event), None, unknown_event(event)));
            continue;
        };
        let Value::Array(groups) = groups else {
            parsed.problems.push(Finding::new(
                Some(event),
                None,
                format!("`hooks.{event}` must be a list of `{{matcher, hooks: [...]}}` groups"),
            ));
            continue;
        };
        let mut n_hooks = 0;
        for (group_idx, group) in groups.iter().enumerate() {
            let place = Place {
                event,
                hook_ordinal: None,
                path: format!("hooks.{event}[{group_idx}]"),
            };
            group_hooks(point, group, &place, declared_in, &mut parsed, &mut n_hooks);
        }
    }
    parsed
}

fn unknown_event(event: &str) -> String {
    if CLAUDE_EVENTS_NOT_RUN.contains(&event) {
        return format!(
            "`hooks.{event}` is a Claude Code event flue does not run (docs/hooks.md says \
             why); its hooks are skipped"
        );
    }
    let known: Vec<&str> = HookPoint::ALL.iter().map(|point| point.name()).collect();
    format!(
        "`hooks.{event}` is not a hook event flue knows; its hooks are skipped (the events are \
         {})",
        known.join(", ")
    )
}

/// Where a group or hook is: its event, a hook's number among the event's hooks, and its
/// dotted place.
struct Place<'a> {
    event: &'a str,
    hook_ordinal: Option<usize>,
    path: String,
}

impl Place<'_> {
    fn finding(&self, key: Option<&str>, message: String) -> Finding {
        Finding {
            hook_ordinal: self.hook_ordinal,
            ..Finding::new(Some(self.event), key, message)
        }
    }
}

fn group_hooks(
    point: HookPoint,
    group: &Value,
    place: &Place<'_>,
    declared_in: &str,
    parsed: &mut ParsedHooks,
    n_hooks: &mut usize,
) {
    let path = &place.path;
    let Value::Object(group) = group else {
        parsed.problems.push(place.finding(
            None,
            format!("`{path}` must be a mapping with `matcher` and `hooks`"),
        ));
        return;
    };
    for key in group.keys() {
        if !GROUP_KEYS.contains(&key.as_str()) {
            parsed.notes.push(place.finding(
                Some(key),
                format!(
                    "`{path}.{key}` is not a key of a hook group flue reads (matcher, hooks); \
                     it is ignored"
                ),
            ));
        }
    }
    let matcher = match group.get("matcher") {
        None | Some(Value::Null) => None,
        Some(Value::String(matcher)) => Some(matcher.clone()),
        Some(_) => {
            parsed.problems.push(place.finding(
                Some("matcher"),
                format!(
                    "`{path}.matcher` must be a string (a tool name, `A|B`, or a regular \
                     expression)"
                ),
            ));
            return;
        }
    };
    let Some(Value::Array(hooks)) = group.get("hooks") else {
        parsed.problems.push(place.finding(
            None,
            format!("`{path}.hooks` must be a list of `{{type: command, command: ...}}`"),
        ));
        return;
    };
    for (hook_idx, hook) in hooks.iter().enumerate() {
        let place = Place {
            event: place.event,
            hook_ordinal: Some(*n_hooks),
            path: format!("{path}.hooks[{hook_idx}]"),
        };
        *n_hooks += 1;
        if let Some(spec) = one_hook(point, matcher.as_deref(), hook, &place, declared_in, parsed) {
            parsed.specs.push(spec);
        }
    }
}

fn one_hook(
    point: HookPoint,
    matcher: Option<&str>,
    hook: &Value,
    place: &Place<'_>,
    declared_in: &str,
    parsed: &mut ParsedHooks,
) -> Option<CommandHookSpec> {
    let path = &place.path;
    let Value::Object(fields) = hook else {
        parsed.problems.push(place.finding(
            None,
            format!("`{path}` must be a mapping like `{{type: command, command: ./check.sh}}`"),
        ));
        return None;
    };
    // A hook of another type is one finding: its other keys are that type's.
    let (hook_type, keys) = match fields.get("type") {
        Some(Value::String(kind)) if kind == "command" => (HookType::Command, HOOK_KEYS),
        Some(Value::String(kind)) if kind == "http" => (HookType::Http, HTTP_HOOK_KEYS),
        Some(Value::String(kind)) if kind == "prompt" => (HookType::Prompt, PROMPT_HOOK_KEYS),
        Some(Value::String(kind)) => {
            let message = format!(
                "`{path}.type` is {kind:?}: flue runs `command`, `http` and `prompt` hooks"
            );
            parsed.problems.push(place.finding(Some("type"), message));
            return None;
        }
        _ => {
            let message = format!("`{path}.type` must be `command`, `http` or `prompt`");
            parsed.problems.push(place.finding(Some("type"), message));
            return None;
        }
    };
    let mut problems: Vec<(Option<&str>, String)> = Vec::new();
    for key in fields.keys() {
        if keys.contains(&key.as_str()) {
            continue;
        }
        let why = IGNORED_HOOK_KEYS
            .iter()
            .find(|(ignored, _)| ignored == key)
            .map_or_else(
                || format!("not a key of a hook flue reads ({})", keys.join(", ")),
                |(_, why)| (*why).to_owned(),
            );
        parsed
            .notes
            .push(place.finding(Some(key), format!("`{path}.{key}` is ignored: {why}")));
    }
    let mut spec = if hook_type == HookType::Http {
        CommandHookSpec::http(point, http_target(fields, path, &mut problems), declared_in)
    } else if hook_type == HookType::Prompt {
        CommandHookSpec::prompt(
            point,
            prompt_target(fields, path, &mut problems),
            declared_in,
        )
    } else {
        let command = match fields.get("command") {
            Some(Value::String(command)) if !command.trim().is_empty() => command.clone(),
            _ => {
                problems.push((
                    Some("command"),
                    format!("`{path}.command` must be the command line to run"),
                ));
                String::new()
            }
        };
        CommandHookSpec::new(point, command, declared_in)
    };
    spec.matcher = matcher.map(str::to_owned);
    match fields.get("timeout") {
        None | Some(Value::Null) => {}
        Some(Value::Number(secs)) if secs.as_u64().is_some() => {
            spec.timeout_secs = secs.as_u64();
        }
        Some(_) => problems.push((
            Some("timeout"),
            format!("`{path}.timeout` must be a whole number of seconds"),
        )),
    }
    match fields.get("onFailure") {
        None | Some(Value::Null) => {}
        Some(Value::String(mode)) if mode == "block" => spec.on_failure = OnFailure::Block,
        Some(Value::String(mode)) if mode == "continue" || mode == "allow" => {
            spec.on_failure = OnFailure::Continue;
        }
        Some(_) => problems.push((
            Some("onFailure"),
            format!("`{path}.onFailure` must be `block` (the default) or `continue`"),
        )),
    }
    for key in ["env", "allowedEnvVars"]
        .into_iter()
        .filter(|key| keys.contains(key))
    {
        match fields.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::Array(names)) if names.iter().all(Value::is_string) => {
                spec.env
                    .extend(names.iter().filter_map(Value::as_str).map(str::to_owned));
            }
            Some(_) => problems.push((
                Some(key),
                format!("`{path}.{key}` must be a list of environment variable names"),
            )),
        }
    }
    if problems.is_empty() {
        let key = match hook_type {
            HookType::Command => "command",
            HookType::Http => "url",
            HookType::Prompt => "prompt",
        };
        problems.extend(
            spec.problems()
                .into_iter()
                .map(|problem| (Some(key), format!("`{path}`: {problem}"))),
        );
    }
    let ok = problems.is_empty();
    parsed.problems.extend(
        problems
            .into_iter()
            .map(|(key, message)| place.finding(key, message)),
    );
    ok.then_some(spec)
}

/// A prompt hook's `prompt` and `model`.
fn prompt_target(
    fields: &serde_json::Map<String, Value>,
    path: &str,
    problems: &mut Vec<(Option<&str>, String)>,
) -> PromptHookTarget {
    let prompt = match fields.get("prompt") {
        Some(Value::String(prompt)) if !prompt.trim().is_empty() => prompt.clone(),
        _ => {
            problems.push((
                Some("prompt"),
                format!("`{path}.prompt` must be the condition the model judges"),
            ));
            String::new()
        }
    };
    let model = match fields.get("model") {
        None | Some(Value::Null) => None,
        Some(Value::String(model)) => Some(model.trim().to_owned()),
        Some(_) => {
            problems.push((
                Some("model"),
                format!(
                    "`{path}.model` must be a model specifier like `anthropic/claude-haiku-4-5`"
                ),
            ));
            None
        }
    };
    PromptHookTarget { prompt, model }
}

/// An http hook's `url` and `headers` (a mapping of names to string values).
fn http_target(
    fields: &serde_json::Map<String, Value>,
    path: &str,
    problems: &mut Vec<(Option<&str>, String)>,
) -> HttpHookTarget {
    let url = match fields.get("url") {
        Some(Value::String(url)) if !url.trim().is_empty() => url.trim().to_owned(),
        _ => {
            problems.push((
                Some("url"),
                format!("`{path}.url` must be the http:// or https:// URL to POST the input to"),
            ));
            String::new()
        }
    };
    let mut headers = Vec::new();
    match fields.get("headers") {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) if map.values().all(Value::is_string) => {
            headers = map
                .iter()
                .filter_map(|(name, value)| Some((name.clone(), value.as_str()?.to_owned())))
                .collect();
        }
        Some(_) => problems.push((
            Some("headers"),
            format!("`{path}.headers` must be a mapping of header names to string values"),
        )),
    }
    HttpHookTarget { url, headers }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn claude_code_settings_shape_is_read_and_problems_are_named() {
        let value = json!({
            "PreToolUse": [{"matcher": "Bash", "hooks": [
                {"type": "command", "command": "./check.sh", "timeout": 5, "async": true}
            ]}],
            "Stop": [{"hooks": [{"type": "command", "command": "./stop.py", "onFailure": "continue"}]}],
            "Nope": [],
            "TeammateIdle": [],
            "PostToolUse": [{"matcher": "(", "hooks": [{"type": "agent", "command": "x"}]}]
        });
        let parsed = parse(&value, "agents/a.md");
        let problems: Vec<&str> = parsed.problems.iter().map(|f| f.message.as_str()).collect();
        let notes: Vec<&str> = parsed.notes.iter().map(|f| f.message.as_str()).collect();
        let specs = parsed.specs;
        assert_eq!(specs.len(), 2, "{problems:?}");
        assert_eq!(specs[0].point, HookPoint::PreToolUse);
        assert_eq!(specs[0].matcher.as_deref(), Some("Bash"));
        assert_eq!(specs[0].timeout_secs, Some(5));
        assert_eq!(specs[1].on_failure, OnFailure::Continue);
        // A type flue cannot run is a problem in flue's own files; unknown events and keys are
        // notes, the rest of the file runs.
        assert_eq!(
            problems,
            [
                "`hooks.PostToolUse[0].hooks[0].type` is \"agent\": flue runs `command`, `http` and `prompt` hooks"
            ]
        );
        assert_eq!(notes.len(), 3, "{notes:?}");
        assert!(
            notes
                .iter()
                .any(|note| note.starts_with("`hooks.Nope` is not a hook event"))
        );
        assert!(
            notes
                .iter()
                .any(|note| note.contains("`hooks.TeammateIdle` is a Claude Code event"))
        );
        assert!(
            notes
                .iter()
                .any(|note| note.starts_with("`hooks.PreToolUse[0].hooks[0].async` is ignored"))
        );
    }

    #[test]
    fn a_finding_is_placed_at_its_event_then_its_key() {
        let text = "[hooks]\n[[hooks.Stop]]\nhooks = [{ type = \"command\", command = \"x\" }]\n\
                    [[hooks.PreToolUse]]\nhooks = [{ type = \"command\", command = \"y\", async = true }]\n";
        let finding = Finding::new(Some("PreToolUse"), Some("async"), String::new());
        assert_eq!(line_of(text, 1, &finding), 5);
        let finding = Finding::new(Some("Notification"), None, String::new());
        assert_eq!(line_of(text, 1, &finding), 1);
    }

    #[test]
    fn http_hooks_are_read_with_their_url_headers_and_variables() {
        let value = json!({
            "PreToolUse": [{"matcher": "Bash", "hooks": [{
                "type": "http", "url": "https://policy.example.com/pre",
                "headers": {"Authorization": "Bearer ${TOKEN}"},
                "allowedEnvVars": ["TOKEN"], "timeout": 5
            }]}],
            "Stop": [{"hooks": [
                {"type": "http", "url": "ftp://nope"},
                {"type": "http", "headers": {"A": 1}}
            ]}]
        });
        let parsed = parse(&value, "flue.toml");
        let problems: Vec<&str> = parsed.problems.iter().map(|f| f.message.as_str()).collect();
        assert_eq!(parsed.specs.len(), 1, "{problems:?}");
        let spec = &parsed.specs[0];
        let target = spec.http.as_ref().unwrap();
        assert_eq!(target.url, "https://policy.example.com/pre");
        assert_eq!(
            target.headers,
            [("Authorization".to_owned(), "Bearer ${TOKEN}".to_owned())]
        );
        assert_eq!(spec.env, ["TOKEN"]);
        assert_eq!(spec.timeout_secs, Some(5));
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(
            problems[0].contains("`url` must be an http:// or https:// URL"),
            "{problems:?}"
        );
    }
}
