//! The scripted model provider: replays a JSON script of model turns, offline and
//! deterministically, so examples and tests need no network and no API key.
//!
//! A script is a list of rules. For each turn the provider looks at how the conversation ends
//! (a user message, or tool results), takes the first rule that matches, and streams that
//! rule's reply. Scripts are read and validated once per provider and cached by model id. The
//! format is documented for users in `docs/scripted-model.md`.

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use flue_protocol::record::{AssistantContent, Record, StopReason, ToolCall, Usage};
use regex::Regex;
use serde::Deserialize;
use serde_json::Value;

use crate::error::{FlueError, Result};
use crate::model::{
    ModelInfo, ModelPrice, ModelProvider, ModelRequest, ModelTurn, ToolSchema, TurnSink,
};
use crate::util::BoxFuture;
use crate::util::workspace_file::{MAX_SCRIPT_BYTES, WorkspaceFiles};

/// The provider id, the part of `scripted/<path>` before the `/`.
const PROVIDER_ID: &str = "scripted";

/// How much of a user message an error message quotes.
const PREVIEW_CHARS: usize = 80;

/// Replays a script of model turns so examples and tests run offline and deterministically.
///
/// The model id is the path of a JSON script relative to the root given to
/// [`ScriptedProvider::new`], usually the workspace root: the model `scripted/scripts/hello.json`
/// reads `<root>/scripts/hello.json`. Absolute paths and `..` components are refused. Each
/// script is read and validated once (by [`ModelProvider::check_model`] or the first turn) and
/// cached for the life of the provider, so editing a script needs a new provider.
///
/// Every problem is a [`FlueError::Script`] naming the script; an `error` reply in the script
/// becomes a [`FlueError::Provider`] (or, with `"kind": "context_overflow"`, a
/// [`FlueError::ContextOverflow`]) from provider `scripted`. Like a real model, a request whose
/// estimated input exceeds the script's `context_window` fails with
/// [`FlueError::ContextOverflow`]. The script format is described in
/// `docs/scripted-model.md`.
///
/// # Example
///
/// ```
/// use flue_core::model::{ModelRequest, TurnSink};
/// use flue_core::{ModelProvider, Record, ScriptedProvider, ThinkingLevel, UserMessage};
///
/// let root = tempfile::tempdir().unwrap();
/// std::fs::write(
///     root.path().join("hello.json"),
///     r#"{"rules": [{"reply": {"text": "You said: {{user}}"}}]}"#,
/// )
/// .unwrap();
///
/// let provider = ScriptedProvider::new(root.path());
/// let messages = [Record::User(UserMessage::text("hi"))];
/// let request = ModelRequest {
///     model: "hello.json",
///     system: "",
///     messages: &messages,
///     tools: &[],
///     thinking: ThinkingLevel::Off,
///     max_output_tokens: 1024,
/// };
/// let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
/// let turn = runtime.block_on(provider.stream_turn(request, &TurnSink::discard())).unwrap();
/// assert_eq!(turn.content, [flue_core::AssistantContent::Text { text: "You said: hi".into() }]);
/// ```
#[derive(Debug)]
pub struct ScriptedProvider {
    root: PathBuf,
    scripts: Mutex<HashMap<String, Arc<Script>>>,
}

