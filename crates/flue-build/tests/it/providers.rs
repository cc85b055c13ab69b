//! `[providers.<id>]` in flue.toml: declared and adjusted providers, and every problem at its
//! line.

use std::collections::BTreeMap;
use std::time::Duration;

use flue_build::{ModelSettings, ProviderSettings};
use flue_core::model::{ModelInfo, ModelPrice};
use flue_providers::{StreamLimits, WireApi};
use pretty_assertions::assert_eq;

use crate::support::{at, check_diagnostics, load};

const LOCAL: &str = r#"
[providers.local]
api = "openai-completions"
base_url = "http://127.0.0.1:8080/v1"
api_key_env = "LOCAL_API_KEY"
headers = { "x-team" = "docs" }

[providers.local.models.qwen3-coder]
context_window = 262144
max_output_tokens = 65536
reasoning = true
cost = { input = 0.2, output = 0.8 }
"#;

#[test]
fn a_new_provider_is_read_whole() {
    let workspace = load(&[("flue.toml", LOCAL)]);
    let qwen = ModelSettings {
        context_window: Some(262_144),
        max_output_tokens: Some(65_536),
        reasoning: Some(true),
        image_input: None,
        cost: Some(ModelPrice {
            input: 0.2,
            output: 0.8,
            ..ModelPrice::default()
        }),
    };
    let expected = ProviderSettings {
        id: "local".into(),
        api: Some(WireApi::OpenAiCompletions),
        base_url: Some("http://127.0.0.1:8080/v1".into()),
        api_key_env: Some("LOCAL_API_KEY".into()),
        headers: BTreeMap::from([("x-team".to_owned(), "docs".to_owned())]),
        models: BTreeMap::from([("qwen3-coder".to_owned(), qwen)]),
        ..ProviderSettings::default()
    };
    assert_eq!(
        workspace.config.providers,
        BTreeMap::from([("local".to_owned(), expected)])
    );

    let config = workspace.config.providers["local"].to_config();
    assert_eq!(
        (
            config.id.as_str(),
            config.api,
            config.base_url.as_str(),
            config.api_key_env.as_deref(),
            config.api_key.is_none()
        ),
        (
            "local",
            WireApi::OpenAiCompletions,
            "http://127.0.0.1:8080/v1",
            Some("LOCAL_API_KEY"),
            true
        )
    );
    assert_eq!(
        config.lookup_model("qwen3-coder"),
        (
            ModelInfo {
                context_window: 262_144,
                max_output_tokens: 65_536,
                reasoning: true,
                image_input: false,
                price: Some(ModelPrice {
                    input: 0.2,
                    output: 0.8,
                    ..ModelPrice::default()
                }),
            },
            true
        )
    );
    assert_eq!(config.lookup_model("other").1, false);
}

#[test]
fn a_built_in_provider_is_adjusted_not_replaced() {
    let workspace = load(&[(
        "flue.toml",
        "[providers.openai]\nbase_url = \"https://proxy.example.com/v1\"\n\n\
         [providers.openai.models.\"gpt-4.1\"]\ncontext_window = 100000\n",
    )]);
    let config = workspace.config.providers["openai"].to_config();
    assert_eq!(config.base_url, "https://proxy.example.com/v1");
    assert_eq!(config.api_key_env.as_deref(), Some("OPENAI_API_KEY"));
    let (gpt41, known) = config.lookup_model("gpt-4.1");
    // The catalog entry stays, with the one value changed.
    assert_eq!(
        (
            gpt41.context_window,
            gpt41.max_output_tokens,
            gpt41.image_input,
            known
        ),
        (100_000, 32_768, true, true)
    );
    assert_eq!(gpt41.price.map(|price| price.input), Some(2.0));
    assert!(config.lookup_model("gpt-5").1);
}

#[test]
fn timeouts_and_the_turn_limit_are_set_per_provider() {
    let text = r#"[providers.openai]
connect_timeout_ms = 5000
first_byte_timeout_ms = 60000
idle_timeout_ms = 90000
turn_timeout_ms = 600000
max_turn_bytes = 1048576

[providers.anthropic]
idle_timeout_ms = 1000
"#;
    let workspace = load(&[("flue.toml", text)]);
    let openai = workspace.config.providers["openai"].to_config().limits;
    let anthropic = workspace.config.providers["anthropic"].to_config().limits;
    assert_eq!(
        openai,
        StreamLimits::default()
            .with_connect_timeout(Duration::from_secs(5))
            .with_first_byte_timeout(Duration::from_secs(60))
            .with_idle_timeout(Duration::from_secs(90))
            .with_turn_timeout(Duration::from_secs(600))
            .with_max_turn_bytes(1_048_576)
    );
    // Unset keys keep the defaults.
    assert_eq!(
        anthropic,
        StreamLimits::default().with_idle_timeout(Duration::from_secs(1))
    );
}

