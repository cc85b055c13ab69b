//! Reading typed values out of parsed frontmatter, reporting each problem at its key's line.
//!
//! Conversions take the key path for their messages and return `Err(message)`; a [`Report`]
//! turns that message into a [`Diagnostic`] at the key's line and lets parsing go on.

use std::collections::BTreeMap;

use gray_matter::Pod;

use crate::diagnostic::Diagnostic;
use crate::frontmatter::{KeyLines, describe};
use crate::suggest::did_you_mean;

/// Collects diagnostics for one file, locating each by its key path.
pub(crate) struct Report<'a> {
    path: &'a str,
    lines: &'a KeyLines,
    diagnostics: &'a mut Vec<Diagnostic>,
}

impl<'a> Report<'a> {
    /// A report for the file at `path` whose keys are found in `lines`.
    pub(crate) fn new(
        path: &'a str,
        lines: &'a KeyLines,
        diagnostics: &'a mut Vec<Diagnostic>,
    ) -> Self {
        Self {
            path,
            lines,
            diagnostics,
        }
    }

    /// The line of the key at `keys` (1-based).
    pub(crate) fn line(&self, keys: &[&str]) -> usize {
        self.lines.nested(keys)
    }

    /// Records `message` at the line of the key at `keys`.
    pub(crate) fn error(&mut self, keys: &[&str], message: impl Into<String>) {
        let line = self.lines.nested(keys);
        self.diagnostics
            .push(Diagnostic::at(self.path, line, message));
    }

    /// The file line of a finding of the `hooks` value under top-level `key`.
    pub(crate) fn hooks_line(&self, key: &str, finding: &crate::hooks::Finding) -> usize {
        self.lines.hooks_line(key, finding)
    }

    /// Records `message` at file line `line`.
    pub(crate) fn error_at_line(&mut self, line: usize, message: impl Into<String>) {
        self.diagnostics
            .push(Diagnostic::at(self.path, line, message));
    }

    /// Records `message` at entry `item_idx` of the list under top-level `top` (at `key` in
    /// that entry when given).
    pub(crate) fn error_at_item(
        &mut self,
        top: &str,
        item_idx: usize,
        key: Option<&str>,
        message: impl Into<String>,
    ) {
        let line = self.lines.item(top, item_idx, key);
        self.diagnostics
            .push(Diagnostic::at(self.path, line, message));
    }

    /// The value, or `None` after recording the message at the key's line.
    pub(crate) fn check<T>(&mut self, keys: &[&str], result: Result<T, String>) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(message) => {
                self.error(keys, message);
                None
            }
        }
    }

    /// Records an unknown key at `keys` (its last element), suggesting the closest of `known`.
    /// `place` says where it was found (`in mcp server `docs``), empty at the top level.
    pub(crate) fn unknown_key(&mut self, keys: &[&str], place: &str, known: &[&str]) {
        let key = keys.last().copied().unwrap_or_default();
        let suggestion = did_you_mean(key, known.iter().copied());
        let message = if suggestion.is_empty() {
            format!(
                "unknown key `{key}`{place} (known keys: {})",
                known.join(", ")
            )
        } else {
            format!("unknown key `{key}`{place}{suggestion}")
        };
        self.error(keys, message);
    }
}

/// A string value.
pub(crate) fn string(key: &str, pod: &Pod) -> Result<String, String> {
    match pod {
        Pod::String(text) => Ok(text.clone()),
        other => Err(format!("`{key}` must be a string, got {}", describe(other))),
    }
}

/// `true` or `false`.
pub(crate) fn boolean(key: &str, pod: &Pod) -> Result<bool, String> {
    match pod {
        Pod::Boolean(flag) => Ok(*flag),
        other => Err(format!(
            "`{key}` must be true or false, got {}",
            describe(other)
        )),
    }
}

/// A string, or an integer or boolean taken as its text (`8080`, `true`); for command
/// arguments, environment variables and headers.
pub(crate) fn scalar_string(key: &str, pod: &Pod) -> Result<String, String> {
    match pod {
        Pod::String(text) => Ok(text.clone()),
        Pod::Integer(number) => Ok(number.to_string()),
        Pod::Boolean(flag) => Ok(flag.to_string()),
        other => Err(format!(
            "`{key}` must be a string, got {} (quote it)",
            describe(other)
        )),
    }
}

/// A list of names (`[a, b]`) without duplicates.
pub(crate) fn name_list(key: &str, pod: &Pod) -> Result<Vec<String>, String> {
    let Pod::Array(items) = pod else {
        return Err(format!(
            "`{key}` must be a list of names like `{key}: [a, b]`, got {}",
            describe(pod)
        ));
    };
    let mut names: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        let Pod::String(name) = item else {
            return Err(format!(
                "`{key}` must be a list of names, got {} in it",
                describe(item)
            ));
        };
        if names.contains(name) {
            return Err(format!("`{key}` lists `{name}` twice: remove one"));
        }
        names.push(name.clone());
    }
    Ok(names)
}