impl ScriptedProvider {
    /// A provider that reads scripts relative to `root` (usually the workspace root).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            scripts: Mutex::new(HashMap::new()),
        }
    }

    /// Registers the script of `model` from its source text, so it is never read from a file
    /// (a bundle carries its scripts this way). Fails with [`FlueError::Script`] when the
    /// script is invalid; a script already loaded for `model` is kept.
    pub fn with_script(self, model: &str, source: &str) -> Result<Self> {
        self.remember(model, Script::parse(model, source)?);
        Ok(self)
    }

    /// The script for `model`, read and validated on first use.
    async fn script(&self, model: &str) -> Result<Arc<Script>> {
        if let Some(script) = self.cached(model) {
            return Ok(script);
        }
        self.resolve(model)?;
        let (root, owned) = (self.root.clone(), model.to_owned());
        let source = tokio::task::spawn_blocking(move || read_script(&root, &owned))
            .await
            .map_err(|err| script_error(model, format!("the reading thread failed: {err}")))??;
        Ok(self.remember(model, Script::parse(model, &source)?))
    }

    /// [`Self::script`] for synchronous callers; scripts are small, so the read is short.
    fn script_blocking(&self, model: &str) -> Result<Arc<Script>> {
        if let Some(script) = self.cached(model) {
            return Ok(script);
        }
        self.resolve(model)?;
        let source = read_script(&self.root, model)?;
        Ok(self.remember(model, Script::parse(model, &source)?))
    }

    /// Turns a model id into the script's path under the root, refusing paths that leave it.
    fn resolve(&self, model: &str) -> Result<PathBuf> {
        let relative = Path::new(model);
        for component in relative.components() {
            match component {
                Component::Normal(_) | Component::CurDir => {}
                Component::RootDir | Component::Prefix(_) => {
                    return Err(script_error(
                        model,
                        "absolute paths are not allowed; give the script path relative to the \
                         workspace root, as in scripted/scripts/hello.json",
                    ));
                }
                Component::ParentDir => {
                    return Err(script_error(
                        model,
                        "\"..\" is not allowed in script paths; keep scripts inside the \
                         workspace root",
                    ));
                }
            }
        }
        Ok(self.root.join(relative))
    }

    fn cached(&self, model: &str) -> Option<Arc<Script>> {
        self.lock_scripts().get(model).cloned()
    }

    /// Caches a freshly parsed script; when two turns raced to load it, the first one wins.
    fn remember(&self, model: &str, script: Script) -> Arc<Script> {
        Arc::clone(
            self.lock_scripts()
                .entry(model.to_owned())
                .or_insert_with(|| Arc::new(script)),
        )
    }

    fn lock_scripts(&self) -> MutexGuard<'_, HashMap<String, Arc<Script>>> {
        // The map holds only finished scripts, so it is consistent even after a panic.
        self.scripts.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl ModelProvider for ScriptedProvider {
    fn id(&self) -> &str {
        PROVIDER_ID
    }

    /// The script's `model` section; defaults when the script cannot be loaded (the runtime
    /// reports that through [`ModelProvider::check_model`]).
    fn model_info(&self, model: &str) -> ModelInfo {
        self.script_blocking(model)
            .map(|script| script.info.clone())
            .unwrap_or_default()
    }

    fn check_model<'a>(&'a self, model: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move { self.script(model).await.map(|_| ()) })
    }

    fn stream_turn<'a>(
        &'a self,
        request: ModelRequest<'a>,
        sink: &'a TurnSink,
    ) -> BoxFuture<'a, Result<ModelTurn>> {
        Box::pin(async move {
            let script = self.script(request.model).await?;
            let input_tokens = estimate_input_tokens(&request);
            if input_tokens > script.info.context_window {
                return Err(FlueError::ContextOverflow {
                    provider: PROVIDER_ID.to_owned(),
                    message: format!(
                        "the request has {input_tokens} input tokens, more than the context \
                         window of {} tokens",
                        script.info.context_window
                    ),
                });
            }
            let conversation = Conversation::read(request.messages);
            let reply = script.pick(request.model, &conversation, request.system)?;
            play(reply, &request, &conversation, script.info.price, sink).await
        })
    }
}

/// A validated script.
#[derive(Debug)]
struct Script {
    info: ModelInfo,
    rules: Vec<Rule>,
}

/// One rule: a condition and the reply it gives.
#[derive(Debug)]
struct Rule {
    /// `None` matches every turn.
    when: Option<When>,
    reply: Reply,
}

/// A rule's conditions; all that are set must hold.
#[derive(Debug)]
struct When {
    user_contains: Option<String>,
    user_matches: Option<Regex>,
    tool_result: Option<String>,
    turn: Option<usize>,
    system_contains: Option<String>,
}

/// What a turn answers, decided by the last record of the conversation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State<'a> {
    /// A user message (or a shell exchange, a compaction summary, or nothing at all).
    User,
    /// Tool results; `tool_name` is the tool of the last one.
    ToolResult { tool_name: &'a str },
}

