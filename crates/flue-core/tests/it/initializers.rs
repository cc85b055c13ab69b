//! Agent initializers: the configuration is computed from the instance id and the platform
//! bindings every time a harness is built; an initializer's error fails the build.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use flue_core::{AgentConfig, FlueError, Harness, PromptOptions, ProviderRegistry};
use pretty_assertions::assert_eq;

use crate::rules::{Reply, RuleProvider};

/// The platform bindings of the test: which instances are premium.
struct Plans {
    premium: Vec<String>,
}

#[tokio::test]
async fn the_configuration_depends_on_the_instance_and_the_bindings() {
    let provider =
        RuleProvider::new(|seen| Reply::Text(format!("{} / {}", seen.model, seen.system)));
    let runs = Arc::new(AtomicUsize::new(0));
    let build = |id: &str| {
        let runs = Arc::clone(&runs);
        Harness::initialized_by(move |ctx| {
            runs.fetch_add(1, Ordering::SeqCst);
            if ctx.id == "banned" {
                return Err(FlueError::config("this instance is banned"));
            }
            let premium = ctx
                .env::<Plans>()
                .is_some_and(|plans| plans.premium.contains(&ctx.id));
            let model = if premium { "test/big" } else { "test/small" };
            Ok(AgentConfig::new()
                .with_model(model)
                .with_instructions(format!("You serve {}.", ctx.id)))
        })
        .with_env(Arc::new(Plans {
            premium: vec!["acme".into()],
        }))
        .with_providers(ProviderRegistry::new().with_provider(provider.clone()))
        .with_workspace_context(None)
        .with_instance_id(id)
    };
    for (id, expected) in [
        ("acme", "big / You serve acme."),
        ("globex", "small / You serve globex."),
        ("acme", "big / You serve acme."),
    ] {
        let harness = build(id).build().await.unwrap();
        let session = harness.session("default").await.unwrap();
        let reply = session
            .prompt("hi", PromptOptions::default())
            .await
            .unwrap();
        assert_eq!(reply.text, expected);
    }
    let err = build("banned").build().await.unwrap_err();
    assert_eq!(err.kind(), "invalid_config");
    assert_eq!(runs.load(Ordering::SeqCst), 4);
}
