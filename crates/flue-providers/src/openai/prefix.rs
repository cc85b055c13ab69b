//! The Chat Completions `messages` of recent conversations, kept serialized, so that a turn
//! serializes only the records added since the previous turn and copies the rest.
//!
//! A prefix is found by content, not by conversation: it serves a request whose model and
//! system prompt are its own and whose records begin with the ones it holds. Anything that
//! changes the prefix (compaction, a rewind, a fork's edit, another model or system prompt)
//! makes the records differ, and the request is serialized whole. Tools, the thinking level
//! and the output limit live outside `messages` and are written fresh each turn.

use serde_json::{Value, json};

use flue_core::{Record, model::ModelRequest};

use crate::convert::{self, Item, ItemState};

/// How many conversations keep their prefix: the ones a server is talking with right now.
pub(super) const MAX_ENTRIES: usize = 16;
/// How many bytes of serialized messages all entries hold at most (each entry also holds a
/// copy of its records, about as large).
pub(super) const MAX_BYTES: usize = 32 << 20;

/// What an assistant turn's encoding depends on besides the turn (see `assistant_message`).
pub(super) struct Context<'a> {
    /// The id of the provider encoding.
    pub(super) provider: &'a str,
    /// Whether thinking goes back as `reasoning_content`.
    pub(super) reasoning_content_back: bool,
    /// Whether images are sent (else a placeholder).
    pub(super) image_input: bool,
}

/// The `messages` of a conversation's first records, serialized, with what it takes to go on.
#[derive(Debug)]
pub(super) struct Prefix {
    model: String,
    system: String,
    /// The records encoded so far.
    records: Vec<Record>,
    /// The messages so far, serialized and separated by commas (the array without brackets).
    json: Vec<u8>,
    /// User parts not in a message yet: the next assistant turn or tool result, or the end
    /// of the request, closes them into one user message.
    pending: Vec<Value>,
    items: ItemState,
    /// The bytes of the items so far, as the prompt's token estimate counts them.
    item_bytes: usize,
}

impl Prefix {
    /// A prefix with no records yet: the system prompt's message, if there is one.
    pub(super) fn new(request: &ModelRequest<'_>) -> serde_json::Result<Self> {
        let mut prefix = Self {
            model: request.model.to_owned(),
            system: request.system.to_owned(),
            records: Vec::new(),
            json: Vec::new(),
            pending: Vec::new(),
            items: ItemState::default(),
            item_bytes: 0,
        };
        if !request.system.is_empty() {
            prefix.append(&json!({"role": "system", "content": request.system}))?;
        }
        Ok(prefix)
    }

    /// How many of the request's records this prefix holds.
    pub(super) fn len(&self) -> usize {
        self.records.len()
    }

    /// The bytes of the items so far, as the prompt's token estimate counts them.
    pub(super) fn item_bytes(&self) -> usize {
        self.item_bytes
    }

    /// Encodes the next record of the conversation.
    pub(super) fn push(
        &mut self,
        record: &Record,
        context: &Context<'_>,
    ) -> serde_json::Result<()> {
        let mut items = Vec::new();
        convert::push_items(&mut self.items, record, context.image_input, &mut items);
        for item in &items {
            self.item_bytes += convert::item_bytes(item);
            match item {
                Item::Text(text) => self.pending.push(json!({"type": "text", "text": text})),
                Item::Image(image) => self.pending.push(json!({
                    "type": "image_url",
                    "image_url": {"url": format!("data:{};base64,{}", image.mime_type, image.data)},
                })),
                Item::Assistant(message) => {
                    self.flush()?;
                    let own = message.model.provider == context.provider;
                    let back = super::ReasoningBack {
                        content: context.reasoning_content_back && own,
                        details: own && message.model.id == self.model,
                    };
                    if let Some(message) = super::assistant_message(message, back) {
                        self.append(&message)?;
                    }
                }
                Item::ToolResult(result) => {
                    self.flush()?;
                    self.append(&json!({
                        "role": "tool",
                        "tool_call_id": result.call_id,
                        "content": result.content,
                    }))?;
                }
            }
        }
        self.records.push(record.clone());
        Ok(())
    }

    /// Writes the `messages` array: the messages so far and the pending user parts.
    pub(super) fn write_messages(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        out.push(b'[');
        out.extend_from_slice(&self.json);
        if !self.pending.is_empty() {
            if !self.json.is_empty() {
                out.push(b',');
            }
            serde_json::to_writer(&mut *out, &super::user_message(self.pending.clone()))?;
        }
        out.push(b']');
        Ok(())
    }

    /// How many bytes it holds serialized.
    pub(super) fn weight(&self) -> usize {
        self.json.len()
    }

    /// Whether `request` goes on from this prefix: the same model and system prompt, and
    /// records that begin with this prefix's (the last one compared first, the cheapest miss).
    pub(super) fn continued_by(&self, request: &ModelRequest<'_>) -> bool {
        self.model == request.model
            && self.system == request.system
            && request
                .messages
                .get(..self.records.len())
                .is_some_and(|head| head.last() == self.records.last() && head == self.records)
    }

    /// Closes the pending user parts into one user message.
    fn flush(&mut self) -> serde_json::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let message = super::user_message(std::mem::take(&mut self.pending));
        self.append(&message)
    }

    fn append(&mut self, message: &Value) -> serde_json::Result<()> {
        if !self.json.is_empty() {
            self.json.push(b',');
        }
        serde_json::to_writer(&mut self.json, message)
    }
}
