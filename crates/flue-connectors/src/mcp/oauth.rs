//! OAuth 2.1 for remote MCP servers: the settings ([`McpOAuth`]), where tokens live
//! ([`McpTokenStore`]), the reactive layer that authorizes when a server answers 401 or 403
//! `insufficient_scope` and retries, and the login flow with a loopback redirect.
//!
//! The protocol work is rmcp's (`rmcp::transport::auth`, on the `oauth2` crate): discovery from
//! the `WWW-Authenticate` challenge, protected-resource and authorization-server metadata with
//! their fallbacks, scope selection, dynamic registration, client ID metadata documents, PKCE,
//! the `resource` parameter, token endpoint authentication, refresh. Ours is what sits around
//! it: when to authorize (on a challenge, at most [`MAX_AUTHORIZATIONS`] times per request),
//! how the redirect comes back (a loopback listener for a person, or following the
//! authorization server's redirect for servers that approve without one), and storing tokens
//! through [`McpTokenStore`].

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use flue_core::{FlueError, error::McpErrorReason};
use futures::stream::BoxStream;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::auth::{AuthorizationCallback, OAuthState};
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use rmcp::transport::{
    AuthClient, AuthError, AuthorizationManager, AuthorizationRequest, ClientCredentialsConfig,
    CredentialStore, StoredCredentials,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// Authorizations one request may trigger before it fails (a server that keeps asking for a
/// scope it never grants must not loop).
pub const MAX_AUTHORIZATIONS: u32 = 3;

/// How long `flue mcp login` waits for the browser to come back to the loopback redirect.
const LOGIN_WAIT: Duration = Duration::from_secs(300);

/// OAuth settings of one remote MCP server. Every field is optional: with none, flue discovers
/// everything from the server and registers itself dynamically.
#[derive(Clone, Default)]
pub struct McpOAuth {
    /// A client id registered with the authorization server beforehand.
    pub client_id: Option<String>,
    /// The secret of [`McpOAuth::client_id`] (a confidential client).
    pub client_secret: Option<String>,
    /// The https url of a client ID metadata document describing flue, used as the client id
    /// when the authorization server supports them.
    pub client_metadata_url: Option<String>,
    /// Scopes to ask for; when empty, those of the server's challenge, else of its
    /// protected-resource metadata, else none.
    pub scopes: Vec<String>,
    /// How tokens are obtained.
    pub grant: McpOAuthGrant,
    /// How the authorization-code flow's redirect comes back.
    pub redirect: McpOAuthRedirect,
    /// Where tokens are kept between runs; in memory for this connection when unset.
    pub store: Option<Arc<dyn McpTokenStore>>,
}

/// How flue obtains tokens. May grow: match with a wildcard arm.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum McpOAuthGrant {
    /// A person approves in a browser (`flue mcp login`); tokens are refreshed after that.
    #[default]
    AuthorizationCode,
    /// Machine to machine: the client id and secret buy tokens directly.
    ClientCredentials,
}

/// How the authorization-code redirect comes back. May grow: match with a wildcard arm.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum McpOAuthRedirect {
    /// A person approves in a browser during `flue mcp login`; a run without valid tokens
    /// fails with an error naming that command.
    #[default]
    Person,
    /// flue fetches the authorization url itself and reads the code from the redirect, for
    /// authorization servers that approve without a person.
    Follow,
}

/// Where one server's OAuth tokens are kept: an opaque JSON document per server.
///
/// flue-host keeps them in the workspace store (`.flue/flue.db`); they never reach the
/// sandbox, logs, transcripts or events.
pub trait McpTokenStore: Send + Sync + 'static {
    /// The stored document, if any.
    fn load(&self) -> Result<Option<String>, FlueError>;
    /// Replaces the stored document.
    fn save(&self, document: &str) -> Result<(), FlueError>;
    /// Forgets the tokens.
    fn clear(&self) -> Result<(), FlueError>;
}

impl fmt::Debug for McpOAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpOAuth")
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "[redacted]"),
            )
            .field("client_metadata_url", &self.client_metadata_url)
            .field("scopes", &self.scopes)
            .field("grant", &self.grant)
            .field("redirect", &self.redirect)
            .field("store", &self.store.is_some())
            .finish()
    }
}

