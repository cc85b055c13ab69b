//! Unit tests of the text a skill adds to a conversation and a system prompt.

use flue_protocol::record::UserContent;
use pretty_assertions::assert_eq;
use serde_json::json;

use super::*;

#[test]
fn a_skill_message_names_the_skill_then_its_arguments_then_images() {
    let skill = Skill::new("triage", "Sorts issues");
    let args = BTreeMap::from([
        ("labels".to_owned(), json!(["bug", "ui"])),
        ("issue".to_owned(), json!(42)),
    ]);
    let image = Image {
        data: "AAAA".into(),
        mime_type: "image/png".into(),
    };
    let message = skill_message(&skill, &args, std::slice::from_ref(&image));
    assert_eq!(
        message.content,
        vec![
            UserContent::Text {
                text: "Run the skill \"triage\" with these arguments:\n{\n  \"issue\": 42,\n  \
                       \"labels\": [\n    \"bug\",\n    \"ui\"\n  ]\n}"
                    .into()
            },
            UserContent::Image(image),
        ]
    );
}

#[test]
fn the_catalog_lists_each_skill_on_one_line() {
    let catalog =
        SkillCatalog::new([Skill::new("b", "Second\n  skill"), Skill::new("a", "First")]).unwrap();
    assert_eq!(
        catalog_section(&catalog).unwrap(),
        "# Skills\n\nThese skills are available. When one fits the task, load its instructions \
         with the `load_skill` tool before you start.\n\n- a: First\n- b: Second skill"
    );
    assert_eq!(catalog_section(&SkillCatalog::default()), None);
}

#[test]
fn a_catalog_refuses_duplicate_names() {
    let err = SkillCatalog::new([Skill::new("a", "One"), Skill::new("a", "Two")]).unwrap_err();
    assert_eq!(err.to_string(), "duplicate skill \"a\": rename one of them");
}
