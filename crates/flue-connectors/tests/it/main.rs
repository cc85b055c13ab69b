//! flue-connectors integration tests: one binary, one module per area.
//!
//! The MCP tests run real servers: the official `@modelcontextprotocol/server-everything`
//! (npm), servers built with the official Python SDK (`mcp` on PyPI), one of which changes
//! its tool list as it runs, and a hand-written
//! misbehaving one, all under tests/peers/ (installed by `tests/peers/install.sh`). The sandbox tests run
//! bubblewrap, `unshare` and a fake Daytona server on loopback.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail loudly by design"
)]
#![allow(unreachable_pub, missing_docs, reason = "test helpers are not API")]

mod daytona;
mod daytona_fake;
mod everything;
mod failures;
mod isolated;
mod list_changed;
mod python;
/// The sandbox contract suite, shared with flue-core's tests.
#[path = "../../../flue-core/tests/it/sandbox_contract.rs"]
mod sandbox_contract;
/// The path race, shared with flue-core's tests.
#[path = "../../../flue-core/tests/it/sandbox_race.rs"]
mod sandbox_race;
mod support;
