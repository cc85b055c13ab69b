//! The dev console (`flue dev`): a page at `/` whose HTML, CSS and JavaScript are compiled into
//! the binary (no build step, nothing fetched from the network), and the dev-only routes it
//! reads besides the conversation protocol: the build status with the agents and diagnostics
//! (long-polled), a conversation's stored transcript with its task sessions, the live events
//! of its running work (task start and end and provider retries, which the protocol's stream
//! does not carry), and the hint for a failed submission's error (what `flue run` prints after
//! `hint:`).
//!
//! The page takes a reply's text from the protocol's `live=sse` stream only (live chunks, then
//! the stored turn), never from the live route: one way in, so the text is shown once. The
//! live events come from the same runtime events that stream follows (`turns.rs`); the build
//! status is what the assembly layer publishes on every reload, and the hints come from the
//! assembly layer too (it knows the workspace; this crate does not).
//!
//! The conversation list (`GET /_flue/dev/conversations`) searches the store on the server
//! through one [`ConversationIndex`] per console, and answers at most a page. The console
//! serves `flue dev` ([`ConsoleAccess::Open`]) and `flue serve --console`: without a token
//! the console reads only ([`ConsoleAccess::ReadOnly`]: the page hides what changes
//! something, and [`console_app`] refuses writes sent from the page), with one every dev route
//! but the page and its assets needs it ([`ConsoleAccess::Token`]).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use flue_core::{DEFAULT_SESSION, store::DynConversationStore};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::durable::DurableRuntime;
use crate::error::ApiError;
use crate::listing::{ConversationIndex, ConversationQuery};
use crate::router::{ROUTES, bearer, constant_time_eq};
use crate::transcript::transcript_tree;
use crate::turns::Shown;

const INDEX_HTML: &str = include_str!("console/index.html");
const CONSOLE_CSS: &str = include_str!("console/console.css");
const CONSOLE_JS: &str = include_str!("console/console.js");
const ACCESS_JS: &str = include_str!("console/access.js");
const LIST_JS: &str = include_str!("console/list.js");
const LIST_CSS: &str = include_str!("console/list.css");

/// Rows the conversation list returns when the query names no limit.
const DEFAULT_LIST_LIMIT: usize = 50;

/// How often `GET /_flue/dev/conversations?wait=STAMP` looks at the store again while its
/// answer has not changed (cheap: only conversations whose stream moved are read again).
const LIST_RECHECK: Duration = Duration::from_millis(750);

/// The log target of the console's warnings (the one `flue dev` always had).
const LOG_TARGET: &str = "flue::dev::console";

/// How long `GET /_flue/dev/state?after=N` waits for a rebuild before answering unchanged.
const LONG_POLL: Duration = Duration::from_secs(25);

/// What the console shows about the build: its JSON (the agents serving, and after a failed
/// rebuild its diagnostics) and its generation, which grows with every rebuild, good or bad.
#[derive(Clone, Debug, Default)]
pub struct BuildStatus {
    /// Grows by one with every rebuild; `GET /_flue/dev/state?after=N` waits for a larger one.
    pub generation: u64,
    /// The status as the console reads it (a JSON object).
    pub body: Value,
}

/// What to fix for a failed submission's error message, or `None`: the hint `flue run` prints
/// (the assembly layer provides it; it reads the workspace).
pub type ErrorHint = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Longest error message `GET /_flue/dev/hint` looks at (longer ones get no hint).
const MAX_HINT_MESSAGE: usize = 16 * 1024;

/// Who may change things through the console.
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum ConsoleAccess {
    /// `flue dev` (loopback, no token): everything works.
    #[default]
    Open,
    /// A server without a token: the page shows conversations, transcripts and details and
    /// hides every control that changes something; [`console_app`] refuses state-changing
    /// requests sent from the page (same-origin), as a button in the page's developer tools
    /// would send them.
    ReadOnly,
    /// A server with this token: the page asks for it and sends it as a bearer token; every
    /// dev route but the page and its assets refuses a request without it.
    Token(String),
}

impl ConsoleAccess {
    /// How `GET /_flue/dev/state` names it: `open`, `read_only`, `token`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::ReadOnly => "read_only",
            Self::Token(_) => "token",
        }
    }
}

