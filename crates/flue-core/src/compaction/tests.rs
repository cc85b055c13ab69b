//! Unit tests of compaction: budgets, estimates, cut points, prompts and file lists.

use flue_protocol::record::{
    AssistantMessage, Image, ModelRef, StopReason, ToolCall, ToolResult, UserMessage,
};
use pretty_assertions::assert_eq;
use serde_json::json;

use super::*;
use crate::tool::{ToolDefinition, ToolMeta};

/// A user message of `n_tokens` estimated tokens.
fn user(n_tokens: usize) -> Record {
    Record::User(UserMessage::text("u".repeat(n_tokens * 4)))
}

/// A model turn of `n_tokens` estimated tokens of text.
fn answer(n_tokens: usize) -> Record {
    assistant(
        vec![AssistantContent::Text {
            text: "a".repeat(n_tokens * 4),
        }],
        Usage::default(),
    )
}

fn assistant(content: Vec<AssistantContent>, usage: Usage) -> Record {
    Record::Assistant(AssistantMessage {
        content,
        model: ModelRef::default(),
        usage,
        stop_reason: StopReason::EndTurn,
        interrupted: false,
    })
}

/// A model turn calling `echo` once per id (2 tokens per call: `echo` + `{}`).
fn calls(ids: &[&str]) -> Record {
    assistant(
        ids.iter()
            .map(|id| {
                AssistantContent::ToolCall(ToolCall {
                    id: (*id).to_owned(),
                    name: "echo".into(),
                    input: json!({}),
                })
            })
            .collect(),
        Usage::default(),
    )
}

/// The result of call `id`, `n_tokens` estimated tokens long.
fn result(id: &str, n_tokens: usize) -> Record {
    Record::ToolResult(ToolResult {
        call_id: id.into(),
        tool_name: "echo".into(),
        content: "r".repeat(n_tokens * 4),
        is_error: false,
        error_kind: None,
        data: Vec::new(),
    })
}

fn summary(text: &str, first_kept: u64) -> Record {
    Record::Compaction(CompactionSummary {
        summary: text.into(),
        first_kept,
        tokens_before: 0,
        usage: None,
    })
}

fn info(context_window: u64, max_output_tokens: u64) -> ModelInfo {
    ModelInfo {
        context_window,
        max_output_tokens,
        ..ModelInfo::default()
    }
}

fn budget(reserve_tokens: u64, keep_recent_tokens: u64, context_window: u64) -> Budget {
    Budget {
        context_window,
        reserve_tokens,
        keep_recent_tokens,
    }
}

#[test]
fn default_budgets_follow_the_model() {
    // A large model: the reserve is capped at 20000.
    assert_eq!(
        Budget::new(None, &info(200_000, 64_000)),
        budget(20_000, 8_000, 200_000)
    );
    // A smaller output limit lowers the reserve.
    assert_eq!(
        Budget::new(None, &info(128_000, 8_192)),
        budget(8_192, 8_000, 128_000)
    );
    // A small window: twice the reserve would not fit, so a third of the window; keep-recent
    // is capped at half of what the reserve leaves.
    assert_eq!(
        Budget::new(None, &info(12_000, 8_192)),
        budget(4_000, 4_000, 12_000)
    );
    assert_eq!(Budget::new(None, &info(12_000, 8_192)).threshold(), 8_000);
}

#[test]
fn configured_budgets_are_taken_as_given() {
    let config = CompactionConfig {
        reserve_tokens: Some(1_000),
        keep_recent_tokens: Some(50_000),
        model: None,
    };
    assert_eq!(
        Budget::new(Some(&config), &info(12_000, 8_192)),
        budget(1_000, 50_000, 12_000)
    );
    // Unset fields still get defaults.
    let reserve_only = CompactionConfig {
        reserve_tokens: Some(2_000),
        ..CompactionConfig::default()
    };
    assert_eq!(
        Budget::new(Some(&reserve_only), &info(12_000, 8_192)),
        budget(2_000, 5_000, 12_000)
    );
}

#[test]
fn the_estimate_is_the_last_reported_usage_plus_what_came_after() {
    let reported = Usage {
        input_tokens: 500,
        output_tokens: 20,
        cache_read_tokens: 30,
        ..Usage::default()
    };
    let records = vec![
        user(100),
        assistant(vec![], reported),
        user(100),
        result("x", 7),
    ];
    assert_eq!(estimate_context(&records, "ignored", &[]), 550 + 100 + 7);
}

