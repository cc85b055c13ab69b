//! Models: the provider trait, model specifiers and the provider registry.
//!
//! A [`ModelProvider`] streams one model turn: it emits text and thinking deltas through a
//! [`TurnSink`] while it runs and returns the finished [`ModelTurn`]. Aborting a turn is done
//! by dropping its future, so providers need no cancellation plumbing of their own.
//!
//! The remote providers (Anthropic, OpenAI and compatible servers) live in the flue-providers
//! crate and reach the runtime only through this trait and its data; flue-core itself carries
//! just the offline [`ScriptedProvider`]. The runtime learns limits and prices of a model from
//! its provider ([`ModelProvider::model_info`]), never from a catalog of its own.

mod scripted;
#[cfg(test)]
mod tests;
pub mod wire;

use std::collections::BTreeMap;
use std::sync::Arc;

use flue_protocol::ThinkingLevel;
use flue_protocol::event::Event;
use flue_protocol::record::{AssistantContent, ModelRef, Record, StopReason, Usage};
use serde_json::Value;

use crate::error::{FlueError, Result};
use crate::redact::Redactor;
use crate::util::BoxFuture;

pub use scripted::ScriptedProvider;

/// A parsed `<provider>/<model>` specifier, split at the first `/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelSpec {
    /// Provider id.
    pub provider: String,
    /// Model id (may itself contain `/`).
    pub model: String,
}

impl ModelSpec {
    /// Parses a specifier; both parts must be non-empty.
    pub fn parse(spec: &str) -> Result<Self> {
        match spec.split_once('/') {
            Some((provider, model)) if !provider.is_empty() && !model.is_empty() => Ok(Self {
                provider: provider.to_owned(),
                model: model.to_owned(),
            }),
            _ => Err(FlueError::InvalidModelSpec {
                spec: spec.to_owned(),
            }),
        }
    }

    /// The model reference recorded in transcripts.
    pub fn to_ref(&self) -> ModelRef {
        ModelRef {
            provider: self.provider.clone(),
            id: self.model.clone(),
        }
    }
}

/// Whether `message` carries an image (which needs a model with [`ModelInfo::image_input`]).
pub(crate) fn has_images(message: &flue_protocol::record::UserMessage) -> bool {
    message
        .content
        .iter()
        .any(|part| matches!(part, flue_protocol::record::UserContent::Image(_)))
}

/// What the runtime knows about a model: limits, capabilities and price.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelInfo {
    /// Context window in tokens.
    pub context_window: u64,
    /// Output token limit per turn.
    pub max_output_tokens: u64,
    /// Whether the model reasons (thinking levels apply).
    pub reasoning: bool,
    /// Whether the model accepts images.
    pub image_input: bool,
    /// Price, when known.
    pub price: Option<ModelPrice>,
}

impl Default for ModelInfo {
    fn default() -> Self {
        Self {
            context_window: 128_000,
            max_output_tokens: 8_192,
            reasoning: false,
            image_input: false,
            price: None,
        }
    }
}

/// US dollars per million tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ModelPrice {
    /// Uncached input.
    pub input: f64,
    /// Output.
    pub output: f64,
    /// Cache reads.
    pub cache_read: f64,
    /// Cache writes.
    pub cache_write: f64,
}

impl ModelPrice {
    /// The cost of `usage` at this price.
    #[allow(
        clippy::cast_precision_loss,
        reason = "token counts are far below 2^52"
    )]
    pub fn cost(&self, usage: &Usage) -> f64 {
        (usage.input_tokens as f64 * self.input
            + usage.output_tokens as f64 * self.output
            + usage.cache_read_tokens as f64 * self.cache_read
            + usage.cache_write_tokens as f64 * self.cache_write)
            / 1_000_000.0
    }
}

/// A tool as the model sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSchema {
    /// Tool name.
    pub name: String,
    /// When and how to use it.
    pub description: String,
    /// JSON Schema of the input object.
    pub input_schema: Value,
}

