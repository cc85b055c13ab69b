//! Recording keeps no secret and replays what it kept; replay answers each equal request once.

use pretty_assertions::assert_eq;

use super::*;

const SECRET: &str = "sk-test-0123456789abcdef";

/// A provider that repeats the system prompt (with whatever secret it holds) and counts calls.
struct Echo(Mutex<u32>);

impl ModelProvider for Echo {
    fn id(&self) -> &str {
        "echo"
    }

    fn stream_turn<'a>(
        &'a self,
        request: ModelRequest<'a>,
        _sink: &'a TurnSink,
    ) -> BoxFuture<'a, flue_core::Result<ModelTurn>> {
        *lock(&self.0) += 1;
        Box::pin(async move {
            Ok(ModelTurn {
                content: vec![AssistantContent::Text {
                    text: format!("you told me {}", request.system),
                }],
                usage: Usage::default(),
                stop_reason: StopReason::EndTurn,
            })
        })
    }
}

fn request<'a>(system: &'a str, messages: &'a [flue_core::Record]) -> ModelRequest<'a> {
    ModelRequest {
        model: "m",
        system,
        messages,
        tools: &[],
        thinking: flue_core::ThinkingLevel::Off,
        max_output_tokens: 100,
    }
}

fn text_of(turn: &ModelTurn) -> String {
    match &turn.content[0] {
        AssistantContent::Text { text } => text.clone(),
        other => panic!("not text: {other:?}"),
    }
}

#[tokio::test]
async fn a_recorded_turn_keeps_no_secret_and_replays_once_per_equal_request() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cassette.json");
    let system = format!("the key is {SECRET}");
    let messages = vec![flue_core::Record::User(flue_core::UserMessage::text("hi"))];
    let sink = TurnSink::discard();

    let recording = Arc::new(Cassette::record(
        &path,
        "cassette.json",
        vec![SECRET.to_owned()],
    ));
    let echo = Arc::new(Echo(Mutex::new(0)));
    let provider = recording.wrap(Arc::clone(&echo) as Arc<dyn ModelProvider>);
    let live = provider
        .stream_turn(request(&system, &messages), &sink)
        .await
        .unwrap();
    recording.save().unwrap();
    let kept = std::fs::read_to_string(&path).unwrap();
    assert!(!kept.contains(SECRET), "{kept}");
    assert!(
        text_of(&live).contains(SECRET),
        "the live turn is the provider's own"
    );

    let replaying =
        Arc::new(Cassette::replay(&path, "cassette.json", vec![SECRET.to_owned()]).unwrap());
    let provider = replaying.wrap(Arc::clone(&echo) as Arc<dyn ModelProvider>);
    let replayed = provider
        .stream_turn(request(&system, &messages), &sink)
        .await
        .unwrap();
    assert_eq!(
        text_of(&replayed),
        Redactor::new(vec![SECRET.to_owned()])
            .unwrap()
            .redact(&text_of(&live))
    );
    assert_eq!(*lock(&echo.0), 1, "replay never calls the provider");
    let again = provider
        .stream_turn(request(&system, &messages), &sink)
        .await;
    let message = again.unwrap_err().to_string();
    assert!(
        message
            .contains("an equal request was recorded, but each recorded answer was served already"),
        "{message}"
    );
}

#[test]
fn replaying_a_missing_or_foreign_file_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let missing =
        Cassette::replay(&dir.path().join("none.json"), "evals/none.json", Vec::new()).unwrap_err();
    assert_eq!(
        missing.to_string(),
        "no cassette at evals/none.json: record one first with `flue eval --record`"
    );
    let foreign = dir.path().join("other.json");
    std::fs::write(&foreign, r#"{"format":"vcr","version":1,"entries":[]}"#).unwrap();
    let refused = Cassette::replay(&foreign, "other.json", Vec::new()).unwrap_err();
    assert_eq!(
        refused.to_string(),
        "other.json is not a flue cassette: format \"vcr\" version 1; this flue reads \"flue-cassette\" version 1"
    );
}
