//! What a request must be before any route sees it, so that a web page the user visits cannot
//! use a server on their machine: the `Host` it names (a page whose DNS name rebinds to
//! 127.0.0.1 still says its own name), the `Origin` it comes from (another site's page is
//! refused unless listed with `--cors-origin`), and, for every state-changing method, a form a
//! page on another site cannot send without asking the server first (a JSON body, or no body
//! and no content type at all). Also the request-target length (414 with the envelope).
//!
//! [`RequestGuard`] is the policy; [`serve`](crate::serve) applies it to the whole app (the
//! console's routes included). The checks of the settings the policy is built from (origins,
//! hosts, tokens) are here too, so that `flue serve`, `flue dev` and embedders refuse the same
//! settings with the same words.

mod strength;

use std::net::IpAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// The longest request target (path and query) served; longer ones get 414 with the envelope.
pub const MAX_URI_BYTES: usize = 8 * 1024;

/// The fewest estimated bits of a token on a server reachable from other machines (see
/// [`check_token`]): `openssl rand -hex 32` makes about 190, sixteen random hex digits at
/// most 64.
pub const MIN_EXPOSED_TOKEN_BITS: u32 = 80;

/// Which requests reach the routes. Built by [`RequestGuard::loopback`] (the default: only
/// loopback names on the bound port) or [`RequestGuard::any_host`] (a server with a token on a
/// network), then [`RequestGuard::with_hosts`] and [`RequestGuard::with_cors_origins`].
#[derive(Clone, Debug)]
pub struct RequestGuard {
    check_host: bool,
    hosts: Vec<HostPattern>,
    origins: Vec<String>,
}

impl Default for RequestGuard {
    fn default() -> Self {
        Self::loopback()
    }
}

/// One accepted `Host` beyond the loopback ones: a name (any port) or `name:port`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct HostPattern {
    name: String,
    port: Option<u16>,
}

impl RequestGuard {
    /// Accepts only the loopback names (`localhost`, `127.0.0.1` and the rest of 127/8,
    /// `[::1]`) with the bound port, and the hosts added with [`with_hosts`](Self::with_hosts).
    pub fn loopback() -> Self {
        Self {
            check_host: true,
            hosts: Vec::new(),
            origins: Vec::new(),
        }
    }

    /// Accepts any `Host`: for a server every request of which carries a bearer token (a
    /// rebinding page cannot add it). Listing hosts with [`with_hosts`](Self::with_hosts)
    /// turns the check back on.
    pub fn any_host() -> Self {
        Self {
            check_host: false,
            hosts: Vec::new(),
            origins: Vec::new(),
        }
    }

    /// Also accepts these hosts (`name` for any port, `name:port`, `[v6]:port`); checked
    /// with [`check_hosts`] first. Turns the host check on.
    #[must_use]
    pub fn with_hosts(mut self, hosts: &[String]) -> Self {
        self.hosts
            .extend(hosts.iter().filter_map(|host| parse_pattern(host).ok()));
        if !hosts.is_empty() {
            self.check_host = true;
        }
        self
    }

    /// Also accepts requests from these origins (the `--cors-origin` list, checked with
    /// [`check_origins`]); a page's own origin is always accepted.
    #[must_use]
    pub fn with_cors_origins(mut self, origins: &[String]) -> Self {
        self.origins
            .extend(origins.iter().map(|origin| origin.to_ascii_lowercase()));
        self
    }

    /// `router` behind this guard, for a listener bound on `port`.
    pub fn layer(&self, router: Router, port: u16) -> Router {
        let state = Arc::new(Bound {
            guard: self.clone(),
            port,
        });
        router.layer(middleware::from_fn_with_state(state, check))
    }

