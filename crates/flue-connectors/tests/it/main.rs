//! flue-connectors integration tests: one binary, one module per area.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail loudly by design"
)]
#![allow(unreachable_pub, missing_docs, reason = "test helpers are not API")]

mod daytona;
mod daytona_fake;
mod isolated;
/// The sandbox contract suite, shared with flue-core's tests.
#[path = "../../../flue-core/tests/it/sandbox_contract.rs"]
mod sandbox_contract;
