//! Elicitation: an MCP server asks, in the middle of a call, for structured input from the
//! person using the agent. [`McpElicitor`] is who answers; the schema's defaults are applied
//! here, as the spec says.

use std::sync::Arc;

use flue_core::BoxFuture;
use serde_json::{Map, Value};

#[cfg(test)]
mod tests;

/// One question from a server: a message and the flat object schema of the answer.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ElicitationRequest {
    /// The server that asks (its name in the agent's `mcp` settings).
    pub server: String,
    /// What the server says it needs.
    pub message: String,
    /// The requested schema: `{"type": "object", "properties": {...}, "required": [...]}`,
    /// each property a string (possibly with `enum`), number, integer or boolean.
    pub schema: Value,
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
/// (headless, the default), and later a pending action any process can resolve.
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
        }
    }

    /// The schema's properties, in order: name and schema.
    pub fn fields(&self) -> Vec<(&str, &Value)> {
        self.schema
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
    pub fn required(&self) -> Vec<&str> {
        self.schema
            .get("required")
            .and_then(Value::as_array)
            .map(|names| names.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default()
    }

    /// The values of every field whose schema has a `default` of the field's type (strings,
    /// enum members, integers, numbers, booleans); fields without a usable default are left
    /// out.
    pub fn defaults(&self) -> Map<String, Value> {
        self.fields()
            .into_iter()
            .filter_map(|(name, schema)| {
                let default = schema.get("default")?;
                field_value(schema, default).map(|value| (name.to_owned(), value))
            })
            .collect()
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

/// `value` as a value of the field `schema` describes, converting text a person typed
/// (`"30"` for an integer, `"yes"` for a boolean); `None` when it does not fit.
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

impl<T: McpElicitor + ?Sized> McpElicitor for Arc<T> {
    fn elicit<'a>(&'a self, request: &'a ElicitationRequest) -> BoxFuture<'a, ElicitationAnswer> {
        (**self).elicit(request)
    }
}
