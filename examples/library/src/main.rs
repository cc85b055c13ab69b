//! Embedding flue-core: an agent configured per instance by an initializer, with a custom Rust
//! tool that emits structured data for UI readers and an action that writes a brief in a
//! session of its own, driven by a scripted model.
//!
//! Run it with `cargo run -p flue-example-library`. It needs no network and no API key. It
//! prints the reply on stdout, and on stderr the tool calls, the data the tool and the action
//! emitted, and the sessions stored (the action's lives apart from the caller's).

use std::sync::Arc;

use flue_core::{
    ActionDefinition, AgentConfig, Event, Harness, LocalSandbox, MemoryStore, PromptOptions,
    ProviderRegistry, ScriptedProvider, ToolDefinition, ToolError,
};
use serde_json::json;

/// Input of the `weather` tool; its JSON Schema is derived from this type.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct WeatherInput {
    /// City name.
    city: String,
}

/// Input of the `brief` action: what the weather tool reported.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct BriefInput {
    /// City name.
    city: String,
    /// The sky, in a word.
    sky: String,
    /// Temperature in degrees Celsius.
    celsius: i64,
}

/// The platform bindings this program hands its initializer: the desk of each instance.
struct Desks {
    /// (instance id, the desk's home city)
    homes: Vec<(&'static str, &'static str)>,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The example's own folder holds the script; the sandbox is a scratch directory.
    let example_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let scratch = std::env::temp_dir().join(format!("flue-library-example-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;

    let providers =
        ProviderRegistry::new().with_provider(Arc::new(ScriptedProvider::new(example_dir)));
    // The initializer runs whenever a harness is built for an instance: the configuration
    // can depend on the instance id and on the bindings.
    let harness = Harness::initialized_by(|ctx| {
        let home = ctx
            .env::<Desks>()
            .and_then(|desks| desks.homes.iter().find(|(id, _)| *id == ctx.id))
            .map_or("anywhere", |(_, city)| *city);
        Ok(AgentConfig::new()
            .with_name("forecaster")
            .with_model("scripted/script.json")
            .with_instructions(format!(
                "You answer weather questions with the weather tool. Your desk is in {home}."
            ))
            .with_tool(weather_tool(home)?)
            .with_action(brief_action()?))
    })
    .with_env(Arc::new(Desks {
        homes: vec![("lisbon-desk", "Lisbon")],
    }))
    .with_instance_id("lisbon-desk")
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
                match event {
                    Event::ToolStart { name, input, .. } => eprintln!("tool call: {name} {input}"),
                    Event::Data { name, data, .. } => eprintln!("data: {name} {data}"),
                    _ => {}
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
    let sessions: Vec<String> = harness
        .sessions()
        .list()
        .await?
        .into_iter()
        .map(|summary| summary.session)
        .collect();
    eprintln!("sessions: {}", sessions.join(", "));
    std::fs::remove_dir_all(&scratch)?;
    Ok(())
}

/// A custom tool: answers the model (naming the desk the initializer chose), emits a forecast
/// card for UI readers (never shown to the model) and logs through the tool logger.
fn weather_tool(desk: &'static str) -> flue_core::Result<ToolDefinition> {
    ToolDefinition::from_fn(
        "weather",
        "Current weather for a city.",
        move |input: WeatherInput, ctx| async move {
            ctx.logger().info(&format!("looking up {}", input.city));
            ctx.emit_data(
                "forecast",
                &json!({"city": input.city, "icon": "sun", "next_hours": [21, 22, 20]}),
            )?;
            Ok::<_, ToolError>(
                json!({"city": input.city, "sky": "clear", "celsius": 21, "desk": desk}),
            )
        },
    )
}

/// An action: reusable behaviour the model calls like a tool. It runs in a child scope of the
/// calling harness, opens a session of its own there (stored apart from the caller's), prompts
/// it, and returns the brief; its output is checked against the declared output schema.
fn brief_action() -> flue_core::Result<ActionDefinition> {
    ActionDefinition::from_fn(
        "brief",
        "Writes a one-line forecast brief from a weather report.",
        |input: BriefInput, ctx| async move {
            ctx.logger()
                .info(&format!("writing a brief for {}", input.city));
            let session = ctx.harness().session("brief").await?;
            let reply = session
                .prompt(
                    &format!(
                        "Write a one-line forecast brief: {}, {} sky, {} °C.",
                        input.city, input.sky, input.celsius
                    ),
                    PromptOptions::default(),
                )
                .await?;
            ctx.emit_data(
                "brief",
                &json!({"city": input.city, "words": reply.text.split_whitespace().count()}),
            )?;
            Ok::<_, ToolError>(json!({"brief": reply.text}))
        },
    )?
    .with_output_schema(json!({
        "type": "object",
        "properties": {"brief": {"type": "string"}},
        "required": ["brief"]
    }))
}
