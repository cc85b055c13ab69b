//! TLS to the database: `sslmode` and `sslrootcert` in the store URL against a real Postgres
//! running with `ssl=on` (a certificate for `localhost` from a CA made at test time) and the
//! plain test server. The store works over TLS on every kind of connection it opens; each way
//! verification can fail says why and what to change, naming `user@host:port/db` and never
//! the password.

use std::sync::Arc;
use std::time::Duration;

use flue_core::{
    ConversationKey, DeliveredMessage, DispatchOptions, FlueError, Offset,
    store::{Acquire, Admission, ConversationStore},
    util::{new_ulid, now_ms},
};
use flue_store::{PostgresOptions, PostgresStore};

use crate::pg_server::{fresh_database, fresh_database_on, psql, server_url, tls_server};

fn quick() -> PostgresOptions {
    PostgresOptions {
        acquire_timeout: Duration::from_secs(5),
        ..PostgresOptions::default()
    }
}

async fn connect(url: &str) -> Result<Arc<PostgresStore>, FlueError> {
    PostgresStore::connect(url, quick()).await.map(Arc::new)
}

async fn admit(store: &PostgresStore, key: &ConversationKey, text: &str) -> Offset {
    store
        .admit(&Admission {
            key: key.clone(),
            submission_id: new_ulid(),
            new_uid: new_ulid(),
            message: DeliveredMessage::user(text),
            accepted_at: now_ms(),
            options: DispatchOptions::default(),
        })
        .await
        .unwrap()
        .offset
}

/// `url` with the host `127.0.0.1` replaced by `localhost` (the name the certificate is for).
fn by_name(url: &str) -> String {
    url.replacen("@127.0.0.1:", "@localhost:", 1)
}

/// `url` with a password, which no message may show.
fn with_password(url: &str) -> String {
    url.replacen("postgres://flue@", "postgres://flue:pa55-w0rd-xyz@", 1)
}

fn database_of(url: &str) -> &str {
    url.rsplit_once('/').map_or(url, |(_, name)| name)
}

