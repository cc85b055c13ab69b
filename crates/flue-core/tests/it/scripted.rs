//! Tests: the scripted model provider, through the public `ModelProvider` API.
//!
//! Each test writes a script into a temporary root, builds a conversation from records and
//! compares the whole turn (or error) the provider returns.

use std::path::Path;

use flue_core::{
    AssistantContent, AssistantMessage, Event, FlueError, ModelProvider, ModelRef, Record,
    ScriptedProvider, StopReason, ThinkingLevel, ToolCall, ToolResult, Usage, UserMessage,
    model::{ModelInfo, ModelPrice, ModelRequest, ModelTurn, ToolSchema, TurnSink},
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

const SCRIPT: &str = "scripts/test.json";

/// A provider over a temporary root holding one script at [`SCRIPT`].
struct Scripted {
    root: tempfile::TempDir,
    provider: ScriptedProvider,
}

impl Scripted {
    fn new(script: &str) -> Self {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("scripts")).unwrap();
        std::fs::write(root.path().join(SCRIPT), script).unwrap();
        let provider = ScriptedProvider::new(root.path());
        Self { root, provider }
    }

    /// Runs one turn with tools and a system prompt; returns the turn and the events sent.
    async fn turn_with(
        &self,
        system: &str,
        messages: &[Record],
        tools: &[ToolSchema],
    ) -> (Result<ModelTurn, FlueError>, Vec<Event>) {
        let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
        let sink = TurnSink::new(sender);
        let request = ModelRequest {
            model: SCRIPT,
            system,
            messages,
            tools,
            thinking: ThinkingLevel::Off,
            max_output_tokens: 1024,
        };
        let turn = self.provider.stream_turn(request, &sink).await;
        drop(sink);
        let mut events = Vec::new();
        while let Some(event) = receiver.recv().await {
            events.push(event);
        }
        (turn, events)
    }

    async fn turn(&self, messages: &[Record]) -> Result<ModelTurn, FlueError> {
        self.turn_with("", messages, &[]).await.0
    }
}

/// What a turn amounts to, without the usage estimate.
#[derive(Debug, PartialEq)]
struct Answer {
    content: Vec<AssistantContent>,
    stop_reason: StopReason,
}

/// The check helper: script and conversation in, answer (or error message) out.
async fn check(script: &str, messages: &[Record]) -> Result<Answer, String> {
    let turn = Scripted::new(script)
        .turn(messages)
        .await
        .map_err(|err| err.to_string())?;
    Ok(Answer {
        content: turn.content,
        stop_reason: turn.stop_reason,
    })
}

fn end_turn(content: Vec<AssistantContent>) -> Result<Answer, String> {
    Ok(Answer {
        content,
        stop_reason: StopReason::EndTurn,
    })
}

fn tool_use(content: Vec<AssistantContent>) -> Result<Answer, String> {
    Ok(Answer {
        content,
        stop_reason: StopReason::ToolUse,
    })
}

fn user(text: &str) -> Record {
    Record::User(UserMessage::text(text))
}

fn assistant(content: Vec<AssistantContent>) -> Record {
    let stop_reason = if content
        .iter()
        .any(|part| matches!(part, AssistantContent::ToolCall(_)))
    {
        StopReason::ToolUse
    } else {
        StopReason::EndTurn
    };
    Record::Assistant(AssistantMessage {
        content,
        model: ModelRef {
            provider: "scripted".to_owned(),
            id: SCRIPT.to_owned(),
        },
        usage: Usage::default(),
        stop_reason,
        interrupted: false,
    })
}

fn tool_result(call_id: &str, tool_name: &str, content: &str) -> Record {
    Record::ToolResult(ToolResult {
        call_id: call_id.to_owned(),
        tool_name: tool_name.to_owned(),
        content: content.to_owned(),
        is_error: false,
        error_kind: None,
        data: Vec::new(),
    })
}

fn text(text: &str) -> AssistantContent {
    AssistantContent::Text {
        text: text.to_owned(),
    }
}

fn thinking(text: &str) -> AssistantContent {
    AssistantContent::Thinking {
        text: text.to_owned(),
        signature: None,
        id: None,
    }
}

fn call(id: &str, name: &str, input: Value) -> AssistantContent {
    AssistantContent::ToolCall(ToolCall {
        id: id.to_owned(),
        name: name.to_owned(),
        input,
    })
}

