//! Credentials of URLs in text: hidden wherever they are, everything else kept.

use std::borrow::Cow;

use super::hide_url_credentials;

#[test]
fn user_information_and_secret_query_values_are_hidden_in_any_text() {
    let cases = [
        (
            "base_url \"http://bob:p@ss@proxy.lan/v1\" is not a valid URL",
            "base_url \"http://[redacted]@proxy.lan/v1\" is not a valid URL",
        ),
        (
            "postgres://victim:s3cret@db.example:5432/app and https://tok@api.example/x",
            "postgres://[redacted]@db.example:5432/app and https://[redacted]@api.example/x",
        ),
        (
            "GET https://api.example/v1/models?api_key=abc&alt=sse&X-Amz-Signature=f00#top",
            "GET https://api.example/v1/models?api_key=[redacted]&alt=sse&X-Amz-Signature=[redacted]#top",
        ),
        (
            "(see <https://user:pw@host.example>)",
            "(see <https://[redacted]@host.example>)",
        ),
    ];
    for (text, expected) in cases {
        assert_eq!(hide_url_credentials(text), expected, "{text}");
    }
}

#[test]
fn urls_without_credentials_are_left_as_they_are() {
    for text in [
        "http://127.0.0.1:11434/v1",
        "https://api.example/users/@me?api-version=2024-10-21&q=",
        "no url here: user:pass@host",
        "mailto:team@example.com",
    ] {
        assert!(
            matches!(hide_url_credentials(text), Cow::Borrowed(_)),
            "{text}"
        );
    }
}
