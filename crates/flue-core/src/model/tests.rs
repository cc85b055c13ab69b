//! The turn sink's redaction of streamed deltas: a secret split over deltas, in text and in
//! thinking, never goes out whole or in a piece; text without secrets goes out unchanged.

use flue_protocol::event::Event;

use super::TurnSink;
use crate::redact::Redactor;

const KEY: &str = "sk-test-0123456789abcdef";

/// Sends `deltas` (true: thinking) through a redacting sink, flushes, and returns the events.
fn stream(redactor: &Redactor, deltas: &[(bool, &str)]) -> Vec<Event> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let sink = TurnSink::new(tx).redacting(redactor);
    for (thinking, text) in deltas {
        if *thinking {
            sink.thinking_delta(text);
        } else {
            sink.text_delta(text);
        }
    }
    sink.flush();
    drop(sink);
    let mut events = Vec::new();
    while let Ok(event) = rx.try_recv() {
        events.push(event);
    }
    events
}

fn joined(events: &[Event], thinking: bool) -> String {
    events
        .iter()
        .filter_map(|event| match event {
            Event::TextDelta { text } if !thinking => Some(text.as_str()),
            Event::ThinkingDelta { text } if thinking => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_key_split_over_deltas_goes_out_redacted_in_both_streams() {
    let redactor = Redactor::new([KEY]).unwrap();
    for size in 1..=KEY.len() {
        let pieces: Vec<String> = format!("think {KEY} done")
            .as_bytes()
            .chunks(size)
            .map(|chunk| String::from_utf8(chunk.to_vec()).unwrap())
            .collect();
        let mut deltas: Vec<(bool, &str)> = pieces.iter().map(|p| (true, p.as_str())).collect();
        let text: Vec<String> = format!("My key is {KEY} as sent.")
            .as_bytes()
            .chunks(size)
            .map(|chunk| String::from_utf8(chunk.to_vec()).unwrap())
            .collect();
        deltas.extend(text.iter().map(|p| (false, p.as_str())));
        let events = stream(&redactor, &deltas);
        assert_eq!(
            joined(&events, true),
            "think [redacted] done",
            "size {size}"
        );
        assert_eq!(
            joined(&events, false),
            "My key is [redacted] as sent.",
            "size {size}"
        );
        // Thinking ends before text begins: the order of the streams is kept.
        let first_text = events
            .iter()
            .position(|event| matches!(event, Event::TextDelta { .. }))
            .unwrap();
        assert!(
            events[first_text..]
                .iter()
                .all(|event| matches!(event, Event::TextDelta { .. })),
            "size {size}"
        );
        for event in &events {
            if let Event::TextDelta { text } | Event::ThinkingDelta { text } = event {
                assert!(!text.contains("0123456789"), "{text:?} at size {size}");
            }
        }
    }
}

#[test]
fn text_without_secrets_goes_out_as_it_came() {
    let redactor = Redactor::new([KEY]).unwrap();
    let events = stream(&redactor, &[(false, "Hello "), (false, "world.")]);
    assert_eq!(joined(&events, false), "Hello world.");
    // Nothing to redact: the sink is the plain one, delta for delta.
    let events = stream(&Redactor::default(), &[(false, "sk-"), (false, "te")]);
    assert_eq!(events.len(), 2);
}
