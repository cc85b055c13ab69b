//! TLS to the database, as libpq does it: `sslmode` (`disable`, `prefer` (the default),
//! `require`, `verify-ca`, `verify-full`) and `sslrootcert` (a PEM file of trusted CAs; without
//! it, or with `sslrootcert=system`, the platform's roots) in the store URL.
//!
//! tokio-postgres knows `disable`, `prefer` and `require` (whether to ask for TLS) but not the
//! verification modes nor `sslrootcert`, so [`TlsSettings::split`] takes both out of the URL
//! before it is parsed, and [`RustlsConnect`] (a `MakeTlsConnect` over rustls with the ring
//! provider) verifies as the mode says: `prefer` and `require` encrypt without checking the
//! certificate (unless `require` has an `sslrootcert`: then it checks the chain, as libpq does),
//! `verify-ca` checks the chain, `verify-full` the chain and the host name. Every connection the
//! store opens (the pool, the listener, each owner's lock) uses it.

use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use flue_core::FlueError;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::Socket;
use tokio_postgres::config::SslMode as PgSslMode;
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};

/// libpq's `sslmode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum SslMode {
    /// Plain TCP only.
    Disable,
    /// TLS when the server offers it, plain otherwise; the certificate is not checked.
    #[default]
    Prefer,
    /// TLS or fail; the certificate is not checked (unless `sslrootcert` is set).
    Require,
    /// TLS, with a certificate chain to a trusted CA.
    VerifyCa,
    /// TLS, with a trusted chain and a certificate for the host connected to.
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Option<Self> {
        Some(match value {
            "disable" => Self::Disable,
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            _ => return None,
        })
    }

    /// The libpq spelling.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }

    /// Whether tokio-postgres asks for TLS, and insists on it.
    pub(crate) fn negotiation(self) -> PgSslMode {
        match self {
            Self::Disable => PgSslMode::Disable,
            Self::Prefer => PgSslMode::Prefer,
            Self::Require | Self::VerifyCa | Self::VerifyFull => PgSslMode::Require,
        }
    }
}

/// The TLS settings of a store URL.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TlsSettings {
    /// `sslmode`.
    pub(crate) mode: SslMode,
    /// `sslrootcert`: a PEM file of trusted CA certificates; `None` for the platform's roots.
    pub(crate) root_cert: Option<PathBuf>,
}

