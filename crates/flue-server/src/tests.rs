//! Unit tests of the wire helpers.

use crate::wire::Offset;

#[test]
fn offsets_round_trip_and_reject_malformed_text() {
    assert_eq!(Offset::parse("-1"), Some(Offset(0)));
    assert_eq!(
        Offset::parse("0000000000000000_0000000000000003"),
        Some(Offset(3))
    );
    assert_eq!(Offset(3).to_string(), "0000000000000000_0000000000000003");
    for bad in [
        "",
        "3",
        "-2",
        "0_3",
        "0000000000000001_0000000000000003",
        "0000000000000000_000000000000000x",
        "0000000000000000_00000000000000003",
    ] {
        assert_eq!(Offset::parse(bad), None, "{bad:?}");
    }
}
