//! Diagnostics as text and as the runtime's error.

use flue_build::{Diagnostic, Workspace};
use flue_core::FlueError;
use pretty_assertions::assert_eq;

use crate::support::workspace;

fn two_problems() -> flue_build::Diagnostics {
    let dir = workspace(&[
        ("agents/a.md", "---\nmodel: openai/y\nmodle: x/y\n---\nA."),
        ("agents/b.md", "---\ndescription: B\n---\nB."),
    ]);
    Workspace::load(dir.path()).unwrap_err()
}

#[test]
fn diagnostics_display_one_per_line() {
    assert_eq!(
        two_problems().to_string(),
        "agents/a.md:3: unknown key `modle` (did you mean `model`?)\n\
         agents/b.md: no model for this agent: set `model: <provider>/<model>` in its frontmatter, or `model` under [defaults] in flue.toml"
    );
}

#[test]
fn diagnostics_become_an_invalid_config_error_that_reads_the_same() {
    let diagnostics = two_problems();
    let text = diagnostics.to_string();
    let error = FlueError::from(diagnostics);
    assert_eq!(error.kind(), "invalid_config");
    assert_eq!(error.to_string(), text);
    let FlueError::InvalidConfig {
        path,
        line,
        message,
    } = error
    else {
        panic!("expected InvalidConfig, got {error:?}");
    };
    assert_eq!(
        (path.as_deref(), line, message.as_str()),
        (
            Some("agents/a.md"),
            Some(3),
            "unknown key `modle` (did you mean `model`?)\n\
             agents/b.md: no model for this agent: set `model: <provider>/<model>` in its frontmatter, or `model` under [defaults] in flue.toml"
        )
    );
}

#[test]
fn a_diagnostic_without_a_line_displays_its_path() {
    assert_eq!(
        Diagnostic::file("flue.toml", "cannot read file").to_string(),
        "flue.toml: cannot read file"
    );
}
