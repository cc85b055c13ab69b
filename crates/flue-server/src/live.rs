//! `live=sse`: a pull-based event stream per reader. Each reader reads the conversation's
//! stream at its own pace from its own offset; nothing is queued for it, so a slow or vanished
//! reader holds no memory beyond its socket and never delays the agent or other readers.
//!
//! Framing: `event: data` with a JSON chunk array (only when a read produced chunks), then
//! `event: control` with `{"streamNextOffset", "upToDate"}` after every read cycle (carrying
//! an `id:` line with the offset, for `Last-Event-ID` resume), a `: heartbeat` comment every
//! heartbeat interval, and a control event at least every control interval.
//!
//! Live output: a reader at the durable head also sends the model turn in progress
//! (`DurableRuntime::live`) as it grows, a `data` event per wake-up. Live
//! chunks are positioned after the reader's offset (`{batch: offset, index: 2^20 + i}`) and do
//! not advance it; the turn's durable batch later arrives as a `conversation-reset`
//! (`render::with_live_resets`), and a reader that has read it sends no more of that turn.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use flue_core::ConversationKey;
use futures::stream;
use tokio::time::Instant;

use crate::backend::{LiveChunks, LiveCursor, Page};
use crate::durable::HeadWaiter;
use crate::error::ApiError;
use crate::render::{render_page, with_live_resets};
use crate::state::AppState;
use crate::wire::{Checkpoint, Chunk, Control, Offset, Position};

/// Index of the first live chunk within its position's batch: above any durable chunk index.
const LIVE_INDEX_BASE: u32 = 1 << 20;

/// Where one SSE reader is.
struct Reader {
    state: Arc<AppState>,
    key: ConversationKey,
    conversation_id: String,
    offset: Offset,
    from_origin: bool,
    /// A page read but not yet sent (the first one, read before the headers).
    pending: Option<Page>,
    /// When the next heartbeat is due.
    next_heartbeat: Instant,
    /// When a control event is due even without data.
    next_control: Instant,
    /// True when the reader is at the head and must wait for data.
    caught_up: bool,
    /// How far the live output was sent.
    live: LiveCursor,
    /// The submission of `live.turn`.
    live_submission: Option<String>,
    /// Turns up to this number are durable for this reader: never sent live again.
    live_floor: u64,
    /// The stream's incarnation, as the last page said.
    incarnation: Arc<str>,
    /// Waits for the head to move; made at the first wait and kept (boxed: an idle reader
    /// holds a pointer to it, and a reader that never waits holds nothing).
    waiter: Option<Box<HeadWaiter>>,
    /// Open while the stream is: counts active streams (disabled, and free, without telemetry).
    _stream_span: tracing::Span,
}