    /// Why `request` is refused, if it is.
    fn refusal(
        &self,
        port: u16,
        method: &Method,
        uri_len: usize,
        headers: &HeaderMap,
    ) -> Option<ApiError> {
        if uri_len > MAX_URI_BYTES {
            return Some(ApiError::uri_too_long(MAX_URI_BYTES));
        }
        let host = headers
            .get(header::HOST)
            .and_then(|value| value.to_str().ok())
            .map(str::trim);
        if self.check_host {
            match host {
                Some(host) if self.host_allowed(host, port) => {}
                Some(host) => return Some(ApiError::host_not_allowed(host)),
                None => return Some(ApiError::host_not_allowed("")),
            }
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or("null").trim();
            if !self.origin_allowed(origin, host) {
                return Some(ApiError::origin_not_allowed(origin));
            }
        }
        if !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) && !not_simple(headers)
        {
            return Some(ApiError::simple_request());
        }
        None
    }

    fn host_allowed(&self, host: &str, port: u16) -> bool {
        let Ok(given) = parse_pattern(host) else {
            return false;
        };
        let given_port = given.port.unwrap_or(80);
        if is_loopback_name(&given.name) && given_port == port {
            return true;
        }
        self.hosts.iter().any(|allowed| {
            allowed.name == given.name && allowed.port.is_none_or(|p| p == given_port)
        })
    }

    /// Same-origin (the origin's authority is the `Host` the request names) or listed.
    fn origin_allowed(&self, origin: &str, host: Option<&str>) -> bool {
        let origin = origin.to_ascii_lowercase();
        if self.origins.contains(&origin) {
            return true;
        }
        let Some(authority) = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
        else {
            return false;
        };
        host.is_some_and(|host| !authority.is_empty() && authority == host.to_ascii_lowercase())
    }
}

/// A guard with the port it serves on.
struct Bound {
    guard: RequestGuard,
    port: u16,
}

async fn check(State(bound): State<Arc<Bound>>, request: Request, next: Next) -> Response {
    let uri_len = request
        .uri()
        .path_and_query()
        .map_or(0, |target| target.as_str().len());
    match bound
        .guard
        .refusal(bound.port, request.method(), uri_len, request.headers())
    {
        None => next.run(request).await,
        Some(err) => {
            tracing::info!(
                target: "flue_server::request",
                method = %request.method(),
                kind = err.kind(),
                "refused before routing"
            );
            let head = request.method() == Method::HEAD;
            if head { err.without_body() } else { err }.into_response()
        }
    }
}

/// A state-changing request a page on another site cannot send without a CORS preflight: a
/// JSON body; or no body and no `Content-Type` at all (`@flue/sdk`'s and the console's abort),
/// which every browser sends with an `Origin` that the origin check has accepted already.
fn not_simple(headers: &HeaderMap) -> bool {
    match headers.get(header::CONTENT_TYPE) {
        Some(value) => value.to_str().is_ok_and(is_json_type),
        None => {
            let chunked = headers.contains_key(header::TRANSFER_ENCODING);
            let length = headers
                .get(header::CONTENT_LENGTH)
                .and_then(|value| value.to_str().ok())
                .map(str::trim);
            !chunked && length.is_none_or(|length| length == "0")
        }
    }
}

/// `application/json` or a `+json` type, parameters ignored.
fn is_json_type(value: &str) -> bool {
    let mime = value.split(';').next().unwrap_or_default().trim();
    let Some((kind, sub)) = mime.split_once('/') else {
        return false;
    };
    kind.eq_ignore_ascii_case("application")
        && (sub.eq_ignore_ascii_case("json") || sub.to_ascii_lowercase().ends_with("+json"))
}

/// `localhost`, an address of 127/8 or `::1`.
fn is_loopback_name(name: &str) -> bool {
    if name == "localhost" {
        return true;
    }
    let bare = name
        .strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
        .unwrap_or(name);
    bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// `name`, `name:port`, `[v6]` or `[v6]:port`, lower-cased.
fn parse_pattern(host: &str) -> Result<HostPattern, String> {
    let host = host.trim().to_ascii_lowercase();
    let (name, port) = if host.starts_with('[') {
        match host.split_once(']') {
            Some((v6, "")) => (format!("{v6}]"), None),
            Some((v6, rest)) => match rest.strip_prefix(':') {
                Some(port) => (format!("{v6}]"), Some(port.to_owned())),
                None => return Err(host),
            },
            None => return Err(host),
        }
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) => (name.to_owned(), Some(port.to_owned())),
            None => (host.clone(), None),
        }
    };
    let valid_name = !name.is_empty()
        && name.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'[' | b']' | b':')
        });
    let port = match port {
        Some(port) => Some(port.parse::<u16>().map_err(|_| host.clone())?),
        None => None,
    };
    if valid_name {
        Ok(HostPattern { name, port })
    } else {
        Err(host)
    }
}

