//! Serving the router on a TCP listener, so that a handful of sockets cannot deny service:
//! every connection holds one of `max_connections` slots; hyper's header-read timer closes a
//! connection that has not delivered a complete request head in time, whether it is new,
//! sending one byte a second, or idle between keep-alive requests (a response being written,
//! an SSE stream, does not count: it is not waiting for a head); and when the slots are full,
//! a new connection closes the connection that has been idle (no request in flight) the
//! longest, once it has been idle a moment (a quarter of the header timeout, at most 1 s),
//! instead of waiting for it to time out. The [`RequestGuard`] is applied to the whole app.
//! Graceful shutdown: stop accepting, close idle connections, let open requests finish.
//!
//! A request head hyper cannot parse never reaches the router: hyper answers it itself with a
//! bare status (400 for a malformed head, 414 for a target over the `http` crate's 65,534
//! bytes, 431 for headers over its read buffer) and closes the connection, and it has no
//! setting for that answer. [`Enveloped`] recognizes such an answer on its way out (a response
//! head written while no request is in flight on the connection, with no body and no
//! content type) and sends the same status with the JSON error envelope instead.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::body::Bytes;
use axum::http::Request;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper::rt::Write as _;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::error::ApiError;
use crate::guard::{MAX_URI_BYTES, RequestGuard};

/// How [`serve`] holds connections.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Most open connections at once (SSE streams included); at the limit, the connection
    /// idle the longest is closed for a new one, and with none idle new ones wait.
    pub max_connections: usize,
    /// How long a connection may take to deliver a complete request head, counted from its
    /// opening or from the end of its previous response (so also the keep-alive idle time).
    pub header_timeout: Duration,
    /// The hosts, origins and request forms accepted; `None` serves the router as it is.
    pub guard: Option<RequestGuard>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            max_connections: 20_000,
            header_timeout: Duration::from_secs(20),
            guard: Some(RequestGuard::loopback()),
        }
    }
}

/// The smallest accept queue [`bind`] asks for (the kernel's default cap was 128 for years).
const MIN_BACKLOG: u32 = 128;

/// Binds a listener for [`serve`] whose accept queue holds `max_connections` connections
/// (at least 128; the kernel caps it at `net.core.somaxconn`). `TcpListener::bind` asks for
/// 128: a burst of clients larger than that has SYNs dropped, and each dropped one costs
/// its client a one-second retransmit, while the slots could take them all.
pub fn bind(addr: SocketAddr, max_connections: usize) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    // What std and tokio's `TcpListener::bind` set on Unix: a restarted server binds its port
    // again while the old connections linger in TIME_WAIT.
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    let backlog = u32::try_from(max_connections)
        .unwrap_or(u32::MAX)
        .clamp(MIN_BACKLOG, i32::MAX.unsigned_abs());
    socket.listen(backlog)
}

/// Serves `router` on `listener` as `options` say until `shutdown` resolves; then closes idle
/// connections and returns once the open requests have finished (an SSE stream never does:
/// bound the wait with a timeout).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    options: ServeOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let port = listener.local_addr()?.port();
    let router = match &options.guard {
        Some(guard) => guard.layer(router, port),
        None => router,
    };
    let min_idle = (options.header_timeout / 4).min(Duration::from_secs(1));
    let slots = Arc::new(Slots::new(options.max_connections.max(1), min_idle));
    let stop = CancellationToken::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(options.header_timeout)
        .keep_alive(true);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(err) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %err, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let slot = tokio::select! {
            () = &mut shutdown => break,
            slot = slots.admit() => slot,
        };
        let _ = stream.set_nodelay(true);
        let io = Enveloped {
            io: TokioIo::new(stream),
            slot: Arc::clone(&slot.slot),
            replacement: None,
        };
        let connection = connection(io, router.clone(), slot, http.clone(), stop.clone());
        tokio::spawn(connection);
    }
    stop.cancel();
    slots.all_closed().await;
    Ok(())
}

