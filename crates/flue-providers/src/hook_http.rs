//! The HTTP client of flue's http hooks: a POST over the same reqwest and rustls setup as the
//! providers, without proxies and without following redirects (a hook's answer comes from the
//! URL the workspace names, never from another host it points to).

use std::sync::OnceLock;
use std::time::Duration;

use flue_core::hook::{HttpHookClient, HttpHookError, HttpHookResponse};
use flue_core::util::BoxFuture;
use tokio::time::Instant;

use crate::http::client_builder;

/// Seconds a connection may take before the hook counts as unreachable (within its timeout).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Sends http hooks' requests with reqwest; one client for `http://` and one for `https://`,
/// made at their first use.
#[derive(Default)]
pub struct ReqwestHookClient {
    plain: OnceLock<reqwest::Client>,
    tls: OnceLock<reqwest::Client>,
}

impl ReqwestHookClient {
    /// A client; nothing is set up before the first request.
    pub fn new() -> Self {
        Self::default()
    }

    fn client(&self, https: bool) -> Result<&reqwest::Client, HttpHookError> {
        let cell = if https { &self.tls } else { &self.plain };
        if let Some(client) = cell.get() {
            return Ok(client);
        }
        let client = client_builder(https, CONNECT_TIMEOUT)
            .map_err(|failure| HttpHookError::Unreachable(failure.message))?
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|err| {
                HttpHookError::Unreachable(format!("cannot create the HTTP client: {err}"))
            })?;
        Ok(cell.get_or_init(|| client))
    }
}

impl HttpHookClient for ReqwestHookClient {
    fn post<'a>(
        &'a self,
        url: &'a str,
        headers: Vec<(String, String)>,
        body: String,
        timeout: Duration,
        max_body: usize,
    ) -> BoxFuture<'a, Result<HttpHookResponse, HttpHookError>> {
        Box::pin(async move {
            let https = url
                .get(..8)
                .is_some_and(|head| head.eq_ignore_ascii_case("https://"));
            let deadline = Instant::now() + timeout;
            let mut request = self
                .client(https)?
                .post(url)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body);
            for (name, value) in headers {
                request = request.header(name, value);
            }
            let sent = tokio::time::timeout_at(deadline, request.send()).await;
            let mut response = match sent {
                Err(_) => {
                    return Err(HttpHookError::Unreachable(format!(
                        "no answer within {} s (set `timeout` in seconds to allow longer)",
                        timeout.as_secs()
                    )));
                }
                // Without the URL: reqwest's message repeats it, and it may hold credentials.
                Ok(Err(err)) => {
                    return Err(HttpHookError::Unreachable(cause_chain(&err.without_url())));
                }
                Ok(Ok(response)) => response,
            };
            let status = response.status().as_u16();
            let mut bytes = Vec::new();
            loop {
                let chunk = tokio::time::timeout_at(deadline, response.chunk()).await;
                match chunk {
                    Err(_) => {
                        return Err(HttpHookError::BadBody(format!(
                            "the body did not end within {} s",
                            timeout.as_secs()
                        )));
                    }
                    Ok(Err(err)) => {
                        return Err(HttpHookError::BadBody(cause_chain(&err.without_url())));
                    }
                    Ok(Ok(None)) => break,
                    Ok(Ok(Some(chunk))) => {
                        if bytes.len() + chunk.len() > max_body {
                            return Err(HttpHookError::BadBody(format!(
                                "the body is longer than {max_body} bytes"
                            )));
                        }
                        bytes.extend_from_slice(&chunk);
                    }
                }
            }
            Ok(HttpHookResponse {
                status,
                body: String::from_utf8_lossy(&bytes).into_owned(),
            })
        })
    }
}

/// An error and its causes, joined (reqwest's top message alone says little).
fn cause_chain(err: &dyn std::error::Error) -> String {
    let mut message = err.to_string();
    let mut cause = err.source();
    while let Some(current) = cause {
        message.push_str(": ");
        message.push_str(&current.to_string());
        cause = current.source();
    }
    message
}
