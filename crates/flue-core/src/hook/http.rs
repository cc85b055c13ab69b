//! Http hooks: a [`CommandHook`](super::CommandHook) whose input is POSTed to a URL instead of
//! written to a command's standard input, its answer read from the response body.
//!
//! The core has no HTTP client: the one that sends the request is an [`HttpHookClient`] given
//! to the hook (flue-providers has the reqwest one). Header values may name environment
//! variables (`$NAME` or `${NAME}`), filled only for the names the hook lists; values are never
//! shown in reports, logs or `Debug`.

use std::time::Duration;

use crate::util::BoxFuture;

/// The largest response body read from an http hook; a longer one is a failure.
pub const HTTP_HOOK_MAX_RESPONSE_BYTES: usize = 1024 * 1024;

/// Where an http hook sends its input: the URL and the headers as declared (values may name
/// environment variables, see [`fill_header`]).
#[derive(Clone, PartialEq, Eq)]
pub struct HttpHookTarget {
    /// The `http://` or `https://` URL the input is POSTed to.
    pub url: String,
    /// Header names and their declared values.
    pub headers: Vec<(String, String)>,
}

impl std::fmt::Debug for HttpHookTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Header values may be secrets: only their names are shown.
        let names: Vec<&str> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("HttpHookTarget")
            .field("url", &self.shown_url())
            .field("headers", &names)
            .finish()
    }
}

impl HttpHookTarget {
    /// The URL as reports show it: credentials in it (`https://user:pass@host`,
    /// `https://token@host`) replaced by `***`, the user name kept.
    pub fn shown_url(&self) -> String {
        let Some((scheme, rest)) = self.url.split_once("://") else {
            return self.url.clone();
        };
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        let Some((userinfo, host)) = authority.rsplit_once('@') else {
            return self.url.clone();
        };
        let user = match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***"),
            None => "***".to_owned(),
        };
        format!("{scheme}://{user}@{host}{tail}")
    }

    /// Every problem with the URL and headers, each a sentence naming the field.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let scheme_ok = ["http://", "https://"].iter().any(|scheme| {
            self.url
                .get(..scheme.len())
                .is_some_and(|head| head.eq_ignore_ascii_case(scheme))
                && self.url.len() > scheme.len()
        });
        if !scheme_ok {
            problems.push(format!(
                "`url` must be an http:// or https:// URL, got {:?}",
                self.shown_url()
            ));
        }
        for (name, _) in &self.headers {
            let token = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            if !token {
                problems.push(format!(
                    "`headers` name {name:?} is not an HTTP header name"
                ));
            }
        }
        problems
    }
}

/// A header value with `$NAME` and `${NAME}` replaced by the environment variable, for the
/// names in `allowed` only; another name (or an unset variable) becomes the empty string, as in
/// Claude Code.
pub fn fill_header(value: &str, allowed: &[String]) -> String {
    fill_with(value, |name| {
        if allowed.iter().any(|allowed| allowed == name) {
            std::env::var(name).unwrap_or_default()
        } else {
            String::new()
        }
    })
}

fn fill_with(value: &str, lookup: impl Fn(&str) -> String) -> String {
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, used) = if let Some(braced) = after.strip_prefix('{') {
            match braced.find('}') {
                Some(end) if braced[..end].chars().all(is_name) && end > 0 => {
                    (&braced[..end], end + 2)
                }
                _ => ("", 0),
            }
        } else {
            let end = after.find(|c: char| !is_name(c)).unwrap_or(after.len());
            (&after[..end], end)
        };
        if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
            out.push('$');
            rest = after;
        } else {
            out.push_str(&lookup(name));
            rest = &after[used..];
        }
    }
    out.push_str(rest);
    out
}

/// The answer of an http hook's request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpHookResponse {
    /// The HTTP status.
    pub status: u16,
    /// The body as text (lossy UTF-8), at most [`HTTP_HOOK_MAX_RESPONSE_BYTES`].
    pub body: String,
}

/// Why an http hook's request got no answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HttpHookError {
    /// No response: the connection failed or the time limit passed before the headers came.
    Unreachable(String),
    /// A response came, but its body could not be read whole (too long, cut off, too slow).
    BadBody(String),
}

/// Sends an http hook's request: a POST of `body` (JSON) to `url` with `headers` (values
/// already filled), within `timeout`, not following redirects, reading at most `max_body`
/// bytes of the answer.
pub trait HttpHookClient: Send + Sync {
    /// Sends the request.
    fn post<'a>(
        &'a self,
        url: &'a str,
        headers: Vec<(String, String)>,
        body: String,
        timeout: Duration,
        max_body: usize,
    ) -> BoxFuture<'a, Result<HttpHookResponse, HttpHookError>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_fill_only_listed_variables() {
        let lookup = |name: &str| match name {
            "TOKEN" => "s3cret".to_owned(),
            _ => String::new(),
        };
        assert_eq!(fill_with("Bearer ${TOKEN}", lookup), "Bearer s3cret");
        assert_eq!(fill_with("Bearer $TOKEN!", lookup), "Bearer s3cret!");
        assert_eq!(fill_with("$OTHER-x", lookup), "-x");
        assert_eq!(fill_with("cost $5 ${", lookup), "cost $5 ${");
        // A listed variable that is not set is empty too.
        let allowed = vec!["FLUE_HTTP_HOOK_TEST_UNSET_VAR".to_owned()];
        assert_eq!(fill_header("a${PATH}b", &allowed), "ab");
    }

    #[test]
    fn debug_never_shows_header_values() {
        let target = HttpHookTarget {
            url: "https://hooks.example.com/pre".to_owned(),
            headers: vec![(
                "Authorization".to_owned(),
                "Bearer literal-secret".to_owned(),
            )],
        };
        let shown = format!("{target:?}");
        assert!(shown.contains("Authorization") && !shown.contains("literal-secret"));
        let with_credentials = |url: &str| HttpHookTarget {
            url: url.to_owned(),
            headers: Vec::new(),
        };
        let shown = with_credentials("https://ci:hunter2@hooks.example.com/pre?a=b@c").shown_url();
        assert_eq!(shown, "https://ci:***@hooks.example.com/pre?a=b@c");
        let shown = with_credentials("http://tok3n@localhost:8080").shown_url();
        assert_eq!(shown, "http://***@localhost:8080");
        let plain = with_credentials("https://hooks.example.com/x@y");
        assert_eq!(plain.shown_url(), "https://hooks.example.com/x@y");
        assert!(!format!("{:?}", with_credentials("https://u:pw@h")).contains("pw"));
        assert!(target.problems().is_empty());
        let bad = HttpHookTarget {
            url: "ftp://x".to_owned(),
            headers: vec![("Bad Name".to_owned(), String::new())],
        };
        assert_eq!(bad.problems().len(), 2);
    }
}
