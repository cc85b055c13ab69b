//! Unit tests of the colour policy and the markdown line styler.

use super::markdown::{LineStyler, visible};
use super::{ColorChoice, decide};

#[test]
fn colour_follows_the_flag_then_no_color_then_forcing_then_the_terminal() {
    assert!(decide(ColorChoice::Always, true, false, false));
    assert!(!decide(ColorChoice::Never, false, true, true));
    assert!(!decide(ColorChoice::Auto, true, true, true));
    assert!(decide(ColorChoice::Auto, false, true, false));
    assert!(decide(ColorChoice::Auto, false, false, true));
    assert!(!decide(ColorChoice::Auto, false, false, false));
}

#[test]
fn markdown_lines_lose_their_markers_and_keep_their_words() {
    let mut styler = LineStyler::default();
    let shown: Vec<String> = [
        "# Title",
        "Some **bold** and `code` and *it*.",
        "- one",
        "> quoted",
        "```rust",
        "let x = 1;",
        "```",
        "plain",
        "| a | **b** |",
        "|---|:-:|",
    ]
    .iter()
    .map(|line| visible(&styler.render(line)))
    .collect();
    assert_eq!(
        shown,
        [
            "Title",
            "Some bold and code and it.",
            "• one",
            "│ quoted",
            "```rust",
            "let x = 1;",
            "```",
            "plain",
            "│ a │ b │",
            "|---|:-:|"
        ]
    );
}

#[test]
fn a_plain_line_renders_as_itself() {
    let mut styler = LineStyler::default();
    assert_eq!(styler.render("Hello, world!"), "Hello, world!");
}

/// The distinct 24-bit foreground colours `styled` sets.
fn colours(styled: &str) -> std::collections::BTreeSet<&str> {
    styled
        .split("\x1b[38;2;")
        .skip(1)
        .filter_map(|rest| rest.split('m').next())
        .collect()
}

#[test]
fn code_blocks_in_a_known_language_are_highlighted_and_others_keep_one_colour() {
    let mut styler = LineStyler::default();
    styler.render("```rust");
    let rust = styler.render("fn main() { let x = \"hi\"; }");
    assert_eq!(visible(&rust), "fn main() { let x = \"hi\"; }");
    assert!(colours(&rust).len() > 2, "{rust:?}");
    styler.render("```");
    assert_eq!(styler.render("fn main"), "fn main");

    styler.render("```py");
    let python = styler.render("def f(x): return 'a'  # note");
    assert!(colours(&python).len() > 2, "{python:?}");
    styler.render("```");

    styler.render("```nosuchlanguage");
    assert_eq!(styler.render("a = 1"), "\x1b[36ma = 1\x1b[0m");
    styler.render("```");
}

#[test]
fn a_table_is_aligned_by_its_shown_cells_unless_it_is_too_wide() {
    let rows: Vec<String> = ["| name | **n** |", "|:-:|--:|", "| `alpha` | 1 |", "| b |"]
        .iter()
        .map(|row| (*row).to_owned())
        .collect();
    let aligned = super::markdown::aligned_table(&rows, 80).unwrap();
    let shown: Vec<String> = aligned.iter().map(|row| visible(row)).collect();
    assert_eq!(
        shown,
        [
            "│ name  │ n │",
            "├───────┼───┤",
            "│ alpha │ 1 │",
            "│   b   │   │"
        ]
    );
    assert_eq!(super::markdown::aligned_table(&rows, 12), None);
    assert_eq!(super::markdown::aligned_table(&rows[..1], 80), None);
}
