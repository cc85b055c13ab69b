//! Conversation (agent instance) ids: what `check_instance_id` accepts, what it refuses and
//! how the refusal reads; the harness refuses a bad id before creating anything.

use flue_core::{AgentConfig, FlueError, Harness, check_instance_id};
use pretty_assertions::assert_eq;

#[test]
fn ids_real_users_pick_are_accepted() {
    for id in [
        "PROJ-1234",
        "#812",
        "alice@example.com",
        "alice+flue@example.co.uk",
        "user_42",
        "42",
        "550e8400-e29b-41d4-a716-446655440000",
        "01JD7Z5Q3V4N8W2XKQY6M9T0RB",
        "tenant:acme:ticket=7",
        "zoë-müller",
        "顧客-7",
        &"x".repeat(128),
    ] {
        assert_eq!(check_instance_id(id).map_err(|err| err.to_string()), Ok(()));
    }
}

#[test]
fn malformed_ids_are_refused_with_the_reason_and_the_rule() {
    let rule = "use 1 to 128 printable characters without spaces or slashes, such as a ticket \
                number, an email address or a user id";
    let long = "a".repeat(100_000);
    for (id, expected) in [
        ("", "\"\": it is empty"),
        (
            "a\nb",
            "\"a\\nb\": it contains a control character (a newline or a terminal escape)",
        ),
        (
            "\u{1b}]52;c;aGk=\u{7}",
            "\"\\u{1b}]52;c;aGk=\\u{7}\": it contains a control character (a newline or a \
             terminal escape)",
        ),
        ("two words", "\"two words\": it contains whitespace"),
        (
            "abc\u{202e}fed",
            "\"abc\\u{202e}fed\": it contains an invisible formatting character",
        ),
        (
            "zero\u{200b}width",
            "\"zero\\u{200b}width\": it contains an invisible formatting character",
        ),
        ("../../etc", "\"../../etc\": it contains a slash"),
        ("a\\b", "\"a\\\\b\": it contains a slash"),
        ("..", "\"..\": it is a dot name"),
        (
            long.as_str(),
            "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"... (100000 characters): it is 100000 \
             characters long",
        ),
    ] {
        let err = check_instance_id(id).unwrap_err();
        assert_eq!(err.kind(), "invalid_id");
        assert_eq!(
            err.to_string(),
            format!("invalid conversation id {expected}; {rule}")
        );
        assert!(matches!(err, FlueError::InvalidInstanceId { .. }));
        // The message is one line, whatever the id holds.
        assert!(!err.to_string().contains(['\n', '\u{1b}', '\u{202e}']));
    }
}

#[tokio::test]
async fn a_harness_refuses_a_bad_id() {
    let err = Harness::builder(AgentConfig::new())
        .with_instance_id("bad id")
        .build()
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(err.kind(), "invalid_id");
}