const WEATHER: &str = r#"{"rules": [
    {"when": {"user_contains": "weather"},
     "reply": {"text": "Let me check.", "tool_calls": [{"name": "bash", "input": {"command": "forecast"}}]}},
    {"when": {"tool_result": "bash"}, "reply": {"text": "The command said: {{tool_result}}"}},
    {"reply": {"text": "You said: {{user}}"}}
]}"#;

#[tokio::test]
async fn first_matching_rule_wins() {
    let script = r#"{"rules": [
        {"when": {"user_contains": "bye"}, "reply": {"text": "never"}},
        {"when": {"user_contains": "hello"}, "reply": {"text": "first"}},
        {"when": {"user_contains": "hello world"}, "reply": {"text": "second"}},
        {"reply": {"text": "fallback"}}
    ]}"#;
    assert_eq!(
        check(script, &[user("hello world")]).await,
        end_turn(vec![text("first")])
    );
    assert_eq!(
        check(script, &[user("something")]).await,
        end_turn(vec![text("fallback")])
    );
}

#[tokio::test]
async fn user_message_selects_user_rules() {
    assert_eq!(
        check(WEATHER, &[user("what's the weather?")]).await,
        tool_use(vec![
            text("Let me check."),
            call("call_1_0", "bash", json!({"command": "forecast"}))
        ])
    );
}

#[tokio::test]
async fn tool_result_selects_tool_rules_and_never_refires_the_user_rule() {
    let messages = [
        user("what's the weather?"),
        assistant(vec![call(
            "call_1_0",
            "bash",
            json!({"command": "forecast"}),
        )]),
        tool_result("call_1_0", "bash", "sunny"),
    ];
    assert_eq!(
        check(WEATHER, &messages).await,
        end_turn(vec![text("The command said: sunny")])
    );
}

#[tokio::test]
async fn result_of_another_tool_falls_through_to_the_rule_without_when() {
    let messages = [
        user("what's the weather?"),
        assistant(vec![call("call_1_0", "read", json!({"path": "a"}))]),
        tool_result("call_1_0", "read", "file"),
    ];
    assert_eq!(
        check(WEATHER, &messages).await,
        end_turn(vec![text("You said: what's the weather?")])
    );
}

#[tokio::test]
async fn several_results_are_answered_by_the_last_tool() {
    let script = r#"{"rules": [
        {"when": {"tool_result": "bash"}, "reply": {"text": "bash"}},
        {"when": {"tool_result": "read"}, "reply": {"text": "read: {{tool_result}}"}}
    ]}"#;
    let messages = [
        user("go"),
        assistant(vec![
            call("call_1_0", "bash", json!({})),
            call("call_1_1", "read", json!({})),
        ]),
        tool_result("call_1_0", "bash", "one"),
        tool_result("call_1_1", "read", "two"),
    ];
    assert_eq!(
        check(script, &messages).await,
        end_turn(vec![text("read: two")])
    );
}

#[tokio::test]
async fn no_rule_for_a_tool_result_is_a_script_error() {
    let script = r#"{"rules": [
        {"when": {"user_contains": "weather"}, "reply": {"tool_calls": [{"name": "bash"}]}}
    ]}"#;
    let messages = [
        user("weather"),
        assistant(vec![call("call_1_0", "bash", json!({}))]),
        tool_result("call_1_0", "bash", "sunny"),
    ];
    assert_eq!(
        check(script, &messages).await,
        Err(
            "script scripts/test.json: no rule answers the result of tool \"bash\" (turn 2); add \
             a rule with \"when\": {\"tool_result\": \"bash\"}, or a last rule without \"when\" \
             that answers every turn"
                .to_owned()
        )
    );
}

#[tokio::test]
async fn no_rule_for_a_user_message_is_a_script_error() {
    let script = r#"{"rules": [{"when": {"tool_result": "bash"}, "reply": {"text": "ok"}}]}"#;
    assert_eq!(
        check(script, &[user("hello")]).await,
        Err(
            "script scripts/test.json: no rule answers the user message \"hello\" (turn 1); add \
             a rule with \"when\": {\"user_contains\": \"...\"}, or a last rule without \"when\" \
             that answers every turn"
                .to_owned()
        )
    );
}

