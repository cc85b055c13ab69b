//! Logs, OpenTelemetry traces and metrics for Flue.
//!
//! [`Telemetry::init`] installs the process's `tracing` subscriber once, at start: readable log
//! lines on stderr filtered by `FLUE_LOG` (an `EnvFilter` directive such as `info` or
//! `flue_server=debug`), and, when `OTEL_EXPORTER_OTLP_ENDPOINT` (or a signal's own
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`) is set, a
//! [`GenAiLayer`] that turns the spans flue-core and flue-server open (target
//! [`flue_protocol::SPAN_TARGET`]) into OpenTelemetry spans and metrics, exported over OTLP/HTTP
//! with protobuf bodies. The standard `OTEL_*` variables (headers, timeout, service name,
//! resource attributes, batch and export intervals, `OTEL_SDK_DISABLED`) apply. With no
//! endpoint, nothing is exported and the layer is not installed: flue-core's spans stay
//! disabled. [`Telemetry::shutdown`] flushes what is buffered; call it before the process exits.
//!
//! ```no_run
//! let telemetry = flue_telemetry::Telemetry::init(&flue_telemetry::LogOptions::new("info"));
//! for warning in telemetry.warnings() {
//!     eprintln!("warning: {warning}");
//! }
//! // ... run the program ...
//! telemetry.shutdown();
//! ```
//!
//! Message contents (tool arguments and results, the model's reply) are recorded only when
//! `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` is `true`; known secrets are redacted
//! from them by flue-core either way.

// Only the binaries write to the terminal: flue-cli's stdout is a JSON contract, and an
// embedding application owns its own output.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod layer;
mod metrics;

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{MetricExporter, Protocol, SpanExporter, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::filter::{EnvFilter, filter_fn};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, Registry};

pub use layer::GenAiLayer;

/// The environment variable that filters log lines.
pub const LOG_ENV: &str = "FLUE_LOG";
/// The environment variable that turns on recording message contents in spans.
pub const CAPTURE_CONTENT_ENV: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";

/// How log lines look and what they show by default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogOptions {
    default_filter: String,
    bare: bool,
}

impl LogOptions {
    /// Lines with time, level and target, filtered by `FLUE_LOG`, else by `default_filter`
    /// (an `EnvFilter` directive: `info`, `off`, `flue::retry=info`).
    pub fn new(default_filter: &str) -> Self {
        Self {
            default_filter: default_filter.to_owned(),
            bare: false,
        }
    }

    /// Lines with the message and its fields only (for a terminal user, e.g. `flue run -v`).
    #[must_use]
    pub fn with_bare_lines(mut self) -> Self {
        self.bare = true;
        self
    }
}

/// The process's logging and telemetry; flush it with [`Telemetry::shutdown`] before exit.
#[derive(Debug, Default)]
pub struct Telemetry {
    tracer_provider: Option<SdkTracerProvider>,
    meter_provider: Option<SdkMeterProvider>,
    warnings: Vec<String>,
}

/// What the `OTEL_*` variables ask for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExportSettings {
    /// Export traces.
    pub traces: bool,
    /// Export metrics.
    pub metrics: bool,
    /// Record message contents in spans.
    pub capture_content: bool,
}

impl ExportSettings {
    /// Reads the settings through `var` (the process environment in [`Telemetry::init`]).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Self {
        let set = |name: &str| var(name).is_some_and(|value| !value.trim().is_empty());
        let is = |name: &str, expected: &str| {
            var(name).is_some_and(|value| value.trim().eq_ignore_ascii_case(expected))
        };
        if is("OTEL_SDK_DISABLED", "true") {
            return Self::default();
        }
        let any_endpoint = set("OTEL_EXPORTER_OTLP_ENDPOINT");
        Self {
            traces: (any_endpoint || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
                && !is("OTEL_TRACES_EXPORTER", "none"),
            metrics: (any_endpoint || set("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"))
                && !is("OTEL_METRICS_EXPORTER", "none"),
            capture_content: is(CAPTURE_CONTENT_ENV, "true"),
        }
    }
}

