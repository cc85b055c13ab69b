//! Integration tests of flue-connectors against real MCP servers over loopback and stdio.
//!
//! The servers are the official `@modelcontextprotocol/server-everything` (npm), a server
//! built with the official Python SDK (`mcp` on PyPI), and a hand-written misbehaving one, all
//! under tests/peers/ (installed by `.ci/run`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail loudly by design"
)]
#![allow(unreachable_pub, missing_docs, reason = "test helpers are not API")]

mod everything;
mod failures;
mod python;
mod support;
