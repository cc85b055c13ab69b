//! Unit tests of backoff, retry-after and error classification.

use std::time::Duration;

use pretty_assertions::assert_eq;
use reqwest::header::{HeaderMap, HeaderValue};

use super::{Failure, backoff, preview, retry_after};
use crate::provider_config::RetryPolicy;

#[test]
fn backoff_doubles_is_capped_and_jittered_into_the_upper_half() {
    let policy = RetryPolicy::default();
    let delays: Vec<Duration> = (0..6).map(|n| backoff(&policy, n, 1.0)).collect();
    assert_eq!(
        delays,
        [500, 1000, 2000, 4000, 8000, 8000].map(Duration::from_millis)
    );
    assert_eq!(backoff(&policy, 1, 0.0), Duration::from_millis(500));
    assert_eq!(backoff(&policy, 40, 0.5), Duration::from_secs(6));
}

#[test]
fn retry_after_reads_milliseconds_then_seconds() {
    let headers = |pairs: &[(&'static str, &'static str)]| {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_static(value));
        }
        map
    };
    assert_eq!(
        retry_after(&headers(&[("retry-after", "2")])),
        Some(Duration::from_secs(2))
    );
    assert_eq!(
        retry_after(&headers(&[
            ("retry-after", "1.5"),
            ("retry-after-ms", "250")
        ])),
        Some(Duration::from_millis(250))
    );
    assert_eq!(
        retry_after(&headers(&[(
            "retry-after",
            "Wed, 21 Oct 2015 07:28:00 GMT"
        )])),
        None
    );
    assert_eq!(retry_after(&headers(&[("retry-after", "-1")])), None);
    assert_eq!(retry_after(&HeaderMap::new()), None);
}

/// (retryable, overflow) of a reported error.
fn classify(status: Option<u16>, message: &str, code: &str) -> (bool, bool) {
    let failure = Failure::reported(status, message, code);
    (failure.retryable, failure.overflow)
}

#[test]
fn statuses_and_codes_decide_retries_and_overflow() {
    assert_eq!(
        classify(Some(429), "slow down", "rate_limit_error"),
        (true, false)
    );
    assert_eq!(
        classify(Some(429), "quota", "insufficient_quota"),
        (false, false)
    );
    assert_eq!(classify(Some(500), "", ""), (true, false));
    assert_eq!(
        classify(Some(529), "Overloaded", "overloaded_error"),
        (true, false)
    );
    assert_eq!(
        classify(Some(401), "invalid x-api-key", "authentication_error"),
        (false, false)
    );
    assert_eq!(classify(Some(404), "model not found", ""), (false, false));
    assert_eq!(
        classify(
            Some(400),
            "prompt is too long: 208000 tokens > 200000 maximum",
            "invalid_request_error"
        ),
        (false, true)
    );
    assert_eq!(
        classify(
            Some(400),
            "This model's maximum context length is 128000 tokens.",
            "context_length_exceeded"
        ),
        (false, true)
    );
    assert_eq!(classify(Some(413), "request too large", ""), (false, true));
    assert_eq!(
        classify(None, "Overloaded", "overloaded_error"),
        (true, false)
    );
    assert_eq!(
        classify(None, "bad", "invalid_request_error"),
        (false, false)
    );
}

#[test]
fn errors_never_carry_the_key() {
    let key = crate::provider_config::ApiKey::new("sk-live-123456");
    let failure = Failure::reported(Some(401), "Incorrect API key provided: sk-live-123456.", "");
    let error = failure.into_error("openai", Some(&key));
    assert_eq!(
        error.to_string(),
        "model provider \"openai\" failed (HTTP 401): Incorrect API key provided: [redacted]."
    );
}

#[test]
fn errors_never_carry_the_key_in_another_case_or_cut_short() {
    let key = crate::provider_config::ApiKey::new("sk-live-abcdef0123456789");
    let failure = Failure::reported(
        Some(401),
        "Key SK-LIVE-ABCDEF0123456789 rejected; did you mean sk-live-abcdef01...?",
        "",
    );
    let error = failure.into_error("openai", Some(&key));
    assert_eq!(
        error.to_string(),
        "model provider \"openai\" failed (HTTP 401): Key [redacted] rejected; did you mean \
         [redacted]...?"
    );
}

#[test]
fn an_html_error_page_is_reduced_to_its_title() {
    let page = "<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head><body>\
                <center><h1>502 Bad Gateway</h1></center><hr><center>nginx</center></body></html>";
    assert_eq!(preview(page), "an HTML error page: \"502 Bad Gateway\"");
    assert_eq!(
        preview("<html><body><h1>Service\n   Unavailable</h1></body></html>"),
        "an HTML error page: \"Service Unavailable\""
    );
    assert_eq!(
        preview("<html><body>down</body></html>"),
        "an HTML error page without a title"
    );
    // Anything else is cut, not rewritten.
    assert_eq!(preview("  upstream timed out  "), "upstream timed out");
    assert_eq!(preview("a < b and <tag> inline"), "a < b and <tag> inline");
}
