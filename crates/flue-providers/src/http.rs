//! HTTP plumbing shared by the remote providers: the endpoint (URL, headers, key, client),
//! retries with backoff and jitter, error classification, and reading an event stream.
//!
//! A turn is one POST whose answer is an event stream. Transient failures — network errors,
//! HTTP 408/409/425/429/5xx, an overload reported inside the stream — are retried up to
//! [`RetryPolicy::max_retries`] times, but only while nothing of the turn has been shown to the
//! caller yet: once a delta went out, a failure ends the turn (the loop then stores nothing).
//!
//! Each endpoint builds its own reqwest client on first use, so a registry of many providers
//! costs nothing until one is called: HTTP/1.1, rustls with the ring provider and (for `https`)
//! the platform's root certificates, and no proxy discovery, because flue-providers does not
//! read the environment.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use flue_core::util::sse::{SseEvent, SseParser};
use flue_core::{
    FlueError, Redactor, Result, Usage,
    error::BoxError,
    model::{ModelTurn, TurnSink},
};
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use crate::provider_config::{ApiKey, ProviderConfig, RetryPolicy, StreamLimits};

/// How much of an error body is read.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// How a provider authenticates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Auth {
    /// `authorization: Bearer <key>` (OpenAI and compatible servers).
    Bearer,
    /// `x-api-key: <key>` (Anthropic).
    XApiKey,
    /// `x-goog-api-key: <key>` (Google Gemini).
    GoogApiKey,
}

/// One provider's endpoint: where to POST, with which headers, and how to retry.
#[derive(Debug)]
pub(crate) struct Endpoint {
    provider: String,
    url: reqwest::Url,
    headers: HeaderMap,
    key: Option<ApiKey>,
    missing_key_env: Option<String>,
    retry: RetryPolicy,
    limits: StreamLimits,
    client: OnceLock<reqwest::Client>,
}

/// A failed attempt, before it becomes a [`FlueError`].
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) message: String,
    pub(crate) status: Option<u16>,
    pub(crate) retryable: bool,
    pub(crate) overflow: bool,
    pub(crate) retry_after: Option<Duration>,
    /// Deltas of this attempt already reached the caller, so it must not be repeated.
    pub(crate) after_output: bool,
    pub(crate) source: Option<BoxError>,
    /// The `[providers.<id>]` setting whose timeout fired, if one did.
    pub(crate) timeout: Option<&'static str>,
    /// The usage the provider reported in this attempt before it failed (`message_start`'s
    /// input tokens, a usage chunk, a failed response's usage), when it reported any. Boxed:
    /// a failure stays small.
    pub(crate) usage: Option<Box<Usage>>,
}

/// A turn being read from an event stream, one wire API's way. [`decode`] drives it.
pub(crate) trait Assembler: Default + Send {
    /// Reads events until the turn ends, sending deltas to `sink`.
    fn read<'a>(
        &'a mut self,
        reader: &'a mut EventReader,
        sink: &'a TurnSink,
    ) -> impl Future<Output = std::result::Result<(), Failure>> + Send + 'a;

    /// Whether deltas already reached the caller (a failure then cannot be retried).
    fn emitted(&self) -> bool;

    /// The usage the provider has reported so far.
    fn usage(&self) -> Usage;

    /// The finished turn.
    fn finish(self) -> ModelTurn;
}

/// Reads a whole turn from the stream with the assembler `A`. A failure carries whether
/// output went out and the usage reported before it.
pub(crate) async fn decode<A: Assembler>(
    mut reader: EventReader,
    sink: &TurnSink,
) -> std::result::Result<ModelTurn, Failure> {
    let mut turn = A::default();
    let result = turn.read(&mut reader, sink).await;
    match result {
        Ok(()) => Ok(turn.finish()),
        Err(failure) => {
            let usage = turn.usage();
            Err(Failure {
                usage: (usage != Usage::default()).then(|| Box::new(usage)),
                ..failure.with_output(turn.emitted())
            })
        }
    }
}

