//! The one [`ModelProvider`] impl of the remote providers, generic over a [`WireCodec`]: what
//! differs between wire APIs (the request body, the turn's URL, the stream's decoder) is the
//! codec; the catalog lookups, the key check and the retrying stream are written once here.

use std::any::Any;
use std::collections::VecDeque;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Mutex;

use flue_core::{
    BoxFuture, ModelProvider, Result,
    model::{ModelInfo, ModelRequest, ModelTurn, TurnSink},
};

use crate::http::{self, Endpoint};
use crate::provider_config::ProviderConfig;

/// A remote model provider speaking the wire API of `C`: [`crate::AnthropicProvider`],
/// [`crate::OpenAiProvider`], [`crate::OpenAiResponsesProvider`] or
/// [`crate::GoogleProvider`].
pub struct RemoteProvider<C> {
    pub(crate) config: ProviderConfig,
    pub(crate) endpoint: Endpoint,
    /// What the codec keeps from turn to turn (Chat Completions: the messages of recent
    /// conversations, serialized); empty for the others.
    pub(crate) kept: Kept,
    codec: PhantomData<fn() -> C>,
}

/// One wire API: how a turn is encoded and where it goes, and how its stream is decoded.
pub(crate) trait WireCodec: Sized + 'static {
    /// The decoder of the turn's event stream.
    type Assembler: http::Assembler;

    /// The JSON body of one turn.
    fn body(provider: &RemoteProvider<Self>, request: &ModelRequest<'_>) -> Result<Vec<u8>>;

    /// Where the turn of `model` is POSTed; `None` for the endpoint's own URL.
    fn turn_url(provider: &RemoteProvider<Self>, model: &str) -> Result<Option<reqwest::Url>> {
        let _ = (provider, model);
        Ok(None)
    }
}

impl<C> RemoteProvider<C> {
    pub(crate) fn from_parts(config: ProviderConfig, endpoint: Endpoint) -> Self {
        Self {
            config,
            endpoint,
            kept: Kept::default(),
            codec: PhantomData,
        }
    }
}

impl<C> fmt::Debug for RemoteProvider<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteProvider")
            .field("config", &self.config)
            .field("endpoint", &self.endpoint)
            .finish()
    }
}

impl<C: WireCodec> ModelProvider for RemoteProvider<C> {
    fn id(&self) -> &str {
        &self.config.id
    }

    fn model_info(&self, model: &str) -> ModelInfo {
        self.config.lookup_model(model).0
    }

    fn knows_model(&self, model: &str) -> bool {
        self.config.lookup_model(model).1
    }

    fn known_models(&self) -> Vec<String> {
        self.config.models.keys().cloned().collect()
    }

    fn check_model<'a>(&'a self, _model: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move { self.endpoint.check_key() })
    }

    fn stream_turn<'a>(
        &'a self,
        request: ModelRequest<'a>,
        sink: &'a TurnSink,
    ) -> BoxFuture<'a, Result<ModelTurn>> {
        Box::pin(async move {
            self.endpoint.check_key()?;
            let body = C::body(self, &request)?;
            let decode = |reader| http::decode::<C::Assembler>(reader, sink);
            match C::turn_url(self, request.model)? {
                Some(url) => {
                    self.endpoint
                        .stream_to(&url, body, http::classify_json, sink, decode)
                        .await
                }
                None => {
                    self.endpoint
                        .stream(body, http::classify_json, sink, decode)
                        .await
                }
            }
        })
    }
}

/// Values a codec keeps between turns, the most recently used last, within a count and a
/// weight (bytes); typed by the codec that keeps them.
#[derive(Default)]
pub(crate) struct Kept {
    entries: Mutex<VecDeque<(usize, Box<dyn Any + Send>)>>,
}

impl Kept {
    /// Takes out the most recent value of type `T` that `wanted` accepts.
    pub(crate) fn take<T: Any>(&self, wanted: impl Fn(&T) -> bool) -> Option<T> {
        let mut entries = self.entries.lock().ok()?;
        let idx = entries
            .iter()
            .rposition(|(_, value)| value.downcast_ref::<T>().is_some_and(&wanted))?;
        let (_, value) = entries.remove(idx)?;
        value.downcast::<T>().ok().map(|value| *value)
    }

    /// Keeps `value` as the most recent, then drops the oldest beyond `max_entries` values or
    /// `max_weight` in all (a value heavier than that alone is not kept).
    pub(crate) fn put<T: Any + Send>(
        &self,
        value: T,
        weight: usize,
        max_entries: usize,
        max_weight: usize,
    ) {
        let Ok(mut entries) = self.entries.lock() else {
            return;
        };
        if weight > max_weight {
            return;
        }
        entries.push_back((weight, Box::new(value)));
        let mut total: usize = entries.iter().map(|(weight, _)| weight).sum();
        while entries.len() > max_entries || total > max_weight {
            let Some((oldest, _)) = entries.pop_front() else {
                break;
            };
            total -= oldest;
        }
    }
}
