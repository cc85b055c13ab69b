//! Unit tests of the model id lookups.

use pretty_assertions::assert_eq;

use super::candidates;

#[test]
fn dated_and_latest_ids_fall_back_to_their_base() {
    assert_eq!(candidates("gpt-4o"), ["gpt-4o"]);
    assert_eq!(
        candidates("claude-sonnet-4-5-20250929"),
        ["claude-sonnet-4-5-20250929", "claude-sonnet-4-5"]
    );
    assert_eq!(
        candidates("gpt-4o-2024-08-06"),
        ["gpt-4o-2024-08-06", "gpt-4o"]
    );
    assert_eq!(
        candidates("claude-haiku-4-5-latest"),
        ["claude-haiku-4-5-latest", "claude-haiku-4-5"]
    );
    assert_eq!(candidates("a-1234"), ["a-1234"]);
}
