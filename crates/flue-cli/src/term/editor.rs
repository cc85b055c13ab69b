//! The chat's line editor: slash-command completion and continued lines.
//!
//! Enter sends what was typed; a line ending in `\` continues on the next line (the backslash
//! is dropped, see [`joined`]), and a bracketed paste keeps its line ends, so a pasted block
//! is one message. Tab completes a slash command at the start of the input.

use rustyline::completion::Completer;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{Context, Helper};

/// The chat's slash commands, each with what it does (for `/help` and completion).
pub(crate) const COMMANDS: &[(&str, &str)] = &[
    ("/help", "list these commands"),
    ("/new", "start a new conversation with the same agent"),
    ("/model", "show the model, or switch to PROVIDER/MODEL"),
    (
        "/thinking",
        "show or set the thinking level of the next messages",
    ),
    (
        "/role",
        "show the role, or switch to ROLE (`/role -` for none)",
    ),
    ("/cost", "tokens and cost of this chat so far"),
    (
        "/tools",
        "list the tools and the always-allowed ones; /tools revoke TOOL",
    ),
    (
        "/session",
        "the conversation's id and how to show or continue it",
    ),
    ("/fork", "copy this conversation and go on in the copy"),
    (
        "/rewind",
        "put back the files the last turn changed (asks first)",
    ),
    ("/compact", "compact the conversation now"),
    ("/tasks", "while a reply runs: list its running tasks"),
    (
        "/abort",
        "while a reply runs: abort task N alone (`/abort N`)",
    ),
    ("/exit", "end the chat (also /quit, Ctrl-D)"),
];

/// Completion and continuation for the chat's editor.
pub(crate) struct ChatHelper;

impl Completer for ChatHelper {
    type Candidate = String;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<String>)> {
        Ok((0, completions(&line[..pos.min(line.len())])))
    }
}

impl Hinter for ChatHelper {
    type Hint = String;
}

impl Highlighter for ChatHelper {}

impl Validator for ChatHelper {
    fn validate(&self, ctx: &mut ValidationContext<'_>) -> rustyline::Result<ValidationResult> {
        Ok(if ctx.input().ends_with('\\') {
            ValidationResult::Incomplete
        } else {
            ValidationResult::Valid(None)
        })
    }
}

impl Helper for ChatHelper {}

/// The slash commands that complete `typed` (the input up to the cursor).
pub(crate) fn completions(typed: &str) -> Vec<String> {
    if !typed.starts_with('/') || typed.contains(char::is_whitespace) {
        return Vec::new();
    }
    COMMANDS
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| name.starts_with(typed))
        .map(|name| format!("{name} "))
        .collect()
}

/// The message an edited input means: continued lines joined (each `\` before a line end
/// dropped).
pub(crate) fn joined(input: &str) -> String {
    input.replace("\\\n", "\n")
}