impl Failure {
    /// A failure that retrying will not fix.
    pub(crate) fn fatal(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            status: None,
            retryable: false,
            overflow: false,
            retry_after: None,
            after_output: false,
            source: None,
            timeout: None,
            usage: None,
        }
    }

    /// A timeout of the setting `setting` fired: retryable, and named when the turn gives up.
    pub(crate) fn timed_out(setting: &'static str, message: impl Into<String>) -> Self {
        Self {
            timeout: Some(setting),
            ..Self::transient(message)
        }
    }

    /// A failure that may pass (network trouble, overload).
    pub(crate) fn transient(message: impl Into<String>) -> Self {
        Self {
            retryable: true,
            ..Self::fatal(message)
        }
    }

    /// Marks whether deltas of this attempt reached the caller.
    pub(crate) fn with_output(mut self, after_output: bool) -> Self {
        self.after_output = after_output;
        self
    }

    /// A provider's error report: HTTP status (or `None` inside a stream), its message, and
    /// its type or code (`rate_limit_error`, `context_length_exceeded`, ...).
    pub(crate) fn reported(status: Option<u16>, message: &str, code: &str) -> Self {
        let retryable = match status {
            Some(status) => matches!(status, 408 | 409 | 425 | 429) || (500..600).contains(&status),
            None => matches!(
                code,
                "overloaded_error"
                    | "api_error"
                    | "rate_limit_error"
                    | "server_error"
                    | "rate_limit_exceeded"
                    | "internal_error"
                    | "timeout"
            ),
        };
        // A spent quota is a 429 that waiting will not fix.
        let retryable = retryable && code != "insufficient_quota";
        let message = if message.is_empty() {
            match status {
                Some(status) => format!("the provider answered HTTP {status} without a message"),
                None => "the provider reported an error without a message".to_owned(),
            }
        } else {
            message.to_owned()
        };
        Self {
            overflow: !retryable && is_context_overflow(status, &message, code),
            status,
            retryable,
            ..Self::fatal(message)
        }
    }

    fn into_error(self, provider: &str, key: Option<&ApiKey>) -> FlueError {
        let message = redact(&self.message, key);
        if self.overflow {
            return FlueError::ContextOverflow {
                provider: provider.to_owned(),
                message,
            };
        }
        FlueError::Provider {
            provider: provider.to_owned(),
            message,
            status: self.status,
            retryable: self.retryable,
            retry_after_ms: self
                .retry_after
                .map(|delay| u64::try_from(delay.as_millis()).unwrap_or(u64::MAX)),
            source: self.source,
        }
    }
}

impl Endpoint {
    /// The endpoint `path` under the config's base URL, with the auth, fixed and configured
    /// headers (configured ones win). Fails on a malformed URL or header.
    pub(crate) fn new(
        config: &ProviderConfig,
        path: &str,
        auth: Auth,
        fixed_headers: &[(&str, &str)],
    ) -> Result<Self> {
        let invalid = |message: String| {
            FlueError::config(format!("model provider {:?}: {message}", config.id))
        };
        let base = config.base_url.trim_end_matches('/');
        let shown_base = flue_core::util::hide_url_credentials(&config.base_url);
        let url = reqwest::Url::parse(&format!("{base}{path}")).map_err(|err| {
            invalid(format!(
                "base_url {shown_base:?} is not a valid URL ({err}); use a full URL such as \
                 https://api.example.com/v1"
            ))
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid(format!(
                "base_url {shown_base:?} must start with http:// or https://"
            )));
        }
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(
            reqwest::header::ACCEPT,
            HeaderValue::from_static("text/event-stream"),
        );
        let extra = fixed_headers
            .iter()
            .map(|(name, value)| (*name, *value))
            .chain(
                config
                    .headers
                    .iter()
                    .map(|(name, value)| (name.as_str(), value.as_str())),
            );
        for (name, value) in extra {
            let header_name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| invalid(format!("{name:?} is not a valid HTTP header name")))?;
            let header_value = HeaderValue::from_str(value).map_err(|_| {
                invalid(format!(
                    "the value of header {name:?} is not valid in HTTP (control characters or \
                     non-ASCII text)"
                ))
            })?;
            headers.insert(header_name, header_value);
        }
        if let Some(key) = &config.api_key {
            let (name, value) = match auth {
                Auth::Bearer => (
                    reqwest::header::AUTHORIZATION,
                    format!("Bearer {}", key.expose()),
                ),
                Auth::XApiKey => (
                    HeaderName::from_static("x-api-key"),
                    key.expose().to_owned(),
                ),
                Auth::GoogApiKey => (
                    HeaderName::from_static("x-goog-api-key"),
                    key.expose().to_owned(),
                ),
            };
            let mut value = HeaderValue::from_str(&value).map_err(|_| {
                invalid(
                    "the API key contains characters that cannot be sent in an HTTP header; \
                     check the key"
                        .to_owned(),
                )
            })?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        Ok(Self {
            provider: config.id.clone(),
            url,
            headers,
            key: config.api_key.clone(),
            missing_key_env: config
                .api_key
                .is_none()
                .then(|| config.api_key_env.clone())
                .flatten(),
            retry: config.retry,
            limits: config.limits,
            client: OnceLock::new(),
        })
    }

