//! Unit tests of the Postgres store's pure parts: what it shows of a URL, the TLS settings
//! taken from it, and the head notification payload.

use std::str::FromStr;

use flue_core::{ConversationKey, Offset};

use flue_core::store::HeadWatchers;

use super::heads::{apply, payload};
use super::tls::{SslMode, TlsSettings};
use super::{PostgresOptions, PostgresStore, describe};

#[test]
fn the_shown_database_never_contains_the_password() {
    let config =
        tokio_postgres::Config::from_str("postgres://flue:s3cret-pw@db.internal:6543/prod")
            .unwrap();
    let shown = describe(&config);
    assert_eq!(shown, "flue@db.internal:6543/prod");
    assert!(!shown.contains("s3cret"));
}

#[tokio::test]
async fn a_malformed_url_is_refused_without_echoing_it() {
    let err = PostgresStore::connect(
        "postgres://flue:s3cret@host:notaport/db",
        PostgresOptions::default(),
    )
    .await
    .unwrap_err();
    let message = err.to_string();
    assert!(message.contains("malformed Postgres URL"), "{message}");
    assert!(!message.contains("s3cret"), "{message}");
}

#[test]
fn head_payloads_round_trip_and_only_grow_the_head() {
    let heads = HeadWatchers::default();
    let key = ConversationKey::new("agent", "conversation one");
    let mut watch = heads.watch(&key.instance_id());
    apply(&heads, &payload(&key.instance_id(), Offset(7)));
    assert_eq!(*watch.borrow_and_update(), Offset(7));
    apply(&heads, &payload(&key.instance_id(), Offset(3)));
    assert!(!watch.has_changed().unwrap());
    apply(&heads, "garbage");
    apply(&heads, "12");
    assert_eq!(*watch.borrow(), Offset(7));
}

#[test]
fn tls_settings_leave_the_url_and_default_to_prefer() {
    let (rest, settings) = TlsSettings::split(
        "postgres://flue:pw@db:5432/prod?application_name=flue&sslmode=verify-full&sslrootcert=/etc/ca%20dir/root.pem",
    )
    .unwrap();
    assert_eq!(
        rest,
        "postgres://flue:pw@db:5432/prod?application_name=flue"
    );
    assert_eq!(settings.mode, SslMode::VerifyFull);
    assert_eq!(
        settings.root_cert.as_deref(),
        Some(std::path::Path::new("/etc/ca dir/root.pem"))
    );

    let (rest, settings) = TlsSettings::split("postgres://flue@db/prod").unwrap();
    assert_eq!(rest, "postgres://flue@db/prod");
    assert_eq!(settings, TlsSettings::default());
    assert_eq!(settings.mode, SslMode::Prefer);

    let (rest, settings) =
        TlsSettings::split("postgres://flue@db/prod?sslmode=require&sslrootcert=system").unwrap();
    assert_eq!(rest, "postgres://flue@db/prod");
    assert_eq!(settings.mode, SslMode::Require);
    assert_eq!(settings.root_cert, None);

    let (rest, settings) =
        TlsSettings::split("host=db user=flue sslmode=verify-ca sslrootcert=/ca.pem").unwrap();
    assert_eq!(rest, "host=db user=flue");
    assert_eq!(settings.mode, SslMode::VerifyCa);

    let err = TlsSettings::split("postgres://flue:s3cret@db/prod?sslmode=allow").unwrap_err();
    assert!(err.contains("verify-full"), "{err}");
    assert!(!err.contains("s3cret"), "{err}");
}