impl std::fmt::Debug for ConsoleAccess {
    // The token never appears in a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the console's routes read: the runtime (its store holds the transcripts, its events
/// the live output), the build status the reloads publish and the hints for errors.
#[derive(Clone)]
pub struct DevConsole {
    runtime: DurableRuntime,
    status: watch::Receiver<Arc<BuildStatus>>,
    hint: Option<ErrorHint>,
    index: Arc<ConversationIndex>,
    access: ConsoleAccess,
    /// The sender of a status that never changes ([`DevConsole::fixed`]).
    fixed: Option<Arc<watch::Sender<Arc<BuildStatus>>>>,
}

impl DevConsole {
    /// A console over `runtime`, showing the build status `status` carries.
    /// The conversation list is read once in the background as it starts (on a store of
    /// thousands of conversations the first pass takes seconds; the later ones read only
    /// what moved).
    pub fn new(runtime: DurableRuntime, status: watch::Receiver<Arc<BuildStatus>>) -> Self {
        let index: Arc<ConversationIndex> = Arc::default();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let index = Arc::clone(&index);
            let store = Arc::clone(runtime.runtime().store());
            handle.spawn(async move {
                if let Err(err) = index.warm(store.as_ref()).await {
                    tracing::warn!(target: LOG_TARGET, error = %err, "cannot list conversations");
                }
            });
        }
        Self {
            runtime,
            status,
            hint: None,
            index,
            access: ConsoleAccess::Open,
            fixed: None,
        }
    }

    /// Who may change things through this console (default: [`ConsoleAccess::Open`]).
    #[must_use]
    pub fn with_access(mut self, access: ConsoleAccess) -> Self {
        self.access = access;
        self
    }

    /// A console over `runtime` whose build status never changes (`flue serve --console`:
    /// the agents it serves, no rebuilds).
    pub fn fixed(runtime: DurableRuntime, status: BuildStatus) -> Self {
        let (sender, receiver) = watch::channel(Arc::new(status));
        let mut console = Self::new(runtime, receiver);
        // Kept, so that a long poll of the state waits instead of answering at once.
        console.fixed = Some(Arc::new(sender));
        console
    }

    /// Shows `hint`'s answer under a failed submission's error (without it, no hint).
    #[must_use]
    pub fn with_error_hint(mut self, hint: ErrorHint) -> Self {
        self.hint = Some(hint);
        self
    }

    fn store(&self) -> &Arc<dyn DynConversationStore> {
        self.runtime.runtime().store()
    }
}

impl std::fmt::Debug for DevConsole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevConsole")
            .field("generation", &self.status.borrow().generation)
            .field("hint", &self.hint.is_some())
            .field("access", &self.access)
            .finish_non_exhaustive()
    }
}

/// Every route [`console_routes`] adds, as `METHOD path` lines (a test keeps docs/dev.md
/// equal).
pub const CONSOLE_ROUTES: &[&str] = &[
    "GET /",
    "GET /_flue/dev/console.css",
    "GET /_flue/dev/console.js",
    "GET /_flue/dev/access.js",
    "GET /_flue/dev/list.js",
    "GET /_flue/dev/list.css",
    "GET /_flue/dev/state",
    "GET /_flue/dev/conversations",
    "GET /_flue/dev/transcript/{agent}/{id}",
    "GET /_flue/dev/live/{agent}/{id}",
    "GET /_flue/dev/hint",
];

/// The console's routes, to merge into the protocol router (they add no fallback). With a
/// token ([`ConsoleAccess::Token`]) every route but the page and its assets needs it; a
/// read-only console's refusal of writes is [`console_app`]'s.
pub fn console_routes(console: DevConsole) -> Router {
    let state = Arc::new(console);
    let data = Router::new()
        .route("/_flue/dev/state", get(status))
        .route("/_flue/dev/conversations", get(conversations))
        .route("/_flue/dev/transcript/{agent}/{id}", get(transcript))
        .route("/_flue/dev/live/{agent}/{id}", get(live))
        .route("/_flue/dev/hint", get(hint))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            authenticate,
        ))
        .with_state(state);
    Router::new()
        .route(
            "/",
            get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }),
        )
        .route(
            "/_flue/dev/console.css",
            get(|| async { asset("text/css; charset=utf-8", CONSOLE_CSS) }),
        )
        .route(
            "/_flue/dev/console.js",
            get(|| async { asset("text/javascript; charset=utf-8", CONSOLE_JS) }),
        )
        .route(
            "/_flue/dev/access.js",
            get(|| async { asset("text/javascript; charset=utf-8", ACCESS_JS) }),
        )
        .route(
            "/_flue/dev/list.js",
            get(|| async { asset("text/javascript; charset=utf-8", LIST_JS) }),
        )
        .route(
            "/_flue/dev/list.css",
            get(|| async { asset("text/css; charset=utf-8", LIST_CSS) }),
        )
        .merge(data)
}

