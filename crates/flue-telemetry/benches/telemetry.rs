//! The cost of telemetry per operation: a scripted tool round trip (2 model turns, one
//! `read_file`) on the memory store with no subscriber, with the CLI's subscriber and export
//! off (`FLUE_LOG` off, no endpoint), and with the `GenAiLayer` exporting spans (to an exporter
//! that drops them) and recording metrics. Rounds alternate the three so that a busy machine
//! weighs on all of them alike.
//!
//! Run with `cargo bench -p flue-telemetry --bench telemetry`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark fails loudly"
)]
#![allow(
    missing_docs,
    clippy::print_stdout,
    reason = "a benchmark binary reports on stdout"
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use flue_core::{
    AgentConfig, Harness, LocalSandbox, MemoryStore, PromptOptions, ProviderRegistry,
    ScriptedProvider,
};
use flue_telemetry::GenAiLayer;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{SdkMeterProvider, Temporality};
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use tracing::Dispatch;
use tracing_subscriber::filter::{EnvFilter, filter_fn};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::{Layer, Registry};

const SCRIPT: &str = r#"{
  "rules": [
    {"when": {"tool_result": "read_file"}, "reply": {"text": "The file says: {{tool_result}}"}},
    {"reply": {"tool_calls": [{"name": "read_file", "input": {"path": "note.txt"}}]}}
  ]
}"#;

/// Drops every batch: the cost measured is the layer's and the SDK's, not the network's.
#[derive(Debug)]
struct DropExporter;

impl SpanExporter for DropExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        drop(batch);
        Ok(())
    }
}

impl PushMetricExporter for DropExporter {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let _ = metrics;
        Ok(())
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }

    fn temporality(&self) -> Temporality {
        Temporality::Cumulative
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("script.json"), SCRIPT).unwrap();
    std::fs::write(dir.path().join("note.txt"), "benchmarks are data").unwrap();
    let harness = runtime.block_on(async {
        let providers =
            ProviderRegistry::new().with_provider(Arc::new(ScriptedProvider::new(dir.path())));
        let agent = AgentConfig::new()
            .with_model("scripted/script.json")
            .with_tools(flue_core::tool::builtin_tools(&["read_file".to_owned()]).unwrap());
        Harness::builder(agent)
            .with_store(Arc::new(MemoryStore::new()))
            .with_providers(providers)
            .with_sandbox(Arc::new(LocalSandbox::new(dir.path()).unwrap()))
            .build()
            .await
            .unwrap()
    });

    let off = Dispatch::new(
        Registry::default().with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::sink)
                .with_filter(EnvFilter::new("off")),
        ),
    );
    let tracer_provider = SdkTracerProvider::builder()
        .with_batch_exporter(DropExporter)
        .build();
    let meter_provider = SdkMeterProvider::builder()
        .with_periodic_exporter(DropExporter)
        .build();
    let on = Dispatch::new(
        Registry::default()
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::sink)
                    .with_filter(EnvFilter::new("off")),
            )
            .with(
                GenAiLayer::new(
                    Some(tracer_provider.tracer("flue")),
                    Some(&meter_provider),
                    false,
                )
                .with_filter(filter_fn(|metadata| {
                    metadata.target() == flue_core::spans::SPAN_TARGET
                })),
            ),
    );
    let configs: [(&str, Option<&Dispatch>); 3] = [
        ("no subscriber", None),
        ("CLI subscriber, export off", Some(&off)),
        ("GenAiLayer, spans + metrics", Some(&on)),
    ];
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); configs.len()];
    let mut session_idx = 0u32;
    for _round in 0..10 {
        for (config_idx, (_, dispatch)) in configs.iter().enumerate() {
            for _ in 0..50 {
                session_idx += 1;
                let run = async {
                    let session = harness.session(&format!("s{session_idx}")).await.unwrap();
                    let started = Instant::now();
                    session
                        .prompt("read the note", PromptOptions::default())
                        .await
                        .unwrap();
                    started.elapsed()
                };
                let elapsed = match dispatch {
                    Some(dispatch) => {
                        tracing::dispatcher::with_default(dispatch, || runtime.block_on(run))
                    }
                    None => runtime.block_on(run),
                };
                samples[config_idx].push(elapsed);
            }
        }
    }
    for ((name, _), samples) in configs.iter().zip(&mut samples) {
        samples.sort();
        let total: Duration = samples.iter().sum();
        let mean = total / u32::try_from(samples.len()).unwrap();
        let median = samples[samples.len() / 2];
        println!(
            "tool round trip (2 turns), {name}: mean {:.1} µs, median {:.1} µs, n={}",
            mean.as_secs_f64() * 1e6,
            median.as_secs_f64() * 1e6,
            samples.len()
        );
    }
    let _ = tracer_provider.shutdown();
    let _ = meter_provider.shutdown();
}
