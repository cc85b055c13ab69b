//! Unit tests of the file tools' helpers: line slicing, paths, ignore rules, diffs.

use pretty_assertions::assert_eq;

use super::read::{Slice, select_lines};
use super::walk::rules_from;
use super::{cut_at, sha256_hex, shown_path, unified_diff};

#[test]
fn select_lines_counts_lines_like_an_editor() {
    let slice = |text, start, end, max| select_lines(text, start, end, max).map_err(|err| err.kind);
    assert_eq!(
        slice("a\nb\nc", Some(2), None, 100),
        Ok(Slice {
            content: "b\nc".into(),
            start_line: 2,
            end_line: 3,
            total_lines: 3,
            selected_lines: 2,
            truncated: false
        })
    );
    assert_eq!(slice("a\nb\n", Some(3), None, 100), Err("invalid_input"));
    assert_eq!(slice("", Some(2), None, 100), Err("invalid_input"));
    assert_eq!(slice("a\nb\n", Some(2), Some(1), 100), Err("invalid_input"));
    assert_eq!(
        slice("aaaa\nb\n", None, None, 2).map(|slice| (slice.content, slice.truncated)),
        Ok(("aa".to_owned(), true))
    );
}

#[test]
fn shown_paths_are_relative_inside_the_working_directory() {
    assert_eq!(shown_path("/w", "/w"), ".");
    assert_eq!(shown_path("/w", "/w/a/b"), "a/b");
    assert_eq!(shown_path("/w", "/wx/a"), "/wx/a");
    assert_eq!(shown_path("/", "/a"), "a");
}

#[test]
fn ignore_rules_follow_gitignore_semantics() {
    let rules = rules_from(
        "/w",
        "# comment\n*.log\n!keep.log\nbuild/\n/top.txt\ndocs/*.tmp\n\\#hash\n",
    );
    let cases = [
        ("/w/a.log", false, true),
        ("/w/deep/a.log", false, true),
        ("/w/keep.log", false, false),
        ("/w/build", true, true),
        ("/w/build", false, false),
        ("/w/sub/build", true, true),
        ("/w/top.txt", false, true),
        ("/w/sub/top.txt", false, false),
        ("/w/docs/x.tmp", false, true),
        ("/w/docs/sub/x.tmp", false, false),
        ("/w/#hash", false, true),
        ("/w/readme.md", false, false),
    ];
    for (path, is_dir, ignored) in cases {
        assert_eq!(rules.ignored(path, is_dir), ignored, "{path} dir={is_dir}");
    }
}

#[test]
fn diffs_are_unified_and_cut_on_a_character_boundary() {
    assert_eq!(
        unified_diff("a.txt", Some(b"x\n"), Some(b"y\n")),
        (
            Some("--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-x\n+y\n".to_owned()),
            false
        )
    );
    assert_eq!(unified_diff("a.bin", Some(b"\xff"), None), (None, false));
    assert_eq!(cut_at("aé".to_owned(), 2), ("a".to_owned(), true));
    assert_eq!(cut_at("ab".to_owned(), 2), ("ab".to_owned(), false));
    assert_eq!(
        sha256_hex(b""),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
}