/// Runs the authorization for server `server` at `url` with a loopback redirect: `show_url` is
/// called with the url the person must open, then the tokens are stored. With the client
/// credentials grant no person is involved.
///
/// Fails with [`FlueError::Mcp`] (`mcp_auth_required`) naming the step that failed.
pub async fn login_mcp_server(
    server: &str,
    url: &str,
    oauth: McpOAuth,
    show_url: &(dyn Fn(&str) + Send + Sync),
) -> Result<(), FlueError> {
    crate::install_crypto_provider();
    let authorizer = Authorizer::new(server, url, oauth, &reqwest::Client::new())
        .await
        .map_err(|err| auth_error(server, &err))?;
    let challenge = probe(url).await;
    let manager = authorizer
        .obtain(
            challenge.as_deref(),
            Vec::new(),
            Redirect::Loopback(show_url),
        )
        .await
        .map_err(|message| auth_error(server, &message))?;
    drop(manager);
    Ok(())
}

/// An `mcp_auth_required` error about `server`.
pub(crate) fn auth_error(server: &str, message: &str) -> FlueError {
    FlueError::Mcp {
        server: server.to_owned(),
        reason: McpErrorReason::AuthRequired,
        message: message.to_owned(),
        source: None,
    }
}

/// Where the redirect of one authorization comes back.
enum Redirect<'a> {
    Follow,
    Loopback(&'a (dyn Fn(&str) + Send + Sync)),
}

/// Decides when to authorize and runs rmcp's flows; shared by every request of a connection.
pub(crate) struct Authorizer {
    server: String,
    url: String,
    oauth: McpOAuth,
    /// The manager the requests' tokens come from (the same one [`AuthClient`] holds).
    manager: Arc<tokio::sync::Mutex<AuthorizationManager>>,
    /// One authorization at a time.
    serial: tokio::sync::Mutex<()>,
    /// Why the last authorization could not happen, for the error the caller sees.
    failure: std::sync::Mutex<Option<String>>,
    http: AuthClient<reqwest::Client>,
}

impl Authorizer {
    /// The authorizer for `server` at `url`, with the tokens of the store when there are any.
    pub(crate) async fn new(
        server: &str,
        url: &str,
        oauth: McpOAuth,
        http: &reqwest::Client,
    ) -> Result<Arc<Self>, String> {
        let mut manager = new_manager(url, &oauth).await?;
        if oauth.store.is_some() {
            // Stored tokens (and their refresh) need the server's metadata; when it cannot be
            // fetched now, the first request's challenge starts over.
            let _ = manager.initialize_from_store().await;
        }
        let http = AuthClient::new(http.clone(), manager);
        Ok(Arc::new(Self {
            server: server.to_owned(),
            url: url.to_owned(),
            oauth,
            manager: Arc::clone(&http.auth_manager),
            serial: tokio::sync::Mutex::new(()),
            failure: std::sync::Mutex::new(None),
            http,
        }))
    }

    /// Why authorization failed last, if it did.
    pub(crate) fn failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set_failure(&self, message: Option<String>) {
        *self.failure.lock().unwrap_or_else(PoisonError::into_inner) = message;
    }

    /// Whether the store holds tokens (possibly expired ones) for this server.
    fn has_stored_tokens(&self) -> bool {
        let document = self
            .oauth
            .store
            .as_ref()
            .and_then(|store| store.load().ok().flatten());
        document.is_some_and(|document| document.contains("\"access_token\""))
    }

    /// The current access token (refreshed when it is about to expire), if there is one.
    async fn token(&self) -> Option<String> {
        self.manager.lock().await.get_access_token().await.ok()
    }

    /// Reacts to a challenge answering a request sent with `sent`: authorizes (or notes that
    /// another request already did). `false` when no new token can be had.
    async fn authorize(&self, challenge: &str, sent: Option<&str>) -> bool {
        let _one_at_a_time = self.serial.lock().await;
        let current = self.token().await;
        if current.is_some() && current.as_deref() != sent {
            return true;
        }
        let granted = self.manager.lock().await.get_current_scopes().await;
        let obtained = match (self.oauth.grant, self.oauth.redirect) {
            (McpOAuthGrant::ClientCredentials, _) | (_, McpOAuthRedirect::Follow) => {
                self.obtain(Some(challenge), granted, Redirect::Follow)
                    .await
            }
            _ => Err(if sent.is_some() || self.has_stored_tokens() {
                format!(
                    "the authorization expired or was revoked: run `flue mcp login {}` to sign in again",
                    self.server
                )
            } else {
                format!(
                    "the server needs authorization: run `flue mcp login {}` to sign in",
                    self.server
                )
            }),
        };
        match obtained {
            Ok(manager) => {
                *self.manager.lock().await = manager;
                self.set_failure(None);
                true
            }
            Err(message) => {
                self.set_failure(Some(message));
                false
            }
        }
    }

