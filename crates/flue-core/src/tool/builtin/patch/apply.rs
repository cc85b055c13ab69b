//! Applying an Update section's chunks to a file's text, in memory.
//!
//! Chunks are found by content, never by line number, searching forward from where the
//! previous chunk ended: first the `@@ context` line (if any), then the chunk's old lines below
//! it. Each search tries, in order, an exact match, a match ignoring trailing whitespace, one
//! ignoring surrounding whitespace, and one that also treats typographic dashes, quotes and
//! spaces as their ASCII forms; the first position that matches wins. An `*** End of File`
//! chunk must match at the end of the file. A chunk with no old lines inserts its lines right
//! after its context line, or at the end of the file when it has none.
//!
//! Context lines keep the file's text (a context line matched despite different trailing
//! whitespace is not rewritten). The file keeps its line endings (CRLF stays CRLF) and its
//! final newline or lack of one; an empty file gains a final newline.

use crate::tool::builtin::patch::parse::{Chunk, ChunkLine};

/// Why a chunk does not apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Conflict {
    /// The 1-based patch line of the chunk.
    pub(crate) line: usize,
    pub(crate) message: String,
}

/// `original` with `chunks` applied.
pub(crate) fn apply_chunks(original: &str, chunks: &[Chunk]) -> Result<String, Conflict> {
    let crlf = original.contains("\r\n");
    let had_final_newline = original.ends_with('\n');
    let mut lines: Vec<String> = original
        .split('\n')
        .map(|line| {
            if crlf {
                line.strip_suffix('\r').unwrap_or(line).to_owned()
            } else {
                line.to_owned()
            }
        })
        .collect();
    // "a\nb\n" splits into ["a", "b", ""]; "" into [""]: the last element is not a line.
    if lines.last().is_some_and(String::is_empty) {
        lines.pop();
    }

    let mut replacements: Vec<(usize, usize, Vec<String>)> = Vec::new();
    let mut cursor = 0usize;
    for chunk in chunks {
        if let Some(context) = &chunk.context {
            let Some(found) = seek(&lines, std::slice::from_ref(context), cursor, false) else {
                return Err(Conflict {
                    line: chunk.line,
                    message: format!(
                        "the context line {:?} was not found{}",
                        context,
                        after_line(cursor)
                    ),
                });
            };
            cursor = found + 1;
        }
        let mut ops: &[ChunkLine] = &chunk.lines;
        let mut old_lines = chunk.old_lines();
        if old_lines.is_empty() {
            let at = if chunk.context.is_some() && !chunk.end_of_file {
                cursor
            } else {
                lines.len()
            };
            replacements.push((at, 0, added_lines(ops)));
            continue;
        }
        let mut found = seek(&lines, &old_lines, cursor, chunk.end_of_file);
        // A trailing empty context line often stands for the file's final newline.
        if found.is_none()
            && let Some((ChunkLine::Context(last), rest)) = ops.split_last()
            && last.is_empty()
        {
            ops = rest;
            old_lines.pop();
            found = if old_lines.is_empty() {
                Some(lines.len())
            } else {
                seek(&lines, &old_lines, cursor, chunk.end_of_file)
            };
        }
        let Some(start) = found else {
            return Err(Conflict {
                line: chunk.line,
                message: format!(
                    "these lines were not found{}{}: {}",
                    after_line(cursor),
                    if chunk.end_of_file {
                        " at the end of the file"
                    } else {
                        ""
                    },
                    quote_lines(&chunk.old_lines())
                ),
            });
        };
        let matched = lines
            .get(start..start + old_lines.len())
            .unwrap_or_default();
        replacements.push((start, old_lines.len(), new_lines(ops, matched)));
        cursor = start + old_lines.len();
    }

    replacements.sort_by_key(|(start, _, _)| *start);
    for pair in replacements.windows(2) {
        if let [(start, len, _), (next, _, _)] = pair
            && start + len > *next
        {
            return Err(Conflict {
                line: chunks.first().map_or(0, |chunk| chunk.line),
                message: "two chunks change the same lines".to_owned(),
            });
        }
    }
    for (start, len, new_lines) in replacements.into_iter().rev() {
        lines.splice(start..start + len, new_lines);
    }

    let eol = if crlf { "\r\n" } else { "\n" };
    let mut text = lines.join(eol);
    if !lines.is_empty() && (had_final_newline || original.is_empty()) {
        text.push_str(eol);
    }
    Ok(text)
}

/// The lines a chunk puts in place of `matched` (the file's lines its old lines matched):
/// context lines keep the file's text, added lines come from the patch.
fn new_lines(ops: &[ChunkLine], matched: &[String]) -> Vec<String> {
    let mut old_idx = 0usize;
    let mut out = Vec::new();
    for op in ops {
        match op {
            ChunkLine::Context(text) => {
                out.push(matched.get(old_idx).unwrap_or(text).clone());
                old_idx += 1;
            }
            ChunkLine::Removed(_) => old_idx += 1,
            ChunkLine::Added(text) => out.push(text.clone()),
        }
    }
    out
}

/// The added lines of a chunk with nothing to match.
fn added_lines(ops: &[ChunkLine]) -> Vec<String> {
    ops.iter()
        .filter_map(|op| match op {
            ChunkLine::Added(text) => Some(text.clone()),
            ChunkLine::Context(_) | ChunkLine::Removed(_) => None,
        })
        .collect()
}

/// The first index at or after `from` where `pattern` matches `lines`, trying stricter
/// comparisons first. With `at_end`, only the position that ends at the end of the file.
fn seek(lines: &[String], pattern: &[String], from: usize, at_end: bool) -> Option<usize> {
    if pattern.len() > lines.len() {
        return None;
    }
    let last_start = lines.len() - pattern.len();
    let first_start = if at_end { last_start } else { from };
    if first_start > last_start {
        return None;
    }
    let comparisons: [fn(&str, &str) -> bool; 4] = [
        |a, b| a == b,
        |a, b| a.trim_end() == b.trim_end(),
        |a, b| a.trim() == b.trim(),
        |a, b| {
            a.trim()
                .chars()
                .map(plain_char)
                .eq(b.trim().chars().map(plain_char))
        },
    ];
    comparisons.iter().find_map(|same| {
        (first_start..=last_start).find(|&start| {
            lines[start..start + pattern.len()]
                .iter()
                .zip(pattern)
                .all(|(line, wanted)| same(line, wanted))
        })
    })
}

/// Typographic punctuation and spaces as their ASCII forms.
fn plain_char(c: char) -> char {
    match c {
        '\u{2010}'..='\u{2015}' | '\u{2212}' => '-',
        '\u{2018}'..='\u{201B}' => '\'',
        '\u{201C}'..='\u{201F}' => '"',
        '\u{00A0}' | '\u{2002}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}' => ' ',
        other => other,
    }
}

fn after_line(cursor: usize) -> String {
    if cursor == 0 {
        String::new()
    } else {
        format!(" after line {cursor}")
    }
}

/// Up to five lines, quoted, for a message.
fn quote_lines(lines: &[String]) -> String {
    let mut quoted: Vec<String> = lines
        .iter()
        .take(5)
        .map(|line| format!("{line:?}"))
        .collect();
    if lines.len() > 5 {
        quoted.push(format!("… ({} lines in all)", lines.len()));
    }
    quoted.join(", ")
}
