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
//! A reply's markdown is rendered in the page by `markdown.js` from the tokens of two vendored
//! parsers (`console/vendor/`, see its VENDORED.md), never parsed as HTML; the page's
//! Content-Security-Policy ([`CONTENT_SECURITY_POLICY`]) runs only the page's own scripts.
//! The Agent tab lists an agent's tools with their policies and shows the source of its files
//! through the assembly layer's [`AgentDetails`]: only files the build knows (agents, skills,
//! roles), never a path the page names.
//! The conversation list (`GET /_flue/dev/conversations`) searches the store on the server
//! through one [`ConversationIndex`] per console, and answers at most a page. The console
//! serves `flue dev` ([`ConsoleAccess::Open`]) and `flue serve --console`: without a token
//! the console reads only ([`ConsoleAccess::ReadOnly`]: the page hides what changes
//! something, and [`console_app`] refuses writes sent from the page), with one every dev route
//! but the page and its assets needs it ([`ConsoleAccess::Token`]). The Evals tab reads the
//! store's eval runs (`console/evals.rs`).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use flue_core::model::ToolSchema;
use flue_core::view::{ConversationIndex, ConversationQuery, transcript_tree};
use flue_core::{DEFAULT_SESSION, store::DynConversationStore};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::durable::DurableRuntime;
use crate::error::ApiError;
use crate::prompts::{Call, PromptRecorder};
use crate::router::{ROUTES, bearer, constant_time_eq};
use crate::turns::Shown;

const INDEX_HTML: &str = include_str!("console/index.html");
const CONSOLE_CSS: &str = include_str!("console/console.css");
const CONSOLE_JS: &str = include_str!("console/console.js");
/// The composer's per-message choices and retry / fork / rewind on each message (try.js).
const TRY_CSS: &str = include_str!("console/try.css");
const TRY_JS: &str = include_str!("console/try.js");
const MARKDOWN_JS: &str = include_str!("console/markdown.js");
const MARKDOWN_CSS: &str = include_str!("console/markdown.css");
const AGENT_JS: &str = include_str!("console/agent.js");
const AGENT_CSS: &str = include_str!("console/agent.css");
/// `marked` 18.2.1 (MIT), unchanged (console/vendor/VENDORED.md).
const MARKED_JS: &str = include_str!("console/vendor/marked.umd.js");
/// Prism 1.30.0 (MIT): its core and a few languages, unchanged (console/vendor/VENDORED.md).
const PRISM_JS: &str = include_str!("console/vendor/prism.js");

/// The console's Content-Security-Policy, on every page and asset it serves: only its own
/// scripts and styles run (no inline script or style attribute, no `eval`), it connects only
/// to its own server, loads images only from itself or `data:` (a reply's image links are
/// never loaded), embeds nothing and is embedded nowhere, and no script may write HTML
/// strings into the page (Trusted Types with no policy: the page builds elements, so a
/// stray `innerHTML` of a reply's text fails instead of running it).
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; \
     frame-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; \
     require-trusted-types-for 'script'; trusted-types 'none'";
const TIMELINE_JS: &str = include_str!("console/timeline.js");
const TIMELINE_CSS: &str = include_str!("console/timeline.css");
const PROMPT_JS: &str = include_str!("console/prompt.js");
const ACCESS_JS: &str = include_str!("console/access.js");
const LIST_JS: &str = include_str!("console/list.js");
const LIST_CSS: &str = include_str!("console/list.css");
/// The layout at every width (drawers, the resizable details panel), copying, export and the
/// dark colours (studio.js, studio.css).
const STUDIO_JS: &str = include_str!("console/studio.js");
const STUDIO_CSS: &str = include_str!("console/studio.css");
/// The Evals tab: the store's eval runs, a run's cases, a diff against a baseline (evals.js).
const EVALS_JS: &str = include_str!("console/evals.js");
const EVALS_CSS: &str = include_str!("console/evals.css");

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

/// What [`AgentDetails::tools`] returns: the tools as a JSON list, or why there are none.
pub type ToolsFuture<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Value, String>> + Send + 'a>>;

/// Which files of the build `GET /_flue/dev/source/{kind}/{name}` shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SourceKind {
    /// An agent file (`agents/NAME.md`); a subagent is one too.
    Agent,
    /// A skill's `SKILL.md` (or its flat file).
    Skill,
    /// A role file.
    Role,
}

