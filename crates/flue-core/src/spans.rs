//! The `tracing` spans flue-core opens around its work, named and attributed after the
//! OpenTelemetry GenAI semantic conventions.
//!
//! flue-core depends on no OpenTelemetry crate. It opens plain `tracing` spans at INFO under the
//! target [`SPAN_TARGET`], each with an `otel.name` (`invoke_agent <agent>`, `chat <model>`,
//! `execute_tool <tool>`, `flue.submission`, `flue.attempt`) and `gen_ai.*` / `flue.*` fields,
//! and records results (usage, finish reason, outcome, `error.type`) on them as they become
//! known. A subscriber (the flue-telemetry crate) turns them into OpenTelemetry spans and
//! metrics. Nesting is `tracing`'s: operations run inside their submission's attempt, tool calls
//! inside their operation, a task's operation inside its `task` tool call. With no subscriber
//! interested in the target, every span here is disabled and costs a callsite check; nothing is
//! formatted. Content (tool arguments and results, the model's reply) is recorded as lazy
//! values, redacted when formatted, and only a subscriber that opts in formats them.

use std::fmt;
use std::time::Instant;

use flue_protocol::event::{OperationKind, Outcome};
use flue_protocol::record::{AssistantContent, StopReason, Usage};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::field::Empty;
use tracing::{Instrument, Span};

use crate::error::Result;
use crate::model::{ModelProvider, ModelRequest, ModelSpec, ModelTurn, TurnSink};
use crate::redact::Redactor;
use crate::util::or_cancel;

// The target every span here opens under, which a subscriber filters on.
pub use flue_protocol::SPAN_TARGET;

/// The span of one operation on a session: `invoke_agent <agent>` for model operations
/// (prompt, skill, task), `flue.operation <kind>` for shell and compact.
pub(crate) fn operation(
    kind: OperationKind,
    agent: &str,
    conversation: &str,
    session: &str,
    depth: u32,
) -> Span {
    let kind = kind.as_str();
    let model_operation = matches!(kind, "prompt" | "skill" | "task");
    let name = if model_operation {
        format!("invoke_agent {agent}")
    } else {
        format!("flue.operation {kind}")
    };
    tracing::info_span!(
        target: SPAN_TARGET,
        "invoke_agent",
        otel.name = name,
        otel.kind = "internal",
        gen_ai.operation.name = if model_operation { "invoke_agent" } else { "flue.operation" },
        gen_ai.agent.name = agent,
        gen_ai.conversation.id = conversation,
        flue.session = session,
        flue.operation = kind,
        flue.task.depth = depth,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.usage.cache_read.input_tokens = Empty,
        flue.usage.cost_usd = Empty,
        flue.outcome = Empty,
        error.type = Empty,
    )
}

/// Records how an operation (or a submission) ended on its span.
pub(crate) fn record_outcome(span: &Span, outcome: Outcome, error_kind: Option<&str>) {
    if span.is_disabled() {
        return;
    }
    span.record("flue.outcome", outcome.as_str());
    if let Some(kind) = error_kind {
        span.record("error.type", kind);
    }
}

/// Records token usage and cost on an operation or model-call span.
pub(crate) fn record_usage(span: &Span, usage: &Usage) {
    if span.is_disabled() {
        return;
    }
    // Input counts every input token, cached ones included (the GenAI convention).
    span.record(
        "gen_ai.usage.input_tokens",
        usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens,
    );
    span.record("gen_ai.usage.output_tokens", usage.output_tokens);
    span.record(
        "gen_ai.usage.cache_read.input_tokens",
        usage.cache_read_tokens,
    );
    if let Some(cost) = usage.cost_usd {
        span.record("flue.usage.cost_usd", cost);
    }
}

/// The span of one model call: `chat <model>`, a client span.
pub(crate) fn chat(provider: &str, model: &str) -> Span {
    tracing::info_span!(
        target: SPAN_TARGET,
        "chat",
        otel.name = format!("chat {model}"),
        otel.kind = "client",
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = provider,
        gen_ai.request.model = model,
        gen_ai.response.model = Empty,
        gen_ai.response.finish_reasons = Empty,
        gen_ai.response.time_to_first_chunk = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.usage.cache_read.input_tokens = Empty,
        flue.usage.cost_usd = Empty,
        gen_ai.output.messages = Empty,
        error.type = Empty,
    )
}

