//! The router: the routes over the one shared state, and the tower layers (auth, body limit, timeout,
//! fixed headers, CORS, panics, one log line per request), declared once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderName, HeaderValue, Method, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, delete, get, post};
use futures::StreamExt;
use tokio::sync::Semaphore;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tracing::Instrument;

use crate::durable::DurableRuntime;
use crate::error::ApiError;
use crate::guard::check_origins;
use crate::history;
use crate::notes;
use crate::routes;
use crate::state::{AppState, BudgetHold, HELD_BODY_BYTES, ServerConfig};
use crate::tasks;

/// Every route the router serves, as `METHOD path` lines (the test that keeps
/// docs/http-api.md equal to the router reads this list).
pub const ROUTES: &[&str] = &[
    "GET /_flue/health",
    "GET /_flue/agents",
    "POST /agents/{agent}/{id}",
    "GET /agents/{agent}/{id}",
    "HEAD /agents/{agent}/{id}",
    "DELETE /agents/{agent}/{id}",
    "POST /agents/{agent}/{id}/abort",
    "POST /agents/{agent}/{id}/tasks/{task}/abort",
    "GET /agents/{agent}/{id}/tasks",
    "POST /agents/{agent}/{id}/tasks/{task}/cancel",
    "GET /agents/{agent}/{id}/attachments/{attachment}",
    "GET /agents/{agent}/{id}/submissions/{submission}",
    "GET /agents/{agent}/{id}/actions",
    "GET /agents/{agent}/{id}/state",
    "POST /agents/{agent}/{id}/actions/{action}",
    "GET /agents/{agent}/{id}/rules",
    "DELETE /agents/{agent}/{id}/rules/{rule}",
    "POST /agents/{agent}/{id}/interrupt",
    "POST /agents/{agent}/{id}/fork",
    "POST /agents/{agent}/{id}/rewind",
    "GET /_flue/memory/{agent}/{subject}",
    "DELETE /_flue/memory/{agent}/{subject}",
    "DELETE /_flue/memory/{agent}/{subject}/{note}",
];

