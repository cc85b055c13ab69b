//! Unit tests of result rendering: JSON results in, model text out.

use pretty_assertions::assert_eq;
use serde_json::json;

use super::{EMPTY_RESULT, render_result};

fn check(result: &serde_json::Value, expected: &str) {
    assert_eq!(render_result(result), expected);
}

#[test]
fn text_blocks_are_joined_by_blank_lines() {
    check(
        &json!({"content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]}),
        "one\n\ntwo",
    );
}

#[test]
fn images_and_audio_become_placeholders() {
    check(
        &json!({"content": [
            {"type": "text", "text": "Here it is:"},
            {"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"},
            {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"}
        ]}),
        "Here it is:\n\n[Image: image/png, 8 base64 chars]\n\n[Audio: audio/wav, 4 base64 chars]",
    );
}

#[test]
fn structured_content_comes_first_as_pretty_json() {
    check(
        &json!({
            "content": [{"type": "text", "text": "{\"t\":1}"}],
            "structuredContent": {"t": 1}
        }),
        "Structured content:\n{\n  \"t\": 1\n}\n\n{\"t\":1}",
    );
}

#[test]
fn embedded_resources_show_text_or_a_placeholder() {
    check(
        &json!({"content": [
            {"type": "resource", "resource": {"uri": "demo://a", "mimeType": "text/plain", "text": "hello"}},
            {"type": "resource", "resource": {"uri": "demo://b", "mimeType": "application/gzip", "blob": "H4sI"}},
            {"type": "resource", "resource": {"uri": "demo://c", "blob": "AA=="}}
        ]}),
        "[Resource: demo://a]\nhello\n\n[Resource: demo://b, application/gzip, 4 base64 chars]\n\n[Resource: demo://c, 4 base64 chars]",
    );
}

#[test]
fn resource_links_show_name_uri_and_description() {
    check(
        &json!({"content": [
            {"type": "resource_link", "uri": "demo://1", "name": "One", "description": "the first"},
            {"type": "resource_link", "uri": "demo://2", "name": "Two"}
        ]}),
        "[Resource link: One (demo://1) - the first]\n\n[Resource link: Two (demo://2)]",
    );
}

#[test]
fn unknown_blocks_are_shown_as_json_and_empty_results_say_so() {
    check(
        &json!({"content": [{"type": "hologram", "depth": 3}]}),
        "{\"depth\":3,\"type\":\"hologram\"}",
    );
    check(&json!({"content": []}), EMPTY_RESULT);
    check(
        &json!({"content": [{"type": "text", "text": ""}]}),
        EMPTY_RESULT,
    );
}