/// Runs one model call inside its `chat <model>` span, the way every caller (the agent loop,
/// compaction's summaries, MCP sampling) should: the time to the first chunk, finish reason,
/// usage and (for a subscriber that opts in) the redacted reply are recorded on the span, and a
/// usage without a cost gets the catalog price's. Text and thinking deltas reach `sink`
/// redacted of `redactor`'s secrets, a secret split across deltas included
/// ([`TurnSink::redacting`]). `cancel` ends the call as `aborted`.
///
/// # Errors
///
/// The provider's error, or [`FlueError::Aborted`](crate::error::FlueError::Aborted) on `cancel`; its
/// kind is recorded as the span's `error.type`.
pub async fn traced_turn(
    provider: &dyn ModelProvider,
    spec: &ModelSpec,
    request: ModelRequest<'_>,
    sink: &TurnSink,
    cancel: &CancellationToken,
    redactor: &Redactor,
) -> Result<ModelTurn> {
    let span = chat(&spec.provider, &spec.model);
    let started = Instant::now();
    // Deltas are redacted before anyone sees them (terminal, HTTP streams, embedders).
    let redacting = sink.redacting(redactor);
    let (sink, first_delta) = if span.is_disabled() {
        (redacting, None)
    } else {
        let (with_first_delta, first_delta) = redacting.noting_first_delta();
        (with_first_delta, Some(first_delta))
    };
    let streamed = or_cancel(
        provider
            .stream_turn(request, &sink)
            .instrument(span.clone()),
        cancel,
    )
    .await
    .and_then(|turn| turn);
    sink.flush();
    if let Some(first) = first_delta.as_ref().and_then(|first| first.get()) {
        span.record(
            "gen_ai.response.time_to_first_chunk",
            first.duration_since(started).as_secs_f64(),
        );
    }
    let mut turn = match streamed {
        Ok(turn) => turn,
        Err(err) => {
            span.record("error.type", err.kind());
            return Err(err);
        }
    };
    if turn.usage.cost_usd.is_none() {
        let price = provider.model_info(&spec.model).price;
        turn.usage.cost_usd = price.map(|price| price.cost(&turn.usage));
    }
    if !span.is_disabled() {
        span.record("gen_ai.response.model", spec.model.as_str());
        span.record(
            "gen_ai.response.finish_reasons",
            finish_reason(&turn.stop_reason),
        );
        record_usage(&span, &turn.usage);
        span.record(
            "gen_ai.output.messages",
            tracing::field::display(RedactedReply {
                redactor,
                content: &turn.content,
            }),
        );
    }
    Ok(turn)
}

/// The GenAI finish reason of a stop reason.
pub(crate) fn finish_reason(stop_reason: &StopReason) -> &str {
    match stop_reason {
        StopReason::EndTurn => "stop",
        StopReason::ToolUse => "tool_call",
        StopReason::MaxTokens => "length",
        StopReason::ContentFilter | StopReason::Refusal => "content_filter",
        // Other reasons keep their own name (GenAI allows any string).
        other => other.as_str(),
    }
}

/// The span of one tool call: `execute_tool <tool>`.
pub(crate) fn execute_tool(name: &str, call_id: &str) -> Span {
    tracing::info_span!(
        target: SPAN_TARGET,
        "execute_tool",
        otel.name = format!("execute_tool {name}"),
        otel.kind = "internal",
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = name,
        gen_ai.tool.call.id = call_id,
        gen_ai.tool.type = "function",
        gen_ai.tool.call.arguments = Empty,
        gen_ai.tool.call.result = Empty,
        error.type = Empty,
    )
}

/// The span of one hook asked at one point: `flue.hook <event>`; its decision is recorded
/// when it answers (`error` when it failed).
pub(crate) fn hook(event: &str, name: &str) -> Span {
    tracing::info_span!(
        target: SPAN_TARGET,
        "flue.hook",
        otel.name = format!("flue.hook {event}"),
        otel.kind = "internal",
        flue.hook.event = event,
        flue.hook.name = name,
        flue.hook.decision = Empty,
        error.type = Empty,
    )
}