/// Serves one connection until it ends, is evicted, or (after shutdown) has finished its
/// requests.
async fn connection(
    io: Enveloped,
    router: Router,
    slot: SlotGuard,
    http: hyper::server::conn::http1::Builder,
    stop: CancellationToken,
) {
    let state = Arc::clone(&slot.slot);
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let busy = Busy::start(Arc::clone(&state));
        let router = router.clone();
        // Boxed: hyper keeps a slot the size of this future for the connection's whole life,
        // and an idle connection (an SSE stream, keep-alive) should hold a pointer there, not
        // the router's future; the box lives only while a request is being answered.
        Box::pin(async move {
            let response = router.oneshot(request).await?;
            Ok::<_, std::convert::Infallible>(
                response.map(|body| Body::new(Tracked { body, _busy: busy })),
            )
        })
    });
    let conn = http.serve_connection(io, service);
    let mut conn = std::pin::pin!(conn);
    let evicted = slot.slot.evict.clone();
    tokio::select! {
        _ = conn.as_mut() => {}
        () = evicted.cancelled() => {}
        () = stop.cancelled() => {
            conn.as_mut().graceful_shutdown();
            tokio::select! {
                _ = conn.as_mut() => {}
                () = evicted.cancelled() => {}
            }
        }
    }
    drop(slot);
}

/// The open connections.
struct Slots {
    max: usize,
    /// How long a connection must have been idle to be closed for a new one (a fresh
    /// connection's request head may still be on the way).
    min_idle: Duration,
    open: Mutex<Open>,
    changed: Notify,
}

#[derive(Default)]
struct Open {
    next_id: u64,
    slots: HashMap<u64, Arc<Slot>>,
}

/// One open connection: requests in flight, idle since when, and its eviction switch.
struct Slot {
    busy: AtomicUsize,
    idle_since: Mutex<Instant>,
    evict: CancellationToken,
}

