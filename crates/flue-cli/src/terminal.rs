//! What the CLI prints for people: known secrets redacted, control characters escaped.
//!
//! Text that came from a model, a tool or a stored conversation can hold terminal control
//! sequences: OSC 52 writes the clipboard, others clear the screen or move the cursor. Such
//! text is never written raw to a terminal. The rules:
//!
//! - stderr (activity, errors, warnings) is meant for people: always redacted and escaped,
//!   whether it is a terminal or a log file someone will `cat` later;
//! - stdout text (the reply, `session show`, `audit`, `trash list`) is redacted always and
//!   escaped when stdout is a terminal; to a pipe or a file it keeps its control characters,
//!   so `flue run ... > reply.txt` stores what the model wrote;
//! - `--json` output is redacted, and JSON escapes C0 controls already; DEL, C1 controls and
//!   bidirectional overrides are written as `\u` escapes too, so even a terminal showing the
//!   JSON sees no raw control (the value is unchanged for a JSON reader).
//!
//! Escaped forms: `\n` and `\t` pass; CR stays only before LF; other C0 controls and DEL become
//! `\xNN` (ESC is `\x1b`), C1 controls and bidirectional overrides `\u{NNNN}`.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::IsTerminal as _;

use std::path::Path;

use flue_core::Redactor;
use flue_host::Env;
use serde::Serialize;

/// Redacts and escapes what the CLI prints.
#[derive(Clone, Debug, Default)]
pub(crate) struct Output {
    redactor: Redactor,
    stdout_is_terminal: bool,
}

impl Output {
    /// Output through `redactor`, escaping stdout text when stdout is a terminal.
    pub(crate) fn new(redactor: Redactor) -> Self {
        Self {
            redactor,
            stdout_is_terminal: std::io::stdout().is_terminal(),
        }
    }

    /// Output for commands that show stored data of the workspace at `root`: redacts the values
    /// of its `.env` file and the secret-named variables of the environment (an unreadable
    /// `.env` adds nothing).
    pub(crate) fn for_workspace(root: &Path) -> anyhow::Result<Self> {
        let vars = std::env::vars_os()
            .filter_map(|(key, value)| Some((key.into_string().ok()?, value.into_string().ok()?)));
        let env = Env::for_root(vars, root, None).unwrap_or_else(|_| Env::new());
        Ok(Self::new(Redactor::new(env.secrets())?))
    }

    /// Output that also escapes stdout text (as if stdout were a terminal).
    #[cfg(test)]
    pub(crate) fn for_terminal(redactor: Redactor) -> Self {
        Self {
            redactor,
            stdout_is_terminal: true,
        }
    }

    /// `text` as it may go to stderr: redacted and escaped.
    pub(crate) fn stderr_text(&self, text: &str) -> String {
        escape_controls(&self.redactor.redact(text)).into_owned()
    }

    /// How many leading bytes of streamed `text` can be shown now (the rest may begin a
    /// secret that the next delta completes).
    pub(crate) fn releasable(&self, text: &str) -> usize {
        self.redactor.releasable(text)
    }

    /// `text` as it may go to stdout: redacted, and escaped on a terminal.
    pub(crate) fn stdout_text(&self, text: &str) -> String {
        let redacted = self.redactor.redact(text);
        if self.stdout_is_terminal {
            escape_controls(&redacted).into_owned()
        } else {
            redacted.into_owned()
        }
    }

    /// `value` as one line of JSON, its strings redacted.
    pub(crate) fn json_line(&self, value: &impl Serialize) -> serde_json::Result<String> {
        let mut value = serde_json::to_value(value)?;
        self.redactor.redact_json(&mut value);
        Ok(escape_json_controls(&serde_json::to_string(&value)?))
    }

    /// `value` as indented JSON, its strings redacted.
    pub(crate) fn json_pretty(&self, value: &impl Serialize) -> serde_json::Result<String> {
        let mut value = serde_json::to_value(value)?;
        self.redactor.redact_json(&mut value);
        Ok(escape_json_controls(&serde_json::to_string_pretty(&value)?))
    }
}

/// `text` with control characters written as visible escapes (see the module rules).
pub(crate) fn escape_controls(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\r' && chars.peek() == Some(&'\n') {
            out.push(c);
        } else if needs_escape(c) {
            push_escape(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Serialized JSON with DEL, C1 controls and bidirectional overrides as `\u` escapes (they can
/// only occur inside strings, where the escape means the same character).
fn escape_json_controls(json: &str) -> String {
    if !json.chars().any(needs_escape) {
        return json.to_owned();
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        // serde_json escapes C0 controls itself; raw `\n` here is layout, not content.
        if needs_escape(c) {
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    out
}

/// Characters a terminal may act on instead of showing.
fn needs_escape(c: char) -> bool {
    match c {
        '\n' | '\t' => false,
        // C0, DEL and C1 controls; bidirectional embeddings, overrides and isolates (they
        // reorder what is shown).
        '\u{0}'..='\u{1f}'
        | '\u{7f}'..='\u{9f}'
        | '\u{202a}'..='\u{202e}'
        | '\u{2066}'..='\u{2069}' => true,
        _ => false,
    }
}

fn push_escape(out: &mut String, c: char) {
    // Writing to a String cannot fail.
    let _ = if c.is_ascii() {
        write!(out, "\\x{:02x}", u32::from(c))
    } else {
        write!(out, "\\u{{{:x}}}", u32::from(c))
    };
}

#[cfg(test)]
mod tests;
