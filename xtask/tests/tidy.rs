//! Repository hygiene as ordinary tests, so a plain `cargo test` catches drift.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail loudly by design"
)]

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

fn all_rust_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in ["crates", "xtask", "examples"] {
        rust_files(&root().join(dir), &mut files);
    }
    assert!(files.len() > 20, "the walk found too few files: {files:?}");
    files
}

#[test]
fn every_rust_file_starts_with_a_module_doc() {
    let missing: Vec<_> = all_rust_files()
        .into_iter()
        .filter(|path| !std::fs::read_to_string(path).unwrap().starts_with("//!"))
        .collect();
    assert!(
        missing.is_empty(),
        "files without a leading `//!` doc: {missing:?}"
    );
}

#[test]
fn no_test_is_ignored_or_expected_to_panic() {
    let forbidden = ["#[ignore", "#[should_panic"];
    let offenders: Vec<_> = all_rust_files()
        .into_iter()
        .filter(|path| path.file_name().unwrap() != "tidy.rs")
        .filter(|path| {
            let text = std::fs::read_to_string(path).unwrap();
            forbidden.iter().any(|attr| text.contains(attr))
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "tests must assert today's behaviour instead: {offenders:?}"
    );
}

#[test]
fn architecture_names_every_crate() {
    let architecture = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    for entry in std::fs::read_dir(root().join("crates")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        assert!(
            architecture.contains(&name),
            "ARCHITECTURE.md does not mention {name}"
        );
    }
}

#[test]
fn the_readme_test_command_is_what_ci_runs() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    assert!(
        readme.contains("cargo xtask ci"),
        "README must name the test command"
    );
    assert!(
        ci.lines().any(|line| line.trim() == "cargo xtask ci"),
        ".ci/run must run it"
    );
}
