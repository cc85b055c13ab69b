//! `cargo xtask dist` packages a binary, and `install.sh` installs that archive only when its
//! checksum matches: the chain a user's install goes through, minus the release build (a shell
//! script stands in for `flue`). The system's tar, sha256sum and sh (dash on Debian) read what
//! dist wrote.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::{DistOptions, dist};

const TARGET: &str = "x86_64-unknown-linux-gnu";

/// A stand-in `flue` that knows `--version`, and `completions SHELL` and `man` when `full`.
fn fake_flue(dir: &Path, full: bool) -> PathBuf {
    let generators = if full {
        "  completions) echo \"# $2 completions for flue\" ;;\n  man) printf '.TH FLUE 1\\n' ;;\n"
    } else {
        ""
    };
    let script = format!(
        "#!/bin/sh\ncase \"$1\" in\n  --version) echo 'flue 9.9.9' ;;\n{generators}  *) echo \"error: unrecognized subcommand '$1'\" >&2; exit 2 ;;\nesac\n"
    );
    let path = dir.join("fake-flue");
    std::fs::write(&path, script).unwrap();
    path
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Packages `binary` into `out`; returns the archive's path.
fn package(binary: &Path, out: &Path) -> PathBuf {
    let options = DistOptions {
        target: Some(TARGET.to_owned()),
        profile: "dist".to_owned(),
        binary: Some(binary.to_path_buf()),
        out: Some(out.to_path_buf()),
    };
    dist(&root(), &options).unwrap();
    out.join(format!("flue-{TARGET}.tar.gz"))
}

fn entries(archive: &Path) -> Vec<String> {
    let output = Command::new("tar")
        .arg("-tzf")
        .arg(archive)
        .output()
        .unwrap();
    assert!(output.status.success(), "tar -tzf failed: {output:?}");
    let mut names: Vec<String> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| line.trim_end_matches('/').to_owned())
        .collect();
    names.sort();
    names
}

fn install(out: &Path, dir: &Path) -> Output {
    Command::new("sh")
        .arg(root().join("install.sh"))
        .arg("--base-url")
        .arg(format!("file://{}", out.display()))
        .args(["--target", TARGET, "--dir"])
        .arg(dir)
        .output()
        .unwrap()
}

#[test]
fn the_archive_holds_the_binary_docs_completions_and_man_page_and_installs() {
    let tmp = tempfile::tempdir().unwrap();
    let archive = package(&fake_flue(tmp.path(), true), &tmp.path().join("out"));

    let folder = format!("flue-{TARGET}");
    let expected: Vec<String> = [
        "",
        "/LICENSE-APACHE",
        "/LICENSE-MIT",
        "/README.md",
        "/completions",
        "/completions/_flue",
        "/completions/_flue.ps1",
        "/completions/flue.bash",
        "/completions/flue.fish",
        "/flue",
        "/man",
        "/man/flue.1",
    ]
    .iter()
    .map(|entry| format!("{folder}{entry}"))
    .collect();
    pretty_assertions::assert_eq!(entries(&archive), expected);

    let check = Command::new("sha256sum")
        .args(["-c", &format!("flue-{TARGET}.tar.gz.sha256")])
        .current_dir(tmp.path().join("out"))
        .output()
        .unwrap();
    assert!(check.status.success(), "sha256sum -c refused: {check:?}");

    let bin = tmp.path().join("bin");
    let output = install(&tmp.path().join("out"), &bin);
    assert!(output.status.success(), "install.sh failed: {output:?}");
    let version = Command::new(bin.join("flue"))
        .arg("--version")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&version.stdout), "flue 9.9.9\n");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "installed flue 9.9.9 to {}",
            bin.join("flue").display()
        )),
        "{stderr}"
    );
}

#[test]
fn a_binary_without_completions_or_man_page_is_packaged_without_them() {
    let tmp = tempfile::tempdir().unwrap();
    let archive = package(&fake_flue(tmp.path(), false), &tmp.path().join("out"));

    let folder = format!("flue-{TARGET}");
    let expected: Vec<String> = ["", "/LICENSE-APACHE", "/LICENSE-MIT", "/README.md", "/flue"]
        .iter()
        .map(|entry| format!("{folder}{entry}"))
        .collect();
    pretty_assertions::assert_eq!(entries(&archive), expected);
}

#[test]
fn install_refuses_an_archive_whose_checksum_does_not_match() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let archive = package(&fake_flue(tmp.path(), true), &out);
    // A corrupted or substituted download: the same archive with one byte more.
    let mut bytes = std::fs::read(&archive).unwrap();
    bytes.push(0);
    std::fs::write(&archive, bytes).unwrap();

    let bin = tmp.path().join("bin");
    let output = install(&out, &bin);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("checksum mismatch for flue-{TARGET}.tar.gz"))
            && stderr.contains("nothing was installed"),
        "{stderr}"
    );
    assert!(!bin.join("flue").exists());
}