/// Builds the router over a runtime. Mount it in an axum app (`app.merge(router(..))`) or
/// serve it with [`serve`](crate::serve).
pub fn router(runtime: DurableRuntime, config: ServerConfig) -> Router {
    let budget_kib = (config.inflight_body_limit / 1024).clamp(1, Semaphore::MAX_PERMITS);
    let bodies = Arc::new(Semaphore::new(budget_kib));
    let state = Arc::new(AppState {
        runtime,
        config,
        bodies,
    });
    let config = &state.config;
    let conversation: MethodRouter<Arc<AppState>> = get(routes::read)
        .head(routes::head)
        .post(routes::send)
        .delete(routes::delete)
        .fallback(|| async { ApiError::method_not_allowed("GET, HEAD, POST, DELETE") });
    let mut app = Router::new()
        .route(
            "/_flue/health",
            get(routes::health).fallback(|| async { ApiError::method_not_allowed("GET") }),
        )
        .route(
            "/_flue/agents",
            get(routes::agents).fallback(|| async { ApiError::method_not_allowed("GET") }),
        )
        .route("/agents/{agent}/{id}", conversation)
        .route(
            "/agents/{agent}/",
            axum::routing::any(|| async {
                ApiError::invalid_request("The conversation id segment is empty.")
            }),
        )
        .route(
            "/agents/{agent}/{id}/abort",
            post(routes::abort).fallback(|| async { ApiError::method_not_allowed("POST") }),
        )
        .route(
            "/agents/{agent}/{id}/tasks/{task}/abort",
            post(routes::abort_task).fallback(|| async { ApiError::method_not_allowed("POST") }),
        )
        .route(
            "/agents/{agent}/{id}/tasks",
            get(tasks::list).fallback(|| async { ApiError::method_not_allowed("GET") }),
        )
        .route(
            "/agents/{agent}/{id}/tasks/{task}/cancel",
            post(tasks::cancel).fallback(|| async { ApiError::method_not_allowed("POST") }),
        )
        .route(
            "/agents/{agent}/{id}/attachments/{attachment}",
            get(routes::attachment).fallback(|| async { ApiError::method_not_allowed("GET") }),
        )
        .route(
            "/agents/{agent}/{id}/submissions/{submission}",
            get(routes::submission).fallback(|| async { ApiError::method_not_allowed("GET") }),
        )
        .route(
            "/agents/{agent}/{id}/actions",
            get(routes::actions).fallback(|| async { ApiError::method_not_allowed("GET") }),
        )
        .route(
            "/agents/{agent}/{id}/state",
            get(routes::conversation_state)
                .fallback(|| async { ApiError::method_not_allowed("GET") }),
        )
        .route(
            "/agents/{agent}/{id}/actions/{action}",
            post(routes::resolve).fallback(|| async { ApiError::method_not_allowed("POST") }),
        )
        .route(
            "/agents/{agent}/{id}/rules",
            get(routes::rules).fallback(|| async { ApiError::method_not_allowed("GET") }),
        )
        .route(
            "/agents/{agent}/{id}/rules/{rule}",
            delete(routes::revoke_rule)
                .fallback(|| async { ApiError::method_not_allowed("DELETE") }),
        )
        .route(
            "/agents/{agent}/{id}/interrupt",
            post(routes::interrupt).fallback(|| async { ApiError::method_not_allowed("POST") }),
        )
        .route(
            "/agents/{agent}/{id}/fork",
            post(history::fork).fallback(|| async { ApiError::method_not_allowed("POST") }),
        )
        .route(
            "/agents/{agent}/{id}/rewind",
            post(history::rewind_files).fallback(|| async { ApiError::method_not_allowed("POST") }),
        )
        .route(
            "/_flue/memory/{agent}/{subject}",
            get(notes::list)
                .delete(notes::erase)
                .fallback(|| async { ApiError::method_not_allowed("GET, DELETE") }),
        )
        .route(
            "/_flue/memory/{agent}/{subject}/{note}",
            delete(notes::delete).fallback(|| async { ApiError::method_not_allowed("DELETE") }),
        )
        .fallback(|| async { ApiError::route_not_found() })
        .layer(DefaultBodyLimit::max(config.body_limit))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            body_budget,
        ))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            refuse_oversized,
        ))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            time_limit,
        ))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            authenticate,
        ))
        .layer(middleware::from_fn(envelope))
        .layer(middleware::from_fn(fixed_headers))
        .layer(CatchPanicLayer::custom(|_panic| {
            tracing::error!("a request handler panicked");
            ApiError::internal().into_response()
        }));
    if !config.cors_origins.is_empty() {
        // A wildcard or malformed origin would make tower-http's list panic: such values are
        // left out here (`check_origins` refuses them where they are given).
        let origins: Vec<HeaderValue> = config
            .cors_origins
            .iter()
            .filter(|origin| check_origins(std::slice::from_ref(*origin)).is_ok())
            .filter_map(|origin| HeaderValue::from_str(origin).ok())
            .collect();
        app = app.layer(
            CorsLayer::new()
                .allow_origin(AllowOrigin::list(origins))
                .allow_methods([Method::GET, Method::HEAD, Method::POST, Method::DELETE])
                .allow_headers([
                    header::CONTENT_TYPE,
                    header::AUTHORIZATION,
                    HeaderName::from_static("traceparent"),
                ])
                .expose_headers([
                    HeaderName::from_static("stream-next-offset"),
                    HeaderName::from_static("stream-up-to-date"),
                    header::LOCATION,
                ]),
        );
    }
    app.layer(middleware::from_fn(log_request))
        .with_state(state)
}

/// Refuses requests without the bearer token (when one is configured).
async fn authenticate(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(token) = &state.config.token {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(bearer);
        if !given.is_some_and(|given| constant_time_eq(given.as_bytes(), token.as_bytes())) {
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(request).await
}

/// The credentials of `Bearer <token>`, the scheme in any case (RFC 9110 11.1).
pub(crate) fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim_start_matches(' '))
}

