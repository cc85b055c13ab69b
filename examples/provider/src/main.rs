//! Embedding flue with a real model provider: Anthropic's Messages API from flue-providers,
//! conversations kept in a SQLite file by flue-store, and a hook that sees every model call
//! and the final reply. Each run sends one message to the same conversation, so a second run
//! continues the first.
//!
//! ```sh
//! ANTHROPIC_API_KEY=sk-ant-... cargo run -p flue-example-provider -- conversations.db "Hello!"
//! ```
//!
//! The reply goes to stdout; the hook's lines and what was stored go to stderr.
//! `ANTHROPIC_BASE_URL` points the provider at another server (a proxy, or the local server
//! replaying a recorded stream that this example's test runs it against).

use std::path::PathBuf;
use std::sync::Arc;

use flue_core::hook::{HookDecision, HookEvent, HookPoint, hook_fn};
use flue_core::{AgentConfig, Harness, PromptOptions, ProviderRegistry};
use flue_providers::{ApiKey, ProviderConfig};
use flue_store::SqliteStore;

/// The model the agent runs on, `<provider>/<model>`.
const MODEL: &str = "anthropic/claude-sonnet-4-5";

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let db_path = PathBuf::from(args.next().unwrap_or_else(|| "conversations.db".to_owned()));
    let message = args
        .next()
        .unwrap_or_else(|| "Hello, how are you?".to_owned());

    // flue-providers reads no environment: the program hands it the key (and the URL).
    let key = std::env::var("ANTHROPIC_API_KEY").map_err(|_| "set ANTHROPIC_API_KEY")?;
    let mut anthropic = ProviderConfig::builtin("anthropic")
        .ok_or("no built-in anthropic provider")?
        .with_api_key(ApiKey::new(key));
    if let Ok(base_url) = std::env::var("ANTHROPIC_BASE_URL") {
        anthropic = anthropic.with_base_url(base_url);
    }
    let providers = ProviderRegistry::new().with_provider(anthropic.build()?);

    // A hook is asked at fixed points of the agent loop; this one only watches.
    let watcher = hook_fn(
        "watcher",
        &[HookPoint::BeforeModelCall, HookPoint::Stop],
        |event, ctx| async move {
            match &event {
                HookEvent::BeforeModelCall { turn, model } => {
                    eprintln!("hook: model call {turn} of {} to {model}", ctx.instance_id);
                }
                _ => eprintln!("hook: {} replied", ctx.agent),
            }
            Ok(HookDecision::proceed())
        },
    );

    let store = Arc::new(SqliteStore::open(&db_path)?);
    let agent = AgentConfig::new()
        .with_name("assistant")
        .with_model(MODEL)
        .with_instructions("You are a friendly assistant. Answer briefly.")
        .with_hook(watcher);
    let harness = Harness::builder(agent)
        .with_instance_id("example")
        .with_providers(providers)
        .with_store(store)
        .build()
        .await?;

    let session = harness.session("default").await?;
    let reply = session.prompt(&message, PromptOptions::default()).await?;
    println!("{}", reply.text);
    eprintln!(
        "stored: {} records in {}",
        session.records().await.len(),
        db_path.display()
    );
    Ok(())
}