impl SourceKind {
    /// The kind as the route names it: `agent`, `skill` or `role`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Agent => "agent",
            Self::Skill => "skill",
            Self::Role => "role",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        [Self::Agent, Self::Skill, Self::Role]
            .into_iter()
            .find(|kind| kind.as_str() == text)
    }
}

/// A file of the build as the console shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceFile {
    /// Relative to the workspace root.
    pub path: String,
    /// Its text.
    pub text: String,
}

/// What the console's Agent tab reads from the assembly layer, which knows the workspace (this
/// crate does not): an agent's tools with their policies, and the files of the build.
pub trait AgentDetails: Send + Sync {
    /// Agent `agent`'s tools as its model is offered them, each with where it comes from and
    /// its policy (a JSON list); `Err` says why they cannot be listed (no such agent, an MCP
    /// server that does not start).
    fn tools<'a>(&'a self, agent: &'a str) -> ToolsFuture<'a>;

    /// The source of the build's `kind` file named `name`: `None` when the build has no such
    /// file, `Err` when it cannot be read (the message says why). Reads only files the build
    /// knows, inside the workspace root, bounded; called on a blocking thread.
    fn source(&self, kind: SourceKind, name: &str) -> Option<Result<SourceFile, String>>;

    /// Runs agent `agent`'s tool as `run` names it, by hand, its policy applied (see
    /// [`ToolRun`]): `{"outcome": "ok", "output"}`, `{"outcome": "error", "error"}`,
    /// `{"outcome": "confirm", "why"}` (it asks first: send it again confirmed) or
    /// `{"outcome": "refused", "why"}`; `Err` names an agent or a tool the build does not
    /// have. The default runs nothing.
    fn run_tool<'a>(&'a self, agent: &'a str, run: ToolRun) -> ToolsFuture<'a> {
        let _ = (agent, run);
        Box::pin(async { Err("this server runs no tool by hand".to_owned()) })
    }
}

/// A tool run by hand from the console's Agent tab (`POST /_flue/dev/tools/{agent}/run`): the
/// tool, its input, and whether the person confirmed a tool whose policy asks before each
/// call (one that runs at once needs no confirmation).
#[derive(Clone, Debug, Deserialize)]
#[non_exhaustive]
pub struct ToolRun {
    /// The tool's name, as the agent's model is offered it.
    pub tool: String,
    /// Its input (checked against its schema).
    #[serde(default)]
    pub input: Value,
    /// The person confirmed the call.
    #[serde(default)]
    pub confirmed: bool,
}

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
    details: Option<Arc<dyn AgentDetails>>,
    prompts: Option<(PromptRecorder, PromptAssembly)>,
    index: Arc<ConversationIndex>,
    access: ConsoleAccess,
    /// The sender of a status that never changes ([`DevConsole::fixed`]).
    fixed: Option<Arc<watch::Sender<Arc<BuildStatus>>>>,
}

/// The system prompt and tools agent `name` has now, as `flue run --dry-run` prints them (the
/// assembly layer provides it: it knows the workspace), or why they cannot be had.
pub type PromptAssembly = Arc<
    dyn Fn(String) -> flue_core::BoxFuture<'static, Result<(String, Vec<ToolSchema>), String>>
        + Send
        + Sync,
