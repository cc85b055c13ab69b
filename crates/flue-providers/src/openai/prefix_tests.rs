//! The Chat Completions body kept from turn to turn (`prefix`) is, byte for byte, the body
//! encoded whole, as it was before prefixes were kept.

use flue_core::record::CompactionSummary;
use flue_core::{
    AssistantContent, AssistantMessage, Image, ModelRef, Record, StopReason, ThinkingLevel,
    ToolCall, ToolResult, Usage, UserContent, UserMessage,
    model::{ModelRequest, ToolSchema},
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::{OpenAiProvider, ReasoningBack, assistant_message, prefix::Prefix};
use crate::convert::{self, Item};
use crate::provider_config::{ApiKey, MaxTokensField, ProviderConfig, ReasoningParam};

/// The encoder as it was: the whole conversation converted and serialized every turn.
fn whole_body(this: &OpenAiProvider, request: &ModelRequest<'_>) -> Vec<u8> {
    let (info, _) = this.config.lookup_model(request.model);
    let items = convert::items(request.messages, info.image_input);
    let mut messages = Vec::with_capacity(items.len() + 1);
    if !request.system.is_empty() {
        messages.push(json!({"role": "system", "content": request.system}));
    }
    let mut user_parts: Vec<Value> = Vec::new();
    for item in &items {
        match item {
            Item::Text(text) => user_parts.push(json!({"type": "text", "text": text})),
            Item::Image(image) => user_parts.push(json!({
                "type": "image_url",
                "image_url": {"url": format!("data:{};base64,{}", image.mime_type, image.data)},
            })),
            Item::Assistant(message) => {
                flush_user(&mut messages, &mut user_parts);
                let own = message.model.provider == this.config.id;
                let back = ReasoningBack {
                    content: this.config.openai_compat.reasoning_content_back && own,
                    details: own && message.model.id == request.model,
                };
                if let Some(message) = assistant_message(message, back) {
                    messages.push(message);
                }
            }
            Item::ToolResult(result) => {
                flush_user(&mut messages, &mut user_parts);
                messages.push(json!({
                    "role": "tool",
                    "tool_call_id": result.call_id,
                    "content": result.content,
                }));
            }
        }
    }
    flush_user(&mut messages, &mut user_parts);

    let compat = this.config.openai_compat;
    let mut body = json!({
        "model": request.model,
        "messages": messages,
        "stream": true,
    });
    if !compat.no_stream_options {
        body["stream_options"] = json!({"include_usage": true});
    }
    let prompt_tokens = convert::estimate_tokens(request, &items);
    let max_tokens = convert::clamp_output(request.max_output_tokens, &info, prompt_tokens);
    let field = match compat.max_tokens_field {
        MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
        MaxTokensField::MaxTokens => "max_tokens",
    };
    body[field] = json!(max_tokens);
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| {
                json!({
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.input_schema,
                    },
                })
            })
            .collect();
        body["tools"] = Value::Array(tools);
    }
    if let Some(effort) = this.effort(request.model, &info, request.thinking) {
        match compat.reasoning {
            ReasoningParam::Effort => body["reasoning_effort"] = json!(effort),
            ReasoningParam::OpenRouter => body["reasoning"] = json!({"effort": effort}),
            ReasoningParam::Unsupported => {}
        }
    }
    serde_json::to_vec(&body).unwrap()
}

fn flush_user(messages: &mut Vec<Value>, parts: &mut Vec<Value>) {
    if parts.is_empty() {
        return;
    }
    let all_text = parts.iter().all(|part| part["type"] == "text");
    let content = if all_text {
        let texts: Vec<&str> = parts
            .iter()
            .filter_map(|part| part["text"].as_str())
            .collect();
        Value::String(texts.join("\n\n"))
    } else {
        Value::Array(std::mem::take(parts))
    };
    parts.clear();
    messages.push(json!({"role": "user", "content": content}));
}

fn own(model: &str) -> ModelRef {
    ModelRef {
        provider: "openrouter".into(),
        id: model.into(),
    }
}

