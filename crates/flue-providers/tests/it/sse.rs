//! The shared event-stream parser (`flue_core::util::sse`) against every recorded stream of
//! `tests/corpus`: the events it reads must not depend on how the stream is framed (line ends,
//! a byte order mark, comments, `id`/`retry` lines, data split over several `data:` lines) or
//! cut into pieces.

use std::path::{Path, PathBuf};

use flue_core::util::sse::{SseEvent, SseParser};
use pretty_assertions::assert_eq;
use serde_json::Value;

/// Every recorded stream as LF-framed event-stream bytes: the `.sse` files as they are, the
/// `.jsonl` payloads framed `event: <type>` (when the payload names one) + `data:`.
fn recorded_streams() -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    collect(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus"),
        &mut files,
    );
    files.sort();
    let streams: Vec<(PathBuf, String)> = files
        .into_iter()
        .filter_map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            match path.extension().and_then(|ext| ext.to_str()) {
                Some("sse") => Some((path, text)),
                Some("jsonl") => Some((path, frame_jsonl(&text))),
                _ => None,
            }
        })
        .collect();
    assert!(streams.len() >= 40, "the corpus shrank: {}", streams.len());
    streams
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect(&path, files);
        } else {
            files.push(path);
        }
    }
}

fn frame_jsonl(text: &str) -> String {
    let mut body = String::new();
    for line in text.lines().filter(|line| !line.trim().is_empty()) {
        let value: Value = serde_json::from_str(line).unwrap();
        if let Some(kind) = value.get("type").and_then(Value::as_str) {
            body.push_str(&format!("event: {kind}\n"));
        }
        body.push_str(&format!("data: {line}\n\n"));
    }
    body
}

/// The events of `stream` fed in pieces of 1 to 61 bytes drawn from `seed`.
fn parse_in_pieces(stream: &[u8], seed: u64) -> Vec<SseEvent> {
    let mut parser = SseParser::default();
    let mut events = Vec::new();
    let mut state = seed | 1;
    let mut rest = stream;
    while !rest.is_empty() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let size = usize::try_from(state % 61).unwrap() + 1;
        let (piece, tail) = rest.split_at(size.min(rest.len()));
        parser.feed(piece, &mut events).unwrap();
        rest = tail;
    }
    events
}

#[test]
fn every_recorded_stream_reads_as_its_payloads() {
    for (path, stream) in recorded_streams() {
        let events = parse_in_pieces(stream.as_bytes(), 0x5eed);
        let payloads: Vec<&str> = stream
            .lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .collect();
        let data: Vec<&str> = events.iter().map(|event| event.data.as_str()).collect();
        assert_eq!(data, payloads, "{}", path.display());
        for event in &events {
            let value: Value = serde_json::from_str(&event.data).unwrap();
            let kind = value.get("type").and_then(Value::as_str);
            assert_eq!(Some(event.event.as_str()), kind.or(Some("message")));
        }
    }
}

#[test]
fn framing_and_cuts_do_not_change_the_events_of_a_recorded_stream() {
    for (path, stream) in recorded_streams() {
        let expected = parse_in_pieces(stream.as_bytes(), 1);
        let framings = [
            stream.replace('\n', "\r\n"),
            stream.replace('\n', "\r"),
            format!(
                "\u{feff}: a comment first\n{}",
                stream.replace("\n\n", "\n:ping\n\n")
            ),
            format!(
                "retry: 3000\n{}",
                stream.replace("\n\n", "\nfoo: ignored\n\n")
            ),
        ];
        for (idx, framed) in framings.iter().enumerate() {
            for seed in [0x5eed, 0xc0ffee] {
                assert_eq!(
                    parse_in_pieces(framed.as_bytes(), seed),
                    expected,
                    "{} framing {idx} seed {seed}",
                    path.display()
                );
            }
        }
    }
}

#[test]
fn data_split_over_lines_joins_with_newlines_and_ids_carry_over() {
    for (path, stream) in recorded_streams() {
        let mut framed = String::new();
        let mut expected = Vec::new();
        for (idx, event) in parse_in_pieces(stream.as_bytes(), 1)
            .into_iter()
            .enumerate()
        {
            let cut = event.data.len() / 2;
            let cut = (cut..event.data.len())
                .find(|&at| event.data.is_char_boundary(at))
                .unwrap_or(event.data.len());
            let (head, tail) = event.data.split_at(cut);
            framed.push_str(&format!(
                "id: {idx}\nevent: {}\ndata: {head}\ndata: {tail}\n\n",
                event.event
            ));
            expected.push(SseEvent {
                data: format!("{head}\n{tail}"),
                last_event_id: idx.to_string(),
                ..event
            });
        }
        assert_eq!(
            parse_in_pieces(framed.as_bytes(), 0xc0ffee),
            expected,
            "{}",
            path.display()
        );
    }
}
