//! Restoring a file the file tools trashed, outside any agent: the `restore_file` tool run on
//! the workspace directory itself (a `local` sandbox at the root) with the store's audit log,
//! so the restore is audited like the agent's own (`flue trash restore`).

use std::path::Path;
use std::sync::Arc;

use flue_core::{LocalSandbox, ToolContext, ToolError, builtin_tool, store::DynAuditStore};
use serde_json::{Value, json};

use crate::HostError;

/// Restores trash entry `trash_id` of conversation `instance_id` into the workspace at `root`
/// (to `destination`, relative to the root, instead of its own path when given). The restore
/// is audited in `audit` under `session`, by `agent`. Returns the tool's `{ok, data}` envelope,
/// or its error (kind, message, suggested action) for the caller to show; the outer error is
/// a failure to set the tool up (the root cannot be opened).
pub async fn restore_from_trash(
    root: &Path,
    audit: Arc<dyn DynAuditStore>,
    instance_id: &str,
    trash_id: &str,
    destination: Option<&str>,
    session: &str,
    agent: &str,
) -> Result<Result<Value, ToolError>, HostError> {
    let sandbox = LocalSandbox::new(root)?;
    let ctx = ToolContext::new(Arc::new(sandbox))
        .with_audit(audit)
        .with_instance_id(instance_id)
        .with_session(session)
        .with_agent(agent);
    let mut input = json!({"trashId": trash_id});
    if let Some(to) = destination {
        input["destination"] = json!(to);
    }
    let tool = builtin_tool("restore_file")?;
    Ok(tool.call(input, &ctx).await)
}