/// What rules and placeholders look at in a conversation.
#[derive(Debug, PartialEq, Eq)]
struct Conversation<'a> {
    state: State<'a>,
    /// The joined text of the last user message (`{{user}}`), empty when there is none.
    user_text: String,
    /// The content of the last tool result (`{{tool_result}}`), empty when there is none.
    tool_result: &'a str,
    /// 1 for the turn answering the user, 2 for the one after the first tool results, ...
    turn: usize,
    /// Assistant messages so far; this turn is number `n_assistant + 1`.
    n_assistant: usize,
}

impl<'a> Conversation<'a> {
    fn read(messages: &'a [Record]) -> Self {
        let state = match messages.last() {
            Some(Record::ToolResult(result)) => State::ToolResult {
                tool_name: &result.tool_name,
            },
            _ => State::User,
        };
        let user_text = messages
            .iter()
            .rev()
            .find_map(|record| match record {
                Record::User(message) => Some(message.joined_text()),
                _ => None,
            })
            .unwrap_or_default();
        let tool_result = messages
            .iter()
            .rev()
            .find_map(|record| match record {
                Record::ToolResult(result) => Some(result.content.as_str()),
                _ => None,
            })
            .unwrap_or_default();
        let since_user = messages
            .iter()
            .rposition(|record| {
                matches!(
                    record,
                    Record::User(_) | Record::Shell(_) | Record::Compaction(_)
                )
            })
            .map_or(messages, |idx| &messages[idx + 1..]);
        let is_assistant = |record: &&Record| matches!(record, Record::Assistant(_));
        Self {
            state,
            user_text,
            tool_result,
            turn: since_user.iter().filter(is_assistant).count() + 1,
            n_assistant: messages.iter().filter(is_assistant).count(),
        }
    }
}

impl Script {
    /// Parses and validates a script, reporting every problem at once.
    fn parse(model: &str, source: &str) -> Result<Self> {
        let file: ScriptFile =
            serde_json::from_str(source).map_err(|err| script_error(model, json_message(&err)))?;
        let mut problems = Vec::new();
        if file.rules.is_empty() {
            problems.push(
                "the script has no rules; add one, as in {\"rules\": [{\"reply\": {\"text\": \
                 \"Hello\"}}]}"
                    .to_owned(),
            );
        }
        let mut catch_all = None;
        let mut rules = Vec::with_capacity(file.rules.len());
        for (idx, rule) in file.rules.into_iter().enumerate() {
            let number = idx + 1;
            if let Some(first) = catch_all {
                problems.push(format!(
                    "rule {number} is never used: rule {first} has no \"when\" and answers every \
                     turn first; move rule {first} to the end"
                ));
            }
            let when = match rule.when {
                Some(when) => Some(When::compile(number, when, &mut problems)),
                None => {
                    catch_all.get_or_insert(number);
                    None
                }
            };
            rule.reply.check(number, &mut problems);
            rules.push(Rule {
                when,
                reply: rule.reply,
            });
        }
        if !problems.is_empty() {
            return Err(script_error(model, problems.join("; ")));
        }
        Ok(Self {
            info: file.model.into_info(),
            rules,
        })
    }

    /// The reply of the first rule matching the conversation.
    fn pick(&self, model: &str, conversation: &Conversation<'_>, system: &str) -> Result<&Reply> {
        if let Some(rule) = self
            .rules
            .iter()
            .find(|rule| rule.matches(conversation, system))
        {
            return Ok(&rule.reply);
        }
        let turn = conversation.turn;
        let message = match conversation.state {
            State::User => format!(
                "no rule answers the user message {:?} (turn {turn}); add a rule with \"when\": \
                 {{\"user_contains\": \"...\"}}, or a last rule without \"when\" that answers \
                 every turn",
                preview(&conversation.user_text),
            ),
            State::ToolResult { tool_name } => format!(
                "no rule answers the result of tool {tool_name:?} (turn {turn}); add a rule with \
                 \"when\": {{\"tool_result\": {tool_name:?}}}, or a last rule without \"when\" \
                 that answers every turn",
            ),
        };
        Err(script_error(model, message))
    }
}

