//! Checking a case's [`Expect`] against a [`Transcript`]: one [`Check`] per assertion, each
//! saying what was expected and what was found.

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use crate::case_file::{Expect, FileExpect, ToolCallExpect};
use crate::transcript::Transcript;

#[cfg(test)]
mod tests;

/// The verdict of one assertion, scorer or judge.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Check {
    /// What was checked: `reply_contains`, `tool_calls`, `judge`, a scorer's name.
    pub name: String,
    /// Whether it held.
    pub passed: bool,
    /// What was expected and, when it failed, what was found.
    pub detail: String,
    /// A scorer's or judge's score, from 0 to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
    /// A judge's or scorer's reasoning, as it gave it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
}

impl Check {
    pub(crate) fn new(name: &str, passed: bool, detail: impl Into<String>) -> Self {
        Self {
            name: name.to_owned(),
            passed,
            detail: detail.into(),
            score: None,
            reasoning: None,
        }
    }
}

/// Every assertion of `expect` that needs no command or model, checked against `transcript`.
pub(crate) fn check(expect: &Expect, transcript: &Transcript) -> Vec<Check> {
    let mut checks = Vec::new();
    if transcript.outcome != "completed" {
        let why = transcript
            .error
            .as_ref()
            .map(|err| format!(": {} ({})", err.message, err.kind))
            .unwrap_or_default();
        checks.push(Check::new(
            "completed",
            false,
            format!("the conversation ended {}{why}", transcript.outcome),
        ));
    }
    reply_checks(expect, &transcript.reply, &mut checks);
    result_checks(expect, transcript.data.as_ref(), &mut checks);
    tool_checks(expect, transcript, &mut checks);
    for file in &expect.files {
        let text = transcript.files.get(&file.path).cloned().flatten();
        checks.push(file_check(file, text.as_deref()));
    }
    limit_checks(expect, transcript, &mut checks);
    checks
}

fn reply_checks(expect: &Expect, reply: &str, checks: &mut Vec<Check>) {
    for text in &expect.reply_contains {
        checks.push(Check::new(
            "reply_contains",
            reply.contains(text.as_str()),
            found(
                &format!("the reply contains {text:?}"),
                reply,
                reply.contains(text.as_str()),
            ),
        ));
    }
    for text in &expect.reply_not_contains {
        let held = !reply.contains(text.as_str());
        checks.push(Check::new(
            "reply_not_contains",
            held,
            found(&format!("the reply does not contain {text:?}"), reply, held),
        ));
    }
    for pattern in &expect.reply_matches {
        let held = regex::Regex::new(pattern).is_ok_and(|regex| regex.is_match(reply));
        checks.push(Check::new(
            "reply_matches",
            held,
            found(&format!("the reply matches /{pattern}/"), reply, held),
        ));
    }
    if let Some(text) = &expect.reply_equals {
        let held = reply.trim() == text.trim();
        checks.push(Check::new(
            "reply_equals",
            held,
            found(&format!("the reply is {text:?}"), reply, held),
        ));
    }
}

/// `expected`, and what was found when it did not hold.
fn found(expected: &str, reply: &str, held: bool) -> String {
    if held {
        return expected.to_owned();
    }
    format!("expected {expected}; it was {:?}", shorten(reply, 400))
}

fn result_checks(expect: &Expect, data: Option<&Json>, checks: &mut Vec<Check>) {
    if expect.result.is_none() && expect.result_schema.is_none() {
        return;
    }
    let Some(data) = data else {
        checks.push(Check::new(
            "result",
            false,
            "expected a structured result; there was none (give the case `result:`, a schema)",
        ));
        return;
    };
    if let Some(schema) = &expect.result_schema {
        let problems: Vec<String> = match jsonschema::validator_for(schema) {
            Ok(validator) => validator
                .iter_errors(data)
                .map(|err| format!("{} at {}", err, err.instance_path()))
                .collect(),
            Err(err) => vec![format!("the schema does not compile: {err}")],
        };
        let detail = if problems.is_empty() {
            "the result matches the schema".to_owned()
        } else {
            format!(
                "the result does not match the schema: {}",
                problems.join("; ")
            )
        };
        checks.push(Check::new("result_schema", problems.is_empty(), detail));
    }
    if let Some(expected) = &expect.result {
        let held = is_subset(expected, data);
        let detail = if held {
            format!("the result holds {expected}")
        } else {
            format!("expected the result to hold {expected}; it was {data}")
        };
        checks.push(Check::new("result", held, detail));
    }
}

/// Whether `actual` holds everything of `expected`: objects key by key (other keys allowed),
/// arrays of the same length item by item, numbers by value, everything else equal.
pub(crate) fn is_subset(expected: &Json, actual: &Json) -> bool {
    match (expected, actual) {
        (Json::Object(expected), Json::Object(actual)) => expected.iter().all(|(key, value)| {
            actual
                .get(key)
                .is_some_and(|actual| is_subset(value, actual))
        }),
        (Json::Array(expected), Json::Array(actual)) => {
            expected.len() == actual.len()
                && expected
                    .iter()
                    .zip(actual)
                    .all(|(expected, actual)| is_subset(expected, actual))
        }
        (Json::Number(expected), Json::Number(actual)) => expected.as_f64() == actual.as_f64(),
        _ => expected == actual,
    }
}

