//! Unit tests of the scripted provider's helpers: chunking, placeholders, how a conversation
//! is read, path checks and script validation.

use flue_protocol::record::{AssistantMessage, ModelRef, ShellExchange, ToolResult, UserMessage};
use pretty_assertions::assert_eq;
use serde_json::json;

use super::*;

fn vars() -> Vars<'static> {
    Vars {
        user: "hi there",
        tool_result: "42",
        model: "scripts/echo.json",
        thinking: "high",
    }
}

fn user(text: &str) -> Record {
    Record::User(UserMessage::text(text))
}

fn assistant() -> Record {
    Record::Assistant(AssistantMessage {
        content: Vec::new(),
        model: ModelRef::default(),
        usage: Usage::default(),
        stop_reason: StopReason::ToolUse,
        interrupted: false,
    })
}

fn tool_result(tool_name: &str, content: &str) -> Record {
    Record::ToolResult(ToolResult {
        call_id: "call".to_owned(),
        tool_name: tool_name.to_owned(),
        content: content.to_owned(),
        is_error: false,
        error_kind: None,
        data: Vec::new(),
    })
}

fn parse_problem(source: &str) -> String {
    match Script::parse("s.json", source) {
        Ok(script) => format!("parsed: {script:?}"),
        Err(err) => err.to_string(),
    }
}

#[test]
fn chunks_split_after_whitespace_and_concatenate() {
    let cases: [(&str, &[&str]); 5] = [
        ("", &[]),
        ("word", &["word"]),
        ("Hello, world", &["Hello, ", "world"]),
        ("  lead and  trail \n", &["  lead ", "and  ", "trail \n"]),
        ("é è\tü", &["é ", "è\t", "ü"]),
    ];
    for (text, expected) in cases {
        let got = chunks(text);
        assert_eq!(got, expected);
        assert_eq!(got.concat(), text);
    }
}

#[test]
fn interpolate_replaces_known_placeholders_only() {
    let cases = [
        ("You said: {{user}}", "You said: hi there"),
        ("{{ user }}/{{tool_result}}", "hi there/42"),
        (
            "{{model}} thinking {{thinking}}",
            "scripts/echo.json thinking high",
        ),
        ("{{unknown}} and {{user}}", "{{unknown}} and hi there"),
        ("{{ unclosed {{user}}", "{{ unclosed hi there"),
        ("{{user", "{{user"),
        ("{{{user}}}", "{{{user}}}"),
        ("no placeholders", "no placeholders"),
    ];
    for (template, expected) in cases {
        assert_eq!(
            interpolate(template, vars()),
            expected,
            "template {template:?}"
        );
    }
}

#[test]
fn interpolated_values_are_not_scanned_again() {
    let vars = Vars {
        user: "{{tool_result}}",
        tool_result: "secret",
        model: "m",
        thinking: "off",
    };
    assert_eq!(interpolate("{{user}}", vars), "{{tool_result}}");
}

#[test]
fn interpolate_value_reaches_nested_strings_but_not_keys() {
    let input = json!({
        "{{user}}": "key stays",
        "list": ["{{user}}", 1, true, null, {"deep": "got {{tool_result}}"}],
    });
    let expected = json!({
        "{{user}}": "key stays",
        "list": ["hi there", 1, true, null, {"deep": "got 42"}],
    });
    assert_eq!(interpolate_value(&input, vars()), expected);
}

#[test]
fn conversation_after_user_message() {
    let messages = [
        user("first"),
        assistant(),
        tool_result("bash", "out"),
        assistant(),
        user("second"),
    ];
    assert_eq!(
        Conversation::read(&messages),
        Conversation {
            state: State::User,
            user_text: "second".to_owned(),
            tool_result: "out",
            turn: 1,
            n_assistant: 2,
        }
    );
}

#[test]
fn conversation_after_tool_results() {
    let messages = [
        user("go"),
        assistant(),
        tool_result("bash", "one"),
        assistant(),
        tool_result("bash", "two"),
        tool_result("read", "three"),
    ];
    assert_eq!(
        Conversation::read(&messages),
        Conversation {
            state: State::ToolResult { tool_name: "read" },
            user_text: "go".to_owned(),
            tool_result: "three",
            turn: 3,
            n_assistant: 2,
        }
    );
}

#[test]
fn conversation_after_shell_and_when_empty() {
    let shell = Record::Shell(ShellExchange {
        command: "ls".to_owned(),
        cwd: None,
        env_keys: Vec::new(),
        stdout: String::new(),
        stderr: String::new(),
        exit_code: 0,
    });
    let messages = [user("hi"), assistant(), shell];
    let expected = Conversation {
        state: State::User,
        user_text: "hi".to_owned(),
        tool_result: "",
        turn: 1,
        n_assistant: 1,
    };
    assert_eq!(Conversation::read(&messages), expected);

    let expected = Conversation {
        state: State::User,
        user_text: String::new(),
        tool_result: "",
        turn: 1,
        n_assistant: 0,
    };
    assert_eq!(Conversation::read(&[]), expected);
}

