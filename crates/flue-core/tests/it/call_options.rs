//! The call options `prompt`, `skill` and `task` share: the same options, set through each
//! call's builder, reach each call's model request alike.

use std::time::Duration;

use flue_core::{
    AgentConfig, CallOptions, CancellationToken, Image, PromptOptions, Record, Role, Skill,
    SkillOptions, TaskOptions, ThinkingLevel, ToolDefinition, UserContent,
};
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::rules::{Fixture, Reply, RuleProvider, Seen, fixture};

/// Every shared option, set once for any of the three calls.
fn shared<Extra>(
    options: CallOptions<Extra>,
    cancel: Option<CancellationToken>,
) -> CallOptions<Extra> {
    let options = options
        .with_model("test/vision-call")
        .with_thinking(ThinkingLevel::Minimal)
        .with_role("auditor")
        .with_tool(echo_tool())
        .with_result(json!({
            "type": "object",
            "properties": {"ok": {"type": "boolean"}},
            "required": ["ok"],
        }))
        .with_image(Image {
            data: "iVBORw0KGgo=".into(),
            mime_type: "image/png".into(),
        });
    match cancel {
        Some(cancel) => options.with_cancel(cancel),
        None => options,
    }
}

fn echo_tool() -> ToolDefinition {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Input {}
    ToolDefinition::from_fn("echo", "Echoes.", |_input: Input, _ctx| async move {
        Ok(json!("echo"))
    })
    .unwrap()
}

/// An agent (its own model and thinking level) with the skill `review` and the role `auditor`.
async fn agent(provider: std::sync::Arc<RuleProvider>) -> Fixture {
    fixture(
        AgentConfig::new()
            .with_model("test/agent")
            .with_thinking(ThinkingLevel::High)
            .with_skill(Skill::new("review", "Reviews a change").with_body("Be thorough.")),
        provider,
        |builder| {
            builder.with_roles(vec![
                Role::new("auditor", "Thinks like an attacker")
                    .with_instructions("You are a security auditor."),
            ])
        },
    )
    .await
}

/// What of the shared options a model request shows: (model, thinking, whether the role is
/// in the system prompt, whether the call's tool and the result tool are offered, whether the
/// call's user message carries the image).
fn observed(seen: &Seen) -> (String, ThinkingLevel, bool, bool, bool, bool) {
    let names = seen.tool_names();
    let last_user = seen.messages.iter().rev().find_map(|record| match record {
        Record::User(message) => Some(message),
        _ => None,
    });
    (
        seen.model.clone(),
        seen.thinking,
        seen.system.contains("# Role: auditor"),
        names.contains(&"echo"),
        names.contains(&"finish"),
        last_user.is_some_and(|message| {
            message
                .content
                .iter()
                .any(|part| matches!(part, UserContent::Image(_)))
        }),
    )
}

#[tokio::test]
async fn the_shared_options_reach_prompt_skill_and_task_alike() {
    let provider = RuleProvider::new(|seen| match seen.last_tool_result() {
        None if seen.tool_names().contains(&"finish") => {
            Reply::Calls(vec![("finish", json!({"ok": true}))])
        }
        _ => Reply::Text("done".into()),
    });
    let f = agent(provider.clone()).await;
    let session = f.harness.session("default").await.unwrap();
    let mut data = Vec::new();
    let response = session
        .prompt("check", shared(PromptOptions::default(), None))
        .await
        .unwrap();
    data.push(response.data);
    let first_requests = provider.seen().len();
    let response = session
        .skill(
            "review",
            shared(SkillOptions::default(), None).with_arg("file", json!("a.rs")),
        )
        .await
        .unwrap();
    data.push(response.data);
    let skill_requests = provider.seen().len();
    let response = session
        .task("check", shared(TaskOptions::default(), None))
        .await
        .unwrap();
    data.push(response.data);

    let seen = provider.seen();
    let firsts = [&seen[0], &seen[first_requests], &seen[skill_requests]];
    let expected = (
        "vision-call".to_owned(),
        ThinkingLevel::Minimal,
        true,
        true,
        true,
        true,
    );
    assert_eq!(
        firsts.map(observed).to_vec(),
        vec![expected.clone(), expected.clone(), expected]
    );
    assert_eq!(data, vec![Some(json!({"ok": true})); 3]);
}

#[tokio::test]
async fn an_outside_cancel_aborts_prompt_skill_and_task_alike() {
    let provider = RuleProvider::new(|_seen| Reply::Hang);
    let f = agent(provider).await;
    let session = f.harness.session("default").await.unwrap();
    let cancel = CancellationToken::new();
    cancel.cancel();
    let guard = Duration::from_secs(20);
    let prompt = session.prompt(
        "check",
        shared(PromptOptions::default(), Some(cancel.clone())),
    );
    let prompt = tokio::time::timeout(guard, prompt.into_future()).await;
    let skill = session.skill(
        "review",
        shared(SkillOptions::default(), Some(cancel.clone())),
    );
    let skill = tokio::time::timeout(guard, skill.into_future()).await;
    let task = session.task("check", shared(TaskOptions::default(), Some(cancel)));
    let task = tokio::time::timeout(guard, task.into_future()).await;
    let kinds: Vec<&str> = [prompt, skill, task]
        .into_iter()
        .map(|result| {
            result
                .expect("the cancelled call did not finish")
                .unwrap_err()
                .kind()
        })
        .collect();
    assert_eq!(kinds, ["aborted"; 3]);
}
