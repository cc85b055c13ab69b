//! Embedding flue-core: an agent with a custom Rust tool, driven by a scripted model.
//!
//! Run it with `cargo run -p flue-example-library`. It needs no network and no API key.

use std::sync::Arc;

use flue_core::{
    AgentConfig, Event, Harness, LocalSandbox, MemoryStore, PromptOptions, ProviderRegistry,
    ScriptedProvider, ToolDefinition, ToolError,
};
use serde_json::json;

/// Input of the `weather` tool; its JSON Schema is derived from this type.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct WeatherInput {
    /// City name.
    city: String,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The example's own folder holds the script; the sandbox is a scratch directory.
    let example_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let scratch = std::env::temp_dir().join(format!("flue-library-example-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;

    let weather = ToolDefinition::from_fn(
        "weather",
        "Current weather for a city.",
        |input: WeatherInput, _ctx| async move {
            Ok::<_, ToolError>(json!({"city": input.city, "sky": "clear", "celsius": 21}))
        },
    )?;
    let agent = AgentConfig::new()
        .with_name("forecaster")
        .with_model("scripted/script.json")
        .with_instructions("You answer weather questions with the weather tool.")
        .with_tool(weather);
    let providers =
        ProviderRegistry::new().with_provider(Arc::new(ScriptedProvider::new(example_dir)));
    let harness = Harness::builder(agent)
        .with_store(Arc::new(MemoryStore::new()))
        .with_providers(providers)
        .with_sandbox(Arc::new(LocalSandbox::new(&scratch)?))
        .build()
        .await?;

    let session = harness.session("default").await?;
    let mut handle = session.prompt("What's the weather in Lisbon?", PromptOptions::default());
    if let Some(mut events) = handle.take_events() {
        tokio::spawn(async move {
            while let Some(event) = events.recv().await {
                if let Event::ToolStart { name, input, .. } = event {
                    eprintln!("tool call: {name} {input}");
                }
            }
        });
    }
    let response = handle.await?;
    println!("{}", response.text);
    eprintln!(
        "{} records stored; usage {:?}",
        session.records().await.len(),
        response.usage
    );
    std::fs::remove_dir_all(&scratch)?;
    Ok(())
}
