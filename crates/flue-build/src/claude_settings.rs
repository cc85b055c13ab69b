//! The hooks of Claude Code's `.claude/settings.json` and `.claude/settings.local.json` at the
//! workspace root, read as Claude Code reads them.
//!
//! Only their `hooks` object is taken (and `disableAllHooks`, which turns a file's hooks off);
//! the other settings are Claude Code's. The files are Claude Code's, checked by Claude Code:
//! nothing in them fails a flue build. What flue cannot run (an event without a flue point, a
//! hook type other than `command`, `http` and `prompt`, a value flue reads wrongly) is a note
//! naming its line, and is skipped.

use flue_core::hook::CommandHookSpec;
use serde_json::Value;

use crate::diagnostic::Diagnostic;

/// The settings files read, in Claude Code's order (project, then local).
pub(crate) const SETTINGS_FILES: [&str; 2] =
    [".claude/settings.json", ".claude/settings.local.json"];

/// The hooks of the settings file at `path` whose text is `text`, with the notes about what
/// of it is skipped.
pub(crate) fn hooks(path: &str, text: &str) -> (Vec<CommandHookSpec>, Vec<Diagnostic>) {
    let mut notes = Vec::new();
    let settings: Value = match serde_json::from_str(text) {
        Ok(settings) => settings,
        Err(err) => {
            notes.push(Diagnostic::at(
                path,
                err.line().max(1),
                format!("is not valid JSON ({err}); its hooks are not run"),
            ));
            return (Vec::new(), notes);
        }
    };
    let Some(value) = settings.get("hooks") else {
        return (Vec::new(), notes);
    };
    let from = line_of_key(text, "hooks");
    if settings.get("disableAllHooks").and_then(Value::as_bool) == Some(true) {
        notes.push(Diagnostic::at(
            path,
            line_of_key(text, "disableAllHooks"),
            "`disableAllHooks` is true: the hooks of this file are not run".to_owned(),
        ));
        return (Vec::new(), notes);
    }
    let parsed = crate::hooks::parse(value, path);
    for finding in &parsed.notes {
        let line = crate::hooks::line_of(text, from, finding);
        notes.push(Diagnostic::at(path, line, finding.message.clone()));
    }
    for finding in &parsed.problems {
        let line = crate::hooks::line_of(text, from, finding);
        notes.push(Diagnostic::at(
            path,
            line,
            format!("{}; this hook is not run", finding.message),
        ));
    }
    (parsed.specs, notes)
}

/// The 1-based line of the first `"key"` in `text` (1 when there is none).
fn line_of_key(text: &str, key: &str) -> usize {
    let quoted = format!("\"{key}\"");
    text.find(&quoted)
        .map_or(1, |at| text[..at].matches('\n').count() + 1)
}

#[cfg(test)]
mod tests;