/// Holds room in the in-flight body budget for the request's declared body (all of
/// `body_limit` for a body of unknown length) until its response head, or for a message of
/// [`HELD_BODY_BYTES`] or more until its submission settles or pauses (see [`BudgetHold`]);
/// waits at most half the request timeout for it, then answers 503.
async fn body_budget(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<usize>().ok());
    let bytes = match declared {
        Some(length) => length.min(state.config.body_limit),
        None if headers.contains_key(header::TRANSFER_ENCODING) => state.config.body_limit,
        None => 0,
    };
    if bytes == 0 {
        return next.run(request).await;
    }
    let total = (state.config.inflight_body_limit / 1024).clamp(1, Semaphore::MAX_PERMITS);
    let kib = u32::try_from(bytes.div_ceil(1024).min(total)).unwrap_or(u32::MAX);
    let wait = state.config.request_timeout / 2;
    let permit =
        tokio::time::timeout(wait, Arc::clone(&state.bodies).acquire_many_owned(kib)).await;
    match permit {
        Ok(Ok(permit)) => {
            let mut request = request;
            let hold = BudgetHold::new(permit);
            if bytes >= HELD_BODY_BYTES {
                request.extensions_mut().insert(hold.clone());
            }
            let response = next.run(request).await;
            drop(hold);
            response
        }
        _ => ApiError::busy(state.config.inflight_body_limit).into_response(),
    }
}

/// The most bytes of an oversized body read and dropped before answering 413, and for how
/// long at most.
const DRAIN_LIMIT: u64 = 64 * 1024 * 1024;
const DRAIN_TIME: Duration = Duration::from_secs(5);

/// Answers 413 to a body whose declared length is over the limit, after reading and dropping
/// what the client sends (up to [`DRAIN_LIMIT`] and [`DRAIN_TIME`]): closing a connection with
/// unread data resets it, and a client still sending would see a network error instead of
/// the 413. Bodies without a declared length are bounded by the extractors' limit.
async fn refuse_oversized(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    let limit = u64::try_from(state.config.body_limit).unwrap_or(u64::MAX);
    match declared {
        Some(length) if length > limit => {
            if length <= DRAIN_LIMIT {
                let mut body = request.into_body().into_data_stream();
                let drain = async { while let Some(Ok(_)) = body.next().await {} };
                let _ = tokio::time::timeout(DRAIN_TIME, drain).await;
            }
            ApiError::payload_too_large(state.config.body_limit).into_response()
        }
        _ => next.run(request).await,
    }
}

/// Answers 408 with the envelope when the handler has not produced a response head within
/// the request timeout (a stream's body is not bounded).
async fn time_limit(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    match tokio::time::timeout(state.config.request_timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::request_timeout().into_response(),
    }
}

/// Gives every error status the `{error:{type,message,details}}` envelope: responses of the
/// handlers have it already; an extractor's plain-text rejection (a path that does not decode,
/// a query that does not parse) is rewritten, its text kept as `details`.
async fn envelope(request: Request, next: Next) -> Response {
    let head_request = request.method() == Method::HEAD;
    let response = next.run(request).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let allow = response.headers().get(header::ALLOW).cloned();
    // Rejection bodies are short plain text; anything longer is cut, never buffered whole.
    let reason = match axum::body::to_bytes(response.into_body(), 4096).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).trim().to_owned(),
        Err(_) => String::new(),
    };
    let mut err = ApiError::for_status(status, reason);
    if head_request {
        err = err.without_body();
    }
    let mut response = err.into_response();
    if let Some(allow) = allow {
        response.headers_mut().insert(header::ALLOW, allow);
    }
    response
}

/// Compares without an early exit on the first differing byte.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The two browser security headers every response carries.
async fn fixed_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        HeaderName::from_static("cross-origin-resource-policy"),
        HeaderValue::from_static("cross-origin"),
    );
    response
}

/// One log line per request: method, path (no query, no headers: tokens stay out), status,
/// time to the response head. Also the request's telemetry span (a server span until the
/// response head), which joins the caller's trace when it sends a W3C `traceparent`: the
/// submissions it admits, and their attempts, nest under it.
async fn log_request(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let started = Instant::now();
    let trace_parent = request
        .headers()
        .get("traceparent")
        .and_then(|value| value.to_str().ok());
    let span = tracing::info_span!(
        target: flue_core::spans::SPAN_TARGET,
        "flue.request",
        otel.name = %method,
        otel.kind = "server",
        flue.trace_parent = trace_parent,
        http.request.method = %method,
        url.path = path,
        http.response.status_code = tracing::field::Empty,
        flue.end = tracing::field::Empty,
    );
    let response = next.run(request).instrument(span.clone()).await;
    span.record("http.response.status_code", response.status().as_u16());
    // The span ends with the response head, even while what it admitted runs on.
    span.record("flue.end", true);
    tracing::info!(
        target: "flue_server::request",
        %method,
        path,
        status = response.status().as_u16(),
        ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        "request"
    );
    response
}
