//! Hooks in Rust (`hook_fn` on `AgentConfig`): every point with its decisions, the records and
//! events they leave, guardrails ending the operation with `guardrail_tripped`, and hooks in a
//! subagent's task session (`SubagentStop`).

use std::sync::{Arc, Mutex};

use flue_core::hook::{HookDecision, HookEvent, HookPoint, hook_fn};
use flue_core::{
    AgentConfig, AgentProfile, Event, PromptOptions, Record, ToolDefinition, ToolError,
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::rules::{Reply, RuleProvider, fixture, kinds};

/// A tool that echoes its `text` input.
fn echo_tool() -> ToolDefinition {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Input {
        text: String,
    }
    ToolDefinition::from_fn("echo", "Echoes.", |input: Input, _ctx| async move {
        Ok::<_, ToolError>(json!(input.text))
    })
    .unwrap()
}

/// The model: a user message `call` -> `echo {"text": "secret"}`; after a tool result ->
/// `got: <result>`; else echoes the last user message and the system prompt's last line.
fn model() -> Arc<RuleProvider> {
    RuleProvider::new(|seen| {
        if let Some(result) = seen.last_tool_result() {
            return Reply::Text(format!("got: {}", result.content));
        }
        let last_user = seen
            .messages
            .iter()
            .rev()
            .find_map(|record| match record {
                Record::User(message) => Some(message.joined_text()),
                _ => None,
            })
            .unwrap_or_default();
        if last_user.starts_with("call") {
            return Reply::Calls(vec![("echo", json!({"text": "secret"}))]);
        }
        let system_tail = seen.system.lines().last().unwrap_or_default().to_owned();
        Reply::Text(format!("said: {last_user} [{system_tail}]"))
    })
}

type Log = Arc<Mutex<Vec<String>>>;

/// A hook at every point that logs what it saw and decides as the tests need.
fn recording(log: &Log) -> Arc<dyn flue_core::hook::Hook> {
    let log = Arc::clone(log);
    hook_fn("recorder", &HookPoint::ALL, move |event, ctx| {
        let log = Arc::clone(&log);
        async move {
            let point = event.point().name();
            log.lock().unwrap().push(format!("{point}@{}", ctx.session));
            Ok(match event {
                HookEvent::UserPromptSubmit { prompt } if prompt.contains("forbidden") => {
                    HookDecision::block("no forbidden words")
                }
                HookEvent::UserPromptSubmit { .. } => HookDecision::proceed().with_context("ctx!"),
                HookEvent::BeforeModelCall { .. } => {
                    HookDecision::proceed().with_context("system addition")
                }
                HookEvent::PreToolUse { call } if call.name == "echo" => {
                    HookDecision::rewrite(json!({"text": "public"}))
                }
                HookEvent::PostToolUse { result, .. } => {
                    HookDecision::replace(format!("<{}>", result.content))
                }
                HookEvent::Stop { reply, .. } if reply.contains("trip") => {
                    HookDecision::tripwire("the reply mentions trip")
                }
                _ => HookDecision::proceed(),
            })
        }
    })
}

#[tokio::test]
async fn rust_hooks_see_every_point_rewrite_calls_replace_results_and_are_recorded() {
    let log: Log = Arc::default();
    let agent = AgentConfig::new()
        .with_model("test/model")
        .with_tools([echo_tool()])
        .with_hook(recording(&log));
    let f = fixture(agent, model(), |builder| builder).await;
    let session = f.harness.session("default").await.unwrap();
    let mut handle = session.prompt("call", PromptOptions::default());
    let mut events = handle.take_events().unwrap();
    let response = handle.await.unwrap();
    assert_eq!(response.text, "got: <public>");
    let mut decisions = Vec::new();
    while let Some(event) = events.recv().await {
        if let Event::HookDecision { hook } = event {
            decisions.push(format!("{}:{}", hook.event, hook.decision));
        }
    }
    assert_eq!(
        decisions,
        [
            "SessionStart:continue",
            "UserPromptSubmit:continue",
            "BeforeModelCall:continue",
            "PreToolUse:continue",
            "PostToolUse:continue",
            "BeforeModelCall:continue",
            "Stop:continue",
            "SessionEnd:continue",
        ]
    );
    let records = f.records("default").await;
    let hooks: Vec<(String, Option<Value>, Option<String>)> = records
        .iter()
        .filter_map(|record| match record {
            Record::Hook(hook) => Some((
                hook.event.clone(),
                hook.updated_input.clone(),
                hook.replacement.clone(),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(hooks.len(), 7, "{hooks:?}");
    assert_eq!(hooks[3].1, Some(json!({"text": "public"})));
    assert_eq!(hooks[4].2.as_deref(), Some("<public>"));
    // The context reached the stored message; the model never saw the hook records.
    let Some(Record::User(message)) = records.iter().find(|r| matches!(r, Record::User(_))) else {
        panic!("no user record");
    };
    assert_eq!(message.joined_text(), "call\n\nctx!");
    assert_eq!(
        kinds(&records)
            .into_iter()
            .filter(|kind| kind != "other")
            .collect::<Vec<_>>(),
        ["user", "assistant", "tool", "assistant"]
    );
    // The second message starts no session.
    log.lock().unwrap().clear();
    let response = session
        .prompt("hello", PromptOptions::default())
        .await
        .unwrap();
    assert_eq!(response.text, "said: hello\n\nctx! [system addition]");
    assert!(
        !log.lock()
            .unwrap()
            .iter()
            .any(|seen| seen.starts_with("SessionStart"))
    );
}

#[tokio::test]
async fn guardrails_on_the_prompt_and_the_reply_end_the_operation_with_a_typed_error() {
    let log: Log = Arc::default();
    let agent = AgentConfig::new()
        .with_model("test/model")
        .with_hook(recording(&log));
    let f = fixture(agent, model(), |builder| builder).await;
    let session = f.harness.session("default").await.unwrap();
    let err = session
        .prompt("a forbidden word", PromptOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "guardrail_tripped");
    assert!(err.to_string().contains("no forbidden words"), "{err}");
    assert!(err.to_string().contains("UserPromptSubmit"), "{err}");
    // Nothing of the prompt was stored; the decision was.
    let records = f.records("default").await;
    assert!(
        !records
            .iter()
            .any(|record| matches!(record, Record::User(_)))
    );
    assert!(
        records
            .iter()
            .any(|record| matches!(record, Record::Hook(hook) if hook.decision == "block"))
    );
    let err = session
        .prompt("trip", PromptOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "guardrail_tripped");
    assert!(err.to_string().contains("the reply mentions trip"), "{err}");
}

#[tokio::test]
async fn a_subagents_task_session_runs_the_agents_hooks_and_ends_with_subagent_stop() {
    let log: Log = Arc::default();
    let provider = RuleProvider::new(|seen| {
        if seen.first_user_text().starts_with("audit") {
            return Reply::Text("2 findings".into());
        }
        match seen.last_tool_result() {
            None => Reply::Calls(vec![(
                "task",
                json!({"prompt": "audit login.py", "agent": "security"}),
            )]),
            Some(result) => Reply::Text(format!("reviewed: {}", result.content)),
        }
    });
    let agent = AgentConfig::new()
        .with_model("test/model")
        .with_subagent(AgentProfile::new("security").with_instructions("Audit."))
        .with_hook(recording(&log));
    let f = fixture(agent, provider, |builder| builder).await;
    let session = f.harness.session("default").await.unwrap();
    let response = session
        .prompt("review", PromptOptions::default())
        .await
        .unwrap();
    assert!(response.text.starts_with("reviewed: "), "{}", response.text);
    let seen = log.lock().unwrap().clone();
    let task_points: Vec<&String> = seen.iter().filter(|seen| seen.contains("@task:")).collect();
    assert!(
        task_points
            .iter()
            .any(|seen| seen.starts_with("SubagentStop@task:default:")),
        "{seen:?}"
    );
    assert!(seen.contains(&"Stop@default".to_owned()), "{seen:?}");
    assert!(
        seen.iter()
            .any(|seen| seen.starts_with("PreToolUse@default")),
        "{seen:?}"
    );
    // The task session starts with `SubagentStart`, then its `SessionStart`.
    let started: Vec<&str> = task_points
        .iter()
        .map(|seen| seen.split('@').next().unwrap_or_default())
        .take(2)
        .collect();
    assert_eq!(started, ["SubagentStart", "SessionStart"], "{seen:?}");
    assert!(
        !seen
            .iter()
            .any(|seen| seen.starts_with("SubagentStart@default")),
        "a root session is no subagent: {seen:?}"
    );
}

/// Each hook gets the log as of its point as a Claude Code transcript: at `Stop`, it ends
/// with the reply being judged, as one compact JSON line.
#[tokio::test]
async fn hooks_get_the_log_as_a_claude_code_transcript() {
    let transcripts: Arc<Mutex<Vec<String>>> = Arc::default();
    let kept = Arc::clone(&transcripts);
    let hook = hook_fn("transcripts", &[HookPoint::Stop], move |_event, ctx| {
        let kept = Arc::clone(&kept);
        async move {
            kept.lock()
                .unwrap()
                .push(ctx.transcript.as_deref().unwrap_or_default().to_owned());
            Ok(HookDecision::proceed())
        }
    });
    let agent = AgentConfig::new()
        .with_model("test/model")
        .with_tool(echo_tool())
        .with_hook(hook);
    let f = fixture(agent, model(), |builder| builder).await;
    let session = f.harness.session("default").await.unwrap();
    let response = session
        .prompt("call it", PromptOptions::default())
        .await
        .unwrap();
    let transcript = transcripts.lock().unwrap().pop().unwrap();
    let lines: Vec<Value> = transcript
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let kinds: Vec<(&str, &str)> = lines
        .iter()
        .map(|line| {
            let content = &line["message"]["content"];
            let block = content[0]["type"].as_str().unwrap_or("text");
            (line["type"].as_str().unwrap(), block)
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("user", "text"),
            ("assistant", "tool_use"),
            ("user", "tool_result"),
            ("assistant", "text"),
        ]
    );
    assert_eq!(lines[0]["message"]["content"], "call it");
    assert_eq!(lines[1]["message"]["content"][0]["name"], "echo");
    assert_eq!(
        lines[3]["message"]["content"][0]["text"],
        response.text.as_str()
    );
    assert_eq!(lines[3]["parentUuid"], lines[2]["uuid"]);
    assert!(transcript.contains("\"role\":\"assistant\""));
}

/// A Rust hook reads the state (`HookContext::state`) and writes it
/// (`HookDecision::with_state`): the write is a `state` record named after its point, which
/// the tool call after it reads; a write over the size limit is a hook failure that writes
/// nothing (at `Stop`, a non-blocking point, reported as an `error` decision).
#[tokio::test]
async fn rust_hooks_read_and_write_the_conversation_state() {
    let seen: Log = Arc::default();
    let log = Arc::clone(&seen);
    let hook = hook_fn(
        "stateful",
        &[HookPoint::PreToolUse, HookPoint::Stop],
        move |event, ctx| {
            let log = Arc::clone(&log);
            async move {
                let state = ctx.state.clone().unwrap_or(Value::Null);
                log.lock()
                    .unwrap()
                    .push(format!("{}: {state}", event.point().name()));
                Ok(match event {
                    HookEvent::PreToolUse { .. } => {
                        HookDecision::proceed().with_state(json!({"checked": true}))
                    }
                    _ => HookDecision::proceed()
                        .with_state(json!({"big": "x".repeat(flue_core::record::MAX_STATE_BYTES)})),
                })
            }
        },
    );
    // The tool reads the state its call sees.
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Input {
        #[allow(dead_code)]
        text: String,
    }
    let reader = ToolDefinition::from_fn(
        "echo",
        "Echoes the state.",
        |_input: Input, ctx: flue_core::tool::ToolContext| async move {
            let state = ctx.state().map(flue_core::tool::ToolState::get);
            Ok::<_, ToolError>(json!(state))
        },
    )
    .unwrap();
    let agent = AgentConfig::new()
        .with_model("test/model")
        .with_tools([reader])
        .with_hook(hook);
    let f = fixture(agent, model(), |builder| builder).await;
    let session = f.harness.session("default").await.unwrap();
    let response = session
        .prompt("call", PromptOptions::default())
        .await
        .unwrap();
    assert_eq!(response.text, r#"got: {"checked":true}"#);
    assert_eq!(
        *seen.lock().unwrap(),
        [
            "PreToolUse: {}".to_owned(),
            r#"Stop: {"checked":true}"#.to_owned()
        ]
    );
    let records = f.records("default").await;
    let changes: Vec<(u64, String, Value)> = records
        .iter()
        .filter_map(|record| match record {
            Record::State(change) => {
                Some((change.version, change.source.clone(), change.value.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        changes,
        [(1, "hook:PreToolUse".to_owned(), json!({"checked": true}))]
    );
    let refused = records.iter().find_map(|record| match record {
        Record::Hook(hook) if hook.event == "Stop" => Some(hook.clone()),
        _ => None,
    });
    let refused = refused.unwrap();
    assert_eq!(refused.decision, "error");
    assert!(
        refused
            .reason
            .as_deref()
            .unwrap()
            .contains("was refused, nothing was written: the state is"),
        "{refused:?}"
    );
}

/// A hook set to fail open (`onFailure: continue`) that fails at `points`: with an ordinary
/// failure, or as one that could not be started.
struct Failing {
    points: Vec<HookPoint>,
    not_started: bool,
}

impl flue_core::hook::Hook for Failing {
    fn name(&self) -> String {
        "failing".to_owned()
    }

    fn handles(&self, event: &HookEvent) -> bool {
        self.points.contains(&event.point())
    }

    fn fails_open(&self) -> bool {
        true
    }

    fn decide<'a>(
        &'a self,
        _event: &'a HookEvent,
        _ctx: &'a flue_core::hook::HookContext,
    ) -> flue_core::BoxFuture<'a, Result<HookDecision, flue_core::hook::HookFailure>> {
        let not_started = self.not_started;
        Box::pin(async move {
            Err(if not_started {
                flue_core::hook::HookFailure::cannot_start("the process could not be created")
            } else {
                flue_core::hook::HookFailure::new("it crashed")
            })
        })
    }
}

/// A hook that could not be started fails closed at every point that can stop something, even
/// set to fail open: the call is denied, the result withheld (the model sees the failure, the
/// log stores it as a `hook_failed` error), the reply ends with `hook_failed`; at `SessionEnd`
/// there is nothing to stop. An ordinary failure of the same hook lets everything through.
#[tokio::test]
async fn a_hook_that_cannot_start_fails_closed_even_when_set_to_fail_open() {
    let run = |points: Vec<HookPoint>, not_started: bool, message: &'static str| async move {
        let agent = AgentConfig::new()
            .with_model("test/model")
            .with_tools([echo_tool()])
            .with_hook(Arc::new(Failing {
                points,
                not_started,
            }));
        let f = fixture(agent, model(), |builder| builder).await;
        let session = f.harness.session("default").await.unwrap();
        let response = session.prompt(message, PromptOptions::default()).await;
        (response, f.records("default").await)
    };
    let withheld = "the process could not be created; a hook that could not be started fails \
                    closed whatever its `onFailure`, so this is refused";

    let (response, _) = run(vec![HookPoint::PreToolUse], true, "call").await;
    assert_eq!(response.unwrap().text, format!("got: {withheld}"));

    let (response, records) = run(vec![HookPoint::PostToolUse], true, "call").await;
    assert_eq!(response.unwrap().text, format!("got: {withheld}"));
    let results: Vec<(String, bool, Option<String>)> = records
        .iter()
        .filter_map(|record| match record {
            Record::ToolResult(result) => Some((
                result.content.clone(),
                result.is_error,
                result.error_kind.clone(),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        [(withheld.to_owned(), true, Some("hook_failed".to_owned()))]
    );

    let (response, _) = run(vec![HookPoint::Stop], true, "hello").await;
    let err = response.unwrap_err();
    assert_eq!(err.kind(), "hook_failed");
    assert!(err.to_string().contains(withheld), "{err}");

    let (response, _) = run(vec![HookPoint::SessionEnd], true, "hello").await;
    assert!(response.is_ok(), "{response:?}");

    // An ordinary failure of a hook set to fail open lets the call, its result and the reply
    // through.
    let all = vec![
        HookPoint::PreToolUse,
        HookPoint::PostToolUse,
        HookPoint::Stop,
    ];
    let (response, _) = run(all, false, "call").await;
    assert_eq!(response.unwrap().text, "got: secret");
}
