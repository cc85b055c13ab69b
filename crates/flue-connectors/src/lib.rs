//! flue-connectors: third-party integrations for Flue.
//!
//! Connectors change often; flue-core changes carefully. This crate is where MCP servers,
//! isolated (Linux namespace) and Daytona sandboxes and the Postgres store will live. It holds
//! nothing yet: each connector arrives with its own issue.
