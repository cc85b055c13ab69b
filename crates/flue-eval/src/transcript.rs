//! What one run of a case produced, read back from the conversation's stored stream: the
//! replies, the tool calls of every session (tasks included), turns, usage and latency. It is
//! what assertions check, and the JSON a command scorer reads on stdin.

use std::collections::BTreeMap;

use flue_core::{ErrorInfo, Usage};
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

/// One run of one case.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Transcript {
    /// The case's name.
    pub case: String,
    /// The case file.
    pub file: String,
    /// The agent.
    pub agent: String,
    /// The conversation id (`flue session show --id AGENT:ID` opens it).
    pub conversation: String,
    /// Which repetition, from 1.
    pub repetition: u32,
    /// The messages sent, in order.
    pub messages: Vec<String>,
    /// The reply to each message that settled, in order.
    pub replies: Vec<String>,
    /// The last reply (empty when none).
    pub reply: String,
    /// The last message's structured result, when one was asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Json>,
    /// How the last submission settled: `completed`, `failed`, `aborted`, or `requires_action`
    /// when it paused on a decision nobody gives in an eval.
    pub outcome: String,
    /// Why the last submission failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
    /// Every tool call of the conversation, in the order they were stored.
    pub tool_calls: Vec<CallRecord>,
    /// Model turns, in every session.
    pub turns: u64,
    /// Usage of every model turn.
    pub usage: Usage,
    /// From the first message's dispatch to the last settlement.
    pub latency_ms: u64,
    /// The files `expect.files` asks about, as they were after the last message (`None`: absent
    /// or unreadable).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, Option<String>>,
    /// Tool calls waiting for their result while records are added: (session, call id) to the
    /// call's index.
    #[serde(skip)]
    pub(crate) pending: BTreeMap<(String, String), usize>,
}

/// One tool call and what it returned.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct CallRecord {
    /// The session it was made in (`default`, or a task's).
    pub session: String,
    /// The tool.
    pub name: String,
    /// Its input.
    pub input: Json,
    /// What the tool returned, when it was answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// Whether the tool failed.
    #[serde(default)]
    pub is_error: bool,
}

impl Transcript {
    /// Total tokens (input, cached input and output).
    pub fn tokens(&self) -> u64 {
        self.usage.context_tokens()
    }

    /// Total cost in US dollars (0 when the model has no price).
    pub fn cost_usd(&self) -> f64 {
        self.usage.cost_usd.unwrap_or(0.0)
    }

    /// Adds the records of one stored batch of session `session`.
    pub(crate) fn add_records<'a>(
        &mut self,
        session: &str,
        records: impl IntoIterator<Item = &'a flue_core::Record>,
    ) {
        for record in records {
            match record {
                flue_core::Record::Assistant(message) => {
                    self.turns += 1;
                    self.usage += message.usage;
                    for part in &message.content {
                        if let flue_core::AssistantContent::ToolCall(call) = part {
                            self.tool_calls.push(CallRecord {
                                session: session.to_owned(),
                                name: call.name.clone(),
                                input: call.input.clone(),
                                output: None,
                                is_error: false,
                            });
                            self.pending.insert(
                                (session.to_owned(), call.id.clone()),
                                self.tool_calls.len() - 1,
                            );
                        }
                    }
                }
                flue_core::Record::ToolResult(result) => {
                    if let Some(call_idx) = self
                        .pending
                        .remove(&(session.to_owned(), result.call_id.clone()))
                        && let Some(call) = self.tool_calls.get_mut(call_idx)
                    {
                        call.output = Some(result.content.clone());
                        call.is_error = result.is_error;
                    }
                }
                flue_core::Record::FailedTurn(failed) => self.usage += failed.usage,
                flue_core::Record::Sampling(exchange) => self.usage += exchange.usage,
                flue_core::Record::Hook(hook) => self.usage += hook.usage.unwrap_or_default(),
                _ => {}
            }
        }
    }
}