/// A setting of the server that cannot be used as given.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// `--cors-origin '*'`.
    #[error(
        "--cors-origin '*' is not supported: a wildcard would let every web page call this \
         server; list each origin that may call it, e.g. --cors-origin https://app.example.com"
    )]
    WildcardOrigin,
    /// An origin that is not `scheme://host[:port]`.
    #[error(
        "--cors-origin {0:?} is not an origin: write scheme://host[:port] with http or https \
         and no path, e.g. https://app.example.com or http://localhost:5173"
    )]
    InvalidOrigin(String),
    /// A host that is not `name[:port]`.
    #[error(
        "--allowed-host {0:?} is not a host: write a name or address with an optional port, \
         e.g. flue.internal, flue.internal:8080 or [::1]:3000"
    )]
    InvalidHost(String),
    /// An empty or blank token.
    #[error(
        "the token (--token or FLUE_TOKEN) is blank: set a value of visible characters, or \
         leave both unset to serve loopback without one"
    )]
    BlankToken,
    /// A token with whitespace or characters a header cannot carry.
    #[error(
        "the token (--token or FLUE_TOKEN) holds whitespace or characters other than visible \
         ASCII: clients could never send it in `Authorization: Bearer <token>`; use e.g. \
         `openssl rand -hex 32`"
    )]
    TokenCharacters,
    /// Too guessable a token on an address other machines reach.
    #[error(
        "the token (--token or FLUE_TOKEN) is too easy to guess for a server bound to {bind}: \
         about {bits} bits estimated, at least {min_bits} needed (repeated characters, runs \
         like `1234` or `abcd`, repeated chunks and common words add almost nothing, whatever \
         the length); generate one with `openssl rand -hex 32`"
    )]
    WeakToken {
        /// Its estimated bits, rounded down.
        bits: u32,
        /// The least accepted ([`MIN_EXPOSED_TOKEN_BITS`]).
        min_bits: u32,
        /// The address bound.
        bind: String,
    },
}

/// Checks `--cors-origin` values: `http(s)://host[:port]`, no wildcard, no path.
pub fn check_origins(origins: &[String]) -> Result<(), ConfigError> {
    for origin in origins {
        let trimmed = origin.trim();
        if trimmed == "*" {
            return Err(ConfigError::WildcardOrigin);
        }
        let authority = trimmed
            .strip_prefix("http://")
            .or_else(|| trimmed.strip_prefix("https://"));
        let valid = trimmed == origin
            && authority.is_some_and(|authority| {
                !authority.contains('/')
                    && !authority.contains('*')
                    && parse_pattern(authority).is_ok()
            });
        if !valid {
            return Err(ConfigError::InvalidOrigin(origin.clone()));
        }
    }
    Ok(())
}

/// Checks `--allowed-host` values.
pub fn check_hosts(hosts: &[String]) -> Result<(), ConfigError> {
    for host in hosts {
        parse_pattern(host).map_err(|_| ConfigError::InvalidHost(host.clone()))?;
    }
    Ok(())
}

/// Checks a bearer token: visible ASCII, not blank, and, when `bind` is not a loopback
/// address, hard enough to guess: at least [`MIN_EXPOSED_TOKEN_BITS`] bits as estimated from
/// its characters, where repeats, runs (`1234`), repeated chunks and common words count for
/// almost nothing (so neither `password12345678` nor sixteen identical characters pass).
pub fn check_token(token: &str, bind: IpAddr) -> Result<(), ConfigError> {
    if token.trim().is_empty() {
        return Err(ConfigError::BlankToken);
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(ConfigError::TokenCharacters);
    }
    if bind.is_loopback() {
        return Ok(());
    }
    let bits = strength::estimated_bits(token);
    if bits < f64::from(MIN_EXPOSED_TOKEN_BITS) {
        return Err(ConfigError::WeakToken {
            // Rounded down, and below the minimum, so it fits.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            bits: bits as u32,
            min_bits: MIN_EXPOSED_TOKEN_BITS,
            bind: bind.to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
