//! Elicitation: an MCP server asks, in the middle of a call, for structured input from the
//! person using the agent. [`McpElicitor`] is who answers: a terminal prompt (flue-cli),
//! [`AcceptDefaults`], [`DeclineElicitation`], or [`PendingActionElicitor`], which makes the
//! question a live pending action of the call's session that any process answers. The schema's
//! defaults are applied as the spec says (flue-core's [`flue_core::elicitation::elicitation_defaults`]).

use std::sync::Arc;
use std::time::Duration;

use flue_core::{
    ActionDecision, BoxFuture, ToolContext,
    elicitation::{
        ElicitationQuestion, elicitation_defaults, elicitation_fields, elicitation_required,
    },
};
use serde_json::{Map, Value};

/// How long a question waits for an answer by default before it is declined.
pub const DEFAULT_ELICITATION_TIMEOUT: Duration = Duration::from_secs(600);

#[cfg(test)]
mod tests;

/// One question from a server: a message and the flat object schema of the answer.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ElicitationRequest {
    /// The server that asks (its name in the agent's `mcp` settings).
    pub server: String,
    /// What the server says it needs.
    pub message: String,
    /// The requested schema: `{"type": "object", "properties": {...}, "required": [...]}`,
    /// each property a string (possibly with `enum`), number, integer or boolean.
    pub schema: Value,
    /// The tool call of this server that was running when the question came (the latest one
    /// when several run at once); `None` when the server asked between calls.
    pub caller: Option<ToolContext>,
    /// How long the question may wait for an answer (the server's `elicitation_timeout_ms`,
    /// default [`DEFAULT_ELICITATION_TIMEOUT`]).
    pub timeout: Duration,
}

impl PartialEq for ElicitationRequest {
    fn eq(&self, other: &Self) -> bool {
        (&self.server, &self.message, &self.schema, self.timeout)
            == (&other.server, &other.message, &other.schema, other.timeout)
    }
}

/// The answer to an [`ElicitationRequest`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ElicitationAnswer {
    /// The person accepted and gave these values (checked against the schema by the server).
    Accept(Map<String, Value>),
    /// The person (or the configuration) said no; `reason` says why, for logs and notices.
    Decline {
        /// Why, in words a user can act on.
        reason: String,
    },
    /// The question was dismissed without a choice.
    Cancel,
}

/// Who answers a server's elicitation requests.
///
/// Called once per request, while the tool call that caused it waits. Implementations: a
/// terminal prompt (flue-cli), [`AcceptDefaults`] (`flue run --yes`), [`DeclineElicitation`]
/// (headless, the default), and [`PendingActionElicitor`] (`flue serve` and `flue dev`: a live
/// pending action any process resolves).
pub trait McpElicitor: Send + Sync + 'static {
    /// Answers `request`. Never fails: a problem asking is a `Decline` with its reason.
    fn elicit<'a>(&'a self, request: &'a ElicitationRequest) -> BoxFuture<'a, ElicitationAnswer>;
}

/// Accepts every request with the schema's defaults ([`ElicitationRequest::defaults`]);
/// declines when a required field has no default.
#[derive(Clone, Copy, Debug, Default)]
pub struct AcceptDefaults;

/// Declines every request with a fixed reason (a headless run with no one to ask).
#[derive(Clone, Debug)]
pub struct DeclineElicitation {
    reason: String,
}

impl ElicitationRequest {
    /// A request from `server`.
    pub fn new(server: impl Into<String>, message: impl Into<String>, schema: Value) -> Self {
        Self {
            server: server.into(),
            message: message.into(),
            schema,
            caller: None,
            timeout: DEFAULT_ELICITATION_TIMEOUT,
        }
    }

    /// The schema's properties, in order: name and schema.
    pub fn fields(&self) -> Vec<(&str, &Value)> {
        elicitation_fields(&self.schema)
    }

