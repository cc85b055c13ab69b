//! Splitting a markdown file into its YAML frontmatter and body, finding keys' lines, and
//! describing values for messages.
//!
//! The file must open with a `---` line; the frontmatter runs to the next `---` line and the
//! body is everything after it. gray_matter's YAML engine parses the frontmatter text as it
//! stands in the file, so parser positions and key lines map straight to file lines.

use std::collections::HashMap;

use gray_matter::Pod;
use gray_matter::engine::{Engine, YAML};

use crate::diagnostic::Diagnostic;
use crate::yaml_limits;

/// File line of the first frontmatter line (line 1 is the opening `---`).
pub(crate) const FIRST_LINE: usize = 2;

/// A markdown file with its frontmatter parsed.
pub(crate) struct Document {
    /// The frontmatter's top-level entries, in file order.
    pub(crate) fields: Vec<(String, Pod)>,
    /// Where the frontmatter's keys are.
    pub(crate) lines: KeyLines,
    /// The body without leading blank lines and trailing whitespace.
    pub(crate) body: String,
}

/// Finds the file line of a (possibly nested) frontmatter key by scanning the raw text.
pub(crate) struct KeyLines {
    lines: Vec<String>,
    /// The line index of each top-level key, by the key as written: looking keys up one scan
    /// at a time made a frontmatter of thousands of keys take seconds.
    top_level: HashMap<String, usize>,
}

/// Splits and parses `text`, the content of the file at `path`. Structural problems (empty file,
/// unclosed frontmatter, YAML syntax, non-mapping frontmatter, frontmatter beyond the limits
/// of [`yaml_limits`]) become diagnostics and `None`.
///
/// A file that does not open with `---` has no frontmatter: it is all body.
pub(crate) fn parse(path: &str, text: &str, diagnostics: &mut Vec<Diagnostic>) -> Option<Document> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.trim().is_empty() {
        diagnostics.push(Diagnostic::file(
            path,
            "file is empty: add frontmatter between `---` lines, then the agent's instructions",
        ));
        return None;
    }
    let mut lines = text.split_inclusive('\n');
    let opens = lines.next().is_some_and(|first| first.trim_end() == "---");
    if !opens {
        return Some(Document {
            fields: Vec::new(),
            lines: KeyLines::new(Vec::new()),
            body: tidy_body(text),
        });
    }
    let mut matter = String::new();
    let mut closed = false;
    for line in lines.by_ref() {
        if line.trim_end() == "---" {
            closed = true;
            break;
        }
        matter.push_str(line);
    }
    if !closed {
        diagnostics.push(Diagnostic::at(
            path,
            1,
            "frontmatter is not closed: add a `---` line after the last key",
        ));
        return None;
    }
    let body: String = lines.collect();
    if let Err(exceeded) = yaml_limits::check(&matter) {
        diagnostics.push(Diagnostic::at(
            path,
            exceeded.line + FIRST_LINE - 1,
            exceeded.message,
        ));
        return None;
    }
    let key_lines = KeyLines::new(matter.lines().map(str::to_owned).collect());
    let fields = match YAML::parse(&matter) {
        Ok(Pod::Hash(map)) => {
            let mut fields: Vec<(String, Pod)> = map.into_iter().collect();
            // Each key's line is looked up once (a scan of the frontmatter): looking it up in
            // every comparison made thousands of keys take minutes.
            fields.sort_by_cached_key(|(key, _)| (key_lines.top(key), key.clone()));
            fields
        }
        Ok(Pod::Null) => Vec::new(),
        Ok(other) => {
            diagnostics.push(Diagnostic::at(
                path,
                FIRST_LINE,
                format!(
                    "frontmatter must be a mapping of `key: value` lines, got {}",
                    describe(&other)
                ),
            ));
            return None;
        }
        Err(error) => {
            let (message, line) = yaml_error(&error.to_string());
            // An error found at the end of the input (an unclosed `[`, `{` or quote) is
            // reported past the last line; the closing `---` is not yaml, so name the last
            // frontmatter line instead.
            let last_line = FIRST_LINE + matter.lines().count().max(1) - 1;
            diagnostics.push(Diagnostic::at(
                path,
                line.map_or(FIRST_LINE, |line| (line + FIRST_LINE - 1).min(last_line)),
                format!("invalid yaml in frontmatter: {message}"),
            ));
            return None;
        }
    };
    Some(Document {
        fields,
        lines: key_lines,
        body: tidy_body(&body),
    })
}

/// A short description of a value for messages: `a list`, `a mapping`, `"text"`, `3`.
pub(crate) fn describe(pod: &Pod) -> String {
    match pod {
        Pod::Null => "nothing".to_owned(),
        Pod::String(text) => format!("{text:?}"),
        Pod::Integer(number) => number.to_string(),
        Pod::Float(number) => number.to_string(),
        Pod::Boolean(flag) => flag.to_string(),
        Pod::Array(_) => "a list".to_owned(),
        Pod::Hash(_) => "a mapping".to_owned(),
    }
}

impl KeyLines {
    fn new(lines: Vec<String>) -> Self {
        let mut top_level = HashMap::new();
        for (idx, line) in lines.iter().enumerate() {
            if line.starts_with([' ', '\t', '#']) {
                continue;
            }
            if let Some(key) = written_key(line) {
                top_level.entry(key.to_owned()).or_insert(idx);
            }
        }
        Self { lines, top_level }
    }

    /// The file line of a finding of the `hooks` value under top-level `key`: the first line
    /// below `key` naming the finding's event, then its key.
    pub(crate) fn hooks_line(&self, key: &str, finding: &crate::hooks::Finding) -> usize {
        let from = self.top(key) + 1 - FIRST_LINE;
        crate::hooks::line_of(&self.lines.join("\n"), from, finding) + FIRST_LINE - 1
    }