    /// [`FlueError::MissingApiKey`] when the provider needs a key it does not have.
    pub(crate) fn check_key(&self) -> Result<()> {
        match &self.missing_key_env {
            Some(env_var) => Err(FlueError::MissingApiKey {
                provider: self.provider.clone(),
                env_var: env_var.clone(),
            }),
            None => Ok(()),
        }
    }

    /// The endpoint's URL with one more path segment (escaped as a segment) and `query`:
    /// for APIs that name the model in the path (Gemini).
    pub(crate) fn url_with(&self, segment: &str, query: &str) -> Result<reqwest::Url> {
        let mut url = self.url.clone();
        url.path_segments_mut()
            .map_err(|()| {
                FlueError::config(format!(
                    "model provider {:?}: base URL {} cannot take a path",
                    self.provider, self.url
                ))
            })?
            .push(segment);
        url.set_query(Some(query));
        Ok(url)
    }

    /// POSTs `body` and decodes the answer with `decode`, retrying transient failures (each
    /// retry reported to `sink`). `classify` turns a non-2xx body into a failure. Usage the
    /// provider reported in failed attempts counts: added to the turn's when a retry succeeds,
    /// reported through [`TurnSink::failed_turn_usage`] when the turn fails.
    pub(crate) async fn stream<D, Fut>(
        &self,
        body: Vec<u8>,
        classify: fn(Option<u16>, &str) -> Failure,
        sink: &TurnSink,
        decode: D,
    ) -> Result<ModelTurn>
    where
        D: FnMut(EventReader) -> Fut,
        Fut: Future<Output = std::result::Result<ModelTurn, Failure>>,
    {
        self.stream_to(&self.url, body, classify, sink, decode)
            .await
    }