#[tokio::test]
async fn user_matches_is_a_regex() {
    let script = r#"{"rules": [
        {"when": {"user_matches": "(?i)^hello\\b"}, "reply": {"text": "Hi!"}},
        {"reply": {"text": "?"}}
    ]}"#;
    assert_eq!(
        check(script, &[user("HELLO there")]).await,
        end_turn(vec![text("Hi!")])
    );
    assert_eq!(
        check(script, &[user("say hello")]).await,
        end_turn(vec![text("?")])
    );
    assert_eq!(
        check(script, &[user("helloworld")]).await,
        end_turn(vec![text("?")])
    );
}

#[tokio::test]
async fn conditions_combine_and_turn_counts_steps() {
    let script = r#"{"rules": [
        {"when": {"user_contains": "files", "turn": 1}, "reply": {"tool_calls": [{"name": "bash"}]}},
        {"when": {"tool_result": "bash", "user_contains": "files", "turn": 2},
         "reply": {"tool_calls": [{"name": "bash"}]}},
        {"when": {"tool_result": "bash", "user_contains": "files"}, "reply": {"text": "files done"}},
        {"when": {"tool_result": "bash"}, "reply": {"text": "other bash"}}
    ]}"#;
    let mut messages = vec![user("list files")];
    assert_eq!(
        check(script, &messages).await,
        tool_use(vec![call("call_1_0", "bash", json!({}))])
    );
    messages.push(assistant(vec![call("call_1_0", "bash", json!({}))]));
    messages.push(tool_result("call_1_0", "bash", "a"));
    assert_eq!(
        check(script, &messages).await,
        tool_use(vec![call("call_2_0", "bash", json!({}))])
    );
    messages.push(assistant(vec![call("call_2_0", "bash", json!({}))]));
    messages.push(tool_result("call_2_0", "bash", "b"));
    assert_eq!(
        check(script, &messages).await,
        end_turn(vec![text("files done")])
    );

    let other = [
        user("something else"),
        assistant(vec![call("call_1_0", "bash", json!({}))]),
        tool_result("call_1_0", "bash", "c"),
    ];
    assert_eq!(
        check(script, &other).await,
        end_turn(vec![text("other bash")])
    );
}

#[tokio::test]
async fn placeholders_fill_text_thinking_and_nested_tool_inputs() {
    let script = r#"{"rules": [{"reply": {
        "thinking": "The user said {{user}}.",
        "text": "Last result: [{{tool_result}}], {{unknown}} stays",
        "tool_calls": [{"name": "write", "input": {
            "path": "notes/{{user}}.txt",
            "lines": ["{{tool_result}}", {"quoted": "'{{ user }}'"}, 7, null],
            "{{user}}": true
        }}]
    }}]}"#;
    let messages = [
        user("older"),
        assistant(vec![call("call_1_0", "bash", json!({}))]),
        tool_result("call_1_0", "bash", "out"),
        assistant(vec![text("done")]),
        user("todo"),
    ];
    assert_eq!(
        check(script, &messages).await,
        tool_use(vec![
            thinking("The user said todo."),
            text("Last result: [out], {{unknown}} stays"),
            call(
                "call_3_0",
                "write",
                json!({
                    "path": "notes/todo.txt",
                    "lines": ["out", {"quoted": "'todo'"}, 7, null],
                    "{{user}}": true
                })
            ),
        ])
    );
}

#[tokio::test]
async fn tool_result_placeholder_is_empty_without_results() {
    let script = r#"{"rules": [{"reply": {"text": "[{{tool_result}}]"}}]}"#;
    assert_eq!(
        check(script, &[user("hi")]).await,
        end_turn(vec![text("[]")])
    );
}

#[tokio::test]
async fn tool_call_ids_are_deterministic_and_unique_per_turn() {
    let script = r#"{"rules": [
        {"when": {"tool_result": "b"}, "reply": {"text": "done"}},
        {"reply": {"tool_calls": [{"name": "a"}, {"name": "b", "input": {"n": 1}}]}}
    ]}"#;
    let messages = [user("one"), assistant(vec![text("ok")]), user("two")];
    let expected = tool_use(vec![
        call("call_2_0", "a", json!({})),
        call("call_2_1", "b", json!({"n": 1})),
    ]);
    assert_eq!(check(script, &messages).await, expected);
    assert_eq!(check(script, &messages).await, expected);
}

