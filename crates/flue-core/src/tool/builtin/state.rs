//! The managed state tools: `state_read` and `state_write` give the model the conversation's
//! state document. Off unless an agent lists them in `tools:`.
//!
//! `state_write` takes a JSON Merge Patch (RFC 7386): keys of the patch replace the
//! document's, objects merge recursively, `null` removes a key. The change is stored with the
//! batch of tool results, like any tool's. Both are replay-safe: their only effect is on the
//! state, which a crash rolls back with the batch.

use serde_json::{Map, Value, json};

use crate::error::Result;
use crate::tool::{
    Effects, InterruptBehavior, Ownership, Permission, ToolContext, ToolDefinition, ToolError,
    ToolMeta, ToolState,
};

/// The names of the state tools, accepted by [`builtin_tool`](crate::tool::builtin_tool) and in an
/// agent file's `tools:`; never on by default.
pub const STATE_TOOL_NAMES: &[&str] = &["state_read", "state_write"];

const META: ToolMeta = ToolMeta {
    ownership: Ownership::Managed,
    permission: Permission::AlwaysAllow,
    read_only: false,
    destructive: false,
    effects: Effects::NONE,
    interrupt: InterruptBehavior::Complete,
    replay_safe: true,
};

fn state_of(ctx: &ToolContext) -> std::result::Result<&ToolState, ToolError> {
    ctx.state().ok_or_else(|| {
        ToolError::new(
            "state_unavailable",
            "this session has no conversation state (a subagent's task does not share it); \
             pass what the task needs in its prompt",
        )
    })
}

pub(super) fn state_read_tool() -> Result<ToolDefinition> {
    let tool = ToolDefinition::from_fn(
        "state_read",
        "Read this conversation's state: a JSON object that persists across messages and \
         restarts. Returns {\"state\": {...}, \"version\": N}.",
        |_input: Map<String, Value>, ctx: ToolContext| async move {
            let state = state_of(&ctx)?;
            Ok(json!({ "state": state.get(), "version": state.version() }))
        },
    )?;
    Ok(tool.with_meta(ToolMeta {
        read_only: true,
        ..META
    }))
}

/// Input of `state_write`.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct WriteInput {
    /// A JSON Merge Patch for the state object: each key replaces the state's key of the same
    /// name (objects merge recursively); `null` removes the key.
    patch: Map<String, Value>,
}

pub(super) fn state_write_tool() -> Result<ToolDefinition> {
    let tool = ToolDefinition::from_fn(
        "state_write",
        "Change this conversation's state (a JSON object that persists across messages and \
         restarts) with a JSON Merge Patch: {\"patch\": {\"key\": value}} sets keys, objects \
         merge, null removes a key. Returns the new state. The state is limited to 64 KiB.",
        |input: WriteInput, ctx: ToolContext| async move {
            let state = state_of(&ctx)?;
            state.update(|object| merge_patch(object, input.patch))?;
            Ok(json!({ "state": state.get() }))
        },
    )?;
    Ok(tool.with_meta(META))
}

/// Applies a JSON Merge Patch (RFC 7386) to `target`.
pub(crate) fn merge_patch(target: &mut Map<String, Value>, patch: Map<String, Value>) {
    for (key, value) in patch {
        match value {
            Value::Null => {
                target.remove(&key);
            }
            Value::Object(inner) => {
                let slot = target
                    .entry(key)
                    .or_insert_with(|| Value::Object(Map::new()));
                if !slot.is_object() {
                    *slot = Value::Object(Map::new());
                }
                if let Value::Object(object) = slot {
                    merge_patch(object, inner);
                }
            }
            other => {
                target.insert(key, other);
            }
        }
    }
}
