//! The bytes of a model call on the wire, for a frontend that shows them (the dev console's
//! prompt view): [`capture`] runs a provider call with a capture in scope, and an HTTP
//! provider hands it the request body it sends ([`sent`]) and the response bytes it reads
//! ([`received`]). Without a capture in scope both do nothing. Headers (the API key) are never
//! captured; each direction keeps at most [`MAX_CAPTURED_BYTES`].

use std::future::Future;
use std::sync::{Arc, Mutex};

/// The most bytes kept of a request body, and of a response.
pub const MAX_CAPTURED_BYTES: usize = 1024 * 1024;

/// What one model call sent and received, the last attempt's when the provider retried.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WireCapture {
    /// The URL the request went to.
    pub url: String,
    /// The request body.
    pub request: Vec<u8>,
    /// The response body (for a stream, its events as they arrived).
    pub response: Vec<u8>,
    /// Attempts made (more than one after retries).
    pub attempts: u32,
    /// A body was longer than [`MAX_CAPTURED_BYTES`] and was cut there.
    pub truncated: bool,
}

tokio::task_local! {
    static CAPTURE: Arc<Mutex<WireCapture>>;
}

/// Runs `call` (a provider's `stream_turn`) with a capture in scope; returns its output and
/// what the provider reported sending and receiving (nothing for a provider that does not).
pub async fn capture<F: Future>(call: F) -> (F::Output, WireCapture) {
    let held = Arc::new(Mutex::new(WireCapture::default()));
    let output = CAPTURE.scope(Arc::clone(&held), call).await;
    let captured = held
        .lock()
        .map(|captured| captured.clone())
        .unwrap_or_default();
    (output, captured)
}

/// The provider sends `body` to `url` (a new attempt: what an earlier one received goes).
pub fn sent(url: &str, body: &[u8]) {
    let _ = CAPTURE.try_with(|held| {
        if let Ok(mut captured) = held.lock() {
            captured.url = url.to_owned();
            captured.attempts += 1;
            captured.request.clear();
            captured.response.clear();
            captured.truncated = false;
            keep(&mut captured, body, false);
        }
    });
}

/// The provider read `chunk` of the response.
pub fn received(chunk: &[u8]) {
    let _ = CAPTURE.try_with(|held| {
        if let Ok(mut captured) = held.lock() {
            keep(&mut captured, chunk, true);
        }
    });
}

fn keep(captured: &mut WireCapture, bytes: &[u8], response: bool) {
    let room = MAX_CAPTURED_BYTES.saturating_sub(if response {
        captured.response.len()
    } else {
        captured.request.len()
    });
    let kept = &bytes[..bytes.len().min(room)];
    if kept.len() < bytes.len() {
        captured.truncated = true;
    }
    if response {
        captured.response.extend_from_slice(kept);
    } else {
        captured.request.extend_from_slice(kept);
    }
}

#[cfg(test)]
mod tests;