fn turn(model: &str, text: &str, calls: &[(&str, Value)]) -> Record {
    let mut content = vec![
        AssistantContent::Thinking {
            text: format!("thinking about {text}"),
            signature: None,
            id: None,
        },
        AssistantContent::ProviderData {
            data: json!({"type": "reasoning.text", "text": "r", "index": 0}),
        },
    ];
    if !text.is_empty() {
        content.push(AssistantContent::Text { text: text.into() });
    }
    for (id, input) in calls {
        content.push(AssistantContent::ToolCall(ToolCall {
            id: (*id).into(),
            name: "lookup".into(),
            input: input.clone(),
        }));
    }
    Record::Assistant(AssistantMessage {
        content,
        model: own(model),
        usage: Usage::default(),
        stop_reason: if calls.is_empty() {
            StopReason::EndTurn
        } else {
            StopReason::ToolUse
        },
        interrupted: false,
    })
}

fn result(call_id: &str, content: &str) -> Record {
    Record::ToolResult(ToolResult {
        call_id: call_id.into(),
        tool_name: "lookup".into(),
        content: content.into(),
        is_error: false,
        error_kind: None,
        data: Vec::new(),
    })
}

fn image_message(text: &str) -> Record {
    Record::User(UserMessage {
        content: vec![
            UserContent::Text { text: text.into() },
            UserContent::Image(Image {
                data: "AAAA".into(),
                mime_type: "image/png".into(),
            }),
        ],
    })
}

/// One request of the conversation: its records, model, system prompt and tools.
struct Turn {
    records: Vec<Record>,
    model: &'static str,
    system: &'static str,
    n_tools: usize,
    thinking: ThinkingLevel,
}

/// A conversation of many turns with tool calls (one answered after a user message came in
/// between: sent as text), images, two compactions, a change of model and back, a new system
/// prompt, tools offered and withdrawn, and a rewind.
fn turns() -> Vec<Turn> {
    let models = ["anthropic/claude-haiku-4.5", "openai/gpt-5"];
    let mut log: Vec<Record> = Vec::new();
    let mut turns = Vec::new();
    let mut first_kept = 0;
    for n in 0..40 {
        let model = if (12..18).contains(&n) {
            models[1]
        } else {
            models[0]
        };
        match n % 5 {
            0 => log.push(Record::User(UserMessage::text(format!("question {n}")))),
            1 => log.push(image_message(&format!("picture {n}"))),
            2 => {
                log.push(Record::User(UserMessage::text(format!("first part {n}"))));
                log.push(Record::User(UserMessage::text(format!("second part {n}"))));
            }
            3 => {
                log.push(turn(
                    model,
                    "",
                    &[("a", json!({"q": n})), ("b", json!("{bad"))],
                ));
                log.push(result("a", &format!("answer {n}")));
                log.push(Record::User(UserMessage::text("meanwhile")));
                log.push(result("b", "late"));
            }
            _ => {}
        }
        log.push(turn(model, &format!("reply {n}"), &[]));
        // Compacted at turns 20 and 30: a summary, then the records from the first kept.
        if n == 20 || n == 30 {
            first_kept = log.len() - 6;
        }
        let view = if n < 20 {
            log.clone()
        } else {
            let mut view = vec![Record::Compaction(CompactionSummary {
                summary: format!("the turns before {first_kept}"),
                first_kept: first_kept as u64,
                tokens_before: 1000,
                usage: None,
            })];
            view.extend(log[first_kept..].iter().cloned());
            view
        };
        turns.push(Turn {
            records: view,
            model,
            system: if n < 25 { "Be brief." } else { "Be thorough." },
            n_tools: if (8..11).contains(&n) { 0 } else { 2 },
            thinking: if n % 2 == 0 {
                ThinkingLevel::High
            } else {
                ThinkingLevel::Low
            },
        });
        if n == 35 {
            // A rewind: the conversation goes back three turns.
            let back = turns[n - 3].records.clone();
            turns.push(Turn {
                records: back,
                model,
                system: "Be thorough.",
                n_tools: 2,
                thinking: ThinkingLevel::Low,
            });
        }
    }
    turns
}

fn tools() -> Vec<ToolSchema> {
    ["lookup", "fetch"]
        .iter()
        .map(|name| ToolSchema {
            name: (*name).into(),
            description: format!("{name} something"),
            input_schema: json!({"type": "object", "properties": {"q": {"type": "string"}}}),
        })
        .collect()
}

