//! The terminal's looks: whether to colour, the styles used, and the chat's line editor.
//!
//! Colour is used only where it is wanted: `--color never` or `NO_COLOR` turn it off,
//! `--color always`, `CLICOLOR_FORCE` or `FORCE_COLOR` on; otherwise each stream is coloured
//! when it is a terminal (and `TERM` is not `dumb`). Without colour nothing here adds a byte:
//! what goes to a pipe or a file is plain text, as before.

pub(crate) mod editor;
pub(crate) mod highlight;
pub(crate) mod markdown;
pub(crate) mod status;

use std::io::IsTerminal as _;
use std::sync::OnceLock;

/// `--color`: when to colour output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ColorChoice {
    /// On a terminal, unless NO_COLOR is set (CLICOLOR_FORCE or FORCE_COLOR force it).
    #[default]
    Auto,
    Always,
    Never,
}

/// Whether stdout and stderr are coloured, decided once.
static COLORS: OnceLock<(bool, bool)> = OnceLock::new();

/// Decides colouring from `choice` and the environment; called once, before any output.
pub(crate) fn init(choice: ColorChoice) {
    let env = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
    let decide = |is_terminal: bool| {
        decide(
            choice,
            env("NO_COLOR").is_some(),
            env("CLICOLOR_FORCE").is_some_and(|value| value != "0")
                || env("FORCE_COLOR").is_some_and(|value| value != "0"),
            is_terminal && env("TERM").is_none_or(|term| term != "dumb"),
        )
    };
    let _ = COLORS.set((
        decide(std::io::stdout().is_terminal()),
        decide(std::io::stderr().is_terminal()),
    ));
}

/// Whether a stream is coloured: the flag first, then NO_COLOR, then the forcing variables,
/// then whether it is a terminal.
pub(crate) fn decide(choice: ColorChoice, no_color: bool, forced: bool, terminal: bool) -> bool {
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto if no_color => false,
        ColorChoice::Auto => forced || terminal,
    }
}

/// Whether stdout is coloured.
pub(crate) fn stdout_colored() -> bool {
    COLORS.get().is_some_and(|colors| colors.0)
}

/// Whether stderr is coloured.
pub(crate) fn stderr_colored() -> bool {
    COLORS.get().is_some_and(|colors| colors.1)
}

/// A style: the SGR parameters it sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Style(pub(crate) &'static str);

impl Style {
    pub(crate) const BOLD: Self = Self("1");
    pub(crate) const DIM: Self = Self("2");
    pub(crate) const ITALIC: Self = Self("3");
    pub(crate) const UNDERLINE: Self = Self("4");
    pub(crate) const HEADING: Self = Self("1;35");
    pub(crate) const CODE: Self = Self("36");
    pub(crate) const TOOL: Self = Self("36");
    pub(crate) const DONE: Self = Self("32");
    pub(crate) const FAILED: Self = Self("31");
    pub(crate) const WARN: Self = Self("33");

    /// `text` in this style when `colored`, else as it is.
    pub(crate) fn paint(self, text: &str, colored: bool) -> String {
        if colored && !text.is_empty() {
            format!("\x1b[{}m{text}\x1b[0m", self.0)
        } else {
            text.to_owned()
        }
    }
}

/// The terminal's width in columns (80 when it cannot be read).
pub(crate) fn width() -> usize {
    rustix::termios::tcgetwinsize(std::io::stdout())
        .ok()
        .map(|size| usize::from(size.ws_col))
        .filter(|cols| *cols > 0)
        .unwrap_or(80)
}

/// The terminal's height in rows (24 when it cannot be read).
pub(crate) fn height() -> usize {
    rustix::termios::tcgetwinsize(std::io::stdout())
        .ok()
        .map(|size| usize::from(size.ws_row))
        .filter(|rows| *rows > 0)
        .unwrap_or(24)
}

/// A cost in US dollars with four decimals (`$0.0042`).
pub(crate) fn cost_text(cost: f64) -> String {
    format!("${cost:.4}")
}

#[cfg(test)]
mod tests;