    /// The file line of top-level `key`, or of the frontmatter start when it is not found.
    pub(crate) fn top(&self, key: &str) -> usize {
        self.nested(&[key])
    }

    /// The file line of the key at `path` (`["mcp", "docs", "url"]`): each key is looked for in
    /// the indented block under the previous one. Falls back to the deepest key found, then to
    /// the frontmatter start (flow mappings like `{ url: ... }` resolve to their parent's line).
    pub(crate) fn nested(&self, path: &[&str]) -> usize {
        if let [key] = path
            && let Some(idx) = self.top_level.get(*key)
        {
            return idx + FIRST_LINE;
        }
        let mut found = None;
        let mut start = 0;
        let mut parent_indent: Option<usize> = None;
        for key in path {
            let mut child_indent = None;
            let mut hit = None;
            for (idx, line) in self.lines.iter().enumerate().skip(start) {
                let content = line.trim_start();
                if content.is_empty() || content.starts_with('#') {
                    continue;
                }
                let indent = line.len() - content.len();
                let expected = match parent_indent {
                    None => 0,
                    Some(parent) if indent <= parent => break,
                    Some(_) => *child_indent.get_or_insert(indent),
                };
                if indent == expected && starts_with_key(content, key) {
                    hit = Some((idx, indent));
                    break;
                }
            }
            let Some((idx, indent)) = hit else { break };
            found = Some(idx);
            start = idx + 1;
            parent_indent = Some(indent);
        }
        found.map_or(FIRST_LINE, |idx| idx + FIRST_LINE)
    }
}

impl KeyLines {
    /// The file line of entry `item_idx` of the block list under top-level `top`, or of `key`
    /// inside that entry when given and found there. Falls back to the entry's line, then to
    /// `top`'s line (a flow list like `[a, b]` resolves to its key's line).
    pub(crate) fn item(&self, top: &str, item_idx: usize, key: Option<&str>) -> usize {
        let top_line = self.top(top);
        let Some(start) = self.top_level.get(top).map(|idx| idx + 1) else {
            return top_line;
        };
        let mut item_indent = None;
        let mut n_items = 0;
        let mut found: Option<usize> = None;
        for (idx, line) in self.lines.iter().enumerate().skip(start) {
            let content = line.trim_start();
            if content.is_empty() || content.starts_with('#') {
                continue;
            }
            let indent = line.len() - content.len();
            let is_dash = content == "-" || content.starts_with("- ");
            if indent == 0 && !is_dash {
                break;
            }
            if is_dash && *item_indent.get_or_insert(indent) == indent {
                if found.is_some() {
                    break;
                }
                if n_items == item_idx {
                    found = Some(idx);
                    if key.is_none() {
                        break;
                    }
                }
                n_items += 1;
            }
            if let (Some(item_line), Some(key)) = (found, key) {
                let inner = if idx == item_line {
                    content[1..].trim_start()
                } else {
                    content
                };
                if starts_with_key(inner, key) {
                    return idx + FIRST_LINE;
                }
            }
        }
        found.map_or(top_line, |idx| idx + FIRST_LINE)
    }
}

/// The key a `key: value` line (without its indentation) starts with: a quoted key, or the
/// text before the first `:` followed by whitespace or the end of the line.
fn written_key(content: &str) -> Option<&str> {
    for quote in ['"', '\''] {
        if let Some(rest) = content.strip_prefix(quote) {
            let end = rest.find(quote)?;
            return rest[end + 1..]
                .trim_start()
                .starts_with(':')
                .then(|| &rest[..end]);
        }
    }
    content.match_indices(':').find_map(|(idx, _)| {
        let after = &content[idx + 1..];
        (after.is_empty() || after.starts_with(char::is_whitespace))
            .then(|| content[..idx].trim_end())
    })
}

/// Whether `content` (a line without its indentation) starts with `key:`, the key possibly
/// quoted.
fn starts_with_key(content: &str, key: &str) -> bool {
    let rest = ['"', '\'']
        .into_iter()
        .find_map(|quote| {
            content
                .strip_prefix(quote)
                .and_then(|quoted| quoted.strip_prefix(key))
                .and_then(|after| after.strip_prefix(quote))
        })
        .or_else(|| content.strip_prefix(key));
    rest.is_some_and(|rest| rest.trim_start().starts_with(':'))
}

/// The parser's message and 1-based frontmatter line, from gray_matter's rendering of a
/// yaml-rust2 scan error (`Deserialize error: <info> at byte N line L column C`).
fn yaml_error(rendered: &str) -> (String, Option<usize>) {
    let inner = rendered
        .strip_prefix("Deserialize error: ")
        .unwrap_or(rendered);
    let Some((info, position)) = inner.rsplit_once(" at byte ") else {
        return (inner.to_owned(), None);
    };
    let line = position
        .split_once(" line ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .and_then(|line| line.parse::<usize>().ok())
        .filter(|line| *line > 0);
    // yaml-rust2 writes the key of a duplicate with Debug (`String("model"): duplicated key`).
    let message = match info.strip_suffix(": duplicated key in mapping") {
        Some(key) => {
            let key = key
                .strip_prefix("String(\"")
                .and_then(|key| key.strip_suffix("\")"))
                .unwrap_or(key);
            format!("`{key}` is set twice: keep one")
        }
        None => info.to_owned(),
    };
    (message, line)
}

fn tidy_body(body: &str) -> String {
    let start = body.len() - body.trim_start_matches(['\n', '\r']).len();
    body[start..].trim_end().to_owned()
}
