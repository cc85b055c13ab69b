//! flue-core integration tests: one binary, one module per area.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail loudly by design"
)]
#![allow(unreachable_pub, missing_docs, reason = "test helpers are not API")]

mod fake_http;
mod provider_anthropic;
mod provider_openai;
mod providers;
mod sandbox_local;
mod scripted;
mod session;
mod store_contract;
mod tools_builtin;
