//! Unit tests of the Postgres store's pure parts: what it shows of a URL, and the head
//! notification payload.

use std::str::FromStr;

use flue_core::{ConversationKey, Offset};

use super::heads::{HeadWatchers, payload};
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
    heads.apply(&payload(&key.instance_id(), Offset(7)));
    assert_eq!(*watch.borrow_and_update(), Offset(7));
    heads.apply(&payload(&key.instance_id(), Offset(3)));
    assert!(!watch.has_changed().unwrap());
    heads.apply("garbage");
    heads.apply("12");
    assert_eq!(*watch.borrow(), Offset(7));
}
