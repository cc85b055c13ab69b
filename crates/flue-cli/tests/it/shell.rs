//! `flue completions` and `flue man` as a user installs them: the bash script loaded by bash
//! itself and asked to complete words (as bash does on Tab: the completion function with the
//! command, the word and the word before it), and the man pages written where `man` looks.

use std::process::Command;

use pretty_assertions::assert_eq;

use crate::{stderr, stdout};

fn flue() -> String {
    assert_cmd::cargo::cargo_bin("flue").display().to_string()
}

/// What bash offers after `line` (its words; the last one is being completed), with the
/// script of `flue completions bash` loaded.
fn bash_completes(words: &[&str]) -> Vec<String> {
    let quoted: Vec<String> = words.iter().map(|word| format!("'{word}'")).collect();
    let cword = words.len() - 1;
    let script = format!(
        "source <('{flue}' completions bash) && COMP_WORDS=({words}) && COMP_CWORD={cword} && \
         _flue flue '{current}' '{previous}' && printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        flue = flue(),
        words = quoted.join(" "),
        current = words[cword],
        previous = words[cword - 1],
    );
    let output = Command::new("bash").args(["-c", &script]).output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    stdout(&output).lines().map(str::to_owned).collect()
}

#[test]
fn the_bash_script_loads_and_completes_commands_subcommands_and_flags() {
    let output = Command::new("bash")
        .args([
            "-c",
            &format!("source <('{}' completions bash); complete -p flue", flue()),
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("-F _flue flue"),
        "{}",
        stdout(&output)
    );
    assert_eq!(bash_completes(&["flue", "ses"]), ["session"]);
    assert_eq!(bash_completes(&["flue", "session", "fo"]), ["fork"]);
    assert_eq!(
        bash_completes(&["flue", "run", "hello", "--allow-u"]),
        ["--allow-unknown-model"]
    );
    let shells = bash_completes(&["flue", "completions", ""]);
    for shell in ["bash", "zsh", "fish", "powershell"] {
        assert!(shells.iter().any(|offered| offered == shell), "{shells:?}");
    }
}

#[test]
fn every_shell_gets_a_script_and_a_closed_pipe_is_not_an_error() {
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        let output = Command::new(flue())
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(output.status.success(), "{shell}: {}", stderr(&output));
        assert!(stdout(&output).contains("flue"), "{shell}");
    }
    // `| head`: the reader goes away early; no panic, no error.
    let output = Command::new("bash")
        .args([
            "-o",
            "pipefail",
            "-c",
            &format!("'{}' completions bash | head -n 1", flue()),
        ])
        .output()
        .unwrap();
    assert_eq!(
        (output.status.code(), stderr(&output)),
        (Some(0), String::new())
    );
}

#[test]
fn man_prints_the_page_and_writes_one_per_command() {
    let output = Command::new(flue()).arg("man").output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let page = stdout(&output);
    assert!(page.contains(".TH flue 1"), "{page}");
    assert!(page.contains("flue\\-session(1)"), "{page}");

    let dir = tempfile::tempdir().unwrap();
    let man1 = dir.path().join("man1");
    let output = Command::new(flue())
        .args(["man", "--dir"])
        .arg(&man1)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    for page in [
        "flue.1",
        "flue-run.1",
        "flue-session-fork.1",
        "flue-completions.1",
    ] {
        assert!(man1.join(page).is_file(), "{page} missing");
    }
    // `man` reads them (rendered by groff), when it is installed.
    if let Ok(rendered) = Command::new("man")
        .arg("-l")
        .arg(man1.join("flue-run.1"))
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .output()
    {
        let text = stdout(&rendered);
        assert!(text.contains("--allow-unknown-model"), "{text}");
    }
}

#[test]
fn the_top_level_help_points_at_what_an_installed_binary_has() {
    let output = Command::new(flue()).arg("--help").output().unwrap();
    let help = stdout(&output);
    let tail: Vec<&str> = help.lines().rev().take(3).collect();
    assert_eq!(
        tail,
        [
            "Docs: https://github.com/flue-rs/flue/tree/main/docs (docs/cli.md for every command)",
            "man page, `flue completions <shell>` a completion script.",
            "More: `flue help <command>` for each command's options and examples; `flue man` prints the",
        ]
    );
}
