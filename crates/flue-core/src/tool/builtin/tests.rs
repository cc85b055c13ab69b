//! Unit tests of the built-in tools' text shaping.

use pretty_assertions::assert_eq;

use super::{keep_tail, render_shell_result, select_lines};
use crate::sandbox::ShellResult;

#[test]
fn select_lines_slices_and_notes() {
    let text = "one\ntwo\nthree\nfour";
    let check = |first, limit| select_lines(text, first, limit).map_err(|err| err.kind);
    assert_eq!(check(1, 10), Ok(text.to_owned()));
    assert_eq!(check(1, 4), Ok(text.to_owned()));
    assert_eq!(
        check(2, 2),
        Ok("two\nthree\n[lines 2-3 of 4; call again with offset=4 to read more]".to_owned())
    );
    assert_eq!(check(4, 2), Ok("four\n[lines 4-4 of 4]".to_owned()));
    assert_eq!(check(5, 1), Err("invalid_input".to_owned()));
    assert_eq!(select_lines("", 1, 5), Ok("[empty file]".to_owned()));
    assert_eq!(select_lines("a\n\n", 1, 5), Ok("a\n\n".to_owned()));
}

#[test]
fn keep_tail_counts_characters() {
    assert_eq!(keep_tail("abc".to_owned(), 3), "abc");
    assert_eq!(
        keep_tail("héllo".to_owned(), 3),
        "[output truncated: showing the last 3 of 5 characters]\nllo"
    );
    assert_eq!(
        keep_tail("ééé".to_owned(), 2),
        "[output truncated: showing the last 2 of 3 characters]\néé"
    );
}

#[test]
fn shell_results_render_stdout_stderr_and_failure() {
    let render = |stdout: &str, stderr: &str, exit_code| {
        render_shell_result(&ShellResult {
            stdout: stdout.into(),
            stderr: stderr.into(),
            exit_code,
        })
    };
    assert_eq!(render("out\n", "", 0), "out\n");
    assert_eq!(render("out", "err\n", 2), "out\nerr\nexit code: 2");
    assert_eq!(render("", "", 1), "exit code: 1");
    assert_eq!(render("", "", 0), "[no output]");
}
