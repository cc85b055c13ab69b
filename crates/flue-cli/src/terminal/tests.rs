//! Unit tests of terminal output: escaping and redaction.

use flue_core::Redactor;
use pretty_assertions::assert_eq;
use serde_json::json;

use super::{Output, escape_controls};

const KEY: &str = "sk-test-0123456789abcdefXYZ";

#[test]
fn terminal_controls_are_made_visible() {
    let cases = [
        // OSC 52: set the clipboard, ended by BEL.
        (
            "\u{1b}]52;c;ZWNobyBwd25lZA==\u{7}",
            "\\x1b]52;c;ZWNobyBwd25lZA==\\x07",
        ),
        // Clear the screen, move the cursor home.
        ("\u{1b}[2J\u{1b}[H", "\\x1b[2J\\x1b[H"),
        // A lone CR (overwrites the line), DEL, NUL, backspace.
        ("safe\rfake", "safe\\x0dfake"),
        ("a\u{7f}b\u{0}c\u{8}", "a\\x7fb\\x00c\\x08"),
        // C1 CSI and a right-to-left override.
        ("x\u{9b}2Jy", "x\\u{9b}2Jy"),
        ("abc\u{202e}fed", "abc\\u{202e}fed"),
    ];
    for (raw, shown) in cases {
        assert_eq!(escape_controls(raw), shown, "{raw:?}");
    }
}

#[test]
fn ordinary_text_passes_unchanged() {
    for text in [
        "plain",
        "lines\nand\ttabs\n",
        "windows line\r\nends",
        "ünïcödé → ✓",
    ] {
        assert!(
            matches!(escape_controls(text), std::borrow::Cow::Borrowed(_)) || text.contains('\r'),
            "{text:?}"
        );
        assert_eq!(escape_controls(text), text);
    }
}

#[test]
fn stderr_is_redacted_and_escaped_stdout_escaped_only_on_a_terminal() {
    let redactor = Redactor::new([KEY]).unwrap();
    let text = format!("key {} \u{1b}[2J", KEY.to_uppercase());
    let piped = Output {
        redactor: redactor.clone(),
        stdout_is_terminal: false,
    };
    assert_eq!(piped.stderr_text(&text), "key [redacted] \\x1b[2J");
    assert_eq!(piped.stdout_text(&text), "key [redacted] \u{1b}[2J");
    let terminal = Output::for_terminal(redactor);
    assert_eq!(terminal.stdout_text(&text), "key [redacted] \\x1b[2J");
}

#[test]
fn json_is_redacted_and_carries_no_raw_control() {
    let output = Output::for_terminal(Redactor::new([KEY]).unwrap());
    let value = json!({"message": format!("{KEY} \u{1b}[2J \u{9b} \u{7f}")});
    let line = output.json_line(&value).unwrap();
    assert_eq!(line, r#"{"message":"[redacted] \u001b[2J \u009b \u007f"}"#);
    assert!(!line.chars().any(char::is_control));
    // The value a JSON reader sees is the original text with the key redacted.
    let back: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(back["message"], "[redacted] \u{1b}[2J \u{9b} \u{7f}");
    let pretty = output.json_pretty(&value).unwrap();
    assert!(pretty.contains('\n') && !pretty.contains('\u{9b}'));
}
