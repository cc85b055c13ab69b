//! The patch grammar: `*** Begin Patch` … `*** End Patch` with Add, Delete and Update sections.
//!
//! ```text
//! patch   := blank* "*** Begin Patch" section+ "*** End Patch" blank*
//! section := "*** Add File: " path  ("+" line)*
//!          | "*** Delete File: " path
//!          | "*** Update File: " path  ["*** Move to: " path]  chunk*
//! chunk   := ["@@" [" " context]]  (" " line | "-" line | "+" line | "")+  ["*** End of File"]
//! ```
//!
//! Leniency, as models write patches: marker lines (Begin/End Patch, section headers, Move to,
//! End of File) may carry leading and trailing whitespace; blank lines between sections and
//! between chunks are skipped; an empty line inside a chunk is an empty context line; the first
//! chunk of a section may omit its `@@` header. An Update section needs at least one chunk
//! unless it moves the file. Anything else outside the grammar — text before Begin Patch or
//! after End Patch, an unknown header, a chunk line without a prefix — is a [`ParseError`]
//! naming the line. Parsing never panics, whatever the input.

/// A parsed patch: its sections in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Patch {
    pub(crate) sections: Vec<Section>,
}

/// One file section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Section {
    /// `*** Add File:` with the new file's content (each `+` line plus a newline).
    Add {
        path: String,
        content: String,
        line: usize,
    },
    /// `*** Delete File:`.
    Delete { path: String, line: usize },
    /// `*** Update File:`, optionally moved, with its chunks.
    Update {
        path: String,
        move_to: Option<String>,
        chunks: Vec<Chunk>,
        line: usize,
    },
}

impl Section {
    /// The path the section names first.
    pub(crate) fn path(&self) -> &str {
        match self {
            Self::Add { path, .. } | Self::Delete { path, .. } | Self::Update { path, .. } => path,
        }
    }

    /// The 1-based line of the section's header.
    pub(crate) fn line(&self) -> usize {
        match self {
            Self::Add { line, .. } | Self::Delete { line, .. } | Self::Update { line, .. } => *line,
        }
    }
}

/// One `@@` chunk of an Update section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Chunk {
    /// The text after `@@ `: a line to find first; the chunk applies below it.
    pub(crate) context: Option<String>,
    /// The chunk's lines, in order.
    pub(crate) lines: Vec<ChunkLine>,
    /// `*** End of File`: the old lines must end the file.
    pub(crate) end_of_file: bool,
    /// The 1-based line where the chunk starts.
    pub(crate) line: usize,
}

/// One line of a chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ChunkLine {
    /// ` line`: must be in the file, stays.
    Context(String),
    /// `-line`: must be in the file, goes.
    Removed(String),
    /// `+line`: comes in.
    Added(String),
}

impl Chunk {
    /// The lines to find in the file (context and removed lines), in order.
    pub(crate) fn old_lines(&self) -> Vec<String> {
        self.lines
            .iter()
            .filter_map(|line| match line {
                ChunkLine::Context(text) | ChunkLine::Removed(text) => Some(text.clone()),
                ChunkLine::Added(_) => None,
            })
            .collect()
    }
}

/// Why a patch does not parse, with the 1-based line at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParseError {
    pub(crate) line: usize,
    pub(crate) message: String,
}

const BEGIN: &str = "*** Begin Patch";
const END: &str = "*** End Patch";
const ADD: &str = "*** Add File:";
const DELETE: &str = "*** Delete File:";
const UPDATE: &str = "*** Update File:";
const MOVE_TO: &str = "*** Move to:";
const END_OF_FILE: &str = "*** End of File";

