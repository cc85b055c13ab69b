//! Where a problem in flue.toml is: the file's workspace path and the line a span of its text
//! starts on. Shared by the flue.toml sections that report against the file's text.

use std::ops::Range;

/// The workspace path of the settings file.
pub(crate) const PATH: &str = "flue.toml";

/// The 1-based line holding the start of `span`.
pub(crate) fn line_of(text: &str, span: &Range<usize>) -> usize {
    let start = span.start.min(text.len());
    text.as_bytes()[..start]
        .iter()
        .filter(|byte| **byte == b'\n')
        .count()
        + 1
}
