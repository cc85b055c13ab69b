//! Unit tests of the catalog lookups.

use pretty_assertions::assert_eq;

use super::{ANTHROPIC_MODELS, BUILTIN_PROVIDERS, OPENAI_MODELS};

#[test]
fn ids_are_unique_and_limits_are_sane() {
    for catalog in [ANTHROPIC_MODELS, OPENAI_MODELS] {
        let mut ids: Vec<&str> = catalog.iter().map(|entry| entry.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), catalog.len());
        for entry in catalog {
            let info = entry.info();
            assert!(
                info.max_output_tokens <= info.context_window,
                "{}",
                entry.id
            );
            assert!(
                info.price.is_some_and(|price| price.input > 0.0),
                "{}",
                entry.id
            );
        }
    }
    let mut ids: Vec<&str> = BUILTIN_PROVIDERS.iter().map(|p| p.id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), BUILTIN_PROVIDERS.len());
}

#[test]
fn responses_only_models_are_routed_there_and_the_rest_stay_on_chat_completions() {
    use super::OPENAI_RESPONSES_MODELS;
    use crate::provider_config::{ProviderConfig, WireApi};
    for entry in OPENAI_RESPONSES_MODELS {
        assert!(
            OPENAI_MODELS.iter().all(|chat| chat.id != entry.id),
            "{} is in both tables",
            entry.id
        );
        let info = entry.info();
        assert!(
            info.max_output_tokens <= info.context_window,
            "{}",
            entry.id
        );
        assert!(
            info.price.is_some_and(|price| price.input > 0.0),
            "{}",
            entry.id
        );
    }
    let openai = ProviderConfig::builtin("openai").unwrap();
    assert_eq!(openai.api, WireApi::OpenAiCompletions);
    for (model, api) in [
        ("gpt-5.1-codex", WireApi::OpenAiResponses),
        ("o3-pro-2025-06-10", WireApi::OpenAiResponses),
        ("gpt-5", WireApi::OpenAiCompletions),
        ("gpt-4.1", WireApi::OpenAiCompletions),
        ("some-new-model", WireApi::OpenAiCompletions),
    ] {
        assert_eq!(openai.wire_api_of(model), api, "{model}");
    }
    // A provider switched to the Responses API sends every model there.
    let all = openai.with_api(WireApi::OpenAiResponses);
    assert_eq!(all.wire_api_of("gpt-4.1"), WireApi::OpenAiResponses);
    // Other built-ins have no Responses-only models.
    let groq = ProviderConfig::builtin("groq").unwrap();
    assert_eq!(
        groq.wire_api_of("gpt-5.1-codex"),
        WireApi::OpenAiCompletions
    );
}