/// Everything a provider needs for one turn.
#[derive(Clone, Copy, Debug)]
pub struct ModelRequest<'a> {
    /// Model id within the provider.
    pub model: &'a str,
    /// The system prompt.
    pub system: &'a str,
    /// The conversation as the model should see it. A leading [`Record::Compaction`] stands for
    /// the folded history; [`Record::Shell`] exchanges are shown to the model as user text.
    pub messages: &'a [Record],
    /// Tools offered this turn.
    pub tools: &'a [ToolSchema],
    /// Reasoning effort.
    pub thinking: ThinkingLevel,
    /// Output token limit for this turn.
    pub max_output_tokens: u64,
}

/// A finished model turn.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelTurn {
    /// Text, thinking and tool calls in order.
    pub content: Vec<AssistantContent>,
    /// Usage the provider reported.
    pub usage: Usage,
    /// Why the model stopped.
    pub stop_reason: StopReason,
}

/// Where a provider sends deltas while a turn streams.
#[derive(Clone, Debug, Default)]
pub struct TurnSink {
    events: Option<tokio::sync::mpsc::UnboundedSender<Event>>,
    /// When set: the instant of the first delta of the turn (time to first chunk).
    first_delta: Option<std::sync::Arc<std::sync::OnceLock<std::time::Instant>>>,
    /// When set: deltas are redacted of known secrets before they are sent.
    redacting: Option<Arc<Redacting>>,
    /// When set: the usage a failing turn reported ([`TurnSink::failed_turn_usage`]).
    failed_usage: Option<std::sync::Arc<std::sync::Mutex<Usage>>>,
    /// When set: the visible text streamed so far (kept when the turn is aborted).
    streamed_text: Option<std::sync::Arc<std::sync::Mutex<String>>>,
}

/// The text of a turn not yet sent because it could be the start of a secret, per stream
/// (see [`Redactor::releasable`]).
struct Redacting {
    redactor: Redactor,
    held: std::sync::Mutex<Held>,
}

impl std::fmt::Debug for Redacting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redacting").finish_non_exhaustive()
    }
}

/// Held-back text of the two delta streams.
#[derive(Default)]
struct Held {
    text: String,
    thinking: String,
}

/// Which delta stream.
#[derive(Clone, Copy)]
enum Stream {
    Text,
    Thinking,
}

impl Held {
    fn of(&mut self, stream: Stream) -> &mut String {
        match stream {
            Stream::Text => &mut self.text,
            Stream::Thinking => &mut self.thinking,
        }
    }
}

impl Stream {
    fn event(self, text: String) -> Event {
        match self {
            Self::Text => Event::TextDelta { text },
            Self::Thinking => Event::ThinkingDelta { text },
        }
    }

    fn other(self) -> Self {
        match self {
            Self::Text => Self::Thinking,
            Self::Thinking => Self::Text,
        }
    }
}

impl TurnSink {
    /// A sink forwarding to an event channel.
    pub fn new(events: tokio::sync::mpsc::UnboundedSender<Event>) -> Self {
        Self {
            events: Some(events),
            first_delta: None,
            redacting: None,
            failed_usage: None,
            streamed_text: None,
        }
    }

    /// A sink that drops everything.
    pub fn discard() -> Self {
        Self {
            events: None,
            first_delta: None,
            redacting: None,
            failed_usage: None,
            streamed_text: None,
        }
    }

    /// This sink, also noting the instant of the first delta sent through it.
    pub(crate) fn noting_first_delta(
        &self,
    ) -> (
        Self,
        std::sync::Arc<std::sync::OnceLock<std::time::Instant>>,
    ) {
        let first_delta = std::sync::Arc::new(std::sync::OnceLock::new());
        let sink = Self {
            first_delta: Some(std::sync::Arc::clone(&first_delta)),
            ..self.clone()
        };
        (sink, first_delta)
    }

    /// This sink for one turn, with text and thinking deltas redacted of `redactor`'s secrets
    /// before they are sent: each stream sends what [`Redactor::releasable`] allows and holds
    /// back a tail that could begin a secret until more text shows what it is, so a secret split
    /// across deltas is found too. [`TurnSink::flush`] sends what is held once the turn ends.
    /// The same sink when there is nothing to redact.
    pub fn redacting(&self, redactor: &Redactor) -> Self {
        if redactor.is_empty() {
            return self.clone();
        }
        Self {
            redacting: Some(Arc::new(Redacting {
                redactor: redactor.clone(),
                held: std::sync::Mutex::new(Held::default()),
            })),
            ..self.clone()
        }
    }

