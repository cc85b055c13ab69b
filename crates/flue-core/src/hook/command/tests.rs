//! Unit tests of command hooks: matchers, the tool-name mapping, and reading answers.

use flue_protocol::record::ToolCall;
use serde_json::json;

use super::*;
use tokio_util::sync::CancellationToken;

fn hook(point: HookPoint, matcher: Option<&str>) -> CommandHook {
    let mut spec = CommandHookSpec::new(point, "true", "agents/a.md");
    spec.matcher = matcher.map(str::to_owned);
    CommandHook::new(spec, "/").unwrap()
}

fn pre(name: &str, input: serde_json::Value) -> HookEvent {
    HookEvent::PreToolUse {
        call: ToolCall {
            id: "call_1".into(),
            name: name.into(),
            input,
        },
    }
}

#[test]
fn matchers_take_names_lists_regexes_and_mcp_patterns() {
    let bash = pre("bash", json!({}));
    let mcp = pre("mcp__github__create_issue", json!({}));
    assert!(hook(HookPoint::PreToolUse, None).handles(&bash));
    assert!(hook(HookPoint::PreToolUse, Some("*")).handles(&bash));
    assert!(hook(HookPoint::PreToolUse, Some("Bash")).handles(&bash));
    assert!(hook(HookPoint::PreToolUse, Some("bash")).handles(&bash));
    assert!(hook(HookPoint::PreToolUse, Some("Edit|Bash")).handles(&bash));
    assert!(!hook(HookPoint::PreToolUse, Some("Edit|Write")).handles(&bash));
    assert!(!hook(HookPoint::PreToolUse, Some("Bas")).handles(&bash));
    assert!(hook(HookPoint::PreToolUse, Some("mcp__github__.*")).handles(&mcp));
    assert!(hook(HookPoint::PreToolUse, Some("mcp__github__create_issue")).handles(&mcp));
    assert!(!hook(HookPoint::PreToolUse, Some("mcp__slack__.*")).handles(&mcp));
    // A `*` in an otherwise plain matcher is a wildcard, as people write `mcp__server__*`.
    assert!(hook(HookPoint::PreToolUse, Some("mcp__github__*")).handles(&mcp));
    assert!(hook(HookPoint::PreToolUse, Some("Bash|mcp__github__*")).handles(&mcp));
    assert!(!hook(HookPoint::PreToolUse, Some("mcp__slack__*")).handles(&mcp));
    assert!(!hook(HookPoint::PreToolUse, Some("mcp__github__*")).handles(&bash));
    assert!(!hook(HookPoint::PostToolUse, None).handles(&bash));
    let bad = CommandHookSpec::new(HookPoint::PreToolUse, "true", "flue.toml").with_matcher("(");
    let err = CommandHook::new(bad, "/").err().unwrap().to_string();
    assert!(
        err.contains("flue.toml") && err.contains("matcher"),
        "{err}"
    );
}

#[test]
fn tool_inputs_are_shown_with_claude_code_names_and_mapped_back() {
    let hook = hook(HookPoint::PreToolUse, None);
    let event = pre("read_file", json!({"path": "src/main.rs", "start_line": 3}));
    let ctx = HookContext {
        instance_id: "a:1".into(),
        session: "default".into(),
        agent: "a".into(),
        depth: 0,
        cwd: None,
        cancel: CancellationToken::new(),
        state: None,
        transcript: None,
        model: None,
    };
    let input = hook.input(&event, &ctx);
    assert_eq!(input["tool_name"], "Read");
    assert_eq!(input["flue_tool_name"], "read_file");
    assert_eq!(
        input["tool_input"],
        json!({"file_path": "src/main.rs", "start_line": 3})
    );
    assert_eq!(input["hook_event_name"], "PreToolUse");
    assert_eq!(input["tool_use_id"], "call_1");
    let answer = json!({"hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": "allow",
        "updatedInput": {"file_path": "README.md"}
    }});
    let decision = hook.read_output(&event, &answer);
    assert_eq!(decision.verdict, Verdict::Allow);
    assert_eq!(decision.updated_input, Some(json!({"path": "README.md"})));
    // An MCP tool's server is named; a built-in tool has none.
    assert!(input.get("mcp_server").is_none());
    let mcp = hook.input(&pre("mcp__github__create_issue", json!({})), &ctx);
    assert_eq!(mcp["mcp_server"], "github");
    assert_eq!(mcp["tool_name"], "mcp__github__create_issue");
}

#[test]
fn exit_codes_and_json_answers_read_as_claude_code_documents_them() {
    let hook = hook(HookPoint::PreToolUse, None);
    let event = pre("bash", json!({"command": "rm -rf /"}));
    let Ok(Outcome::Decided(denied)) = hook.decision(&event, 2, "", "no rm -rf\n") else {
        panic!("exit 2 decides");
    };
    assert_eq!(denied.verdict, Verdict::Deny);
    assert_eq!(denied.reason.as_deref(), Some("no rm -rf"));
    assert!(matches!(
        hook.decision(&event, 1, "", "oops"),
        Ok(Outcome::Error(_))
    ));
    assert!(hook.decision(&event, 124, "", "").is_err());
    assert!(hook.decision(&event, 127, "", "not found").is_err());
    assert!(hook.decision(&event, 0, "{not json", "").is_err());
    let Ok(Outcome::Decided(plain)) = hook.decision(&event, 0, "hello", "") else {
        panic!("plain output decides nothing");
    };
    assert!(plain.is_plain());
    let answer = json!({"continue": false, "stopReason": "budget spent"});
    let stop = hook.read_output(&event, &answer);
    assert_eq!(stop.verdict, Verdict::Tripwire);
    assert_eq!(stop.reason.as_deref(), Some("budget spent"));
    let prompt = HookEvent::UserPromptSubmit {
        prompt: "hi".into(),
    };
    let prompt_hook = CommandHook::new(
        CommandHookSpec::new(HookPoint::UserPromptSubmit, "true", "flue.toml"),
        "/",
    )
    .unwrap();
    let Ok(Outcome::Decided(context)) = prompt_hook.decision(&prompt, 0, "It is Monday.\n", "")
    else {
        panic!("plain output is context");
    };
    assert_eq!(context.additional_context.as_deref(), Some("It is Monday."));
}