    /// [`Endpoint::stream`] to `url` instead of the endpoint's own URL.
    pub(crate) async fn stream_to<D, Fut>(
        &self,
        url: &reqwest::Url,
        body: Vec<u8>,
        classify: fn(Option<u16>, &str) -> Failure,
        sink: &TurnSink,
        mut decode: D,
    ) -> Result<ModelTurn>
    where
        D: FnMut(EventReader) -> Fut,
        Fut: Future<Output = std::result::Result<ModelTurn, Failure>>,
    {
        self.check_key()?;
        let client = self
            .client()
            .map_err(|failure| failure.into_error(&self.provider, None))?;
        let mut n_retries = 0;
        let started = tokio::time::Instant::now();
        let mut failed_usage = Usage::default();
        loop {
            let failure = match self.attempt(client, url, &body, classify).await {
                Ok(reader) => match decode(reader).await {
                    Ok(mut turn) => {
                        if failed_usage != Usage::default() {
                            failed_usage += turn.usage;
                            turn.usage = failed_usage;
                        }
                        return Ok(turn);
                    }
                    Err(failure) => failure,
                },
                Err(failure) => failure,
            };
            if let Some(usage) = &failure.usage {
                failed_usage += **usage;
            }
            let delay = match failure.retry_after {
                Some(delay) if delay > self.retry.max_retry_after => None,
                Some(delay) => Some(delay),
                None => Some(backoff(&self.retry, n_retries, jitter())),
            };
            match delay {
                Some(delay)
                    if failure.retryable
                        && !failure.after_output
                        && n_retries < self.retry.max_retries =>
                {
                    n_retries += 1;
                    let cause = redact(&failure.message, self.key.as_ref());
                    // `flue run -v` shows these; embedders see them through their subscriber,
                    // and every event reader through the retry event.
                    tracing::info!(
                        target: "flue::retry",
                        "{}: attempt {} failed ({cause}); retrying in {} ms ({n_retries} of {})",
                        self.provider,
                        n_retries,
                        delay.as_millis(),
                        self.retry.max_retries,
                    );
                    sink.retry(
                        &self.provider,
                        n_retries,
                        self.retry.max_retries,
                        delay,
                        &cause,
                    );
                    tokio::time::sleep(delay).await;
                }
                _ => {
                    if failed_usage != Usage::default() {
                        sink.failed_turn_usage(failed_usage);
                    }
                    let failure = self.explain_timeout(failure, n_retries + 1, started.elapsed());
                    return Err(failure.into_error(&self.provider, self.key.as_ref()));
                }
            }
        }
    }

    /// A final failure whose timeout fired says how long the turn waited in all and which
    /// setting changes it.
    fn explain_timeout(&self, mut failure: Failure, attempts: u32, waited: Duration) -> Failure {
        if let Some(setting) = failure.timeout {
            let tries = if attempts == 1 { "attempt" } else { "attempts" };
            let _ = write!(
                failure.message,
                "; gave up after {attempts} {tries} in {} s. If the provider is only slow, raise                  `{setting}` under [providers.{}] in flue.toml",
                waited.as_secs(),
                self.provider
            );
        }
        failure
    }

    /// The endpoint's client, built on first use.
    fn client(&self) -> std::result::Result<&reqwest::Client, Failure> {
        if let Some(client) = self.client.get() {
            return Ok(client);
        }
        let client = build_client(self.url.scheme() == "https", self.limits.connect_timeout)?;
        Ok(self.client.get_or_init(|| client))
    }

    /// One POST: an event reader on success, a classified failure otherwise.
    async fn attempt(
        &self,
        client: &reqwest::Client,
        url: &reqwest::Url,
        body: &[u8],
        classify: fn(Option<u16>, &str) -> Failure,
    ) -> std::result::Result<EventReader, Failure> {
        let turn_deadline = tokio::time::Instant::now() + self.limits.turn_timeout;
        // The URL as shown (credentials hidden): the model may be part of its path.
        let shown = flue_core::util::hide_url_credentials(url.as_str());
        flue_core::model::wire::sent(&shown, body);
        let request = client
            .post(url.clone())
            .headers(self.headers.clone())
            .body(body.to_vec())
            .send();
        let response = tokio::time::timeout(self.limits.first_byte_timeout, request)
            .await
            .map_err(|_| {
                Failure::timed_out(
                    "first_byte_timeout_ms",
                    format!(
                        "no answer from {} within {} ms (the provider's first_byte_timeout_ms)",
                        shown,
                        self.limits.first_byte_timeout.as_millis()
                    ),
                )
            })?
            .map_err(|err| network_failure(&format!("cannot reach {shown}"), err))?;
        let status = response.status();
        if !status.is_success() {
            let retry_after = retry_after(response.headers());
            let text = read_limited(response).await;
            let mut failure = classify(Some(status.as_u16()), &text);
            failure.retry_after = retry_after;
            return Err(failure);
        }
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        if !content_type.starts_with("text/event-stream") {
            let text = read_limited(response).await;
            return Err(Failure::fatal(format!(
                "expected an event stream (text/event-stream) but got {:?}: {}",
                content_type,
                preview(&text)
            )));
        }
        Ok(EventReader {
            response,
            parser: SseParser::default(),
            queue: VecDeque::new(),
            idle_timeout: self.limits.idle_timeout,
            turn_timeout: self.limits.turn_timeout,
            turn_deadline,
            max_turn_bytes: self.limits.max_turn_bytes,
        })
    }
}

