//! The guard's checks one by one: hosts, origins, request forms, target length, settings.

use std::net::IpAddr;

use axum::http::{HeaderMap, HeaderValue, Method, header};

use super::*;

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    map
}

fn kind(guard: &RequestGuard, method: &Method, pairs: &[(&str, &str)]) -> Option<&'static str> {
    guard
        .refusal(3000, method, 10, &headers(pairs))
        .map(|err| err.kind())
}

#[test]
fn loopback_names_on_the_bound_port_pass_and_other_hosts_do_not() {
    let guard = RequestGuard::loopback().with_hosts(&["flue.lan".into(), "box:8080".into()]);
    for host in [
        "127.0.0.1:3000",
        "localhost:3000",
        "LOCALHOST:3000",
        "[::1]:3000",
        "127.0.0.2:3000",
        "flue.lan:9",
        "box:8080",
    ] {
        assert_eq!(
            kind(&guard, &Method::GET, &[("host", host)]),
            None,
            "{host}"
        );
    }
    for host in [
        "evil.example:3000",
        "localhost:3001",
        "localhost.:3000",
        "127.0.0.1",
        "box:8081",
        "",
        "10.0.0.1:3000",
    ] {
        assert_eq!(
            kind(&guard, &Method::GET, &[("host", host)]),
            Some("host_not_allowed"),
            "{host}"
        );
    }
    assert_eq!(kind(&guard, &Method::GET, &[]), Some("host_not_allowed"));
    assert_eq!(
        kind(
            &RequestGuard::any_host(),
            &Method::GET,
            &[("host", "evil.example")]
        ),
        None
    );
}

#[test]
fn origins_must_be_the_host_itself_or_listed() {
    let guard = RequestGuard::loopback().with_cors_origins(&["https://app.example.com".into()]);
    let host = ("host", "127.0.0.1:3000");
    assert_eq!(
        kind(
            &guard,
            &Method::GET,
            &[host, ("origin", "http://127.0.0.1:3000")]
        ),
        None
    );
    assert_eq!(
        kind(
            &guard,
            &Method::GET,
            &[host, ("origin", "https://APP.example.com")]
        ),
        None
    );
    for origin in [
        "http://evil.example",
        "null",
        "http://localhost:3000",
        "http://127.0.0.1:3000.evil",
        "file://",
    ] {
        assert_eq!(
            kind(&guard, &Method::GET, &[host, ("origin", origin)]),
            Some("origin_not_allowed"),
            "{origin}"
        );
    }
}

#[test]
fn state_changing_requests_need_json_or_nothing() {
    let guard = RequestGuard::loopback();
    let host = ("host", "127.0.0.1:3000");
    for ok in [
        vec![host],
        vec![host, ("content-length", "0")],
        vec![
            host,
            ("content-type", "application/json"),
            ("content-length", "2"),
        ],
        vec![host, ("content-type", "Application/JSON; charset=utf-8")],
        vec![host, ("content-type", "application/merge-patch+json")],
    ] {
        assert_eq!(kind(&guard, &Method::POST, &ok), None, "{ok:?}");
    }
    for refused in [
        vec![host, ("content-type", "text/plain")],
        vec![
            host,
            ("content-type", "text/plain"),
            ("content-length", "0"),
        ],
        vec![host, ("content-type", "application/x-www-form-urlencoded")],
        vec![host, ("content-type", "multipart/form-data; boundary=x")],
        vec![host, ("content-length", "5")],
        vec![host, ("transfer-encoding", "chunked")],
    ] {
        assert_eq!(
            kind(&guard, &Method::POST, &refused),
            Some("unsupported_media_type"),
            "{refused:?}"
        );
    }
    assert_eq!(
        kind(
            &guard,
            &Method::GET,
            &[host, ("content-type", "text/plain")]
        ),
        None
    );
}

#[test]
fn long_targets_get_414() {
    let guard = RequestGuard::loopback();
    let refused = guard.refusal(
        3000,
        &Method::GET,
        MAX_URI_BYTES + 1,
        &headers(&[("host", "127.0.0.1:3000")]),
    );
    assert_eq!(refused.map(|err| err.kind()), Some("uri_too_long"));
}

