//! Syntax highlighting of a fenced code block's lines, one complete line at a time.
//!
//! syntect's bundled Sublime grammars and its `base16-ocean.dark` theme, with the pure-Rust
//! regex engine; loaded on the first code block a reply shows, never when colour is off. A
//! block whose language is not known keeps the plain code colour.

use std::sync::OnceLock;

use syntect::easy::HighlightLines;
use syntect::highlighting::{Theme, ThemeSet};
use syntect::parsing::SyntaxSet;

/// The theme the colours come from.
const THEME: &str = "base16-ocean.dark";

/// Highlights the lines of one code block, keeping the grammar's state between lines.
pub(crate) struct CodeHighlighter {
    lines: HighlightLines<'static>,
}

impl std::fmt::Debug for CodeHighlighter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CodeHighlighter").finish_non_exhaustive()
    }
}

impl CodeHighlighter {
    /// A highlighter for a block fenced with info string `info` (` ```rust ` gives `rust`);
    /// `None` for a language no grammar knows.
    pub(crate) fn for_info(info: &str) -> Option<Self> {
        let token = info.split([' ', ',', '{']).next().unwrap_or_default();
        if token.is_empty() {
            return None;
        }
        let syntaxes = syntaxes();
        let syntax = syntaxes
            .find_syntax_by_token(token)
            .or_else(|| syntaxes.find_syntax_by_token(&token.to_ascii_lowercase()))?;
        Some(Self {
            lines: HighlightLines::new(syntax, theme()?),
        })
    }

    /// `line` (without its line end) in its colours; `None` when the grammar fails on it.
    pub(crate) fn line(&mut self, line: &str) -> Option<String> {
        // The bundled grammars match line ends: each line is given with its own.
        let with_end = format!("{line}\n");
        let pieces = self.lines.highlight_line(&with_end, syntaxes()).ok()?;
        let mut out = String::with_capacity(line.len() * 2);
        for (style, text) in pieces {
            let text = text.strip_suffix('\n').unwrap_or(text);
            if text.is_empty() {
                continue;
            }
            let colour = style.foreground;
            out.push_str(&format!(
                "\x1b[38;2;{};{};{}m{text}",
                colour.r, colour.g, colour.b
            ));
        }
        out.push_str("\x1b[0m");
        Some(out)
    }
}

fn syntaxes() -> &'static SyntaxSet {
    static SYNTAXES: OnceLock<SyntaxSet> = OnceLock::new();
    SYNTAXES.get_or_init(SyntaxSet::load_defaults_newlines)
}

fn theme() -> Option<&'static Theme> {
    static THEMES: OnceLock<ThemeSet> = OnceLock::new();
    THEMES
        .get_or_init(ThemeSet::load_defaults)
        .themes
        .get(THEME)
}
