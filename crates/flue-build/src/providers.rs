//! `[providers.<id>]` in flue.toml: model providers declared by the workspace.
//!
//! A table either adjusts a built-in provider (`anthropic`, `openai`, `openrouter`, ...: a new
//! base URL, key variable, headers or models; an OpenAI-compatible one may switch between
//! `openai-completions` and `openai-responses`) or declares a new one, which then needs `api`
//! and `base_url`. Keys are never written here: `api_key_env` names the environment variable
//! that holds the key, and the CLI reads it.
//!
//! ```toml
//! [providers.local]
//! api = "openai-completions"            # or "openai-responses", "anthropic-messages",
//!                                        # "google-generative-ai"
//! base_url = "http://127.0.0.1:8080/v1"
//! api_key_env = "LOCAL_API_KEY"         # omit for a keyless server
//! headers = { "x-team" = "docs" }
//! connect_timeout_ms = 30000            # these five: the defaults
//! first_byte_timeout_ms = 30000         # until the response headers
//! idle_timeout_ms = 300000              # the longest silence of the stream
//! turn_timeout_ms = 3600000             # the longest one turn may stream
//! max_turn_bytes = 33554432             # text + thinking + tool input of one turn
//!
//! [providers.local.models.qwen3-coder]
//! context_window = 262144
//! max_output_tokens = 65536
//! reasoning = false
//! image_input = false
//! cost = { input = 0.2, output = 0.8 }  # US dollars per million tokens
//! ```

use std::collections::BTreeMap;
use std::ops::Range;

use std::time::Duration;

use flue_core::model::{ModelInfo, ModelPrice};
use flue_providers::{BuiltinProvider, MaxTokensField, ProviderConfig, ReasoningParam, WireApi};
use serde::Deserialize;
use toml::Spanned;

use crate::diagnostic::Diagnostic;
use crate::toml_span::{PATH, line_of};

/// The longest timeout accepted (a day), in milliseconds.
const MAX_TIMEOUT_MS: u64 = 86_400_000;

/// The largest turn accepted (1 GiB).
const MAX_TURN_BYTES: u64 = 1024 * 1024 * 1024;

/// The provider id the CLI keeps for scripted models.
const RESERVED_IDS: &[&str] = &["scripted"];

/// One `[providers.<id>]` table, checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProviderSettings {
    /// The provider id (the table name).
    pub id: String,
    /// `api`; `None` keeps a built-in provider's.
    pub api: Option<WireApi>,
    /// `base_url`; `None` keeps a built-in provider's.
    pub base_url: Option<String>,
    /// `api_key_env`: the variable holding the key; `None` keeps a built-in provider's and
    /// makes a new provider keyless.
    pub api_key_env: Option<String>,
    /// `headers`: sent with every request.
    pub headers: BTreeMap<String, String>,
    /// `[providers.<id>.models.<model>]`.
    pub models: BTreeMap<String, ModelSettings>,
    /// `connect_timeout_ms`; `None` keeps the default.
    pub connect_timeout_ms: Option<u64>,
    /// `first_byte_timeout_ms`; `None` keeps the default.
    pub first_byte_timeout_ms: Option<u64>,
    /// `idle_timeout_ms`; `None` keeps the default.
    pub idle_timeout_ms: Option<u64>,
    /// `turn_timeout_ms`; `None` keeps the default.
    pub turn_timeout_ms: Option<u64>,
    /// `max_turn_bytes`; `None` keeps the default.
    pub max_turn_bytes: Option<u64>,
    /// `max_tokens_field` (Chat Completions): the output-limit field; `None` keeps the
    /// provider's.
    pub max_tokens_field: Option<MaxTokensField>,
    /// `stream_options` (Chat Completions): whether to send `stream_options.include_usage`;
    /// `None` keeps the provider's.
    pub stream_options: Option<bool>,
    /// `reasoning_effort` (Chat Completions): how a thinking level is sent; `None` keeps the
    /// provider's.
    pub reasoning_effort: Option<ReasoningParam>,
    /// `reasoning_content_back` (Chat Completions): whether tool-call turns send their
    /// reasoning back as `reasoning_content`; `None` keeps the provider's.
    pub reasoning_content_back: Option<bool>,
}

/// One `[providers.<id>.models.<model>]` table; unset values come from the built-in catalog
/// when the model is in it, else from [`ModelInfo::default`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelSettings {
    /// `context_window` in tokens.
    pub context_window: Option<u64>,
    /// `max_output_tokens` per turn.
    pub max_output_tokens: Option<u64>,
    /// `reasoning`: whether thinking levels apply.
    pub reasoning: Option<bool>,
    /// `image_input`: whether images are sent.
    pub image_input: Option<bool>,
    /// `cost`: US dollars per million tokens (unset parts are 0).
    pub cost: Option<ModelPrice>,
}

