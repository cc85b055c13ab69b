//! Unit tests of the Chat Completions request body.

use flue_core::{
    AssistantContent, AssistantMessage, Image, ModelRef, Record, StopReason, ThinkingLevel,
    ToolCall, ToolResult, Usage, UserContent, UserMessage,
    model::{ModelInfo, ModelRequest, ToolSchema},
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::OpenAiProvider;
use crate::provider_config::{ApiKey, ProviderConfig, WireApi};

fn provider(config: ProviderConfig) -> OpenAiProvider {
    OpenAiProvider::new(config.with_api_key(ApiKey::new("k"))).unwrap()
}

fn body(
    provider: &OpenAiProvider,
    model: &str,
    messages: &[Record],
    thinking: ThinkingLevel,
) -> Value {
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
        max_output_tokens: 1000,
    };
    serde_json::from_slice(&provider.body(&request).unwrap()).unwrap()
}

fn conversation() -> Vec<Record> {
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
        Record::Assistant(AssistantMessage {
            content: vec![
                AssistantContent::Thinking {
                    text: "hmm".into(),
                    signature: None,
                    id: None,
                },
                AssistantContent::ToolCall(ToolCall {
                    id: "call_1".into(),
                    name: "lookup".into(),
                    input: json!({"q": "x"}),
                }),
                AssistantContent::ToolCall(ToolCall {
                    id: "call_2".into(),
                    name: "lookup".into(),
                    input: json!("{\"q\": "),
                }),
            ],
            model: ModelRef::default(),
            usage: Usage::default(),
            stop_reason: StopReason::ToolUse,
            interrupted: false,
        }),
        Record::ToolResult(ToolResult {
            call_id: "call_1".into(),
            tool_name: "lookup".into(),
            content: "42".into(),
            is_error: false,
            error_kind: None,
            data: Vec::new(),
        }),
        Record::ToolResult(ToolResult {
            call_id: "call_2".into(),
            tool_name: "lookup".into(),
            content: "bad arguments".into(),
            is_error: true,
            error_kind: Some("invalid_input".into()),
            data: Vec::new(),
        }),
    ]
}

#[test]
fn the_body_carries_messages_tools_limits_and_reasoning() {
    let openai = provider(ProviderConfig::builtin("openai").unwrap());
    let body = body(&openai, "gpt-5", &conversation(), ThinkingLevel::Minimal);
    assert_eq!(
        body,
        json!({
            "model": "gpt-5",
            "stream": true,
            "stream_options": {"include_usage": true},
            "max_completion_tokens": 1000,
            "reasoning_effort": "minimal",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                ]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\":\"x\"}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\": "}},
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "42"},
                {"role": "tool", "tool_call_id": "call_2", "content": "bad arguments"},
            ],
            "tools": [{"type": "function", "function": {
                "name": "lookup", "description": "Looks up.", "parameters": {"type": "object"},
            }}],
        })
    );
}

#[test]
fn thinking_levels_map_per_model_family() {
    let openai = provider(ProviderConfig::builtin("openai").unwrap());
    let messages = [Record::User(UserMessage::text("hi"))];
    let effort = |model: &str, level| {
        body(&openai, model, &messages, level)
            .get("reasoning_effort")
            .cloned()
    };
    assert_eq!(effort("gpt-5", ThinkingLevel::Off), None);
    assert_eq!(effort("gpt-5.1", ThinkingLevel::Off), Some(json!("none")));
    assert_eq!(
        effort("gpt-5.1", ThinkingLevel::Minimal),
        Some(json!("low"))
    );
    assert_eq!(
        effort("gpt-5.2", ThinkingLevel::Xhigh),
        Some(json!("xhigh"))
    );
    assert_eq!(effort("o3", ThinkingLevel::Xhigh), Some(json!("high")));
    // Not a reasoning model: the level is dropped.
    assert_eq!(effort("gpt-4.1", ThinkingLevel::High), None);
    // An unknown model gets conservative defaults: no reasoning, no images.
    assert_eq!(effort("gpt-unknown", ThinkingLevel::High), None);
}

#[test]
fn models_without_image_input_see_a_placeholder_and_compat_servers_their_dialect() {
    let config = ProviderConfig::builtin("openrouter").unwrap().with_model(
        "text-only",
        ModelInfo {
            reasoning: true,
            ..ModelInfo::default()
        },
    );
    let openrouter = provider(config);
    let body = body(
        &openrouter,
        "text-only",
        &conversation()[..1],
        ThinkingLevel::High,
    );
    assert_eq!(
        body["messages"][1],
        json!({"role": "user", "content": "look\n\n[image omitted: this model does not accept image input]"})
    );
    assert_eq!(body["reasoning"], json!({"effort": "high"}));
    assert_eq!(body.get("reasoning_effort"), None);

    let mistral = provider(ProviderConfig::builtin("mistral").unwrap());
    let body = body_of(&mistral);
    assert_eq!(body["max_tokens"], json!(1000));
    assert_eq!(body.get("max_completion_tokens"), None);
    assert_eq!(body.get("stream_options"), None);
}

fn body_of(provider: &OpenAiProvider) -> Value {
    body(
        provider,
        "m",
        &[Record::User(UserMessage::text("hi"))],
        ThinkingLevel::Off,
    )
}

#[test]
fn the_output_limit_leaves_room_for_the_prompt() {
    let config = ProviderConfig::new("local", WireApi::OpenAiCompletions, "http://127.0.0.1:1/v1")
        .with_model(
            "small",
            ModelInfo {
                context_window: 8_000,
                max_output_tokens: 8_000,
                ..ModelInfo::default()
            },
        );
    let local = provider(config);
    let long = "word ".repeat(4_000);
    let request = ModelRequest {
        model: "small",
        system: "",
        messages: &[Record::User(UserMessage::text(long))],
        tools: &[],
        thinking: ThinkingLevel::Off,
        max_output_tokens: 8_000,
    };
    let body: Value = serde_json::from_slice(&local.body(&request).unwrap()).unwrap();
    // 20,000 bytes ~ 5,000 tokens; 8,000 - 5,000 - 4,096 is below the floor of 1,024.
    assert_eq!(body["max_completion_tokens"], json!(1024));
}

#[test]
fn reasoning_details_go_back_only_to_the_provider_and_model_that_wrote_them() {
    let detail = json!({"type": "reasoning.encrypted", "data": "EjQK", "id": "call_1",
                        "format": "google-gemini-v1", "index": 0});
    let turn = |provider: &str, model: &str| {
        Record::Assistant(AssistantMessage {
            content: vec![
                AssistantContent::ProviderData {
                    data: detail.clone(),
                },
                AssistantContent::Text { text: "ok".into() },
            ],
            model: ModelRef {
                provider: provider.into(),
                id: model.into(),
            },
            usage: Usage::default(),
            stop_reason: StopReason::EndTurn,
            interrupted: false,
        })
    };
    let openrouter = provider(ProviderConfig::builtin("openrouter").unwrap());
    let sent = |record: Record, model: &str| {
        body(&openrouter, model, &[record], ThinkingLevel::Off)["messages"][1]
            .get("reasoning_details")
            .cloned()
    };
    let gemini = "google/gemini-3-pro-preview";
    assert_eq!(
        sent(turn("openrouter", gemini), gemini),
        Some(json!([detail]))
    );
    assert_eq!(
        sent(turn("openrouter", gemini), "anthropic/claude-haiku-4.5"),
        None
    );
    assert_eq!(sent(turn("other", gemini), gemini), None);
}