    /// Runs a whole grant and returns the authorized manager; its tokens are in the store.
    async fn obtain(
        &self,
        challenge: Option<&str>,
        granted: Vec<String>,
        redirect: Redirect<'_>,
    ) -> Result<AuthorizationManager, String> {
        if self.oauth.grant == McpOAuthGrant::ClientCredentials {
            return self.client_credentials(challenge).await;
        }
        let listener = match redirect {
            Redirect::Loopback(_) => Some(
                TcpListener::bind(("127.0.0.1", 0))
                    .await
                    .map_err(|err| format!("cannot listen for the redirect on loopback: {err}"))?,
            ),
            Redirect::Follow => None,
        };
        let redirect_uri = match &listener {
            Some(listener) => {
                let port = listener
                    .local_addr()
                    .map_err(|err| format!("cannot listen for the redirect: {err}"))?
                    .port();
                format!("http://127.0.0.1:{port}/callback")
            }
            None => "http://127.0.0.1/callback".to_owned(),
        };
        let mut request = AuthorizationRequest::new(redirect_uri).with_client_name("flue");
        if let Some(challenge) = challenge {
            request = request.with_challenge(challenge);
        }
        let mut scopes = self.oauth.scopes.clone();
        if !scopes.is_empty() || !granted.is_empty() {
            // A step-up asks for what was granted plus what the challenge names.
            scopes.extend(granted);
            if let Some(asked) = challenge.and_then(challenge_scope) {
                scopes.extend(asked.split_whitespace().map(str::to_owned));
            }
            let mut seen = std::collections::HashSet::new();
            scopes.retain(|scope| seen.insert(scope.clone()));
            request = request.with_scopes(scopes);
        } else {
            request = request.with_initial_scope_selection();
        }
        if let Some(client_id) = &self.oauth.client_id {
            request = request.with_preregistered_client(client_id);
            if let Some(secret) = &self.oauth.client_secret {
                request = request.with_client_secret(secret);
            }
        }
        if let Some(document) = &self.oauth.client_metadata_url {
            request = request.with_client_metadata_url(document);
        }
        let manager = new_manager(&self.url, &self.oauth).await?;
        let mut state = OAuthState::Unauthorized(manager);
        state
            .start_authorization(request)
            .await
            .map_err(|err| format!("authorization failed: {err}"))?;
        let auth_url = state
            .get_authorization_url()
            .await
            .map_err(|err| format!("authorization failed: {err}"))?;
        let callback = match (redirect, listener) {
            (Redirect::Loopback(show_url), Some(listener)) => {
                show_url(&auth_url);
                wait_for_redirect(&listener).await?
            }
            _ => follow_redirect(&auth_url).await?,
        };
        AuthorizationCallback::from_redirect_url(&callback)
            .map_err(|err| format!("the authorization server's redirect is not usable: {err}"))?;
        state
            .handle_callback_url(&callback)
            .await
            .map_err(|err| format!("exchanging the authorization code failed: {err}"))?;
        state
            .into_authorization_manager()
            .ok_or_else(|| "authorization did not complete".to_owned())
    }

    /// The client credentials grant: the configured id and secret buy a token.
    async fn client_credentials(
        &self,
        challenge: Option<&str>,
    ) -> Result<AuthorizationManager, String> {
        let (Some(client_id), Some(client_secret)) =
            (&self.oauth.client_id, &self.oauth.client_secret)
        else {
            return Err(
                "the client credentials grant needs `client_id` and `client_secret` in the server's `oauth` settings"
                    .to_owned(),
            );
        };
        let mut manager = new_manager(&self.url, &self.oauth).await?;
        let resolution = manager
            .resolve_metadata_from_challenge(challenge)
            .await
            .map_err(|err| format!("discovering the authorization server failed: {err}"))?;
        manager.set_metadata(resolution.metadata);
        let mut scopes = self.oauth.scopes.clone();
        if scopes.is_empty() {
            scopes = manager.select_initial_scopes(&[]).await;
        }
        let config = ClientCredentialsConfig::ClientSecret {
            client_id: client_id.clone(),
            client_secret: client_secret.clone(),
            scopes,
            resource: Some(self.url.clone()),
        };
        manager
            .validate_client_credentials_metadata(&config)
            .and_then(|()| manager.configure_client_credentials(&config))
            .map_err(|err| format!("the client credentials grant is not possible: {err}"))?;
        manager
            .exchange_client_credentials(&config)
            .await
            .map_err(|err| format!("the client credentials grant failed: {err}"))?;
        Ok(manager)
    }
}

