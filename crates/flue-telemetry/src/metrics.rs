//! The instruments [`crate::GenAiLayer`] records into: GenAI client metrics (operation
//! duration, token usage, time to first chunk) and Flue's own (cost, operation and tool
//! durations, tool errors, submissions by state, active SSE streams).

use opentelemetry::metrics::{Counter, Histogram, Meter, MeterProvider as _, UpDownCounter};
use opentelemetry_sdk::metrics::SdkMeterProvider;

/// Durations in seconds: the GenAI conventions' advisory buckets.
const DURATION_BUCKETS: &[f64] = &[
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];
/// Token counts: the GenAI conventions' advisory buckets.
const TOKEN_BUCKETS: &[f64] = &[
    1.0,
    4.0,
    16.0,
    64.0,
    256.0,
    1024.0,
    4096.0,
    16384.0,
    65536.0,
    262_144.0,
    1_048_576.0,
    4_194_304.0,
    16_777_216.0,
    67_108_864.0,
];

/// Every instrument, created once from the meter provider.
pub(crate) struct Instruments {
    /// `gen_ai.client.operation.duration`: a model call, in seconds.
    pub(crate) chat_duration: Histogram<f64>,
    /// `gen_ai.client.token.usage`: tokens per model call, by `gen_ai.token.type`.
    pub(crate) token_usage: Histogram<u64>,
    /// `gen_ai.client.operation.time_to_first_chunk`: seconds to the first streamed delta.
    pub(crate) time_to_first_chunk: Histogram<f64>,
    /// `flue.usage.cost`: US dollars spent on model calls (when the price is known).
    pub(crate) cost: Counter<f64>,
    /// `flue.operation.duration`: an operation (`invoke_agent`), in seconds.
    pub(crate) operation_duration: Histogram<f64>,
    /// `flue.tool.duration`: a tool call, in seconds.
    pub(crate) tool_duration: Histogram<f64>,
    /// `flue.tool.errors`: tool calls that failed, by `error.type`.
    pub(crate) tool_errors: Counter<u64>,
    /// `flue.submissions.queued`: admitted here, not yet started.
    pub(crate) submissions_queued: UpDownCounter<i64>,
    /// `flue.submissions.running`: attempts in progress.
    pub(crate) submissions_running: UpDownCounter<i64>,
    /// `flue.submissions.settled`: settlements, by `flue.outcome`.
    pub(crate) submissions_settled: Counter<u64>,
    /// `flue.sse.active`: open SSE streams of the HTTP API.
    pub(crate) sse_active: UpDownCounter<i64>,
}

impl Instruments {
    pub(crate) fn new(provider: &SdkMeterProvider) -> Self {
        let meter: Meter = provider.meter("flue");
        Self {
            chat_duration: meter
                .f64_histogram("gen_ai.client.operation.duration")
                .with_unit("s")
                .with_description("Duration of GenAI client operations (model calls)")
                .with_boundaries(DURATION_BUCKETS.to_vec())
                .build(),
            token_usage: meter
                .u64_histogram("gen_ai.client.token.usage")
                .with_unit("{token}")
                .with_description("Tokens used per model call, by gen_ai.token.type")
                .with_boundaries(TOKEN_BUCKETS.to_vec())
                .build(),
            time_to_first_chunk: meter
                .f64_histogram("gen_ai.client.operation.time_to_first_chunk")
                .with_unit("s")
                .with_description("Time from the model request to the first streamed delta")
                .with_boundaries(DURATION_BUCKETS.to_vec())
                .build(),
            cost: meter
                .f64_counter("flue.usage.cost")
                .with_unit("USD")
                .with_description("Estimated cost of model calls from the model catalog's prices")
                .build(),
            operation_duration: meter
                .f64_histogram("flue.operation.duration")
                .with_unit("s")
                .with_description("Duration of agent operations (prompt, skill, task)")
                .with_boundaries(DURATION_BUCKETS.to_vec())
                .build(),
            tool_duration: meter
                .f64_histogram("flue.tool.duration")
                .with_unit("s")
                .with_description("Duration of tool calls")
                .with_boundaries(DURATION_BUCKETS.to_vec())
                .build(),
            tool_errors: meter
                .u64_counter("flue.tool.errors")
                .with_unit("{call}")
                .with_description("Tool calls that returned an error")
                .build(),
            submissions_queued: meter
                .i64_up_down_counter("flue.submissions.queued")
                .with_unit("{submission}")
                .with_description("Submissions admitted by this process and not yet started")
                .build(),
            submissions_running: meter
                .i64_up_down_counter("flue.submissions.running")
                .with_unit("{submission}")
                .with_description("Submission attempts running in this process")
                .build(),
            submissions_settled: meter
                .u64_counter("flue.submissions.settled")
                .with_unit("{submission}")
                .with_description("Submissions settled, by flue.outcome")
                .build(),
            sse_active: meter
                .i64_up_down_counter("flue.sse.active")
                .with_unit("{stream}")
                .with_description("Open server-sent-event streams of the HTTP API")
                .build(),
        }
    }
}
