//! Unit tests of the stderr renderer.

use flue_core::{ErrorInfo, Event, ModelRef, Redactor, StopReason, Usage, event::CompactionReason};
use pretty_assertions::assert_eq;
use serde_json::json;

use super::{Renderer, Target};
use crate::terminal::Output;

const KEY: &str = "ghp_R2d2C3po0123456789abcdefXYZ";

fn render(events: &[Event]) -> String {
    render_with(Output::default(), events)
}

fn render_with(output: Output, events: &[Event]) -> String {
    let mut renderer = Renderer::new(output, false, Target::Stderr);
    for event in events {
        renderer.render(event);
    }
    renderer.finish();
    shown(&mut renderer)
}

/// What the renderer wrote so far, stdout and stderr together (one terminal).
fn shown(renderer: &mut Renderer) -> String {
    std::mem::take(&mut renderer.written)
        .into_iter()
        .map(|(_, text)| text)
        .collect()
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
            // A failure's summary keeps the tool's own message.
            is_error: true,
            output: "\u{1b}[2J\u{1b}[Hcleared\rfake".into(),
        },
    ];
    assert_eq!(
        render(&events),
        "look \\x1b]52;c;cm0gLXJmIH4=\\x07 here\n\
         -> bash {\"command\":\"printf '\\\\033[2J'\"}\n\
         <- bash failed: \\x1b[2J\\x1b[Hcleared\\x0dfake\n"
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

#[test]
fn text_and_thinking_are_written_as_each_delta_arrives() {
    let mut renderer = Renderer::new(Output::default(), false, Target::Stderr);
    let mut seen = Vec::new();
    for event in [
        Event::ThinkingDelta { text: "Let".into() },
        Event::ThinkingDelta {
            text: " me think".into(),
        },
        text("Hel"),
        text("lo, wor"),
        text("ld"),
    ] {
        renderer.render(&event);
        seen.push(shown(&mut renderer));
    }
    renderer.finish();
    seen.push(shown(&mut renderer));
    assert_eq!(
        seen,
        [
            "(thinking) Let",
            " me think",
            "\nHel",
            "lo, wor",
            "ld",
            "\n"
        ]
    );
}

#[test]
fn the_text_goes_to_its_target_and_activity_to_stderr() {
    let mut renderer = Renderer::new(Output::default(), false, Target::Stdout);
    renderer.render(&Event::ThinkingDelta { text: "hm".into() });
    renderer.render(&text("Checking."));
    renderer.render(&Event::ToolStart {
        call_id: "c1".into(),
        name: "bash".into(),
        input: json!({}),
    });
    renderer.render(&text("Done"));
    renderer.finish();
    assert_eq!(
        renderer.written,
        [
            (Target::Stderr, "(thinking) ".to_owned()),
            (Target::Stderr, "hm".to_owned()),
            (Target::Stderr, "\n".to_owned()),
            (Target::Stdout, "Checking.".to_owned()),
            (Target::Stdout, "\n".to_owned()),
            (Target::Stderr, "-> bash {}\n".to_owned()),
            (Target::Stdout, "Done".to_owned()),
            (Target::Stdout, "\n".to_owned()),
        ]
    );
    assert_eq!(renderer.last_text(), "Done");
}

#[test]
fn only_a_tail_that_may_begin_a_secret_is_held_back() {
    let mut renderer = Renderer::new(
        Output::new(Redactor::new([KEY]).unwrap()),
        false,
        Target::Stderr,
    );
    renderer.render(&text("the key is gh"));
    assert_eq!(shown(&mut renderer), "the key is ");
    renderer.render(&text("p_R2d2"));
    assert_eq!(shown(&mut renderer), "");
    renderer.render(&text("C3po0123456789abcdefXYZ and more"));
    assert_eq!(shown(&mut renderer), "[redacted] and more");
}

#[test]
fn a_retry_is_shown_and_verbose_turns_show_tokens_and_cost() {
    let retry = Event::ProviderRetry {
        provider: "openai".into(),
        attempt: 1,
        max_retries: 3,
        delay_ms: 2000,
        message: "HTTP 503: overloaded".into(),
    };
    assert_eq!(
        render(std::slice::from_ref(&retry)),
        "openai: retrying 1 of 3 in 2 s: HTTP 503: overloaded\n"
    );
    let mut renderer = Renderer::new(Output::default(), true, Target::Stderr);
    renderer.render(&Event::TurnEnd {
        model: ModelRef {
            provider: "openai".into(),
            id: "gpt-4o".into(),
        },
        usage: Usage {
            input_tokens: 1000,
            output_tokens: 80,
            cache_read_tokens: 200,
            cost_usd: Some(0.0042),
            ..Usage::default()
        },
        stop_reason: StopReason::EndTurn,
    });
    let line = shown(&mut renderer);
    assert!(
        line.contains("1200 input + 80 output tokens, $0.0042"),
        "{line}"
    );
}

#[test]
fn each_kind_of_tool_result_becomes_one_short_line() {
    use super::summary::summary;
    let read = r#"{"ok":true,"data":{"content":"Hello, world!\n","sha256":"ab"}}"#;
    assert_eq!(
        summary("read_file", Some("greeting.txt"), false, read),
        "greeting.txt, 14 bytes"
    );
    let failed = r#"{"ok":false,"error":{"kind":"not_found","message":"no file x"}}"#;
    assert_eq!(
        summary("read_file", Some("x"), true, failed),
        "x, not_found: no file x"
    );
    let command = r#"{"exit_code":0,"stderr":"","stdout":"4"}"#;
    assert_eq!(
        summary("count", None, false, command),
        "exit code 0, 1 byte"
    );
    assert_eq!(
        summary("bash", None, false, "hello\n"),
        "exit code 0, 6 bytes"
    );
    assert_eq!(summary("load_skill", None, false, "hello\n"), "6 bytes");
    assert_eq!(
        summary("bash", None, true, "out\nerr\nexit code: 2"),
        "exit code 2, 7 bytes"
    );
    assert_eq!(summary("mcp", None, true, "denied:\nwhy"), "denied: | why");
    assert_eq!(summary("x", None, false, &"x".repeat(20_000)), "19.5 KiB");
}

#[test]
fn an_edit_shows_as_removed_and_added_lines_folded_after_eight() {
    let old: Vec<String> = (1..=10).map(|n| format!("old {n}")).collect();
    let input = serde_json::json!({"path": "a.txt", "edits": [
        {"oldText": old.join("\n"), "newText": "new 1"}
    ]});
    let lines = super::summary::edit_lines(&input);
    assert_eq!(lines.len(), 8 + 1 + 1);
    assert_eq!(lines[0], ('-', "old 1".to_owned()));
    assert_eq!(lines[8], (' ', "... 2 more line(s)".to_owned()));
    assert_eq!(lines[9], ('+', "new 1".to_owned()));
}

#[test]
fn verbose_tool_output_shows_its_lines_and_folds_a_long_one() {
    let result = |output: String| {
        let mut renderer = Renderer::new(Output::default(), true, Target::Stderr);
        renderer.render(&Event::ToolEnd {
            call_id: "c1".into(),
            name: "bash".into(),
            is_error: false,
            output,
        });
        renderer.finish();
        shown(&mut renderer)
    };
    let numbers = |n: usize| (1..=n).map(|i| format!("line {i}\n")).collect::<String>();
    assert_eq!(result("one line\n".into()), "<- bash done: one line\n");
    assert_eq!(
        result(numbers(3)),
        "<- bash done: line 1\n   line 2\n   line 3\n"
    );
    let long = result(numbers(40));
    let expected: String = format!(
        "<- bash done: line 1\n{}   ... 28 more lines\n",
        (2..=12)
            .map(|i| format!("   line {i}\n"))
            .collect::<String>()
    );
    assert_eq!(long, expected);
}

#[test]
fn an_approval_by_a_standing_rule_reads_without_the_calls_id() {
    let hook = |name: &str, reason: &str| flue_core::record::HookRecord {
        event: "PermissionRequest".into(),
        hook: name.into(),
        subject: Some("call_7f3a".into()),
        decision: "allow".into(),
        reason: Some(reason.into()),
        updated_input: None,
        replacement: None,
        additional_context: None,
        usage: None,
    };
    let ruled = super::hook_text(&hook(
        "standing rule rule_01",
        "approved by standing rule rule_01",
    ));
    assert_eq!(ruled, "approved by standing rule rule_01");
    // Other hooks keep naming what they decided on.
    let hooked = super::hook_text(&hook("guard.sh", "fine"));
    assert_eq!(
        hooked,
        "hook PermissionRequest by guard.sh: allow (call_7f3a): fine"
    );
}