>;

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
            details: None,
            prompts: None,
            index,
            access: ConsoleAccess::Open,
            fixed: None,
        }
    }

    /// Lists agents' tools and shows the build's files from `details` (without it, the Agent
    /// tab shows the tool names the build status carries, and no file).
    #[must_use]
    pub fn with_agent_details(mut self, details: Arc<dyn AgentDetails>) -> Self {
        self.details = Some(details);
        self
    }

    /// Shows the model calls `recorder` holds exactly as they were sent, and for the others
    /// the agent's system prompt and tools as `assembly` gives them now (without it, the
    /// prompt view rebuilds every call's messages from the log and shows no system prompt).
    #[must_use]
    pub fn with_prompts(mut self, recorder: PromptRecorder, assembly: PromptAssembly) -> Self {
        self.prompts = Some((recorder, assembly));
        self
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
            .field("details", &self.details.is_some())
            .field("prompts", &self.prompts.is_some())
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
    "GET /_flue/dev/try.css",
    "GET /_flue/dev/try.js",
    "GET /_flue/dev/markdown.js",
    "GET /_flue/dev/markdown.css",
    "GET /_flue/dev/agent.js",
    "GET /_flue/dev/agent.css",
    "GET /_flue/dev/vendor/marked.js",
    "GET /_flue/dev/vendor/prism.js",
    "GET /_flue/dev/access.js",
    "GET /_flue/dev/list.js",
    "GET /_flue/dev/list.css",
    "GET /_flue/dev/studio.js",
    "GET /_flue/dev/studio.css",
    "GET /_flue/dev/state",
    "GET /_flue/dev/conversations",
    "GET /_flue/dev/transcript/{agent}/{id}",
    "GET /_flue/dev/live/{agent}/{id}",
    "GET /_flue/dev/hint",
    "GET /_flue/dev/tools/{agent}",
    "POST /_flue/dev/tools/{agent}/run",
    "GET /_flue/dev/source/{kind}/{name}",
    "GET /_flue/dev/timeline.js",
    "GET /_flue/dev/timeline.css",
    "GET /_flue/dev/timeline/{agent}/{id}",
    "GET /_flue/dev/prompt.js",
    "GET /_flue/dev/prompt/{agent}/{id}",
    "GET /_flue/dev/evals.js",
    "GET /_flue/dev/evals.css",
    "GET /_flue/dev/evals",
    "GET /_flue/dev/evals/{id}",
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
        .route("/_flue/dev/tools/{agent}", get(tools))
        .route("/_flue/dev/tools/{agent}/run", post(run_tool))
        .route("/_flue/dev/source/{kind}/{name}", get(source))
        .route("/_flue/dev/timeline/{agent}/{id}", get(timeline))
        .route("/_flue/dev/prompt/{agent}/{id}", get(prompt))
        .route("/_flue/dev/evals", get(evals::list))
        .route("/_flue/dev/evals/{id}", get(evals::show))
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
            get(|| async { asset(JAVASCRIPT, CONSOLE_JS) }),
        )
        .route(
            "/_flue/dev/markdown.js",
            get(|| async { asset(JAVASCRIPT, MARKDOWN_JS) }),
        )
        .route(
            "/_flue/dev/markdown.css",
            get(|| async { asset(CSS, MARKDOWN_CSS) }),
        )
        .route(
            "/_flue/dev/agent.js",
            get(|| async { asset(JAVASCRIPT, AGENT_JS) }),
        )
        .route(
            "/_flue/dev/agent.css",
            get(|| async { asset(CSS, AGENT_CSS) }),
        )
        .route(
            "/_flue/dev/vendor/marked.js",
            get(|| async { asset(JAVASCRIPT, MARKED_JS) }),
        )
        .route(
            "/_flue/dev/vendor/prism.js",
            get(|| async { asset(JAVASCRIPT, PRISM_JS) }),
        )
        .route("/_flue/dev/try.css", get(|| async { asset(CSS, TRY_CSS) }))
        .route(
            "/_flue/dev/try.js",
            get(|| async { asset(JAVASCRIPT, TRY_JS) }),
        )
        .route(
            "/_flue/dev/timeline.js",
            get(|| async { asset(JAVASCRIPT, TIMELINE_JS) }),
        )
        .route(
            "/_flue/dev/timeline.css",
            get(|| async { asset(CSS, TIMELINE_CSS) }),
        )
        .route(
            "/_flue/dev/prompt.js",
            get(|| async { asset(JAVASCRIPT, PROMPT_JS) }),
        )
        .route(
            "/_flue/dev/access.js",
            get(|| async { asset(JAVASCRIPT, ACCESS_JS) }),
        )
        .route(
            "/_flue/dev/list.js",
            get(|| async { asset(JAVASCRIPT, LIST_JS) }),
        )
        .route(
            "/_flue/dev/list.css",
            get(|| async { asset(CSS, LIST_CSS) }),
        )
        .route(
            "/_flue/dev/studio.js",
            get(|| async { asset(JAVASCRIPT, STUDIO_JS) }),
        )
        .route(
            "/_flue/dev/studio.css",
            get(|| async { asset(CSS, STUDIO_CSS) }),
        )
        .route(
            "/_flue/dev/evals.js",
            get(|| async { asset(JAVASCRIPT, EVALS_JS) }),
        )
        .route(
            "/_flue/dev/evals.css",
            get(|| async { asset(CSS, EVALS_CSS) }),
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

const JAVASCRIPT: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// An embedded file. The page runs only its own script and style
/// ([`CONTENT_SECURITY_POLICY`]), and is never cached, so a new `flue` binary serves its new
/// console at once.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// `GET /_flue/dev/tools/{agent}`: `{"agent", "tools": [...]}`, the agent's tools with their
/// policies (from the assembly layer); 404 with the reason when they cannot be listed.
async fn tools(State(state): State<Arc<DevConsole>>, Path(agent): Path<String>) -> Response {
    let Some(details) = &state.details else {
        return not_found("this server lists no tools; the build status names them");
    };
    match details.tools(&agent).await {
        Ok(tools) => no_store(axum::Json(json!({"agent": agent, "tools": tools})).into_response()),
        // An agent of the build that cannot be opened (its model is unusable) is there all
        // the same: the page shows why its list is missing.
        Err(message) if state.runtime.runtime().agents().contains(&agent) => no_store(
            axum::Json(json!({"agent": agent, "tools": [], "error": {"message": message}}))
                .into_response(),
        ),
        Err(message) => not_found(&message),
    }
}

/// `POST /_flue/dev/tools/{agent}/run` with a [`ToolRun`]: the tool run by hand, its policy
/// applied ([`AgentDetails::run_tool`]); 404 for an agent or a tool the build does not have.
async fn run_tool(
    State(state): State<Arc<DevConsole>>,
    Path(agent): Path<String>,
    axum::Json(run): axum::Json<ToolRun>,
) -> Response {
    let Some(details) = &state.details else {
        return not_found("this server runs no tool by hand");
    };
    match details.run_tool(&agent, run).await {
        Ok(answer) => no_store(axum::Json(answer).into_response()),
        Err(message) => not_found(&message),
    }
}

/// `GET /_flue/dev/source/{kind}/{name}`: `{"kind", "name", "path", "text"}`, the source of a
/// file the build knows (`kind`: `agent`, `skill` or `role`); 404 for any other.
async fn source(
    State(state): State<Arc<DevConsole>>,
    Path((kind, name)): Path<(String, String)>,
) -> Response {
    let Some(details) = state.details.clone() else {
        return not_found("this server shows no files");
    };
    let Some(source_kind) = SourceKind::parse(&kind) else {
        return not_found(&format!("no file kind {kind:?}: use agent, skill or role"));
    };
    let lookup = name.clone();
    let read = tokio::task::spawn_blocking(move || details.source(source_kind, &lookup)).await;
    match read {
        Ok(Some(Ok(file))) => no_store(
            axum::Json(json!({"kind": kind, "name": name, "path": file.path, "text": file.text}))
                .into_response(),
        ),
        Ok(Some(Err(message))) => not_found(&message),
        Ok(None) => not_found(&format!(
            "the build has no {kind} {name:?}; the console shows only the files of the build's \
             agents, skills and roles"
        )),
        Err(err) => {
            tracing::warn!(target: LOG_TARGET, error = %err, "reading a file of the build failed");
            not_found("the file cannot be read; see the terminal")
        }
    }
}

fn not_found(message: &str) -> Response {
    no_store(
        (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"error": {"type": "not_found", "message": message}})),
        )
            .into_response(),
    )
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
    /// Only the rows after this cursor (an earlier answer's `next`).
    before: Option<String>,
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
    )
    .with_before(query.before.clone());
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
/// have no conversation stream yet (a fork before its first message); `turns` maps each
/// submission to the turn its message became (what fork and rewind take).
async fn transcript(
    State(state): State<Arc<DevConsole>>,
    Path((agent, id)): Path<(String, String)>,
) -> Response {
    let key = flue_core::ConversationKey::new(&agent, &id);
    let instance_id = key.instance_id();
    match transcript_tree(state.store().as_ref(), &instance_id).await {
        Ok(Some(mut tree)) => {
            let stream = matches!(state.store().conversation(&key).await, Ok(Some(_)));
            let turns = if stream {
                submission_turns(state.store().as_ref(), &key, &tree).await
            } else {
                serde_json::Map::new()
            };
            if let serde_json::Value::Object(map) = &mut tree {
                map.insert("stream".into(), serde_json::Value::Bool(stream));
                map.insert("turns".into(), serde_json::Value::Object(turns));
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

/// Which turn of the root session each submission's message became, `{submissionId: turn}`
/// (the number fork and rewind take), read from the conversation's stream: the first `User`
/// record of a submission's batches, at its index in the root session `tree` shows. A
/// submission whose message never reached the log is absent.
async fn submission_turns(
    store: &dyn DynConversationStore,
    key: &flue_core::ConversationKey,
    tree: &Value,
) -> serde_json::Map<String, Value> {
    let records = tree.get("messages").and_then(Value::as_array);
    let mut turns = serde_json::Map::new();
    let mut after = flue_core::Offset::START;
    loop {
        let Ok(page) = store.read_stream(key, after, 500).await else {
            break;
        };
        for batch in &page.batches {
            let (
                Some(submission_id),
                flue_core::BatchBody::Records {
                    session,
                    first_index,
                    records: batch_records,
                },
            ) = (&batch.submission_id, &batch.body)
            else {
                continue;
            };
            if session != DEFAULT_SESSION || turns.contains_key(submission_id) {
                continue;
            }
            let Some(offset) = batch_records
                .iter()
                .position(|stored| matches!(stored.record, flue_core::Record::User(_)))
            else {
                continue;
            };
            let index = usize::try_from(*first_index).unwrap_or(usize::MAX);
            let turn = records
                .and_then(|records| records.get(index.saturating_add(offset)))
                .and_then(|record| record.get("turn"))
                .cloned();
            if let Some(turn) = turn {
                turns.insert(submission_id.clone(), turn);
            }
        }
        if page.batches.is_empty() || page.up_to_date {
            break;
        }
        after = page.next_offset;
    }
    turns
}

/// `GET /_flue/dev/live/{agent}/{id}`: server-sent events, one per live event of the
/// conversation's running work in this process, `{"submissionId", "event"}` with `event` in
/// flue-core's event format: text and reasoning deltas, model turn ends, task start and end,
/// compaction start and end, provider retries, and a running task's progress (its tool
/// starts and ends, turn ends and deltas, wrapped in its `task_activity`). Nothing is stored: a reader sees what happens while it is
/// connected, the tasks running when it connects first (each one's `task_start`, turn ends
/// and latest activity), and a `lagged` event when it fell behind (the durable stream has the rest).
async fn live(
    State(state): State<Arc<DevConsole>>,
    Path((agent, id)): Path<(String, String)>,
) -> Response {
    let key = flue_core::ConversationKey::new(&agent, &id);
    let receiver = state.runtime.shown_events();
    // Subscribed first: a task that starts meanwhile is in both, which draws it the same.
    let running: Vec<Result<SseEvent, Infallible>> = state
        .runtime
        .running_task_events(&key)
        .iter()
        .map(|event| Ok(live_event(event)))
        .collect();
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
    let events = futures::StreamExt::chain(futures::stream::iter(running), events);
    no_store(
        Sse::new(events)
            .keep_alive(KeepAlive::default())
            .into_response(),
    )
}

/// One shown event as the console reads it: `{"submissionId", "event"}`.
fn live_event(event: &flue_core::submission::RuntimeEvent) -> SseEvent {
    let data = json!({"submissionId": event.submission_id, "event": event.event});
    SseEvent::default().data(data.to_string())
}

#[derive(Deserialize)]
struct TimelineQuery {
    /// The submission to draw (default: the latest).
    submission: Option<String>,
}

/// The most stream batches `GET /_flue/dev/timeline` reads at once.
const STREAM_PAGE: usize = 512;

/// `GET /_flue/dev/timeline/{agent}/{id}[?submission=ID]`: `{"submissions": [...],
/// "timeline": {...}}`, the conversation's submissions and the timeline of one (the latest
/// without `submission`; `null` when it has none). A `submission` the conversation does not
/// hold is a 404 naming it.
async fn timeline(
    State(state): State<Arc<DevConsole>>,
    Path((agent, id)): Path<(String, String)>,
    Query(query): Query<TimelineQuery>,
) -> Response {
    let key = flue_core::ConversationKey::new(&agent, &id);
    let batches = match read_stream(state.store().as_ref(), &key).await {
        Ok(batches) => batches,
        Err(err) => {
            tracing::warn!(target: LOG_TARGET, error = %err, "cannot read a conversation's stream");
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                axum::Json(json!({"error": {"type": "internal_error",
                    "message": "the conversation cannot be read; see the terminal"}})),
            )
                .into_response();
        }
    };
    let submissions = crate::timeline::submissions(&batches);
    let chosen = match &query.submission {
        Some(wanted) => Some(wanted.clone()),
        None => submissions.last().map(|item| item.submission_id.clone()),
    };
    let drawn = chosen
        .as_deref()
        .and_then(|id| crate::timeline::timeline(&batches, id, flue_core::util::now_ms()));
    if let (Some(wanted), None) = (&query.submission, &drawn) {
        return (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"error": {"type": "submission_not_found",
                "message": format!("conversation {id:?} of agent {agent:?} has no submission \
                    {wanted:?}; the `submission` parameter takes one of `submissions`"),
                "submissions": submissions}})),
        )
            .into_response();
    }
    no_store(axum::Json(json!({"submissions": submissions, "timeline": drawn})).into_response())
}

