//! Prompt hooks: a model judges a hook's input with the hook's prompt, as Claude Code's
//! `type: prompt` hooks do, and answers `{"ok": true}` or `{"ok": false, "reason": ...}`.
//!
//! A prompt hook is a [`CommandHook`](super::CommandHook) with a [`PromptHookTarget`]: its
//! input JSON replaces `$ARGUMENTS` in the prompt, and the model the operation calls (or the
//! one the hook names) answers through the [`HookModel`] the runtime puts in the context. What
//! that call costs is counted in the operation's usage and budgets.

use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::HookPoint;
use crate::error::{FlueError, Result};
use crate::model::{ModelRequest, ProviderRegistry, TurnSink};
use crate::redact::Redactor;
use crate::spans::traced_turn;
use flue_protocol::record::{AssistantContent, Record, Usage, UserMessage};

/// Seconds a prompt hook may take when it sets no `timeout` (Claude Code's default).
pub const DEFAULT_PROMPT_HOOK_TIMEOUT_SECS: u64 = 30;

/// The points where a prompt hook can run: those whose decision an `ok`/`reason` answer can
/// make (Claude Code runs prompt hooks at the same ones it has).
pub const PROMPT_HOOK_POINTS: [HookPoint; 7] = [
    HookPoint::UserPromptSubmit,
    HookPoint::PreToolUse,
    HookPoint::PermissionRequest,
    HookPoint::PostToolUse,
    HookPoint::PostToolUseFailure,
    HookPoint::Stop,
    HookPoint::SubagentStop,
];

/// The placeholder of a prompt replaced by the hook's input JSON.
const ARGUMENTS: &str = "$ARGUMENTS";

/// The most tokens a judgement may have: it is one small JSON object.
const MAX_JUDGEMENT_TOKENS: u64 = 1024;

/// Characters of a prompt kept in the hook's name.
const LABEL_CHARS: usize = 60;

/// What the judging model is told, before the hook's own prompt.
const JUDGE_SYSTEM: &str = "You check one step of an AI agent's run against the condition \
    you are given; the step is described as JSON. Answer with a single JSON object and nothing \
    else: {\"ok\": true} when the step may go on, or {\"ok\": false, \"reason\": \"...\"} when it \
    must not, the reason saying why in a sentence.";

/// A prompt hook's prompt and the model that judges with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PromptHookTarget {
    /// The prompt; `$ARGUMENTS` stands for the hook's input JSON (appended when absent).
    pub prompt: String,
    /// The model specifier (`provider/model`) that judges; `None`: the operation's model.
    pub model: Option<String>,
}

impl PromptHookTarget {
    /// Every problem with the prompt and model at `point`, each a sentence naming the field.
    pub fn problems(&self, point: HookPoint) -> Vec<String> {
        let mut problems = Vec::new();
        if self.prompt.trim().is_empty() {
            problems.push("`prompt` is empty: give the condition the model judges".to_owned());
        }
        if let Some(model) = &self.model
            && crate::model::ModelSpec::parse(model).is_err()
        {
            problems.push(format!(
                "`model` must be a model specifier like `anthropic/claude-haiku-4-5`, got {model:?}"
            ));
        }
        if !PROMPT_HOOK_POINTS.contains(&point) {
            let names: Vec<&str> = PROMPT_HOOK_POINTS.iter().map(|p| p.name()).collect();
            problems.push(format!(
                "a `prompt` hook cannot run at {}: its answer decides nothing there (prompt hooks \
                 run at {})",
                point.name(),
                names.join(", ")
            ));
        }
        problems
    }

    /// A short name for reports: the prompt's first line, cut.
    pub(crate) fn label(&self) -> String {
        let line = self.prompt.trim().lines().next().unwrap_or_default();
        if line.chars().count() <= LABEL_CHARS {
            return line.to_owned();
        }
        let cut: String = line.chars().take(LABEL_CHARS).collect();
        format!("{cut}...")
    }

    /// The text the model reads: the prompt with `$ARGUMENTS` replaced by `input`, or the
    /// input after the prompt when it has no placeholder.
    pub(crate) fn request_text(&self, input: &str) -> String {
        if self.prompt.contains(ARGUMENTS) {
            self.prompt.replace(ARGUMENTS, input)
        } else {
            format!("{}\n\n{input}", self.prompt.trim_end())
        }
    }
}

/// The models a hook may ask, set by the runtime in the hook's context: the harness's
/// providers, the operation's model, and a tally of what the calls cost.
#[derive(Clone)]
pub struct HookModel {
    providers: ProviderRegistry,
    redactor: Redactor,
    default_model: Option<String>,
    spent: Arc<Mutex<Usage>>,
}

impl std::fmt::Debug for HookModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookModel")
            .field("default_model", &self.default_model)
            .finish_non_exhaustive()
    }
}