#[test]
fn chat_completions_dialects_are_set_per_provider_over_the_builtin_defaults() {
    let text = r#"[providers.local]
api = "openai-completions"
base_url = "http://127.0.0.1:8080/v1"
max_tokens_field = "max_tokens"
stream_options = false
reasoning_effort = "reasoning"
reasoning_content_back = true

[providers.deepseek]
base_url = "https://proxy.example.com"
"#;
    let workspace = load(&[("flue.toml", text)]);
    let local = workspace.config.providers["local"]
        .to_config()
        .openai_compat;
    assert_eq!(
        local,
        flue_providers::OpenAiCompat::default()
            .with_max_tokens_field(flue_providers::MaxTokensField::MaxTokens)
            .without_stream_options()
            .with_reasoning(flue_providers::ReasoningParam::OpenRouter)
            .with_reasoning_content_back()
    );
    // A built-in provider keeps its documented dialect: DeepSeek documents only `max_tokens`.
    let deepseek = workspace.config.providers["deepseek"]
        .to_config()
        .openai_compat;
    assert_eq!(
        deepseek.max_tokens_field,
        flue_providers::MaxTokensField::MaxTokens
    );
    assert!(deepseek.reasoning_content_back);

    let bad = r#"[providers.openai]
max_tokens_field = "max_output_tokens"
reasoning_effort = "effort"
"#;
    check_diagnostics(
        &[("flue.toml", bad)],
        &[
            at(
                "flue.toml",
                2,
                "max_tokens_field \"max_output_tokens\" is not known: expected \
                 \"max_completion_tokens\" or \"max_tokens\"",
            ),
            at(
                "flue.toml",
                3,
                "reasoning_effort \"effort\" is not known: expected \"reasoning_effort\" \
                 (`reasoning_effort: \"high\"`), \"reasoning\" (`reasoning: {effort: \
                 \"high\"}`) or \"none\" (not sent)",
            ),
        ],
    );
}

#[test]
fn bad_timeouts_and_turn_limits_are_reported_at_their_line() {
    let text = r#"[providers.openai]
connect_timeout_ms = 0
first_byte_timeout_ms = -1
idle_timeout_ms = 100000000
max_turn_bytes = 0
turn_timeout_ms = 86400001
"#;
    check_diagnostics(
        &[("flue.toml", text)],
        &[
            at(
                "flue.toml",
                2,
                "connect_timeout_ms must be a whole number of milliseconds from 1 to 86400000, \
                 got 0",
            ),
            at(
                "flue.toml",
                3,
                "first_byte_timeout_ms must be a whole number of milliseconds from 1 to \
                 86400000, got -1",
            ),
            at(
                "flue.toml",
                4,
                "idle_timeout_ms must be a whole number of milliseconds from 1 to 86400000, got \
                 100000000",
            ),
            at(
                "flue.toml",
                5,
                "max_turn_bytes must be a whole number of bytes from 1 to 1073741824, got 0",
            ),
            at(
                "flue.toml",
                6,
                "turn_timeout_ms must be a whole number of milliseconds from 1 to 86400000, got \
                 86400001",
            ),
        ],
    );
}

