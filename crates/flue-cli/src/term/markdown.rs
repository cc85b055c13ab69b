//! Markdown as a terminal shows it, one complete line at a time.
//!
//! The reply streams raw as it arrives (nothing waits for a line to end); when a line is
//! complete, the renderer redraws it styled by [`LineStyler::render`]: headings bold without
//! their `#`, emphasis, strong and inline code styled without their markers, list bullets as
//! `•`, quotes behind a bar, table rows with dimmed bars, fenced code highlighted for its
//! language ([`super::highlight`]; in one code colour when the language is not known). The
//! styler keeps the state lines share: whether a code block is open, and its grammar's state.
//! A table's rows are styled as they come; once the table is over, [`aligned_table`] gives
//! its rows again with the columns aligned (the renderer redraws them when they fit).

use pulldown_cmark::{Event, Parser, Tag, TagEnd};
use unicode_width::UnicodeWidthStr as _;

use super::Style;
use super::highlight::CodeHighlighter;

/// Styles complete lines of markdown; remembers open code blocks.
#[derive(Debug, Default)]
pub(crate) struct LineStyler {
    in_code_block: bool,
    /// The open code block's highlighter, when its language is known.
    highlighter: Option<CodeHighlighter>,
}

impl LineStyler {
    /// Whether `line` is a row of a table (outside a code block).
    pub(crate) fn is_table_row(&self, line: &str) -> bool {
        !self.in_code_block && line.trim_start().starts_with('|')
    }

    /// `line` (without its line end) styled for the terminal.
    pub(crate) fn render(&mut self, line: &str) -> String {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            self.in_code_block = !self.in_code_block;
            self.highlighter = None;
            if self.in_code_block {
                let info = trimmed.trim_start_matches(['`', '~']).trim();
                self.highlighter = CodeHighlighter::for_info(info);
            }
            return Style::DIM.paint(line, true);
        }
        if self.in_code_block {
            return match self.highlighter.as_mut().and_then(|lines| lines.line(line)) {
                Some(highlighted) => highlighted,
                None => Style::CODE.paint(line, true),
            };
        }
        let indent = &line[..line.len() - trimmed.len()];
        if let Some(heading) = heading(trimmed) {
            return format!(
                "{indent}{}",
                Style::HEADING.paint(&inline(heading, None), true)
            );
        }
        if let Some(quoted) = trimmed.strip_prefix('>') {
            let quoted = quoted.strip_prefix(' ').unwrap_or(quoted);
            return format!(
                "{indent}{} {}",
                Style::DIM.paint("│", true),
                Style::ITALIC.paint(&inline(quoted, Some(Style::ITALIC)), true)
            );
        }
        if let Some(item) = ["- ", "* ", "+ "]
            .iter()
            .find_map(|bullet| trimmed.strip_prefix(bullet))
        {
            return format!(
                "{indent}{} {}",
                Style::CODE.paint("•", true),
                inline(item, None)
            );
        }
        if let Some(row) = table_row(trimmed) {
            return format!("{indent}{row}");
        }
        if is_rule(trimmed) {
            return Style::DIM.paint(&"─".repeat(trimmed.chars().count().max(3)), true);
        }
        format!("{indent}{}", inline(trimmed, None))
    }
}

/// The rows of a table (`| a | b |` lines, the delimiter row among them) with their columns
/// aligned, cells styled and padded to the widest cell's shown width; `None` when the table is
/// wider than `max_width` columns (its rows then stay as they were shown) or has no delimiter
/// row.
pub(crate) fn aligned_table(lines: &[String], max_width: usize) -> Option<Vec<String>> {
    let rows: Vec<Vec<&str>> = lines.iter().map(|line| cells(line.trim())).collect();
    let delimiter = rows.iter().position(|row| is_delimiter(row))?;
    let aligns: Vec<Align> = rows[delimiter].iter().map(|cell| align(cell)).collect();
    let styled: Vec<Vec<(String, usize)>> = rows
        .iter()
        .map(|row| {
            row.iter()
                .map(|cell| {
                    let shown = inline(cell.trim(), None);
                    let width = visible(&shown).width();
                    (shown, width)
                })
                .collect()
        })
        .collect();
    let n_cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![1; n_cols];
    for (row_idx, row) in styled.iter().enumerate() {
        if row_idx == delimiter {
            continue;
        }
        for (col, (_, width)) in row.iter().enumerate() {
            widths[col] = widths[col].max(*width);
        }
    }
    let total: usize = widths.iter().map(|width| width + 3).sum::<usize>() + 1;
    if total > max_width {
        return None;
    }
    let bar = Style::DIM.paint("│", true);
    let mut out = Vec::with_capacity(rows.len());
    for (row_idx, row) in styled.iter().enumerate() {
        if row_idx == delimiter {
            let parts: Vec<String> = widths.iter().map(|width| "─".repeat(width + 2)).collect();
            out.push(Style::DIM.paint(&format!("├{}┤", parts.join("┼")), true));
            continue;
        }
        let padded: Vec<String> = (0..n_cols)
            .map(|col| {
                let (shown, width) = row.get(col).map_or(("", 0), |(s, w)| (s.as_str(), *w));
                let align = aligns.get(col).copied().unwrap_or(Align::Left);
                pad(shown, widths[col] - width, align)
            })
            .collect();
        out.push(format!("{bar} {} {bar}", padded.join(&format!(" {bar} "))));
    }
    Some(out)
}