/// The span of one submission, from admission to settlement: `flue.submission`. Its attempts
/// are its children; it nests under the caller's span (an HTTP request's) when there is one.
pub(crate) fn submission(agent: &str, conversation: &str, submission_id: &str) -> Span {
    tracing::info_span!(
        target: SPAN_TARGET,
        "flue.submission",
        otel.name = "flue.submission",
        otel.kind = "internal",
        gen_ai.agent.name = agent,
        gen_ai.conversation.id = conversation,
        flue.submission.id = submission_id,
        flue.task.parent = Empty,
        flue.outcome = Empty,
        error.type = Empty,
    )
}

/// Marks a submission's span as a background task's, naming the conversation that started it.
pub(crate) fn record_task_parent(span: &Span, parent_conversation: &str) {
    if !span.is_disabled() {
        span.record("flue.task.parent", parent_conversation);
    }
}

/// The span of one attempt at a submission: `flue.attempt`, a child of the submission's span
/// when this process admitted it (`parent`). Otherwise (a recovered submission, or one another
/// process admitted) it is a root carrying the caller's stored `traceparent` as
/// `flue.trace_parent`, which a subscriber turns into its remote parent, so the attempt stays in
/// the caller's trace; without one it starts a new trace.
pub(crate) fn attempt(
    parent: Option<&Span>,
    trace_parent: Option<&str>,
    submission_id: &str,
    attempt: u32,
) -> Span {
    match parent {
        Some(parent) => tracing::info_span!(
            target: SPAN_TARGET,
            parent: parent,
            "flue.attempt",
            otel.name = "flue.attempt",
            otel.kind = "internal",
            flue.submission.id = submission_id,
            flue.attempt = attempt,
        ),
        None => tracing::info_span!(
            target: SPAN_TARGET,
            parent: None,
            "flue.attempt",
            otel.name = "flue.attempt",
            otel.kind = "internal",
            flue.trace_parent = trace_parent,
            flue.submission.id = submission_id,
            flue.attempt = attempt,
        ),
    }
}

/// `value` as a W3C `traceparent` worth storing: `<version>-<trace id>-<parent id>-<flags>` in
/// lowercase hex (2, 32, 16 and 2 digits), version not `ff`, neither id all zeros, and for
/// version `00` nothing after the flags. A later version's extra fields are cut off (what a
/// version-00 reader keeps). `None` when it is not one.
pub(crate) fn trace_parent(value: &str) -> Option<String> {
    let value = value.trim();
    let mut parts = value.split('-');
    let (version, trace_id, parent_id, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |part: &str, len: usize| {
        part.len() == len
            && part
                .bytes()
                .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte))
    };
    let zeros = |part: &str| part.bytes().all(|byte| byte == b'0');
    let valid = hex(version, 2)
        && version != "ff"
        && hex(trace_id, 32)
        && !zeros(trace_id)
        && hex(parent_id, 16)
        && !zeros(parent_id)
        && hex(flags, 2)
        && (version != "00" || parts.next().is_none());
    valid.then(|| format!("{version}-{trace_id}-{parent_id}-{flags}"))
}

/// A JSON value recorded on a span only when a subscriber formats it, redacted then.
pub(crate) struct RedactedJson<'a> {
    pub(crate) redactor: &'a Redactor,
    pub(crate) value: &'a Value,
}

impl fmt::Display for RedactedJson<'_> {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.redactor.redact(&self.value.to_string()))
    }
}

/// The visible text of a model reply, recorded only when a subscriber formats it, redacted then.
pub(crate) struct RedactedReply<'a> {
    pub(crate) redactor: &'a Redactor,
    pub(crate) content: &'a [AssistantContent],
}

impl fmt::Display for RedactedReply<'_> {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text: String = self
            .content
            .iter()
            .filter_map(|part| match part {
                AssistantContent::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        formatter.write_str(&self.redactor.redact(&text))
    }
}

#[cfg(test)]
mod tests;
