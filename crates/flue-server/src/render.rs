//! A page of a conversation's stream as the protocol's chunk array: the rendering every read
//! shares (plain, long-poll and SSE), and the `conversation-reset` that replaces a turn a
//! reader already saw live.

use std::sync::Arc;

use flue_core::ConversationKey;

use crate::backend::{Batch, Page};
use crate::durable::DurableRuntime;
use crate::error::ApiError;
use crate::project::Conversation;
use crate::wire::{Checkpoint, Chunk, ChunkBody, Offset, Position};

/// Sends each batch that records a turn whose text went out live ([`Batch::replaces_live`]) as
/// a `conversation-reset` with the snapshot through it: a reader that saw the live deltas, or
/// resumes from an offset after seeing them, replaces them instead of appending them again.
pub(crate) async fn with_live_resets(
    runtime: &DurableRuntime,
    key: &ConversationKey,
    mut page: Page,
) -> Result<Page, ApiError> {
    if !page.batches.iter().any(|batch| batch.replaces_live) {
        return Ok(page);
    }
    let conversation_id = key.to_string();
    let mut conversation = Conversation::default();
    let mut after = Offset::START;
    for batch in &mut page.batches {
        if !batch.replaces_live {
            continue;
        }
        // The state through this batch, read incrementally from where the last reset ended.
        while after < batch.offset {
            let wanted = usize::try_from(batch.offset.0 - after.0).unwrap_or(usize::MAX);
            let prefix = runtime.read(key, after, wanted).await?;
            let Some(last) = prefix.batches.last() else {
                break;
            };
            for earlier in &prefix.batches {
                for chunk in &earlier.chunks {
                    conversation.apply(chunk);
                }
            }
            after = last.offset;
        }
        let snapshot = conversation.snapshot(
            &conversation_id,
            batch.offset.to_string(),
            &page.incarnation,
        );
        *batch = Arc::new(Batch {
            offset: batch.offset,
            chunks: vec![ChunkBody::ConversationReset {
                snapshot: Box::new(snapshot),
            }],
            ends_live_turn: batch.ends_live_turn.clone(),
            replaces_live: false,
        });
    }
    Ok(page)
}

/// Renders a page as the JSON chunk array; returns it and the next offset. Reading from the
/// origin (`-1`) folds the first batch into a leading `conversation-reset`.
pub(crate) fn render_page(
    conversation_id: &str,
    page: &Page,
    offset: Offset,
    from_origin: bool,
) -> (Vec<u8>, Offset) {
    let mut next = offset;
    let mut out = Vec::with_capacity(256);
    out.push(b'[');
    let mut first = true;
    let mut push = |out: &mut Vec<u8>, value: &dyn erased::Json| {
        if !first {
            out.push(b',');
        }
        first = false;
        value.write(out);
    };
    let any_chunks = page.batches.iter().any(|batch| !batch.chunks.is_empty());
    if any_chunks {
        push(
            &mut out,
            &Checkpoint {
                kind: "stream-checkpoint",
                incarnation: &page.incarnation,
            },
        );
    }
    for (batch_idx, batch) in page.batches.iter().enumerate() {
        next = batch.offset;
        if from_origin && batch_idx == 0 && offset == Offset::START {
            let mut conversation = Conversation::default();
            for chunk in &batch.chunks {
                conversation.apply(chunk);
            }
            let reset = ChunkBody::ConversationReset {
                snapshot: Box::new(conversation.snapshot(
                    conversation_id,
                    batch.offset.to_string(),
                    &page.incarnation,
                )),
            };
            push(
                &mut out,
                &Chunk {
                    body: &reset,
                    conversation_id,
                    position: Position {
                        batch: batch.offset.0,
                        index: 0,
                    },
                },
            );
            continue;
        }
        for (index, chunk) in batch.chunks.iter().enumerate() {
            push(
                &mut out,
                &Chunk {
                    body: chunk,
                    conversation_id,
                    position: Position {
                        batch: batch.offset.0,
                        index: u32::try_from(index).unwrap_or(u32::MAX),
                    },
                },
            );
        }
    }
    out.push(b']');
    (out, next)
}

/// Serializing values of different types through one closure.
mod erased {
    /// A value that writes itself as JSON.
    pub(crate) trait Json {
        fn write(&self, out: &mut Vec<u8>);
    }
    impl<T: serde::Serialize> Json for T {
        fn write(&self, out: &mut Vec<u8>) {
            // Our wire types always serialize; a failure would leave `null`, never a panic.
            if serde_json::to_writer(&mut *out, self).is_err() {
                out.extend_from_slice(b"null");
            }
        }
    }
}
