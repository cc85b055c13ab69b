//! Skills: the catalog in the system prompt, `session.skill` for one call, `load_skill`, errors.

use flue_core::{AgentConfig, FlueError, PromptOptions, Skill, SkillOptions, ToolResult};
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::rules::{Reply, RuleProvider, fixture, kinds, user_text};

fn review_skill() -> Skill {
    Skill::new("review", "Reviews a change")
        .with_body("List problems by severity.")
        .with_resource("checklist.md", b"- tests\n- naming\n".to_vec())
        .with_resource("logo.png", vec![0x89, 0x50, 0xff, 0x00])
}

const CATALOG: &str = "# Skills\n\nThese skills are available. When one fits the task, load its \
                       instructions with the `load_skill` tool before you start.\n\n\
                       - review: Reviews a change\n- triage: Sorts incoming issues";

#[tokio::test]
async fn a_skill_call_injects_its_body_for_that_call_only() {
    let provider = RuleProvider::new(|_| Reply::Text("ok".into()));
    let f = fixture(
        AgentConfig::new()
            .with_model("test/model")
            .with_instructions("Be brief.")
            .with_skill(review_skill()),
        provider.clone(),
        |builder| {
            builder.with_workspace_skills(vec![Skill::new("triage", "Sorts incoming issues")])
        },
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    session
        .skill(
            "review",
            SkillOptions::default().with_arg("file", json!("src/a.rs")),
        )
        .await
        .unwrap();
    session
        .prompt("anything else?", PromptOptions::default())
        .await
        .unwrap();

    let seen = provider.seen();
    assert_eq!(
        seen[0].system,
        format!(
            "Be brief.\n\n{CATALOG}\n\n# Skill: review\n\nThe user asked you to run this skill. \
             Follow its instructions.\n\nReviews a change\n\nList problems by severity.\n\n\
             Resource files: checklist.md, logo.png\n\nThis skill's resource files can be read \
             with the `load_skill` tool (give `resource`)."
        )
    );
    // The next call starts clean: the catalog stays, the skill's body is gone.
    assert_eq!(seen[1].system, format!("Be brief.\n\n{CATALOG}"));
    assert_eq!(f.harness.system_prompt(), format!("Be brief.\n\n{CATALOG}"));
    assert_eq!(seen[0].tool_names(), vec!["load_skill", "task"]);

    // Only the conversation is stored: a user message naming the skill and its arguments.
    let records = session.records().await;
    assert_eq!(kinds(&records), ["user", "assistant", "user", "assistant"]);
    assert_eq!(
        user_text(&records[0]),
        "Run the skill \"review\" with these arguments:\n{\n  \"file\": \"src/a.rs\"\n}"
    );
}

#[tokio::test]
async fn a_workspace_skill_runs_without_arguments() {
    let provider = RuleProvider::new(|_| Reply::Text("sorted".into()));
    let f = fixture(
        AgentConfig::new().with_model("test/model"),
        provider.clone(),
        |builder| {
            builder.with_workspace_skills(vec![
                Skill::new("triage", "Sorts issues").with_body("Label by area."),
            ])
        },
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let response = session
        .skill("triage", SkillOptions::default())
        .await
        .unwrap();
    assert_eq!(response.text, "sorted");
    assert_eq!(
        user_text(&session.records().await[0]),
        "Run the skill \"triage\"."
    );
    assert!(
        provider.seen()[0]
            .system
            .ends_with("Sorts issues\n\nLabel by area.")
    );
}

#[tokio::test]
async fn an_unknown_skill_lists_the_skills_that_exist() {
    let provider = RuleProvider::new(|_| Reply::Text("never".into()));
    let f = fixture(
        AgentConfig::new()
            .with_model("test/model")
            .with_skill(review_skill()),
        provider.clone(),
        |builder| builder.with_workspace_skills(vec![Skill::new("triage", "Sorts")]),
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let err = session
        .skill("reveiw", SkillOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "skill_not_registered");
    assert_eq!(
        err.to_string(),
        "skill \"reveiw\" is not registered (available skills: review, triage)"
    );
    assert!(matches!(
        err,
        FlueError::SkillNotRegistered { ref available, .. } if available == &["review", "triage"]
    ));
    // Nothing was sent or stored.
    assert!(provider.seen().is_empty());
    assert_eq!(session.version().await, 0);
}

#[tokio::test]
async fn a_registered_skill_colliding_with_a_workspace_skill_fails_at_load() {
    let provider = RuleProvider::new(|_| Reply::Text("never".into()));
    let dir = tempfile::tempdir().unwrap();
    let err = flue_core::Harness::builder(
        AgentConfig::new()
            .with_model("test/model")
            .with_skill(review_skill()),
    )
    .with_providers(flue_core::ProviderRegistry::new().with_provider(provider))
    .with_sandbox(std::sync::Arc::new(
        flue_core::LocalSandbox::new(dir.path()).unwrap(),
    ))
    .with_workspace_skills(vec![Skill::new("review", "Another review")])
    .build()
    .await
    .unwrap_err();
    assert_eq!(err.kind(), "invalid_config");
    assert_eq!(
        err.to_string(),
        "skill \"review\" is registered on the agent and also discovered in the workspace \
         (.agents/skills/); rename one of them"
    );
}

#[tokio::test]
async fn the_model_loads_skills_and_their_text_resources_on_demand() {
    let provider = RuleProvider::new(|seen| match seen.messages.len() {
        1 => Reply::Calls(vec![
            ("load_skill", json!({"name": "review"})),
            (
                "load_skill",
                json!({"name": "review", "resource": "checklist.md"}),
            ),
            (
                "load_skill",
                json!({"name": "review", "resource": "logo.png"}),
            ),
            (
                "load_skill",
                json!({"name": "review", "resource": "nope.md"}),
            ),
            ("load_skill", json!({"name": "ghost"})),
        ]),
        _ => Reply::Text("loaded".into()),
    });
    let f = fixture(
        AgentConfig::new()
            .with_model("test/model")
            .with_skill(review_skill()),
        provider,
        |builder| builder,
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    session
        .prompt("review please", PromptOptions::default())
        .await
        .unwrap();
    let results: Vec<(String, Option<String>)> = session
        .records()
        .await
        .into_iter()
        .filter_map(|record| match record {
            flue_core::Record::ToolResult(ToolResult {
                content,
                error_kind,
                ..
            }) => Some((content, error_kind)),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        vec![
            (
                "# Skill: review\n\nReviews a change\n\nList problems by severity.\n\n\
                 Resource files: checklist.md, logo.png"
                    .to_owned(),
                None
            ),
            ("- tests\n- naming\n".to_owned(), None),
            (
                "resource \"logo.png\" of skill \"review\" is not text; only text resources can \
                 be read"
                    .to_owned(),
                Some("invalid_input".to_owned())
            ),
            (
                "skill \"review\" has no resource file \"nope.md\" (its resource files: \
                 checklist.md, logo.png)"
                    .to_owned(),
                Some("not_found".to_owned())
            ),
            (
                "skill \"ghost\" is not registered (available skills: review)".to_owned(),
                Some("skill_not_registered".to_owned())
            ),
        ]
    );
}

#[tokio::test]
async fn without_skills_there_is_no_catalog_and_no_load_skill_tool() {
    let provider = RuleProvider::new(|_| Reply::Text("ok".into()));
    let f = fixture(
        AgentConfig::new()
            .with_model("test/model")
            .with_instructions("Plain."),
        provider.clone(),
        |builder| builder,
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    session
        .prompt("hi", PromptOptions::default())
        .await
        .unwrap();
    let seen = provider.seen();
    assert_eq!(seen[0].system, "Plain.");
    // No `load_skill`: only `task`, offered to every agent.
    assert_eq!(seen[0].tool_names(), vec!["task"]);
}
