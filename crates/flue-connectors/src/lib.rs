//! flue-connectors: third-party integrations for Flue.
//!
//! Connectors change often; flue-core changes carefully. This crate holds the sandboxes that
//! need more than the standard library and bashkit:
//!
//! - [`IsolatedSandbox`]: a host directory whose commands run in Linux namespaces
//!   (bubblewrap, or `unshare`): the host read-only, only the workspace writable, a private
//!   `/tmp`, no network unless enabled.
//! - [`DaytonaSandbox`]: a remote Daytona sandbox, driven through its REST API.
//!
//! Both implement [`flue_core::Sandbox`], so agent code never knows which one it runs in.

mod daytona;
mod isolated;

pub use daytona::{DEFAULT_DAYTONA_API_URL, DaytonaConfig, DaytonaSandbox};
pub use isolated::{IsolatedSandbox, IsolatedSandboxBuilder, IsolationBackend};
