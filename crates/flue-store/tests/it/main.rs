//! flue-store integration tests: flue-core's store contract suites on SQLite and Postgres,
//! SQLite's durability and migrations, Postgres between nodes and over TLS.
//!
//! The Postgres tests start a throwaway server through `tests/peers/postgres.sh` (or use
//! `FLUE_TEST_POSTGRES_URL`), a fresh database per test (`pg_server.rs`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail loudly by design"
)]
#![allow(unreachable_pub, missing_docs, reason = "test helpers are not API")]

/// The `AuditStore` contract suite, shared with flue-core's tests.
#[path = "../../../flue-core/tests/it/audit_contract.rs"]
mod audit_contract;
mod contracts;
/// The `ConversationStore` contract suite, shared with flue-core's tests.
#[path = "../../../flue-core/tests/it/conversation_contract.rs"]
mod conversation_contract;
/// The `NoteStore` contract suite, shared with flue-core's tests.
#[path = "../../../flue-core/tests/it/note_contract.rs"]
mod note_contract;
mod pg_server;
mod postgres;
mod postgres_tls;
mod sqlite;
/// The `SessionStore` contract suite, shared with flue-core's tests.
#[path = "../../../flue-core/tests/it/store_contract.rs"]
mod store_contract;
