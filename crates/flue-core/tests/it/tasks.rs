//! Tasks: detached child sessions, subagent profiles and inheritance, the `task` tool, the depth
//! limit, abort propagation, events and deletion.

use std::future::IntoFuture;

use flue_core::{
    AgentConfig, AgentProfile, Event, EventStream, FlueError, Outcome, PromptOptions, Record, Role,
    Skill, TaskOptions, ThinkingLevel, ToolDefinition, Usage, util::task_session_parent,
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::rules::{Reply, RuleProvider, Seen, fixture, kinds, user_text};

/// A tool that reports the working directory it runs in.
fn cwd_tool() -> ToolDefinition {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Input {}
    ToolDefinition::from_fn(
        "where",
        "Reports the cwd.",
        |_input: Input, ctx| async move { Ok(json!(ctx.cwd)) },
    )
    .unwrap()
}

/// Awaits an aborted call, failing the test instead of hanging if the abort does not reach it.
async fn guard<T: Send + 'static>(handle: flue_core::CallHandle<T>) -> flue_core::Result<T> {
    tokio::time::timeout(std::time::Duration::from_secs(20), handle.into_future())
        .await
        .expect("the aborted call did not finish")
}

/// Levels below the root, read from a session's name.
fn depth_of(name: &str) -> u32 {
    let mut depth = 0;
    let mut current = name;
    while let Some(parent) = task_session_parent(current) {
        depth += 1;
        current = parent;
    }
    depth
}

/// Every event until the stream ends.
async fn drain(mut events: EventStream) -> Vec<Event> {
    let mut all = Vec::new();
    while let Some(event) = events.recv().await {
        all.push(event);
    }
    all
}

