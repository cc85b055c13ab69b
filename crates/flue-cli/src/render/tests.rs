//! Unit tests of the stderr renderer.

use flue_core::{CompactionReason, ErrorInfo, Event, Usage};
use pretty_assertions::assert_eq;

use super::Renderer;

fn render(events: &[Event]) -> String {
    let mut renderer = Renderer {
        at_line_start: true,
    };
    let mut out = Vec::new();
    for event in events {
        renderer.render(&mut out, event).unwrap();
    }
    String::from_utf8(out).unwrap()
}

fn end(error: Option<ErrorInfo>) -> Event {
    Event::CompactionEnd {
        messages_before: 40,
        messages_after: 9,
        tokens_before: 1200,
        tokens_after: 300,
        duration_ms: 15,
        usage: Usage::default(),
        error,
    }
}

#[test]
fn compaction_is_one_line_each_for_start_and_end() {
    let events = [
        Event::TextDelta {
            text: "Working on it".into(),
        },
        Event::CompactionStart {
            reason: CompactionReason::Threshold,
            estimated_tokens: 1200,
        },
        end(None),
        Event::CompactionStart {
            reason: CompactionReason::Overflow,
            estimated_tokens: 1200,
        },
        end(Some(ErrorInfo {
            kind: "provider_error".into(),
            message: "model provider \"x\" failed: overloaded".into(),
        })),
    ];
    assert_eq!(
        render(&events),
        "Working on it\n\
         compacting context (near the context window, ~1200 tokens)\n\
         compacted 40 -> 9 messages, ~1200 -> ~300 tokens in 15 ms\n\
         compacting context (context overflow, ~1200 tokens)\n\
         compaction failed: model provider \"x\" failed: overloaded\n"
    );
}