/// Reads server-sent events from a response.
#[derive(Debug)]
pub(crate) struct EventReader {
    response: reqwest::Response,
    parser: SseParser,
    queue: VecDeque<SseEvent>,
    idle_timeout: Duration,
    turn_timeout: Duration,
    /// When the attempt's [`StreamLimits::turn_timeout`] runs out.
    turn_deadline: tokio::time::Instant,
    max_turn_bytes: usize,
}

impl EventReader {
    /// The next event; `None` at the end of the stream. A transport error mid-stream, or a
    /// silence longer than the idle timeout, is a transient failure (the stream was cut); a
    /// stream still going at the turn timeout is a failure that is not retried.
    pub(crate) async fn next(&mut self) -> std::result::Result<Option<SseEvent>, Failure> {
        loop {
            if let Some(event) = self.queue.pop_front() {
                return Ok(Some(event));
            }
            let idle_deadline = tokio::time::Instant::now() + self.idle_timeout;
            let deadline = idle_deadline.min(self.turn_deadline);
            let chunk = tokio::time::timeout_at(deadline, self.response.chunk())
                .await
                .map_err(|_| {
                    if idle_deadline <= self.turn_deadline {
                        Failure::timed_out(
                            "idle_timeout_ms",
                            format!(
                                "the response stream stalled: nothing for {} ms (the provider's \
                                 idle_timeout_ms)",
                                self.idle_timeout.as_millis()
                            ),
                        )
                    } else {
                        Failure::fatal(format!(
                            "the model's turn was still streaming after {} ms (the provider's \
                             turn_timeout_ms); nothing of it was kept",
                            self.turn_timeout.as_millis()
                        ))
                    }
                })?
                .map_err(|err| network_failure("the response stream was cut", err))?;
            let Some(chunk) = chunk else {
                return Ok(None);
            };
            flue_core::model::wire::received(&chunk);
            let mut events = Vec::new();
            self.parser
                .feed(&chunk, &mut events)
                .map_err(|err| Failure::fatal(err.to_string()))?;
            self.queue.extend(events);
        }
    }
}

impl EventReader {
    /// Fails once `turn_bytes`, the bytes of text, thinking and tool input a decoder has
    /// gathered for this turn, exceed the turn limit. Not retried: the model would likely
    /// answer the same way.
    pub(crate) fn check_turn_size(&self, turn_bytes: usize) -> std::result::Result<(), Failure> {
        if turn_bytes <= self.max_turn_bytes {
            return Ok(());
        }
        Err(Failure::fatal(format!(
            "the model's turn exceeded {} bytes of text and tool input (the provider's \
             max_turn_bytes); nothing of it was kept",
            self.max_turn_bytes
        )))
    }
}

/// A non-2xx body (or an error inside a stream) in the shape both wire formats use:
/// `{"error": {"message": ..., "type": ..., "code": ...}}`; anything else is quoted.
pub(crate) fn classify_json(status: Option<u16>, body: &str) -> Failure {
    let value: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    reported_json(status, value.get("error").unwrap_or(&value), body)
}

