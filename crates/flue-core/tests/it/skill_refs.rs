//! Packaged skills: a `SKILL.md` compiled in with `include_str!` runs through `session.skill`
//! like a registered one, and may not shadow a different skill of the same name.

use flue_core::{AgentConfig, PromptOptions, Skill, SkillOptions};
use pretty_assertions::assert_eq;

use crate::rules::{Reply, RuleProvider, fixture};

const TRIAGE: &str = include_str!("skills_fixture/triage/SKILL.md");

#[test]
fn a_skill_md_becomes_a_skill_with_its_body() {
    let skill = Skill::from_skill_md(TRIAGE).unwrap();
    assert_eq!(skill.name, "triage");
    assert_eq!(skill.description, "Sorts incoming issues by severity");
    assert_eq!(
        skill.body.as_deref(),
        Some("# Triage\n\nLabel each issue blocker, major or minor.")
    );
    for bad in [
        "no frontmatter",
        "---\nname: x\n",
        "---\nname: x\n---\nbody",
        "---\nname: x\ndescription: >\n  folded\n---\nbody",
    ] {
        let err = Skill::from_skill_md(bad).unwrap_err();
        assert_eq!(err.kind(), "invalid_config", "{bad:?}");
    }
}

#[tokio::test]
async fn a_packaged_skill_runs_with_its_instructions_in_the_system_prompt() {
    let provider = RuleProvider::new(|_seen| Reply::Text("triaged".into()));
    let f = fixture(
        AgentConfig::new().with_model("test/m"),
        provider.clone(),
        |builder| builder,
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let triage = Skill::from_skill_md(TRIAGE).unwrap();
    let reply = session
        .skill(&triage, SkillOptions::default())
        .await
        .unwrap();
    assert_eq!(reply.text, "triaged");
    let seen = provider.seen();
    assert!(
        seen[0]
            .system
            .contains("Label each issue blocker, major or minor."),
        "{}",
        seen[0].system
    );
    // By name it is still unknown: it was run, not registered.
    let err = session
        .skill("triage", SkillOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "skill_not_registered");
}

#[tokio::test]
async fn a_packaged_skill_may_not_shadow_a_different_skill_of_its_name() {
    let provider = RuleProvider::new(|_seen| Reply::Text("ok".into()));
    let triage = Skill::from_skill_md(TRIAGE).unwrap();
    let other = Skill::new("triage", "Another triage").with_body("Do something else.");
    let f = fixture(
        AgentConfig::new().with_model("test/m"),
        provider,
        |builder| builder.with_workspace_skills(vec![other]),
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let err = session
        .skill(&triage, SkillOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "invalid_config");
    assert!(err.to_string().contains("\"triage\""), "{err}");
    // The same skill registered and passed by reference is fine.
    let f = fixture(
        AgentConfig::new()
            .with_model("test/m")
            .with_skill(triage.clone()),
        RuleProvider::new(|_seen| Reply::Text("ok".into())),
        |builder| builder,
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    session
        .prompt("hi", PromptOptions::default())
        .await
        .unwrap();
    session
        .skill(&triage, SkillOptions::default())
        .await
        .unwrap();
}
