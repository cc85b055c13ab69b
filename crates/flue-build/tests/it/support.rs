//! Shared helpers: build a workspace from a map of files, load it, compare the outcome.

use std::fs;
use std::path::Path;

use flue_build::{AgentFile, Diagnostic, Workspace};
use pretty_assertions::assert_eq;
use tempfile::TempDir;

/// A model specifier used throughout the tests.
pub const MODEL: &str = "anthropic/claude-sonnet-4-6";

/// A temporary workspace holding `files` (path relative to the root, content).
pub fn workspace(files: &[(&str, &str)]) -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_files(dir.path(), files);
    dir
}

/// Writes `files` under `root`, creating folders as needed.
pub fn write_files(root: &Path, files: &[(&str, &str)]) {
    for (path, content) in files {
        let path = root.join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, content).unwrap();
    }
}

/// Loads a workspace made of `files`, which must be valid.
pub fn load(files: &[(&str, &str)]) -> Workspace {
    let dir = workspace(files);
    let mut workspace = match Workspace::load(dir.path()) {
        Ok(workspace) => workspace,
        Err(diagnostics) => panic!("expected a valid workspace, got:\n{diagnostics}"),
    };
    // The temporary root differs per run; tests compare everything else.
    workspace.root = "/workspace".into();
    workspace
}

/// Loads a workspace made of `files` and checks that it fails with exactly `expected`.
pub fn check_diagnostics(files: &[(&str, &str)], expected: &[Diagnostic]) {
    let dir = workspace(files);
    let actual = match Workspace::load(dir.path()) {
        Ok(workspace) => panic!("expected diagnostics, got {workspace:#?}"),
        Err(diagnostics) => diagnostics.into_vec(),
    };
    assert_eq!(actual, expected);
}

/// Loads a workspace made of `files` and checks that agent `name` loads as `expected`.
pub fn check_agent(files: &[(&str, &str)], name: &str, expected: &AgentFile) {
    let workspace = load(files);
    assert_eq!(workspace.agents.get(name), Some(expected));
}

/// An agent file with only its name and path set.
pub fn agent(name: &str) -> AgentFile {
    AgentFile {
        name: name.to_owned(),
        path: format!("agents/{name}.md"),
        ..AgentFile::default()
    }
}

/// A diagnostic at `line` of `path`.
pub fn at(path: &str, line: usize, message: &str) -> Diagnostic {
    Diagnostic::at(path, line, message)
}

/// A valid skill file for the skill `name`.
pub fn skill_md(name: &str) -> String {
    format!("---\nname: {name}\ndescription: The {name} skill\n---\nDo {name}.\n")
}

/// A diagnostic about the whole file at `path`.
pub fn file(path: &str, message: &str) -> Diagnostic {
    Diagnostic::file(path, message)
}
