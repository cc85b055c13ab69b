//! The legacy MCP transport, HTTP + server-sent events, as an rmcp [`Transport`].
//!
//! rmcp dropped its client for this transport, and many servers still speak it:
//!
//! 1. `GET` the server url with `Accept: text/event-stream`; the response is an event stream.
//! 2. The first `endpoint` event carries the url (usually relative, with a session id) to which
//!    every JSON-RPC message is `POST`ed. It must have the same origin as the server url, so
//!    headers (tokens) never go to another host.
//! 3. The server answers each `POST` with `202 Accepted` and sends the JSON-RPC replies, and
//!    its own requests and notifications, as `message` events on the stream.
//!
//! The stream is read by a background task that stops when the transport is dropped. When the
//! stream ends, [`Transport::receive`] returns `None` and rmcp fails every pending request.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use flue_core::util::sse::{SseEvent, SseParser};
use futures::StreamExt;
use reqwest::Url;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue};
use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

#[cfg(test)]
mod tests;

/// Messages read ahead of the client.
const INCOMING_BUFFER: usize = 64;

/// A connected legacy SSE session.
pub(crate) struct SseTransport {
    http: reqwest::Client,
    post_url: Url,
    headers: HeaderMap,
    timeout: Duration,
    incoming: mpsc::Receiver<RxJsonRpcMessage<RoleClient>>,
    reader: JoinHandle<()>,
}

/// Why the SSE transport failed.
#[derive(Debug)]
pub(crate) struct SseError {
    /// The server answered, but not as the protocol says (no endpoint, wrong origin, ...).
    pub(crate) malformed: bool,
    message: String,
    source: Option<reqwest::Error>,
}

impl SseTransport {
    /// Opens the event stream at `url` and waits (up to `timeout`) for the `endpoint` event.
    pub(crate) async fn connect(
        url: &str,
        headers: HeaderMap,
        timeout: Duration,
    ) -> Result<Self, SseError> {
        crate::install_crypto_provider();
        let sse_url =
            Url::parse(url).map_err(|err| SseError::setup(format!("invalid url: {err}")))?;
        let http = reqwest::Client::builder()
            .connect_timeout(timeout)
            .build()
            .map_err(|err| SseError::http("cannot create the http client", err))?;
        let response = tokio::time::timeout(
            timeout,
            http.get(sse_url.clone())
                .headers(headers.clone())
                .header(ACCEPT, HeaderValue::from_static("text/event-stream"))
                .send(),
        )
        .await
        .map_err(|_| SseError::setup(format!("no answer within {} s", timeout.as_secs_f32())))?
        .map_err(|err| SseError::http("cannot open the event stream", err))?;
        let status = response.status();
        if !status.is_success() {
            return Err(SseError::setup(format!(
                "opening the event stream answered {status}; check the url (legacy servers usually serve it at /sse) and the headers"
            )));
        }
        let mut events = Box::pin(event_stream(response));
        let endpoint = tokio::time::timeout(timeout, async {
            while let Some(event) = events.next().await {
                let event = event?;
                if event.event == "endpoint" {
                    return Ok(Some(event.data));
                }
            }
            Ok(None)
        })
        .await
        .map_err(|_| {
            SseError::malformed(format!(
                "the event stream sent no `endpoint` event within {} s",
                timeout.as_secs_f32()
            ))
        })??;
        let Some(endpoint) = endpoint else {
            return Err(SseError::malformed(
                "the event stream ended before its `endpoint` event".to_owned(),
            ));
        };
        let post_url = resolve_endpoint(&sse_url, &endpoint)?;

        let (sender, incoming) = mpsc::channel(INCOMING_BUFFER);
        let reader = tokio::spawn(async move {
            while let Some(Ok(event)) = events.next().await {
                if event.event != "message" {
                    continue;
                }
                // A message that is not JSON-RPC cannot be matched to a request; skip it like
                // rmcp's stdio transport does (the request then times out).
                let Ok(message) = serde_json::from_str(&event.data) else {
                    continue;
                };
                if sender.send(message).await.is_err() {
                    break;
                }
            }
        });
        Ok(Self {
            http,
            post_url,
            headers,
            timeout,
            incoming,
            reader,
        })
    }
}

impl Transport<RoleClient> for SseTransport {
    type Error = SseError;

    fn name() -> Cow<'static, str> {
        "legacy-sse".into()
    }

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let request = serde_json::to_vec(&item).map(|body| {
            self.http
                .post(self.post_url.clone())
                .headers(self.headers.clone())
                .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
                .timeout(self.timeout)
                .body(body)
        });
        async move {
            let request = request
                .map_err(|err| SseError::setup(format!("cannot encode a message: {err}")))?;
            let response = request
                .send()
                .await
                .map_err(|err| SseError::http("cannot post a message", err))?;
            let status = response.status();
            if !status.is_success() {
                return Err(SseError::setup(format!(
                    "posting a message answered {status}"
                )));
            }
            Ok(())
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.incoming.recv()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.reader.abort();
        self.incoming.close();
        Ok(())
    }
}

impl Drop for SseTransport {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl SseError {
    fn setup(message: String) -> Self {
        Self {
            malformed: false,
            message,
            source: None,
        }
    }

    fn malformed(message: String) -> Self {
        Self {
            malformed: true,
            message,
            source: None,
        }
    }

    fn http(context: &str, err: reqwest::Error) -> Self {
        // reqwest's message names the url, never the headers.
        Self {
            malformed: false,
            message: format!("{context}: {}", error_chain(&err)),
            source: Some(err),
        }
    }
}

impl fmt::Display for SseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SseError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_ref()
            .map(|err| err as &(dyn std::error::Error + 'static))
    }
}

/// The events of an HTTP response body; an error ends the stream.
fn event_stream(
    response: reqwest::Response,
) -> impl futures::Stream<Item = Result<SseEvent, SseError>> + Send + 'static {
    let state = (response.bytes_stream(), SseParser::default(), Vec::new());
    futures::stream::unfold(Some(state), |state| async move {
        let (mut body, mut parser, mut ready) = state?;
        loop {
            if !ready.is_empty() {
                let event = ready.remove(0);
                return Some((Ok(event), Some((body, parser, ready))));
            }
            match body.next().await {
                Some(Ok(chunk)) => {
                    if let Err(err) = parser.feed(&chunk, &mut ready) {
                        return Some((Err(SseError::malformed(err.to_string())), None));
                    }
                }
                Some(Err(err)) => {
                    return Some((Err(SseError::http("the event stream broke", err)), None));
                }
                None => return None,
            }
        }
    })
}

/// The `POST` url named by an `endpoint` event, checked to be on the server's origin.
pub(crate) fn resolve_endpoint(sse_url: &Url, endpoint: &str) -> Result<Url, SseError> {
    let post_url = sse_url
        .join(endpoint.trim())
        .map_err(|err| SseError::malformed(format!("the `endpoint` event is not a url ({err})")))?;
    if post_url.origin() != sse_url.origin() {
        return Err(SseError::malformed(format!(
            "the `endpoint` event points to another origin ({}); refusing to send requests there",
            post_url.origin().ascii_serialization()
        )));
    }
    Ok(post_url)
}

/// `err` and its sources, joined by `: `.
pub(crate) fn error_chain(err: &dyn std::error::Error) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(inner) = source {
        let text = inner.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = inner.source();
    }
    message
}