/// A fresh manager for `url` on the configured store.
async fn new_manager(url: &str, oauth: &McpOAuth) -> Result<AuthorizationManager, String> {
    let mut manager = AuthorizationManager::new(url)
        .await
        .map_err(|err| format!("cannot set up OAuth for {url}: {err}"))?;
    if let Some(store) = &oauth.store {
        manager.set_credential_store(StoreAdapter {
            store: Arc::clone(store),
            cache: tokio::sync::Mutex::new(None),
        });
    }
    Ok(manager)
}

/// The `scope` parameter of a `WWW-Authenticate` challenge.
fn challenge_scope(challenge: &str) -> Option<String> {
    let start = challenge.find("scope=")? + "scope=".len();
    let rest = &challenge[start..];
    let value = match rest.strip_prefix('"') {
        Some(quoted) => quoted.split('"').next()?,
        None => rest.split([',', ' ']).next()?,
    };
    Some(value.to_owned())
}

/// An unauthenticated `initialize` to learn the server's challenge, if it sends one.
async fn probe(url: &str) -> Option<String> {
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "flue", "version": env!("CARGO_PKG_VERSION")}
        }
    });
    let response = reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .json(&body)
        .send()
        .await
        .ok()?;
    response
        .headers()
        .get(reqwest::header::WWW_AUTHENTICATE)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
}

/// Fetches the authorization url without following redirects and returns where the
/// authorization server sends the browser back to (the redirect uri with `code` and `state`).
async fn follow_redirect(auth_url: &str) -> Result<String, String> {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|err| format!("cannot build an HTTP client: {err}"))?;
    let response = client
        .get(auth_url)
        .send()
        .await
        .map_err(|err| format!("cannot reach the authorization endpoint: {err}"))?;
    let status = response.status();
    let location = response
        .headers()
        .get(reqwest::header::LOCATION)
        .and_then(|value| value.to_str().ok())
        .filter(|_| status.is_redirection())
        .ok_or_else(|| {
            format!(
                "the authorization server answered {status} instead of redirecting back: it needs a person to approve; use `flue mcp login` instead of `redirect: follow`"
            )
        })?;
    reqwest::Url::parse(auth_url)
        .and_then(|base| base.join(location))
        .map(|url| url.to_string())
        .map_err(|err| format!("the authorization server redirected to a bad url: {err}"))
}

/// Waits for the browser to come back to the loopback listener and returns the full redirect
/// url; answers the browser with a short page.
async fn wait_for_redirect(listener: &TcpListener) -> Result<String, String> {
    let port = listener
        .local_addr()
        .map_err(|err| format!("cannot listen for the redirect: {err}"))?
        .port();
    let wait = async {
        loop {
            let (stream, _) = listener
                .accept()
                .await
                .map_err(|err| format!("cannot accept the redirect: {err}"))?;
            let mut reader = BufReader::new(stream);
            let mut line = String::new();
            if reader.read_line(&mut line).await.is_err() {
                continue;
            }
            let Some(target) = line.split_whitespace().nth(1).map(str::to_owned) else {
                continue;
            };
            if !target.starts_with("/callback") {
                let _ = reader
                    .get_mut()
                    .write_all(
                        b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                    )
                    .await;
                continue;
            }
            let page = "flue: signed in; you can close this tab.";
            let response = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{page}",
                page.len()
            );
            let _ = reader.get_mut().write_all(response.as_bytes()).await;
            return Ok(format!("http://127.0.0.1:{port}{target}"));
        }
    };
    tokio::time::timeout(LOGIN_WAIT, wait)
        .await
        .map_err(|_| "no answer from the browser within 5 minutes".to_owned())?
}

/// rmcp's credential store on a [`McpTokenStore`], read once and then served from memory
/// (rmcp loads the credentials before every request).
struct StoreAdapter {
    store: Arc<dyn McpTokenStore>,
    cache: tokio::sync::Mutex<Option<Option<StoredCredentials>>>,
}

type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, AuthError>> + Send + 'a>>;

