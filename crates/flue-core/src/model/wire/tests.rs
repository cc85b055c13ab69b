//! The wire capture: what a provider reports inside a capture, nothing outside one, the last
//! attempt only, and bounded.

use super::{MAX_CAPTURED_BYTES, capture, received, sent};

#[tokio::test]
async fn a_capture_keeps_the_last_attempts_bytes_and_nothing_leaks_outside_it() {
    // Outside a capture: nothing to report to, nothing kept, no panic.
    sent("http://outside/v1", b"{}");
    received(b"data: x\n\n");
    let ((), captured) = capture(async {
        sent("http://model/v1/chat/completions", b"{\"try\":1}");
        received(b"HTTP 503 body");
        sent("http://model/v1/chat/completions", b"{\"try\":2}");
        received(b"data: a\n\n");
        received(b"data: [DONE]\n\n");
    })
    .await;
    assert_eq!(captured.url, "http://model/v1/chat/completions");
    assert_eq!(captured.attempts, 2);
    assert_eq!(captured.request, b"{\"try\":2}");
    assert_eq!(captured.response, b"data: a\n\ndata: [DONE]\n\n");
    assert!(!captured.truncated);
    let ((), none) = capture(async {}).await;
    assert_eq!(none.attempts, 0);
}

#[tokio::test]
async fn a_long_response_is_cut_at_the_bound() {
    let chunk = vec![b'x'; MAX_CAPTURED_BYTES / 2 + 1];
    let ((), captured) = capture(async {
        sent("http://model/v1", b"{}");
        received(&chunk);
        received(&chunk);
    })
    .await;
    assert_eq!(captured.response.len(), MAX_CAPTURED_BYTES);
    assert!(captured.truncated);
}
