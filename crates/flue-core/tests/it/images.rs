//! An image sent to a model without image input is a typed error before anything is stored or
//! sent; a vision-capable model gets it.

use flue_core::{
    AgentConfig, AgentProfile, Image, PromptOptions, Record, TaskOptions, UserContent,
};
use pretty_assertions::assert_eq;

use crate::rules::{Reply, RuleProvider, fixture};

fn image() -> Image {
    Image {
        data: "iVBORw0KGgo=".into(),
        mime_type: "image/png".into(),
    }
}

#[tokio::test]
async fn an_image_for_a_text_only_model_fails_before_any_request() {
    let provider = RuleProvider::new(|_seen| Reply::Text("seen".into()));
    let f = fixture(
        AgentConfig::new()
            .with_model("test/text-only")
            .with_subagent(AgentProfile::new("helper")),
        provider.clone(),
        |builder| builder,
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let err = session
        .prompt(
            "what is this?",
            PromptOptions::default().with_image(image()),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "image_input_unsupported");
    assert!(err.to_string().contains("\"test/text-only\""), "{err}");
    let err = session
        .task(
            "what is this?",
            TaskOptions::default()
                .with_agent("helper")
                .with_image(image()),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "image_input_unsupported");
    assert_eq!(provider.seen().len(), 0);
    assert_eq!(session.records().await, vec![]);

    // The same message on a vision-capable model goes through with its image.
    session
        .prompt(
            "what is this?",
            PromptOptions::default()
                .with_model("test/vision")
                .with_image(image()),
        )
        .await
        .unwrap();
    let seen = provider.seen();
    let Record::User(message) = &seen[0].messages[0] else {
        panic!("{:?}", seen[0].messages);
    };
    assert!(
        message
            .content
            .iter()
            .any(|part| matches!(part, UserContent::Image(_)))
    );
}
