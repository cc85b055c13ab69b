//! Configuration of a remote model provider: where it is, how to authenticate, which models it
//! serves, how to retry.
//!
//! Providers never read the environment, so a [`ProviderConfig`] carries the key itself; the
//! CLI (or an embedding program) resolves it. When a key is expected but absent, the config
//! still names the variable it should come from, and the provider refuses to run with
//! [`FlueError::MissingApiKey`] before any request.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use flue_core::model::ModelInfo;
use flue_core::{FlueError, Result};

/// The wire protocol a remote provider speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WireApi {
    /// OpenAI Chat Completions (`POST {base_url}/chat/completions`), also spoken by most
    /// OpenAI-compatible servers.
    OpenAiCompletions,
    /// Anthropic Messages (`POST {base_url}/v1/messages`).
    AnthropicMessages,
    /// The OpenAI Responses API (`POST {base_url}/responses`), used statelessly.
    OpenAiResponses,
    /// Google's Gemini API (`POST {base_url}/models/{model}:streamGenerateContent`).
    GoogleGenerativeAi,
}

impl WireApi {
    /// Every wire API.
    pub const ALL: [Self; 4] = [
        Self::OpenAiCompletions,
        Self::OpenAiResponses,
        Self::AnthropicMessages,
        Self::GoogleGenerativeAi,
    ];

    /// The name used in flue.toml (`openai-completions`, `openai-responses`,
    /// `anthropic-messages`, `google-generative-ai`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OpenAiCompletions => "openai-completions",
            Self::OpenAiResponses => "openai-responses",
            Self::AnthropicMessages => "anthropic-messages",
            Self::GoogleGenerativeAi => "google-generative-ai",
        }
    }

    /// Whether a provider speaking `self` may be switched to `other`: the two OpenAI APIs
    /// share endpoints, keys and models; Anthropic's and Google's do not.
    pub fn can_switch_to(self, other: Self) -> bool {
        let openai = |api| matches!(api, Self::OpenAiCompletions | Self::OpenAiResponses);
        self == other || (openai(self) && openai(other))
    }
}

impl fmt::Display for WireApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for WireApi {
    type Err = FlueError;

    fn from_str(text: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|api| api.as_str() == text)
            .ok_or_else(|| {
                FlueError::config(format!(
                    "unknown api {text:?}: expected \"openai-completions\", \"openai-responses\", \
                     \"anthropic-messages\" or \"google-generative-ai\""
                ))
            })
    }
}

/// An API key. It prints as `[redacted]` (Debug and Display alike), so a key cannot reach a log,
/// an event or an error message by formatting.
///
/// ```
/// let key = flue_providers::ApiKey::new("sk-secret");
/// assert_eq!(format!("{key} {key:?}"), "[redacted] ApiKey([redacted])");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(Arc<str>);

impl ApiKey {
    /// Wraps a key.
    pub fn new(key: impl Into<String>) -> Self {
        Self(Arc::from(key.into()))
    }