impl Telemetry {
    /// Installs the global `tracing` subscriber: log lines on stderr filtered by `FLUE_LOG`
    /// (the options' default filter when unset or invalid), plus OTLP export when the `OTEL_*`
    /// variables ask for it. Call once, at start; a second call installs nothing. Never fails:
    /// problems (an invalid `FLUE_LOG`, an exporter that cannot be built) are returned as
    /// warnings.
    pub fn init(options: &LogOptions) -> Self {
        let default_filter = options.default_filter.as_str();
        let settings = ExportSettings::from_vars(|name| std::env::var(name).ok());
        let mut warnings = Vec::new();
        let filter = match std::env::var(LOG_ENV) {
            Ok(directives) => EnvFilter::try_new(&directives).unwrap_or_else(|err| {
                warnings.push(format!(
                    "{LOG_ENV}={directives:?} is not a valid filter ({err}); using \
                     {default_filter:?}"
                ));
                EnvFilter::new(default_filter)
            }),
            Err(_) => EnvFilter::new(default_filter),
        };
        // Telemetry spans never reach log lines: their fields (contents among them) would be
        // formatted into every line logged inside them, and cost time when nothing exports.
        let filter = match format!("{}=off", flue_protocol::SPAN_TARGET).parse() {
            Ok(directive) => filter.add_directive(directive),
            Err(_) => filter,
        };
        let fmt_layer = if options.bare {
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(false)
                .without_time()
                .with_target(false)
                .with_level(false)
                .with_filter(filter)
                .boxed()
        } else {
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(false)
                .with_filter(filter)
                .boxed()
        };
        let mut telemetry = Self::default();
        if settings.traces || settings.metrics {
            // reqwest's rustls needs a process-wide crypto provider for https endpoints; an
            // already installed one is kept.
            let _ = rustls::crypto::ring::default_provider().install_default();
            let protocol = std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL").unwrap_or_default();
            if !protocol.is_empty() && protocol != "http/protobuf" {
                warnings.push(format!(
                    "OTEL_EXPORTER_OTLP_PROTOCOL={protocol:?} is not supported; exporting \
                     http/protobuf"
                ));
            }
            let resource = resource();
            if settings.traces {
                match SpanExporter::builder()
                    .with_http()
                    .with_protocol(Protocol::HttpBinary)
                    .build()
                {
                    Ok(exporter) => {
                        telemetry.tracer_provider = Some(
                            SdkTracerProvider::builder()
                                .with_batch_exporter(exporter)
                                .with_resource(resource.clone())
                                .build(),
                        );
                    }
                    Err(err) => warnings.push(format!("cannot export traces: {err}")),
                }
            }
            if settings.metrics {
                match MetricExporter::builder()
                    .with_http()
                    .with_protocol(Protocol::HttpBinary)
                    .build()
                {
                    Ok(exporter) => {
                        telemetry.meter_provider = Some(
                            SdkMeterProvider::builder()
                                .with_periodic_exporter(exporter)
                                .with_resource(resource)
                                .build(),
                        );
                    }
                    Err(err) => warnings.push(format!("cannot export metrics: {err}")),
                }
            }
        }
        let genai_layer = (telemetry.tracer_provider.is_some()
            || telemetry.meter_provider.is_some())
        .then(|| {
            GenAiLayer::new(
                telemetry
                    .tracer_provider
                    .as_ref()
                    .map(|provider| provider.tracer("flue")),
                telemetry.meter_provider.as_ref(),
                settings.capture_content,
            )
            .with_filter(filter_fn(|metadata| {
                metadata.target() == flue_protocol::SPAN_TARGET
            }))
        });
        let _ = Registry::default()
            .with(fmt_layer)
            .with(genai_layer)
            .try_init();
        telemetry.warnings = warnings;
        telemetry
    }

    /// Problems found while setting up (shown once by the caller).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// True when spans or metrics are exported.
    pub fn exporting(&self) -> bool {
        self.tracer_provider.is_some() || self.meter_provider.is_some()
    }

    /// Exports what is buffered and stops the exporters (bounded: a few seconds at most per
    /// signal). Call outside any async runtime, before the process exits.
    pub fn shutdown(self) {
        const GRACE: Duration = Duration::from_secs(5);
        if let Some(provider) = self.tracer_provider {
            let _ = provider.shutdown_with_timeout(GRACE);
        }
        if let Some(provider) = self.meter_provider {
            let _ = provider.shutdown_with_timeout(GRACE);
        }
    }
}

/// The resource: `service.name` `flue` unless `OTEL_SERVICE_NAME` or
/// `OTEL_RESOURCE_ATTRIBUTES` name one, plus the SDK's and the environment's attributes.
fn resource() -> Resource {
    let named = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|name| !name.is_empty())
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES")
            .is_ok_and(|attributes| attributes.contains("service.name="));
    let builder = Resource::builder();
    if named {
        builder.build()
    } else {
        builder.with_service_name("flue").build()
    }
}

#[cfg(test)]
mod tests;
