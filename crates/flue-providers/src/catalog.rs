//! What flue knows without being told: the built-in providers (endpoints, key variables,
//! dialects) and the main Anthropic and OpenAI models (limits, capabilities, prices, how they
//! take a thinking level).
//!
//! Prices are US dollars per million tokens at the base tier (long-context surcharges are not
//! modelled). A model missing here still works: it gets [`ModelInfo::default`] and the CLI
//! warns; flue.toml (`[providers.<id>.models.<model>]`) adds or corrects entries.

use flue_core::model::{ModelInfo, ModelPrice};

use crate::provider_config::{
    MaxTokensField, OpenAiCompat, ProviderConfig, ReasoningParam, Thinking, WireApi,
};

/// A provider flue knows by name: its wire API, endpoint and key variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BuiltinProvider {
    /// Provider id.
    pub id: &'static str,
    /// Wire protocol.
    pub api: WireApi,
    /// Default base URL.
    pub base_url: &'static str,
    /// Variable holding the key, when the provider takes one.
    pub api_key_env: Option<&'static str>,
    /// A second name of the key's variable, read when `api_key_env` is unset (Google's
    /// `GOOGLE_API_KEY` beside `GEMINI_API_KEY`).
    pub api_key_env_alt: Option<&'static str>,
    /// True when requests work without a key (the key is sent when present).
    pub key_optional: bool,
    /// Variable that overrides the base URL, when there is one.
    pub base_url_env: Option<&'static str>,
}

impl BuiltinProvider {
    /// Every built-in provider.
    pub const ALL: &'static [Self] = BUILTIN_PROVIDERS;

    /// The built-in provider `id`.
    pub fn find(id: &str) -> Option<&'static Self> {
        Self::ALL.iter().find(|builtin| builtin.id == id)
    }

    /// Its configuration with the model catalog and no key (`api_key_env` set when a key is
    /// required).
    pub fn config(&self) -> ProviderConfig {
        let mut config = ProviderConfig::new(self.id, self.api, self.base_url);
        if !self.key_optional {
            config.api_key_env = self.api_key_env.map(str::to_owned);
        }
        config.openai_compat = compat_of(self.id);
        for entry in models_of(self.id) {
            config.models.insert(entry.id.to_owned(), entry.info());
            config.thinking.insert(entry.id.to_owned(), entry.thinking);
        }
        for entry in responses_models_of(self.id) {
            config.models.insert(entry.id.to_owned(), entry.info());
            config.thinking.insert(entry.id.to_owned(), entry.thinking);
            config.responses_models.insert(entry.id.to_owned());
        }
        config
    }
}

impl ProviderConfig {
    /// The built-in provider `id` (`anthropic`, `openai`, `openrouter`, ...; see
    /// [`BuiltinProvider::ALL`]) with its base URL, key variable and model catalog, and no key.
    pub fn builtin(id: &str) -> Option<Self> {
        BuiltinProvider::find(id).map(BuiltinProvider::config)
    }
}

/// One built-in model.
#[derive(Debug, PartialEq)]
pub(crate) struct CatalogEntry {
    pub(crate) id: &'static str,
    context_window: u64,
    max_output_tokens: u64,
    image_input: bool,
    /// input, output, cache read, cache write.
    price: [f64; 4],
    pub(crate) thinking: Thinking,
}

impl CatalogEntry {
    /// The entry as runtime model info.
    pub(crate) fn info(&self) -> ModelInfo {
        let [input, output, cache_read, cache_write] = self.price;
        ModelInfo {
            context_window: self.context_window,
            max_output_tokens: self.max_output_tokens,
            reasoning: self.thinking != Thinking::None,
            image_input: self.image_input,
            price: Some(ModelPrice {
                input,
                output,
                cache_read,
                cache_write,
            }),
        }
    }
}

const fn model(
    id: &'static str,
    context_window: u64,
    max_output_tokens: u64,
    image_input: bool,
    price: [f64; 4],
    thinking: Thinking,
) -> CatalogEntry {
    CatalogEntry {
        id,
        context_window,
        max_output_tokens,
        image_input,
        price,
        thinking,
    }
}

