//! Elicitation: an MCP server asks, in the middle of a tool call, for structured input, and the
//! question becomes a live pending action any process can answer.
//!
//! Two parts. The schema rules ([`elicitation_defaults`], [`field_value`],
//! [`check_elicitation_content`]) apply the requested schema's defaults as the MCP spec says and
//! check an answer against it; every frontend (a terminal prompt, `--yes`, an HTTP decision)
//! uses them. The live wait ([`ToolContext::ask_elicitation`]) stores the question as a
//! [`Record::ActionRequired`] of kind [`ActionKind::Elicitation`] in the log of the running
//! call's root session (a subagent's question names its task session), and waits, in the process holding the MCP connection, for the first
//! [`Record::ActionResolved`] of it: stored by this process or any other (the store's head watch
//! wakes it, a slow poll covers stores that cannot notify). No answer within the timeout
//! declines it; an abort of the call cancels it; a restart answers it `interrupted` (the agent
//! loop closes live actions left pending when an operation opens). The operation never pauses
//! for it: the call is running the whole time.

use std::sync::Arc;
use std::time::Duration;

use flue_protocol::record::{
    ActionDecision, ActionKind, ActionResolution, PendingAction, Record, StoredRecord,
};
use serde_json::{Map, Value, json};
use tokio::sync::watch;

use crate::error::{FlueError, Result};
use crate::redact::Redactor;
use crate::store::{DynSessionStore, HeadWatch, SessionKey};
use crate::tool::ToolContext;
use crate::util::{new_ulid, now_ms, stamp_now};

#[cfg(test)]
mod tests;

/// How often a live wait re-reads the log when the store cannot notify (another process on
/// SQLite).
const LIVE_POLL: Duration = Duration::from_millis(250);

/// How many times a live action's writes retry after another writer moved the session on.
const APPEND_RETRIES: usize = 64;

/// The schema's properties, in order: name and schema.
pub fn elicitation_fields(schema: &Value) -> Vec<(&str, &Value)> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|properties| {
            properties
                .iter()
                .map(|(name, schema)| (name.as_str(), schema))
                .collect()
        })
        .unwrap_or_default()
}

/// The names the schema marks `required`.
pub fn elicitation_required(schema: &Value) -> Vec<&str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// The values of every field whose schema has a `default` of the field's type (strings, enum
/// members, integers, numbers, booleans); fields without a usable default are left out.
pub fn elicitation_defaults(schema: &Value) -> Map<String, Value> {
    elicitation_fields(schema)
        .into_iter()
        .filter_map(|(name, field)| {
            let default = field.get("default")?;
            field_value(field, default).map(|value| (name.to_owned(), value))
        })
        .collect()
}

/// `value` as a value of the field `schema` describes, converting text a person typed (`"30"`
/// for an integer, `"yes"` for a boolean); `None` when it does not fit.
pub fn field_value(schema: &Value, value: &Value) -> Option<Value> {
    let kind = schema
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("string");
    let text = value.as_str().map(str::trim);
    let converted = match kind {
        "integer" => match (value.as_i64(), text) {
            (Some(number), _) => Some(Value::from(number)),
            (None, Some(text)) => text.parse::<i64>().ok().map(Value::from),
            (None, None) => value
                .as_f64()
                .filter(|number| number.fract() == 0.0)
                .and_then(|number| format!("{number:.0}").parse::<i64>().ok())
                .map(Value::from),
        },
        "number" => match (value.as_f64(), text) {
            (Some(number), _) => Some(Value::from(number)),
            (None, Some(text)) => text.parse::<f64>().ok().map(Value::from),
            (None, None) => None,
        },
        "boolean" => match (value.as_bool(), text) {
            (Some(flag), _) => Some(Value::Bool(flag)),
            (None, Some("true" | "yes" | "y")) => Some(Value::Bool(true)),
            (None, Some("false" | "no" | "n")) => Some(Value::Bool(false)),
            _ => None,
        },
        _ => text.map(|text| Value::String(text.to_owned())),
    }?;
    let options = field_options(schema);
    if !options.is_empty()
        && !options
            .iter()
            .any(|option| Some(option.as_str()) == converted.as_str())
    {
        return None;
    }
    Some(converted)
}

