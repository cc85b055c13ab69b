//! flue-core integration tests: one binary, one module per area.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail loudly by design"
)]
#![allow(unreachable_pub, missing_docs, reason = "test helpers are not API")]

mod sandbox_contract;
mod sandbox_local;
mod sandbox_virtual;
mod scripted;
mod session;
mod store_contract;
mod tools_builtin;