/// A list of strings (integers and booleans taken as their text).
pub(crate) fn string_list(key: &str, pod: &Pod) -> Result<Vec<String>, String> {
    let Pod::Array(items) = pod else {
        return Err(format!(
            "`{key}` must be a list of strings, got {}",
            describe(pod)
        ));
    };
    items.iter().map(|item| scalar_string(key, item)).collect()
}

/// A mapping of names to strings (integers and booleans taken as their text).
pub(crate) fn string_map(key: &str, pod: &Pod) -> Result<BTreeMap<String, String>, String> {
    let Pod::Hash(map) = pod else {
        return Err(format!(
            "`{key}` must be a mapping of names to strings, got {}",
            describe(pod)
        ));
    };
    map.iter()
        .map(|(name, value)| {
            Ok((
                name.clone(),
                scalar_string(&format!("{key}.{name}"), value)?,
            ))
        })
        .collect()
}

/// A mapping's entries sorted by key, or an error naming what the mapping should hold.
pub(crate) fn mapping<'p>(
    key: &str,
    pod: &'p Pod,
    expected: &str,
) -> Result<Vec<(&'p String, &'p Pod)>, String> {
    let Pod::Hash(map) = pod else {
        return Err(format!("`{key}` must be {expected}, got {}", describe(pod)));
    };
    let mut entries: Vec<(&String, &Pod)> = map.iter().collect();
    entries.sort_by_key(|(name, _)| *name);
    Ok(entries)
}

/// A positive, finite number of US dollars (a whole or decimal number).
pub(crate) fn positive_usd(key: &str, pod: &Pod) -> Result<f64, String> {
    #[allow(
        clippy::cast_precision_loss,
        reason = "a dollar amount beyond 2^53 is not a budget anyone means"
    )]
    let number = match pod {
        Pod::Integer(number) => Some(*number as f64),
        Pod::Float(number) => Some(*number),
        _ => None,
    };
    match number {
        Some(number) if number.is_finite() && number > 0.0 => Ok(number),
        _ => Err(format!(
            "`{key}` must be a positive number of US dollars (e.g. 0.50), got {}",
            describe(pod)
        )),
    }
}

/// A whole number of at least 1 that fits in a `u32`.
pub(crate) fn positive_u32(key: &str, pod: &Pod) -> Result<u32, String> {
    match pod {
        Pod::Integer(number) if *number >= 1 => u32::try_from(*number)
            .map_err(|_| format!("`{key}` is too large: at most {}", u32::MAX)),
        other => Err(format!(
            "`{key}` must be a whole number of at least 1, got {}",
            describe(other)
        )),
    }
}

/// A whole number of at least `min` (0 or 1).
pub(crate) fn u64_at_least(key: &str, pod: &Pod, min: u64) -> Result<u64, String> {
    match pod {
        Pod::Integer(number) => match u64::try_from(*number) {
            Ok(number) if number >= min => Ok(number),
            _ => Err(format!(
                "`{key}` must be a whole number of at least {min}, got {number}"
            )),
        },
        other => Err(format!(
            "`{key}` must be a whole number of at least {min}, got {}",
            describe(other)
        )),
    }
}

/// A model specifier `<provider>/<model>`, both parts non-empty.
pub(crate) fn model(key: &str, pod: &Pod) -> Result<String, String> {
    let spec = string(key, pod)?;
    model_spec(&spec)?;
    Ok(spec)
}

/// Checks a model specifier `<provider>/<model>`.
pub(crate) fn model_spec(spec: &str) -> Result<(), String> {
    match flue_core::model::ModelSpec::parse(spec) {
        Ok(_) => Ok(()),
        Err(_) => Err(format!(
            "invalid model `{spec}`: expected `<provider>/<model>`, e.g. `anthropic/claude-sonnet-4-6`"
        )),
    }
}

/// One of a fixed set of words (`what` names the setting in messages).
pub(crate) fn one_of<T: Copy>(
    key: &str,
    pod: &Pod,
    what: &str,
    choices: &[(&str, T)],
) -> Result<T, String> {
    let word = string(key, pod)?;
    one_of_str(&word, what, choices)
}

/// One of a fixed set of words (`what` names the setting in messages).
pub(crate) fn one_of_str<T: Copy>(
    word: &str,
    what: &str,
    choices: &[(&str, T)],
) -> Result<T, String> {
    if let Some((_, value)) = choices.iter().find(|(name, _)| *name == word) {
        return Ok(*value);
    }
    let names: Vec<&str> = choices.iter().map(|(name, _)| *name).collect();
    Err(format!(
        "invalid {what} `{word}`: expected one of {}{}",
        names.join(", "),
        did_you_mean(word, names.iter().copied())
    ))
}

/// The thinking levels by name, for [`one_of`].
pub(crate) fn thinking_levels() -> Vec<(&'static str, flue_core::ThinkingLevel)> {
    flue_core::ThinkingLevel::ALL
        .into_iter()
        .map(|level| (level.as_str(), level))
        .collect()
}