impl Rule {
    fn matches(&self, conversation: &Conversation<'_>, system: &str) -> bool {
        let Some(when) = &self.when else {
            return true;
        };
        let state_matches = match (&when.tool_result, conversation.state) {
            (Some(expected), State::ToolResult { tool_name }) => expected == tool_name,
            (Some(_), State::User) => false,
            // A rule about the user message must not fire again after a tool round trip.
            (None, State::ToolResult { .. }) => {
                when.user_contains.is_none() && when.user_matches.is_none()
            }
            (None, State::User) => true,
        };
        state_matches
            && when
                .user_contains
                .as_deref()
                .is_none_or(|needle| conversation.user_text.contains(needle))
            && when
                .user_matches
                .as_ref()
                .is_none_or(|regex| regex.is_match(&conversation.user_text))
            && when.turn.is_none_or(|turn| turn == conversation.turn)
            && when
                .system_contains
                .as_deref()
                .is_none_or(|needle| system.contains(needle))
    }
}

impl When {
    /// Compiles the regex and checks the conditions, adding problems for rule `number`.
    fn compile(number: usize, when: WhenFile, problems: &mut Vec<String>) -> Self {
        let WhenFile {
            user_contains,
            user_matches,
            tool_result,
            turn,
            system_contains,
        } = when;
        if user_contains.is_none()
            && user_matches.is_none()
            && tool_result.is_none()
            && turn.is_none()
            && system_contains.is_none()
        {
            problems.push(format!(
                "rule {number}: \"when\" is empty; remove it to answer every turn, or add \
                 \"user_contains\", \"user_matches\", \"tool_result\", \"turn\" or \
                 \"system_contains\""
            ));
        }
        if turn == Some(0) {
            problems.push(format!("rule {number}: \"turn\" counts from 1"));
        }
        let user_matches = user_matches.and_then(|pattern| match Regex::new(&pattern) {
            Ok(regex) => Some(regex),
            Err(err) => {
                problems.push(format!(
                    "rule {number}: invalid regex {pattern:?} in \"user_matches\": {}",
                    regex_reason(&err)
                ));
                None
            }
        });
        Self {
            user_contains,
            user_matches,
            tool_result,
            turn,
            system_contains,
        }
    }
}

/// The reply a rule gives, as written in the script.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Reply {
    text: Option<String>,
    thinking: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ReplyToolCall>,
    error: Option<ReplyError>,
    stop: Option<ReplyStop>,
    delay_ms: Option<u64>,
    chunk_delay_ms: Option<u64>,
}

impl Reply {
    fn check(&self, number: usize, problems: &mut Vec<String>) {
        if self.text.is_none()
            && self.thinking.is_none()
            && self.tool_calls.is_empty()
            && self.error.is_none()
        {
            problems.push(format!(
                "rule {number}: the reply is empty; give \"text\", \"thinking\", \"tool_calls\" \
                 or \"error\" (\"text\": \"\" answers with nothing)"
            ));
        }
        if self.error.is_some() && !self.tool_calls.is_empty() {
            problems.push(format!(
                "rule {number}: a reply with \"error\" cannot make \"tool_calls\""
            ));
        }
        if let Some(ReplyError {
            kind: ReplyErrorKind::ContextOverflow,
            retryable: Some(_),
            ..
        }) = &self.error
        {
            problems.push(format!(
                "rule {number}: \"retryable\" does not apply to a \"context_overflow\" error; \
                 remove it"
            ));
        }
        if self.error.is_some() && self.stop.is_some() {
            problems.push(format!(
                "rule {number}: a reply with \"error\" cannot have \"stop\""
            ));
        }
        for (call_idx, call) in self.tool_calls.iter().enumerate() {
            if call.name.is_empty() {
                problems.push(format!(
                    "rule {number}: tool call {} has an empty \"name\"",
                    call_idx + 1
                ));
            }
        }
    }
}

/// A tool call in a reply.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplyToolCall {
    name: String,
    #[serde(default = "empty_object")]
    input: Value,
    /// The call id, as a provider would assign it (default `call_<turn>_<index>`); scripts set
    /// it to play a provider that repeats ids or sends none.
    id: Option<String>,
}

