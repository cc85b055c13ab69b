//! `live=sse`: a pull-based event stream per reader. Each reader reads the conversation's
//! stream at its own pace from its own offset; nothing is queued for it, so a slow or vanished
//! reader holds no memory beyond its socket and never delays the agent or other readers.
//!
//! Framing: `event: data` with a JSON chunk array (only when a read produced chunks), then
//! `event: control` with `{"streamNextOffset", "upToDate"}` after every read cycle (carrying
//! an `id:` line with the offset, for `Last-Event-ID` resume), a `: heartbeat` comment every
//! heartbeat interval, and a control event at least every control interval.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::stream;
use tokio::time::Instant;

use crate::backend::{ConversationKey, Page};
use crate::error::ApiError;
use crate::router::AppState;
use crate::routes::render_page;
use crate::wire::{Control, Offset};

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
        .backend
        .read(&key, offset, state.config.page_size)
        .await?;
    let now = Instant::now();
    let reader = Reader {
        conversation_id: key.conversation_id(),
        next_heartbeat: now + state.config.heartbeat_interval,
        next_control: now + state.config.control_interval,
        state,
        key,
        offset,
        from_origin,
        pending: Some(page),
        caught_up: false,
        _stream_span: tracing::info_span!(target: flue_core::SPAN_TARGET, parent: None, "flue.sse"),
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
                let page = self
                    .state
                    .backend
                    .read(&self.key, self.offset, self.state.config.page_size)
                    .await
                    .ok()?;
                return Some(self.render(&page));
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
            let changed = self.state.backend.changed(&self.key, self.offset);
            if tokio::time::timeout_at(deadline, changed).await.is_ok() {
                self.caught_up = false;
            }
        }
    }

    /// One read cycle: a data event when there are chunks, then the control event.
    fn render(&mut self, page: &Page) -> Bytes {
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
        let control = Control {
            stream_next_offset: next.to_string(),
            up_to_date: up_to_date.then_some(true),
        };
        out.extend_from_slice(b"event: control\nid: ");
        out.extend_from_slice(control.stream_next_offset.as_bytes());
        out.extend_from_slice(b"\ndata:");
        if serde_json::to_writer(&mut out, &control).is_err() {
            out.extend_from_slice(b"{}");
        }
        out.extend_from_slice(b"\n\n");
        let now = Instant::now();
        self.next_control = now + self.state.config.control_interval;
        if self.next_heartbeat <= now {
            self.next_heartbeat = now + self.state.config.heartbeat_interval;
        }
        Bytes::from(out)
    }
}
