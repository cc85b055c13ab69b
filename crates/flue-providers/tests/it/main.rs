//! flue-providers integration tests: one binary, the wire-level provider tests over a scripted
//! loopback server, each prompt run through a real harness.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail loudly by design"
)]
#![allow(unreachable_pub, missing_docs, reason = "test helpers are not API")]

mod corpus;
mod fake_http;
mod provider_anthropic;
mod provider_openai;
mod provider_responses;
mod providers;
mod sse;