fn tool_checks(expect: &Expect, transcript: &Transcript, checks: &mut Vec<Check>) {
    let called: Vec<String> = transcript
        .tool_calls
        .iter()
        .map(|call| call.name.clone())
        .collect();
    if !expect.tool_calls.is_empty() {
        checks.push(calls_in_order(&expect.tool_calls, transcript, &called));
    }
    for (name, expected) in &expect.tool_call_counts {
        let count = called.iter().filter(|called| *called == name).count() as u64;
        checks.push(Check::new(
            "tool_call_counts",
            count == *expected,
            format!("expected {expected} call(s) of `{name}`; there were {count}"),
        ));
    }
    for name in &expect.never_called {
        let count = called.iter().filter(|called| *called == name).count();
        checks.push(Check::new(
            "never_called",
            count == 0,
            format!("expected no call of `{name}`; there were {count}"),
        ));
    }
}

/// The expected calls, in order, each matched by a later call than the one before.
fn calls_in_order(
    expected: &[ToolCallExpect],
    transcript: &Transcript,
    called: &[String],
) -> Check {
    let mut from = 0;
    for (expected_idx, want) in expected.iter().enumerate() {
        let next = transcript.tool_calls[from..].iter().position(|call| {
            call.name == want.name
                && want
                    .input
                    .as_ref()
                    .is_none_or(|input| is_subset(input, &call.input))
        });
        match next {
            Some(offset) => from += offset + 1,
            None => {
                let what = match &want.input {
                    Some(input) => format!("`{}` with input holding {input}", want.name),
                    None => format!("`{}`", want.name),
                };
                let position = if expected_idx == 0 {
                    String::new()
                } else {
                    format!(" after `{}`", expected[expected_idx - 1].name)
                };
                return Check::new(
                    "tool_calls",
                    false,
                    format!(
                        "expected a call of {what}{position}; the calls were [{}]",
                        called.join(", ")
                    ),
                );
            }
        }
    }
    let names: Vec<&str> = expected.iter().map(|call| call.name.as_str()).collect();
    Check::new(
        "tool_calls",
        true,
        format!("called [{}] in this order", names.join(", ")),
    )
}

fn file_check(file: &FileExpect, text: Option<&str>) -> Check {
    let name = "files";
    let path = &file.path;
    let Some(text) = text else {
        return Check::new(
            name,
            !file.exists,
            if file.exists {
                format!("expected {path} in the sandbox; it is not there")
            } else {
                format!("{path} is not in the sandbox")
            },
        );
    };
    if !file.exists {
        return Check::new(name, false, format!("expected no {path}; it is there"));
    }
    let mut problems = Vec::new();
    for wanted in &file.contains {
        if !text.contains(wanted.as_str()) {
            problems.push(format!("it does not contain {wanted:?}"));
        }
    }
    for unwanted in &file.not_contains {
        if text.contains(unwanted.as_str()) {
            problems.push(format!("it contains {unwanted:?}"));
        }
    }
    if let Some(equals) = &file.equals
        && text.trim() != equals.trim()
    {
        problems.push(format!("it is {:?}, not {equals:?}", shorten(text, 200)));
    }
    if let Some(pattern) = &file.matches
        && !regex::Regex::new(pattern).is_ok_and(|regex| regex.is_match(text))
    {
        problems.push(format!("it does not match /{pattern}/"));
    }
    if problems.is_empty() {
        return Check::new(name, true, format!("{path} is as expected"));
    }
    Check::new(name, false, format!("{path}: {}", problems.join("; ")))
}

fn limit_checks(expect: &Expect, transcript: &Transcript, checks: &mut Vec<Check>) {
    let limits = [
        ("max_turns", expect.max_turns, transcript.turns, "turn(s)"),
        (
            "max_tokens",
            expect.max_tokens,
            transcript.tokens(),
            "tokens",
        ),
        (
            "max_latency_ms",
            expect.max_latency_ms,
            transcript.latency_ms,
            "ms",
        ),
    ];
    for (name, limit, actual, unit) in limits {
        if let Some(limit) = limit {
            checks.push(Check::new(
                name,
                actual <= limit,
                format!("at most {limit} {unit}; it took {actual}"),
            ));
        }
    }
    if let Some(limit) = expect.max_cost_usd {
        let cost = transcript.cost_usd();
        checks.push(Check::new(
            "max_cost_usd",
            cost <= limit,
            format!("at most ${limit}; it cost ${cost:.6}"),
        ));
    }
}

/// `text` cut to `max` characters, with `…` when cut.
pub(crate) fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max).collect();
    cut.push('…');
    cut
}
