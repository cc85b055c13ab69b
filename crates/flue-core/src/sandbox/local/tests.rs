//! Unit tests of the local sandbox's output capture.

use pretty_assertions::assert_eq;

use super::{Capture, lossy_utf8_prefix};

fn captured(limit: usize, chunks: &[&[u8]]) -> String {
    let mut capture = Capture::new(limit);
    for chunk in chunks {
        capture.push(chunk);
    }
    capture.finish("stdout")
}

#[test]
fn capture_keeps_everything_under_the_limit() {
    assert_eq!(captured(10, &[b"abc", b"def"]), "abcdef");
    assert_eq!(captured(6, &[b"abc", b"def"]), "abcdef");
}

#[test]
fn capture_keeps_the_first_bytes_and_notes_the_cut() {
    assert_eq!(
        captured(4, &[b"abc", b"def", b"gh"]),
        "abcd\n[stdout truncated: kept the first 4 of 8 bytes]"
    );
    assert_eq!(
        captured(0, &[b"x"]),
        "[stdout truncated: kept the first 0 of 1 bytes]"
    );
}

#[test]
fn a_character_cut_at_the_limit_is_dropped() {
    // "é" is two bytes; the limit falls between them.
    assert_eq!(
        captured(2, &["aé".as_bytes(), b"z"]),
        "a\n[stdout truncated: kept the first 2 of 4 bytes]"
    );
    assert_eq!(lossy_utf8_prefix(b"a\xffb\xc3"), "a\u{fffd}b");
}
