//! flue-providers: the remote model providers of Flue — Anthropic Messages, OpenAI Chat
//! Completions and the OpenAI-compatible servers, the OpenAI Responses API, Google's Gemini
//! API — and the catalog of built-in providers and models.
//!
//! A library user adds this crate beside flue-core to run an agent on a model behind an API;
//! `examples/provider` is a whole program doing so (with the SQLite store and a hook).
//!
//! Each provider implements [`flue_core::ModelProvider`] and reaches the runtime only through
//! that trait and its data ([`flue_core::model::ModelRequest`], [`flue_core::model::ModelTurn`],
//! [`flue_core::model::TurnSink`], [`flue_core::model::ModelInfo`]); it knows no session, task or store. A
//! [`ProviderConfig`] says where a provider is, how it authenticates, which models it serves
//! (limits, capabilities, prices) and how it retries; [`ProviderConfig::build`] turns it into a
//! provider to register in a [`flue_core::ProviderRegistry`]. Like flue-core, this crate never
//! reads the environment: the caller resolves keys and passes them in.
//!
//! ```
//! use flue_core::{ModelProvider, ProviderRegistry};
//! use flue_providers::{ApiKey, ProviderConfig};
//!
//! let provider = ProviderConfig::builtin("anthropic")
//!     .unwrap()
//!     .with_api_key(ApiKey::new("sk-ant-..."))
//!     .build()
//!     .unwrap();
//! assert_eq!(provider.model_info("claude-haiku-4-5").context_window, 200_000);
//! let providers = ProviderRegistry::new().with_provider(provider);
//! assert_eq!(providers.ids(), ["anthropic"]);
//! ```
//!
//! Map of the main types:
//! - configuration: [`ProviderConfig`], [`ApiKey`] (formats as `[redacted]`), [`WireApi`],
//!   [`RetryPolicy`], [`StreamLimits`] (timeouts, turn size), [`OpenAiCompat`] with
//!   [`MaxTokensField`] and [`ReasoningParam`] (dialects of compatible servers)
//! - built-ins: [`BuiltinProvider::ALL`] (endpoints, key variables) and the model catalog behind
//!   [`ProviderConfig::builtin`]
//! - providers: [`AnthropicProvider`], [`OpenAiProvider`], [`OpenAiResponsesProvider`],
//!   [`GoogleProvider`], each a [`RemoteProvider`] over its wire API's codec (one
//!   `ModelProvider` impl: catalog lookups, key check, retries; the codec encodes the request
//!   and decodes the stream)
//! - event streams: the shared `text/event-stream` parser is [`flue_core::util::sse`]

// Only the binaries write to the terminal: flue-cli's stdout is a JSON contract, and an
// embedding application owns its own output.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod anthropic;
mod build;
mod catalog;
mod convert;
mod google;
mod hook_http;
mod http;
mod openai;
mod openai_responses;
mod provider_config;
mod remote;

pub use anthropic::AnthropicProvider;
pub use catalog::BuiltinProvider;
pub use google::GoogleProvider;
pub use hook_http::ReqwestHookClient;
pub use openai::OpenAiProvider;
pub use openai_responses::OpenAiResponsesProvider;
pub use provider_config::{
    ApiKey, MaxTokensField, OpenAiCompat, ProviderConfig, ReasoningParam, RetryPolicy,
    StreamLimits, WireApi,
};
pub use remote::RemoteProvider;

/// The examples of docs/providers.md, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/providers.md")]
struct ProvidersGuide;
