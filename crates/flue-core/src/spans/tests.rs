//! Unit tests of the span helpers: which W3C `traceparent` values are kept for a submission.

use super::trace_parent;

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const SPAN: &str = "00f067aa0ba902b7";

#[test]
fn a_valid_version_00_traceparent_is_kept_as_sent() {
    let value = format!("00-{TRACE}-{SPAN}-01");
    assert_eq!(trace_parent(&value), Some(value.clone()));
    assert_eq!(trace_parent(&format!(" {value} ")), Some(value));
}

#[test]
fn a_later_version_keeps_its_first_four_fields() {
    assert_eq!(
        trace_parent(&format!("cc-{TRACE}-{SPAN}-01-extra")),
        Some(format!("cc-{TRACE}-{SPAN}-01"))
    );
}

#[test]
fn malformed_traceparents_are_dropped() {
    let zeros_trace = "0".repeat(32);
    let zeros_span = "0".repeat(16);
    let upper = TRACE.to_uppercase();
    for bad in [
        String::new(),
        "garbage".to_owned(),
        format!("00-{TRACE}-{SPAN}"),
        format!("00-{TRACE}-{SPAN}-01-extra"),
        format!("ff-{TRACE}-{SPAN}-01"),
        format!("00-{zeros_trace}-{SPAN}-01"),
        format!("00-{TRACE}-{zeros_span}-01"),
        format!("00-{upper}-{SPAN}-01"),
        format!("00-{}-{SPAN}-01", &TRACE[1..]),
        format!("00-{TRACE}-{SPAN}g-01"),
        format!("0-{TRACE}-{SPAN}-01"),
        format!("00-{TRACE}-{SPAN}-1z"),
    ] {
        assert_eq!(trace_parent(&bad), None, "{bad:?} was kept");
    }
}