/// Parses a whole patch.
pub(crate) fn parse_patch(text: &str) -> Result<Patch, ParseError> {
    let lines: Vec<&str> = text.lines().collect();
    let is_blank = |line: &&str| line.trim().is_empty();
    let Some(first) = lines.iter().position(|line| !is_blank(line)) else {
        return Err(error(
            1,
            "the patch is empty: it must start with `*** Begin Patch`",
        ));
    };
    if lines[first].trim() != BEGIN {
        return Err(error(
            first + 1,
            format!(
                "expected `{BEGIN}`, found {:?}: nothing may come before the Begin Patch marker",
                excerpt(lines[first])
            ),
        ));
    }
    let last = lines
        .iter()
        .rposition(|line| !is_blank(line))
        .unwrap_or(first);
    if last == first || lines[last].trim() != END {
        return Err(error(
            last + 1,
            format!(
                "the patch must end with `{END}` (found {:?}); nothing may come after it",
                excerpt(lines[last])
            ),
        ));
    }
    let mut parser = Parser {
        lines: &lines,
        idx: first + 1,
        end: last,
    };
    let mut sections = Vec::new();
    while let Some(line) = parser.peek() {
        if line.trim().is_empty() {
            parser.idx += 1;
            continue;
        }
        sections.push(parser.section()?);
    }
    if sections.is_empty() {
        return Err(error(
            last + 1,
            "the patch has no file sections: add `*** Add File:`, `*** Update File:` or \
             `*** Delete File:` sections between the markers",
        ));
    }
    Ok(Patch { sections })
}

struct Parser<'a> {
    lines: &'a [&'a str],
    /// Index of the next line.
    idx: usize,
    /// Index of the End Patch line.
    end: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<&'a str> {
        if self.idx < self.end {
            self.lines.get(self.idx).copied()
        } else {
            None
        }
    }

    /// The 1-based number of the next line.
    fn line_no(&self) -> usize {
        self.idx + 1
    }

    fn section(&mut self) -> Result<Section, ParseError> {
        let header_line = self.line_no();
        let header = self.peek().unwrap_or_default().trim();
        if let Some(rest) = header.strip_prefix(ADD) {
            let path = section_path(rest, header_line, ADD)?;
            self.idx += 1;
            let mut content = String::new();
            while let Some(line) = self.peek() {
                let Some(added) = line.strip_prefix('+') else {
                    break;
                };
                content.push_str(added);
                content.push('\n');
                self.idx += 1;
            }
            return Ok(Section::Add {
                path,
                content,
                line: header_line,
            });
        }
        if let Some(rest) = header.strip_prefix(DELETE) {
            let path = section_path(rest, header_line, DELETE)?;
            self.idx += 1;
            return Ok(Section::Delete {
                path,
                line: header_line,
            });
        }
        if let Some(rest) = header.strip_prefix(UPDATE) {
            let path = section_path(rest, header_line, UPDATE)?;
            self.idx += 1;
            let mut move_to = None;
            if let Some(rest) = self
                .peek()
                .and_then(|line| line.trim().strip_prefix(MOVE_TO))
            {
                move_to = Some(section_path(rest, self.line_no(), MOVE_TO)?);
                self.idx += 1;
            }
            let chunks = self.chunks()?;
            if chunks.is_empty() && move_to.is_none() {
                return Err(error(
                    header_line,
                    format!(
                        "`{UPDATE} {path}` has no changes: add `@@` chunks of ` `, `-` and `+` \
                         lines (or a `{MOVE_TO}` line to only rename it)"
                    ),
                ));
            }
            return Ok(Section::Update {
                path,
                move_to,
                chunks,
                line: header_line,
            });
        }
        Err(error(
            header_line,
            format!(
                "expected a section header (`{ADD} path`, `{UPDATE} path`, `{DELETE} path`) or \
                 `{END}`, found {:?}",
                excerpt(header)
            ),
        ))
    }

    /// The chunks of an Update section, up to the next marker line.
    fn chunks(&mut self) -> Result<Vec<Chunk>, ParseError> {
        let mut chunks = Vec::new();
        while let Some(line) = self.peek() {
            if line.trim().is_empty() {
                self.idx += 1;
                continue;
            }
            if line.trim_start().starts_with("***") {
                break;
            }
            let chunk_line = self.line_no();
            let header = line.trim_end();
            let context = if header == "@@" {
                self.idx += 1;
                None
            } else if let Some(context) = header.strip_prefix("@@ ") {
                self.idx += 1;
                unified_diff_context(context)
            } else if chunks.is_empty() && is_change_line(line) {
                // The first chunk may start without a header.
                None
            } else {
                return Err(error(
                    chunk_line,
                    format!(
                        "expected a `@@` chunk header or a line starting with ' ', '-' or '+', \
                         found {:?}",
                        excerpt(line)
                    ),
                ));
            };
            chunks.push(self.chunk_body(context, chunk_line)?);
        }
        Ok(chunks)
    }

    fn chunk_body(
        &mut self,
        context: Option<String>,
        chunk_line: usize,
    ) -> Result<Chunk, ParseError> {
        let mut chunk = Chunk {
            context,
            lines: Vec::new(),
            end_of_file: false,
            line: chunk_line,
        };
        let mut n_lines = 0usize;
        while let Some(line) = self.peek() {
            if line.trim() == END_OF_FILE {
                if n_lines == 0 {
                    break;
                }
                chunk.end_of_file = true;
                self.idx += 1;
                break;
            }
            if line.is_empty() {
                chunk.lines.push(ChunkLine::Context(String::new()));
            } else if let Some(kept) = line.strip_prefix(' ') {
                chunk.lines.push(ChunkLine::Context(kept.to_owned()));
            } else if let Some(removed) = line.strip_prefix('-') {
                chunk.lines.push(ChunkLine::Removed(removed.to_owned()));
            } else if let Some(added) = line.strip_prefix('+') {
                chunk.lines.push(ChunkLine::Added(added.to_owned()));
            } else {
                break;
            }
            n_lines += 1;
            self.idx += 1;
        }
        if n_lines == 0 {
            return Err(error(
                chunk_line,
                "this chunk has no lines: follow `@@` with ` ` (context), `-` (removed) and `+` \
                 (added) lines",
            ));
        }
        Ok(chunk)
    }
}

