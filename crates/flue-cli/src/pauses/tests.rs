//! What a typed answer to a confirmation means.

use super::*;

#[test]
fn a_confirmation_reads_yes_always_and_no_with_a_reason() {
    let confirm = |reply: &str| decision(ActionKind::Confirmation, reply);
    assert_eq!(confirm("y"), ActionDecision::Allow);
    assert_eq!(confirm(" YES "), ActionDecision::Allow);
    assert_eq!(confirm("a"), ActionDecision::AllowAlways);
    assert_eq!(confirm("Always"), ActionDecision::AllowAlways);
    assert_eq!(
        confirm(""),
        ActionDecision::Deny {
            message: Some("declined at the terminal".to_owned())
        }
    );
    assert_eq!(
        confirm("not on main"),
        ActionDecision::Deny {
            message: Some("declined at the terminal: not on main".to_owned())
        }
    );
}
