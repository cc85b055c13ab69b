//! Unit tests of `flue audit`'s text helpers.

use pretty_assertions::assert_eq;

use super::{format_time, relative};

#[test]
fn times_are_utc_rfc3339() {
    assert_eq!(format_time(0), "1970-01-01T00:00:00Z");
    assert_eq!(format_time(951_782_400_000), "2000-02-29T00:00:00Z");
    assert_eq!(format_time(1_700_000_000_123), "2023-11-14T22:13:20Z");
}

#[test]
fn paths_inside_the_root_are_shown_relative() {
    assert_eq!(relative("/w/src/a.rs", "/w"), "src/a.rs");
    assert_eq!(relative("/wx/a.rs", "/w"), "/wx/a.rs");
}
