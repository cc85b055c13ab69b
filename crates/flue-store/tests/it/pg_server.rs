//! A Postgres server for the tests, and a fresh database per test.
//!
//! With `FLUE_TEST_POSTGRES_URL` set (`cargo xtask ci` sets it after starting a server), that
//! server is used; otherwise the first caller in a test binary starts a throwaway one through
//! `tests/peers/postgres.sh` (a fresh cluster in a temp directory on a free loopback port, as
//! `nobody` when running as root), which stops and deletes itself when the test binary exits.
//! Each test gets a database of its own, so tests run in parallel without seeing each other.
//! Shared by the test binaries of flue-connectors, flue-core and flue-cli (`#[path]`).

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

/// The environment variable naming an already running server (`postgres://user@host:port/db`).
pub const URL_VAR: &str = "FLUE_TEST_POSTGRES_URL";

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/peers/postgres.sh")
}

/// The server's URL (its `postgres` database), starting one on first use.
pub fn server_url() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        if let Ok(url) = std::env::var(URL_VAR)
            && !url.is_empty()
        {
            return url;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map(|addr| addr.port())
            .expect("a free loopback port");
        let dir =
            std::env::temp_dir().join(format!("flue-test-postgres-{}-{port}", std::process::id()));
        let output = Command::new("bash")
            .arg(script())
            .arg("serve-for")
            .arg(std::process::id().to_string())
            .arg(&dir)
            .arg(port.to_string())
            .output()
            .expect("run tests/peers/postgres.sh");
        assert!(
            output.status.success(),
            "tests/peers/postgres.sh could not start Postgres (install it with \
             tests/peers/install.sh, or set {URL_VAR}): {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    })
}

/// A server of this test binary's own running with TLS (`postgres.sh serve-for ... tls`): a
/// certificate for `localhost` signed by a CA made for it.
pub struct TlsServer {
    /// `postgres://flue@127.0.0.1:PORT/postgres` (the certificate is not for 127.0.0.1).
    pub url: String,
    /// The CA that signed the server's certificate (PEM).
    pub ca: PathBuf,
    /// A CA that signed nothing (PEM).
    pub other_ca: PathBuf,
}

/// The TLS server, started on first use; it stops and is deleted when the test binary exits.
pub fn tls_server() -> &'static TlsServer {
    static SERVER: OnceLock<TlsServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map(|addr| addr.port())
            .expect("a free loopback port");
        let dir = std::env::temp_dir().join(format!(
            "flue-test-postgres-tls-{}-{port}",
            std::process::id()
        ));
        let output = Command::new("bash")
            .arg(script())
            .arg("serve-for")
            .arg(std::process::id().to_string())
            .arg(&dir)
            .arg(port.to_string())
            .arg("tls")
            .output()
            .expect("run tests/peers/postgres.sh");
        assert!(
            output.status.success(),
            "tests/peers/postgres.sh could not start Postgres with TLS (install postgresql and \
             openssl with tests/peers/install.sh): {}",
            String::from_utf8_lossy(&output.stderr)
        );
        TlsServer {
            url: String::from_utf8_lossy(&output.stdout).trim().to_owned(),
            ca: dir.join("tls/ca.crt"),
            other_ca: dir.join("tls/other-ca.crt"),
        }
    })
}

/// The URL of a new, empty database on the test server.
pub fn fresh_database() -> String {
    fresh_database_on(server_url())
}

/// The URL of a new, empty database on the server at `server`.
pub fn fresh_database_on(server: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let name = format!(
        "flue_test_{}_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
        flue_core::util::new_ulid().to_lowercase()
    );
    psql(server, &format!("CREATE DATABASE {name}"));
    with_database(server, &name)
}

/// `url` with its database replaced by `name`.
pub fn with_database(url: &str, name: &str) -> String {
    let base = url.rsplit_once('/').map_or(url, |(base, _)| base);
    format!("{base}/{name}")
}

/// Runs one SQL command with `psql`; panics with its output on failure.
pub fn psql(url: &str, sql: &str) -> String {
    let output = Command::new(psql_binary())
        .arg(url)
        .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .output()
        .expect("run psql");
    assert!(
        output.status.success(),
        "psql {sql:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

fn psql_binary() -> PathBuf {
    if let Ok(entries) = std::fs::read_dir("/usr/lib/postgresql") {
        let mut found: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|entry| entry.path().join("bin/psql"))
            .filter(|path| path.exists())
            .collect();
        found.sort();
        if let Some(path) = found.pop() {
            return path;
        }
    }
    PathBuf::from("psql")
}
