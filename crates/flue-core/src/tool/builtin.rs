//! Built-in tools (placeholder until the tool work lands).

use crate::error::{FlueError, Result};
use crate::tool::ToolDefinition;

/// Names of the built-in tools.
pub const BUILTIN_TOOL_NAMES: &[&str] = &[];

/// The built-in tool called `name`.
pub fn builtin_tool(name: &str) -> Result<ToolDefinition> {
    Err(FlueError::config(format!("unknown built-in tool {name:?}")))
}

/// The built-in tools called `names`, in order.
pub fn builtin_tools(names: &[String]) -> Result<Vec<ToolDefinition>> {
    names.iter().map(|name| builtin_tool(name)).collect()
}
