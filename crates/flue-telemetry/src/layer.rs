//! [`GenAiLayer`]: a `tracing` layer that turns the spans flue-core and flue-server open into
//! OpenTelemetry spans (with their real start and end times) and into metrics.
//!
//! A span's OpenTelemetry name is its `otel.name` field, its kind `otel.kind`; every other
//! field becomes an attribute (`gen_ai.response.finish_reasons` a string array). Its parent is
//! the W3C `traceparent` in `flue.trace_parent` when there is one (an HTTP request joining its
//! caller's trace), else the nearest enclosing span this layer exported. `error.type` marks the
//! span failed. Content fields are dropped, unformatted, unless content capture is on.
//! `flue.sse` spans only count open streams; they are not exported.

use std::collections::HashMap;
use std::fmt;
use std::time::Instant;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{
    Span as _, SpanContext, SpanKind, Status, TraceContextExt, Tracer as _,
};
use opentelemetry::{Array, Context as OtelContext, KeyValue, StringValue, Value};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, Span as SdkSpan};
use tracing::Subscriber;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

use crate::metrics::Instruments;

/// Fields that carry message contents: recorded only with content capture on.
const CONTENT_FIELDS: &[&str] = &[
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "gen_ai.output.messages",
    "gen_ai.input.messages",
];

/// Turns flue's telemetry spans into OpenTelemetry spans and metrics. Install it filtered to
/// [`flue_protocol::SPAN_TARGET`] ([`crate::Telemetry::init`] does).
pub struct GenAiLayer {
    tracer: Option<SdkTracer>,
    instruments: Option<Instruments>,
    capture_content: bool,
}

impl fmt::Debug for GenAiLayer {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("GenAiLayer")
            .field("traces", &self.tracer.is_some())
            .field("metrics", &self.instruments.is_some())
            .field("capture_content", &self.capture_content)
            .finish()
    }
}

impl GenAiLayer {
    /// A layer exporting spans through `tracer` and metrics through `meter_provider` (either
    /// may be absent), recording message contents only with `capture_content`.
    pub fn new(
        tracer: Option<SdkTracer>,
        meter_provider: Option<&SdkMeterProvider>,
        capture_content: bool,
    ) -> Self {
        Self {
            tracer,
            instruments: meter_provider.map(Instruments::new),
            capture_content,
        }
    }
}

/// What the layer keeps in a span's extensions.
struct SpanData {
    /// The exported span; `None` when traces are off or for metric-only spans.
    otel: Option<SdkSpan>,
    /// This span's context, for its children (also when traces are off: it is invalid then).
    context: SpanContext,
    started: Instant,
    attributes: HashMap<&'static str, Value>,
    /// A submission span: whether an attempt has started (it left the queue).
    started_attempt: bool,
}

impl SpanData {
    fn str(&self, key: &str) -> Option<&str> {
        match self.attributes.get(key) {
            Some(Value::String(value)) => Some(value.as_str()),
            _ => None,
        }
    }

    fn f64(&self, key: &str) -> Option<f64> {
        match self.attributes.get(key) {
            Some(Value::F64(value)) => Some(*value),
            #[allow(clippy::cast_precision_loss, reason = "token counts and costs fit")]
            Some(Value::I64(value)) => Some(*value as f64),
            _ => None,
        }
    }

    fn u64(&self, key: &str) -> Option<u64> {
        match self.attributes.get(key) {
            Some(Value::I64(value)) => u64::try_from(*value).ok(),
            _ => None,
        }
    }

    /// Attributes named in `keys` that the span has, for a metric.
    fn dimensions(&self, keys: &[&'static str]) -> Vec<KeyValue> {
        keys.iter()
            .filter_map(|key| {
                self.attributes
                    .get(key)
                    .map(|value| KeyValue::new(*key, value.clone()))
            })
            .collect()
    }
}

/// Collects a span's fields.
struct Fields<'a> {
    capture_content: bool,
    name: Option<String>,
    kind: Option<String>,
    trace_parent: Option<String>,
    attributes: &'a mut HashMap<&'static str, Value>,
}

