//! Credentials written into URLs, hidden wherever flue shows a URL: a provider's base URL in
//! the dev console's prompt view, an error naming the address it could not reach, a build
//! diagnostic quoting a bad `base_url`. A URL may carry a user name and password
//! (`https://user:pass@proxy.example/v1`, which the HTTP client sends as basic
//! authentication) or a key in its query (`?key=...`, `?api_key=...`); neither belongs on a
//! screen, in a log or in a trace. The URL is still sent as written; only what is shown
//! changes.

#[cfg(test)]
mod tests;

use std::borrow::Cow;

/// What hidden credentials are replaced with.
const HIDDEN: &str = "[redacted]";

/// Parts of query parameter names that say the value is a credential (matched in any case).
const SECRET_PARAMETER_PARTS: &[&str] = &[
    "key",
    "token",
    "secret",
    "pass",
    "auth",
    "sig",
    "credential",
    "session",
    "code",
];

/// `text` with the credentials of every URL in it hidden: the user information before an `@`
/// in the authority (`https://[redacted]@host/`), and the values of query parameters whose
/// names say they are credentials (`?key=[redacted]&alt=sse`). Borrowed when nothing changed.
///
/// ```
/// use flue_core::util::hide_url_credentials;
/// assert_eq!(
///     hide_url_credentials("cannot reach http://bob:hunter2@proxy.lan:8080/v1/chat"),
///     "cannot reach http://[redacted]@proxy.lan:8080/v1/chat"
/// );
/// assert_eq!(
///     hide_url_credentials("https://api.example/v1?key=AIza123&alt=sse"),
///     "https://api.example/v1?key=[redacted]&alt=sse"
/// );
/// assert_eq!(hide_url_credentials("http://127.0.0.1:11434/v1"), "http://127.0.0.1:11434/v1");
/// ```
pub fn hide_url_credentials(text: &str) -> Cow<'_, str> {
    if !text.contains("://") {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut changed = false;
    while let Some(at) = rest.find("://") {
        let (before, after) = rest.split_at(at + 3);
        out.push_str(before);
        let end = after.find(ends_url).unwrap_or(after.len());
        let (url, tail) = after.split_at(end);
        let hidden = hide_in_url(url);
        changed |= hidden != url;
        out.push_str(&hidden);
        rest = tail;
    }
    out.push_str(rest);
    if changed {
        Cow::Owned(out)
    } else {
        Cow::Borrowed(text)
    }
}

/// Whether `c` ends a URL inside text: whitespace, quotes and the brackets that enclose one.
fn ends_url(c: char) -> bool {
    c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>' | '(' | ')')
}

/// One URL after its `scheme://`, its credentials hidden.
fn hide_in_url(url: &str) -> String {
    let authority_end = url.find(['/', '?', '#']).unwrap_or(url.len());
    let (authority, path) = url.split_at(authority_end);
    let mut out = String::with_capacity(url.len());
    match authority.rfind('@') {
        Some(at) => {
            out.push_str(HIDDEN);
            out.push_str(&authority[at..]);
        }
        None => out.push_str(authority),
    }
    let Some(question) = path.find('?') else {
        out.push_str(path);
        return out;
    };
    let (before_query, query) = path.split_at(question + 1);
    out.push_str(before_query);
    let query_end = query.find('#').unwrap_or(query.len());
    let (query, fragment) = query.split_at(query_end);
    let parameters: Vec<String> = query.split('&').map(hide_parameter).collect();
    out.push_str(&parameters.join("&"));
    out.push_str(fragment);
    out
}

/// `name=value` with the value hidden when the name says it is a credential.
fn hide_parameter(parameter: &str) -> String {
    match parameter.split_once('=') {
        Some((name, value)) if !value.is_empty() && is_secret_parameter(name) => {
            format!("{name}={HIDDEN}")
        }
        _ => parameter.to_owned(),
    }
}

fn is_secret_parameter(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    SECRET_PARAMETER_PARTS
        .iter()
        .any(|part| lower.contains(part))
}
