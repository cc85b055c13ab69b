//! Unit tests of the settings' text forms.

use pretty_assertions::assert_eq;

use super::*;

#[test]
fn thinking_levels_parse_and_print() {
    for level in ThinkingLevel::ALL {
        assert_eq!(level.as_str().parse::<ThinkingLevel>().unwrap(), level);
    }
    assert_eq!(
        "extreme".parse::<ThinkingLevel>().unwrap_err().to_string(),
        "invalid thinking level \"extreme\": expected one of off, minimal, low, medium, high, xhigh"
    );
}
