//! Restoring a file the file tools trashed, outside any agent: the `restore_file` tool run on
//! the workspace directory itself (a `local` sandbox at the root) with the store's audit log,
//! so the restore is audited like the agent's own (`flue trash restore`); and rewinding a
//! conversation's file changes the same way (`flue rewind`).

use std::path::Path;
use std::sync::Arc;

use flue_core::store::{DynAuditStore, DynConversationStore};
use flue_core::{
    FlueError, LocalSandbox, ToolContext, ToolError, rewind::RewindPlan, rewind::RewindTarget,
    rewind::RewindWorkspace, rewind::rewind, tool::builtin_tool,
};
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

/// Rewinds the files conversation `instance_id` changed in the workspace at `root` (see
/// [`flue_core::rewind`]): a `local` sandbox at the root, the conversation's sessions, audit
/// log and trash from `store`. The rewind's audit entries carry `agent`.
pub async fn rewind_workspace(
    root: &Path,
    store: Arc<dyn DynConversationStore>,
    instance_id: &str,
    target: RewindTarget,
    dry_run: bool,
    agent: &str,
) -> Result<RewindPlan, HostError> {
    let Some(audit) = Arc::clone(&store).audit_store() else {
        return Err(HostError::from(FlueError::config(
            "this store keeps no audit log, so there is nothing to rewind from",
        )));
    };
    let sandbox = LocalSandbox::new(root)?;
    let workspace = RewindWorkspace {
        sandbox: &sandbox,
        sessions: &*store,
        audit: &*audit,
        agent,
    };
    Ok(rewind(&workspace, instance_id, target, dry_run).await?)
}
