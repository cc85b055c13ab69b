//! Tool sources: tool lists that may change while an agent runs, read again before each turn.
//!
//! Most tools are fixed when an agent is configured. A [`ToolSource`] is a list that can
//! change between model turns (an MCP server announces `notifications/tools/list_changed`).
//! The agent loop asks every source of its scope to [`ToolSource::refresh`] before each model
//! turn and offers what [`ToolSource::tools`] returns then; [`LiveTools`] merges the fixed tools
//! with the sources' current lists and tells the loop when the merged list changed. A source's
//! tool whose name is already taken is dropped with a warning: a changing list never fails a
//! turn.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use crate::tool::ToolDefinition;
use crate::util::BoxFuture;

/// A list of tools that may change while an agent runs, such as an MCP server's.
///
/// Add one to an agent with [`AgentConfig::with_tool_source`](crate::config::AgentConfig::with_tool_source)
/// or to a subagent with [`AgentProfile::with_tool_source`](crate::config::AgentProfile::with_tool_source).
/// Before each model turn the agent loop awaits [`ToolSource::refresh`] and then offers the
/// tools of [`ToolSource::tools`], after the agent's fixed tools: the model sees added tools
/// from its next turn on, and no longer sees removed ones (a call to one is answered with an
/// `unknown_tool` error). The tools go through the same naming, permission and confirmation
/// rules as fixed ones. A tool whose name is already taken (by a fixed tool, a tool of the
/// call, or a tool of an earlier source) is left out of the turn with a warning in the log.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use flue_core::{AgentConfig, ToolDefinition, tool::ToolSource};
///
/// /// Tools the application swaps at runtime.
/// #[derive(Default)]
/// struct Swappable(Mutex<Vec<ToolDefinition>>);
///
/// impl ToolSource for Swappable {
///     fn label(&self) -> String {
///         "swappable tools".to_owned()
///     }
///     fn tools(&self) -> Vec<ToolDefinition> {
///         self.0.lock().map(|tools| tools.clone()).unwrap_or_default()
///     }
/// }
///
/// let agent = AgentConfig::new().with_tool_source(Arc::new(Swappable::default()));
/// assert_eq!(agent.resolve().unwrap().tool_sources.len(), 1);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a tool source",
    label = "implement `flue_core::tool::ToolSource` for this type: `label` and `tools`"
)]
pub trait ToolSource: Send + Sync {
    /// Who provides the tools, for warnings and logs: `MCP server "docs"`.
    fn label(&self) -> String;

    /// The tools as currently known, in the order the model should see them. Called by the
    /// agent loop after [`ToolSource::refresh`], and by anything that lists an agent's tools
    /// (`Harness::tool_schemas`); it must not block.
    fn tools(&self) -> Vec<ToolDefinition>;

    /// Brings [`ToolSource::tools`] up to date when the source learnt that its list changed.
    /// The agent loop awaits it before each model turn (and drops it on abort), so it should
    /// return at once when nothing changed. A source that cannot refresh keeps its last list
    /// and logs why. The default does nothing (a list that changes by itself, or never).
    fn refresh(&self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }
}

impl fmt::Debug for dyn ToolSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolSource")
            .field("label", &self.label())
            .finish_non_exhaustive()
    }
}

/// The tools of one operation: fixed ones around the current lists of its sources.
pub(crate) struct LiveTools {
    /// The agent's fixed tools, offered first.
    before: Vec<ToolDefinition>,
    sources: Vec<Arc<dyn ToolSource>>,
    /// The call's own tools and the runtime's (`load_skill`, `task`, `finish`), offered last.
    after: Vec<ToolDefinition>,
    /// Names the loop adds itself, which no source may take.
    reserved: Vec<String>,
    /// The sources' lists the last merge was made of.
    merged_from: Option<Vec<Vec<ToolDefinition>>>,
}

impl LiveTools {
    pub(crate) fn new(
        before: Vec<ToolDefinition>,
        sources: Vec<Arc<dyn ToolSource>>,
        after: Vec<ToolDefinition>,
        reserved: &[&str],
    ) -> Self {
        Self {
            before,
            sources,
            after,
            reserved: reserved.iter().map(|name| (*name).to_owned()).collect(),
            merged_from: None,
        }
    }

    /// Whether any source may change the list.
    pub(crate) fn is_live(&self) -> bool {
        !self.sources.is_empty()
    }

    /// Refreshes every source, in order.
    pub(crate) async fn refresh(&self) {
        for source in &self.sources {
            source.refresh().await;
        }
    }

    /// The merged list: the fixed tools around the sources' current tools.
    pub(crate) fn merged(&mut self) -> Vec<ToolDefinition> {
        let lists: Vec<Vec<ToolDefinition>> =
            self.sources.iter().map(|source| source.tools()).collect();
        self.merge(lists)
    }

    /// The merged list when a source's list changed since the last merge, else `None`.
    pub(crate) fn changed(&mut self) -> Option<Vec<ToolDefinition>> {
        let lists: Vec<Vec<ToolDefinition>> =
            self.sources.iter().map(|source| source.tools()).collect();
        if self
            .merged_from
            .as_ref()
            .is_some_and(|previous| same_lists(previous, &lists))
        {
            return None;
        }
        Some(self.merge(lists))
    }

    fn merge(&mut self, lists: Vec<Vec<ToolDefinition>>) -> Vec<ToolDefinition> {
        let labelled = self
            .sources
            .iter()
            .map(|source| source.label())
            .zip(lists.iter().map(Vec::as_slice));
        let (tools, dropped) = merge(&self.before, labelled, &self.after, &self.reserved);
        for warning in dropped {
            tracing::warn!(target: "flue::tools", "{warning}");
        }
        self.merged_from = Some(lists);
        tools
    }
}

/// `before`, then each source's tools, then `after`. A source's tool whose name is taken by a
/// fixed tool, a reserved name or an earlier tool is left out; the second value says which,
/// one message each. Collisions among fixed tools are kept (`ToolSet::assemble` refuses them).
fn merge<'a>(
    before: &[ToolDefinition],
    sources: impl IntoIterator<Item = (String, &'a [ToolDefinition])>,
    after: &[ToolDefinition],
    reserved: &[String],
) -> (Vec<ToolDefinition>, Vec<String>) {
    let mut taken: BTreeSet<&str> = before
        .iter()
        .chain(after)
        .map(ToolDefinition::name)
        .chain(reserved.iter().map(String::as_str))
        .collect();
    let mut tools = before.to_vec();
    let mut dropped = Vec::new();
    for (label, list) in sources {
        for tool in list {
            if taken.insert(tool.name()) {
                tools.push(tool.clone());
            } else {
                dropped.push(format!(
                    "tool `{}` of {label} is left out: another tool of the agent already has \
                     that name; rename one of them",
                    tool.name()
                ));
            }
        }
    }
    tools.extend(after.iter().cloned());
    (tools, dropped)
}

/// Whether two snapshots of the sources hold the very same definitions.
fn same_lists(a: &[Vec<ToolDefinition>], b: &[Vec<ToolDefinition>]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(a, b)| {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| ToolDefinition::same(a, b))
        })
}

#[cfg(test)]
mod tests;
