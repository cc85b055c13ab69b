//! flue-store: the durable stores of Flue, SQLite and Postgres.
//!
//! A library user adds this crate beside flue-core when conversations must outlive the
//! process; `examples/provider` is a whole program doing so. It also keeps the OAuth tokens of
//! remote MCP servers ([`McpTokenTable`]) in the same file.
//!
//! Both stores implement flue-core's store traits ([`flue_core::store::SessionStore`],
//! [`flue_core::store::ConversationStore`], [`flue_core::store::AuditStore`]) and decide admission, fencing
//! and settlement by asking [`flue_core::store::rules`], as the in-memory store does, so the
//! three behave alike. This crate reaches the runtime only through that public API: it knows
//! no session, harness or task.
//!
//! - [`SqliteStore`]: the embedded default (`.flue/flue.db`): WAL, migrations through
//!   `user_version`, group commit of conversation writes, owner liveness through `flock`.
//! - [`PostgresStore`]: sessions, the audit log and trash, and durable submissions in a
//!   Postgres database that many `flue serve` processes share (leases on the database clock,
//!   fencing epochs, `LISTEN/NOTIFY` wake-ups; see `docs/postgres.md`).
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use flue_core::{AgentConfig, Harness};
//! use flue_store::SqliteStore;
//!
//! # async fn example() -> flue_core::Result<()> {
//! let store = Arc::new(SqliteStore::open(std::path::Path::new(".flue/flue.db"))?);
//! let harness = Harness::builder(AgentConfig::new().with_model("anthropic/claude-sonnet-4-6"))
//!     .with_store(store)
//!     .build()
//!     .await?;
//! # let _ = harness;
//! # Ok(())
//! # }
//! ```

// Only the binaries write to the terminal: flue-cli's stdout is a JSON contract, and an
// embedding application owns its own output.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod postgres;
mod sqlite;

pub use postgres::{NOTIFY_CHANNEL, PostgresOptions, PostgresStore};
pub use sqlite::{CommitStats, McpTokenTable, SqliteStore};