/// The task events, as (start or end, depth, outcome).
fn task_events(events: &[Event]) -> Vec<(&'static str, u32, Option<Outcome>)> {
    events
        .iter()
        .filter_map(|event| match event {
            Event::TaskStart { depth, .. } => Some(("start", *depth, None)),
            Event::TaskEnd { depth, outcome, .. } => Some(("end", *depth, Some(*outcome))),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_task_runs_in_a_detached_child_session_with_a_fresh_history() {
    let provider = RuleProvider::new(|seen| {
        if seen.first_user_text() == "summarise the logs" {
            Reply::Text("3 errors".into())
        } else {
            Reply::Text("hello".into())
        }
    });
    let f = fixture(
        AgentConfig::new()
            .with_model("test/model")
            .with_instructions("Lead."),
        provider.clone(),
        |builder| builder,
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    session
        .prompt("hi", PromptOptions::default())
        .await
        .unwrap();
    let mut handle = session.task("summarise the logs", TaskOptions::default());
    let events = handle.take_events().unwrap();
    let response = handle.await.unwrap();
    let events = drain(events).await;

    assert_eq!(response.text, "3 errors");
    assert_eq!(response.usage.input_tokens, 10);
    let names = f.session_names().await;
    assert_eq!(names.len(), 2, "{names:?}");
    let child = names
        .iter()
        .find(|name| *name != "default")
        .unwrap()
        .clone();
    assert_eq!(task_session_parent(&child), Some("default"));
    // The child starts from nothing; the parent's log is untouched.
    assert_eq!(provider.seen()[1].messages.len(), 1);
    assert_eq!(provider.seen()[1].system, "Lead.");
    assert_eq!(kinds(&f.records(&child).await), ["user", "assistant"]);
    assert_eq!(user_text(&f.records(&child).await[0]), "summarise the logs");
    assert_eq!(kinds(&f.records("default").await), ["user", "assistant"]);

    let usage = Usage {
        input_tokens: 10,
        output_tokens: 5,
        ..Usage::default()
    };
    assert_eq!(
        events,
        vec![
            Event::OperationStart {
                session: "default".into(),
                operation: flue_core::event::OperationKind::Task,
            },
            Event::TaskStart {
                session: child.clone(),
                parent: "default".into(),
                agent: None,
                depth: 1,
                call_id: None,
            },
            Event::TaskActivity {
                session: child.clone(),
                depth: 1,
                event: Box::new(Event::TurnEnd {
                    model: flue_core::ModelRef {
                        provider: "test".into(),
                        id: "model".into(),
                    },
                    usage,
                    stop_reason: flue_core::StopReason::EndTurn,
                }),
            },
            Event::TaskEnd {
                session: child,
                agent: None,
                depth: 1,
                outcome: Outcome::Completed,
                usage,
                error: None,
            },
            Event::OperationEnd {
                outcome: Outcome::Completed,
                usage,
                error: None,
            },
        ]
    );
}

/// (model, thinking, system, tools) of a request.
fn shape(seen: &Seen) -> (String, ThinkingLevel, String, Vec<&str>) {
    (
        seen.model.clone(),
        seen.thinking,
        seen.system.clone(),
        seen.tool_names(),
    )
}

#[tokio::test]
async fn a_subagent_is_self_contained_and_inherits_model_and_thinking() {
    let provider = RuleProvider::new(|_| Reply::Text("ok".into()));
    let writer = AgentProfile::new("writer")
        .with_model("test/writer")
        .with_thinking(ThinkingLevel::Low)
        .with_instructions("Write.")
        .with_tool(cwd_tool())
        .with_skill(Skill::new("style", "House style"));
    let agent = AgentConfig::new()
        .with_model("test/parent")
        .with_thinking(ThinkingLevel::High)
        .with_instructions("Lead.")
        .with_tool(cwd_tool())
        .with_skill(Skill::new("plan", "Plans work"))
        .with_subagent(
            AgentProfile::new("security")
                .with_description("Finds holes")
                .with_instructions("Audit."),
        )
        .with_subagent(writer);
    let f = fixture(agent, provider.clone(), |builder| {
        builder
            .with_workspace_context(Some("Context.".into()))
            .with_workspace_skills(vec![Skill::new("triage", "Sorts issues")])
    })
    .await;
    let session = f.harness.session("default").await.unwrap();
    session
        .prompt("lead", PromptOptions::default())
        .await
        .unwrap();
    for agent in ["security", "writer"] {
        session
            .task("go", TaskOptions::default().with_agent(agent))
            .await
            .unwrap();
    }
    let seen = provider.seen();
    let catalog = |entries: &str| {
        format!(
            "# Skills\n\nThese skills are available. When one fits the task, load its \
             instructions with the `load_skill` tool before you start.\n\n{entries}"
        )
    };
    assert_eq!(
        seen.iter().map(shape).collect::<Vec<_>>(),
        vec![
            (
                "parent".to_owned(),
                ThinkingLevel::High,
                format!(
                    "Lead.\n\nContext.\n\n{}",
                    catalog("- plan: Plans work\n- triage: Sorts issues")
                ),
                vec!["where", "load_skill", "task"],
            ),
            // Own instructions, no tools, skills or subagents (only `task`, offered to every
            // agent); model and thinking inherited.
            (
                "parent".to_owned(),
                ThinkingLevel::High,
                "Audit.\n\nContext.".to_owned(),
                vec!["task"],
            ),
            // Its own model, thinking, tools and skills.
            (
                "writer".to_owned(),
                ThinkingLevel::Low,
                format!("Write.\n\nContext.\n\n{}", catalog("- style: House style")),
                vec!["where", "load_skill", "task"],
            ),
        ]
    );
}

#[tokio::test]
async fn without_an_agent_a_task_runs_the_parents_configuration_in_a_fresh_context() {
    let provider = RuleProvider::new(|seen| {
        if seen.first_user_text() == "in sub" && seen.last_tool_result().is_none() {
            Reply::Calls(vec![("where", json!({}))])
        } else {
            Reply::Text("ok".into())
        }
    });
    let f = fixture(
        AgentConfig::new()
            .with_model("test/parent")
            .with_instructions("Lead.")
            .with_tool(cwd_tool())
            .with_subagent(AgentProfile::new("security")),
        provider.clone(),
        |builder| builder,
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    session
        .prompt("lead", PromptOptions::default())
        .await
        .unwrap();
    session
        .task("in sub", TaskOptions::default().with_cwd("sub"))
        .await
        .unwrap();
    let seen = provider.seen();
    assert_eq!(shape(&seen[1]), shape(&seen[0]));
    assert_eq!(seen[1].messages.len(), 1);
    // The task's tools run in its own working directory.
    let Some(Record::ToolResult(result)) = seen[2].messages.last() else {
        panic!("expected a tool result: {:?}", seen[2].messages);
    };
    assert!(result.content.ends_with("/sub"), "{}", result.content);
}

#[tokio::test]
async fn an_undeclared_subagent_is_refused_before_anything_is_created() {
    let provider = RuleProvider::new(|_| Reply::Text("never".into()));
    let f = fixture(
        AgentConfig::new()
            .with_model("test/model")
            .with_subagent(AgentProfile::new("security")),
        provider.clone(),
        |builder| builder,
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let err = session
        .task("x", TaskOptions::default().with_agent("ghost"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "subagent_not_declared");
    assert_eq!(
        err.to_string(),
        "subagent \"ghost\" is not declared by this agent (declared subagents: security)"
    );
    assert!(provider.seen().is_empty());
    assert_eq!(f.session_names().await, ["default"]);
}

#[tokio::test]
async fn tasks_nest_four_levels_deep_and_the_fifth_is_refused() {
    // Every conversation delegates once, then answers with what came back. The agent declares
    // no subagents: `task` (offered by default) runs copies of itself, and the depth limit is
    // what stops a copy delegating to a copy without end.
    let provider = RuleProvider::new(|seen| match seen.last_tool_result() {
        None => Reply::Calls(vec![("task", json!({"prompt": "dig"}))]),
        Some(result) if result.is_error => Reply::Text("bottom".into()),
        Some(result) => {
            let returned: Value = serde_json::from_str(&result.content).unwrap();
            Reply::Text(format!("above {}", returned["text"].as_str().unwrap()))
        }
    });
    let f = fixture(
        AgentConfig::new().with_model("test/model"),
        provider,
        |builder| builder,
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let mut handle = session.prompt("dig", PromptOptions::default());
    let events = handle.take_events().unwrap();
    let response = handle.await.unwrap();
    let events = drain(events).await;

    assert_eq!(response.text, "above above above above bottom");
    let names = f.session_names().await;
    let mut depths: Vec<u32> = names.iter().map(|name| depth_of(name)).collect();
    depths.sort_unstable();
    assert_eq!(depths, [0, 1, 2, 3, 4]);
    let deepest = names.iter().find(|name| depth_of(name) == 4).unwrap();
    let records = f.records(deepest).await;
    assert_eq!(
        kinds(&records),
        [
            "user",
            "assistant",
            // The `task` call's attempt is stored before it runs (a crash runs it again).
            "attempt:task",
            "tool_error:delegation_depth_exceeded",
            "assistant"
        ]
    );
    let Record::ToolResult(refused) = &records[3] else {
        unreachable!()
    };
    assert_eq!(
        refused.content,
        "cannot start a task at depth 5: tasks nest at most 4 levels below the root session; \
         do this work here instead of delegating"
    );
    for name in names.iter().filter(|name| (1..4).contains(&depth_of(name))) {
        assert_eq!(
            kinds(&f.records(name).await),
            ["user", "assistant", "attempt:task", "tool", "assistant"]
        );
    }
    // Nested task events reach the root's stream, with their depth.
    let summary = task_events(&events);
    let done = Some(Outcome::Completed);
    assert_eq!(
        summary,
        vec![
            ("start", 1, None),
            ("start", 2, None),
            ("start", 3, None),
            ("start", 4, None),
            ("end", 4, done),
            ("end", 3, done),
            ("end", 2, done),
            ("end", 1, done),
        ]
    );
}

#[tokio::test]
async fn the_task_tool_lists_subagents_and_links_the_child_session() {
    let provider = RuleProvider::new(|seen| {
        if seen.first_user_text() == "audit login.py" {
            return Reply::Text("2 findings".into());
        }
        match seen.last_tool_result() {
            None => Reply::Calls(vec![
                (
                    "task",
                    json!({"prompt": "audit login.py", "agent": "security", "role": "auditor"}),
                ),
                ("task", json!({"prompt": "x", "agent": "ghost"})),
            ]),
            Some(_) => Reply::Text("reviewed".into()),
        }
    });
    let f = fixture(
        AgentConfig::new()
            .with_model("test/model")
            .with_subagent(
                AgentProfile::new("security")
                    .with_description("Finds holes")
                    .with_instructions("Audit."),
            )
            .with_subagent(AgentProfile::new("helper")),
        provider.clone(),
        |builder| {
            builder.with_roles(vec![
                Role::new("auditor", "Thinks like an attacker").with_instructions("Be paranoid."),
            ])
        },
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let response = session
        .prompt("review", PromptOptions::default())
        .await
        .unwrap();
    assert_eq!(response.text, "reviewed");
    // Two parent turns and one task turn.
    assert_eq!(response.usage.input_tokens, 30);

    let seen = provider.seen();
    let description = &seen[0]
        .tools
        .iter()
        .find(|(name, _)| name == "task")
        .unwrap()
        .1;
    assert_eq!(
        description,
        "Delegate a self-contained piece of work to a subagent. It runs in a fresh conversation \
         (it does not see this one) in the same workspace, and its final answer comes back as \
         this tool's result, with the name of the session holding its transcript. Write \
         `prompt` as a complete instruction. With `background: true` the call returns a \
         `task_id` at once and the answer arrives later as a `task_result` message.\n\n\
         Subagents (`agent`):\n- security: Finds holes\n\
         - helper\nOmit `agent` to delegate to a fresh copy of yourself.\n\n\
         Roles (`role`, optional):\n- auditor: Thinks like an attacker"
    );
    let child_request = seen
        .iter()
        .find(|seen| seen.first_user_text() == "audit login.py")
        .unwrap();
    assert_eq!(
        child_request.system,
        "Audit.\n\n# Role: auditor\n\nFor this request you act in this role.\n\nBe paranoid."
    );

    let child = f
        .session_names()
        .await
        .into_iter()
        .find(|name| name != "default")
        .unwrap();
    let results: Vec<(String, Option<String>)> = f
        .records("default")
        .await
        .into_iter()
        .filter_map(|record| match record {
            Record::ToolResult(result) => Some((result.content, result.error_kind)),
            _ => None,
        })
        .collect();
    let linked: Value = serde_json::from_str(&results[0].0).unwrap();
    assert_eq!(
        linked,
        json!({"session": child, "agent": "security", "text": "2 findings"})
    );
    assert_eq!(
        results[1],
        (
            "subagent \"ghost\" is not declared by this agent (declared subagents: security, \
             helper)"
                .to_owned(),
            Some("subagent_not_declared".to_owned())
        )
    );
}

#[tokio::test]
async fn aborting_the_parent_aborts_a_running_task() {
    let provider = RuleProvider::new(|seen| match seen.first_user_text().as_str() {
        "slow" => Reply::Hang,
        _ => Reply::Calls(vec![("task", json!({"prompt": "slow", "agent": "helper"}))]),
    });
    let f = fixture(
        AgentConfig::new()
            .with_model("test/model")
            .with_subagent(AgentProfile::new("helper")),
        provider,
        |builder| builder,
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let mut handle = session.prompt("lead", PromptOptions::default());
    let mut events = handle.take_events().unwrap();
    let mut seen_events = Vec::new();
    while let Some(event) = events.recv().await {
        let started = matches!(event, Event::TaskStart { .. });
        seen_events.push(event);
        if started {
            break;
        }
    }
    handle.abort();
    let err = guard(handle).await.unwrap_err();
    assert!(matches!(err, FlueError::Aborted), "{err:?}");
    seen_events.extend(drain(events).await);

    let child = f
        .session_names()
        .await
        .into_iter()
        .find(|name| name != "default")
        .unwrap();
    // Both logs are consistent: the child kept its prompt, the parent's call got an answer.
    assert_eq!(kinds(&f.records(&child).await), ["user"]);
    assert_eq!(
        kinds(&f.records("default").await),
        ["user", "assistant", "attempt:task", "tool_error:aborted"]
    );
    assert_eq!(
        task_events(&seen_events),
        vec![("start", 1, None), ("end", 1, Some(Outcome::Aborted))]
    );
    assert!(matches!(
        seen_events.last(),
        Some(Event::OperationEnd {
            outcome: Outcome::Aborted,
            ..
        })
    ));
}

#[tokio::test]
async fn aborting_a_task_call_aborts_its_child_session() {
    let provider = RuleProvider::new(|_| Reply::Hang);
    let f = fixture(
        AgentConfig::new().with_model("test/model"),
        provider,
        |builder| builder,
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let mut handle = session.task("slow", TaskOptions::default());
    let mut events = handle.take_events().unwrap();
    while let Some(event) = events.recv().await {
        if matches!(event, Event::TaskStart { .. }) {
            break;
        }
    }
    handle.abort();
    assert!(matches!(guard(handle).await, Err(FlueError::Aborted)));
    let names = f.session_names().await;
    let child = names.iter().find(|name| *name != "default").unwrap();
    assert_eq!(kinds(&f.records(child).await), ["user"]);
    // The parent is free again.
    assert!(
        session
            .task("slow", TaskOptions::default().with_agent("nobody"))
            .await
            .is_err_and(|err| err.kind() == "subagent_not_declared")
    );
}

#[tokio::test]
async fn deleting_a_session_deletes_its_task_sessions() {
    let provider = RuleProvider::new(|_| Reply::Text("ok".into()));
    let f = fixture(
        AgentConfig::new().with_model("test/model"),
        provider,
        |builder| builder,
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let other = f.harness.session("other").await.unwrap();
    session.task("a", TaskOptions::default()).await.unwrap();
    session.task("b", TaskOptions::default()).await.unwrap();
    other.task("c", TaskOptions::default()).await.unwrap();
    assert_eq!(f.session_names().await.len(), 5);
    session.delete().await.unwrap();
    let left = f.session_names().await;
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(
        left.iter()
            .all(|name| name == "other" || name.starts_with("task:other:"))
    );
}

#[tokio::test]
async fn a_task_can_return_validated_data() {
    let provider = RuleProvider::new(|seen| match seen.last_tool_result() {
        None if seen.tool_names().contains(&"finish") => {
            Reply::Calls(vec![("finish", json!({"severity": "high", "count": 2}))])
        }
        _ => Reply::Text("done".into()),
    });
    let f = fixture(
        AgentConfig::new()
            .with_model("test/model")
            .with_subagent(AgentProfile::new("security")),
        provider,
        |builder| builder,
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let schema = json!({
        "type": "object",
        "properties": {"severity": {"type": "string"}, "count": {"type": "integer"}},
        "required": ["severity", "count"],
    });
    let response = session
        .task(
            "rate it",
            TaskOptions::default()
                .with_agent("security")
                .with_result(schema),
        )
        .await
        .unwrap();
    assert_eq!(response.data, Some(json!({"severity": "high", "count": 2})));
}

/// Flue 2.x offers delegation to every agent: without subagents the model gets `task` (a fresh
/// copy of itself), and `with_task_tool(false)` withholds it from that agent only.
#[tokio::test]
async fn every_agent_is_offered_the_task_tool_unless_it_opts_out() {
    let provider = RuleProvider::new(|seen| {
        if seen.first_user_text() == "count the files" {
            return Reply::Text("3 files".into());
        }
        match seen.last_tool_result() {
            None => Reply::Calls(vec![("task", json!({"prompt": "count the files"}))]),
            Some(result) => Reply::Text(format!("child said: {}", result.content)),
        }
    });
    let f = fixture(
        AgentConfig::new().with_model("test/model"),
        provider.clone(),
        |builder| builder,
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let response = session
        .prompt("delegate", PromptOptions::default())
        .await
        .unwrap();
    assert!(response.text.contains("3 files"), "{}", response.text);
    let seen = provider.seen();
    assert!(seen[0].tool_names().contains(&"task"));
    // The child is a copy of the agent, so it may delegate too.
    let child = seen
        .iter()
        .find(|seen| seen.first_user_text() == "count the files")
        .unwrap();
    assert!(child.tool_names().contains(&"task"));

    let withheld = RuleProvider::new(|_| Reply::Text("alone".into()));
    let f = fixture(
        AgentConfig::new()
            .with_model("test/model")
            .with_task_tool(false)
            .with_subagent(AgentProfile::new("helper")),
        withheld.clone(),
        |builder| builder,
    )
    .await;
    assert!(
        !f.harness
            .tool_schemas()
            .unwrap()
            .iter()
            .any(|tool| tool.name == "task")
    );
    let session = f.harness.session("default").await.unwrap();
    session
        .prompt("hi", PromptOptions::default())
        .await
        .unwrap();
    assert!(!withheld.seen()[0].tool_names().contains(&"task"));
    // The subagents stay usable from code.
    let text = session
        .task("x", TaskOptions::default().with_agent("helper"))
        .await
        .unwrap()
        .text;
    assert_eq!(text, "alone");
}