impl Slots {
    fn new(max: usize, min_idle: Duration) -> Self {
        Self {
            max,
            min_idle,
            open: Mutex::new(Open::default()),
            changed: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A slot for a new connection: at once below the limit; else after closing the
    /// connection idle the longest, or waiting for one to close.
    async fn admit(self: &Arc<Self>) -> SlotGuard {
        loop {
            let notified = self.changed.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            let mut eligible = None;
            {
                let mut open = self.lock();
                if open.slots.len() < self.max {
                    open.next_id += 1;
                    let id = open.next_id;
                    let slot = Arc::new(Slot {
                        busy: AtomicUsize::new(0),
                        idle_since: Mutex::new(Instant::now()),
                        evict: CancellationToken::new(),
                    });
                    open.slots.insert(id, Arc::clone(&slot));
                    return SlotGuard {
                        slots: Arc::clone(self),
                        id,
                        slot,
                    };
                }
                let victim = open
                    .slots
                    .values()
                    .filter(|slot| {
                        slot.busy.load(Ordering::Acquire) == 0 && !slot.evict.is_cancelled()
                    })
                    .map(|slot| (slot.idle_since(), slot))
                    .min_by_key(|(since, _)| *since);
                match victim {
                    Some((since, victim)) if since.elapsed() >= self.min_idle => {
                        tracing::debug!(
                            "connection slots full: closing the longest idle connection"
                        );
                        victim.evict.cancel();
                    }
                    // Its request head may be on the way: evict it once it has been idle long
                    // enough, unless a slot frees first.
                    Some((since, _)) => eligible = Some(since + self.min_idle),
                    None => {}
                }
            }
            match eligible {
                Some(at) => {
                    let _ = tokio::time::timeout_at(at.into(), notified).await;
                }
                None => notified.await,
            }
        }
    }

    /// Resolves once no connection is open.
    async fn all_closed(&self) {
        loop {
            let notified = self.changed.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if self.lock().slots.is_empty() {
                return;
            }
            notified.await;
        }
    }
}

impl Slot {
    fn idle_since(&self) -> Instant {
        *self
            .idle_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Frees its slot when the connection ends.
struct SlotGuard {
    slots: Arc<Slots>,
    id: u64,
    slot: Arc<Slot>,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        self.slots.lock().slots.remove(&self.id);
        self.slots.changed.notify_waiters();
    }
}

/// One request in flight on a connection, until its response body is written or dropped.
struct Busy(Arc<Slot>);

impl Busy {
    fn start(slot: Arc<Slot>) -> Self {
        slot.busy.fetch_add(1, Ordering::AcqRel);
        Self(slot)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        if self.0.busy.fetch_sub(1, Ordering::AcqRel) == 1 {
            *self
                .0
                .idle_since
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Instant::now();
        }
    }
}

/// A response body that keeps its request counted as in flight.
struct Tracked {
    body: Body,
    _busy: Busy,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A connection's socket, giving hyper's own error answers the JSON envelope (see the module
/// docs).
struct Enveloped {
    io: TokioIo<tokio::net::TcpStream>,
    slot: Arc<Slot>,
    /// The enveloped answer being written in place of hyper's, and how much of it is out.
    replacement: Option<(Vec<u8>, usize)>,
}

impl Enveloped {
    /// Writes what is left of the replacement.
    fn poll_replacement(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some((bytes, written)) = &mut self.replacement {
            while *written < bytes.len() {
                let rest = bytes.get(*written..).unwrap_or_default();
                let n = std::task::ready!(Pin::new(&mut self.io).poll_write(cx, rest))?;
                if n == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                *written += n;
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Takes over `head` when it is hyper's own error answer: it then counts as written, and
    /// the enveloped answer goes out instead (the connection closes after it).
    fn intercept(&mut self, cx: &mut Context<'_>, head: &[u8]) -> Option<io::Result<usize>> {
        if self.replacement.is_some() {
            // Nothing follows an error answer; swallow anything that would.
            return Some(match self.poll_replacement(cx) {
                Poll::Ready(Err(err)) => Err(err),
                _ => Ok(head.len()),
            });
        }
        if self.slot.busy.load(Ordering::Acquire) != 0 {
            return None;
        }
        let replacement = enveloped_answer(head)?;
        self.replacement = Some((replacement, 0));
        // What cannot go out now goes out on flush.
        if let Poll::Ready(Err(err)) = self.poll_replacement(cx) {
            return Some(Err(err));
        }
        Some(Ok(head.len()))
    }
}

/// The enveloped answer for `head` when it is an error answer hyper wrote by itself: a
/// complete response head with no body, no content type, and status 400, 414 or 431.
fn enveloped_answer(head: &[u8]) -> Option<Vec<u8>> {
    let rest = head
        .strip_prefix(b"HTTP/1.1 ")
        .or_else(|| head.strip_prefix(b"HTTP/1.0 "))?;
    let end = head.windows(4).position(|window| window == b"\r\n\r\n")?;
    if end + 4 != head.len() {
        return None;
    }
    let lower = head.to_ascii_lowercase();
    if lower.windows(13).any(|window| window == b"content-type:") {
        return None;
    }
    let error = match rest.get(..4)? {
        b"400 " => ApiError::invalid_request(
            "The request head does not parse as HTTP/1.1 (its method, target, version or a \
             header).",
        ),
        b"414 " => ApiError::uri_too_long(MAX_URI_BYTES),
        b"431 " => ApiError::for_status(
            axum::http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "The request headers are too large: send at most about 400 KiB of headers.".into(),
        ),
        _ => return None,
    };
    let status = error.status();
    let body = error.envelope_bytes();
    let mut answer = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(&body);
    Some(answer)
}

impl hyper::rt::Read for Enveloped {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for Enveloped {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if let Some(done) = self.intercept(cx, buf) {
            return Poll::Ready(done);
        }
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        // hyper's own answer is a head alone: one buffer.
        let mut filled = bufs.iter().filter(|buf| !buf.is_empty());
        if let (Some(only), None) = (filled.next(), filled.next())
            && let Some(done) = self.intercept(cx, only)
        {
            return Poll::Ready(done);
        }
        if self.replacement.is_some() {
            let total = bufs.iter().map(|buf| buf.len()).sum();
            return Poll::Ready(Ok(total));
        }
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.poll_replacement(cx))?;
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.poll_replacement(cx))?;
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
