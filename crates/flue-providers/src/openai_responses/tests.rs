//! Unit tests of the Responses API request body and of turn assembly.

use flue_core::{
    AssistantContent, AssistantMessage, Image, ModelRef, Record, StopReason, ThinkingLevel,
    ToolCall, ToolResult, Usage, UserContent, UserMessage,
    model::{ModelRequest, ToolSchema},
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::{Assembler, OpenAiResponsesProvider};
use crate::http::Assembler as _;
use crate::provider_config::{ApiKey, ProviderConfig, WireApi};

fn provider(config: ProviderConfig) -> OpenAiResponsesProvider {
    OpenAiResponsesProvider::new(config.with_api_key(ApiKey::new("k"))).unwrap()
}

fn body(model: &str, messages: &[Record], thinking: ThinkingLevel) -> Value {
    let provider = provider(ProviderConfig::builtin("openai").unwrap());
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

fn assistant(content: Vec<AssistantContent>) -> Record {
    Record::Assistant(AssistantMessage {
        content,
        model: ModelRef {
            provider: "openai".into(),
            id: "o4-mini".into(),
        },
        usage: Usage::default(),
        stop_reason: StopReason::ToolUse,
        interrupted: false,
    })
}

#[test]
fn a_tool_loop_goes_back_as_items_with_reasoning_unchanged() {
    let messages = vec![
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
        assistant(vec![
            AssistantContent::Thinking {
                text: "First.\n\nSecond.".into(),
                signature: Some("gAAAA-opaque".into()),
                id: Some("rs_1".into()),
            },
            AssistantContent::Thinking {
                text: "from another provider".into(),
                signature: Some("sig".into()),
                id: None,
            },
            AssistantContent::Text {
                text: "Looking.".into(),
            },
            AssistantContent::ToolCall(ToolCall {
                id: "call_1".into(),
                name: "lookup".into(),
                input: json!({"q": 1}),
            }),
        ]),
        Record::ToolResult(ToolResult {
            call_id: "call_1".into(),
            tool_name: "lookup".into(),
            content: "42".into(),
            is_error: false,
            error_kind: None,
            data: Vec::new(),
        }),
    ];
    let body = body("o4-mini", &messages, ThinkingLevel::High);
    assert_eq!(
        body["input"],
        json!([
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "look"},
                {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "auto"},
            ]},
            {"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAAA-opaque", "summary": [
                {"type": "summary_text", "text": "First.\n\nSecond."},
            ]},
            {"type": "message", "role": "assistant", "content": "Looking."},
            {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": "{\"q\":1}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "42"},
        ])
    );
    assert_eq!(body["instructions"], "Be brief.");
    assert_eq!(body["store"], false);
    assert_eq!(body["stream"], true);
    assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(
        body["reasoning"],
        json!({"effort": "high", "summary": "auto"})
    );
    assert_eq!(body["max_output_tokens"], 1000);
    // Another model gets the turn without its reasoning.
    let other = self::body("o3", &messages, ThinkingLevel::High);
    let kinds: Vec<&str> = other["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "message",
            "message",
            "function_call",
            "function_call_output"
        ]
    );
    assert_eq!(
        body["tools"],
        json!([{"type": "function", "name": "lookup", "description": "Looks up.",
                "parameters": {"type": "object"}, "strict": false}])
    );
}

#[test]
fn models_that_do_not_reason_get_no_reasoning_fields() {
    let messages = vec![Record::User(UserMessage {
        content: vec![UserContent::Text { text: "hi".into() }],
    })];
    let body = body("gpt-4.1", &messages, ThinkingLevel::High);
    assert!(body.get("reasoning").is_none(), "{body}");
    assert!(body.get("include").is_none(), "{body}");
    // gpt-5.1 turns reasoning off with `none`.
    let body = self::body("gpt-5.1", &messages, ThinkingLevel::Off);
    assert_eq!(body["reasoning"]["effort"], "none");
}

#[test]
fn stop_reasons_follow_the_terminal_event() {
    let turn = |end: Option<super::End>, refusal: bool| {
        let mut assembler = Assembler {
            end,
            ..Assembler::default()
        };
        assembler.outputs.insert(
            0,
            super::Output::Message {
                text: String::new(),
                refusal: if refusal { "No.".into() } else { String::new() },
            },
        );
        assembler.finish().stop_reason
    };
    use super::End::{Completed, Incomplete};
    assert_eq!(turn(Some(Completed), false), StopReason::EndTurn);
    assert_eq!(turn(Some(Completed), true), StopReason::Refusal);
    assert_eq!(
        turn(Some(Incomplete(Some("max_output_tokens".into()))), false),
        StopReason::MaxTokens
    );
    assert_eq!(
        turn(Some(Incomplete(Some("content_filter".into()))), false),
        StopReason::ContentFilter
    );
    assert_eq!(
        turn(Some(Incomplete(Some("something_new".into()))), false),
        StopReason::Other("something_new".into())
    );
}

#[test]
fn the_api_name_parses() {
    assert_eq!(
        "openai-responses".parse::<WireApi>().unwrap(),
        WireApi::OpenAiResponses
    );
    assert!(WireApi::OpenAiCompletions.can_switch_to(WireApi::OpenAiResponses));
    assert!(!WireApi::AnthropicMessages.can_switch_to(WireApi::OpenAiResponses));
}