#[derive(Deserialize)]
struct PromptQuery {
    /// The session (default: the conversation's root session).
    session: Option<String>,
    /// The `N`-th model call of the session, from 1.
    turn: Option<usize>,
    /// The model call stored at this index of the session's log.
    index: Option<u64>,
}

/// `GET /_flue/dev/prompt/{agent}/{id}?turn=N` (or `?index=I`, and `&session=S` for a task's
/// session): one model call's prompt (see [`crate::prompts::prompt_of`]). A 400 names the
/// missing parameter; a 404 says how many calls the session has.
async fn prompt(
    State(state): State<Arc<DevConsole>>,
    Path((agent, id)): Path<(String, String)>,
    Query(query): Query<PromptQuery>,
) -> Response {
    let error = |status: StatusCode, kind: &str, message: String| {
        (
            status,
            axum::Json(json!({"error": {"type": kind, "message": message}})),
        )
            .into_response()
    };
    let which = match (query.turn, query.index) {
        (Some(turn), _) => Call::Turn(turn),
        (None, Some(index)) => Call::Index(index),
        (None, None) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "name the model call: `turn=N` (the N-th of the session, from 1) or `index=I` \
                 (its record's index in the session's log)"
                    .to_owned(),
            );
        }
    };
    let session = query.session.unwrap_or_else(|| DEFAULT_SESSION.to_owned());
    let instance_id = flue_core::ConversationKey::new(&agent, &id).instance_id();
    let key = flue_core::store::SessionKey::new(instance_id, session.clone());
    let records = match state.store().load(&key, 0).await {
        Ok(Some(log)) => log.records,
        Ok(None) => Vec::new(),
        Err(err) => {
            tracing::warn!(target: LOG_TARGET, error = %err, "cannot read a session");
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal_error",
                "the session cannot be read; see the terminal".to_owned(),
            );
        }
    };
    let recorder = state.prompts.as_ref().map(|(recorder, _)| recorder);
    match crate::prompts::prompt_of(&records, which, recorder) {
        Some(mut shown) => {
            // Not recorded: the root agent's prompt as it is now, said to be so.
            if let (Some((_, assembly)), Value::Object(map)) = (&state.prompts, &mut shown)
                && !map.contains_key("recorded")
                && session == DEFAULT_SESSION
            {
                let now = match assembly(agent.clone()).await {
                    Ok((system, tools)) => {
                        json!({"system": system, "tools": crate::prompts::tools_json(&tools)})
                    }
                    Err(message) => json!({"error": message}),
                };
                map.insert("assembled".into(), now);
            }
            no_store(axum::Json(shown).into_response())
        }
        None => {
            let calls = records
                .iter()
                .filter(|stored| {
                    matches!(
                        stored.record,
                        flue_core::Record::Assistant(_) | flue_core::Record::FailedTurn(_)
                    )
                })
                .count();
            error(
                StatusCode::NOT_FOUND,
                "model_call_not_found",
                format!(
                    "session {session:?} of conversation {id:?} has {calls} model call(s); \
                     `turn` takes 1 to {calls}, `index` the index of one's record"
                ),
            )
        }
    }
}

/// Every batch of `key`'s stream, in order; none for a conversation without one.
async fn read_stream(
    store: &dyn DynConversationStore,
    key: &flue_core::ConversationKey,
) -> Result<Vec<flue_core::StreamBatch>, flue_core::FlueError> {
    if store.conversation(key).await?.is_none() {
        return Ok(Vec::new());
    }
    let mut batches = Vec::new();
    let mut after = flue_core::Offset::START;
    loop {
        let page = store.read_stream(key, after, STREAM_PAGE).await?;
        let done = page.up_to_date || page.batches.is_empty();
        after = page.next_offset;
        batches.extend(page.batches);
        if done {
            return Ok(batches);
        }
    }
}

fn no_store(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

mod evals;
#[cfg(test)]
mod tests;