/// The allowed values of an enum field (`enum`, or the `const`s of `oneOf`/`anyOf`).
pub fn field_options(schema: &Value) -> Vec<String> {
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        return values
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
    }
    ["oneOf", "anyOf"]
        .iter()
        .filter_map(|key| schema.get(*key).and_then(Value::as_array))
        .flatten()
        .filter_map(|option| option.get("const").and_then(Value::as_str))
        .map(str::to_owned)
        .collect()
}

/// Checks an accepted answer against the requested `schema`: `content` must be an object of
/// the schema's fields, each value of its field's type (text such as `"30"` is converted as
/// [`field_value`] does); fields left out get their defaults; every `required` field must then
/// be there. Returns the values to send, or what is wrong, naming the fields.
pub fn check_elicitation_content(
    schema: &Value,
    content: &Value,
) -> std::result::Result<Map<String, Value>, String> {
    let Some(given) = content.as_object() else {
        return Err("the content must be a JSON object of the requested fields".to_owned());
    };
    let fields = elicitation_fields(schema);
    let mut values = elicitation_defaults(schema);
    let mut problems = Vec::new();
    for (name, value) in given {
        let Some((_, field)) = fields.iter().find(|(field, _)| field == name) else {
            let known: Vec<&str> = fields.iter().map(|(name, _)| *name).collect();
            problems.push(format!(
                "`{name}` is not a requested field (the fields: {})",
                known.join(", ")
            ));
            continue;
        };
        if value.is_null() {
            continue;
        }
        match field_value(field, value) {
            Some(value) => {
                values.insert(name.clone(), value);
            }
            None => problems.push(field_problem(name, field, value)),
        }
    }
    for name in elicitation_required(schema) {
        if !values.contains_key(name) {
            problems.push(format!("`{name}` is required and has no default"));
        }
    }
    if problems.is_empty() {
        Ok(values)
    } else {
        Err(problems.join("; "))
    }
}

/// Why `value` does not fit field `name`.
fn field_problem(name: &str, field: &Value, value: &Value) -> String {
    let options = field_options(field);
    if !options.is_empty() {
        return format!(
            "`{name}` must be one of {}, not {value}",
            options.join(", ")
        );
    }
    let kind = field
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("string");
    format!("`{name}` must be of type {kind}, not {value}")
}

/// One server's question, as [`ToolContext::ask_elicitation`] stores it.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ElicitationQuestion {
    /// The MCP server that asks.
    pub server: String,
    /// What it says it needs.
    pub message: String,
    /// The requested schema (a flat object schema).
    pub schema: Value,
}

impl ElicitationQuestion {
    /// A question from `server`.
    pub fn new(server: impl Into<String>, message: impl Into<String>, schema: Value) -> Self {
        Self {
            server: server.into(),
            message: message.into(),
            schema,
        }
    }
}

/// What a running call needs to hold a live action: where its session log is and how to
/// notice decisions. Set by the agent loop on each call's context.
#[derive(Clone)]
pub(crate) struct LiveLog {
    pub(crate) store: Arc<dyn DynSessionStore>,
    /// The root session of the call's session: questions are listed and answered there.
    pub(crate) key: SessionKey,
    /// The task session whose call asks, when a subagent's call asks.
    pub(crate) task_session: Option<String>,
    pub(crate) tool_name: String,
    pub(crate) redactor: Redactor,
    /// Bumped by decisions stored in this process through the harness.
    pub(crate) wake: watch::Receiver<u64>,
}

/// How a live wait ended.
enum Waited {
    Decided(ActionDecision),
    TimedOut,
    Aborted,
}