    /// The key itself, for the request header only.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey([redacted])")
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// How transient failures (HTTP 408, 429, 5xx, overload, network errors) are retried before a
/// turn fails: exponential backoff from `base_delay`, capped at `max_delay`, with jitter; a
/// `retry-after` the provider sends replaces the computed delay, unless it asks for more than
/// `max_retry_after` (then the error is returned at once with its `retry_after_ms`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Consecutive retries after the first attempt (default 3).
    pub max_retries: u32,
    /// Delay before the first retry (default 500 ms); doubles each time.
    pub base_delay: Duration,
    /// Longest computed delay (default 8 s).
    pub max_delay: Duration,
    /// Longest `retry-after` honoured by waiting (default 60 s).
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 3,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

/// Limits on one model call's HTTP exchange: how long connecting, the first answer, each
/// silence of the stream and the whole turn may take, and how much one turn may hold. A
/// connect, first-byte or idle timeout is a retryable `provider_error` (retried under the
/// [`RetryPolicy`] while nothing of the turn was shown); a turn over
/// [`StreamLimits::turn_timeout`] or [`StreamLimits::max_turn_bytes`] is a `provider_error`
/// that is not retried. Either way nothing of the turn is stored.
///
/// ```
/// use std::time::Duration;
/// let limits = flue_providers::StreamLimits::default().with_idle_timeout(Duration::from_secs(60));
/// assert_eq!(limits.idle_timeout, Duration::from_secs(60));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamLimits {
    /// Establishing the connection (TCP, and TLS for `https`) (default 30 s).
    pub connect_timeout: Duration,
    /// From sending the request to the response's status and headers (default 30 s). With the
    /// default three retries, a provider that accepts the connection and never answers is
    /// given up on after about two minutes in all (4 attempts of 30 s, plus the backoff).
    pub first_byte_timeout: Duration,
    /// The longest silence of the response body, before its first bytes and between any two
    /// reads (default 300 s: reasoning models can think for minutes before their first token;
    /// providers that send keep-alives never get near it).
    pub idle_timeout: Duration,
    /// The longest one attempt at a turn may stream, from sending the request to its last
    /// event (default 60 min); bounds a server that keeps the stream alive without ever
    /// finishing.
    pub turn_timeout: Duration,
    /// Bytes of text, thinking and tool-call input of one turn (default 32 MiB).
    pub max_turn_bytes: usize,
}

impl Default for StreamLimits {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(30),
            first_byte_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(300),
            turn_timeout: Duration::from_secs(3600),
            max_turn_bytes: 32 * 1024 * 1024,
        }
    }
}

impl StreamLimits {
    /// Sets [`StreamLimits::connect_timeout`].
    #[must_use]
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets [`StreamLimits::first_byte_timeout`].
    #[must_use]
    pub fn with_first_byte_timeout(mut self, timeout: Duration) -> Self {
        self.first_byte_timeout = timeout;
        self
    }

    /// Sets [`StreamLimits::idle_timeout`].
    #[must_use]
    pub fn with_idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// Sets [`StreamLimits::turn_timeout`].
    #[must_use]
    pub fn with_turn_timeout(mut self, timeout: Duration) -> Self {
        self.turn_timeout = timeout;
        self
    }

    /// Sets [`StreamLimits::max_turn_bytes`].
    #[must_use]
    pub fn with_max_turn_bytes(mut self, bytes: usize) -> Self {
        self.max_turn_bytes = bytes;
        self
    }
}

/// Which request field carries the output token limit (OpenAI Chat Completions dialects).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum MaxTokensField {
    /// `max_completion_tokens`, OpenAI's current name.
    #[default]
    MaxCompletionTokens,
    /// `max_tokens`, the older name many compatible servers expect.
    MaxTokens,
}

/// How a reasoning effort is requested (OpenAI Chat Completions dialects).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReasoningParam {
    /// `reasoning_effort: "low" | "medium" | ...` (OpenAI).
    #[default]
    Effort,
    /// `reasoning: {"effort": ...}` (OpenRouter).
    OpenRouter,
    /// Never sent: the server decides.
    Unsupported,
}

/// Differences between OpenAI-compatible servers, for [`WireApi::OpenAiCompletions`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OpenAiCompat {
    /// The output-limit field.
    pub max_tokens_field: MaxTokensField,
    /// How reasoning effort is sent.
    pub reasoning: ReasoningParam,
    /// Whether to send `stream_options.include_usage` (servers that reject unknown fields
    /// report usage in their last chunk anyway).
    pub no_stream_options: bool,
    /// Whether the reasoning of an assistant turn that called tools goes back to the model
    /// as that message's `reasoning_content` in every later request (DeepSeek's thinking
    /// mode requires it; turns without tool calls never send it back).
    pub reasoning_content_back: bool,
}

impl OpenAiCompat {
    /// Uses `field` for the output limit.
    #[must_use]
    pub fn with_max_tokens_field(mut self, field: MaxTokensField) -> Self {
        self.max_tokens_field = field;
        self
    }

    /// Sends reasoning effort as `reasoning`.
    #[must_use]
    pub fn with_reasoning(mut self, reasoning: ReasoningParam) -> Self {
        self.reasoning = reasoning;
        self
    }

