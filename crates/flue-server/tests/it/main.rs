//! Integration tests of flue-server: the protocol in process (`tower::ServiceExt::oneshot`
//! against the router over the durable runtime, flue-core's `AgentRuntime` on the memory
//! store, with the scripted model), and the route list against docs/http-api.md.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail loudly by design"
)]
#![allow(unreachable_pub, missing_docs, reason = "test helpers are not API")]

mod actions;
mod console_access;
mod docs;
mod host;
mod protocol;
mod reload;
mod rules;
