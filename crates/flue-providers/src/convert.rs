//! The conversation as remote providers see it, before each wire format shapes it.
//!
//! [`items`] flattens a model view (records) into a sequence of user-side text and images,
//! assistant turns and tool results, applying the rules every provider shares: shell
//! exchanges and compaction summaries become user text, images become a placeholder for
//! models without image input, and a tool result whose call is not in the assistant turn just
//! before it (history cut by compaction) becomes user text, so every tool result a provider
//! receives answers a call it has seen.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt::Write as _;

use flue_core::{
    AssistantContent, AssistantMessage, Image, Record, StopReason, ToolCall, ToolResult,
    UserContent,
    model::{ModelInfo, ModelRequest},
    record::ShellExchange,
};
use serde_json::Value;

/// Shown instead of an image to models that cannot see images.
pub(crate) const IMAGE_PLACEHOLDER: &str =
    "[image omitted: this model does not accept image input]";

/// One piece of the conversation.
#[derive(Debug, PartialEq)]
pub(crate) enum Item<'a> {
    /// User-side text.
    Text(Cow<'a, str>),
    /// A user image (only for models with image input).
    Image(&'a Image),
    /// An assistant turn.
    Assistant(&'a AssistantMessage),
    /// The answer to a call of the preceding assistant turn.
    ToolResult(&'a ToolResult),
}

/// The conversation in order; `image_input` says whether images are kept.
pub(crate) fn items(records: &[Record], image_input: bool) -> Vec<Item<'_>> {
    let mut items = Vec::with_capacity(records.len());
    let mut state = ItemState::default();
    for record in records {
        push_items(&mut state, record, image_input, &mut items);
    }
    items
}

/// Where [`push_items`] stands between two records, so that a conversation converted up to a
/// record can go on from there: the calls of the last assistant turn not answered yet.
#[derive(Clone, Debug, Default)]
pub(crate) struct ItemState {
    open_calls: HashSet<String>,
}

/// Appends the items of `record` (the next record after those `state` has seen).
#[allow(
    clippy::match_same_arms,
    reason = "the known kinds are named; the wildcard covers kinds added to the enum later"
)]
pub(crate) fn push_items<'a>(
    state: &mut ItemState,
    record: &'a Record,
    image_input: bool,
    items: &mut Vec<Item<'a>>,
) {
    let open_calls = &mut state.open_calls;
    match record {
        Record::User(message) => {
            open_calls.clear();
            for part in &message.content {
                match part {
                    UserContent::Text { text } => items.push(Item::Text(Cow::Borrowed(text))),
                    UserContent::Image(image) if image_input => items.push(Item::Image(image)),
                    UserContent::Image(_) => {
                        items.push(Item::Text(Cow::Borrowed(IMAGE_PLACEHOLDER)));
                    }
                    // The enum is non-exhaustive: a part kind added later is not sent
                    // until this crate learns it.
                    _ => {}
                }
            }
        }
        Record::Assistant(message) => {
            *open_calls = message.tool_calls().map(|call| call.id.clone()).collect();
            items.push(Item::Assistant(message));
        }
        Record::ToolResult(result) => {
            if open_calls.remove(result.call_id.as_str()) {
                items.push(Item::ToolResult(result));
            } else {
                items.push(Item::Text(Cow::Owned(format!(
                    "Result of an earlier call to tool `{}`{}:\n{}",
                    result.tool_name,
                    if result.is_error { " (failed)" } else { "" },
                    result.content
                ))));
            }
        }
        Record::Shell(exchange) => {
            open_calls.clear();
            items.push(Item::Text(Cow::Owned(shell_text(exchange))));
        }
        Record::Compaction(summary) => {
            open_calls.clear();
            items.push(Item::Text(Cow::Owned(format!(
                "Summary of the earlier conversation:\n\n{}",
                summary.summary
            ))));
        }
        // Pause bookkeeping and sampling (`steps::model_view` leaves them out before they
        // get here), and, the enum being non-exhaustive, a record kind added later: not
        // shown to the model until this crate learns it.
        _ => {}
    }
}

/// The arguments of a call as the wire carries them: the JSON text, or the model's raw text
/// when it was not valid JSON (kept verbatim as a JSON string).
pub(crate) fn arguments_text(call: &ToolCall) -> String {
    match &call.input {
        Value::String(raw) => raw.clone(),
        input => input.to_string(),
    }
}