    /// Sends the reasoning of tool-call turns back as `reasoning_content`.
    #[must_use]
    pub fn with_reasoning_content_back(mut self) -> Self {
        self.reasoning_content_back = true;
        self
    }

    /// Leaves `stream_options` out of requests.
    #[must_use]
    pub fn without_stream_options(mut self) -> Self {
        self.no_stream_options = true;
        self
    }
}

/// How a model takes a thinking level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Thinking {
    /// It does not reason; thinking levels are dropped.
    None,
    /// Anthropic `thinking: {type: "enabled", budget_tokens}`.
    Budget,
    /// Anthropic `thinking: {type: "adaptive"}` with `output_config.effort`; `xhigh` when the
    /// model has that effort.
    Adaptive {
        /// The model accepts effort `xhigh`.
        xhigh: bool,
    },
    /// OpenAI `reasoning_effort`: `low`, `medium`, `high` always, plus the optional levels.
    Effort {
        /// `off` is sent as `none` (otherwise the model reasons at its default).
        none: bool,
        /// `minimal` exists (otherwise `low`).
        minimal: bool,
        /// `xhigh` exists (otherwise `high`).
        xhigh: bool,
    },
    /// Gemini 2.5 `thinkingConfig.thinkingBudget`, up to `max` tokens; `off` sends a budget of
    /// 0 when `can_disable` (otherwise the model thinks at its default).
    GeminiBudget {
        /// The largest budget the model takes.
        max: u64,
        /// A budget of 0 turns thinking off.
        can_disable: bool,
    },
    /// Gemini 3 `thinkingConfig.thinkingLevel` (`low`, `high`); it cannot be turned off.
    GeminiLevel,
}

/// A remote provider: id, wire API, endpoint, credentials, models. Builder-lite: start from
/// [`ProviderConfig::new`] or a built-in ([`ProviderConfig::builtin`]), then call
/// [`ProviderConfig::build`].
///
/// ```
/// use flue_core::model::ModelInfo;
/// use flue_providers::{ApiKey, ProviderConfig, WireApi};
/// let provider = ProviderConfig::new("local", WireApi::OpenAiCompletions, "http://127.0.0.1:8080/v1")
///     .with_api_key(ApiKey::new("secret"))
///     .with_header("x-team", "docs")
///     .with_model("my-model", ModelInfo { context_window: 32_000, ..ModelInfo::default() })
///     .build()
///     .unwrap();
/// assert_eq!(provider.id(), "local");
/// assert_eq!(provider.model_info("my-model").context_window, 32_000);
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ProviderConfig {
    /// Provider id: the part of model specifiers before the `/`.
    pub id: String,
    /// Wire protocol.
    pub api: WireApi,
    /// Base URL: for OpenAI-compatible servers up to and including the version
    /// (`https://api.openai.com/v1`), for Anthropic the host (`https://api.anthropic.com`).
    pub base_url: String,
    /// The key sent with every request, when there is one.
    pub api_key: Option<ApiKey>,
    /// The environment variable the key comes from. When set and `api_key` is `None`, the
    /// provider fails with [`FlueError::MissingApiKey`] naming it, before any request; when
    /// both are `None` the provider is keyless.
    pub api_key_env: Option<String>,
    /// Extra headers sent with every request.
    pub headers: BTreeMap<String, String>,
    /// Models by id, with their limits, capabilities and prices. A model missing here still
    /// works with conservative defaults ([`ModelInfo::default`]).
    pub models: BTreeMap<String, ModelInfo>,
    /// Retries of transient failures.
    pub retry: RetryPolicy,
    /// Timeouts and the size limit of one turn.
    pub limits: StreamLimits,
    /// Dialect details of OpenAI-compatible servers.
    pub openai_compat: OpenAiCompat,
    /// How built-in models take a thinking level, by id (from the catalog).
    pub(crate) thinking: BTreeMap<String, Thinking>,
    /// Models served over [`WireApi::OpenAiResponses`] although `api` is
    /// [`WireApi::OpenAiCompletions`] (from the catalog: models OpenAI serves only there).
    pub(crate) responses_models: BTreeSet<String>,
}

