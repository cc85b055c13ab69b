//! Unit tests of the event types' wire names.

use pretty_assertions::assert_eq;

use super::*;

#[test]
fn wire_names_are_the_serialized_names() {
    for kind in [
        OperationKind::Prompt,
        OperationKind::Skill,
        OperationKind::Task,
        OperationKind::Shell,
        OperationKind::Compact,
    ] {
        assert_eq!(
            serde_json::to_value(kind).unwrap(),
            Value::from(kind.as_str())
        );
    }
    for outcome in [
        Outcome::Completed,
        Outcome::Failed,
        Outcome::Aborted,
        Outcome::RequiresAction,
    ] {
        assert_eq!(
            serde_json::to_value(outcome).unwrap(),
            Value::from(outcome.as_str())
        );
    }
}