impl CredentialStore for StoreAdapter {
    fn load<'a, 'b>(&'a self) -> StoreFuture<'b, Option<StoredCredentials>>
    where
        'a: 'b,
        Self: 'b,
    {
        Box::pin(async move {
            let mut cache = self.cache.lock().await;
            if let Some(cached) = cache.as_ref() {
                return Ok(cached.clone());
            }
            let document = self.store.load().map_err(|err| store_error(&err))?;
            let credentials: Option<StoredCredentials> = match document {
                Some(document) => Some(
                    serde_json::from_str(&document)
                        .map_err(|err| AuthError::CredentialStoreError(err.to_string()))?,
                ),
                None => None,
            };
            *cache = Some(credentials.clone());
            Ok(credentials)
        })
    }

    fn save<'a, 'b>(&'a self, credentials: StoredCredentials) -> StoreFuture<'b, ()>
    where
        'a: 'b,
        Self: 'b,
    {
        Box::pin(async move {
            let document = serde_json::to_string(&credentials)
                .map_err(|err| AuthError::CredentialStoreError(err.to_string()))?;
            let mut cache = self.cache.lock().await;
            *cache = None;
            self.store
                .save(&document)
                .map_err(|err| store_error(&err))?;
            *cache = Some(Some(credentials));
            Ok(())
        })
    }

    fn clear<'a, 'b>(&'a self) -> StoreFuture<'b, ()>
    where
        'a: 'b,
        Self: 'b,
    {
        Box::pin(async move {
            let mut cache = self.cache.lock().await;
            *cache = None;
            self.store.clear().map_err(|err| store_error(&err))?;
            *cache = Some(None);
            Ok(())
        })
    }
}

fn store_error(err: &FlueError) -> AuthError {
    AuthError::CredentialStoreError(err.to_string())
}

/// The streamable-HTTP client of a server with OAuth: requests carry the current token; a 401
/// or a 403 `insufficient_scope` answer to a POST authorizes and retries, at most
/// [`MAX_AUTHORIZATIONS`] times per request.
#[derive(Clone)]
pub(crate) struct OAuthHttpClient {
    pub(crate) authorizer: Arc<Authorizer>,
}

type HttpResult<T> = Result<T, StreamableHttpError<reqwest::Error>>;

impl OAuthHttpClient {
    async fn with_authorization<T, F, Fut>(&self, call: F) -> HttpResult<T>
    where
        F: Fn(Option<String>) -> Fut,
        Fut: Future<Output = HttpResult<T>>,
    {
        let mut n_authorizations = 0;
        loop {
            let token = self.authorizer.token().await;
            let challenge = match call(token.clone()).await {
                Err(StreamableHttpError::AuthRequired(err)) => (
                    err.www_authenticate_header.clone(),
                    StreamableHttpError::AuthRequired(err),
                ),
                Err(StreamableHttpError::InsufficientScope(err)) => (
                    err.www_authenticate_header.clone(),
                    StreamableHttpError::InsufficientScope(err),
                ),
                other => return other,
            };
            let (header, err) = challenge;
            if n_authorizations >= MAX_AUTHORIZATIONS {
                self.authorizer.set_failure(Some(format!(
                    "the server still refuses after {MAX_AUTHORIZATIONS} authorizations ({header}); check the scopes it asks for"
                )));
                return Err(err);
            }
            n_authorizations += 1;
            if !self.authorizer.authorize(&header, token.as_deref()).await {
                return Err(err);
            }
        }
    }
}

impl StreamableHttpClient for OAuthHttpClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<StreamableHttpPostResponse> {
        self.with_authorization(|token| {
            self.authorizer.http.post_message(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
            )
        })
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> HttpResult<StreamableHttpPostResponse> {
        self.with_authorization(|token| {
            self.authorizer.http.post_message_with_response_limits(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
                limits,
            )
        })
        .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<()> {
        let token = self.authorizer.token().await;
        self.authorizer
            .http
            .delete_session(uri, session_id, token, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<BoxStream<'static, Result<sse_stream::Sse, sse_stream::Error>>> {
        let token = self.authorizer.token().await;
        self.authorizer
            .http
            .get_stream(uri, session_id, last_event_id, token, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> HttpResult<BoxStream<'static, Result<sse_stream::Sse, sse_stream::Error>>> {
        let token = self.authorizer.token().await;
        self.authorizer
            .http
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                token,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}