impl TlsSettings {
    /// Takes `sslmode` and `sslrootcert` out of `url` (a `postgres://` URL's query, or a
    /// `key=value` connection string), returning the rest for tokio-postgres and the settings.
    /// The error names the parameter and the accepted values, never the URL.
    pub(crate) fn split(url: &str) -> Result<(String, Self), String> {
        let mut settings = Self::default();
        let mut take = |key: &str, value: &str| -> Result<bool, String> {
            match key {
                "sslmode" => {
                    settings.mode = SslMode::parse(value).ok_or_else(|| {
                        format!(
                            "sslmode={value:?} is not a TLS mode: use disable, prefer, require, \
                             verify-ca or verify-full"
                        )
                    })?;
                    Ok(true)
                }
                "sslrootcert" => {
                    settings.root_cert =
                        (value != "system" && !value.is_empty()).then(|| PathBuf::from(value));
                    Ok(true)
                }
                _ => Ok(false),
            }
        };
        let rest = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            match url.split_once('?') {
                None => url.to_owned(),
                Some((base, query)) => {
                    let mut kept = Vec::new();
                    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
                        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                        if !take(key, &percent_decode(value))? {
                            kept.push(pair);
                        }
                    }
                    if kept.is_empty() {
                        base.to_owned()
                    } else {
                        format!("{base}?{}", kept.join("&"))
                    }
                }
            }
        } else {
            let mut kept = Vec::new();
            for word in url.split_whitespace() {
                let (key, value) = word.split_once('=').unwrap_or((word, ""));
                if !take(key, value.trim_matches('\''))? {
                    kept.push(word);
                }
            }
            kept.join(" ")
        };
        Ok((rest, settings))
    }

    /// The connector for these settings: loads `sslrootcert` (or the platform's roots) now, so
    /// a missing or unreadable file fails at start with its path, not at each connection.
    pub(crate) fn connector(&self) -> Result<RustlsConnect, FlueError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        // The cause is spelled out in the message, as `connect_failure` does: a source as well
        // would print it twice.
        let setup = |message: String, err: Box<dyn StdError + Send + Sync>| FlueError::Store {
            message: format!("{message}: {err}"),
            source: None,
        };
        let verifier: Arc<dyn ServerCertVerifier> = match (self.mode, &self.root_cert) {
            (SslMode::Disable | SslMode::Prefer, _) | (SslMode::Require, None) => {
                Arc::new(Unchecked(Arc::clone(&provider)))
            }
            (mode, root_cert) => {
                let chain: Arc<dyn ServerCertVerifier> = match root_cert {
                    Some(path) => {
                        let mut roots = RootCertStore::empty();
                        let certs = CertificateDer::pem_file_iter(path)
                            .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                            .map_err(|err| {
                                setup(
                                    format!(
                                        "cannot read sslrootcert {} (a PEM file of CA \
                                         certificates)",
                                        path.display()
                                    ),
                                    Box::new(err),
                                )
                            })?;
                        let (added, _) = roots.add_parsable_certificates(certs);
                        if added == 0 {
                            return Err(FlueError::Store {
                                message: format!(
                                    "sslrootcert {} holds no CA certificate (expected PEM \
                                     `BEGIN CERTIFICATE` blocks)",
                                    path.display()
                                ),
                                source: None,
                            });
                        }
                        rustls::client::WebPkiServerVerifier::builder_with_provider(
                            Arc::new(roots),
                            Arc::clone(&provider),
                        )
                        .build()
                        .map_err(|err| {
                            setup(
                                format!("cannot use sslrootcert {}", path.display()),
                                Box::new(err),
                            )
                        })?
                    }
                    None => Arc::new(
                        rustls_platform_verifier::Verifier::new(Arc::clone(&provider)).map_err(
                            |err| {
                                setup(
                                    "cannot load the system's TLS root certificates (install \
                                     the ca-certificates package, or set sslrootcert=FILE)"
                                        .to_owned(),
                                    Box::new(err),
                                )
                            },
                        )?,
                    ),
                };
                if mode == SslMode::VerifyFull {
                    chain
                } else {
                    Arc::new(ChainOnly(chain))
                }
            }
        };
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|err| setup("cannot configure TLS".to_owned(), Box::new(err)))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(RustlsConnect {
            config: Arc::new(config),
            settings: Arc::new(self.clone()),
        })
    }
}

