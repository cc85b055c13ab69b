//! The prompt as sent, for the dev console (`GET /_flue/dev/prompt/...`): what one model call
//! of a conversation was given (system prompt, tools, messages, thinking level, output limit)
//! and what it answered.
//!
//! Two sources. A [`PromptRecorder`] that the dev assembly wraps around every model provider
//! keeps the last calls of this process exactly as the harness handed them to the provider
//! (the turn's role, skill and hook context included), with known secrets redacted, bounded
//! in memory and never stored; `flue serve` has none. For a call it does not hold (an older
//! one, or one another process made) the messages are rebuilt from the stored log (the model's
//! view of the records before the call) and the page says which one it shows. A recorded call
//! is found by its messages: the stored records before a turn are what the harness sent.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use flue_core::model::wire::capture;
use flue_core::model::{ModelProvider, ModelRequest, ModelTurn, TurnSink};
use flue_core::{BoxFuture, Record, Redactor, StoredRecord, model_view};
use serde_json::{Value, json};

/// How many calls a [`PromptRecorder`] keeps at most (the oldest go first).
pub const RECORDED_CALLS: usize = 64;

/// The most bytes of JSON a [`PromptRecorder`] keeps in all (the oldest calls go first).
pub const RECORDED_BYTES: usize = 16 * 1024 * 1024;

/// One recorded model call.
#[derive(Clone, Debug)]
struct Recorded {
    /// The messages' JSON, the key a call is found by.
    messages: String,
    /// The request and the answer, redacted (the route's `recorded`).
    shown: Value,
    /// Bytes kept for it.
    size: usize,
}

/// The last model calls of this process, as the providers were given them (see the module
/// docs). Cloning shares the calls.
#[derive(Clone, Default)]
pub struct PromptRecorder {
    calls: Arc<Mutex<VecDeque<Recorded>>>,
}

impl std::fmt::Debug for PromptRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held = self.calls.lock().map_or(0, |calls| calls.len());
        f.debug_struct("PromptRecorder")
            .field("calls", &held)
            .finish_non_exhaustive()
    }
}

impl PromptRecorder {
    /// A recorder holding no calls yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// `provider`, recording every call it passes on, with what `redactor` knows (the
    /// workspace's secrets) redacted from what it keeps.
    pub fn wrap(
        &self,
        provider: Arc<dyn ModelProvider>,
        redactor: Redactor,
    ) -> Arc<dyn ModelProvider> {
        Arc::new(Recording {
            inner: provider,
            recorder: self.clone(),
            redactor,
        })
    }

    fn record(&self, request: &ModelRequest<'_>, answer: Value, redactor: &Redactor) {
        let mut messages = serde_json::to_string(request.messages).unwrap_or_default();
        redactor.redact_in_place(&mut messages);
        let tools = tools_json(request.tools);
        let mut shown = json!({
            "model": request.model,
            "system": request.system,
            "tools": tools,
            "thinking": request.thinking.to_string(),
            "maxOutputTokens": request.max_output_tokens,
        });
        if let Value::Object(map) = &mut shown {
            map.insert("answer".to_owned(), answer);
        }
        redactor.redact_value(&mut shown);
        let size = messages.len() + shown.to_string().len();
        let mut calls = self
            .calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        calls.push_back(Recorded {
            messages,
            shown,
            size,
        });
        let mut total: usize = calls.iter().map(|call| call.size).sum();
        while calls.len() > RECORDED_CALLS || (total > RECORDED_BYTES && calls.len() > 1) {
            if let Some(gone) = calls.pop_front() {
                total -= gone.size;
            }
        }
    }

    /// The recorded call whose messages were `messages` (the latest such), if still held.
    fn find(&self, messages: &str) -> Option<Value> {
        let calls = self
            .calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        calls
            .iter()
            .rev()
            .find(|call| call.messages == messages)
            .map(|call| call.shown.clone())
    }
}

/// Tools as the prompt view shows them: `{name, description, inputSchema}`.
pub(crate) fn tools_json(tools: &[flue_core::model::ToolSchema]) -> Vec<Value> {
    tools
        .iter()
        .map(|tool| {
            json!({"name": tool.name, "description": tool.description,
                "inputSchema": tool.input_schema})
        })
        .collect()
}