impl Fields<'_> {
    fn put(&mut self, field: &Field, value: Value) {
        match field.name() {
            "otel.name" => self.name = Some(value.as_str().into_owned()),
            "otel.kind" => self.kind = Some(value.as_str().into_owned()),
            "flue.trace_parent" => self.trace_parent = Some(value.as_str().into_owned()),
            "gen_ai.response.finish_reasons" => {
                let reasons = Array::String(vec![StringValue::from(value.as_str().into_owned())]);
                self.attributes.insert(field.name(), Value::Array(reasons));
            }
            name => {
                self.attributes.insert(name, value);
            }
        }
    }

    fn wanted(&self, field: &Field) -> bool {
        self.capture_content || !CONTENT_FIELDS.contains(&field.name())
    }
}

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if self.wanted(field) {
            self.put(field, Value::from(value.to_owned()));
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::I64(i64::try_from(value).unwrap_or(i64::MAX)));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::I64(value));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, Value::F64(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::Bool(value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // Content is formatted (and redacted) only here, and only when it is wanted.
        if self.wanted(field) {
            self.put(field, Value::from(format!("{value:?}")));
        }
    }
}

fn span_kind(kind: Option<&str>) -> SpanKind {
    match kind {
        Some("client") => SpanKind::Client,
        Some("server") => SpanKind::Server,
        Some("producer") => SpanKind::Producer,
        Some("consumer") => SpanKind::Consumer,
        _ => SpanKind::Internal,
    }
}

/// The remote parent a W3C `traceparent` names, if it is valid.
fn remote_parent(trace_parent: &str) -> Option<OtelContext> {
    let carrier = HashMap::from([("traceparent".to_owned(), trace_parent.to_owned())]);
    let context = TraceContextPropagator::new().extract(&carrier);
    context.span().span_context().is_valid().then_some(context)
}

impl<S> Layer<S> for GenAiLayer
where
    S: Subscriber + for<'lookup> LookupSpan<'lookup>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        let name = attrs.metadata().name();
        if name == "flue.sse" {
            if let Some(instruments) = &self.instruments {
                instruments.sse_active.add(1, &[]);
            }
            return;
        }
        let mut attributes = HashMap::new();
        let mut fields = Fields {
            capture_content: self.capture_content,
            name: None,
            kind: None,
            trace_parent: None,
            attributes: &mut attributes,
        };
        attrs.record(&mut fields);
        let Fields {
            name: otel_name,
            kind,
            trace_parent,
            ..
        } = fields;
        let parent_context = match trace_parent.as_deref().and_then(remote_parent) {
            Some(context) => context,
            None => span
                .parent()
                .and_then(|parent| {
                    parent.scope().find_map(|ancestor| {
                        ancestor
                            .extensions()
                            .get::<SpanData>()
                            .map(|data| data.context.clone())
                    })
                })
                .filter(SpanContext::is_valid)
                .map_or_else(OtelContext::new, |context| {
                    OtelContext::new().with_remote_span_context(context)
                }),
        };
        if let Some(instruments) = &self.instruments {
            match name {
                "flue.submission" => instruments.submissions_queued.add(1, &[]),
                "flue.attempt" => {
                    instruments.submissions_running.add(1, &[]);
                    if let Some(parent) = span.parent() {
                        let mut extensions = parent.extensions_mut();
                        if let Some(data) = extensions.get_mut::<SpanData>()
                            && !data.started_attempt
                        {
                            data.started_attempt = true;
                            instruments.submissions_queued.add(-1, &[]);
                        }
                    }
                }
                _ => {}
            }
        }
        let otel = self.tracer.as_ref().map(|tracer| {
            let span_name = otel_name.unwrap_or_else(|| name.to_owned());
            tracer
                .span_builder(span_name)
                .with_kind(span_kind(kind.as_deref()))
                .with_attributes(
                    attributes
                        .iter()
                        .map(|(key, value)| KeyValue::new(*key, value.clone())),
                )
                .start_with_context(tracer, &parent_context)
        });
        let context = otel
            .as_ref()
            .map_or_else(SpanContext::empty_context, |otel| {
                otel.span_context().clone()
            });
        span.extensions_mut().insert(SpanData {
            otel,
            context,
            started: Instant::now(),
            attributes,
            started_attempt: false,
        });
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        let mut extensions = span.extensions_mut();
        let Some(data) = extensions.get_mut::<SpanData>() else {
            return;
        };
        let mut recorded = HashMap::new();
        let mut fields = Fields {
            capture_content: self.capture_content,
            name: None,
            kind: None,
            trace_parent: None,
            attributes: &mut recorded,
        };
        values.record(&mut fields);
        let name = fields.name.take();
        let end_now = recorded.remove("flue.end").is_some();
        if let Some(otel) = &mut data.otel {
            if let Some(name) = name {
                otel.update_name(name);
            }
            for (key, value) in &recorded {
                otel.set_attribute(KeyValue::new(*key, value.clone()));
            }
        }
        data.attributes.extend(recorded);
        if end_now {
            // The span's work is over although children (admitted work) live on: end the
            // exported span now; its context stays for those children.
            end_otel(data);
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else {
            return;
        };
        let name = span.metadata().name();
        if name == "flue.sse" {
            if let Some(instruments) = &self.instruments {
                instruments.sse_active.add(-1, &[]);
            }
            return;
        }
        let Some(mut data) = span.extensions_mut().remove::<SpanData>() else {
            return;
        };
        if let Some(instruments) = &self.instruments {
            record_metrics(instruments, name, &data);
        }
        end_otel(&mut data);
    }
}

