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
