//! Unit tests of the redactor: each transform, merging, and ordinary text left alone.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use pretty_assertions::assert_eq;

use super::Redactor;

/// A key with characters base64 and URL encoding treat specially.
const KEY: &str = "sk-Proj+a1B2/c3D4=e5F6?g7H8~i9J0";

fn redactor() -> Redactor {
    Redactor::new([KEY]).unwrap()
}

/// Asserts that `text` is fully redacted and `KEY` is gone, with context kept around it.
fn check_hidden(form: &str) {
    let text = format!("before {form} after");
    let redacted = redactor().redact(&text).into_owned();
    assert_eq!(redacted, "before [redacted] after", "form {form:?}");
}

#[test]
fn exact_and_case_changed_copies_are_redacted() {
    check_hidden(KEY);
    check_hidden(&KEY.to_uppercase());
    check_hidden(&KEY.to_lowercase());
    let swapped: String = KEY
        .chars()
        .map(|c| {
            if c.is_ascii_uppercase() {
                c.to_ascii_lowercase()
            } else {
                c.to_ascii_uppercase()
            }
        })
        .collect();
    check_hidden(&swapped);
}

#[test]
fn reversed_hex_url_and_json_forms_are_redacted() {
    check_hidden(&KEY.chars().rev().collect::<String>());
    check_hidden(&hex::encode(KEY));
    check_hidden(&hex::encode_upper(KEY));
    check_hidden("sk-Proj%2Ba1B2%2Fc3D4%3De5F6%3Fg7H8~i9J0");
    check_hidden("sk-Proj%2ba1B2%2fc3D4%3de5F6%3fg7H8~i9J0");
    let every_byte: String = KEY.bytes().map(|byte| format!("%{byte:02X}")).collect();
    check_hidden(&every_byte);
    let quoted = Redactor::new([r#"pass"word\with-quotes"#]).unwrap();
    assert_eq!(
        quoted.redact(r#"{"p":"pass\"word\\with-quotes"}"#),
        r#"{"p":"[redacted]"}"#
    );
}

#[test]
fn base64_in_every_alphabet_alignment_and_padding_is_redacted() {
    for engine in [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD] {
        for prefix in ["", "a", "ab", "abc"] {
            for suffix in ["", "z", "zy", "zyx"] {
                let encoded = engine.encode(format!("{prefix}{KEY}{suffix}"));
                let redacted = redactor().redact(&encoded).into_owned();
                assert!(
                    redacted.contains("[redacted]"),
                    "{prefix:?}+key+{suffix:?}: {encoded}"
                );
                // What is left is at most the groups holding the neighbours' bytes.
                let left = redacted.replace("[redacted]", "");
                let bound = 4 * prefix.len().div_ceil(3) + 4 * (suffix.len().div_ceil(3) + 1);
                assert!(
                    left.len() <= bound,
                    "{prefix:?}+key+{suffix:?}: {encoded} -> {redacted}"
                );
                let engine_decoded = engine.decode(left.as_bytes()).unwrap_or_default();
                assert!(!String::from_utf8_lossy(&engine_decoded).contains(KEY));
            }
        }
    }
    // The whole token goes when the key is all that was encoded, padding included.
    let padded = STANDARD.encode("0123456789abcdefghij");
    assert!(padded.ends_with('='), "{padded}");
    let redactor = Redactor::new(["0123456789abcdefghij"]).unwrap();
    assert_eq!(redactor.redact(&format!("[{padded}]")), "[[redacted]]");
}

#[test]
fn a_key_cut_in_half_or_wrapped_over_lines_is_redacted() {
    let (first, second) = KEY.split_at(KEY.len() / 2);
    check_hidden(first);
    check_hidden(second);
    let wrapped = format!("{}\n{}\n{}", &KEY[..12], &KEY[12..24], &KEY[24..]);
    let redacted = redactor().redact(&wrapped).into_owned();
    // Pieces of 12 characters or more go; a shorter last piece of 8 characters may stay.
    assert_eq!(redacted, format!("[redacted]\n[redacted]\n{}", &KEY[24..]));
}

#[test]
fn overlapping_and_adjacent_matches_merge_into_one() {
    let other = "ghp_0123456789abcdefghijklmnopqrstuv";
    let redactor = Redactor::new([KEY, other]).unwrap();
    // The key twice in a row, and a key whose tail overlaps another's head.
    assert_eq!(redactor.redact(&format!("<{KEY}{KEY}>")), "<[redacted]>");
    assert_eq!(
        redactor.redact(&format!("<{}{}>", &KEY[..20], &KEY[10..])),
        "<[redacted]>"
    );
    assert_eq!(
        redactor.redact(&format!("a {KEY} b {other} c")),
        "a [redacted] b [redacted] c"
    );
}

#[test]
fn non_ascii_text_around_and_inside_secrets_stays_valid() {
    let redactor = Redactor::new(["clé-secrète-αβγδ-2024"]).unwrap();
    assert_eq!(
        redactor.redact("→ CLÉ-SECRÈTE-ΑΒΓΔ-2024 ←"),
        "→ [redacted] ←"
    );
    assert_eq!(
        redactor.redact("x clé-secrète-αβ y"),
        "x [redacted] y",
        "a 12+ character piece"
    );
}

#[test]
fn ordinary_text_is_left_alone() {
    let redactor = Redactor::new([
        KEY,
        "ghp_0123456789abcdefghijklmnopqrstuv",
        "postgres://app:Xk29vLq7@db.internal:5432/app",
    ])
    .unwrap();
    let ordinary = include_str!("../agent_loop/mod.rs");
    assert!(matches!(
        redactor.redact(ordinary),
        std::borrow::Cow::Borrowed(_)
    ));
    let log = "GET /v1/models 200 OK\nsk-proj is the prefix of OpenAI keys\nbase64: aGVsbG8gd29ybGQ=\n\
               0123456789 abcdef ~i9 postgres://localhost/db";
    assert_eq!(redactor.redact(log), log);
}

#[test]
fn short_values_and_words_are_not_secrets() {
    let redactor =
        Redactor::new(["", "  ", "abc", "1234567", "development", "production"]).unwrap();
    assert!(redactor.is_empty());
    assert_eq!(
        redactor.redact("development and production builds"),
        "development and production builds"
    );
    // Eight characters with a digit, or sixteen letters, are secrets; values are trimmed.
    let redactor = Redactor::new([" hunter22 ", "abcdefghijklmnop", "hunter22"]).unwrap();
    assert_eq!(redactor.len(), 2);
    assert_eq!(
        redactor.redact("pw=hunter22 abcdefghijklmnopq"),
        "pw=[redacted] [redacted]q"
    );
}

#[test]
fn values_with_spaces_match_whole_but_not_in_pieces() {
    let redactor = Redactor::new(["correct horse battery staple"]).unwrap();
    assert_eq!(
        redactor.redact("pw: Correct Horse Battery Staple"),
        "pw: [redacted]"
    );
    assert_eq!(
        redactor.redact("the correct horse battery"),
        "the correct horse battery"
    );
}

#[test]
fn debug_shows_the_count_never_a_value() {
    let shown = format!("{:?}", redactor());
    assert_eq!(shown, "Redactor { secrets: 1, .. }");
}

#[test]
fn json_strings_are_redacted_wherever_they_nest() {
    let mut value = serde_json::json!({"a": [KEY, 1, {"b": format!("x {KEY} y")}], "n": null});
    redactor().redact_json(&mut value);
    assert_eq!(
        value,
        serde_json::json!({"a": ["[redacted]", 1, {"b": "x [redacted] y"}], "n": null})
    );
}