#[test]
fn without_reported_usage_everything_is_estimated() {
    let image = Image {
        data: "AAAA".into(),
        mime_type: "image/png".into(),
    };
    let mut with_image = UserMessage::text("u".repeat(40));
    with_image.content.push(UserContent::Image(image));
    let records = vec![Record::User(with_image)];
    let tools = [ToolSchema {
        name: "echo".into(),
        description: "Echo".into(),
        input_schema: json!({}),
    }];
    // System 10 tokens, tool 10 characters (3 tokens together with the system's 40 chars:
    // 50 chars = 13 tokens), text 10 tokens, image IMAGE_TOKENS.
    assert_eq!(
        estimate_context(&records, &"s".repeat(40), &tools),
        13 + 10 + IMAGE_TOKENS
    );
}

#[test]
fn usage_reported_before_the_latest_summary_is_stale() {
    let reported = Usage {
        input_tokens: 5_000,
        ..Usage::default()
    };
    let records = vec![
        user(100),
        assistant(
            vec![AssistantContent::Text {
                text: "a".repeat(40),
            }],
            reported,
        ),
        summary(&"s".repeat(40), 1),
        user(100),
    ];
    // The model sees the summary (10), the kept turn (10) and the new message (100).
    assert_eq!(estimate_context(&records, "", &[]), 120);
}

#[test]
fn the_cut_keeps_about_keep_recent_tokens_from_a_user_message() {
    let records = vec![
        user(100),
        answer(100),
        user(100),
        answer(100),
        user(100),
        answer(100),
    ];
    assert_eq!(
        plan_cut(&records, 150),
        Some(CutPlan {
            start: 0,
            split_turn: None,
            first_kept: 4
        })
    );
}

#[test]
fn a_cut_inside_a_turn_splits_it() {
    let records = vec![
        user(100),
        answer(100),
        user(100),
        answer(100),
        user(100),
        answer(100),
    ];
    let plan = plan_cut(&records, 250).unwrap();
    assert_eq!(
        plan,
        CutPlan {
            start: 0,
            split_turn: Some(2),
            first_kept: 3
        }
    );
    assert_eq!((plan.history(), plan.turn_prefix()), (0..2, Some(2..3)));
}

#[test]
fn the_cut_never_separates_a_tool_call_from_its_result() {
    let records = vec![
        user(100),
        calls(&["c1"]),
        result("c1", 100),
        calls(&["c2", "c3"]),
        result("c2", 100),
        result("c3", 100),
        answer(100),
    ];
    // 150 tokens reach into c3's result: the next cut point is the final answer.
    assert_eq!(
        plan_cut(&records, 150),
        Some(CutPlan {
            start: 0,
            split_turn: Some(0),
            first_kept: 6
        })
    );
    // 250 tokens reach into c2's result: still the final answer, never between the results.
    assert_eq!(plan_cut(&records, 250).map(|plan| plan.first_kept), Some(6));
    // 302 tokens reach the second call: it is kept with both its results.
    assert_eq!(plan_cut(&records, 302).map(|plan| plan.first_kept), Some(3));
    // When the budget ends inside the newest pair, the newest possible cut keeps the pair.
    let ends_with_pair = &records[..6];
    assert_eq!(
        plan_cut(ends_with_pair, 50).map(|plan| plan.first_kept),
        Some(3)
    );
}

#[test]
fn an_unanswered_call_blocks_every_cut_after_it() {
    let records = vec![user(100), calls(&["lost"]), user(100), answer(100)];
    assert_eq!(
        plan_cut(&records, 1),
        Some(CutPlan {
            start: 0,
            split_turn: Some(0),
            first_kept: 1
        })
    );
}

#[test]
fn nothing_to_compact_when_everything_fits_the_budget() {
    let records = vec![user(100), answer(100)];
    assert_eq!(plan_cut(&records, 500), None);
    assert_eq!(plan_cut(&[], 0), None);
}

#[test]
fn a_later_cut_starts_where_the_previous_summary_ended() {
    let mut records = vec![
        user(100),
        answer(100),
        user(100),
        answer(100),
        user(100),
        answer(100),
    ];
    records.push(summary("earlier", 4));
    // Only the kept records are left, and they fit.
    assert_eq!(plan_cut(&records, 250), None);
    records.push(user(100));
    records.push(answer(100));
    assert_eq!(
        plan_cut(&records, 150),
        Some(CutPlan {
            start: 4,
            split_turn: None,
            first_kept: 7
        })
    );
}