#[tokio::test]
async fn stop_overrides_the_stop_reason_and_empty_text_is_skipped() {
    let script = r#"{"rules": [
        {"when": {"user_contains": "long"}, "reply": {"text": "cut", "stop": "max_tokens"}},
        {"reply": {"text": ""}}
    ]}"#;
    assert_eq!(
        check(script, &[user("long")]).await,
        Ok(Answer {
            content: vec![text("cut")],
            stop_reason: StopReason::MaxTokens
        })
    );
    assert_eq!(check(script, &[user("short")]).await, end_turn(vec![]));
}

#[tokio::test]
async fn error_reply_is_a_provider_error_after_streaming_its_text() {
    let scripted = Scripted::new(
        r#"{"rules": [{"reply": {"text": "partial answer", "error": {"message": "overloaded: {{user}}", "retryable": true}}}]}"#,
    );
    let (turn, events) = scripted.turn_with("", &[user("hi")], &[]).await;
    let error = match turn {
        Err(FlueError::Provider {
            provider,
            message,
            retryable,
            source,
            ..
        }) => (provider, message, retryable, source.is_none()),
        other => panic!("expected a provider error, got {other:?}"),
    };
    assert_eq!(
        error,
        (
            "scripted".to_owned(),
            "overloaded: hi".to_owned(),
            true,
            true
        )
    );
    assert_eq!(
        events,
        [
            Event::TextDelta {
                text: "partial ".to_owned()
            },
            Event::TextDelta {
                text: "answer".to_owned()
            },
        ]
    );
}

#[tokio::test]
async fn error_reply_is_not_retryable_by_default() {
    let script = r#"{"rules": [{"reply": {"error": {"message": "bad request"}}}]}"#;
    let turn = Scripted::new(script).turn(&[user("hi")]).await;
    let error = match turn {
        Err(
            err @ FlueError::Provider {
                retryable: false, ..
            },
        ) => err.to_string(),
        other => panic!("expected a non-retryable provider error, got {other:?}"),
    };
    assert_eq!(error, "model provider \"scripted\" failed: bad request");
}

#[tokio::test]
async fn context_overflow_error_reply_is_a_context_overflow() {
    let script = r#"{"rules": [{"reply": {"error": {"kind": "context_overflow", "message": "too long: {{user}}"}}}]}"#;
    let turn = Scripted::new(script).turn(&[user("hi")]).await;
    let error = turn
        .map(|_| ())
        .map_err(|err| (err.kind(), err.to_string()));
    assert_eq!(
        error,
        Err((
            "context_overflow",
            "model provider \"scripted\": the conversation exceeds the model's context window: too long: hi; compact the session or use a model with a larger context window".to_owned()
        ))
    );
}

#[tokio::test]
async fn retryable_does_not_apply_to_a_context_overflow() {
    let script = r#"{"rules": [{"reply": {"error": {"kind": "context_overflow", "message": "x", "retryable": true}}}]}"#;
    let scripted = Scripted::new(script);
    assert_eq!(
        check_model_error(&scripted, SCRIPT).await,
        "script_error: script scripts/test.json: rule 1: \"retryable\" does not apply to a \
         \"context_overflow\" error; remove it"
    );
}

#[tokio::test]
async fn a_request_over_the_context_window_overflows_before_any_rule() {
    // 100 characters are 25 tokens: the window of 20 is too small, and no delta is streamed.
    let script = r#"{"model": {"context_window": 20}, "rules": [{"reply": {"text": "never"}}]}"#;
    let scripted = Scripted::new(script);
    let (turn, events) = scripted.turn_with("", &[user(&"x".repeat(100))], &[]).await;
    let error = turn
        .map(|_| ())
        .map_err(|err| (err.kind(), err.to_string()));
    assert_eq!(
        error,
        Err((
            "context_overflow",
            "model provider \"scripted\": the conversation exceeds the model's context window: the request has 25 input \
             tokens, more than the context window of 20 tokens; compact the session or use a model with a larger context window"
                .to_owned()
        ))
    );
    assert_eq!(events, []);
    // Exactly at the window is fine.
    let fits = scripted.turn(&[user(&"x".repeat(80))]).await.unwrap();
    assert_eq!(fits.usage.input_tokens, 20);
}