#[test]
fn resolve_keeps_scripts_under_the_root() {
    let provider = ScriptedProvider::new("/root");
    assert_eq!(
        provider
            .resolve("scripts/./hello.json")
            .map_err(|err| err.to_string()),
        Ok(PathBuf::from("/root/scripts/./hello.json"))
    );
    let refused = [
        "/etc/passwd",
        "../outside.json",
        "scripts/../../outside.json",
    ]
    .map(|model| provider.resolve(model).map_err(|err| err.kind()));
    assert_eq!(
        refused,
        [
            Err("script_error"),
            Err("script_error"),
            Err("script_error")
        ]
    );
}

#[test]
fn validation_reports_every_problem() {
    let source = r#"{"rules": [
        {"when": {}, "reply": {"text": "a"}},
        {"when": {"turn": 0, "user_matches": "(open"}, "reply": {}},
        {"reply": {"error": {"message": "x"}, "tool_calls": [{"name": ""}], "stop": "end_turn"}},
        {"reply": {"text": "unreachable"}}
    ]}"#;
    let expected = [
        "script s.json: rule 1: \"when\" is empty; remove it to answer every turn, or add \
         \"user_contains\", \"user_matches\", \"tool_result\", \"turn\" or \"system_contains\"",
        "rule 2: \"turn\" counts from 1",
        "rule 2: invalid regex \"(open\" in \"user_matches\": unclosed group",
        "rule 2: the reply is empty; give \"text\", \"thinking\", \"tool_calls\" or \"error\" \
         (\"text\": \"\" answers with nothing)",
        "rule 3: a reply with \"error\" cannot make \"tool_calls\"",
        "rule 3: a reply with \"error\" cannot have \"stop\"",
        "rule 3: tool call 1 has an empty \"name\"",
        "rule 4 is never used: rule 3 has no \"when\" and answers every turn first; move rule 3 \
         to the end",
    ];
    assert_eq!(parse_problem(source), expected.join("; "));
}

#[test]
fn validation_rejects_an_empty_rule_list() {
    assert_eq!(
        parse_problem(r#"{"rules": []}"#),
        "script s.json: the script has no rules; add one, as in {\"rules\": [{\"reply\": \
         {\"text\": \"Hello\"}}]}"
    );
}

#[test]
fn model_section_fills_model_info() {
    let source = r#"{
        "model": {"context_window": 1000, "reasoning": true, "price": {"input": 3, "output": 15}},
        "rules": [{"reply": {"text": "ok"}}]
    }"#;
    let script = Script::parse("s.json", source).unwrap();
    assert_eq!(
        script.info,
        ModelInfo {
            context_window: 1000,
            reasoning: true,
            price: Some(ModelPrice {
                input: 3.0,
                output: 15.0,
                cache_read: 0.0,
                cache_write: 0.0
            }),
            ..ModelInfo::default()
        }
    );
}

#[test]
fn preview_truncates_long_text() {
    assert_eq!(preview("short"), "short");
    let long = "x".repeat(PREVIEW_CHARS + 5);
    assert_eq!(preview(&long), format!("{}...", "x".repeat(PREVIEW_CHARS)));
}

#[test]
fn tool_result_paths_read_fields_of_a_json_result() {
    let vars = Vars {
        user: "hi",
        tool_result: r#"{"ok": true, "data": {"content": "Hello\n", "lines": [3, {"n": 4}], "none": null}}"#,
        model: "m",
        thinking: "off",
    };
    let cases = [
        ("{{tool_result.data.content}}", "Hello\n"),
        ("{{ tool_result.ok }}", "true"),
        ("{{tool_result.data.lines.1.n}}", "4"),
        ("{{tool_result.data.lines}}", r#"[3,{"n":4}]"#),
        (
            "[{{tool_result.data.none}}{{tool_result.data.missing}}{{tool_result.data.lines.9}}]",
            "[]",
        ),
    ];
    for (template, expected) in cases {
        assert_eq!(interpolate(template, vars), expected, "{template}");
    }
    // A result that is not JSON leaves the placeholder as written.
    let plain = Vars {
        user: "hi",
        tool_result: "plain text",
        model: "m",
        thinking: "off",
    };
    assert_eq!(
        interpolate("{{tool_result.data}}", plain),
        "{{tool_result.data}}"
    );
}