#[test]
fn every_problem_is_reported_at_its_line() {
    let text = r#"[providers.custom]
api_key_env = "LOCAL_KEY"

[providers.bad]
api = "openai-chat"
base_url = "ftp://example.com"
api_key_env = "sk-live-abcdef"
headers = { "bad header" = "x" }

[providers.bad.models.m]
context_window = 1000
max_output_tokens = 2000

[providers.bad.models.n]
context_window = -5
cost = { input = -1.0 }

[providers.scripted]
api = "openai-completions"
base_url = "http://127.0.0.1:1/v1"

[providers.anthropic]
api = "openai-completions"
"#;
    check_diagnostics(
        &[("flue.toml", text)],
        &[
            at(
                "flue.toml",
                1,
                "provider `custom` is not built in, so it needs `api` and `base_url` (api = \
                 \"openai-completions\", \"openai-responses\", \"anthropic-messages\" or \
                 \"google-generative-ai\"; built-in providers: anthropic, \
                 openai, google, openrouter, groq, deepseek, together, mistral, xai, ollama, vllm)",
            ),
            at(
                "flue.toml",
                4,
                "provider `bad` is not built in, so it needs `api` and `base_url` (api = \
                 \"openai-completions\", \"openai-responses\", \"anthropic-messages\" or \
                 \"google-generative-ai\"; built-in providers: anthropic, \
                 openai, google, openrouter, groq, deepseek, together, mistral, xai, ollama, vllm)",
            ),
            at(
                "flue.toml",
                5,
                "unknown api \"openai-chat\": expected \"openai-completions\", \"openai-responses\", \
                 \"anthropic-messages\" or \"google-generative-ai\"",
            ),
            at(
                "flue.toml",
                6,
                "base_url \"ftp://example.com\" must be an http:// or https:// URL, such as \
                 \"http://127.0.0.1:8080/v1\"",
            ),
            at(
                "flue.toml",
                7,
                "api_key_env must name the environment variable that holds the key (letters, \
                 digits and `_`, such as LOCAL_API_KEY), not the key itself",
            ),
            at(
                "flue.toml",
                8,
                "\"bad header\" is not a valid HTTP header name",
            ),
            at(
                "flue.toml",
                10,
                "model `m`: max_output_tokens (2000) exceeds context_window (1000)",
            ),
            at(
                "flue.toml",
                15,
                "context_window of model `n` must be a positive number of tokens, got -5",
            ),
            at(
                "flue.toml",
                16,
                "cost of model `n` must be US dollars per million tokens, zero or more",
            ),
            at(
                "flue.toml",
                18,
                "provider id `scripted` is reserved for scripted models; choose another name",
            ),
            at(
                "flue.toml",
                23,
                "the built-in provider `anthropic` speaks anthropic-messages; to use \
                 openai-completions, declare a provider with another name",
            ),
        ],
    );
}

#[test]
fn an_unknown_provider_key_is_named_with_a_suggestion() {
    check_diagnostics(
        &[(
            "flue.toml",
            "[providers.local]\napi = \"openai-completions\"\nbase_ur = \"http://x\"\n",
        )],
        &[at(
            "flue.toml",
            3,
            "unknown key `base_ur` (did you mean `base_url`?)",
        )],
    );
}

#[test]
fn the_responses_api_is_chosen_per_provider_and_openai_may_switch_to_it() {
    let text = r#"
[providers.gateway]
api = "openai-responses"
base_url = "https://gateway.example.com/v1"

[providers.openai]
api = "openai-responses"
"#;
    let workspace = load(&[("flue.toml", text)]);
    let gateway = workspace.config.providers["gateway"].to_config();
    assert_eq!(gateway.api, WireApi::OpenAiResponses);
    assert_eq!(gateway.wire_api_of("anything"), WireApi::OpenAiResponses);
    let openai = workspace.config.providers["openai"].to_config();
    assert_eq!(openai.api, WireApi::OpenAiResponses);
    // Every model of the built-in now goes there, the catalog kept.
    assert_eq!(openai.wire_api_of("gpt-4.1"), WireApi::OpenAiResponses);
    assert!(openai.lookup_model("gpt-4.1").1);
    // Without the switch the built-in sends only its Responses-only models there.
    let default = load(&[("flue.toml", "[providers.openai]\n")])
        .config
        .providers["openai"]
        .to_config();
    assert_eq!(default.wire_api_of("gpt-4.1"), WireApi::OpenAiCompletions);
    assert_eq!(
        default.wire_api_of("gpt-5.1-codex"),
        WireApi::OpenAiResponses
    );
}

#[test]
fn anthropic_cannot_switch_to_an_openai_api() {
    check_diagnostics(
        &[(
            "flue.toml",
            "[providers.anthropic]\napi = \"openai-responses\"\n",
        )],
        &[at(
            "flue.toml",
            2,
            "the built-in provider `anthropic` speaks anthropic-messages; to use \
             openai-responses, declare a provider with another name",
        )],
    );
}