impl ToolContext {
    /// Stores `question` as a live pending action of kind [`ActionKind::Elicitation`] in the
    /// log of the call's root session (with [`PendingAction::session`] naming the task session
    /// when a subagent's call asks; secrets redacted), and waits up to `timeout` for its decision, taken
    /// in this process or any other ([`AgentRuntime::resolve`], `Session::resolve`, `POST
    /// .../actions/<id>`): [`ActionDecision::Accept`], [`ActionDecision::Decline`] or
    /// [`ActionDecision::Cancel`]. No decision in time stores and returns a `Decline` saying
    /// so; an abort of the call stores and returns `Cancel`. The first decision stored wins.
    ///
    /// Errors: outside a session's tool call there is no log to hold the question
    /// ([`FlueError::InvalidRequest`]); a store failure is returned as is.
    ///
    /// [`AgentRuntime::resolve`]: crate::submission::AgentRuntime::resolve
    pub async fn ask_elicitation(
        &self,
        question: &ElicitationQuestion,
        timeout: Duration,
    ) -> Result<ActionDecision> {
        let Some(live) = self.extension::<LiveLog>().cloned() else {
            return Err(FlueError::InvalidRequest {
                message: "a live question needs a session's running tool call".into(),
            });
        };
        let mut input = json!({
            "server": question.server,
            "message": question.message,
            "requestedSchema": question.schema,
            "defaults": Value::Object(elicitation_defaults(&question.schema)),
        });
        live.redactor.redact_json(&mut input);
        let action = PendingAction {
            action_id: format!("eli_{}", new_ulid().to_lowercase()),
            call_id: self.call_id.clone(),
            tool_name: live.tool_name.clone(),
            input,
            kind: ActionKind::Elicitation,
            reason: live
                .redactor
                .redact(&format!(
                    "mcp server `{}` asks: {}",
                    question.server, question.message
                ))
                .into_owned(),
            session: live.task_session.clone(),
            output_schema: None,
            idempotency_key: None,
        };
        let mut seen = live
            .append_retrying(&[Record::ActionRequired(action.clone())])
            .await?;
        let mut guard = Unanswered {
            live: Some((live.clone(), action.clone())),
        };
        let waited = live
            .wait_for(&action.action_id, &mut seen, timeout, &self.cancel)
            .await?;
        let decision = match waited {
            Waited::Decided(decision) => decision,
            Waited::TimedOut => {
                let message = format!(
                    "no answer within {}; the question was declined",
                    humanize(timeout)
                );
                live.decide_first(
                    &action,
                    ActionDecision::Decline {
                        message: Some(message),
                    },
                )
                .await?
            }
            Waited::Aborted => live.decide_first(&action, ActionDecision::Cancel).await?,
        };
        guard.live = None;
        Ok(decision)
    }
}

/// A live action whose wait was dropped before it ended (the MCP request went away): answered
/// `interrupted` in the background so it does not stay pending.
struct Unanswered {
    live: Option<(LiveLog, PendingAction)>,
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        if let Some((live, action)) = self.live.take()
            && let Ok(handle) = tokio::runtime::Handle::try_current()
        {
            handle.spawn(async move {
                let _ = live
                    .decide_first(&action, ActionDecision::Interrupted)
                    .await;
            });
        }
    }
}

impl LiveLog {
    /// Appends `records` at the session's current end, re-reading it after another writer;
    /// returns the version after the append.
    async fn append_retrying(&self, records: &[Record]) -> Result<u64> {
        let stored = stamp_now(records.iter().cloned());
        let mut last = None;
        let mut version = self.load(0).await?.version;
        for _ in 0..APPEND_RETRIES {
            match self.store.append(&self.key, version, &stored).await {
                Ok(version) => return Ok(version),
                Err(err @ FlueError::VersionConflict { .. }) => {
                    last = Some(err);
                    version = self.load(version).await?.version;
                }
                Err(err) => return Err(err),
            }
        }
        Err(last.unwrap_or_else(|| FlueError::Store {
            message: "the session kept changing underneath".into(),
            source: None,
        }))
    }

