//! The memory tools of an agent with `memory:`: `memory_write`, `memory_search` and
//! `memory_delete`, over the store's notes ([`NoteStore`](crate::store::NoteStore)) about the
//! subject the conversation is bound to. A conversation without a subject gets a tool error
//! that says how the application sets one; nothing is written then.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::{FlueError, Result};
use crate::redact::Redactor;
use crate::store::{DynNoteStore, Note, NoteLimits, search_terms};
use crate::tool::{
    Effects, InterruptBehavior, Ownership, Permission, ToolContext, ToolDefinition, ToolError,
    ToolMeta,
};
use crate::util::{new_ulid, now_ms};

/// The memory tools' names.
pub const MEMORY_TOOL_NAMES: &[&str] = &["memory_write", "memory_search", "memory_delete"];

/// Most notes one search returns.
const MAX_SEARCH_RESULTS: u64 = 20;

const WRITE: &str = "Remember a note about the user of this conversation for later \
conversations (a preference, a fact they told you, a decision). One short fact per note; notes \
are bounded in size and number. Returns the note's `id`.";
const SEARCH: &str = "Search what you remembered about the user of this conversation in \
earlier conversations. Pass a few keywords; notes holding any of them come back, the most \
relevant first, with their `id`, `text` and `createdAt` (ms since the epoch).";
const DELETE: &str = "Forget a note (by the `id` memory_search returned), for instance when \
it is wrong or the user asks you to forget it.";

/// Input of `memory_write`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct WriteInput {
    /// The note.
    text: String,
}

/// Input of `memory_search`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SearchInput {
    /// Keywords.
    query: String,
    /// Most notes to return (default and most: 20).
    limit: Option<u64>,
}

/// Input of `memory_delete`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct DeleteInput {
    /// The note's id.
    id: String,
}

/// What the memory tools share: the store, whose notes, the bounds, the redactor.
#[derive(Clone)]
struct Memory {
    notes: Arc<dyn DynNoteStore>,
    agent: String,
    limits: NoteLimits,
    redactor: Redactor,
}

impl Memory {
    /// The subject of the calling conversation, or the tool error saying how to set one.
    async fn subject(&self, ctx: &ToolContext) -> std::result::Result<String, ToolError> {
        match self.notes.subject_of(&ctx.instance_id).await {
            Ok(Some(subject)) => Ok(subject),
            Ok(None) => Err(ToolError::new(
                "memory_unavailable",
                "this conversation has no memory subject, so there is no memory to use",
            )
            .with_suggested_action(
                "Go on without memory; the application sets a subject per conversation \
                 (`memorySubject` in the HTTP message, `flue run --memory-subject`).",
            )),
            Err(err) => Err(store_error(&err)),
        }
    }
}

/// The memory tools of agent `agent`, over `notes`, within `limits`; note text is redacted
/// with `redactor` before it is stored.
pub(crate) fn memory_tools(
    notes: Arc<dyn DynNoteStore>,
    agent: &str,
    limits: NoteLimits,
    redactor: Redactor,
) -> Result<Vec<ToolDefinition>> {
    let memory = Memory {
        notes,
        agent: agent.to_owned(),
        limits,
        redactor,
    };
    let writer = memory.clone();
    let write = ToolDefinition::from_fn("memory_write", WRITE, move |input: WriteInput, ctx| {
        let memory = writer.clone();
        async move {
            let subject = memory.subject(&ctx).await?;
            let text = memory.redactor.redact(input.text.trim()).into_owned();
            if text.is_empty() {
                return Err(ToolError::invalid_input("`text` is empty"));
            }
            let note = Note {
                id: note_id(&ctx.idempotency_key),
                agent: memory.agent.clone(),
                subject,
                text,
                created_at: now_ms(),
            };
            // Run again after a crash, the call writes the same id: stored once.
            match memory.notes.put_note(&note, &memory.limits).await {
                Ok(()) => Ok(json!({"ok": true, "data": {"id": note.id}})),
                Err(FlueError::MemoryLimitExceeded { what, limit }) => Err(ToolError::new(
                    "memory_limit_exceeded",
                    format!("the note was not stored: {what} would exceed {limit}"),
                )
                .with_suggested_action(
                    "Shorten the note, or delete notes that no longer matter (memory_search, \
                     then memory_delete).",
                )),
                Err(err) => Err(store_error(&err)),
            }
        }
    })?
    .with_meta(ToolMeta {
        replay_safe: true,
        ..meta(false)
    });
    let searcher = memory.clone();
    let search =
        ToolDefinition::from_fn("memory_search", SEARCH, move |input: SearchInput, ctx| {
            let memory = searcher.clone();
            async move {
                let subject = memory.subject(&ctx).await?;
                let terms = search_terms(&input.query);
                let limit = input
                    .limit
                    .unwrap_or(MAX_SEARCH_RESULTS)
                    .clamp(1, MAX_SEARCH_RESULTS);
                let found = memory
                    .notes
                    .search_notes(&memory.agent, &subject, &terms, limit)
                    .await
                    .map_err(|err| store_error(&err))?;
                let notes: Vec<Value> = found
                .iter()
                .map(|note| json!({"id": note.id, "text": note.text, "createdAt": note.created_at}))
                .collect();
                Ok(json!({"ok": true, "data": {"notes": notes}}))
            }
        })?
        .with_meta(meta(true));
    let deleter = memory;
    let delete =
        ToolDefinition::from_fn("memory_delete", DELETE, move |input: DeleteInput, ctx| {
            let memory = deleter.clone();
            async move {
                let subject = memory.subject(&ctx).await?;
                let deleted = memory
                    .notes
                    .delete_note(&memory.agent, &subject, &input.id)
                    .await
                    .map_err(|err| store_error(&err))?;
                Ok(json!({"ok": true, "data": {"deleted": deleted}}))
            }
        })?
        .with_meta(meta(false));
    Ok([write, search, delete]
        .into_iter()
        .map(|tool| tool.with_origin(super::ToolOrigin::Memory))
        .collect())
}

fn meta(read_only: bool) -> ToolMeta {
    ToolMeta {
        ownership: Ownership::Managed,
        permission: Permission::AlwaysAllow,
        read_only,
        destructive: false,
        effects: Effects::NONE,
        interrupt: if read_only {
            InterruptBehavior::Cancel
        } else {
            InterruptBehavior::Complete
        },
        // A search runs again after a crash; so does a write (its note id comes from the
        // call's key, so it is stored once); a delete is answered `interrupted`.
        replay_safe: read_only,
    }
}

/// The id of the note call `key` (its idempotency key, `ik_` and 32 hex digits) writes: its
/// 128 bits as 26 Crockford base-32 digits, shaped like a ULID; the same on every attempt of
/// the call. A context without a key (a tool called outside a session) gets a new ULID.
fn note_id(key: &str) -> String {
    const DIGITS: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    let Some(bits) = key
        .strip_prefix("ik_")
        .and_then(|hex| u128::from_str_radix(hex, 16).ok())
    else {
        return new_ulid();
    };
    (0..26)
        .rev()
        .map(|digit| char::from(DIGITS[usize::try_from((bits >> (digit * 5)) & 31).unwrap_or(0)]))
        .collect()
}

fn store_error(err: &FlueError) -> ToolError {
    ToolError::new("store_error", format!("the memory store failed: {err}")).with_suggested_action(
        "Retry once; if it fails again, go on without memory and tell the user.",
    )
}
