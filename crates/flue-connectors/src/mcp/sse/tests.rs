//! Unit tests of the event-stream parser and endpoint resolution.

use pretty_assertions::assert_eq;
use reqwest::Url;

use super::{EventTooLarge, MAX_EVENT_BYTES, SseEvent, SseParser, resolve_endpoint};

fn parse_in_chunks(stream: &str, chunk_size: usize) -> Vec<SseEvent> {
    let mut parser = SseParser::default();
    let mut events = Vec::new();
    for chunk in stream.as_bytes().chunks(chunk_size) {
        parser.feed(chunk, &mut events).unwrap();
    }
    events
}

fn event(name: Option<&str>, data: &str) -> SseEvent {
    SseEvent {
        event: name.map(str::to_owned),
        data: data.to_owned(),
    }
}

#[test]
fn events_are_the_same_however_the_stream_is_split() {
    let stream = ": keep-alive\n\nevent: endpoint\ndata: /message?sessionId=abc\n\n\
                  event: message\r\ndata: {\"a\":1}\r\n\r\n\
                  data:first\rdata: second\r\rid: 7\nretry: 10\n\n";
    let expected = vec![
        event(Some("endpoint"), "/message?sessionId=abc"),
        event(Some("message"), "{\"a\":1}"),
        event(None, "first\nsecond"),
    ];
    for chunk_size in [1, 2, 3, 7, stream.len()] {
        assert_eq!(
            parse_in_chunks(stream, chunk_size),
            expected,
            "chunks of {chunk_size}"
        );
    }
}

#[test]
fn an_event_without_data_is_not_dispatched_and_an_unfinished_one_waits() {
    assert_eq!(parse_in_chunks("event: ping\n\ndata: x", 4), Vec::new());
}

#[test]
fn oversized_events_are_refused() {
    let mut parser = SseParser::default();
    let mut events = Vec::new();
    let line = vec![b'a'; MAX_EVENT_BYTES + 1];
    assert_eq!(parser.feed(&line, &mut events), Err(EventTooLarge));
}

#[test]
fn endpoints_resolve_against_the_stream_url_on_the_same_origin_only() {
    let base = Url::parse("http://127.0.0.1:3001/sse").unwrap();
    let resolved = resolve_endpoint(&base, " /message?sessionId=x ").unwrap();
    assert_eq!(
        resolved.as_str(),
        "http://127.0.0.1:3001/message?sessionId=x"
    );
    let absolute = resolve_endpoint(&base, "http://127.0.0.1:3001/m").unwrap();
    assert_eq!(absolute.as_str(), "http://127.0.0.1:3001/m");
    let elsewhere = resolve_endpoint(&base, "http://evil.example/m").unwrap_err();
    assert_eq!(
        elsewhere.to_string(),
        "the `endpoint` event points to another origin (http://evil.example); refusing to send requests there"
    );
    assert!(elsewhere.malformed);
}