/// `text` without SGR sequences: what the screen shows of it.
pub(crate) fn visible(text: &str) -> String {
    let mut shown = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            shown.push(c);
        }
    }
    shown
}

/// The text of an ATX heading line (`# Title` gives `Title`).
fn heading(line: &str) -> Option<&str> {
    let level = line.chars().take_while(|c| *c == '#').count();
    if !(1..=6).contains(&level) {
        return None;
    }
    let rest = &line[level..];
    if rest.is_empty() {
        return Some(rest);
    }
    rest.strip_prefix(' ')
        .map(|text| text.trim_end_matches([' ', '#']))
}

/// A table row (`| a | b |`) with its bars dimmed and its cells styled; the delimiter row
/// (`|---|:-:|`) dimmed whole. Rows show as they arrive; [`aligned_table`] aligns the table
/// once it is over.
fn table_row(line: &str) -> Option<String> {
    if !line.starts_with('|') {
        return None;
    }
    if line.chars().all(|c| matches!(c, '|' | '-' | ':' | ' ')) {
        return Some(Style::DIM.paint(line, true));
    }
    let bar = Style::DIM.paint("│", true);
    let inner = line.strip_prefix('|').unwrap_or(line);
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    let cells: Vec<String> = inner
        .split('|')
        .map(|cell| inline(cell.trim(), None))
        .collect();
    Some(format!("{bar} {} {bar}", cells.join(&format!(" {bar} "))))
}

/// How a column's cells are aligned (from its delimiter cell: `:-:`, `-:`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Align {
    Left,
    Center,
    Right,
}

/// The cells of a table row, between its outer bars.
fn cells(line: &str) -> Vec<&str> {
    let inner = line.strip_prefix('|').unwrap_or(line);
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    inner.split('|').collect()
}

fn is_delimiter(row: &[&str]) -> bool {
    row.iter().all(|cell| {
        let cell = cell.trim();
        cell.contains('-') && cell.chars().all(|c| matches!(c, '-' | ':'))
    })
}

fn align(delimiter_cell: &str) -> Align {
    let cell = delimiter_cell.trim();
    match (cell.starts_with(':'), cell.ends_with(':')) {
        (true, true) => Align::Center,
        (false, true) => Align::Right,
        _ => Align::Left,
    }
}

/// `shown` with `spare` spaces placed as `align` says.
fn pad(shown: &str, spare: usize, align: Align) -> String {
    let (before, after) = match align {
        Align::Left => (0, spare),
        Align::Right => (spare, 0),
        Align::Center => (spare / 2, spare - spare / 2),
    };
    format!("{}{shown}{}", " ".repeat(before), " ".repeat(after))
}

/// A thematic break: three or more of one of `-`, `*`, `_` and nothing else.
fn is_rule(line: &str) -> bool {
    let marks: String = line.chars().filter(|c| !c.is_whitespace()).collect();
    marks.len() >= 3
        && ['-', '*', '_']
            .iter()
            .any(|mark| marks.chars().all(|c| c == *mark))
}

/// Inline markdown of `text` styled; `base` is the style around it (restored after each
/// styled span). Text that is not inline markup shows as written.
fn inline(text: &str, base: Option<Style>) -> String {
    // Parsed as a paragraph of its own: a leading marker cannot make it another block.
    let mut out = String::with_capacity(text.len() + 16);
    let mut stack: Vec<Style> = base.into_iter().collect();
    let reset = |out: &mut String, stack: &[Style]| {
        out.push_str("\x1b[0m");
        for style in stack {
            out.push_str(&format!("\x1b[{}m", style.0));
        }
    };
    let mut links: Vec<String> = Vec::new();
    // The parser drops a paragraph's trailing spaces; they are kept as typed.
    let trailing = &text[text.trim_end().len()..];
    for event in Parser::new(text.trim_end()) {
        match event {
            Event::Start(Tag::Emphasis) => push(&mut out, &mut stack, Style::ITALIC),
            Event::Start(Tag::Strong) => push(&mut out, &mut stack, Style::BOLD),
            Event::Start(Tag::Strikethrough) => push(&mut out, &mut stack, Style::DIM),
            Event::Start(Tag::Link { dest_url, .. }) => {
                links.push(dest_url.into_string());
                push(&mut out, &mut stack, Style::UNDERLINE);
            }
            Event::End(TagEnd::Emphasis | TagEnd::Strong | TagEnd::Strikethrough) => {
                stack.pop();
                reset(&mut out, &stack);
            }
            Event::End(TagEnd::Link) => {
                stack.pop();
                reset(&mut out, &stack);
                if let Some(url) = links.pop() {
                    out.push_str(&format!(" ({url})"));
                }
            }
            Event::Code(code) => {
                out.push_str(&Style::CODE.paint(&code, true));
                reset(&mut out, &stack);
            }
            Event::Text(piece) | Event::InlineHtml(piece) | Event::Html(piece) => {
                out.push_str(&piece);
            }
            Event::SoftBreak | Event::HardBreak => out.push(' '),
            _ => {}
        }
    }
    out.push_str(trailing);
    out
}

fn push(out: &mut String, stack: &mut Vec<Style>, style: Style) {
    out.push_str(&format!("\x1b[{}m", style.0));
    stack.push(style);
}
