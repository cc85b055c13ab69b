//! Integration tests of flue-host: real workspaces on disk, a real SQLite store, the scripted
//! model.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail loudly by design"
)]
#![allow(unreachable_pub, missing_docs, reason = "test helpers are not API")]

mod app;
mod host;
mod library_example;

use std::path::Path;

use tempfile::TempDir;

/// A scratch workspace built from `(path, content)` pairs.
pub fn workspace(files: &[(&str, &str)]) -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, content) in files {
        let full = dir.path().join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, content).unwrap();
    }
    dir
}

/// A copy of examples/hello-world.
pub fn hello_world() -> TempDir {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/hello-world");
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "agents/hello.md",
        "greeting.txt",
        "AGENTS.md",
        "script.json",
        "flue.toml",
    ] {
        let to = dir.path().join(name);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(example.join(name), to).unwrap();
    }
    dir
}
