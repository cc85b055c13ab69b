//! `hooks:` in agent files and `[hooks]` in flue.toml: command hooks in the shape of the
//! `hooks` object of Claude Code's settings.json.
//!
//! The value maps an event name (`PreToolUse`, `PostToolUse`, `UserPromptSubmit`, `Stop`,
//! `SubagentStop`, `PreCompact`, `SessionStart`, `SessionEnd`, and flue's `BeforeModelCall`)
//! to a list of groups `{matcher, hooks: [{type: command, command, timeout, onFailure}]}`.
//! Every problem is reported with its place; the valid hooks are kept.

use flue_core::hook::{CommandHookSpec, HookPoint, OnFailure};
use serde_json::Value;

/// The keys of one group.
const GROUP_KEYS: &[&str] = &["matcher", "hooks"];

/// The keys of one hook.
const HOOK_KEYS: &[&str] = &["type", "command", "timeout", "onFailure", "env"];

/// The hooks of a `hooks` value declared in `declared_in`, and every problem found (each a
/// sentence naming the place, such as `hooks.PreToolUse[0].hooks[1].timeout`).
pub(crate) fn parse(value: &Value, declared_in: &str) -> (Vec<CommandHookSpec>, Vec<String>) {
    let mut specs = Vec::new();
    let mut problems = Vec::new();
    let Value::Object(events) = value else {
        problems.push(
            "`hooks` must be a mapping of event names (such as `PreToolUse`) to lists of \
             `{matcher, hooks: [{type: command, command}]}`"
                .to_owned(),
        );
        return (specs, problems);
    };
    for (event, groups) in events {
        let Some(point) = HookPoint::from_name(event) else {
            let known: Vec<&str> = HookPoint::ALL.iter().map(|point| point.name()).collect();
            problems.push(format!(
                "`hooks.{event}` is not a hook event; the events are {}",
                known.join(", ")
            ));
            continue;
        };
        let Value::Array(groups) = groups else {
            problems.push(format!(
                "`hooks.{event}` must be a list of `{{matcher, hooks: [...]}}` groups"
            ));
            continue;
        };
        for (group_idx, group) in groups.iter().enumerate() {
            let place = format!("hooks.{event}[{group_idx}]");
            group_hooks(point, group, &place, declared_in, &mut specs, &mut problems);
        }
    }
    (specs, problems)
}

fn group_hooks(
    point: HookPoint,
    group: &Value,
    place: &str,
    declared_in: &str,
    specs: &mut Vec<CommandHookSpec>,
    problems: &mut Vec<String>,
) {
    let Value::Object(group) = group else {
        problems.push(format!(
            "`{place}` must be a mapping with `matcher` and `hooks`"
        ));
        return;
    };
    for key in group.keys() {
        if !GROUP_KEYS.contains(&key.as_str()) {
            problems.push(format!(
                "`{place}.{key}` is not a key of a hook group; the keys are matcher, hooks"
            ));
        }
    }
    let matcher = match group.get("matcher") {
        None | Some(Value::Null) => None,
        Some(Value::String(matcher)) => Some(matcher.clone()),
        Some(_) => {
            problems.push(format!(
                "`{place}.matcher` must be a string (a tool name, `A|B`, or a regular expression)"
            ));
            return;
        }
    };
    let Some(Value::Array(hooks)) = group.get("hooks") else {
        problems.push(format!(
            "`{place}.hooks` must be a list of `{{type: command, command: ...}}`"
        ));
        return;
    };
    for (hook_idx, hook) in hooks.iter().enumerate() {
        let place = format!("{place}.hooks[{hook_idx}]");
        if let Some(spec) = one_hook(
            point,
            matcher.as_deref(),
            hook,
            &place,
            declared_in,
            problems,
        ) {
            specs.push(spec);
        }
    }
}

fn one_hook(
    point: HookPoint,
    matcher: Option<&str>,
    hook: &Value,
    place: &str,
    declared_in: &str,
    problems: &mut Vec<String>,
) -> Option<CommandHookSpec> {
    let Value::Object(fields) = hook else {
        problems.push(format!(
            "`{place}` must be a mapping like `{{type: command, command: ./check.sh}}`"
        ));
        return None;
    };
    let before = problems.len();
    for key in fields.keys() {
        if !HOOK_KEYS.contains(&key.as_str()) {
            problems.push(format!(
                "`{place}.{key}` is not a key of a hook; the keys are {}",
                HOOK_KEYS.join(", ")
            ));
        }
    }
    match fields.get("type") {
        Some(Value::String(kind)) if kind == "command" => {}
        Some(Value::String(kind)) => problems.push(format!(
            "`{place}.type` is {kind:?}: only `command` hooks are supported"
        )),
        _ => problems.push(format!("`{place}.type` must be `command`")),
    }
    let command = match fields.get("command") {
        Some(Value::String(command)) if !command.trim().is_empty() => command.clone(),
        _ => {
            problems.push(format!("`{place}.command` must be the command line to run"));
            String::new()
        }
    };
    let mut spec = CommandHookSpec::new(point, command, declared_in);
    spec.matcher = matcher.map(str::to_owned);
    match fields.get("timeout") {
        None | Some(Value::Null) => {}
        Some(Value::Number(secs)) => match secs.as_u64() {
            Some(secs) => spec.timeout_secs = Some(secs),
            None => problems.push(format!(
                "`{place}.timeout` must be a whole number of seconds"
            )),
        },
        Some(_) => problems.push(format!(
            "`{place}.timeout` must be a whole number of seconds"
        )),
    }
    match fields.get("onFailure") {
        None | Some(Value::Null) => {}
        Some(Value::String(mode)) if mode == "block" => spec.on_failure = OnFailure::Block,
        Some(Value::String(mode)) if mode == "continue" || mode == "allow" => {
            spec.on_failure = OnFailure::Continue;
        }
        Some(_) => problems.push(format!(
            "`{place}.onFailure` must be `block` (the default) or `continue`"
        )),
    }
    match fields.get("env") {
        None | Some(Value::Null) => {}
        Some(Value::Array(names)) if names.iter().all(Value::is_string) => {
            spec.env = names
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect();
        }
        Some(_) => problems.push(format!(
            "`{place}.env` must be a list of environment variable names"
        )),
    }
    if problems.len() == before {
        problems.extend(
            spec.problems()
                .into_iter()
                .map(|problem| format!("`{place}`: {problem}")),
        );
    }
    (problems.len() == before).then_some(spec)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn claude_code_settings_shape_is_read_and_problems_are_named() {
        let value = json!({
            "PreToolUse": [{"matcher": "Bash", "hooks": [
                {"type": "command", "command": "./check.sh", "timeout": 5}
            ]}],
            "Stop": [{"hooks": [{"type": "command", "command": "./stop.py", "onFailure": "continue"}]}],
            "Nope": [],
            "PostToolUse": [{"matcher": "(", "hooks": [{"type": "prompt", "command": "x"}]}]
        });
        let (specs, problems) = parse(&value, "agents/a.md");
        assert_eq!(specs.len(), 2, "{problems:?}");
        assert_eq!(specs[0].point, HookPoint::PreToolUse);
        assert_eq!(specs[0].matcher.as_deref(), Some("Bash"));
        assert_eq!(specs[0].timeout_secs, Some(5));
        assert_eq!(specs[1].on_failure, OnFailure::Continue);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems
                .iter()
                .any(|problem| problem.contains("hooks.Nope"))
        );
        assert!(
            problems
                .iter()
                .any(|problem| problem.contains("hooks.PostToolUse[0].hooks[0].type"))
        );
    }
}
