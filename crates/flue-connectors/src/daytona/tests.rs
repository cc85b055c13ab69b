//! Unit tests of the Daytona client's text codecs and path checks.

use pretty_assertions::assert_eq;

use super::text::{base64_decode, cap_output, is_env_name, rfc3339_to_ms, shell_quote};
use super::{is_inside, server_message};

#[test]
fn shell_quoting_survives_single_quotes() {
    assert_eq!(shell_quote("plain"), "'plain'");
    assert_eq!(shell_quote("it's"), r"'it'\''s'");
}

#[test]
fn env_names_are_shell_identifiers() {
    assert_eq!(
        ["PATH", "_x1", "1x", "A-B", "", "a b"].map(is_env_name),
        [true, true, false, false, false, false]
    );
}

#[test]
fn base64_decodes_with_and_without_padding() {
    assert_eq!(base64_decode("aGVsbG8=").unwrap(), b"hello");
    assert_eq!(base64_decode("aGVsbG8").unwrap(), b"hello");
    assert_eq!(base64_decode("").unwrap(), b"");
    assert_eq!(base64_decode("AP/+").unwrap(), [0, 0xff, 0xfe]);
    assert_eq!(base64_decode("a*b"), None);
}

#[test]
fn timestamps_parse_to_epoch_milliseconds() {
    assert_eq!(rfc3339_to_ms("1970-01-01T00:00:00Z"), Some(0));
    assert_eq!(
        rfc3339_to_ms("2024-02-29T12:30:05.123456789Z"),
        Some(1_709_209_805_123)
    );
    assert_eq!(
        rfc3339_to_ms("2024-02-29T14:30:05+02:00"),
        Some(1_709_209_805_000)
    );
    assert_eq!(rfc3339_to_ms("yesterday"), None);
}

#[test]
fn output_is_capped_with_a_note() {
    assert_eq!(cap_output("short".into(), 10, "stdout"), "short");
    assert_eq!(
        cap_output("ééé".into(), 3, "stderr"),
        "é\n[stderr truncated: kept the first 2 of 6 bytes]"
    );
}

#[test]
fn paths_are_inside_only_below_the_root() {
    assert_eq!(
        [
            is_inside("/home/daytona", "/home/daytona"),
            is_inside("/home/daytona", "/home/daytona/x"),
            is_inside("/home/daytona", "/home/daytonax"),
            is_inside("/home/daytona", "/home"),
            is_inside("/", "/etc"),
        ],
        [true, true, false, false, true]
    );
}

#[test]
fn error_bodies_give_their_message() {
    assert_eq!(server_message(r#"{"message":"no quota"}"#), "no quota");
    assert_eq!(server_message(r#"{"error":"bad path"}"#), "bad path");
    assert_eq!(server_message("plain text\n"), "plain text");
}