    async fn load(&self, from: u64) -> Result<crate::store::SessionLog> {
        self.store
            .load(&self.key, from)
            .await?
            .ok_or_else(|| FlueError::SessionNotFound {
                session: self.key.session.clone(),
            })
    }

    /// The decision on `action_id` among the records from index `seen` on, moving `seen`.
    async fn decided(&self, action_id: &str, seen: &mut u64) -> Result<Option<ActionDecision>> {
        let log = self.load(*seen).await?;
        *seen = log.version;
        Ok(log
            .records
            .into_iter()
            .find_map(|stored| match stored.record {
                Record::ActionResolved(resolution) if resolution.action_id == action_id => {
                    Some(resolution.decision)
                }
                _ => None,
            }))
    }

    async fn wait_for(
        &self,
        action_id: &str,
        seen: &mut u64,
        timeout: Duration,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<Waited> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut wake = self.wake.clone();
        let mut head: Option<HeadWatch> = self.store.watch_appends(&self.key);
        loop {
            if let Some(decision) = self.decided(action_id, seen).await? {
                return Ok(Waited::Decided(decision));
            }
            let head_changed = async {
                match head.as_mut() {
                    Some(watch) => {
                        if watch.changed().await.is_err() {
                            std::future::pending::<()>().await;
                        }
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            let woken = async {
                if wake.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                () = cancel.cancelled() => return Ok(Waited::Aborted),
                () = tokio::time::sleep_until(deadline) => {
                    // A decision stored at the last moment still wins.
                    return Ok(match self.decided(action_id, seen).await? {
                        Some(decision) => Waited::Decided(decision),
                        None => Waited::TimedOut,
                    });
                }
                () = head_changed => {}
                () = woken => {}
                () = tokio::time::sleep(LIVE_POLL) => {}
            }
        }
    }

    /// Stores `decision` on `action` unless another decision is stored first; returns the one
    /// that won.
    async fn decide_first(
        &self,
        action: &PendingAction,
        decision: ActionDecision,
    ) -> Result<ActionDecision> {
        let record = Record::ActionResolved(ActionResolution::of(action, decision.clone()));
        let stored = [StoredRecord::new(record, now_ms())];
        let mut last = None;
        for _ in 0..APPEND_RETRIES {
            let log = self.load(0).await?;
            let earlier = log.records.iter().find_map(|stored| match &stored.record {
                Record::ActionResolved(resolution) if resolution.action_id == action.action_id => {
                    Some(resolution.decision.clone())
                }
                _ => None,
            });
            if let Some(earlier) = earlier {
                return Ok(earlier);
            }
            match self.store.append(&self.key, log.version, &stored).await {
                Ok(_) => return Ok(decision),
                Err(err @ FlueError::VersionConflict { .. }) => last = Some(err),
                Err(err) => return Err(err),
            }
        }
        Err(last.unwrap_or_else(|| FlueError::Store {
            message: "the session kept changing underneath".into(),
            source: None,
        }))
    }
}

/// `10m`, `90s`, `1m30s`, `400ms`.
fn humanize(duration: Duration) -> String {
    let secs = duration.as_secs();
    if secs == 0 {
        return format!("{}ms", duration.as_millis());
    }
    match (secs / 60, secs % 60) {
        (0, secs) => format!("{secs}s"),
        (mins, 0) => format!("{mins}m"),
        (mins, secs) => format!("{mins}m{secs}s"),
    }
}

/// Whether `record` belongs to a live action (an elicitation's question or decision), given the
/// records before it: the records a running call may add to its session while the loop holds
/// an older version of the log.
pub(crate) fn is_live_record(record: &Record, before: &[Record]) -> bool {
    match record {
        Record::ActionRequired(action) => action.kind == ActionKind::Elicitation,
        Record::ActionResolved(resolution) => before.iter().any(|earlier| {
            matches!(earlier, Record::ActionRequired(action)
                if action.kind == ActionKind::Elicitation && action.action_id == resolution.action_id)
        }),
        _ => false,
    }
}