#[test]
fn the_conversation_keeps_its_newest_records_when_it_does_not_fit() {
    let records = vec![
        Record::User(UserMessage::text("first")),
        Record::User(UserMessage::text("second")),
        Record::User(UserMessage::text("third")),
    ];
    assert_eq!(
        render_conversation(&records, 1_000),
        "[User]: first\n\n[User]: second\n\n[User]: third"
    );
    assert_eq!(
        render_conversation(&records, 31),
        format!("{OMITTED_MARKER}\n\n[User]: second\n\n[User]: third")
    );
}

#[test]
fn the_conversation_shows_calls_and_truncates_long_outputs() {
    let records = vec![
        calls(&["c1"]),
        Record::ToolResult(ToolResult {
            call_id: "c1".into(),
            tool_name: "echo".into(),
            content: "x".repeat(MAX_OUTPUT_CHARS + 10),
            is_error: true,
            error_kind: Some("boom".into()),
            data: Vec::new(),
        }),
        summary("not shown", 0),
    ];
    assert_eq!(
        render_conversation(&records, usize::MAX),
        format!(
            "[Assistant tool call]: echo {{}}\n\n[Tool error echo]: {}\n[... 10 more characters]",
            "x".repeat(MAX_OUTPUT_CHARS)
        )
    );
}

#[test]
fn a_later_summary_updates_the_previous_one() {
    let first = history_prompt("[User]: hi", None);
    assert!(first.starts_with("<conversation>\n[User]: hi\n</conversation>"));
    assert!(first.contains("## Goal") && first.contains("## Critical Context"));
    assert!(!first.contains("<previous-summary>"));

    let update = history_prompt("[User]: more", Some("## Goal\nShip it."));
    assert!(update.starts_with(
        "<previous-summary>\n## Goal\nShip it.\n</previous-summary>\n\n<conversation>\n[User]: \
         more\n</conversation>"
    ));
    assert!(update.contains("fold into the existing summary"));
    assert!(update.contains("## Progress\n### Done"));

    let prefix = turn_prefix_prompt("[User]: long task");
    assert!(prefix.contains("## Original Request") && prefix.contains("## Context for Suffix"));
}

fn file_tool(name: &str, read_only: bool) -> ToolDefinition {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Input {}
    ToolDefinition::from_fn(name, "Files.", |_input: Input, _ctx| async {
        Ok(json!("ok"))
    })
    .unwrap()
    .with_meta(ToolMeta {
        read_only,
        ..ToolMeta::default()
    })
}

fn call(id: &str, name: &str, input: Value) -> AssistantContent {
    AssistantContent::ToolCall(ToolCall {
        id: id.into(),
        name: name.into(),
        input,
    })
}

fn outcome(id: &str, is_error: bool) -> Record {
    Record::ToolResult(ToolResult {
        call_id: id.into(),
        tool_name: "?".into(),
        content: String::new(),
        is_error,
        error_kind: None,
        data: Vec::new(),
    })
}

#[test]
fn files_are_listed_from_successful_tool_calls() {
    let tools =
        ToolSet::assemble([file_tool("read_file", true), file_tool("write_file", false)]).unwrap();
    let records = vec![
        assistant(
            vec![
                call("a", "read_file", json!({"path": "src/a.rs"})),
                call("b", "write_file", json!({"file_path": "src/b.rs"})),
                call("c", "write_file", json!({"paths": ["src/c.rs", 7]})),
                call("d", "read_file", json!({"path": "src/b.rs"})),
                call("e", "unknown", json!({"path": "src/e.rs"})),
            ],
            Usage::default(),
        ),
        outcome("a", false),
        outcome("b", false),
        outcome("c", true),
        outcome("d", false),
        outcome("e", false),
    ];
    let mut files = FileLists::default();
    files.collect(&records, &tools);
    assert_eq!(
        files,
        FileLists {
            read: ["src/a.rs".to_owned(), "src/b.rs".to_owned()].into(),
            modified: ["src/b.rs".to_owned()].into(),
        }
    );

    let text = files.append_to("## Goal\nShip it.\n");
    assert_eq!(
        text,
        "## Goal\nShip it.\n\n## Files Read and Modified\n<read-files>\nsrc/a.rs\n</read-files>\n\
         <modified-files>\nsrc/b.rs\n</modified-files>"
    );
    // A file both read and modified is listed once, as modified.
    let (body, parsed) = FileLists::split(&text);
    assert_eq!(
        (body, parsed),
        (
            "## Goal\nShip it.",
            FileLists {
                read: ["src/a.rs".to_owned()].into(),
                modified: ["src/b.rs".to_owned()].into(),
            }
        )
    );
}

#[test]
fn a_summary_without_files_is_left_as_is() {
    assert_eq!(FileLists::default().append_to("body\n"), "body");
    assert_eq!(FileLists::split("body"), ("body", FileLists::default()));
}