const BUDGET: Thinking = Thinking::Budget;
const ADAPTIVE: Thinking = Thinking::Adaptive { xhigh: false };
const ADAPTIVE_XHIGH: Thinking = Thinking::Adaptive { xhigh: true };
/// GPT-5 and 5-mini/nano: minimal..high, cannot be turned off.
const GPT5: Thinking = Thinking::Effort {
    none: false,
    minimal: true,
    xhigh: false,
};
/// GPT-5.1: none, low..high.
const GPT51: Thinking = Thinking::Effort {
    none: true,
    minimal: false,
    xhigh: false,
};
/// GPT-5.2 and later: none, low..xhigh.
const GPT52: Thinking = Thinking::Effort {
    none: true,
    minimal: false,
    xhigh: true,
};
/// o-series: low..high, cannot be turned off.
const O_SERIES: Thinking = Thinking::Effort {
    none: false,
    minimal: false,
    xhigh: false,
};
/// Codex models from GPT-5.1-Codex-Max on: low..xhigh, cannot be turned off.
const CODEX_XHIGH: Thinking = Thinking::Effort {
    none: false,
    minimal: false,
    xhigh: true,
};
const NONE: Thinking = Thinking::None;
/// Gemini 2.5 Pro: budgets of 128 to 32,768 tokens, cannot be turned off.
const GEMINI_PRO_BUDGET: Thinking = Thinking::GeminiBudget {
    max: 32_768,
    can_disable: false,
};
/// Gemini 2.5 Flash and Flash-Lite: budgets up to 24,576 tokens, 0 turns thinking off.
const GEMINI_FLASH_BUDGET: Thinking = Thinking::GeminiBudget {
    max: 24_576,
    can_disable: true,
};
const GEMINI_LEVEL: Thinking = Thinking::GeminiLevel;

/// Anthropic models (Messages API): id, context window, output limit, image input, price
/// (input, output, cache read, cache write), thinking style.
#[rustfmt::skip]
static ANTHROPIC_MODELS: &[CatalogEntry] = &[
    model("claude-opus-5", 1_000_000, 128_000, true, [5.0, 25.0, 0.5, 6.25], ADAPTIVE_XHIGH),
    model("claude-sonnet-5", 1_000_000, 128_000, true, [2.0, 10.0, 0.2, 2.5], ADAPTIVE_XHIGH),
    model("claude-fable-5", 1_000_000, 128_000, true, [10.0, 50.0, 1.0, 12.5], ADAPTIVE_XHIGH),
    model("claude-opus-4-8", 1_000_000, 128_000, true, [5.0, 25.0, 0.5, 6.25], ADAPTIVE_XHIGH),
    model("claude-opus-4-7", 1_000_000, 128_000, true, [5.0, 25.0, 0.5, 6.25], ADAPTIVE_XHIGH),
    model("claude-opus-4-6", 1_000_000, 128_000, true, [5.0, 25.0, 0.5, 6.25], ADAPTIVE),
    model("claude-sonnet-4-6", 1_000_000, 128_000, true, [3.0, 15.0, 0.3, 3.75], ADAPTIVE),
    model("claude-opus-4-5", 200_000, 64_000, true, [5.0, 25.0, 0.5, 6.25], BUDGET),
    model("claude-sonnet-4-5", 1_000_000, 64_000, true, [3.0, 15.0, 0.3, 3.75], BUDGET),
    model("claude-haiku-4-5", 200_000, 64_000, true, [1.0, 5.0, 0.1, 1.25], BUDGET),
    model("claude-opus-4-1", 200_000, 32_000, true, [15.0, 75.0, 1.5, 18.75], BUDGET),
];