#[tokio::test]
async fn deltas_concatenate_to_the_final_text() {
    let scripted = Scripted::new(
        r#"{"rules": [{"reply": {"thinking": "Think  twice.", "text": "Hello, {{user}}!\nBye."}}]}"#,
    );
    let (turn, events) = scripted.turn_with("", &[user("dear world")], &[]).await;
    let turn = turn.unwrap();
    let delta = |event: &Event| match event {
        Event::TextDelta { text } => ("text", text.clone()),
        Event::ThinkingDelta { text } => ("thinking", text.clone()),
        other => panic!("unexpected event {other:?}"),
    };
    assert_eq!(
        events.iter().map(delta).collect::<Vec<_>>(),
        [
            ("thinking", "Think  ".to_owned()),
            ("thinking", "twice.".to_owned()),
            ("text", "Hello, ".to_owned()),
            ("text", "dear ".to_owned()),
            ("text", "world!\n".to_owned()),
            ("text", "Bye.".to_owned()),
        ]
    );
    let streamed: String = events
        .iter()
        .filter_map(|event| match event {
            Event::TextDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        turn.content,
        [thinking("Think  twice."), text("Hello, dear world!\nBye.")]
    );
    assert_eq!(streamed, "Hello, dear world!\nBye.");
}

#[tokio::test]
async fn usage_is_a_character_estimate_priced_by_the_script() {
    let scripted = Scripted::new(
        r#"{"model": {"price": {"input": 3.0, "output": 15.0}},
            "rules": [{"reply": {"text": "Done!", "thinking": "ok", "tool_calls": [{"name": "bash", "input": {"command": "ls"}}]}}]}"#,
    );
    let tools = [ToolSchema {
        name: "bash".to_owned(),
        description: "Runs a command".to_owned(),
        input_schema: json!({"type": "object"}),
    }];
    let messages = [
        user("hello"),
        assistant(vec![text("hi"), call("c", "read", json!({"a": 1}))]),
        tool_result("c", "read", "data"),
    ];
    let (turn, _) = scripted.turn_with("Be brief.", &messages, &tools).await;
    // input: "Be brief." 9 + "hello" 5 + "hi" 2 + "read" 4 + {"a":1} 7 + "data" 4
    //        + "bash" 4 + "Runs a command" 14 + {"type":"object"} 17 = 66 chars -> 17 tokens
    // output: "ok" 2 + "Done!" 5 + "bash" 4 + {"command":"ls"} 16 = 27 chars -> 7 tokens
    let expected = Usage {
        input_tokens: 17,
        output_tokens: 7,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
        cost_usd: Some((17.0 * 3.0 + 7.0 * 15.0) / 1_000_000.0),
    };
    assert_eq!(turn.unwrap().usage, expected);
}

#[tokio::test]
async fn usage_has_no_cost_without_a_price() {
    let scripted = Scripted::new(r#"{"rules": [{"reply": {"text": "abcde"}}]}"#);
    let turn = scripted.turn(&[user("abc")]).await.unwrap();
    assert_eq!(
        turn.usage,
        Usage {
            input_tokens: 1,
            output_tokens: 2,
            ..Usage::default()
        }
    );
}

#[tokio::test]
async fn model_info_comes_from_the_script() {
    let scripted = Scripted::new(
        r#"{"model": {"context_window": 200000, "max_output_tokens": 4096, "reasoning": true,
                      "image_input": true, "price": {"input": 1, "output": 2, "cache_read": 0.5}},
            "rules": [{"reply": {"text": "ok"}}]}"#,
    );
    assert_eq!(
        scripted.provider.model_info(SCRIPT),
        ModelInfo {
            context_window: 200_000,
            max_output_tokens: 4096,
            reasoning: true,
            image_input: true,
            price: Some(ModelPrice {
                input: 1.0,
                output: 2.0,
                cache_read: 0.5,
                cache_write: 0.0
            }),
        }
    );
    assert_eq!(scripted.provider.id(), "scripted");

    let plain = Scripted::new(r#"{"rules": [{"reply": {"text": "ok"}}]}"#);
    assert_eq!(plain.provider.model_info(SCRIPT), ModelInfo::default());
    assert_eq!(
        plain.provider.model_info("scripts/missing.json"),
        ModelInfo::default()
    );
}

