//! flue.toml: workspace-wide settings.
//!
//! The file is deserialised into private `Raw*` types that mirror it one-to-one (serde with
//! `deny_unknown_fields`, values kept with their spans), then checked into the public
//! [`WorkspaceConfig`]. A new section (`[providers.*]`, `[store]`, `[server]`) is a field on
//! `RawConfig`, a public type, and one conversion function.

use std::collections::BTreeMap;
use std::ops::Range;

use flue_core::ThinkingLevel;
use serde::Deserialize;
use toml::Spanned;

use crate::diagnostic::Diagnostic;
use crate::fields;
use crate::providers::{self, ProviderSettings, RawProvider};
use crate::suggest::did_you_mean;

/// The workspace path of the settings file.
pub(crate) const PATH: &str = "flue.toml";

/// The keys of `[defaults]`.
const DEFAULTS_KEYS: &[&str] = &["model", "thinking"];

/// Workspace-wide settings from flue.toml; all defaults when there is no file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkspaceConfig {
    /// `[defaults]`: settings for agents that leave them unset.
    pub defaults: Defaults,
    /// `[providers.<id>]`: model providers declared or adjusted by the workspace, by id.
    pub providers: BTreeMap<String, ProviderSettings>,
}

/// `[defaults]` in flue.toml.
///
/// ```toml
/// [defaults]
/// model = "anthropic/claude-sonnet-4-6"
/// thinking = "low"
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Defaults {
    /// Model for agents without `model`, `<provider>/<model>`.
    pub model: Option<String>,
    /// Thinking level for agents without `thinking`.
    pub thinking: Option<ThinkingLevel>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    defaults: RawDefaults,
    #[serde(default)]
    providers: BTreeMap<Spanned<String>, Spanned<RawProvider>>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDefaults {
    model: Option<Spanned<String>>,
    thinking: Option<Spanned<String>>,
}

/// Parses and checks the text of flue.toml, reporting every problem found. Unknown keys and
/// syntax errors stop deserialisation, so only the first of those is reported.
pub(crate) fn parse(text: &str, diagnostics: &mut Vec<Diagnostic>) -> WorkspaceConfig {
    let raw: RawConfig = match toml::from_str(text) {
        Ok(raw) => raw,
        Err(error) => {
            let line = error.span().map_or(1, |span| line_of(text, &span));
            diagnostics.push(Diagnostic::at(PATH, line, toml_message(error.message())));
            return WorkspaceConfig::default();
        }
    };
    WorkspaceConfig {
        defaults: defaults(text, raw.defaults, diagnostics),
        providers: providers::check(text, raw.providers, diagnostics),
    }
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

/// The 1-based line holding the start of `span`.
pub(crate) fn line_of(text: &str, span: &Range<usize>) -> usize {
    let start = span.start.min(text.len());
    text.as_bytes()[..start]
        .iter()
        .filter(|byte| **byte == b'\n')
        .count()
        + 1
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
