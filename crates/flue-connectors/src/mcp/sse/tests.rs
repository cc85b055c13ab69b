//! Unit tests of endpoint resolution (the event-stream rules are flue-core's `util::sse`).

use pretty_assertions::assert_eq;
use reqwest::Url;

use super::resolve_endpoint;

#[test]
fn endpoints_resolve_against_the_stream_url_on_the_same_origin_only() {
    let base = Url::parse("http://127.0.0.1:3001/sse").unwrap();
    let resolved = resolve_endpoint(&base, " /message?sessionId=x ").unwrap();
    assert_eq!(
        resolved.as_str(),
        "http://127.0.0.1:3001/message?sessionId=x"
    );
    let absolute = resolve_endpoint(&base, "http://127.0.0.1:3001/m").unwrap();
    assert_eq!(absolute.as_str(), "http://127.0.0.1:3001/m");
    let elsewhere = resolve_endpoint(&base, "http://evil.example/m").unwrap_err();
    assert_eq!(
        elsewhere.to_string(),
        "the `endpoint` event points to another origin (http://evil.example); refusing to send requests there"
    );
    assert!(elsewhere.malformed);
}