/// OpenAI models served by Chat Completions, in the same columns.
#[rustfmt::skip]
static OPENAI_MODELS: &[CatalogEntry] = &[
    model("gpt-5.5", 272_000, 128_000, true, [5.0, 30.0, 0.5, 0.0], GPT52),
    model("gpt-5.4", 272_000, 128_000, true, [2.5, 15.0, 0.25, 0.0], GPT52),
    model("gpt-5.4-mini", 400_000, 128_000, true, [0.75, 4.5, 0.075, 0.0], GPT52),
    model("gpt-5.4-nano", 400_000, 128_000, true, [0.2, 1.25, 0.02, 0.0], GPT52),
    model("gpt-5.2", 400_000, 128_000, true, [1.75, 14.0, 0.175, 0.0], GPT52),
    model("gpt-5.1", 400_000, 128_000, true, [1.25, 10.0, 0.125, 0.0], GPT51),
    model("gpt-5", 400_000, 128_000, true, [1.25, 10.0, 0.125, 0.0], GPT5),
    model("gpt-5-mini", 400_000, 128_000, true, [0.25, 2.0, 0.025, 0.0], GPT5),
    model("gpt-5-nano", 400_000, 128_000, true, [0.05, 0.4, 0.005, 0.0], GPT5),
    model("gpt-5-chat-latest", 128_000, 16_384, true, [1.25, 10.0, 0.125, 0.0], NONE),
    model("gpt-4.1", 1_047_576, 32_768, true, [2.0, 8.0, 0.5, 0.0], NONE),
    model("gpt-4.1-mini", 1_047_576, 32_768, true, [0.4, 1.6, 0.1, 0.0], NONE),
    model("gpt-4.1-nano", 1_047_576, 32_768, true, [0.1, 0.4, 0.025, 0.0], NONE),
    model("gpt-4o", 128_000, 16_384, true, [2.5, 10.0, 1.25, 0.0], NONE),
    model("gpt-4o-mini", 128_000, 16_384, true, [0.15, 0.6, 0.075, 0.0], NONE),
    model("o4-mini", 200_000, 100_000, true, [1.1, 4.4, 0.275, 0.0], O_SERIES),
    model("o3", 200_000, 100_000, true, [2.0, 8.0, 0.5, 0.0], O_SERIES),
    model("o3-mini", 200_000, 100_000, false, [1.1, 4.4, 0.55, 0.0], O_SERIES),
    model("o1", 200_000, 100_000, true, [15.0, 60.0, 7.5, 0.0], O_SERIES),
];

/// OpenAI models served only by the Responses API (OpenAI's model pages list no Chat
/// Completions endpoint for them), in the same columns: the built-in `openai` provider sends
/// their turns there and every other model's to Chat Completions.
#[rustfmt::skip]
static OPENAI_RESPONSES_MODELS: &[CatalogEntry] = &[
    model("gpt-5.2-codex", 400_000, 128_000, true, [1.75, 14.0, 0.175, 0.0], CODEX_XHIGH),
    model("gpt-5.1-codex-max", 400_000, 128_000, true, [1.25, 10.0, 0.125, 0.0], CODEX_XHIGH),
    model("gpt-5.1-codex", 400_000, 128_000, true, [1.25, 10.0, 0.125, 0.0], O_SERIES),
    model("gpt-5.1-codex-mini", 400_000, 128_000, true, [0.25, 2.0, 0.025, 0.0], O_SERIES),
    model("gpt-5-codex", 400_000, 128_000, true, [1.25, 10.0, 0.125, 0.0], O_SERIES),
    model("o3-pro", 200_000, 100_000, true, [20.0, 80.0, 20.0, 0.0], O_SERIES),
    model("o1-pro", 200_000, 100_000, true, [150.0, 600.0, 150.0, 0.0], O_SERIES),
];

/// Google Gemini models (Gemini API), in the same columns. Prices: Google's Gemini API
/// pricing page as quoted in January 2026, for prompts up to 200,000 tokens (longer prompts
/// cost more on the Pro models; not modelled); cache reads are the context-caching price
/// (cache storage is billed per hour, not per token: 0 here).
#[rustfmt::skip]
static GOOGLE_MODELS: &[CatalogEntry] = &[
    model("gemini-3-pro-preview", 1_048_576, 65_536, true, [2.0, 12.0, 0.2, 0.0], GEMINI_LEVEL),
    model("gemini-2.5-pro", 1_048_576, 65_536, true, [1.25, 10.0, 0.125, 0.0], GEMINI_PRO_BUDGET),
    model("gemini-2.5-flash", 1_048_576, 65_536, true, [0.3, 2.5, 0.03, 0.0], GEMINI_FLASH_BUDGET),
    model("gemini-2.5-flash-lite", 1_048_576, 65_536, true, [0.1, 0.4, 0.01, 0.0], GEMINI_FLASH_BUDGET),
];