/// The protocol router `protocol` with the console's routes: for `flue serve --console`. A
/// read-only console ([`ConsoleAccess::ReadOnly`]) also refuses, with 403 `read_only`, every
/// state-changing request sent from a page of this server (its `Origin` is the server's own,
/// or `Sec-Fetch-Site` says `same-origin`): the console's page cannot send, approve, fork,
/// rewind or abort, while other clients keep the protocol as the server offers it.
pub fn console_app(protocol: Router, console: DevConsole) -> Router {
    let read_only = matches!(console.access, ConsoleAccess::ReadOnly);
    let app = protocol.merge(console_routes(console));
    if read_only {
        app.layer(middleware::from_fn(refuse_page_writes))
    } else {
        app
    }
}

/// Refuses the console page's state-changing requests (see [`console_app`]).
async fn refuse_page_writes(request: Request, next: Next) -> Response {
    let writes = !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    if writes && from_own_page(request.headers()) {
        return ApiError::read_only().into_response();
    }
    next.run(request).await
}

/// Whether a request comes from a page this server served: same-origin by the browser's
/// `Sec-Fetch-Site`, or an `Origin` whose authority is the `Host` the request names.
fn from_own_page(headers: &HeaderMap) -> bool {
    let text = |name| {
        headers
            .get(name)
            .and_then(|value: &HeaderValue| value.to_str().ok())
            .map(|value| value.trim().to_ascii_lowercase())
    };
    if text(header::HeaderName::from_static("sec-fetch-site")).as_deref() == Some("same-origin") {
        return true;
    }
    let (Some(origin), Some(host)) = (text(header::ORIGIN), text(header::HOST)) else {
        return false;
    };
    origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .is_some_and(|authority| authority == host)
}

/// Refuses a dev route's request without the console's token (when it has one), as the
/// protocol's routes do.
async fn authenticate(
    State(state): State<Arc<DevConsole>>,
    request: Request,
    next: Next,
) -> Response {
    if let ConsoleAccess::Token(token) = &state.access {
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

/// An embedded file. The page runs only its own script and style (CSP), and is never cached,
/// so a new `flue` binary serves its new console at once.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; \
             frame-ancestors 'none'",
        ),
    );
    response
}

#[derive(Deserialize)]
struct StatusQuery {
    /// Answer once the generation is past this one (or after the long-poll timeout).
    after: Option<u64>,
}

/// `GET /_flue/dev/state[?after=N]`: the build status; with `after`, waits for a newer one.
async fn status(
    State(state): State<Arc<DevConsole>>,
    Query(query): Query<StatusQuery>,
) -> Response {
    let mut receiver = state.status.clone();
    if let Some(after) = query.after {
        let newer = receiver.wait_for(|status| status.generation > after);
        // Timing out answers the current status unchanged; the console asks again.
        let _ = tokio::time::timeout(LONG_POLL, newer).await;
    }
    let current = receiver.borrow().clone();
    let mut body = current.body.clone();
    if let Value::Object(map) = &mut body {
        // What the protocol router offers beyond conversations, so the console shows only
        // what works: pending actions (tool confirmations) once the router serves them.
        map.insert(
            "features".to_owned(),
            json!({ "actions": ROUTES.contains(&ACTIONS_ROUTE) }),
        );
        // What the page may change: `read_only` hides every control that writes.
        map.insert("access".to_owned(), json!(state.access.as_str()));
    }
    no_store(axum::Json(body).into_response())
}

#[derive(Deserialize)]
struct ListQuery {
    /// Words every row contains (agent, id or first message), case-insensitive.
    q: Option<String>,
    /// Only this agent's conversations.
    agent: Option<String>,
    /// The most rows (default 50, at most 500).
    limit: Option<usize>,
    /// The `stamp` of the answer the page has: wait (up to the long-poll timeout) for a
    /// different one.
    wait: Option<String>,
}

/// `GET /_flue/dev/conversations?q=&agent=&limit=&wait=`: the matching conversations, most
/// recently active first, `{"conversations": [...], "matched", "total", "stamp"}`; with
/// `wait=STAMP`, answers once the answer differs from that one (a conversation started,
/// moved or settled) or after the long-poll timeout.
async fn conversations(
    State(state): State<Arc<DevConsole>>,
    Query(query): Query<ListQuery>,
) -> Response {
    let search = ConversationQuery::new(
        query.q.filter(|q| !q.trim().is_empty()),
        query.agent.filter(|agent| !agent.is_empty()),
        query.limit.unwrap_or(DEFAULT_LIST_LIMIT),
    );
    let deadline = tokio::time::Instant::now() + LONG_POLL;
    loop {
        let page = match state.index.search(state.store().as_ref(), &search).await {
            Ok(page) => page,
            Err(err) => {
                tracing::warn!(target: LOG_TARGET, error = %err, "cannot list conversations");
                return (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    axum::Json(json!({"error": {"type": "internal_error",
                        "message": "the conversations cannot be listed; see the terminal"}})),
                )
                    .into_response();
            }
        };
        let mut body = serde_json::to_value(&page).unwrap_or_default();
        let stamp = stamp_of(&body);
        let now = tokio::time::Instant::now();
        if query.wait.as_deref() != Some(stamp.as_str()) || now >= deadline {
            if let Value::Object(map) = &mut body {
                map.insert("stamp".to_owned(), Value::String(stamp));
            }
            return no_store(axum::Json(body).into_response());
        }
        tokio::time::sleep(LIST_RECHECK.min(deadline - now)).await;
    }
}

