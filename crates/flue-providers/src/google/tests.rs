//! Unit tests of the Gemini request body: contents, signatures on their parts, tool results,
//! thinking configuration.

use flue_core::{
    AssistantContent, AssistantMessage, Image, ModelRef, Record, StopReason, ThinkingLevel,
    ToolCall, ToolResult, Usage, UserContent, UserMessage,
    model::{ModelRequest, ToolSchema},
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::GoogleProvider;
use crate::provider_config::{ApiKey, ProviderConfig};

fn provider() -> GoogleProvider {
    GoogleProvider::new(
        ProviderConfig::builtin("google")
            .unwrap()
            .with_api_key(ApiKey::new("k")),
    )
    .unwrap()
}

fn body(model: &str, messages: &[Record], thinking: ThinkingLevel) -> Value {
    let tools = [ToolSchema {
        name: "lookup".into(),
        description: "Looks up.".into(),
        input_schema: json!({"type": "object", "additionalProperties": false}),
    }];
    let request = ModelRequest {
        model,
        system: "Be brief.",
        messages,
        tools: &tools,
        thinking,
        max_output_tokens: 65_536,
    };
    serde_json::from_slice(&provider().body(&request).unwrap()).unwrap()
}

/// A user message with an image, a signed Gemini 3 turn with thought, text and two calls,
/// and the two results.
fn conversation(model: &str) -> Vec<Record> {
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
                    text: "**Planning**".into(),
                    signature: Some("sig-thought".into()),
                    id: None,
                },
                AssistantContent::ProviderData {
                    data: json!({"thoughtSignature": "sig-call"}),
                },
                AssistantContent::ToolCall(ToolCall {
                    id: "c1".into(),
                    name: "lookup".into(),
                    input: json!({"q": 1}),
                }),
                AssistantContent::ToolCall(ToolCall {
                    id: "c2".into(),
                    name: "lookup".into(),
                    input: json!("{\"q\": "),
                }),
            ],
            model: ModelRef {
                provider: "google".into(),
                id: model.into(),
            },
            usage: Usage::default(),
            stop_reason: StopReason::ToolUse,
            interrupted: false,
        }),
        Record::ToolResult(ToolResult {
            call_id: "c1".into(),
            tool_name: "lookup".into(),
            content: "42".into(),
            is_error: false,
            error_kind: None,
            data: Vec::new(),
        }),
        Record::ToolResult(ToolResult {
            call_id: "c2".into(),
            tool_name: "lookup".into(),
            content: "bad input".into(),
            is_error: true,
            error_kind: Some("invalid_input".into()),
            data: Vec::new(),
        }),
    ]
}

#[test]
fn signatures_go_back_on_their_parts_to_the_model_that_wrote_them() {
    let model = "gemini-3-pro-preview";
    let sent = body(model, &conversation(model), ThinkingLevel::High);
    assert_eq!(
        sent["contents"],
        json!([
            {"role": "user", "parts": [
                {"text": "look"},
                {"inlineData": {"mimeType": "image/png", "data": "AAAA"}}]},
            {"role": "model", "parts": [
                {"text": "**Planning**", "thought": true, "thoughtSignature": "sig-thought"},
                {"functionCall": {"name": "lookup", "args": {"q": 1}, "id": "c1"},
                 "thoughtSignature": "sig-call"},
                {"functionCall": {"name": "lookup", "args": {}, "id": "c2"}}]},
            {"role": "user", "parts": [
                {"functionResponse": {"name": "lookup", "id": "c1", "response": {"output": "42"}}},
                {"functionResponse": {"name": "lookup", "id": "c2",
                                      "response": {"error": "bad input"}}}]},
        ])
    );
    assert_eq!(
        sent["systemInstruction"],
        json!({"parts": [{"text": "Be brief."}]})
    );
    assert_eq!(
        sent["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"],
        json!({"type": "object", "additionalProperties": false})
    );
    assert_eq!(
        sent["generationConfig"],
        json!({"maxOutputTokens": 65_536,
               "thinkingConfig": {"includeThoughts": true, "thinkingLevel": "high"}})
    );
}

#[test]
fn another_model_s_turn_goes_without_its_signatures() {
    // Gemini 3 reading another model's calls gets the signature Google documents for them
    // on the first call; Gemini 2.5 gets none.
    let history = conversation("gemini-2.5-flash");
    let to_gemini_3 = body("gemini-3-pro-preview", &history, ThinkingLevel::Off);
    assert_eq!(
        to_gemini_3["contents"][1]["parts"],
        json!([
            {"functionCall": {"name": "lookup", "args": {"q": 1}, "id": "c1"},
             "thoughtSignature": "skip_thought_signature_validator"},
            {"functionCall": {"name": "lookup", "args": {}, "id": "c2"}}])
    );
    let history = conversation("gemini-3-pro-preview");
    let to_flash = body("gemini-2.5-flash", &history, ThinkingLevel::Off);
    assert_eq!(
        to_flash["contents"][1]["parts"][0],
        json!({"functionCall": {"name": "lookup", "args": {"q": 1}, "id": "c1"}})
    );
}

#[test]
fn thinking_levels_become_budgets_or_levels_per_model() {
    let config = |model: &str, level| body(model, &[], level)["generationConfig"].clone();
    assert_eq!(
        config("gemini-2.5-flash", ThinkingLevel::Off),
        json!({"maxOutputTokens": 65_536, "thinkingConfig": {"thinkingBudget": 0}})
    );
    // 2.5 Pro cannot stop thinking: its default applies, unseen.
    assert_eq!(
        config("gemini-2.5-pro", ThinkingLevel::Off),
        json!({"maxOutputTokens": 65_536})
    );
    assert_eq!(
        config("gemini-2.5-flash", ThinkingLevel::Xhigh)["thinkingConfig"],
        json!({"includeThoughts": true, "thinkingBudget": 24_576})
    );
    assert_eq!(
        config("gemini-2.5-pro", ThinkingLevel::Medium)["thinkingConfig"],
        json!({"includeThoughts": true, "thinkingBudget": 8192})
    );
    assert_eq!(
        config("gemini-3-pro-preview", ThinkingLevel::Low)["thinkingConfig"],
        json!({"includeThoughts": true, "thinkingLevel": "low"})
    );
}

#[test]
fn the_model_is_named_in_the_url_and_the_key_in_its_header() {
    let url = provider()
        .endpoint
        .url_with("gemini-2.5-flash:streamGenerateContent", "alt=sse")
        .unwrap();
    assert_eq!(
        url.as_str(),
        "https://generativelanguage.googleapis.com/v1beta/models/\
         gemini-2.5-flash:streamGenerateContent?alt=sse"
    );
}

#[test]
fn cached_tokens_are_counted_apart_and_thoughts_as_output() {
    let usage: super::WireUsage = serde_json::from_value(json!({
        "promptTokenCount": 11_500, "candidatesTokenCount": 1000,
        "cachedContentTokenCount": 10_000, "thoughtsTokenCount": 10_000}))
    .unwrap();
    let billed = usage.billed();
    assert_eq!(
        [
            billed.input_tokens,
            billed.cache_read_tokens,
            billed.output_tokens
        ],
        [1500, 10_000, 11_000]
    );
}