/// (connections to `database` over TLS, connections without), as the server sees them.
fn connections_by_tls(server: &str, database: &str) -> (u32, u32) {
    let counts = psql(
        server,
        &format!(
            "SELECT COUNT(*) FILTER (WHERE s.ssl) || ' ' || COUNT(*) FILTER (WHERE NOT s.ssl) \
             FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.datname = '{database}'"
        ),
    );
    let (tls, plain) = counts.split_once(' ').unwrap();
    (tls.parse().unwrap(), plain.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_carries_the_store_and_its_notifications_over_tls() {
    let server = tls_server();
    let url = fresh_database_on(&server.url);
    let url_required = format!("{url}?sslmode=require");
    let (a, b) = (
        connect(&url_required).await.unwrap(),
        connect(&url_required).await.unwrap(),
    );
    let key = ConversationKey::new("agent", "over-tls");
    let first = admit(&a, &key, "hello").await;
    let mut watch = b.watch_head(&key);
    let second = admit(&a, &key, "again").await;
    assert!(second > first);
    tokio::time::timeout(Duration::from_secs(10), async {
        while *watch.borrow_and_update() < second {
            watch.changed().await.unwrap();
        }
    })
    .await
    .expect("node B hears of the head move through NOTIFY over TLS");
    let seen = b.conversation(&key).await.unwrap().unwrap();
    assert_eq!(seen.head, second);
    assert_eq!(seen.unsettled, 2);

    // The owner's liveness connection, too.
    let owner = a.register_owner().await.unwrap();
    assert!(matches!(
        a.acquire(&key, owner.owner_id(), Duration::from_secs(30))
            .await
            .unwrap(),
        Acquire::Owned(_)
    ));
    assert!(b.owner_alive(owner.owner_id()).await.unwrap());
    let (tls, plain) = connections_by_tls(&server.url, database_of(&url));
    // Two pools, two listeners and one owner connection at least, none of them plain.
    assert!(tls >= 5, "{tls} TLS connections");
    assert_eq!(plain, 0, "every connection of the store is encrypted");
}

#[tokio::test]
async fn verify_full_with_the_right_ca_connects_and_verify_ca_ignores_the_name() {
    let server = tls_server();
    let url = fresh_database_on(&server.url);
    let ca = server.ca.display();
    let full = connect(&format!(
        "{}?sslmode=verify-full&sslrootcert={ca}",
        by_name(&url)
    ))
    .await
    .unwrap();
    assert_eq!(
        full.schema_version().await.unwrap(),
        PostgresStore::supported_schema_version()
    );
    // By address: the certificate is not for 127.0.0.1, which verify-ca does not check.
    let chain_only = connect(&format!("{url}?sslmode=verify-ca&sslrootcert={ca}"))
        .await
        .unwrap();
    assert!(chain_only.schema_version().await.is_ok());
    // require with a root certificate checks the chain, as libpq does.
    let required = connect(&format!(
        "{url}?sslmode=require&sslrootcert={}",
        server.other_ca.display()
    ))
    .await
    .unwrap_err()
    .to_string();
    assert!(required.contains("certificate not trusted"), "{required}");
}

#[tokio::test]
async fn verify_full_with_a_wrong_ca_fails_naming_the_fix_and_not_the_password() {
    let server = tls_server();
    let url = by_name(&with_password(&fresh_database_on(&server.url)));
    for mode in ["verify-full", "verify-ca"] {
        let err = connect(&format!(
            "{url}?sslmode={mode}&sslrootcert={}",
            server.other_ca.display()
        ))
        .await
        .unwrap_err();
        assert_eq!(err.kind(), "store_error");
        let message = err.to_string();
        let port = url.split(':').nth(3).unwrap().split('/').next().unwrap();
        assert!(
            message.contains(&format!("flue@localhost:{port}/")),
            "{message}"
        );
        assert!(message.contains("certificate not trusted"), "{message}");
        assert!(message.contains("set sslrootcert="), "{message}");
        assert!(
            message.contains(&server.other_ca.display().to_string()),
            "{message}"
        );
        assert!(!format!("{err:?}").contains("pa55-w0rd"), "{err:?}");
    }
    // Without sslrootcert the platform's roots are trusted, and the test CA is not one of them.
    let message = connect(&format!("{url}?sslmode=verify-full"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("certificate not trusted: no chain to the system's roots"),
        "{message}"
    );
}

#[tokio::test]
async fn verify_full_with_a_host_the_certificate_is_not_for_fails() {
    let server = tls_server();
    let url = fresh_database_on(&server.url);
    let message = connect(&format!(
        "{url}?sslmode=verify-full&sslrootcert={}",
        server.ca.display()
    ))
    .await
    .unwrap_err()
    .to_string();
    assert!(message.contains("flue@127.0.0.1:"), "{message}");
    assert!(message.contains("not for host \"127.0.0.1\""), "{message}");
    assert!(message.contains("sslmode=verify-ca"), "{message}");
}

#[tokio::test]
async fn require_against_a_server_without_tls_fails_and_prefer_falls_back() {
    let url = fresh_database();
    let message = connect(&format!("{}?sslmode=require", with_password(&url)))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("the server does not support TLS"),
        "{message}"
    );
    assert!(
        message.contains("use sslmode=disable or prefer"),
        "{message}"
    );
    assert!(message.contains("flue@127.0.0.1:"), "{message}");
    assert!(!message.contains("pa55-w0rd"), "{message}");

    let preferred = connect(&format!("{url}?sslmode=prefer")).await.unwrap();
    let key = ConversationKey::new("agent", "plain");
    admit(&preferred, &key, "hi").await;
    assert!(preferred.conversation(&key).await.unwrap().is_some());
    let (tls, plain) = connections_by_tls(server_url(), database_of(&url));
    assert_eq!(tls, 0);
    assert!(plain >= 2, "{plain} plain connections");
}

#[tokio::test]
async fn a_missing_root_certificate_or_unknown_mode_is_refused_at_start() {
    let url = fresh_database();
    let message = connect(&format!(
        "{url}?sslmode=verify-full&sslrootcert=/nonexistent/flue-ca.pem"
    ))
    .await
    .unwrap_err()
    .to_string();
    assert!(
        message.contains("cannot read sslrootcert /nonexistent/flue-ca.pem"),
        "{message}"
    );
    let message = connect(&format!("{url}?sslmode=verify"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("use disable, prefer, require, verify-ca or verify-full"),
        "{message}"
    );
}