#[tokio::test]
async fn scripts_are_read_once_and_cached() {
    let scripted = Scripted::new(r#"{"rules": [{"reply": {"text": "first version"}}]}"#);
    scripted.provider.check_model(SCRIPT).await.unwrap();
    std::fs::write(scripted.root.path().join(SCRIPT), "not json").unwrap();
    let turn = scripted.turn(&[user("hi")]).await.unwrap();
    assert_eq!(turn.content, [text("first version")]);
}

/// The error `check_model` reports for `model`, as displayed.
async fn check_model_error(scripted: &Scripted, model: &str) -> String {
    match scripted.provider.check_model(model).await {
        Ok(()) => "ok".to_owned(),
        Err(err) => format!("{}: {err}", err.kind()),
    }
}

#[tokio::test]
async fn unreadable_script_names_the_path_and_the_os_error() {
    let scripted = Scripted::new("{}");
    let path = scripted.root.path().join("scripts/missing.json");
    let os_error = std::fs::read_to_string(&path).unwrap_err();
    assert_eq!(
        check_model_error(&scripted, "scripts/missing.json").await,
        format!(
            "script_error: script scripts/missing.json: cannot read {}: {os_error}",
            path.display()
        )
    );
}

#[tokio::test]
async fn invalid_json_names_the_path_line_and_column() {
    let scripted = Scripted::new("{\n  \"rules\": [\n    {\"reply\": {\"text\": \"a\"}},\n  ]\n}");
    assert_eq!(
        check_model_error(&scripted, SCRIPT).await,
        "script_error: script scripts/test.json: line 4, column 3: trailing comma"
    );
}

#[tokio::test]
async fn unknown_fields_are_rejected_with_their_location() {
    let scripted = Scripted::new("{\"rules\": [\n  {\"reply\": {\"txt\": \"a\"}}\n]}");
    assert_eq!(
        check_model_error(&scripted, SCRIPT).await,
        "script_error: script scripts/test.json: line 2, column 18: unknown field `txt`, expected \
         one of `text`, `thinking`, `tool_calls`, `error`, `stop`, `delay_ms`, \
         `chunk_delay_ms`"
    );
}

#[tokio::test]
async fn bad_regex_is_reported_by_check_model() {
    let scripted =
        Scripted::new(r#"{"rules": [{"when": {"user_matches": "[a-"}, "reply": {"text": "a"}}]}"#);
    assert_eq!(
        check_model_error(&scripted, SCRIPT).await,
        "script_error: script scripts/test.json: rule 1: invalid regex \"[a-\" in \
         \"user_matches\": unclosed character class"
    );
}

#[tokio::test]
async fn paths_must_stay_inside_the_root() {
    let scripted = Scripted::new("{}");
    let absolute = scripted.root.path().join(SCRIPT);
    let absolute = absolute.to_str().unwrap();
    assert_eq!(
        check_model_error(&scripted, absolute).await,
        format!(
            "script_error: script {absolute}: absolute paths are not allowed; give the script \
             path relative to the workspace root, as in scripted/scripts/hello.json"
        )
    );
    assert_eq!(
        check_model_error(&scripted, "scripts/../../etc/passwd").await,
        "script_error: script scripts/../../etc/passwd: \"..\" is not allowed in script paths; \
         keep scripts inside the workspace root"
    );
}

#[tokio::test]
async fn delay_ms_waits_before_the_reply() {
    let scripted = Scripted::new(r#"{"rules": [{"reply": {"text": "late", "delay_ms": 30}}]}"#);
    let started = std::time::Instant::now();
    let turn = scripted.turn(&[user("hi")]).await.unwrap();
    assert_eq!(
        (turn.content, started.elapsed().as_millis() >= 30),
        (vec![text("late")], true)
    );
}

/// Every complete script in `docs/scripted-model.md` (the ```json blocks) must load.
#[tokio::test]
async fn documented_scripts_are_valid() {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/scripted-model.md");
    let markdown = std::fs::read_to_string(&docs).unwrap();
    let mut blocks = Vec::new();
    let mut rest = markdown.as_str();
    while let Some(start) = rest.find("```json\n") {
        let body = &rest[start + "```json\n".len()..];
        let end = body.find("```").unwrap();
        blocks.push(&body[..end]);
        rest = &body[end + 3..];
    }
    assert!(
        blocks.len() >= 3,
        "expected several json examples, found {}",
        blocks.len()
    );
    let mut results = Vec::new();
    for block in &blocks {
        results.push(check_model_error(&Scripted::new(block), SCRIPT).await);
    }
    assert_eq!(results, vec!["ok".to_owned(); blocks.len()]);
}
