//! The commands the documentation shows work as written. README.md and docs/*.md mark the
//! shell blocks a reader can run offline (the scripted model needs no key) with the info
//! string `sh runnable`:
//!
//! ````markdown
//! ```sh runnable
//! flue run hello --root examples/hello-world -m "What does the greeting file say?"
//! ```
//! ````
//!
//! Each file's runnable blocks run in order, each with `bash -e -o pipefail` from the root of a
//! fresh copy of the repository, with the `flue` under test first on PATH, a fresh HOME and no
//! provider keys. `cargo run -p flue-cli -- ARGS` (what the README writes for a checkout)
//! runs that same `flue` with ARGS, through a `cargo` on PATH that runs nothing else. A block
//! that fails, or runs past its deadline, fails this test with its file and line.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The info string that marks a runnable block.
const MARKER: &str = "```sh runnable";

/// How long one block may run: far beyond what an offline command takes, on a busy machine.
const BLOCK_DEADLINE: Duration = Duration::from_secs(120);

/// Stands in for `cargo` on PATH: `cargo run -p flue-cli -- ARGS` is `flue ARGS`.
const CARGO_SHIM: &str = "#!/bin/sh
if [ \"$1 $2 $3 $4\" = \"run -p flue-cli --\" ]; then shift 4; exec flue \"$@\"; fi
echo \"the docs test runs only 'cargo run -p flue-cli -- ...', not: cargo $*\" >&2
exit 127
";

/// A runnable block: where it starts and its script.
struct Block {
    file: String,
    line: usize,
    script: String,
}

/// The runnable blocks of the markdown `text` of `file`, in order.
fn runnable_blocks(file: &str, text: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((idx, line)) = lines.next() {
        if line.trim_end() != MARKER {
            continue;
        }
        let script: Vec<&str> = lines
            .by_ref()
            .map(|(_, line)| line)
            .take_while(|line| line.trim_end() != "```")
            .collect();
        blocks.push(Block {
            file: file.to_owned(),
            line: idx + 1,
            script: script.join("\n"),
        });
    }
    blocks
}

/// The repository's root (two levels above this crate).
fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap()
        .to_path_buf()
}

/// The markdown files whose blocks run: README.md and docs/*.md.
fn documents() -> Vec<PathBuf> {
    let root = repository();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    docs.sort();
    docs.insert(0, root.join("README.md"));
    docs
}

/// Copies the repository's sources to `to`: no build output, no installed peers, no store.
fn copy_repository(from: &Path, to: &Path) {
    const SKIPPED: [&str; 6] = ["target", ".git", "node_modules", ".venv", ".flue", "dist"];
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if SKIPPED.iter().any(|skipped| name == *skipped) {
            continue;
        }
        let kind = entry.file_type().unwrap();
        let dest = to.join(&name);
        if kind.is_dir() {
            copy_repository(&entry.path(), &dest);
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path()).unwrap(), dest).unwrap();
        } else {
            std::fs::copy(entry.path(), dest).unwrap();
        }
    }
}

/// A folder to put first on PATH: `flue` (the binary under test) and the `cargo` stand-in.
fn bin_dir(scratch: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let bin = scratch.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(assert_cmd::cargo::cargo_bin("flue"), bin.join("flue")).unwrap();
    let cargo = bin.join("cargo");
    std::fs::write(&cargo, CARGO_SHIM).unwrap();
    std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// Runs `block` in `repo`; `None` when it succeeded, else what it printed and why it failed.
fn run_block(block: &Block, repo: &Path, bin: &Path, home: &Path) -> Option<String> {
    let log = home.join(format!("block-{}.log", block.line));
    let out = std::fs::File::create(&log).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut child = Command::new("bash")
        .args(["-e", "-o", "pipefail", "-c", &block.script])
        .current_dir(repo)
        .env("PATH", path)
        .env("HOME", home)
        .env_remove("FLUE_LOG")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + BLOCK_DEADLINE;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let printed = std::fs::read_to_string(&log).unwrap_or_default();
    let why = match status {
        Some(status) if status.success() => return None,
        Some(status) => format!("exited with {status}"),
        None => format!("still running after {BLOCK_DEADLINE:?}"),
    };
    Some(format!(
        "{}:{}: {why}\n--- the block:\n{}\n--- what it printed:\n{printed}",
        block.file, block.line, block.script
    ))
}

#[test]
fn the_runnable_commands_of_the_readme_and_docs_work_as_written() {
    let root = repository();
    let mut failures = Vec::new();
    let mut n_blocks = 0;
    for document in documents() {
        let text = std::fs::read_to_string(&document).unwrap();
        let name = document.strip_prefix(&root).unwrap().display().to_string();
        let blocks = runnable_blocks(&name, &text);
        if blocks.is_empty() {
            continue;
        }
        // A fresh copy per document: its blocks build on each other, not on another file's.
        let scratch = tempfile::tempdir().unwrap();
        let repo = scratch.path().join("flue");
        copy_repository(&root, &repo);
        let bin = bin_dir(scratch.path());
        let home = scratch.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        for block in &blocks {
            n_blocks += 1;
            failures.extend(run_block(block, &repo, &bin, &home));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    // The README's quickstart at least: a marker lost in an edit must not pass silently.
    assert!(n_blocks >= 5, "only {n_blocks} runnable blocks found");
}

#[test]
fn a_runnable_block_is_found_with_its_line() {
    let text =
        "# t\n```sh\nnot this\n```\n```sh runnable\nflue --version\nflue man | head -1\n```\n";
    let blocks = runnable_blocks("t.md", text);
    let found: Vec<(usize, &str)> = blocks
        .iter()
        .map(|block| (block.line, block.script.as_str()))
        .collect();
    assert_eq!(found, [(5, "flue --version\nflue man | head -1")]);
}
