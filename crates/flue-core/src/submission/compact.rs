//! Compacting a managed conversation on request, between its submissions.
//!
//! A conversation the runtime manages is written only under its owner's fence, so
//! [`crate::Session::compact`] on a harness of one's own is refused there. The runtime takes
//! ownership the way a decision does (waiting while a submission runs), compacts the root
//! session through a harness on the fenced store, and gives ownership back.

use std::sync::Arc;

use crate::error::Result;
use crate::store::rules::ROOT_SESSION;
use crate::submission::driver::build_harness;
use crate::submission::fenced::FencedSessions;
use crate::submission::runtime::AgentRuntime;
use crate::submission::wire::ConversationKey;
use flue_protocol::event::Event;

impl AgentRuntime {
    /// Compacts conversation `key` now, as [`crate::Session::compact`] does (its summary
    /// written by the agent's model), once no submission of it runs. Returns the events the
    /// operation sent (with `compaction_start` and `compaction_end` when it compacted; without
    /// them when nothing was old enough to fold).
    ///
    /// Errors (nothing stored): [`crate::FlueError::AgentInstanceNotFound`] for a conversation
    /// with no message yet, [`crate::FlueError::ConversationBusy`] when another owner keeps it
    /// longer than a minute, the summary's failure, and [`crate::FlueError::RuntimeStopped`]
    /// after shutdown.
    pub async fn compact(&self, key: &ConversationKey) -> Result<Vec<Event>> {
        let _serial = self.inner.resolving.lock().await;
        let (fence, _) = self.own_checked(key, |_| Ok(())).await?;
        let fenced = Arc::new(FencedSessions::new(
            Arc::clone(&self.inner.store),
            fence.clone(),
            ROOT_SESSION,
        ));
        let result = match build_harness(&self.inner, key, &fenced).await {
            Ok(harness) => compact_root(&harness).await,
            Err(err) => Err(err),
        };
        match result {
            Ok(events) => {
                if let Ok(false) = self.inner.store.release(&fence).await {
                    // Work was queued meanwhile: run it rather than sit on the conversation.
                    self.inner.kick(&fence.key);
                }
                Ok(events)
            }
            Err(err) => Err(self.give_back(&fence, err).await),
        }
    }
}

/// Compacts the root session of `harness`; its events, in order.
async fn compact_root(harness: &crate::harness::Harness) -> Result<Vec<Event>> {
    let session = harness.session(ROOT_SESSION).await?;
    let mut handle = session.compact();
    let mut events = Vec::new();
    if let Some(mut stream) = handle.take_events() {
        while let Some(event) = stream.recv().await {
            events.push(event);
        }
    }
    handle.await?;
    Ok(events)
}
