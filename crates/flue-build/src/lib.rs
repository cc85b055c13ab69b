//! flue-build: discovery, validation and bundling of Flue agent workspaces, producing flue-core
//! configuration.
//!
//! An agent workspace is a directory a user writes by hand:
//!
//! ```text
//! flue.toml                       optional: [defaults] model, thinking; [providers.<id>];
//!                                 [mcp.<name>] servers; [sandbox]; [schedules.<name>]
//! AGENTS.md                       optional: workspace context
//! agents/<name>.md                one agent: YAML frontmatter + instructions body
//! .agents/skills/<name>.md        a flat skill
//! .agents/skills/<name>/SKILL.md  a folder skill (with resource files next to it)
//! .agents/roles/<name>.md         a role: a persona overlay
//! ```
//!
//! [`Workspace::load`] reads all of it, validates every file and every cross-reference
//! (subagents and their cycles, skills, roles, models), and reports every problem at once as
//! [`Diagnostics`], each with its file and line. A loaded [`Workspace`] turns any of its agents
//! into a [`flue_core::AgentConfig`] with [`Workspace::agent_config`], and its skills and roles
//! into what [`flue_core::HarnessBuilder`] takes. [`Bundle::build`] packs a workspace into one
//! self-contained, reproducible file that [`Bundle::workspace`] loads back.
//!
//! ```
//! use flue_build::Workspace;
//!
//! let dir = tempfile::tempdir()?;
//! std::fs::create_dir(dir.path().join("agents"))?;
//! std::fs::write(
//!     dir.path().join("agents/greeter.md"),
//!     "---\nmodel: anthropic/claude-sonnet-4-6\n---\nSay hello.\n",
//! )?;
//!
//! let workspace = Workspace::load(dir.path())?;
//! let config = workspace.agent_config("greeter")?;
//! assert_eq!(config.model.as_deref(), Some("anthropic/claude-sonnet-4-6"));
//! assert_eq!(config.instructions.as_deref(), Some("Say hello."));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Map of the main types:
//! - loading: [`Workspace`], [`WorkspaceConfig`] (flue.toml), [`AgentFile`] (one `agents/*.md`),
//!   [`SkillFile`], [`RoleFile`]
//! - bundling: [`Bundle`]
//! - model providers declared in flue.toml: [`ProviderSettings`], [`ModelSettings`]
//! - agent settings kept for later stages: [`McpServerDecl`], [`SandboxKind`] with
//!   [`SandboxOptions`] (layered with flue.toml's `[sandbox]` by [`SandboxSettings::resolve`])
//! - schedules declared in agent files and flue.toml: [`Schedule`] (when, where to, what; the tick
//!   arithmetic every node agrees on)
//! - problems: [`Diagnostic`], [`Diagnostics`] (converts into [`flue_core::FlueError`])

// Only the binaries write to the terminal: flue-cli's stdout is a JSON contract, and an
// embedding application owns its own output.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod agent_file;
mod bundle;
mod claude_settings;
mod diagnostic;
mod fields;
mod flue_toml;
mod frontmatter;
mod hooks;
mod mcp;
mod profile;
mod providers;
mod result_schema;
mod role_file;
mod sandbox;
mod schedule;
mod skill_file;
mod source;
mod suggest;
mod toml_span;
mod tools;
mod workspace;
mod yaml_limits;

pub use agent_file::AgentFile;
pub use bundle::{BUNDLE_FILE_NAME, BUNDLE_FORMAT, BUNDLE_VERSION, Bundle};
pub use diagnostic::{Diagnostic, Diagnostics};
pub use flue_toml::{Defaults, StoreSettings, TaskSettings, WorkspaceConfig};
pub use mcp::{McpOAuthDecl, McpServerDecl, McpTransport, RemoteMcpServer, StdioMcpServer};
pub use providers::{ModelSettings, ProviderSettings};
pub use role_file::RoleFile;
pub use sandbox::{SandboxKind, SandboxOptions, SandboxSettings, SeedSetting};
pub use schedule::{
    CatchUp, MIN_SCHEDULE_INTERVAL_MS, SCHEDULE_ORIGIN_PREFIX, Schedule, ScheduleMessage, Timing,
    schedule_of_key,
};
pub use skill_file::{SkillFile, VENDOR_KEYS};
pub use suggest::{suggest_model, suggest_name};
pub use tools::CustomToolDecl;
pub use workspace::Workspace;
