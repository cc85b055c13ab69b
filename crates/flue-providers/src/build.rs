//! Turning a [`ProviderConfig`] into the provider of its wire API: the one place that knows
//! every provider, above them and the settings they read.

use std::sync::Arc;

use flue_core::{ModelProvider, Result};

use crate::anthropic::AnthropicProvider;
use crate::openai::OpenAiProvider;
use crate::provider_config::{ProviderConfig, WireApi};

impl ProviderConfig {
    /// Builds the provider for this config's wire API. Fails on a malformed base URL or header.
    pub fn build(self) -> Result<Arc<dyn ModelProvider>> {
        Ok(match self.api {
            WireApi::OpenAiCompletions => Arc::new(OpenAiProvider::new(self)?),
            WireApi::AnthropicMessages => Arc::new(AnthropicProvider::new(self)?),
        })
    }
}