/// A simulated provider failure.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplyError {
    message: String,
    #[serde(default)]
    kind: ReplyErrorKind,
    retryable: Option<bool>,
}

/// Which error a simulated failure is.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ReplyErrorKind {
    /// [`FlueError::Provider`].
    #[default]
    ProviderError,
    /// [`FlueError::ContextOverflow`].
    ContextOverflow,
}

/// An explicit stop reason; without one it follows from the tool calls.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ReplyStop {
    EndTurn,
    ToolUse,
    MaxTokens,
}

/// A script file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptFile {
    #[allow(
        dead_code,
        reason = "documentation for readers of the script; never read"
    )]
    description: Option<String>,
    #[serde(default)]
    model: ModelFile,
    rules: Vec<RuleFile>,
}

/// The `model` section; every field is optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelFile {
    context_window: Option<u64>,
    max_output_tokens: Option<u64>,
    reasoning: Option<bool>,
    image_input: Option<bool>,
    price: Option<PriceFile>,
}

impl ModelFile {
    fn into_info(self) -> ModelInfo {
        let defaults = ModelInfo::default();
        ModelInfo {
            context_window: self.context_window.unwrap_or(defaults.context_window),
            max_output_tokens: self.max_output_tokens.unwrap_or(defaults.max_output_tokens),
            reasoning: self.reasoning.unwrap_or(defaults.reasoning),
            image_input: self.image_input.unwrap_or(defaults.image_input),
            price: self.price.map(|price| ModelPrice {
                input: price.input,
                output: price.output,
                cache_read: price.cache_read,
                cache_write: price.cache_write,
            }),
        }
    }
}

/// US dollars per million tokens.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PriceFile {
    input: f64,
    output: f64,
    #[serde(default)]
    cache_read: f64,
    #[serde(default)]
    cache_write: f64,
}

/// A rule as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    #[allow(
        dead_code,
        reason = "documentation for readers of the script; never read"
    )]
    description: Option<String>,
    when: Option<WhenFile>,
    reply: Reply,
}

/// A rule's conditions as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WhenFile {
    user_contains: Option<String>,
    user_matches: Option<String>,
    tool_result: Option<String>,
    turn: Option<usize>,
    system_contains: Option<String>,
}

/// Values of the `{{...}}` placeholders.
#[derive(Clone, Copy, Debug)]
struct Vars<'a> {
    user: &'a str,
    tool_result: &'a str,
    /// The model id the turn was asked of (`{{model}}`), the part after `scripted/`.
    model: &'a str,
    /// The thinking level the turn was asked with (`{{thinking}}`).
    thinking: &'a str,
}

impl Vars<'_> {
    fn get(&self, name: &str) -> Option<std::borrow::Cow<'_, str>> {
        match name {
            "user" => Some(self.user.into()),
            "tool_result" => Some(self.tool_result.into()),
            "model" => Some(self.model.into()),
            "thinking" => Some(self.thinking.into()),
            _ => {
                // `tool_result.a.b.0`: a field of a JSON tool result (empty when absent).
                let path = name.strip_prefix("tool_result.")?;
                let mut value = &serde_json::from_str::<Value>(self.tool_result).ok()?;
                let mut found = Some(value);
                for key in path.split('.') {
                    found = match value {
                        Value::Array(items) => {
                            key.parse::<usize>().ok().and_then(|idx| items.get(idx))
                        }
                        _ => value.get(key),
                    };
                    let Some(next) = found else { break };
                    value = next;
                }
                Some(match found {
                    None | Some(Value::Null) => String::new().into(),
                    Some(Value::String(text)) => text.clone().into(),
                    Some(other) => other.to_string().into(),
                })
            }
        }
    }
}