/// Tool-call arguments from their wire text: `{}` when empty, else the parsed JSON, or — when
/// the model sent text that is not JSON — that text verbatim as a JSON string, which the agent
/// loop answers with an `invalid_input` tool error the model can retry from.
pub(crate) fn parse_arguments(raw: String) -> Value {
    if raw.trim().is_empty() {
        return Value::Object(serde_json::Map::new());
    }
    match serde_json::from_str(&raw) {
        Ok(value) => value,
        Err(_) => Value::String(raw),
    }
}

/// A rough token count of a request (four bytes a token, a fixed amount per image), to keep
/// the output limit inside the context window.
pub(crate) fn estimate_tokens(request: &ModelRequest<'_>, items: &[Item<'_>]) -> u64 {
    let n_bytes = request_bytes(request) + items.iter().map(item_bytes).sum::<usize>();
    u64::try_from(n_bytes / 4).unwrap_or(u64::MAX)
}

/// The bytes of a request outside its conversation (system prompt and tools), as
/// [`estimate_tokens`] counts them.
pub(crate) fn request_bytes(request: &ModelRequest<'_>) -> usize {
    let mut n_bytes = request.system.len();
    for tool in request.tools {
        n_bytes += tool.name.len() + tool.description.len() + tool.input_schema.to_string().len();
    }
    n_bytes
}

/// The bytes of one item, as [`estimate_tokens`] counts them.
pub(crate) fn item_bytes(item: &Item<'_>) -> usize {
    const IMAGE_BYTES: usize = 1600 * 4;
    match item {
        Item::Text(text) => text.len(),
        Item::Image(_) => IMAGE_BYTES,
        Item::ToolResult(result) => result.content.len(),
        Item::Assistant(message) => message
            .content
            .iter()
            .map(|part| match part {
                AssistantContent::Text { text } | AssistantContent::Thinking { text, .. } => {
                    text.len()
                }
                AssistantContent::ToolCall(call) => call.name.len() + arguments_text(call).len(),
                // The enum is non-exhaustive: a part kind added later is not sent.
                _ => 0,
            })
            .sum(),
    }
}

/// The output limit to request: the model's limit, lowered so that prompt and output fit the
/// context window (with a safety margin), but never below a floor that leaves room to answer.
pub(crate) fn clamp_output(max_output_tokens: u64, info: &ModelInfo, prompt_tokens: u64) -> u64 {
    const SAFETY_TOKENS: u64 = 4096;
    const FLOOR_TOKENS: u64 = 1024;
    let available = info
        .context_window
        .saturating_sub(prompt_tokens.saturating_add(SAFETY_TOKENS));
    max_output_tokens.min(available.max(FLOOR_TOKENS)).max(1)
}

/// The stop reason of a turn given its content: a turn with tool calls hands over to its
/// tools (`tool_use`) whatever the wire said (some servers say `stop`), except when the model
/// refused or a content filter stopped it: then its calls, possibly cut off, are dropped so
/// that nothing runs on behalf of a refused answer, and the reason stays.
pub(crate) fn settle_calls(content: &mut Vec<AssistantContent>, reason: StopReason) -> StopReason {
    let has_calls = content
        .iter()
        .any(|part| matches!(part, AssistantContent::ToolCall(_)));
    if !has_calls {
        return reason;
    }
    match reason {
        StopReason::Refusal | StopReason::ContentFilter => {
            content.retain(|part| !matches!(part, AssistantContent::ToolCall(_)));
            reason
        }
        _ => StopReason::ToolUse,
    }
}

/// A shell exchange as the model reads it.
fn shell_text(exchange: &ShellExchange) -> String {
    let mut text = format!("The user ran a shell command:\n$ {}\n", exchange.command);
    if let Some(cwd) = &exchange.cwd {
        let _ = writeln!(text, "(in {cwd})");
    }
    let _ = writeln!(text, "exit code: {}", exchange.exit_code);
    if !exchange.stdout.is_empty() {
        let _ = writeln!(text, "stdout:\n{}", exchange.stdout);
    }
    if !exchange.stderr.is_empty() {
        let _ = writeln!(text, "stderr:\n{}", exchange.stderr);
    }
    text
}

#[cfg(test)]
mod tests;
