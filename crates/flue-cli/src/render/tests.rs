//! Unit tests of the stderr renderer.

use flue_core::{CompactionReason, ErrorInfo, Event, Redactor, Usage};
use pretty_assertions::assert_eq;
use serde_json::json;

use super::Renderer;
use crate::terminal::Output;

const KEY: &str = "ghp_R2d2C3po0123456789abcdefXYZ";

fn render(events: &[Event]) -> String {
    render_with(Output::default(), events)
}

fn render_with(output: Output, events: &[Event]) -> String {
    let mut renderer = Renderer::new(output);
    let mut out = Vec::new();
    for event in events {
        renderer.render(&mut out, event).unwrap();
    }
    renderer.flush_text(&mut out).unwrap();
    String::from_utf8(out).unwrap()
}

fn text(text: &str) -> Event {
    Event::TextDelta { text: text.into() }
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

#[test]
fn control_sequences_from_the_model_and_tools_are_shown_escaped() {
    let events = [
        text("look \u{1b}]52;c;cm0gLXJmIH4=\u{7}"),
        text(" here\n"),
        Event::ToolStart {
            call_id: "c1".into(),
            name: "bash".into(),
            input: json!({"command": "printf '\\033[2J'"}),
        },
        Event::ToolEnd {
            call_id: "c1".into(),
            name: "bash".into(),
            is_error: false,
            output: "\u{1b}[2J\u{1b}[Hcleared\rfake".into(),
        },
    ];
    assert_eq!(
        render(&events),
        "look \\x1b]52;c;cm0gLXJmIH4=\\x07 here\n\
         -> bash {\"command\":\"printf '\\\\033[2J'\"}\n\
         <- bash done: \\x1b[2J\\x1b[Hcleared\\x0dfake\n"
    );
}

#[test]
fn a_secret_split_over_text_deltas_is_redacted_whole() {
    let output = Output::new(Redactor::new([KEY]).unwrap());
    let mut events: Vec<Event> = vec![text("the key is ")];
    // Three characters per delta, as models stream tokens.
    let chars: Vec<char> = KEY.chars().collect();
    events.extend(
        chars
            .chunks(3)
            .map(|piece| text(&piece.iter().collect::<String>())),
    );
    events.push(text(" ok\nnext line"));
    events.push(Event::ToolEnd {
        call_id: "c1".into(),
        name: "read_file".into(),
        is_error: true,
        output: format!("denied: {}", KEY.to_lowercase()),
    });
    assert_eq!(
        render_with(output, &events),
        "the key is [redacted] ok\nnext line\n<- read_file failed: denied: [redacted]\n"
    );
}