/// A short fingerprint of an answer: equal answers have equal stamps.
fn stamp_of(body: &Value) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    body.to_string().hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

#[derive(Deserialize)]
struct HintQuery {
    /// The error message of a failed submission (its advisory's text).
    message: Option<String>,
}

/// `GET /_flue/dev/hint?message=...`: `{"hint": "..."}`, what to fix for that error (as
/// `flue run` prints it after `hint:`), or `{"hint": null}`.
async fn hint(State(state): State<Arc<DevConsole>>, Query(query): Query<HintQuery>) -> Response {
    let hint = match (&state.hint, query.message) {
        (Some(hint), Some(message)) if message.len() <= MAX_HINT_MESSAGE => hint(&message),
        _ => None,
    };
    no_store(axum::Json(json!({ "hint": hint })).into_response())
}

/// The protocol route listing a conversation's pending actions.
const ACTIONS_ROUTE: &str = "GET /agents/{agent}/{id}/actions";

/// `GET /_flue/dev/transcript/{agent}/{id}`: the conversation's stored sessions, the root one
/// with its task sessions nested (the shape of `flue session show --json --tree`); an empty
/// root session for a conversation that has none yet. `stream: false` when its sessions
/// have no conversation stream yet (a fork before its first message).
async fn transcript(
    State(state): State<Arc<DevConsole>>,
    Path((agent, id)): Path<(String, String)>,
) -> Response {
    let key = flue_core::ConversationKey::new(&agent, &id);
    let instance_id = key.instance_id();
    match transcript_tree(state.store().as_ref(), &instance_id).await {
        Ok(Some(mut tree)) => {
            let stream = matches!(state.store().conversation(&key).await, Ok(Some(_)));
            if let serde_json::Value::Object(map) = &mut tree {
                map.insert("stream".into(), serde_json::Value::Bool(stream));
            }
            no_store(axum::Json(tree).into_response())
        }
        Ok(None) => no_store(
            axum::Json(json!({"session": DEFAULT_SESSION, "version": 0,
                "messages": [], "tasks": []}))
            .into_response(),
        ),
        Err(err) => {
            tracing::warn!(target: LOG_TARGET, error = %err, "cannot read a transcript");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                axum::Json(json!({"error": {"type": "internal_error",
                    "message": "the transcript cannot be read; see the terminal"}})),
            )
                .into_response()
        }
    }
}

/// `GET /_flue/dev/live/{agent}/{id}`: server-sent events, one per live event of the
/// conversation's running work in this process, `{"submissionId", "event"}` with `event` in
/// flue-core's event format: text and reasoning deltas, model turn ends, task start and end,
/// compaction start and end, provider retries (a task's wrapped in its `task_activity`). Nothing is stored or replayed: a reader sees what happens while it
/// is connected, and a `lagged` event when it fell behind (the durable stream has the rest).
async fn live(
    State(state): State<Arc<DevConsole>>,
    Path((agent, id)): Path<(String, String)>,
) -> Response {
    let key = flue_core::ConversationKey::new(&agent, &id);
    let receiver = state.runtime.shown_events();
    let events = futures::stream::unfold((receiver, key), |(mut receiver, key)| async move {
        use tokio::sync::broadcast::error::RecvError;
        let lagged = || SseEvent::default().event("lagged").data("{}");
        loop {
            match receiver.recv().await {
                Ok(Shown::Event(event)) if event.conversation == key => {
                    let sse = live_event(&event);
                    return Some((Ok::<_, Infallible>(sse), (receiver, key)));
                }
                Ok(Shown::Event(_)) => {}
                Ok(Shown::Lagged) | Err(RecvError::Lagged(_)) => {
                    return Some((Ok(lagged()), (receiver, key)));
                }
                Err(RecvError::Closed) => return None,
            }
        }
    });
    no_store(
        Sse::new(events)
            .keep_alive(KeepAlive::default())
            .into_response(),
    )
}

/// One shown event as the console reads it: `{"submissionId", "event"}`.
fn live_event(event: &flue_core::RuntimeEvent) -> SseEvent {
    let data = json!({"submissionId": event.submission_id, "event": event.event});
    SseEvent::default().data(data.to_string())
}

fn no_store(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests;