/// Streams `reply` and builds the finished turn.
async fn play(
    reply: &Reply,
    request: &ModelRequest<'_>,
    conversation: &Conversation<'_>,
    price: Option<ModelPrice>,
    sink: &TurnSink,
) -> Result<ModelTurn> {
    if let Some(delay_ms) = reply.delay_ms {
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
    }
    let vars = Vars {
        user: &conversation.user_text,
        tool_result: conversation.tool_result,
        model: request.model,
        thinking: request.thinking.as_str(),
    };
    let thinking = reply
        .thinking
        .as_deref()
        .map(|text| interpolate(text, vars))
        .unwrap_or_default();
    let text = reply
        .text
        .as_deref()
        .map(|text| interpolate(text, vars))
        .unwrap_or_default();
    let pause = || async {
        match reply.chunk_delay_ms {
            Some(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
            None => tokio::task::yield_now().await,
        }
    };
    for chunk in chunks(&thinking) {
        sink.thinking_delta(chunk);
        pause().await;
    }
    for chunk in chunks(&text) {
        sink.text_delta(chunk);
        pause().await;
    }
    if let Some(error) = &reply.error {
        let message = interpolate(&error.message, vars);
        return Err(match error.kind {
            ReplyErrorKind::ProviderError => FlueError::Provider {
                provider: PROVIDER_ID.to_owned(),
                message,
                status: None,
                retryable: error.retryable.unwrap_or(false),
                retry_after_ms: None,
                source: None,
            },
            ReplyErrorKind::ContextOverflow => FlueError::ContextOverflow {
                provider: PROVIDER_ID.to_owned(),
                message,
            },
        });
    }

    let mut content = Vec::new();
    if !thinking.is_empty() {
        content.push(AssistantContent::Thinking {
            text: thinking,
            signature: None,
            id: None,
        });
    }
    if !text.is_empty() {
        content.push(AssistantContent::Text { text });
    }
    let turn_number = conversation.n_assistant + 1;
    for (call_idx, call) in reply.tool_calls.iter().enumerate() {
        content.push(AssistantContent::ToolCall(ToolCall {
            id: call
                .id
                .clone()
                .unwrap_or_else(|| format!("call_{turn_number}_{call_idx}")),
            name: call.name.clone(),
            input: interpolate_value(&call.input, vars),
        }));
    }
    let stop = reply.stop.unwrap_or(if reply.tool_calls.is_empty() {
        ReplyStop::EndTurn
    } else {
        ReplyStop::ToolUse
    });
    let stop_reason = match stop {
        ReplyStop::EndTurn => StopReason::EndTurn,
        ReplyStop::ToolUse => StopReason::ToolUse,
        ReplyStop::MaxTokens => StopReason::MaxTokens,
    };
    let usage = estimate_usage(request, &content, price);
    Ok(ModelTurn {
        content,
        usage,
        stop_reason,
    })
}

/// Splits text after each run of whitespace that follows a word (leading whitespace stays with
/// the first word); the chunks concatenate to `text`.
fn chunks(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut seen_word = false;
    let mut after_space = false;
    for (idx, ch) in text.char_indices() {
        let is_space = ch.is_whitespace();
        if !is_space && after_space && seen_word {
            out.push(&text[start..idx]);
            start = idx;
        }
        seen_word |= !is_space;
        after_space = is_space;
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

/// Replaces known `{{name}}` placeholders (spaces inside the braces allowed); unknown ones
/// stay as written. Substituted values are not scanned again.
fn interpolate(template: &str, vars: Vars<'_>) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find("{{") {
        out.push_str(&rest[..open]);
        let after_open = &rest[open + 2..];
        let value = after_open
            .find("}}")
            .and_then(|close| Some((vars.get(after_open[..close].trim())?, close)));
        match value {
            Some((value, close)) => {
                out.push_str(&value);
                rest = &after_open[close + 2..];
            }
            None => {
                out.push_str("{{");
                rest = after_open;
            }
        }
    }
    out.push_str(rest);
    out
}

/// [`interpolate`] applied to every string inside a JSON value (object keys stay as written).
fn interpolate_value(value: &Value, vars: Vars<'_>) -> Value {
    match value {
        Value::String(text) => Value::String(interpolate(text, vars)),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|item| interpolate_value(item, vars))
                .collect(),
        ),
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(key, item)| (key.clone(), interpolate_value(item, vars)))
                .collect(),
        ),
        Value::Null | Value::Bool(_) | Value::Number(_) => value.clone(),
    }
}