impl HookModel {
    pub(crate) fn new(
        providers: ProviderRegistry,
        redactor: Redactor,
        default_model: Option<String>,
    ) -> Self {
        Self {
            providers,
            redactor,
            default_model,
            spent: Arc::default(),
        }
    }

    /// The model a hook that names none is judged by (the operation's).
    pub fn default_model(&self) -> Option<&str> {
        self.default_model.as_deref()
    }

    /// Asks `model` (or the operation's) one question, `text`, and returns its answer's text.
    /// The call's usage is tallied (see `HookModel::take_spent`).
    ///
    /// # Errors
    ///
    /// No model to ask, an unknown provider, the provider's error, or
    /// [`FlueError::Aborted`] on `cancel`.
    pub async fn judge(
        &self,
        model: Option<&str>,
        text: &str,
        cancel: &CancellationToken,
    ) -> Result<String> {
        let spec = model.or(self.default_model.as_deref()).ok_or_else(|| {
            FlueError::config(
                "no model to judge with: the hook names none and the operation has none",
            )
        })?;
        let (provider, spec) = self.providers.resolve(spec)?;
        let info = provider.model_info(&spec.model);
        let messages = [Record::User(UserMessage::text(text))];
        let request = ModelRequest {
            model: &spec.model,
            system: JUDGE_SYSTEM,
            messages: &messages,
            tools: &[],
            thinking: flue_protocol::ThinkingLevel::Off,
            max_output_tokens: MAX_JUDGEMENT_TOKENS.min(info.max_output_tokens).max(1),
        };
        // A judgement is not part of the conversation: nothing of it is streamed.
        let sink = TurnSink::discard();
        let turn = traced_turn(
            provider.as_ref(),
            &spec,
            request,
            &sink,
            cancel,
            &self.redactor,
        )
        .await?;
        *self.spent.lock().unwrap_or_else(PoisonError::into_inner) += turn.usage;
        Ok(turn
            .content
            .iter()
            .filter_map(|part| match part {
                AssistantContent::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect())
    }

    /// What the judgements since the last call cost, and resets the tally.
    pub(crate) fn take_spent(&self) -> Usage {
        std::mem::take(&mut *self.spent.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// What the model decided.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Judgement {
    /// `ok: true`: the step goes on.
    Ok,
    /// `ok: false`, with the reason when it gave one.
    NotOk(Option<String>),
}

/// Reads the model's answer: one JSON object with a boolean `ok` (a Markdown code fence
/// around it is allowed). The error says what is wrong with it.
pub(super) fn read_answer(text: &str) -> std::result::Result<Judgement, String> {
    let mut body = text.trim();
    if let Some(fenced) = body.strip_prefix("```") {
        let fenced = fenced.strip_prefix("json").unwrap_or(fenced);
        body = fenced.strip_suffix("```").unwrap_or(fenced).trim();
    }
    if body.is_empty() {
        return Err("is empty".to_owned());
    }
    let value: Value =
        serde_json::from_str(body).map_err(|err| format!("is not a JSON object ({err})"))?;
    match value.get("ok") {
        Some(Value::Bool(true)) => Ok(Judgement::Ok),
        Some(Value::Bool(false)) => Ok(Judgement::NotOk(
            value
                .get("reason")
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|reason| !reason.is_empty())
                .map(str::to_owned),
        )),
        _ => Err("has no boolean `ok`".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_in_claude_codes_shape() {
        assert_eq!(read_answer(r#"{"ok": true}"#), Ok(Judgement::Ok));
        assert_eq!(
            read_answer("```json\n{\"ok\": false, \"reason\": \"tests fail\"}\n```"),
            Ok(Judgement::NotOk(Some("tests fail".to_owned())))
        );
        assert_eq!(
            read_answer(r#"{"ok": false, "reason": " "}"#),
            Ok(Judgement::NotOk(None))
        );
        assert!(read_answer("").is_err());
        assert!(read_answer("Looks fine to me.").is_err());
        assert!(read_answer(r#"{"ok": "yes"}"#).is_err());
        assert!(read_answer(r#"{"decision": "approve"}"#).is_err());
    }

    #[test]
    fn the_input_fills_arguments_or_follows_the_prompt() {
        let target = PromptHookTarget {
            prompt: "Is this safe? $ARGUMENTS".to_owned(),
            model: None,
        };
        assert_eq!(target.request_text("{\"a\":1}"), "Is this safe? {\"a\":1}");
        let target = PromptHookTarget {
            prompt: "Is this safe?\n".to_owned(),
            model: None,
        };
        assert_eq!(target.request_text("{}"), "Is this safe?\n\n{}");
        assert!(target.problems(HookPoint::Stop).is_empty());
        assert_eq!(target.problems(HookPoint::SessionEnd).len(), 1);
        let target = PromptHookTarget {
            prompt: " ".to_owned(),
            model: Some("haiku".to_owned()),
        };
        assert_eq!(target.problems(HookPoint::PreToolUse).len(), 2);
    }
}
