//! Unit tests of the SSE framing.

use pretty_assertions::assert_eq;

use super::{SseError, SseEvent, SseParser};

fn event(name: &str, data: &str) -> SseEvent {
    SseEvent {
        event: name.to_owned(),
        data: data.to_owned(),
    }
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

#[test]
fn events_data_lines_and_comments() {
    let stream = b": keep-alive\nevent: ping\ndata: {}\n\ndata: one\ndata: two\n\nid: 7\nretry: 10\ndata:x\n\n";
    assert_eq!(
        parse(&[stream]),
        Ok(vec![
            event("ping", "{}"),
            event("", "one\ntwo"),
            event("", "x")
        ])
    );
}

#[test]
fn every_line_ending_and_every_split_point() {
    let stream = b"event: a\r\ndata: 1\r\n\r\nevent: b\rdata: 2\r\rdata: 3\n\n";
    let expected = vec![event("a", "1"), event("b", "2"), event("", "3")];
    for split in 0..=stream.len() {
        let (head, tail) = stream.split_at(split);
        assert_eq!(
            parse(&[head, tail]),
            Ok(expected.clone()),
            "split at {split}"
        );
    }
    let bytes: Vec<&[u8]> = stream.chunks(1).collect();
    assert_eq!(parse(&bytes), Ok(expected));
}

#[test]
fn a_blank_line_without_data_dispatches_nothing_and_an_unfinished_event_is_held() {
    let mut parser = SseParser::default();
    let mut out = Vec::new();
    parser
        .feed(b"event: lonely\n\ndata: partial", &mut out)
        .unwrap();
    assert_eq!(out, vec![]);
    parser.feed(b"\n\n", &mut out).unwrap();
    assert_eq!(out, vec![event("", "partial")]);
}

#[test]
fn multibyte_text_split_across_chunks() {
    let stream = "data: héllo ✓\n\n".as_bytes();
    let bytes: Vec<&[u8]> = stream.chunks(1).collect();
    assert_eq!(parse(&bytes), Ok(vec![event("", "héllo ✓")]));
}

#[test]
fn invalid_utf8_is_malformed() {
    assert_eq!(parse(&[b"data: \xff\xfe\n\n"]), Err(SseError::InvalidUtf8));
}