/// The context of a `@@ ` header. A unified-diff header (`@@ -12,5 +12,6 @@ fn main()`)
/// gives the text after its second `@@`, if any: line numbers are ignored, since chunks are
/// found by their content.
fn unified_diff_context(context: &str) -> Option<String> {
    let numbers = |range: &str, sign: char| {
        range.strip_prefix(sign).is_some_and(|digits| {
            !digits.is_empty()
                && digits
                    .split(',')
                    .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
        })
    };
    let mut parts = context.splitn(3, ' ');
    if let (Some(old), Some(new), Some(rest)) = (parts.next(), parts.next(), parts.next())
        && numbers(old, '-')
        && numbers(new, '+')
        && let Some(after) = rest.strip_prefix("@@")
    {
        let after = after.trim();
        return (!after.is_empty()).then(|| after.to_owned());
    }
    Some(context.to_owned())
}

/// Whether `line` can start a chunk body.
fn is_change_line(line: &str) -> bool {
    line.starts_with([' ', '-', '+'])
}

/// The path after a section marker; an empty one is an error.
fn section_path(rest: &str, line: usize, marker: &str) -> Result<String, ParseError> {
    let path = rest.trim();
    if path.is_empty() {
        return Err(error(line, format!("`{marker}` needs a path after it")));
    }
    Ok(path.to_owned())
}

fn error(line: usize, message: impl Into<String>) -> ParseError {
    ParseError {
        line,
        message: message.into(),
    }
}

/// At most 80 characters of `line`, for messages.
fn excerpt(line: &str) -> String {
    match line.char_indices().nth(80) {
        None => line.to_owned(),
        Some((idx, _)) => format!("{}…", &line[..idx]),
    }
}