    /// The names the schema marks `required`.
    pub fn required(&self) -> Vec<&str> {
        elicitation_required(&self.schema)
    }

    /// The values of every field whose schema has a `default` of the field's type (strings,
    /// enum members, integers, numbers, booleans); fields without a usable default are left
    /// out.
    pub fn defaults(&self) -> Map<String, Value> {
        elicitation_defaults(&self.schema)
    }

    /// The answer [`AcceptDefaults`] gives: the defaults, or a decline naming the required
    /// fields that have none.
    pub fn accept_defaults(&self) -> ElicitationAnswer {
        let defaults = self.defaults();
        let missing: Vec<&str> = self
            .required()
            .into_iter()
            .filter(|name| !defaults.contains_key(*name))
            .collect();
        if missing.is_empty() {
            return ElicitationAnswer::Accept(defaults);
        }
        ElicitationAnswer::Decline {
            reason: format!(
                "required fields without a default: {}; answer on a terminal instead",
                missing.join(", ")
            ),
        }
    }
}

impl McpElicitor for AcceptDefaults {
    fn elicit<'a>(&'a self, request: &'a ElicitationRequest) -> BoxFuture<'a, ElicitationAnswer> {
        Box::pin(async move { request.accept_defaults() })
    }
}

impl DeclineElicitation {
    /// Declines with `reason`.
    pub fn new(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
        }
    }
}

impl Default for DeclineElicitation {
    fn default() -> Self {
        Self::new("no one to ask: this run has no terminal and was not told to accept defaults")
    }
}

impl McpElicitor for DeclineElicitation {
    fn elicit<'a>(&'a self, _request: &'a ElicitationRequest) -> BoxFuture<'a, ElicitationAnswer> {
        let reason = self.reason.clone();
        Box::pin(async move { ElicitationAnswer::Decline { reason } })
    }
}

/// Makes each question a live pending action of the session whose tool call caused it
/// ([`ToolContext::ask_elicitation`]): listed with the session's actions (`GET
/// .../actions`), answered by any process (`POST .../actions/<id>`, `AgentRuntime::resolve`,
/// `Session::answer`) with accept, decline or cancel, declined when nobody answers within the
/// request's timeout. The answer is recorded in the log with the question. A question outside
/// a tool call is declined.
#[derive(Clone, Copy, Debug, Default)]
pub struct PendingActionElicitor;

impl McpElicitor for PendingActionElicitor {
    fn elicit<'a>(&'a self, request: &'a ElicitationRequest) -> BoxFuture<'a, ElicitationAnswer> {
        Box::pin(async move {
            let Some(caller) = &request.caller else {
                return ElicitationAnswer::Decline {
                    reason: "the server asked outside a tool call; there is no conversation to \
                             hold the question"
                        .to_owned(),
                };
            };
            let question = ElicitationQuestion::new(
                request.server.clone(),
                request.message.clone(),
                request.schema.clone(),
            );
            match caller.ask_elicitation(&question, request.timeout).await {
                Ok(ActionDecision::Accept { content }) => match content {
                    Value::Object(values) => ElicitationAnswer::Accept(values),
                    _ => ElicitationAnswer::Cancel,
                },
                Ok(ActionDecision::Decline { message }) => ElicitationAnswer::Decline {
                    reason: message.unwrap_or_else(|| "declined".to_owned()),
                },
                Ok(ActionDecision::Interrupted) => ElicitationAnswer::Decline {
                    reason: "the conversation was interrupted before the question was answered"
                        .to_owned(),
                },
                Ok(_) => ElicitationAnswer::Cancel,
                Err(err) => ElicitationAnswer::Decline {
                    reason: format!("the question could not be recorded: {err}"),
                },
            }
        })
    }
}

impl<T: McpElicitor + ?Sized> McpElicitor for Arc<T> {
    fn elicit<'a>(&'a self, request: &'a ElicitationRequest) -> BoxFuture<'a, ElicitationAnswer> {
        (**self).elicit(request)
    }
}