    /// Sends the text held back by a [`TurnSink::redacting`] sink, redacted: call it when the
    /// turn has ended, however it ended. Does nothing on other sinks.
    pub fn flush(&self) {
        if let Some(redacting) = &self.redacting {
            let mut held = redacting
                .held
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            self.release_all(redacting, &mut held, Stream::Text);
            self.release_all(redacting, &mut held, Stream::Thinking);
        }
    }

    /// This sink, also keeping what [`TurnSink::failed_turn_usage`] reports (summed).
    pub(crate) fn noting_failed_usage(&self) -> (Self, std::sync::Arc<std::sync::Mutex<Usage>>) {
        let failed_usage = std::sync::Arc::new(std::sync::Mutex::new(Usage::default()));
        let sink = Self {
            failed_usage: Some(std::sync::Arc::clone(&failed_usage)),
            ..self.clone()
        };
        (sink, failed_usage)
    }

    /// Reports the tokens of a turn that is about to fail: what the provider reported before
    /// the failure (attempts retried within the turn included). A provider calls it just before
    /// it returns the error; the runtime counts the usage in the operation's and stores it with
    /// a [`Record::FailedTurn`] (pricing it when it has no cost). Reports add up.
    pub fn failed_turn_usage(&self, usage: Usage) {
        if let Some(failed_usage) = &self.failed_usage {
            *failed_usage
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) += usage;
        }
    }

    /// This sink, also keeping the visible text streamed through it.
    pub(crate) fn noting_streamed_text(&self) -> (Self, std::sync::Arc<std::sync::Mutex<String>>) {
        let streamed = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let sink = Self {
            streamed_text: Some(std::sync::Arc::clone(&streamed)),
            ..self.clone()
        };
        (sink, streamed)
    }

    /// Reports visible text.
    pub fn text_delta(&self, text: &str) {
        if let Some(streamed) = &self.streamed_text {
            streamed
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push_str(text);
        }
        self.delta(Stream::Text, text);
    }

    /// Reports reasoning text.
    pub fn thinking_delta(&self, text: &str) {
        self.delta(Stream::Thinking, text);
    }

    fn delta(&self, stream: Stream, text: &str) {
        let Some(redacting) = &self.redacting else {
            self.send(stream.event(text.to_owned()));
            return;
        };
        self.note_delta();
        let mut held = redacting
            .held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // The other stream's block has ended: what it held goes first, in order.
        self.release_all(redacting, &mut held, stream.other());
        let pending = held.of(stream);
        pending.push_str(text);
        let releasable = redacting.redactor.releasable(pending);
        if releasable == 0 {
            return;
        }
        let released: String = pending.drain(..releasable).collect();
        let shown = redacting.redactor.redact(&released).into_owned();
        self.forward(stream.event(shown));
    }

    /// Sends all `stream` holds, redacted.
    fn release_all(&self, redacting: &Redacting, held: &mut Held, stream: Stream) {
        let pending = std::mem::take(held.of(stream));
        if !pending.is_empty() {
            let shown = redacting.redactor.redact(&pending).into_owned();
            self.forward(stream.event(shown));
        }
    }

    /// Reports that the provider tries the call again after `delay` (`attempt` of
    /// `max_retries`) because of `message`.
    pub fn retry(
        &self,
        provider: &str,
        attempt: u32,
        max_retries: u32,
        delay: std::time::Duration,
        message: &str,
    ) {
        self.send(Event::ProviderRetry {
            provider: provider.to_owned(),
            attempt,
            max_retries,
            delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            message: message.to_owned(),
        });
    }

    /// Sends `event`; on a redacting sink, text held back goes first and deltas are redacted.
    pub(crate) fn send(&self, event: Event) {
        match event {
            Event::TextDelta { text } if self.redacting.is_some() => {
                self.delta(Stream::Text, &text);
            }
            Event::ThinkingDelta { text } if self.redacting.is_some() => {
                self.delta(Stream::Thinking, &text);
            }
            Event::TextDelta { .. } | Event::ThinkingDelta { .. } => {
                self.note_delta();
                self.forward(event);
            }
            other => {
                self.flush();
                self.forward(other);
            }
        }
    }

    fn note_delta(&self) {
        if let Some(first_delta) = &self.first_delta {
            first_delta.get_or_init(std::time::Instant::now);
        }
    }

    fn forward(&self, event: Event) {
        if let Some(events) = &self.events {
            // A closed channel means nobody is listening; the operation goes on regardless.
            let _ = events.send(event);
        }
    }
}

