//! flue-build integration tests: one binary, one module per area.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail loudly by design"
)]
#![allow(unreachable_pub, missing_docs, reason = "test helpers are not API")]

mod agent_config;
mod bundle;
mod command_tools;
mod diagnostics;
mod fields;
mod flue_toml;
mod frontmatter;
mod load;
mod mcp;
mod providers;
mod references;
mod roles;
mod run_checks;
mod sandbox;
mod schedules;
mod skills;
mod skills_vendor;
mod support;
mod yaml_limits;
