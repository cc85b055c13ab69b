//! Turning a [`ProviderConfig`] into the provider of its wire API: the one place that knows
//! every provider, above them and the settings they read. The built-in `openai` provider
//! speaks Chat Completions but serves the catalog's Responses-only models over the Responses
//! API: [`OpenAiRouted`] picks the API per model.

use std::sync::Arc;

use flue_core::{
    BoxFuture, ModelProvider, Result,
    model::{ModelInfo, ModelRequest, ModelTurn, TurnSink},
};

use crate::anthropic::AnthropicProvider;
use crate::google::GoogleProvider;
use crate::openai::OpenAiProvider;
use crate::openai_responses::OpenAiResponsesProvider;
use crate::provider_config::{ProviderConfig, WireApi};

impl ProviderConfig {
    /// Builds the provider for this config's wire API. Fails on a malformed base URL or header.
    pub fn build(self) -> Result<Arc<dyn ModelProvider>> {
        Ok(match self.api {
            WireApi::OpenAiCompletions if !self.responses_models.is_empty() => {
                Arc::new(OpenAiRouted::new(self)?)
            }
            WireApi::OpenAiCompletions => Arc::new(OpenAiProvider::new(self)?),
            WireApi::OpenAiResponses => Arc::new(OpenAiResponsesProvider::new(self)?),
            WireApi::AnthropicMessages => Arc::new(AnthropicProvider::new(self)?),
            WireApi::GoogleGenerativeAi => Arc::new(GoogleProvider::new(self)?),
        })
    }
}

/// An OpenAI provider that sends each model's turns over the API the catalog names for it
/// ([`ProviderConfig::wire_api_of`]).
#[derive(Debug)]
struct OpenAiRouted {
    config: ProviderConfig,
    completions: OpenAiProvider,
    responses: OpenAiResponsesProvider,
}

impl OpenAiRouted {
    fn new(config: ProviderConfig) -> Result<Self> {
        Ok(Self {
            completions: OpenAiProvider::new(config.clone())?,
            responses: OpenAiResponsesProvider::new(config.clone())?,
            config,
        })
    }

    fn pick(&self, model: &str) -> &dyn ModelProvider {
        match self.config.wire_api_of(model) {
            WireApi::OpenAiResponses => &self.responses,
            _ => &self.completions,
        }
    }
}

impl ModelProvider for OpenAiRouted {
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

    fn check_model<'a>(&'a self, model: &'a str) -> BoxFuture<'a, Result<()>> {
        self.pick(model).check_model(model)
    }

    fn stream_turn<'a>(
        &'a self,
        request: ModelRequest<'a>,
        sink: &'a TurnSink,
    ) -> BoxFuture<'a, Result<ModelTurn>> {
        self.pick(request.model).stream_turn(request, sink)
    }
}