/// Starts an SSE response; a missing conversation or a bad offset fails before the headers.
pub(crate) async fn sse(
    state: Arc<AppState>,
    key: ConversationKey,
    offset: Offset,
    from_origin: bool,
) -> Result<Response, ApiError> {
    let page = state
        .runtime
        .read(&key, offset, state.config.page_size)
        .await?;
    let page = with_live_resets(&state.runtime, &key, page).await?;
    let now = Instant::now();
    let reader = Reader {
        conversation_id: key.to_string(),
        next_heartbeat: now + state.config.heartbeat_interval,
        next_control: now + state.config.control_interval,
        state,
        key,
        offset,
        from_origin,
        incarnation: Arc::clone(&page.incarnation),
        pending: Some(page),
        caught_up: false,
        live: LiveCursor::default(),
        live_submission: None,
        live_floor: 0,
        waiter: None,
        _stream_span: tracing::info_span!(target: flue_core::spans::SPAN_TARGET, parent: None, "flue.sse"),
    };
    let events = stream::unfold(reader, |mut reader| async move {
        let bytes = reader.next_event().await?;
        Some((Ok::<Bytes, std::convert::Infallible>(bytes), reader))
    });
    let mut response = (StatusCode::OK, Body::from_stream(events)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}

impl Reader {
    /// The next bytes to send; `None` ends the stream (the conversation went away).
    async fn next_event(&mut self) -> Option<Bytes> {
        loop {
            if let Some(page) = self.pending.take() {
                return Some(self.render(&page));
            }
            if !self.caught_up {
                // Boxed: an idle reader's future stays the size of its wait, not of a read.
                let page = Box::pin(self.state.runtime.read(
                    &self.key,
                    self.offset,
                    self.state.config.page_size,
                ))
                .await
                .ok()?;
                let page = Box::pin(with_live_resets(&self.state.runtime, &self.key, page))
                    .await
                    .ok()?;
                return Some(self.render(&page));
            }
            // Subscribe before looking, so that output arriving in between wakes the wait.
            let state = Arc::clone(&self.state);
            let key = self.key.clone();
            let live_changed = state.runtime.live_changed(&key);
            if let Some(live) = state.runtime.live(&key, self.live)
                && let Some(bytes) = self.render_live(live)
            {
                return Some(bytes);
            }
            let now = Instant::now();
            if now >= self.next_control {
                self.caught_up = false;
                continue;
            }
            if now >= self.next_heartbeat {
                self.next_heartbeat = now + self.state.config.heartbeat_interval;
                return Some(Bytes::from_static(b": heartbeat\n\n"));
            }
            let deadline = self.next_heartbeat.min(self.next_control);
            let mut waiter = match self.waiter.take() {
                Some(waiter) => waiter,
                None => Box::new(state.runtime.head_waiter(&key)),
            };
            // The reader's one timer: its next heartbeat or control event.
            tokio::select! {
                () = waiter.changed(self.offset) => self.caught_up = false,
                () = live_changed => {}
                () = tokio::time::sleep_until(deadline) => {}
            }
            self.waiter = Some(waiter);
        }
    }

    /// The live chunks not sent yet as a data event (plus the control event), or `None`.
    fn render_live(&mut self, live: LiveChunks) -> Option<Bytes> {
        if live.turn <= self.live_floor || live.chunks.is_empty() {
            return None;
        }
        // Marked before anything is sent: from now on the turn's durable batch is a reset.
        self.state.runtime.mark_streamed(&live.submission_id);
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(b"event: data\ndata:[");
        let checkpoint = Checkpoint {
            kind: "stream-checkpoint",
            incarnation: &self.incarnation,
        };
        if serde_json::to_writer(&mut out, &checkpoint).is_err() {
            out.extend_from_slice(b"null");
        }
        for (idx, body) in live.chunks.iter().enumerate() {
            out.push(b',');
            let index = u32::try_from(live.first_index + idx)
                .unwrap_or(u32::MAX - LIVE_INDEX_BASE)
                .saturating_add(LIVE_INDEX_BASE);
            let chunk = Chunk {
                body,
                conversation_id: &self.conversation_id,
                position: Position {
                    batch: self.offset.0,
                    index,
                },
            };
            if serde_json::to_writer(&mut out, &chunk).is_err() {
                out.extend_from_slice(b"null");
            }
        }
        out.extend_from_slice(b"]\n\n");
        self.live = LiveCursor {
            turn: live.turn,
            index: live.first_index + live.chunks.len(),
        };
        self.live_submission = Some(live.submission_id);
        self.control(&mut out, self.offset, true);
        Some(Bytes::from(out))
    }

    /// One read cycle: a data event when there are chunks, then the control event.
    fn render(&mut self, page: &Page) -> Bytes {
        self.incarnation = Arc::clone(&page.incarnation);
        // A durable turn ends its live output for this reader.
        for batch in &page.batches {
            let Some(submission_id) = &batch.ends_live_turn else {
                continue;
            };
            if self.live_submission.as_ref() == Some(submission_id) {
                self.live_floor = self.live_floor.max(self.live.turn);
            }
            if let Some(live) = self.state.runtime.live(&self.key, LiveCursor::default())
                && live.submission_id == *submission_id
            {
                self.live_floor = self.live_floor.max(live.turn);
            }
        }
        let (chunks, next) =
            render_page(&self.conversation_id, page, self.offset, self.from_origin);
        self.from_origin = false;
        let mut out = Vec::with_capacity(chunks.len() + 128);
        if chunks.len() > 2 {
            out.extend_from_slice(b"event: data\ndata:");
            out.extend_from_slice(&chunks);
            out.extend_from_slice(b"\n\n");
        }
        self.offset = next;
        let up_to_date = next >= page.head;
        self.caught_up = up_to_date;
        self.control(&mut out, next, up_to_date);
        Bytes::from(out)
    }

    /// Appends the control event for `next` and resets the control and heartbeat timers.
    fn control(&mut self, out: &mut Vec<u8>, next: Offset, up_to_date: bool) {
        let control = Control {
            stream_next_offset: next.to_string(),
            up_to_date: up_to_date.then_some(true),
        };
        out.extend_from_slice(b"event: control\nid: ");
        out.extend_from_slice(control.stream_next_offset.as_bytes());
        out.extend_from_slice(b"\ndata:");
        if serde_json::to_writer(&mut *out, &control).is_err() {
            out.extend_from_slice(b"{}");
        }
        out.extend_from_slice(b"\n\n");
        let now = Instant::now();
        self.next_control = now + self.state.config.control_interval;
        if self.next_heartbeat <= now {
            self.next_heartbeat = now + self.state.config.heartbeat_interval;
        }
    }
}