/// A source of model turns, registered under a provider id.
///
/// The runtime calls [`ModelProvider::check_model`] when a harness starts (so a bad model
/// fails before any work), [`ModelProvider::model_info`] to size context and price usage, and
/// [`ModelProvider::stream_turn`] once per model turn.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a model provider",
    label = "implement `flue_core::ModelProvider` for this type"
)]
pub trait ModelProvider: Send + Sync {
    /// The provider id, the part of model specifiers before the `/`.
    fn id(&self) -> &str;

    /// Limits, capabilities and price of `model`. The default suits an unknown mid-size model.
    fn model_info(&self, model: &str) -> ModelInfo {
        let _ = model;
        ModelInfo::default()
    }

    /// Whether `model` is one the provider knows, rather than one that gets the conservative
    /// defaults of [`ModelProvider::model_info`]. Frontends warn about unknown models.
    fn knows_model(&self, model: &str) -> bool {
        let _ = model;
        true
    }

    /// The model ids the provider knows (its catalog and configured models), for suggesting
    /// the one a misspelt name meant. Empty when the provider does not list them.
    fn known_models(&self) -> Vec<String> {
        Vec::new()
    }

    /// Fails when `model` cannot be used (unknown model, unreadable script, missing key).
    fn check_model<'a>(&'a self, model: &'a str) -> BoxFuture<'a, Result<()>> {
        let _ = model;
        Box::pin(async { Ok(()) })
    }

    /// Streams one turn. Deltas go to `sink`; the finished turn is returned. Dropping the
    /// future aborts the turn. A turn that fails after the provider reported tokens it used
    /// reports them with [`TurnSink::failed_turn_usage`] before returning the error, so they
    /// are counted.
    fn stream_turn<'a>(
        &'a self,
        request: ModelRequest<'a>,
        sink: &'a TurnSink,
    ) -> BoxFuture<'a, Result<ModelTurn>>;
}

/// The providers a harness can use, by id.
#[derive(Clone, Default)]
pub struct ProviderRegistry {
    providers: BTreeMap<String, Arc<dyn ModelProvider>>,
}

impl std::fmt::Debug for ProviderRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.providers.keys()).finish()
    }
}

impl ProviderRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a provider under its id, replacing any provider of the same id.
    #[must_use]
    pub fn with_provider(mut self, provider: Arc<dyn ModelProvider>) -> Self {
        self.insert(provider);
        self
    }

    /// Registers a provider under its id, replacing any provider of the same id.
    pub fn insert(&mut self, provider: Arc<dyn ModelProvider>) {
        self.providers.insert(provider.id().to_owned(), provider);
    }

    /// The same providers, each replaced by what `wrap` makes of it (a provider that records
    /// or measures the calls it passes on, under the same id).
    #[must_use]
    pub fn wrapped(&self, wrap: impl Fn(Arc<dyn ModelProvider>) -> Arc<dyn ModelProvider>) -> Self {
        let mut wrapped = Self::new();
        for provider in self.providers.values() {
            wrapped.insert(wrap(Arc::clone(provider)));
        }
        wrapped
    }

    /// The registered provider ids.
    pub fn ids(&self) -> Vec<String> {
        self.providers.keys().cloned().collect()
    }

    /// The provider registered under `id`.
    pub fn get(&self, id: &str) -> Option<Arc<dyn ModelProvider>> {
        self.providers.get(id).cloned()
    }

    /// Resolves a specifier to its provider and parsed form.
    pub fn resolve(&self, spec: &str) -> Result<(Arc<dyn ModelProvider>, ModelSpec)> {
        let parsed = ModelSpec::parse(spec)?;
        let provider = self
            .providers
            .get(&parsed.provider)
            .cloned()
            .ok_or_else(|| FlueError::UnknownProvider {
                provider: parsed.provider.clone(),
                spec: spec.to_owned(),
                known: self.ids(),
            })?;
        Ok((provider, parsed))
    }
}
