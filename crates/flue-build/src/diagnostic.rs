//! Diagnostics: one problem at one place in a workspace file, and the error that carries them all.

use std::fmt;

use flue_core::FlueError;

/// One problem in an agent workspace: where it is and what to do about it.
///
/// Displays as `path:line: message`, or `path: message` when no line applies.
///
/// ```
/// use flue_build::Diagnostic;
/// let diagnostic = Diagnostic::at("agents/reviewer.md", 3, "unknown key `modle` (did you mean `model`?)");
/// assert_eq!(
///     diagnostic.to_string(),
///     "agents/reviewer.md:3: unknown key `modle` (did you mean `model`?)"
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Diagnostic {
    /// The file at fault, relative to the workspace root with `/` separators (`agents/a.md`);
    /// a file outside the root keeps the path it was given by.
    pub path: String,
    /// 1-based line in `path`, when the problem has one.
    pub line: Option<usize>,
    /// What is wrong and how to fix it, in lowercase.
    pub message: String,
}

/// Every problem found while loading a workspace, sorted by file and line. Never empty.
///
/// Displays one [`Diagnostic`] per line. Converts into [`FlueError::InvalidConfig`] for callers
/// that deal in the runtime's error taxonomy.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", render(&self.0))]
pub struct Diagnostics(Vec<Diagnostic>);

impl Diagnostic {
    /// A problem at `line` (1-based) of `path`.
    pub fn at(path: impl Into<String>, line: usize, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            line: Some(line),
            message: message.into(),
        }
    }

    /// A problem with the whole file at `path`.
    pub fn file(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            line: None,
            message: message.into(),
        }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.path, self.message),
            None => write!(f, "{}: {}", self.path, self.message),
        }
    }
}

impl Diagnostics {
    /// The diagnostics, sorted by file and line.
    pub fn as_slice(&self) -> &[Diagnostic] {
        &self.0
    }

    /// The diagnostics, sorted by file and line.
    pub fn into_vec(self) -> Vec<Diagnostic> {
        self.0
    }

    /// A single diagnostic.
    pub(crate) fn one(diagnostic: Diagnostic) -> Self {
        Self(vec![diagnostic])
    }

    /// At least one diagnostic, sorted by file and line.
    pub(crate) fn from_vec(mut diagnostics: Vec<Diagnostic>) -> Self {
        diagnostics.sort_by(|a, b| (&a.path, a.line).cmp(&(&b.path, b.line)));
        Self(diagnostics)
    }

    /// `Ok` when `diagnostics` is empty, else all of them sorted by file and line (stable, so
    /// problems on one line keep the order they were found in).
    pub(crate) fn check(mut diagnostics: Vec<Diagnostic>) -> Result<(), Self> {
        if diagnostics.is_empty() {
            return Ok(());
        }
        diagnostics.sort_by(|a, b| (&a.path, a.line).cmp(&(&b.path, b.line)));
        Err(Self(diagnostics))
    }
}

impl<'a> IntoIterator for &'a Diagnostics {
    type Item = &'a Diagnostic;
    type IntoIter = std::slice::Iter<'a, Diagnostic>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// Keeps the first diagnostic's path and line in the structured fields. The message is the first
/// diagnostic's message followed by every other diagnostic on its own line, so the error's
/// `Display` reads exactly like the [`Diagnostics`] it came from.
impl From<Diagnostics> for FlueError {
    fn from(diagnostics: Diagnostics) -> Self {
        let mut all = diagnostics.0.into_iter();
        let Some(first) = all.next() else {
            return FlueError::config("invalid workspace");
        };
        let mut message = first.message;
        for diagnostic in all {
            message.push('\n');
            message.push_str(&diagnostic.to_string());
        }
        FlueError::InvalidConfig {
            message,
            path: Some(first.path),
            line: first.line,
        }
    }
}

fn render(diagnostics: &[Diagnostic]) -> String {
    let lines: Vec<String> = diagnostics.iter().map(Diagnostic::to_string).collect();
    lines.join("\n")
}
