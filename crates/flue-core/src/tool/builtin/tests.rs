//! Unit tests of the built-in tools' text shaping.

use pretty_assertions::assert_eq;

use super::{keep_tail, render_shell_result};
use crate::sandbox::ShellResult;

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
