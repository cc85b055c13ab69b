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

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Write as _};

    use super::*;

    /// A loopback server answering one request with `answer` (the whole response).
    fn serve_once(answer: Vec<u8>) -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let Ok((mut stream, _)) = listener.accept() else {
                return;
            };
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(&answer);
        });
        format!("http://127.0.0.1:{port}/hook")
    }

    fn post(client: &ReqwestHookClient, url: &str) -> Result<HttpHookResponse, HttpHookError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(client.post(
            url,
            Vec::new(),
            "{}".to_owned(),
            Duration::from_secs(30),
            1024,
        ))
    }

    #[test]
    fn a_body_over_the_limit_is_refused_and_a_redirect_is_not_followed() {
        let client = ReqwestHookClient::new();
        let long = format!(
            "HTTP/1.1 200 OK\r\ncontent-length: 2000\r\nconnection: close\r\n\r\n{}",
            "x".repeat(2000)
        );
        let answer = post(&client, &serve_once(long.into_bytes()));
        assert!(
            matches!(&answer, Err(HttpHookError::BadBody(why)) if why.contains("longer than 1024")),
            "{answer:?}"
        );
        let elsewhere = serve_once(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n".to_vec());
        let redirect = format!(
            "HTTP/1.1 307 Temporary Redirect\r\nlocation: {elsewhere}\r\ncontent-length: 0\r\n\
             connection: close\r\n\r\n"
        );
        let answer = post(&client, &serve_once(redirect.into_bytes())).unwrap();
        assert_eq!(answer.status, 307);
    }
}