/// `%XX` escapes of a URL query value decoded (a file path may contain spaces or `&`).
fn percent_decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut idx = 0;
    while idx < bytes.len() {
        if bytes[idx] == b'%'
            && let Some(byte) = value
                .get(idx + 1..idx + 3)
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
        {
            out.push(byte);
            idx += 3;
            continue;
        }
        out.push(bytes[idx]);
        idx += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Why connecting to `shown` (`user@host:port/db`) failed, with the fix for TLS problems. The
/// message spells out the whole cause chain of `err` (tokio-postgres's own message leaves its
/// cause out), so the error carries no separate source that printing would repeat.
pub(crate) fn connect_failure(
    what: &str,
    shown: &str,
    settings: &TlsSettings,
    err: &(dyn StdError + 'static),
) -> FlueError {
    let mut chain = Vec::<String>::new();
    let mut cause: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(current) = cause {
        let text = current.to_string();
        if !chain.iter().any(|seen| seen.contains(&text)) {
            chain.push(text);
        }
        cause = current.source();
    }
    let message = if chain
        .iter()
        .any(|text| text.contains("server does not support TLS"))
    {
        format!(
            "{what} {shown}: the server does not support TLS (sslmode={}): use sslmode=disable \
             or prefer, or enable ssl on the server",
            settings.mode.as_str()
        )
    } else {
        format!("{what} {shown}: {}", chain.join(": "))
    };
    FlueError::Store {
        message,
        source: None,
    }
}

/// Makes a TLS connector per connection, for the host being connected to.
#[derive(Clone)]
pub(crate) struct RustlsConnect {
    config: Arc<ClientConfig>,
    settings: Arc<TlsSettings>,
}

impl fmt::Debug for RustlsConnect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RustlsConnect")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl MakeTlsConnect<Socket> for RustlsConnect {
    type Stream = RustlsStream;
    type TlsConnect = RustlsHandshake;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> io::Result<RustlsHandshake> {
        let name = ServerName::try_from(domain.to_owned()).map_err(|err| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{domain:?} is not a host name TLS can verify: {err}"),
            )
        })?;
        Ok(RustlsHandshake {
            connector: tokio_rustls::TlsConnector::from(Arc::clone(&self.config)),
            name,
            settings: Arc::clone(&self.settings),
        })
    }
}

/// One connection's TLS handshake.
pub(crate) struct RustlsHandshake {
    connector: tokio_rustls::TlsConnector,
    name: ServerName<'static>,
    settings: Arc<TlsSettings>,
}

impl TlsConnect<Socket> for RustlsHandshake {
    type Stream = RustlsStream;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<RustlsStream>> + Send>>;

    fn connect(self, stream: Socket) -> Self::Future {
        Box::pin(async move {
            let host = self.name.to_str().into_owned();
            match self.connector.connect(self.name, stream).await {
                Ok(stream) => Ok(RustlsStream(Box::new(stream))),
                Err(err) => Err(explain_handshake(err, &host, &self.settings)),
            }
        })
    }
}

/// A failed handshake's error with what to do about it.
fn explain_handshake(err: io::Error, host: &str, settings: &TlsSettings) -> io::Error {
    let roots = settings.root_cert.as_ref().map_or_else(
        || "the system's roots".to_owned(),
        |path| format!("sslrootcert {}", path.display()),
    );
    let mode = settings.mode.as_str();
    let hint = match err
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        )) => format!(
            "the server's certificate is not for host {host:?} (sslmode={mode}): connect by a \
             name the certificate lists, or use sslmode=verify-ca to check the CA only"
        ),
        Some(rustls::Error::InvalidCertificate(
            CertificateError::UnknownIssuer | CertificateError::BadSignature,
        )) => format!(
            "certificate not trusted: no chain to {roots} (sslmode={mode}): set \
             sslrootcert=FILE to the PEM of the CA that signed the server's certificate"
        ),
        Some(rustls::Error::InvalidCertificate(other)) => format!(
            "the server's certificate was refused ({other:?}, sslmode={mode}, trusting {roots})"
        ),
        _ => return err,
    };
    io::Error::new(io::ErrorKind::InvalidData, hint)
}

/// A TLS connection to the server.
pub(crate) struct RustlsStream(Box<tokio_rustls::client::TlsStream<Socket>>);

impl AsyncRead for RustlsStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for RustlsStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}

impl TlsStream for RustlsStream {
    fn channel_binding(&self) -> ChannelBinding {
        // SCRAM channel binding is optional (`channel_binding=prefer`); without it the
        // password exchange is still SCRAM over the encrypted connection.
        ChannelBinding::none()
    }
}

/// `prefer`, and `require` without `sslrootcert`: encryption without a certificate check (as
/// libpq), though the handshake's signatures are still verified.
#[derive(Debug)]
struct Unchecked(Arc<CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain must reach a trusted root; the host name is not checked. (webpki
/// checks the name only after the chain, so a name error means the chain was good.)
#[derive(Debug)]
struct ChainOnly(Arc<dyn ServerCertVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
