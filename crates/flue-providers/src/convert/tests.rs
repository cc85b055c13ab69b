//! Unit tests of the shared conversation rules.

use std::borrow::Cow;

use flue_core::{
    AssistantContent, AssistantMessage, Image, ModelRef, Record, StopReason, ToolCall, ToolResult,
    Usage, UserContent, UserMessage, record::CompactionSummary, record::ShellExchange,
};
use pretty_assertions::assert_eq;
use serde_json::json;

use super::{IMAGE_PLACEHOLDER, Item, arguments_text, items};

fn call(id: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: "lookup".into(),
        input: json!({"q": 1}),
    }
}

fn assistant(calls: &[&str]) -> AssistantMessage {
    AssistantMessage {
        content: calls
            .iter()
            .map(|id| AssistantContent::ToolCall(call(id)))
            .collect(),
        model: ModelRef::default(),
        usage: Usage::default(),
        stop_reason: StopReason::ToolUse,
        interrupted: false,
    }
}

fn result(id: &str) -> ToolResult {
    ToolResult {
        call_id: id.into(),
        tool_name: "lookup".into(),
        content: "42".into(),
        is_error: false,
        error_kind: None,
        data: Vec::new(),
    }
}

#[test]
fn orphan_results_shell_and_summaries_become_user_text() {
    let turn = assistant(&["a"]);
    let records = vec![
        Record::Compaction(CompactionSummary {
            summary: "we talked".into(),
            first_kept: 3,
            tokens_before: 0,
            usage: None,
        }),
        Record::ToolResult(result("cut-off")),
        Record::Assistant(turn.clone()),
        Record::ToolResult(result("a")),
        Record::Shell(ShellExchange {
            command: "ls".into(),
            cwd: None,
            env_keys: vec![],
            stdout: "file\n".into(),
            stderr: String::new(),
            exit_code: 0,
        }),
    ];
    let a_result = result("a");
    assert_eq!(
        items(&records, true),
        vec![
            Item::Text(Cow::Borrowed(
                "Summary of the earlier conversation:\n\nwe talked"
            )),
            Item::Text(Cow::Borrowed(
                "Result of an earlier call to tool `lookup`:\n42"
            )),
            Item::Assistant(&turn),
            Item::ToolResult(&a_result),
            Item::Text(Cow::Borrowed(
                "The user ran a shell command:\n$ ls\nexit code: 0\nstdout:\nfile\n\n"
            )),
        ]
    );
}

#[test]
fn images_are_kept_or_replaced_by_a_placeholder() {
    let image = Image {
        data: "AAAA".into(),
        mime_type: "image/png".into(),
    };
    let records = vec![Record::User(UserMessage {
        content: vec![
            UserContent::Text { text: "see".into() },
            UserContent::Image(image.clone()),
        ],
    })];
    assert_eq!(
        items(&records, true),
        vec![Item::Text(Cow::Borrowed("see")), Item::Image(&image)]
    );
    assert_eq!(
        items(&records, false),
        vec![
            Item::Text(Cow::Borrowed("see")),
            Item::Text(Cow::Borrowed(IMAGE_PLACEHOLDER))
        ]
    );
}

#[test]
fn unparsable_arguments_travel_verbatim() {
    let mut broken = call("x");
    broken.input = json!("{\"q\": ");
    assert_eq!(arguments_text(&broken), "{\"q\": ");
    assert_eq!(arguments_text(&call("y")), "{\"q\":1}");
}