// Costs are checked to be finite when read, so equality is total.
impl Eq for ModelSettings {}

impl ProviderSettings {
    /// The provider configuration: the built-in one adjusted by these settings, or a new one.
    /// The key itself is not part of it; the caller resolves `api_key_env`.
    pub fn to_config(&self) -> ProviderConfig {
        let mut config = match BuiltinProvider::find(&self.id) {
            Some(builtin) => builtin.config(),
            None => ProviderConfig::new(
                &self.id,
                self.api.unwrap_or(WireApi::OpenAiCompletions),
                self.base_url.clone().unwrap_or_default(),
            ),
        };
        if let Some(api) = self.api {
            config.api = api;
        }
        if let Some(base_url) = &self.base_url {
            config.base_url.clone_from(base_url);
        }
        if let Some(env) = &self.api_key_env {
            config.api_key_env = Some(env.clone());
        }
        config
            .headers
            .extend(self.headers.iter().map(|(k, v)| (k.clone(), v.clone())));
        for (model, settings) in &self.models {
            let (base, _) = config.lookup_model(model);
            config.models.insert(model.clone(), settings.apply(&base));
        }
        let mut limits = config.limits;
        if let Some(ms) = self.connect_timeout_ms {
            limits = limits.with_connect_timeout(Duration::from_millis(ms));
        }
        if let Some(ms) = self.first_byte_timeout_ms {
            limits = limits.with_first_byte_timeout(Duration::from_millis(ms));
        }
        if let Some(ms) = self.idle_timeout_ms {
            limits = limits.with_idle_timeout(Duration::from_millis(ms));
        }
        if let Some(ms) = self.turn_timeout_ms {
            limits = limits.with_turn_timeout(Duration::from_millis(ms));
        }
        if let Some(bytes) = self.max_turn_bytes {
            limits = limits.with_max_turn_bytes(usize::try_from(bytes).unwrap_or(usize::MAX));
        }
        let compat = &mut config.openai_compat;
        if let Some(field) = self.max_tokens_field {
            compat.max_tokens_field = field;
        }
        if let Some(send) = self.stream_options {
            compat.no_stream_options = !send;
        }
        if let Some(reasoning) = self.reasoning_effort {
            compat.reasoning = reasoning;
        }
        if let Some(back) = self.reasoning_content_back {
            compat.reasoning_content_back = back;
        }
        config.with_limits(limits)
    }
}

impl ModelSettings {
    /// `base` with the values set here.
    pub fn apply(&self, base: &ModelInfo) -> ModelInfo {
        ModelInfo {
            context_window: self.context_window.unwrap_or(base.context_window),
            max_output_tokens: self.max_output_tokens.unwrap_or(base.max_output_tokens),
            reasoning: self.reasoning.unwrap_or(base.reasoning),
            image_input: self.image_input.unwrap_or(base.image_input),
            price: self.cost.or(base.price),
        }
    }
}