/// A provider that records the calls it passes on.
struct Recording {
    inner: Arc<dyn ModelProvider>,
    recorder: PromptRecorder,
    redactor: Redactor,
}

impl ModelProvider for Recording {
    fn id(&self) -> &str {
        self.inner.id()
    }

    fn model_info(&self, model: &str) -> flue_core::model::ModelInfo {
        self.inner.model_info(model)
    }

    fn knows_model(&self, model: &str) -> bool {
        self.inner.knows_model(model)
    }

    fn known_models(&self) -> Vec<String> {
        self.inner.known_models()
    }

    fn check_model<'a>(&'a self, model: &'a str) -> BoxFuture<'a, flue_core::Result<()>> {
        self.inner.check_model(model)
    }

    fn stream_turn<'a>(
        &'a self,
        request: ModelRequest<'a>,
        sink: &'a TurnSink,
    ) -> BoxFuture<'a, flue_core::Result<ModelTurn>> {
        Box::pin(async move {
            let (turn, wire) = capture(self.inner.stream_turn(request, sink)).await;
            let mut answer = match &turn {
                Ok(turn) => json!({"content": turn.content, "usage": turn.usage,
                    "stopReason": turn.stop_reason}),
                Err(err) => json!({"error": {"kind": err.kind(), "message": err.to_string()}}),
            };
            // An HTTP provider's bytes (the scripted model has none); headers never.
            if wire.attempts > 0
                && let Value::Object(map) = &mut answer
            {
                map.insert(
                    "wire".into(),
                    json!({
                        // The provider shows it without credentials; an embedder's
                        // provider may not.
                        "url": flue_core::util::hide_url_credentials(&wire.url),
                        "attempts": wire.attempts,
                        "request": String::from_utf8_lossy(&wire.request),
                        "response": String::from_utf8_lossy(&wire.response),
                        "truncated": wire.truncated,
                    }),
                );
            }
            self.recorder.record(&request, answer, &self.redactor);
            turn
        })
    }
}

/// Which model call of a session: the `N`-th (from 1), or the one stored at a record index.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Call {
    /// The `N`-th `assistant` or `failed_turn` record.
    Turn(usize),
    /// The record at this index of the session's log.
    Index(u64),
}

/// One model call of the session whose stored records are `records`: `{turn, turns, index,
/// model, source, messages, stored, recorded}` with `source` `recorded` (the exact call, from
/// `recorder`: `recorded` holds its system prompt, tools, thinking level, output limit and
/// answer) or `log` (the messages rebuilt from the records before it; `recorded` absent);
/// `stored` is the call's stored record. `None` when there is no such call.
pub(crate) fn prompt_of(
    records: &[StoredRecord],
    which: Call,
    recorder: Option<&PromptRecorder>,
) -> Option<Value> {
    let calls: Vec<usize> = records
        .iter()
        .enumerate()
        .filter(|(_, stored)| matches!(stored.record, Record::Assistant(_) | Record::FailedTurn(_)))
        .map(|(idx, _)| idx)
        .collect();
    let position = match which {
        Call::Turn(turn) => turn.checked_sub(1)?,
        Call::Index(index) => calls
            .iter()
            .position(|at| u64::try_from(*at).is_ok_and(|at| at == index))?,
    };
    let at = *calls.get(position)?;
    let call = records.get(at)?;
    let before: Vec<Record> = records
        .get(..at)?
        .iter()
        .map(|stored| stored.record.clone())
        .collect();
    let view = model_view(&before);
    let messages = serde_json::to_string(view.as_ref()).unwrap_or_default();
    let model = match &call.record {
        Record::Assistant(message) => message.model.to_string(),
        Record::FailedTurn(failed) => failed.model.to_string(),
        _ => String::new(),
    };
    let recorded = recorder.and_then(|recorder| recorder.find(&messages));
    let mut shown = json!({
        "turn": position + 1,
        "turns": calls.len(),
        "index": at,
        "model": model,
        "source": if recorded.is_some() { "recorded" } else { "log" },
        "messages": serde_json::from_str::<Value>(&messages).unwrap_or_default(),
        "stored": serde_json::to_value(call).unwrap_or_default(),
    });
    if let (Some(recorded), Value::Object(map)) = (recorded, &mut shown) {
        map.insert("recorded".into(), recorded);
    }
    Some(shown)
}

#[cfg(test)]
mod tests;