/// A deterministic estimate: a token per four characters of everything sent and received.
fn estimate_usage(
    request: &ModelRequest<'_>,
    content: &[AssistantContent],
    price: Option<ModelPrice>,
) -> Usage {
    let output_chars = content.iter().map(content_chars).sum::<usize>();
    let mut usage = Usage {
        input_tokens: estimate_input_tokens(request),
        output_tokens: tokens(output_chars),
        ..Usage::default()
    };
    usage.cost_usd = price.map(|price| price.cost(&usage));
    usage
}

/// The input half of [`estimate_usage`]: the system prompt, the messages and the tools.
fn estimate_input_tokens(request: &ModelRequest<'_>) -> u64 {
    tokens(
        n_chars(request.system)
            + request.messages.iter().map(record_chars).sum::<usize>()
            + request.tools.iter().map(schema_chars).sum::<usize>(),
    )
}

fn record_chars(record: &Record) -> usize {
    match record {
        Record::User(message) => n_chars(&message.joined_text()),
        Record::Assistant(message) => message.content.iter().map(content_chars).sum(),
        Record::ToolResult(result) => n_chars(&result.content),
        Record::Shell(shell) => {
            n_chars(&shell.command) + n_chars(&shell.stdout) + n_chars(&shell.stderr)
        }
        Record::Compaction(compaction) => n_chars(&compaction.summary),
        _ => 0,
    }
}

fn content_chars(part: &AssistantContent) -> usize {
    match part {
        AssistantContent::Text { text } | AssistantContent::Thinking { text, .. } => n_chars(text),
        AssistantContent::ToolCall(call) => n_chars(&call.name) + n_chars(&call.input.to_string()),
        _ => 0,
    }
}

fn schema_chars(tool: &ToolSchema) -> usize {
    n_chars(&tool.name) + n_chars(&tool.description) + n_chars(&tool.input_schema.to_string())
}

fn n_chars(text: &str) -> usize {
    text.chars().count()
}

fn tokens(n_chars: usize) -> u64 {
    u64::try_from(n_chars.div_ceil(4)).unwrap_or(u64::MAX)
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

fn script_error(model: &str, message: impl Into<String>) -> FlueError {
    FlueError::Script {
        path: model.to_owned(),
        message: message.into(),
    }
}

/// The text of the script `model` below `root`, read under the workspace file rule (links
/// stay inside the root, a regular file of at most [`MAX_SCRIPT_BYTES`]).
fn read_script(root: &Path, model: &str) -> Result<String> {
    let path = root.join(model);
    let unreadable = |err: &dyn std::fmt::Display| {
        script_error(model, format!("cannot read {}: {err}", path.display()))
    };
    let files = WorkspaceFiles::open(root).map_err(|err| unreadable(&err))?;
    let bytes = files
        .read(model, MAX_SCRIPT_BYTES)
        .map_err(|err| unreadable(&err))?;
    String::from_utf8(bytes).map_err(|_| unreadable(&"the file is not valid UTF-8"))
}

/// A JSON error as `line L, column C: reason`, without serde's own location suffix.
fn json_message(err: &serde_json::Error) -> String {
    let text = err.to_string();
    if err.line() == 0 {
        return text;
    }
    let suffix = format!(" at line {} column {}", err.line(), err.column());
    let reason = text.strip_suffix(&suffix).unwrap_or(&text);
    format!("line {}, column {}: {reason}", err.line(), err.column())
}

/// The one-line reason of a regex error (its display spans several lines).
fn regex_reason(err: &regex::Error) -> String {
    let text = err.to_string();
    match text.rsplit_once("error: ") {
        Some((_, reason)) => reason.trim().to_owned(),
        None => text.trim().to_owned(),
    }
}

/// The start of a long text, for error messages.
fn preview(text: &str) -> String {
    match text.char_indices().nth(PREVIEW_CHARS) {
        Some((idx, _)) => format!("{}...", &text[..idx]),
        None => text.to_owned(),
    }
}