#[test]
fn a_kept_prefix_encodes_every_turn_as_the_whole_encoder_did() {
    let config = ProviderConfig::builtin("openrouter")
        .unwrap()
        .with_api_key(ApiKey::new("k"));
    let kept = OpenAiProvider::new(config.clone()).unwrap();
    let tools = tools();
    let mut continued = 0;
    for (idx, turn) in turns().iter().enumerate() {
        let request = ModelRequest {
            model: turn.model,
            system: turn.system,
            messages: &turn.records,
            tools: &tools[..turn.n_tools],
            thinking: turn.thinking,
            max_output_tokens: 64_000,
        };
        let before = kept
            .kept
            .take(|prefix: &Prefix| prefix.continued_by(&request))
            .map(|prefix| {
                let len = prefix.len();
                kept.kept.put(prefix, 0, 16, usize::MAX);
                len
            });
        continued += usize::from(before.is_some_and(|len| len > 0));
        let whole = OpenAiProvider::new(config.clone()).unwrap();
        let expected = String::from_utf8(whole_body(&whole, &request)).unwrap();
        assert_eq!(
            String::from_utf8(kept.body(&request).unwrap()).unwrap(),
            expected,
            "turn {idx}"
        );
        assert_eq!(
            String::from_utf8(whole.body(&request).unwrap()).unwrap(),
            expected,
            "turn {idx}, nothing kept"
        );
    }
    // Every turn but those after a change of the prefix went on from the previous one.
    assert!(continued >= 30, "{continued} turns continued a kept prefix");
}

/// CPU time this thread has run, from `/proc/thread-self/schedstat` (nanoseconds).
fn thread_cpu() -> std::time::Duration {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
    let ns: u64 = text.split_whitespace().next().unwrap().parse().unwrap();
    std::time::Duration::from_nanos(ns)
}

/// The CPU one turn's body costs at 1,000 earlier messages, encoded whole and continued from
/// the kept prefix (BENCHMARKS.md): `FLUE_BODY_BENCH=1 cargo test -p flue-providers --lib
/// body_cost -- --nocapture` (add `--release` for the release figure).
#[test]
fn body_cost_at_a_thousand_messages() {
    if std::env::var_os("FLUE_BODY_BENCH").is_none() {
        return;
    }
    const N: usize = 1_000;
    const RUNS: u32 = 20;
    let config = ProviderConfig::builtin("openrouter")
        .unwrap()
        .with_api_key(ApiKey::new("k"));
    let model = "anthropic/claude-haiku-4.5";
    let mut records = Vec::new();
    for n in 0..N / 2 {
        records.push(Record::User(UserMessage::text(format!(
            "question {n}: {}",
            "what is six times seven? ".repeat(4)
        ))));
        records.push(turn(
            model,
            &format!("reply {n}: {}", "forty-two. ".repeat(8)),
            &[],
        ));
    }
    let tools = tools();
    let request = |messages| ModelRequest {
        model,
        system: "Be brief.",
        messages,
        tools: &tools,
        thinking: ThinkingLevel::Off,
        max_output_tokens: 8_000,
    };
    let whole = OpenAiProvider::new(config.clone()).unwrap();
    let started = thread_cpu();
    for _ in 0..RUNS {
        let fresh = OpenAiProvider::new(config.clone()).unwrap();
        std::hint::black_box(fresh.body(&request(&records)).unwrap());
    }
    let whole_cost = (thread_cpu() - started) / RUNS;
    drop(whole);
    // Kept: each run continues a prefix of the first N - 2 records with the last two.
    let mut kept_cost = std::time::Duration::ZERO;
    for _ in 0..RUNS {
        let kept = OpenAiProvider::new(config.clone()).unwrap();
        kept.body(&request(&records[..N - 2])).unwrap();
        let started = thread_cpu();
        std::hint::black_box(kept.body(&request(&records)).unwrap());
        kept_cost += thread_cpu() - started;
    }
    let kept_cost = kept_cost / RUNS;
    eprintln!(
        "body at {N} messages: whole {whole_cost:?} ({:.2} µs per message), kept prefix \
         {kept_cost:?} ({:.2} µs per message)",
        whole_cost.as_secs_f64() * 1e6 / N as f64,
        kept_cost.as_secs_f64() * 1e6 / N as f64
    );
    assert!(kept_cost < whole_cost);
}
