//! Background tasks as a session sees them: the [`BackgroundRuntime`] through which a
//! conversation's root session starts and follows the tasks it does not wait for (the
//! submission runtime implements it), what a start takes, and the model's `task_status`,
//! `task_wait` and `task_cancel` tools over it. Nothing here knows the runtime itself.

use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::tool::{Ownership, ToolContext, ToolDefinition, ToolError, ToolMeta, ToolOrigin};
use crate::util::BoxFuture;

/// How long `task_wait` waits when the model names no timeout, and at most.
const DEFAULT_WAIT: Duration = Duration::from_secs(60);
const MAX_WAIT: Duration = Duration::from_secs(600);

/// The runtime serving a conversation, as its root session reaches it for background tasks.
/// Each answer is the JSON the model gets, or a tool error it can act on.
pub(crate) trait BackgroundRuntime: Send + Sync {
    /// Starts a background task of the conversation; answers its handle at once.
    fn start(
        &self,
        prompt: String,
        options: BackgroundTaskOptions,
    ) -> BoxFuture<'_, std::result::Result<Value, ToolError>>;
    /// The state of the conversation's task `task_id`.
    fn status(&self, task_id: String) -> BoxFuture<'_, std::result::Result<Value, ToolError>>;
    /// The state once the task settles, or after `timeout`, or an abort on `cancel`.
    fn wait(
        &self,
        task_id: String,
        timeout: Duration,
        cancel: CancellationToken,
    ) -> BoxFuture<'_, std::result::Result<Value, ToolError>>;
    /// Cancels the conversation's task `task_id`.
    fn cancel(&self, task_id: String) -> BoxFuture<'_, std::result::Result<Value, ToolError>>;
}

/// A shared [`BackgroundRuntime`].
pub(crate) type BackgroundHandle = Arc<dyn BackgroundRuntime>;

/// What to start a background task with. Builder-lite: start from `default()`.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct BackgroundTaskOptions {
    /// The agent the child runs as (an agent the runtime serves); the parent's when `None`.
    pub agent: Option<String>,
    /// A role for the child's message.
    pub role: Option<String>,
    /// Names the start: the same key starts the same child once (a start run again after a
    /// crash finds its child). A fresh key per start when `None`.
    pub idempotency_key: Option<String>,
}

impl BackgroundTaskOptions {
    /// Sets the agent the child runs as.
    #[must_use]
    pub fn with_agent(mut self, agent: impl Into<String>) -> Self {
        self.agent = Some(agent.into());
        self
    }

    /// Sets the role of the child's message.
    #[must_use]
    pub fn with_role(mut self, role: impl Into<String>) -> Self {
        self.role = Some(role.into());
        self
    }

    /// Sets the idempotency key of the start.
    #[must_use]
    pub fn with_idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }
}

/// Input of `task_status` and `task_cancel`.
#[derive(Debug, Deserialize, JsonSchema)]
struct TaskIdInput {
    /// The `task_id` a background `task` call returned.
    task_id: String,
}

/// Input of `task_wait`.
#[derive(Debug, Deserialize, JsonSchema)]
struct TaskWaitInput {
    /// The `task_id` a background `task` call returned.
    task_id: String,
    /// How long to wait at most, in seconds (default 60, at most 600).
    timeout_secs: Option<u64>,
}

/// The tools through which the model follows its background tasks: `task_status`,
/// `task_wait` and `task_cancel`. Without a link (a listing), they do not run.
pub(crate) fn background_tools(link: Option<&BackgroundHandle>) -> Result<Vec<ToolDefinition>> {
    let status = {
        let link = link.cloned();
        ToolDefinition::from_fn(
            "task_status",
            "The state of a background task (`queued`, `running`, `settled`) and, once settled, \
             its outcome and answer.",
            move |input: TaskIdInput, _ctx: ToolContext| {
                let link = link.clone();
                async move { linked(link.as_ref())?.status(input.task_id).await }
            },
        )?
    };
    let wait = {
        let link = link.cloned();
        ToolDefinition::from_fn(
            "task_wait",
            "Waits until a background task settles (or the timeout passes) and returns its \
             state, outcome and answer.",
            move |input: TaskWaitInput, ctx: ToolContext| {
                let link = link.clone();
                async move {
                    let timeout = input
                        .timeout_secs
                        .map_or(DEFAULT_WAIT, Duration::from_secs)
                        .min(MAX_WAIT);
                    linked(link.as_ref())?
                        .wait(input.task_id, timeout, ctx.cancel)
                        .await
                }
            },
        )?
    };
    let cancel = {
        let link = link.cloned();
        ToolDefinition::from_fn(
            "task_cancel",
            "Cancels a background task; its result then arrives as `aborted`.",
            move |input: TaskIdInput, _ctx: ToolContext| {
                let link = link.clone();
                async move { linked(link.as_ref())?.cancel(input.task_id).await }
            },
        )?
    };
    Ok([status, wait, cancel]
        .into_iter()
        .map(|tool| {
            // Reading a state and requesting an abort are safe to repeat.
            tool.with_meta(ToolMeta {
                ownership: Ownership::Managed,
                replay_safe: true,
                ..ToolMeta::default()
            })
            .with_origin(ToolOrigin::Task)
        })
        .collect())
}

fn linked(
    link: Option<&BackgroundHandle>,
) -> std::result::Result<&dyn BackgroundRuntime, ToolError> {
    link.map(AsRef::as_ref).ok_or_else(|| {
        ToolError::new(
            "background_unavailable",
            "background tasks are followed only in a conversation served by the runtime",
        )
    })
}