#[test]
fn settings_are_checked_with_the_fix_named() {
    assert_eq!(
        check_origins(&["*".into()]),
        Err(ConfigError::WildcardOrigin)
    );
    for bad in [
        "app.example.com",
        "https://app.example.com/",
        "https://*.example.com",
        "ftp://x",
        " https://a.b",
    ] {
        assert!(
            matches!(
                check_origins(&[bad.into()]),
                Err(ConfigError::InvalidOrigin(_))
            ),
            "{bad}"
        );
    }
    assert_eq!(
        check_origins(&["http://localhost:5173".into(), "https://a.example".into()]),
        Ok(())
    );
    assert!(check_hosts(&["flue.lan".into(), "[::1]:80".into()]).is_ok());
    assert!(check_hosts(&["a b".into()]).is_err());
    assert!(check_hosts(&["host:99999".into()]).is_err());

    let any: IpAddr = "0.0.0.0".parse().unwrap();
    let lo: IpAddr = "127.0.0.1".parse().unwrap();
    assert_eq!(check_token("   ", lo), Err(ConfigError::BlankToken));
    assert_eq!(check_token("", lo), Err(ConfigError::BlankToken));
    assert_eq!(check_token("a b", lo), Err(ConfigError::TokenCharacters));
    assert_eq!(
        check_token(" secret", lo),
        Err(ConfigError::TokenCharacters)
    );
    assert_eq!(check_token("x", lo), Ok(()));
    assert!(matches!(
        check_token("x", any),
        Err(ConfigError::WeakToken { min_bits: 80, .. })
    ));
    let message = check_token("x", any).unwrap_err().to_string();
    assert!(message.contains("openssl rand -hex 32"), "{message}");
}

/// Off loopback, what counts is how hard a token is to guess, not its length: tokens made by
/// the usual generators pass, long made-up ones fail, whatever their length.
#[test]
fn exposed_tokens_are_checked_for_strength_not_length() {
    let any: IpAddr = "0.0.0.0".parse().unwrap();
    let lo: IpAddr = "127.0.0.1".parse().unwrap();
    // Made by `openssl rand -hex 32`, `openssl rand -hex 16`, `openssl rand -base64 32`,
    // `openssl rand -base64 24`, the kernel's uuid, and Python's `secrets.token_urlsafe(32)`
    // and `(16)`.
    let generated = [
        "fca33f46f1c55836893ff599005483ff699e79f639219ce7f21a30487986576e",
        "6800011c8dc4d3f2f7b63ed39522a1ef",
        "5QEkhgnlh3tkX/yo8Vz4D46Q6qndRCzpxRbg9FdeLnU=",
        "7jR0PLFU18vpG2LhmIDtoVHR93kF0euW",
        "31ae4deb-7773-43ca-93aa-f63818961e12",
        "9Yzdp35Q8aTPUL59W3TsAraTWfOA64NTH0wCZG6q27o",
        "znCCYOyRBy5yG3sQI1o0Rg",
    ];
    for token in generated {
        assert_eq!(check_token(token, any), Ok(()), "{token}");
    }
    let made_up = [
        "aaaaaaaaaaaaaaaa",
        "password12345678",
        "0123456789abcdef",
        "abcdefghijklmnopqrstuvwxyz0123456789",
        "abababababababababababababababab",
        "Tr0ub4dor&3Tr0ub4dor&3Tr0ub4dor&3",
        "SuperSecretTokenPassword123456789",
        "qwertyuiopasdfghjklzxcvbnm",
        "flue-token-flue-token-flue-token",
        // 64 bits: random, but too short for a server anyone can reach.
        "5b1a0e4d8f3c7a92",
    ];
    for token in made_up {
        match check_token(token, any) {
            Err(ConfigError::WeakToken { bits, min_bits, .. }) => {
                assert!(bits < min_bits, "{token}: {bits}");
            }
            other => panic!("{token}: {other:?}"),
        }
        // On loopback any token is accepted.
        assert_eq!(check_token(token, lo), Ok(()), "{token}");
    }
}

#[test]
fn head_and_options_are_not_state_changing() {
    let guard = RequestGuard::loopback();
    let host = ("host", "127.0.0.1:3000");
    assert_eq!(
        kind(
            &guard,
            &Method::HEAD,
            &[host, ("content-type", "text/plain")]
        ),
        None
    );
    assert_eq!(kind(&guard, &Method::OPTIONS, &[host]), None);
    let _ = header::HOST;
}