/// Providers flue knows by name.
const BUILTIN_PROVIDERS: &[BuiltinProvider] = &[
    builtin(
        "anthropic",
        WireApi::AnthropicMessages,
        "https://api.anthropic.com",
        Some("ANTHROPIC_API_KEY"),
        Some("ANTHROPIC_BASE_URL"),
    ),
    builtin(
        "openai",
        WireApi::OpenAiCompletions,
        "https://api.openai.com/v1",
        Some("OPENAI_API_KEY"),
        Some("OPENAI_BASE_URL"),
    ),
    BuiltinProvider {
        id: "google",
        api: WireApi::GoogleGenerativeAi,
        base_url: "https://generativelanguage.googleapis.com/v1beta",
        api_key_env: Some("GEMINI_API_KEY"),
        api_key_env_alt: Some("GOOGLE_API_KEY"),
        key_optional: false,
        base_url_env: None,
    },
    builtin(
        "openrouter",
        WireApi::OpenAiCompletions,
        "https://openrouter.ai/api/v1",
        Some("OPENROUTER_API_KEY"),
        None,
    ),
    builtin(
        "groq",
        WireApi::OpenAiCompletions,
        "https://api.groq.com/openai/v1",
        Some("GROQ_API_KEY"),
        None,
    ),
    builtin(
        "deepseek",
        WireApi::OpenAiCompletions,
        "https://api.deepseek.com",
        Some("DEEPSEEK_API_KEY"),
        None,
    ),
    builtin(
        "together",
        WireApi::OpenAiCompletions,
        "https://api.together.ai/v1",
        Some("TOGETHER_API_KEY"),
        None,
    ),
    builtin(
        "mistral",
        WireApi::OpenAiCompletions,
        "https://api.mistral.ai/v1",
        Some("MISTRAL_API_KEY"),
        None,
    ),
    builtin(
        "xai",
        WireApi::OpenAiCompletions,
        "https://api.x.ai/v1",
        Some("XAI_API_KEY"),
        None,
    ),
    BuiltinProvider {
        id: "ollama",
        api: WireApi::OpenAiCompletions,
        base_url: "http://127.0.0.1:11434/v1",
        api_key_env: None,
        api_key_env_alt: None,
        key_optional: true,
        base_url_env: None,
    },
    BuiltinProvider {
        id: "vllm",
        api: WireApi::OpenAiCompletions,
        base_url: "http://127.0.0.1:8000/v1",
        api_key_env: Some("VLLM_API_KEY"),
        api_key_env_alt: None,
        key_optional: true,
        base_url_env: None,
    },
];

const fn builtin(
    id: &'static str,
    api: WireApi,
    base_url: &'static str,
    api_key_env: Option<&'static str>,
    base_url_env: Option<&'static str>,
) -> BuiltinProvider {
    BuiltinProvider {
        id,
        api,
        base_url,
        api_key_env,
        api_key_env_alt: None,
        key_optional: false,
        base_url_env,
    }
}

/// The catalog of built-in provider `id`.
fn models_of(id: &str) -> &'static [CatalogEntry] {
    match id {
        "anthropic" => ANTHROPIC_MODELS,
        "openai" => OPENAI_MODELS,
        "google" => GOOGLE_MODELS,
        _ => &[],
    }
}

/// The Responses-only models of built-in provider `id`.
fn responses_models_of(id: &str) -> &'static [CatalogEntry] {
    match id {
        "openai" => OPENAI_RESPONSES_MODELS,
        _ => &[],
    }
}

/// The dialect of built-in provider `id`.
fn compat_of(id: &str) -> OpenAiCompat {
    let compat = OpenAiCompat::default();
    match id {
        "openrouter" => compat.with_reasoning(ReasoningParam::OpenRouter),
        // DeepSeek documents only `max_tokens`, and wants the reasoning of tool-call turns
        // back.
        "deepseek" => compat
            .with_max_tokens_field(MaxTokensField::MaxTokens)
            .with_reasoning(ReasoningParam::Unsupported)
            .with_reasoning_content_back(),
        "xai" => compat.with_reasoning(ReasoningParam::Unsupported),
        "together" => compat
            .with_max_tokens_field(MaxTokensField::MaxTokens)
            .with_reasoning(ReasoningParam::Unsupported),
        "mistral" => compat
            .with_max_tokens_field(MaxTokensField::MaxTokens)
            .with_reasoning(ReasoningParam::Unsupported)
            .without_stream_options(),
        "ollama" | "vllm" => compat.with_max_tokens_field(MaxTokensField::MaxTokens),
        _ => compat,
    }
}

#[cfg(test)]
mod tests;
