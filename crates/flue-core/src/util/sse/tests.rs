//! Unit tests of the event-stream parser, one per rule of the WHATWG interpretation.

use pretty_assertions::assert_eq;

use super::{MAX_EVENT_BYTES, SseError, SseEvent, SseParser};

fn event(name: &str, data: &str, id: &str) -> SseEvent {
    SseEvent {
        event: name.to_owned(),
        data: data.to_owned(),
        last_event_id: id.to_owned(),
    }
}

fn message(data: &str) -> SseEvent {
    event("message", data, "")
}

/// Feeds `chunks` one after the other and returns every event.
fn parse(chunks: &[&[u8]]) -> Result<Vec<SseEvent>, SseError> {
    let mut parser = SseParser::default();
    let mut out = Vec::new();
    for chunk in chunks {
        parser.feed(chunk, &mut out)?;
    }
    Ok(out)
}

/// The events of `stream` split at every byte position, which must all agree.
fn parse_every_split(stream: &[u8]) -> Vec<SseEvent> {
    let whole = parse(&[stream]).unwrap();
    for split in 0..=stream.len() {
        let (head, tail) = stream.split_at(split);
        assert_eq!(parse(&[head, tail]).unwrap(), whole, "split at {split}");
    }
    let bytes: Vec<&[u8]> = stream.chunks(1).collect();
    assert_eq!(parse(&bytes).unwrap(), whole, "byte by byte");
    whole
}

#[test]
fn data_lines_join_with_newlines_and_comments_and_unknown_fields_are_skipped() {
    let stream =
        b": keep-alive\nevent: ping\ndata: {}\n\ndata: one\ndata: two\n\nfoo: bar\ndata:x\n\n";
    assert_eq!(
        parse_every_split(stream),
        vec![event("ping", "{}", ""), message("one\ntwo"), message("x")]
    );
}

#[test]
fn lines_end_with_crlf_lf_or_cr_whatever_the_chunks() {
    let stream = b"event: a\r\ndata: 1\r\n\r\nevent: b\rdata: 2\r\rdata: 3\n\n";
    assert_eq!(
        parse_every_split(stream),
        vec![event("a", "1", ""), event("b", "2", ""), message("3")]
    );
}

#[test]
fn a_final_cr_ends_its_line_without_waiting_for_more_bytes() {
    let mut parser = SseParser::default();
    let mut out = Vec::new();
    parser.feed(b"data: x\r\r", &mut out).unwrap();
    assert_eq!(out, vec![message("x")]);
    // The `\n` that may follow is part of the last line end, not a second blank line.
    parser.feed(b"\ndata: y\n\n", &mut out).unwrap();
    assert_eq!(out, vec![message("x"), message("y")]);
}

#[test]
fn one_byte_order_mark_at_the_start_is_skipped_and_only_there() {
    let stream = "\u{feff}data: 1\n\n\u{feff}data: 2\n\ndata: 3\n\n".as_bytes();
    // The second mark makes its line a field named "\u{feff}data", which is ignored.
    assert_eq!(parse_every_split(stream), vec![message("1"), message("3")]);
}

#[test]
fn one_space_after_the_colon_is_dropped_and_a_line_without_colon_is_an_empty_field() {
    let stream = b"data:  two spaces\n\ndata\ndata\n\ndata:\n\n";
    assert_eq!(
        parse_every_split(stream),
        vec![message(" two spaces"), message("\n"), message("")]
    );
}

#[test]
fn a_blank_line_without_data_dispatches_nothing_and_resets_the_event_type() {
    let stream = b"event: lonely\n\ndata: after\n\n";
    assert_eq!(parse_every_split(stream), vec![message("after")]);
}

#[test]
fn an_unfinished_event_is_held_until_its_blank_line_and_dropped_at_the_end() {
    let mut parser = SseParser::default();
    let mut out = Vec::new();
    parser.feed(b"data: partial", &mut out).unwrap();
    parser.feed(b"\n", &mut out).unwrap();
    assert_eq!(out, vec![]);
    parser.feed(b"\n", &mut out).unwrap();
    assert_eq!(out, vec![message("partial")]);
}

#[test]
fn the_last_event_id_carries_over_ignores_nul_and_can_be_cleared() {
    let stream = b"id: 7\ndata: a\n\ndata: b\n\nid: 8\0\ndata: c\n\nid\ndata: d\n\n";
    assert_eq!(
        parse_every_split(stream),
        vec![
            event("message", "a", "7"),
            event("message", "b", "7"),
            event("message", "c", "7"),
            event("message", "d", ""),
        ]
    );
}

#[test]
fn retry_takes_only_ascii_digits() {
    let mut parser = SseParser::default();
    let mut out = Vec::new();
    parser.feed(b"retry: 1500\n", &mut out).unwrap();
    assert_eq!(parser.retry_ms(), Some(1500));
    parser
        .feed(b"retry: 10s\nretry: -1\nretry:\n", &mut out)
        .unwrap();
    assert_eq!(parser.retry_ms(), Some(1500));
    assert_eq!(out, vec![]);
}

#[test]
fn multibyte_text_split_across_chunks_and_invalid_bytes_read_as_replacement() {
    assert_eq!(
        parse_every_split("data: héllo ✓\n\n".as_bytes()),
        vec![message("héllo ✓")]
    );
    assert_eq!(
        parse(&[b"data: a\xffb\n\n"]).unwrap(),
        vec![message("a\u{fffd}b")]
    );
}

#[test]
fn an_oversized_line_or_event_is_refused() {
    let line = vec![b'a'; MAX_EVENT_BYTES + 1];
    assert_eq!(parse(&[&line]), Err(SseError::EventTooLarge));
    let half = format!("data: {}\n", "a".repeat(MAX_EVENT_BYTES / 2));
    assert_eq!(
        parse(&[half.as_bytes(), half.as_bytes(), half.as_bytes()]),
        Err(SseError::EventTooLarge)
    );
}
