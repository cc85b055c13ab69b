//! Unit tests of the Messages request body.

use flue_core::{
    AssistantContent, AssistantMessage, Image, ModelRef, Record, StopReason, ThinkingLevel,
    ToolCall, ToolResult, Usage, UserContent, UserMessage,
    model::{ModelRequest, ToolSchema},
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::{AnthropicProvider, tool_id};
use crate::provider_config::{ApiKey, ProviderConfig};

fn provider() -> AnthropicProvider {
    AnthropicProvider::new(
        ProviderConfig::builtin("anthropic")
            .unwrap()
            .with_api_key(ApiKey::new("k")),
    )
    .unwrap()
}

fn body(model: &str, messages: &[Record], thinking: ThinkingLevel, max_output: u64) -> Value {
    let tools = [ToolSchema {
        name: "lookup".into(),
        description: "Looks up.".into(),
        input_schema: json!({"type": "object"}),
    }];
    let request = ModelRequest {
        model,
        system: "Be brief.",
        messages,
        tools: &tools,
        thinking,
        max_output_tokens: max_output,
    };
    serde_json::from_slice(&provider().body(&request).unwrap()).unwrap()
}

fn assistant(model: &str) -> AssistantMessage {
    AssistantMessage {
        content: vec![
            AssistantContent::Thinking {
                text: "let me look".into(),
                signature: Some("sig-1".into()),
                id: None,
            },
            AssistantContent::Text {
                text: "Looking.".into(),
            },
            AssistantContent::ToolCall(ToolCall {
                id: "call.1".into(),
                name: "lookup".into(),
                input: json!({"q": "x"}),
            }),
            AssistantContent::ToolCall(ToolCall {
                id: "toolu_2".into(),
                name: "lookup".into(),
                input: json!("{\"q\""),
            }),
        ],
        model: ModelRef {
            provider: "anthropic".into(),
            id: model.into(),
        },
        usage: Usage::default(),
        stop_reason: StopReason::ToolUse,
        interrupted: false,
    }
}

fn conversation(model: &str) -> Vec<Record> {
    let result = |id: &str, content: &str, is_error| {
        Record::ToolResult(ToolResult {
            call_id: id.into(),
            tool_name: "lookup".into(),
            content: content.into(),
            is_error,
            error_kind: None,
            data: Vec::new(),
        })
    };
    vec![
        Record::User(UserMessage {
            content: vec![
                UserContent::Text {
                    text: "look".into(),
                },
                UserContent::Image(Image {
                    data: "AAAA".into(),
                    mime_type: "image/png".into(),
                }),
            ],
        }),
        Record::Assistant(assistant(model)),
        result("call.1", "42", false),
        result("toolu_2", "", true),
    ]
}

#[test]
fn the_body_carries_blocks_thinking_cache_breakpoints_and_tools() {
    let model = "claude-sonnet-4-5";
    let body = body(model, &conversation(model), ThinkingLevel::Medium, 64_000);
    assert_eq!(
        body,
        json!({
            "model": model,
            "max_tokens": 64_000,
            "stream": true,
            "thinking": {"type": "enabled", "budget_tokens": 8192},
            "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
            "tools": [{"name": "lookup", "description": "Looks up.", "input_schema": {"type": "object"}}],
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
                ]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "let me look", "signature": "sig-1"},
                    {"type": "text", "text": "Looking."},
                    {"type": "tool_use", "id": "call_1", "name": "lookup", "input": {"q": "x"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "lookup", "input": {}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "call_1", "content": "42"},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": "(no output)",
                     "is_error": true, "cache_control": {"type": "ephemeral"}},
                ]},
            ],
        })
    );
}

#[test]
fn thinking_goes_back_only_to_its_own_model_and_only_when_on() {
    let messages = conversation("claude-sonnet-4-5");
    let first_block = |model: &str, level| {
        body(model, &messages, level, 64_000)["messages"][1]["content"][0]["type"].clone()
    };
    assert_eq!(
        first_block("claude-sonnet-4-5", ThinkingLevel::Low),
        json!("thinking")
    );
    assert_eq!(
        first_block("claude-sonnet-4-5", ThinkingLevel::Off),
        json!("text")
    );
    assert_eq!(
        first_block("claude-haiku-4-5", ThinkingLevel::Low),
        json!("text")
    );
}

#[test]
fn thinking_levels_map_to_budgets_or_adaptive_effort() {
    let messages = [Record::User(UserMessage::text("hi"))];
    let thinking = |model: &str, level, max_output| {
        let body = body(model, &messages, level, max_output);
        (
            body.get("thinking").cloned(),
            body.get("output_config").cloned(),
        )
    };
    assert_eq!(
        thinking("claude-haiku-4-5", ThinkingLevel::Xhigh, 64_000),
        (
            Some(json!({"type": "enabled", "budget_tokens": 32_768})),
            None
        )
    );
    // The budget leaves room for the answer; too small a room means no thinking.
    assert_eq!(
        thinking("claude-haiku-4-5", ThinkingLevel::High, 4_096),
        (
            Some(json!({"type": "enabled", "budget_tokens": 3_072})),
            None
        )
    );
    assert_eq!(
        thinking("claude-haiku-4-5", ThinkingLevel::High, 1_500),
        (None, None)
    );
    assert_eq!(
        thinking("claude-sonnet-4-6", ThinkingLevel::Xhigh, 64_000),
        (
            Some(json!({"type": "adaptive", "display": "summarized"})),
            Some(json!({"effort": "high"}))
        )
    );
    assert_eq!(
        thinking("claude-opus-4-7", ThinkingLevel::Xhigh, 64_000).1,
        Some(json!({"effort": "xhigh"}))
    );
    assert_eq!(
        thinking("claude-opus-4-7", ThinkingLevel::Off, 64_000),
        (None, None)
    );
    // Unknown models get conservative defaults: no thinking.
    assert_eq!(
        thinking("claude-next", ThinkingLevel::High, 64_000),
        (None, None)
    );
}

#[test]
fn call_ids_are_mapped_into_the_allowed_alphabet() {
    assert_eq!(tool_id("call_abc-1"), "call_abc-1");
    assert_eq!(tool_id("fc.1/2"), "fc_1_2");
    assert_eq!(tool_id(""), "call");
}
