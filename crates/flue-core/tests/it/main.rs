//! flue-core integration tests: one binary, one module per area.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail loudly by design"
)]
#![allow(unreachable_pub, missing_docs, reason = "test helpers are not API")]

mod actions;
mod apply_patch;
mod audit_contract;
mod call_options;
mod command_tools;
mod compaction;
mod conversation_contract;
mod cwd;
mod emit_data;
mod file_tools;
mod hooks;
mod images;
mod initializers;
mod instance_ids;
mod live_actions;
mod model_per_call;
mod note_contract;
mod output_schema;
mod pauses;
mod roles;
mod rules;
mod sandbox_contract;
mod sandbox_local;
mod sandbox_race;
mod sandbox_virtual;
mod sandboxes;
mod scripted;
mod secrets;
mod session;
mod session_delete;
mod skill_refs;
mod skills;
mod standing;
mod store_contract;
mod stores;
mod submission_crash;
mod submission_pauses;
mod submission_support;
mod submissions;
mod task_abort;
mod task_activity;
mod task_pauses;
mod tasks;
mod tool_call_ids;
mod tool_sources;
mod tools_builtin;
