//! The extension slot of a [`ToolContext`](super::ToolContext): values the runtime attaches
//! to a call's context, one per type, that the tool module itself never looks into.
//!
//! The agent loop puts its own types here (the caller's harness and scope for actions, the log
//! that holds an MCP server's live questions) and the modules that defined them take them out
//! again by type, so the tool module depends on neither of them.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;

/// Values keyed by their type. Cloning shares the values.
#[derive(Clone, Default)]
pub(crate) struct Extensions {
    values: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
}

impl Extensions {
    /// Sets the value of type `T`, replacing an earlier one.
    pub(crate) fn insert<T: Any + Send + Sync>(&mut self, value: T) {
        self.values.insert(TypeId::of::<T>(), Arc::new(value));
    }

    /// The value of type `T`, when one was set.
    pub(crate) fn get<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.values
            .get(&TypeId::of::<T>())
            .and_then(|value| value.downcast_ref::<T>())
    }
}