/// An error object (`{"message", "type" | "code"}`, or a bare string) as a failure.
pub(crate) fn reported_json(status: Option<u16>, error: &Value, body: &str) -> Failure {
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .or_else(|| error.as_str())
        .map_or_else(|| preview(body), str::to_owned);
    let code = error
        .get("code")
        .and_then(Value::as_str)
        .or_else(|| error.get("type").and_then(Value::as_str))
        // Google: `{"code": 400, "status": "INVALID_ARGUMENT"}`.
        .or_else(|| error.get("status").and_then(Value::as_str))
        .unwrap_or_default();
    Failure::reported(status, &message, code)
}

/// A JSON frame the provider sent that does not parse: the stream is unusable.
pub(crate) fn malformed(what: &str, data: &str, err: &serde_json::Error) -> Failure {
    Failure::fatal(format!(
        "malformed {what} in the event stream ({err}): {}",
        preview(data)
    ))
}

/// The stream ended before its terminal event.
pub(crate) fn truncated() -> Failure {
    Failure::transient("the response stream ended before the model finished its turn")
}

/// The computed delay before retry number `n_retries + 1`: `base * 2^n`, capped, scaled into
/// `[50 %, 100 %]` by `jitter` (in `[0, 1)`).
pub(crate) fn backoff(policy: &RetryPolicy, n_retries: u32, jitter: f64) -> Duration {
    let exponential = policy
        .base_delay
        .saturating_mul(1u32.checked_shl(n_retries).unwrap_or(u32::MAX));
    exponential
        .min(policy.max_delay)
        .mul_f64(0.5 + jitter.clamp(0.0, 1.0) / 2.0)
}

/// The wait a response asks for: `retry-after-ms` (milliseconds), else `retry-after` in
/// seconds. (An HTTP-date `retry-after` is ignored; the computed backoff applies.)
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let number = |name: &str| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .and_then(|text| text.trim().parse::<f64>().ok())
            .filter(|value| value.is_finite() && *value >= 0.0)
    };
    if let Some(ms) = number("retry-after-ms") {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    number("retry-after").map(Duration::from_secs_f64)
}

/// A random number in `[0, 1)` from the standard library's per-process hash keys.
fn jitter() -> f64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(flue_core::util::now_ms());
    #[allow(
        clippy::cast_precision_loss,
        reason = "53 bits of randomness are plenty for jitter"
    )]
    let fraction = (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64;
    fraction
}

/// Whether an error report means the request did not fit the context window.
fn is_context_overflow(status: Option<u16>, message: &str, code: &str) -> bool {
    if code == "context_length_exceeded" || status == Some(413) {
        return true;
    }
    if !matches!(status, None | Some(400 | 422)) {
        return false;
    }
    let message = message.to_ascii_lowercase();
    [
        "prompt is too long",
        "context length",
        "context window",
        "maximum context",
        "context_length_exceeded",
        "too many tokens",
        "reduce the length",
        "input is too long",
        "exceeds the context",
        // Gemini: "The input token count (N) exceeds the maximum number of tokens allowed".
        "exceeds the maximum number of tokens",
    ]
    .iter()
    .any(|needle| message.contains(needle))
}

/// A client for `http` or `https` endpoints. Only `https` loads the platform's certificates
/// (which may be missing on a minimal machine); plain `http` (loopback servers, Ollama) gets a
/// TLS setup that trusts nothing, since it never negotiates TLS.
fn build_client(
    https: bool,
    connect_timeout: Duration,
) -> std::result::Result<reqwest::Client, Failure> {
    client_builder(https, connect_timeout)?
        .build()
        .map_err(|err| Failure {
            message: format!("cannot create the HTTP client: {err}"),
            source: Some(err.into()),
            ..Failure::fatal("")
        })
}

