//! What a running tool may hand out besides its result: structured data for UI readers
//! (`emitData`) and log lines (the logger), both tied to the tool call.
//!
//! Emitted data is trusted application output, never shown to the model: it is checked to be
//! JSON, redacted like every tool output, streamed at once as [`Event::Data`], and persisted
//! with the call's tool result ([`ToolResult::data`](flue_protocol::record::ToolResult::data)), where the HTTP
//! protocol serves it as `data-<name>` parts. The logger writes `tracing` events carrying the
//! session, the operation's agent instance and the tool call as fields.

use std::sync::{Arc, Mutex};

use flue_protocol::event::Event;
use flue_protocol::record::EmittedData;
use serde::Serialize;

use crate::model::TurnSink;
use crate::redact::Redactor;
use crate::tool::ToolError;

/// Longest name of an emitted data part.
const MAX_DATA_NAME_CHARS: usize = 64;

/// Collects the data one tool call emits and streams it as it comes.
#[derive(Clone)]
pub(crate) struct DataEmitter {
    call_id: String,
    sink: TurnSink,
    redactor: Redactor,
    collected: Arc<Mutex<Vec<EmittedData>>>,
}

impl DataEmitter {
    pub(crate) fn new(call_id: &str, sink: &TurnSink, redactor: &Redactor) -> Self {
        Self {
            call_id: call_id.to_owned(),
            sink: sink.clone(),
            redactor: redactor.clone(),
            collected: Arc::default(),
        }
    }

    /// The data emitted so far, in order, leaving none behind.
    pub(crate) fn take(&self) -> Vec<EmittedData> {
        self.collected
            .lock()
            .map(|mut collected| std::mem::take(&mut *collected))
            .unwrap_or_default()
    }

    pub(crate) fn emit(
        &self,
        name: &str,
        data: &impl Serialize,
        id: Option<&str>,
    ) -> Result<(), ToolError> {
        let valid_name = !name.is_empty()
            && name.chars().count() <= MAX_DATA_NAME_CHARS
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.');
        if !valid_name {
            return Err(ToolError::new(
                "invalid_data",
                format!(
                    "data name {name:?} must be 1 to {MAX_DATA_NAME_CHARS} letters, digits, \
                     `_`, `-` or `.`"
                ),
            ));
        }
        let mut data = serde_json::to_value(data).map_err(|err| {
            ToolError::new("invalid_data", format!("data {name:?} is not JSON: {err}"))
        })?;
        self.redactor.redact_json(&mut data);
        let emitted = EmittedData {
            name: name.to_owned(),
            data,
            id: id.map(str::to_owned),
        };
        self.sink.send(Event::Data {
            call_id: self.call_id.clone(),
            name: emitted.name.clone(),
            data: emitted.data.clone(),
            id: emitted.id.clone(),
        });
        if let Ok(mut collected) = self.collected.lock() {
            collected.push(emitted);
        }
        Ok(())
    }
}

/// Attaches to each tool result in `records` the data its call emitted (`emitters`: one per
/// call that ran).
pub(crate) fn attach_emitted(
    records: &mut [flue_protocol::record::Record],
    emitters: &[DataEmitter],
) {
    for record in records {
        if let flue_protocol::record::Record::ToolResult(result) = record
            && let Some(emitter) = emitters
                .iter()
                .find(|emitter| emitter.call_id == result.call_id)
        {
            result.data = emitter.take();
        }
    }
}

/// A structured logger for tools and actions (the seed's `FlueLogger`): each line is a
/// `tracing` event at the matching level, with `instance`, `session` and `tool_call` fields
/// (empty outside a session), under the target `flue::tool`.
///
/// ```
/// let ctx = flue_core::ToolContext::new(std::sync::Arc::new(flue_core::VirtualSandbox::new()));
/// ctx.logger().info("fetched 3 pages");
/// ```
#[derive(Clone, Debug, Default)]
pub struct FlueLogger {
    instance: String,
    session: String,
    tool_call: String,
}

impl FlueLogger {
    pub(crate) fn new(instance: &str, session: &str, tool_call: &str) -> Self {
        Self {
            instance: instance.to_owned(),
            session: session.to_owned(),
            tool_call: tool_call.to_owned(),
        }
    }

    /// Logs at debug level.
    pub fn debug(&self, message: &str) {
        tracing::debug!(target: "flue::tool", instance = %self.instance, session = %self.session, tool_call = %self.tool_call, "{message}");
    }

    /// Logs at info level.
    pub fn info(&self, message: &str) {
        tracing::info!(target: "flue::tool", instance = %self.instance, session = %self.session, tool_call = %self.tool_call, "{message}");
    }

    /// Logs at warn level.
    pub fn warn(&self, message: &str) {
        tracing::warn!(target: "flue::tool", instance = %self.instance, session = %self.session, tool_call = %self.tool_call, "{message}");
    }

    /// Logs at error level.
    pub fn error(&self, message: &str) {
        tracing::error!(target: "flue::tool", instance = %self.instance, session = %self.session, tool_call = %self.tool_call, "{message}");
    }
}
