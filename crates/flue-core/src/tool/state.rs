//! A conversation's state document as the tool calls of one batch see it, and the idempotency
//! key of a call.
//!
//! The state is a JSON object kept in the conversation's root session log as
//! [`Record::State`](flue_protocol::record::Record::State) records, the latest one winning. The agent loop hands
//! every call of a batch the same [`ToolState`]: reads see the writes of the calls that ran
//! before (a write buffer, not a snapshot), and the final value is appended with the batch's
//! tool results, in one fenced write. A batch cut short by a crash never changed the state.

use std::sync::{Arc, Mutex, PoisonError};

use flue_protocol::record::MAX_STATE_BYTES;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::error::FlueError;
use crate::tool::ToolError;

/// The state document of a conversation as one batch of tool calls sees it. Clones share it.
#[derive(Clone, Debug)]
pub struct ToolState {
    inner: Arc<Mutex<Buffer>>,
    /// Who writes through this handle (the record's `source`, and the call id when a call
    /// did), recorded as the writer.
    call: Option<(String, Option<String>)>,
}

#[derive(Debug)]
struct Buffer {
    value: Value,
    version: u64,
    /// Whether a call of this batch changed it.
    changed: bool,
    /// Who changed it last (source, call id), when known.
    writer: Option<(String, Option<String>)>,
}

impl ToolState {
    /// The state at `version` (0 with `value` `None`: never written; it reads as `{}`).
    pub fn new(value: Option<Value>, version: u64) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Buffer {
                value: value.unwrap_or_else(|| Value::Object(Map::new())),
                version,
                changed: false,
                writer: None,
            })),
            call: None,
        }
    }

    /// The same document, for call `call_id` of `tool`: its writes name it.
    pub(crate) fn for_call(&self, tool: &str, call_id: &str) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            call: Some((format!("tool:{tool}"), Some(call_id.to_owned()))),
        }
    }

    /// The same document, for the hooks of point `event` (about call `call_id` at a tool
    /// point): their writes are recorded as `hook:<event>`.
    pub(crate) fn for_hook(&self, event: &str, call_id: Option<&str>) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            call: Some((format!("hook:{event}"), call_id.map(str::to_owned))),
        }
    }

    /// Replaces the document for a hook: checked like [`ToolState::set`], failing with the
    /// check's error.
    pub(crate) fn set_checked(&self, value: Value) -> Result<(), FlueError> {
        check_state(&value)?;
        let mut buffer = self.buffer();
        if buffer.value != value {
            buffer.value = value;
            buffer.changed = true;
            buffer.writer.clone_from(&self.call);
        }
        Ok(())
    }

    /// The [`Record::State`](flue_protocol::record::Record::State) of the change, when there was one.
    pub(crate) fn record(&self) -> Option<flue_protocol::record::Record> {
        self.changed().map(|changed| {
            let (source, call_id) = changed.writer.unwrap_or_else(|| ("tool".to_owned(), None));
            flue_protocol::record::Record::State(flue_protocol::record::StateChange {
                value: changed.value,
                version: changed.version,
                source,
                call_id,
            })
        })
    }

    fn buffer(&self) -> std::sync::MutexGuard<'_, Buffer> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The document as of now: the stored value with this batch's writes so far (`{}` before
    /// the first write).
    pub fn get(&self) -> Value {
        self.buffer().value.clone()
    }

    /// The stored version this batch started from (0: never written).
    pub fn version(&self) -> u64 {
        self.buffer().version
    }

    /// Replaces the document. It must be a JSON object of at most
    /// [`MAX_STATE_BYTES`](flue_protocol::record::MAX_STATE_BYTES) bytes (`invalid_state`,
    /// `state_too_large`). Writing the value it already has changes nothing.
    pub fn set(&self, value: Value) -> Result<(), ToolError> {
        check_state(&value).map_err(|err| ToolError::new(err.kind(), err.to_string()))?;
        let mut buffer = self.buffer();
        if buffer.value != value {
            buffer.value = value;
            buffer.changed = true;
            buffer.writer.clone_from(&self.call);
        }
        Ok(())
    }

    /// Changes the document in place: `change` gets the current object (this batch's writes
    /// included), so two calls updating different keys both keep their change. The result is
    /// checked like [`ToolState::set`]'s; a refused change leaves the document as it was.
    pub fn update(&self, change: impl FnOnce(&mut Map<String, Value>)) -> Result<(), ToolError> {
        let mut buffer = self.buffer();
        let mut object = match &buffer.value {
            Value::Object(object) => object.clone(),
            _ => Map::new(),
        };
        change(&mut object);
        let value = Value::Object(object);
        check_state(&value).map_err(|err| ToolError::new(err.kind(), err.to_string()))?;
        if buffer.value != value {
            buffer.value = value;
            buffer.changed = true;
            buffer.writer.clone_from(&self.call);
        }
        Ok(())
    }

    /// The new document when a call changed it: what the batch stores.
    pub(crate) fn changed(&self) -> Option<Changed> {
        let buffer = self.buffer();
        buffer.changed.then(|| Changed {
            value: buffer.value.clone(),
            version: buffer.version + 1,
            writer: buffer.writer.clone(),
        })
    }
}

/// A batch's change of the state.
pub(crate) struct Changed {
    /// The new document.
    pub(crate) value: Value,
    /// Its version.
    pub(crate) version: u64,
    /// Who changed it last (source, call id).
    pub(crate) writer: Option<(String, Option<String>)>,
}

/// Checks a state document: a JSON object of at most [`MAX_STATE_BYTES`](flue_protocol::record::MAX_STATE_BYTES)
/// bytes as JSON. Fails with [`FlueError::InvalidState`] or [`FlueError::StateTooLarge`].
pub fn check_state(value: &Value) -> Result<(), FlueError> {
    if !value.is_object() {
        return Err(FlueError::InvalidState {
            reason: format!(
                "the state must be a JSON object (like {{\"step\": 1}}), got {}",
                kind_of(value)
            ),
        });
    }
    let bytes = crate::store::rules::json_length(value);
    if bytes > MAX_STATE_BYTES {
        return Err(FlueError::StateTooLarge {
            bytes,
            limit: MAX_STATE_BYTES,
        });
    }
    Ok(())
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The idempotency key of call `call_id` of `session` in agent instance `instance_id`: the
/// same on every attempt of the call, different for every other call (call ids are unique in
/// a session). `ik_` and 32 hex digits, so it is safe as a file name.
pub fn idempotency_key(instance_id: &str, session: &str, call_id: &str) -> String {
    let mut hasher = Sha256::new();
    for part in [instance_id, session, call_id] {
        hasher.update(part.as_bytes());
        hasher.update([0]);
    }
    let digest = hasher.finalize();
    let mut key = String::with_capacity(35);
    key.push_str("ik_");
    for byte in &digest[..16] {
        key.push_str(&format!("{byte:02x}"));
    }
    key
}