/// The builder of [`build_client`]'s client, for a caller that sets more (an http hook's
/// client does not follow redirects).
pub(crate) fn client_builder(
    https: bool,
    connect_timeout: Duration,
) -> std::result::Result<reqwest::ClientBuilder, Failure> {
    let setup_failed = |message: &str, err: BoxError| Failure {
        message: format!("{message}: {err}"),
        source: Some(err),
        ..Failure::fatal("")
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|err| setup_failed("cannot configure TLS", err.into()))?;
    let tls = if https {
        let verifier = rustls_platform_verifier::Verifier::new(provider).map_err(|err| {
            setup_failed(
                "cannot load the system's TLS root certificates (install the ca-certificates \
                 package)",
                err.into(),
            )
        })?;
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_no_client_auth()
    } else {
        builder
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth()
    };
    Ok(reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .no_proxy()
        .connect_timeout(connect_timeout))
}

/// A transport error as a transient failure, its cause chain spelled out.
fn network_failure(context: &str, err: reqwest::Error) -> Failure {
    let mut message = context.to_owned();
    // reqwest's own message repeats the URL; its causes say what happened.
    let mut cause: Option<&dyn std::error::Error> = match std::error::Error::source(&err) {
        Some(source) => Some(source),
        None => Some(&err),
    };
    while let Some(current) = cause {
        // A cause may name the URL again, credentials and all.
        let text = flue_core::util::hide_url_credentials(&current.to_string()).into_owned();
        if !message.ends_with(&text) {
            let _ = write!(message, ": {text}");
        }
        cause = current.source();
    }
    Failure {
        // Without its URL: the chain of sources is shown too, and the URL may hold credentials.
        source: Some(Box::new(err.without_url())),
        ..Failure::transient(message)
    }
}

/// The response body, at most [`MAX_ERROR_BODY`] bytes of it, lossily decoded.
async fn read_limited(mut response: reqwest::Response) -> String {
    let mut body = Vec::new();
    while body.len() < MAX_ERROR_BODY {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                flue_core::model::wire::received(&chunk);
                body.extend_from_slice(&chunk);
            }
            Ok(None) | Err(_) => break,
        }
    }
    body.truncate(MAX_ERROR_BODY);
    String::from_utf8_lossy(&body).into_owned()
}

/// The start of `text`, for error messages.
pub(crate) fn preview(text: &str) -> String {
    const PREVIEW_CHARS: usize = 200;
    let trimmed = text.trim();
    // A proxy's or load balancer's error page says little beyond its title.
    if let Some(cause) = html_page_cause(trimmed) {
        return cause;
    }
    match trimmed.char_indices().nth(PREVIEW_CHARS) {
        Some((idx, _)) => format!("{}...", trimmed.get(..idx).unwrap_or_default()),
        None => trimmed.to_owned(),
    }
}

/// A short cause for an HTML page (`an HTML error page: "502 Bad Gateway"`); `None` for
/// anything else.
fn html_page_cause(text: &str) -> Option<String> {
    let lower = text.to_ascii_lowercase();
    if !(lower.starts_with("<!doctype html")
        || lower.starts_with("<html")
        || lower.contains("<body"))
    {
        return None;
    }
    let title = ["title", "h1"].iter().find_map(|tag| {
        let open = lower.find(&format!("<{tag}"))?;
        let start = open + lower.get(open..)?.find('>')? + 1;
        let end = start + lower.get(start..)?.find(&format!("</{tag}"))?;
        let inner = text
            .get(start..end)?
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        (!inner.is_empty()).then_some(inner)
    });
    Some(match title {
        Some(title) => {
            let short: String = title.chars().take(120).collect();
            format!("an HTML error page: {short:?}")
        }
        None => "an HTML error page without a title".to_owned(),
    })
}

/// `text` with the key replaced: exact copies of any length, then the key's transforms
/// (case, base64, pieces, ...) when it is long enough for [`Redactor`].
fn redact(text: &str, key: Option<&ApiKey>) -> String {
    match key.map(ApiKey::expose) {
        Some(secret) if !secret.is_empty() => {
            let text = text.replace(secret, Redactor::REPLACEMENT);
            match Redactor::new([secret]) {
                Ok(redactor) => redactor.redact(&text).into_owned(),
                Err(_) => text,
            }
        }
        _ => text.to_owned(),
    }
}

#[cfg(test)]
mod tests;
