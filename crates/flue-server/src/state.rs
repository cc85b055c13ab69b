//! What every handler shares: the router's options ([`ServerConfig`]) and its one state, the
//! runtime and those options behind one `Arc`.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use crate::durable::DurableRuntime;

/// Limits and options of the router. `Default` is what `flue serve` uses.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Largest accepted request body, bytes (a 14 MiB base64 image fits the default).
    pub body_limit: usize,
    /// Bound on one request's handling (long-polls included; streams only until their
    /// headers).
    pub request_timeout: Duration,
    /// How long a long-poll waits for data before answering `[]`.
    pub long_poll_timeout: Duration,
    /// SSE heartbeat comment interval.
    pub heartbeat_interval: Duration,
    /// SSE control event interval when nothing happens.
    pub control_interval: Duration,
    /// Batches per updates response (the protocol fixes 100).
    pub page_size: usize,
    /// Bearer token every request must carry, when set. Never logged.
    pub token: Option<String>,
    /// Origins allowed cross-origin; empty = no CORS headers at all. Checked with
    /// [`check_origins`](crate::check_origins); values that fail it are left out.
    pub cors_origins: Vec<String>,
    /// Most bytes the bodies of all requests in flight may declare together (a body without a
    /// declared length counts as `body_limit`); further requests wait for room, at most half
    /// the request timeout, then get 503.
    pub inflight_body_limit: usize,
    /// The workspace root the agents' file tools write to (a local sandbox's root): where
    /// `POST .../rewind` restores files. `None`: rewinds are refused (`rewind_unavailable`).
    pub workspace_root: Option<std::path::PathBuf>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            body_limit: 20 * 1024 * 1024,
            request_timeout: Duration::from_secs(60),
            long_poll_timeout: Duration::from_secs(30),
            heartbeat_interval: Duration::from_secs(15),
            control_interval: Duration::from_secs(30),
            page_size: 100,
            token: None,
            cors_origins: Vec::new(),
            inflight_body_limit: 64 * 1024 * 1024,
            workspace_root: None,
        }
    }
}

/// The router's shared state: the runtime and the configuration, behind one `Arc`.
pub(crate) struct AppState {
    pub(crate) runtime: DurableRuntime,
    pub(crate) config: ServerConfig,
    /// The in-flight body budget, one permit per KiB.
    pub(crate) bodies: Arc<Semaphore>,
}

/// Bodies from this size on keep their share of the in-flight budget past admission, until
/// their submission settles or pauses: the message they carry is held in memory (record,
/// stream batch, model request) while it runs. Smaller ones release it at the response head.
pub(crate) const HELD_BODY_BYTES: usize = 256 * 1024;

/// The request's share of the in-flight body budget, put in its extensions by the budget layer;
/// `POST /agents/<agent>/<id>` takes it to hold it until the submission settles or pauses.
/// Released when the request ends unless taken.
#[derive(Clone)]
pub(crate) struct BudgetHold(Arc<std::sync::Mutex<Option<tokio::sync::OwnedSemaphorePermit>>>);

impl BudgetHold {
    pub(crate) fn new(permit: tokio::sync::OwnedSemaphorePermit) -> Self {
        Self(Arc::new(std::sync::Mutex::new(Some(permit))))
    }

    /// The permit, if nobody took it yet.
    pub(crate) fn take(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}