impl ProviderConfig {
    /// A keyless provider with no known models.
    pub fn new(id: impl Into<String>, api: WireApi, base_url: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            api,
            base_url: base_url.into(),
            api_key: None,
            api_key_env: None,
            headers: BTreeMap::new(),
            models: BTreeMap::new(),
            retry: RetryPolicy::default(),
            limits: StreamLimits::default(),
            openai_compat: OpenAiCompat::default(),
            thinking: BTreeMap::new(),
            responses_models: BTreeSet::new(),
        }
    }

    /// Sets the key.
    #[must_use]
    pub fn with_api_key(mut self, key: ApiKey) -> Self {
        self.api_key = Some(key);
        self
    }

    /// Names the variable the key comes from (see [`ProviderConfig::api_key_env`]).
    #[must_use]
    pub fn with_api_key_env(mut self, name: impl Into<String>) -> Self {
        self.api_key_env = Some(name.into());
        self
    }

    /// Sets the base URL.
    #[must_use]
    pub fn with_base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into();
        self
    }

    /// Adds a header sent with every request.
    #[must_use]
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }

    /// Declares (or overrides) a model.
    #[must_use]
    pub fn with_model(mut self, id: impl Into<String>, info: ModelInfo) -> Self {
        self.models.insert(id.into(), info);
        self
    }

    /// Sets the retry policy.
    #[must_use]
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Sets the timeouts and the turn size limit.
    #[must_use]
    pub fn with_limits(mut self, limits: StreamLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Sets the OpenAI-compatible dialect.
    #[must_use]
    pub fn with_openai_compat(mut self, compat: OpenAiCompat) -> Self {
        self.openai_compat = compat;
        self
    }

    /// The model's info and whether the provider knows it (else: conservative defaults).
    /// Dated ids (`claude-sonnet-4-5-20250929`, `gpt-4o-2024-08-06`) and `-latest` fall back
    /// to their undated entry.
    pub fn lookup_model(&self, model: &str) -> (ModelInfo, bool) {
        candidates(model)
            .into_iter()
            .find_map(|id| self.models.get(id))
            .map_or_else(
                || (ModelInfo::default(), false),
                |info| (info.clone(), true),
            )
    }

    /// The wire API `model` is served over: the config's, except for the catalog's models that
    /// OpenAI serves only over the Responses API.
    pub fn wire_api_of(&self, model: &str) -> WireApi {
        let responses_only = candidates(model)
            .into_iter()
            .any(|id| self.responses_models.contains(id));
        match self.api {
            WireApi::OpenAiCompletions if responses_only => WireApi::OpenAiResponses,
            api => api,
        }
    }

    /// Sets the wire API (see [`WireApi`]).
    #[must_use]
    pub fn with_api(mut self, api: WireApi) -> Self {
        self.api = api;
        self
    }

    /// How `model` takes a thinking level, when it is a built-in model.
    pub(crate) fn thinking_of(&self, model: &str) -> Option<Thinking> {
        candidates(model)
            .into_iter()
            .find_map(|id| self.thinking.get(id).copied())
    }
}

/// The ids to try for `model`, most specific first: itself, then without a `-latest`,
/// `-YYYYMMDD` or `-YYYY-MM-DD` suffix.
fn candidates(model: &str) -> Vec<&str> {
    let mut ids = vec![model];
    if let Some(base) = model.strip_suffix("-latest") {
        ids.push(base);
    }
    if let Some((base, date)) = model.rsplit_once('-')
        && date.len() == 8
        && date.bytes().all(|byte| byte.is_ascii_digit())
    {
        ids.push(base);
    }
    let bytes = model.as_bytes();
    if let Some(split) = model.len().checked_sub(11)
        && bytes.get(split) == Some(&b'-')
        && model
            .get(split + 1..)
            .is_some_and(|date| is_iso_date(date.as_bytes()))
        && let Some(base) = model.get(..split)
    {
        ids.push(base);
    }
    ids
}

/// `YYYY-MM-DD`.
fn is_iso_date(date: &[u8]) -> bool {
    date.len() == 10
        && date.iter().enumerate().all(|(idx, byte)| match idx {
            4 | 7 => *byte == b'-',
            _ => byte.is_ascii_digit(),
        })
}

#[cfg(test)]
mod tests;