/// `[providers.<id>]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawProvider {
    api: Option<Spanned<String>>,
    base_url: Option<Spanned<String>>,
    api_key_env: Option<Spanned<String>>,
    #[serde(default)]
    headers: BTreeMap<Spanned<String>, Spanned<String>>,
    #[serde(default)]
    models: BTreeMap<String, Spanned<RawModel>>,
    connect_timeout_ms: Option<Spanned<i64>>,
    first_byte_timeout_ms: Option<Spanned<i64>>,
    idle_timeout_ms: Option<Spanned<i64>>,
    turn_timeout_ms: Option<Spanned<i64>>,
    max_turn_bytes: Option<Spanned<i64>>,
    max_tokens_field: Option<Spanned<String>>,
    stream_options: Option<bool>,
    reasoning_effort: Option<Spanned<String>>,
    reasoning_content_back: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModel {
    context_window: Option<Spanned<i64>>,
    max_output_tokens: Option<Spanned<i64>>,
    reasoning: Option<bool>,
    image_input: Option<bool>,
    cost: Option<Spanned<RawCost>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCost {
    input: Option<f64>,
    output: Option<f64>,
    cache_read: Option<f64>,
    cache_write: Option<f64>,
}

/// Checks every provider table, reporting each problem at its line; tables with problems are
/// left out.
pub(crate) fn check(
    text: &str,
    raw: BTreeMap<Spanned<String>, Spanned<RawProvider>>,
    diagnostics: &mut Vec<Diagnostic>,
) -> BTreeMap<String, ProviderSettings> {
    let mut providers = BTreeMap::new();
    for (id, table) in raw {
        let n_before = diagnostics.len();
        let mut report = |span: &Range<usize>, message: String| {
            diagnostics.push(Diagnostic::at(PATH, line_of(text, span), message));
        };
        let table_span = id.span();
        let id = id.into_inner();
        let settings = provider(&id, &table_span, table.into_inner(), &mut report);
        if diagnostics.len() == n_before {
            providers.insert(id, settings);
        }
    }
    providers
}

fn provider(
    id: &str,
    span: &Range<usize>,
    raw: RawProvider,
    report: &mut impl FnMut(&Range<usize>, String),
) -> ProviderSettings {
    let mut settings = ProviderSettings {
        id: id.to_owned(),
        ..ProviderSettings::default()
    };
    let builtin = BuiltinProvider::find(id);
    if let Err(message) = check_id(id) {
        report(span, message);
    }
    if let Some(api) = raw.api {
        match api.get_ref().parse::<WireApi>() {
            Ok(parsed) => match builtin {
                Some(builtin) if !builtin.api.can_switch_to(parsed) => report(
                    &api.span(),
                    format!(
                        "the built-in provider `{id}` speaks {}; to use {parsed}, declare a \
                         provider with another name",
                        builtin.api
                    ),
                ),
                _ => settings.api = Some(parsed),
            },
            Err(_) => report(
                &api.span(),
                format!(
                    "unknown api {:?}: expected \"openai-completions\", \"openai-responses\", \
                     \"anthropic-messages\" or \"google-generative-ai\"",
                    api.get_ref()
                ),
            ),
        }
    }
    if let Some(base_url) = raw.base_url {
        let url = base_url.get_ref().trim();
        if url.starts_with("http://") || url.starts_with("https://") {
            settings.base_url = Some(url.to_owned());
        } else {
            report(
                &base_url.span(),
                format!(
                    "base_url {:?} must be an http:// or https:// URL, such as \
                     \"http://127.0.0.1:8080/v1\"",
                    flue_core::util::hide_url_credentials(base_url.get_ref())
                ),
            );
        }
    }
    if builtin.is_none() && (settings.api.is_none() || settings.base_url.is_none()) {
        let missing: Vec<&str> = [
            settings.api.is_none().then_some("`api`"),
            settings.base_url.is_none().then_some("`base_url`"),
        ]
        .into_iter()
        .flatten()
        .collect();
        report(
            span,
            format!(
                "provider `{id}` is not built in, so it needs {} (api = \"openai-completions\", \
                 \"openai-responses\", \"anthropic-messages\" or \"google-generative-ai\"; built-in \
                 providers: {})",
                missing.join(" and "),
                builtin_ids()
            ),
        );
    }
    if let Some(env) = raw.api_key_env {
        if is_env_name(env.get_ref()) {
            settings.api_key_env = Some(env.into_inner());
        } else {
            // The value may be a pasted key: never quote it.
            report(
                &env.span(),
                "api_key_env must name the environment variable that holds the key (letters, \
                 digits and `_`, such as LOCAL_API_KEY), not the key itself"
                    .to_owned(),
            );
        }
    }
    for (name, value) in raw.headers {
        if !is_header_name(name.get_ref()) {
            report(
                &name.span(),
                format!("{:?} is not a valid HTTP header name", name.get_ref()),
            );
        } else if value.get_ref().chars().any(char::is_control) {
            report(
                &value.span(),
                format!(
                    "the value of header {:?} contains control characters",
                    name.get_ref()
                ),
            );
        } else {
            settings
                .headers
                .insert(name.into_inner(), value.into_inner());
        }
    }
    let mut bounded = |key: &str, value: Option<Spanned<i64>>, max: u64, unit: &str| {
        let value = value?;
        match u64::try_from(*value.get_ref()) {
            Ok(number) if (1..=max).contains(&number) => Some(number),
            _ => {
                report(
                    &value.span(),
                    format!(
                        "{key} must be a whole number of {unit} from 1 to {max}, got {}",
                        value.get_ref()
                    ),
                );
                None
            }
        }
    };
    settings.connect_timeout_ms = bounded(
        "connect_timeout_ms",
        raw.connect_timeout_ms,
        MAX_TIMEOUT_MS,
        "milliseconds",
    );
    settings.first_byte_timeout_ms = bounded(
        "first_byte_timeout_ms",
        raw.first_byte_timeout_ms,
        MAX_TIMEOUT_MS,
        "milliseconds",
    );
    settings.idle_timeout_ms = bounded(
        "idle_timeout_ms",
        raw.idle_timeout_ms,
        MAX_TIMEOUT_MS,
        "milliseconds",
    );
    settings.turn_timeout_ms = bounded(
        "turn_timeout_ms",
        raw.turn_timeout_ms,
        MAX_TIMEOUT_MS,
        "milliseconds",
    );
    settings.max_turn_bytes = bounded(
        "max_turn_bytes",
        raw.max_turn_bytes,
        MAX_TURN_BYTES,
        "bytes",
    );
    if let Some(field) = raw.max_tokens_field {
        match field.get_ref().as_str() {
            "max_tokens" => settings.max_tokens_field = Some(MaxTokensField::MaxTokens),
            "max_completion_tokens" => {
                settings.max_tokens_field = Some(MaxTokensField::MaxCompletionTokens);
            }
            other => report(
                &field.span(),
                format!(
                    "max_tokens_field {other:?} is not known: expected \"max_completion_tokens\" \
                     or \"max_tokens\""
                ),
            ),
        }
    }
    settings.stream_options = raw.stream_options;
    settings.reasoning_content_back = raw.reasoning_content_back;
    if let Some(spelling) = raw.reasoning_effort {
        match spelling.get_ref().as_str() {
            "reasoning_effort" => settings.reasoning_effort = Some(ReasoningParam::Effort),
            "reasoning" => settings.reasoning_effort = Some(ReasoningParam::OpenRouter),
            "none" => settings.reasoning_effort = Some(ReasoningParam::Unsupported),
            other => report(
                &spelling.span(),
                format!(
                    "reasoning_effort {other:?} is not known: expected \"reasoning_effort\" \
                     (`reasoning_effort: \"high\"`), \"reasoning\" (`reasoning: {{effort: \
                     \"high\"}}`) or \"none\" (not sent)"
                ),
            ),
        }
    }
    for (model_id, model) in raw.models {
        let model_span = model.span();
        if let Some(model) = model_settings(&model_id, &model_span, model.into_inner(), report) {
            settings.models.insert(model_id, model);
        }
    }
    settings
}

fn model_settings(
    model_id: &str,
    span: &Range<usize>,
    raw: RawModel,
    report: &mut impl FnMut(&Range<usize>, String),
) -> Option<ModelSettings> {
    let mut valid = true;
    let mut tokens = |key: &str, value: Option<Spanned<i64>>| {
        let value = value?;
        match u64::try_from(*value.get_ref()) {
            Ok(tokens) if tokens > 0 => Some(tokens),
            _ => {
                report(
                    &value.span(),
                    format!(
                        "{key} of model `{model_id}` must be a positive number of tokens, got {}",
                        value.get_ref()
                    ),
                );
                valid = false;
                None
            }
        }
    };
    let context_window = tokens("context_window", raw.context_window);
    let max_output_tokens = tokens("max_output_tokens", raw.max_output_tokens);
    if let (Some(context), Some(output)) = (context_window, max_output_tokens)
        && output > context
    {
        report(
            span,
            format!(
                "model `{model_id}`: max_output_tokens ({output}) exceeds context_window \
                 ({context})"
            ),
        );
        valid = false;
    }
    let cost = raw.cost.and_then(|cost| {
        let cost_span = cost.span();
        let cost = cost.into_inner();
        let parts = [cost.input, cost.output, cost.cache_read, cost.cache_write];
        if parts
            .iter()
            .flatten()
            .all(|price| price.is_finite() && *price >= 0.0)
        {
            Some(ModelPrice {
                input: cost.input.unwrap_or(0.0),
                output: cost.output.unwrap_or(0.0),
                cache_read: cost.cache_read.unwrap_or(0.0),
                cache_write: cost.cache_write.unwrap_or(0.0),
            })
        } else {
            report(
                &cost_span,
                format!(
                    "cost of model `{model_id}` must be US dollars per million tokens, zero or \
                     more"
                ),
            );
            valid = false;
            None
        }
    });
    valid.then_some(ModelSettings {
        context_window,
        max_output_tokens,
        reasoning: raw.reasoning,
        image_input: raw.image_input,
        cost,
    })
}

fn check_id(id: &str) -> Result<(), String> {
    if RESERVED_IDS.contains(&id) {
        return Err(format!(
            "provider id `{id}` is reserved for scripted models; choose another name"
        ));
    }
    let valid = !id.is_empty()
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid {
        Ok(())
    } else {
        Err(format!(
            "provider id {id:?} may use only letters, digits, `-`, `_` and `.` (it is the part \
             of `<provider>/<model>` before the `/`)"
        ))
    }
}

fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// An RFC 9110 token.
fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c))
}

fn builtin_ids() -> String {
    BuiltinProvider::ALL
        .iter()
        .map(|builtin| builtin.id)
        .collect::<Vec<_>>()
        .join(", ")
}