/// Ends a span's exported span (once), failed when it has an `error.type`.
fn end_otel(data: &mut SpanData) {
    if let Some(mut otel) = data.otel.take() {
        if let Some(error) = data.str("error.type") {
            otel.set_status(Status::error(error.to_owned()));
        }
        otel.end();
    }
}

/// The metrics of a span that just ended.
fn record_metrics(instruments: &Instruments, name: &str, data: &SpanData) {
    let seconds = data.started.elapsed().as_secs_f64();
    match name {
        "chat" => {
            let dimensions = data.dimensions(&[
                "gen_ai.operation.name",
                "gen_ai.provider.name",
                "gen_ai.request.model",
                "gen_ai.response.model",
                "error.type",
            ]);
            instruments.chat_duration.record(seconds, &dimensions);
            for (field, token_type) in [
                ("gen_ai.usage.input_tokens", "input"),
                ("gen_ai.usage.output_tokens", "output"),
            ] {
                if let Some(tokens) = data.u64(field) {
                    let mut token_dimensions = dimensions.clone();
                    token_dimensions.push(KeyValue::new("gen_ai.token.type", token_type));
                    instruments.token_usage.record(tokens, &token_dimensions);
                }
            }
            if let Some(first) = data.f64("gen_ai.response.time_to_first_chunk") {
                instruments.time_to_first_chunk.record(first, &dimensions);
            }
            if let Some(cost) = data.f64("flue.usage.cost_usd") {
                instruments.cost.add(cost, &dimensions);
            }
        }
        "invoke_agent" => {
            let dimensions = data.dimensions(&[
                "gen_ai.agent.name",
                "flue.operation",
                "flue.outcome",
                "error.type",
            ]);
            instruments.operation_duration.record(seconds, &dimensions);
        }
        "execute_tool" => {
            let dimensions = data.dimensions(&["gen_ai.tool.name", "error.type"]);
            instruments.tool_duration.record(seconds, &dimensions);
            if data.attributes.contains_key("error.type") {
                instruments.tool_errors.add(1, &dimensions);
            }
        }
        "flue.attempt" => instruments.submissions_running.add(-1, &[]),
        "flue.submission" => {
            if !data.started_attempt {
                instruments.submissions_queued.add(-1, &[]);
            }
            let dimensions = data.dimensions(&["gen_ai.agent.name", "flue.outcome", "error.type"]);
            instruments.submissions_settled.add(1, &dimensions);
        }
        _ => {}
    }
}
