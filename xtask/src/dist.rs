//! `cargo xtask dist`: the release archive of the `flue` binary for one target, and its
//! SHA-256 checksum, as the release workflow uploads them and `install.sh` and `cargo binstall`
//! download them.
//!
//! The archive `flue-TARGET.tar.gz` holds one folder, `flue-TARGET/`, with the binary, README.md,
//! the license files and, when the binary can print them, its shell completions
//! (`completions/`) and man page (`man/flue.1`). The names carry no version, so that a
//! "latest release" link stays stable; `flue --version` tells the version.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use sha2::{Digest, Sha256};

/// What `cargo xtask dist` was asked for.
pub(crate) struct DistOptions {
    /// Target triple; default: the host's (`rustc -vV`).
    pub(crate) target: Option<String>,
    /// Cargo profile to build with; default `dist` (fat LTO, see Cargo.toml).
    pub(crate) profile: String,
    /// Package this binary instead of building one.
    pub(crate) binary: Option<PathBuf>,
    /// Where the archive and its checksum go; default TARGET_DIR/dist.
    pub(crate) out: Option<PathBuf>,
}

/// The files of the README and license that every archive carries, when present.
const DOCS: &[&str] = &["README.md", "LICENSE", "LICENSE-MIT", "LICENSE-APACHE"];

/// `flue completions SHELL` for each shell clap_complete knows, and the file each goes to.
const COMPLETIONS: &[(&str, &str)] = &[
    ("bash", "flue.bash"),
    ("zsh", "_flue"),
    ("fish", "flue.fish"),
    ("powershell", "_flue.ps1"),
];

/// Builds (unless given a binary) and packages; prints the archive's and checksum's paths.
pub(crate) fn dist(root: &Path, options: &DistOptions) -> anyhow::Result<()> {
    let target = match &options.target {
        Some(target) => target.clone(),
        None => host_target()?,
    };
    let binary = match &options.binary {
        Some(binary) => binary.clone(),
        None => build(root, &target, options)?,
    };
    let out = options
        .out
        .clone()
        .unwrap_or_else(|| crate::bench_providers::target_dir(root).join("dist"));
    let name = format!("flue-{target}");
    let staging = out.join(&name);
    if staging.exists() {
        std::fs::remove_dir_all(&staging)
            .with_context(|| format!("removing the old {}", staging.display()))?;
    }
    std::fs::create_dir_all(&staging).with_context(|| format!("creating {}", staging.display()))?;
    stage(root, &binary, &staging)?;
    let archive = out.join(format!("{name}.tar.gz"));
    archive_folder(&out, &name, &archive)?;
    let checksum = write_checksum(&archive)?;
    std::fs::remove_dir_all(&staging).with_context(|| format!("removing {}", staging.display()))?;
    println!("{}", archive.display());
    println!("{}", checksum.display());
    Ok(())
}

fn host_target() -> anyhow::Result<String> {
    let output = Command::new("rustc")
        .arg("-vV")
        .output()
        .context("running rustc -vV to learn the host target")?;
    let text = String::from_utf8(output.stdout)?;
    text.lines()
        .find_map(|line| line.strip_prefix("host: "))
        .map(str::to_owned)
        .context("rustc -vV printed no `host:` line; pass --target")
}

/// `cargo build --locked --profile PROFILE --target TARGET -p flue-cli`; returns the binary.
fn build(root: &Path, target: &str, options: &DistOptions) -> anyhow::Result<PathBuf> {
    crate::cargo(
        root,
        &[
            "build",
            "--locked",
            "--profile",
            &options.profile,
            "--target",
            target,
            "-p",
            "flue-cli",
        ],
        &[],
    )?;
    // The dev profile's folder is `debug`; every other profile's is its name.
    let folder = if options.profile == "dev" {
        "debug"
    } else {
        options.profile.as_str()
    };
    Ok(crate::bench_providers::target_dir(root)
        .join(target)
        .join(folder)
        .join("flue"))
}

/// Copies the binary and the docs into the staging folder, then what the binary generates.
fn stage(root: &Path, binary: &Path, staging: &Path) -> anyhow::Result<()> {
    let installed = staging.join("flue");
    std::fs::copy(binary, &installed)
        .with_context(|| format!("copying the binary {}", binary.display()))?;
    set_executable(&installed)?;
    for doc in DOCS {
        let from = root.join(doc);
        if from.is_file() {
            std::fs::copy(&from, staging.join(doc))
                .with_context(|| format!("copying {}", from.display()))?;
        }
    }
    stage_completions(&installed, staging)?;
    stage_man_page(&installed, staging)
}

#[cfg(unix)]
fn set_executable(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("making {} executable", path.display()))
}

#[cfg(not(unix))]
fn set_executable(_path: &Path) -> anyhow::Result<()> {
    Ok(())
}

/// The completions, when this binary has `flue completions` (and runs on this machine: a
/// binary cross-built for another target is packaged without them, with a warning).
fn stage_completions(flue: &Path, staging: &Path) -> anyhow::Result<()> {
    let Some(first) = generated(flue, &["completions", COMPLETIONS[0].0]) else {
        eprintln!(
            "xtask dist: {} does not print completions (`flue completions bash` failed); \
             the archive has none",
            flue.display()
        );
        return Ok(());
    };
    let folder = staging.join("completions");
    std::fs::create_dir_all(&folder)?;
    std::fs::write(folder.join(COMPLETIONS[0].1), first)?;
    for (shell, file) in &COMPLETIONS[1..] {
        let script = generated(flue, &["completions", shell])
            .with_context(|| format!("`flue completions {shell}` failed, but bash worked"))?;
        std::fs::write(folder.join(file), script)?;
    }
    Ok(())
}

/// The man page, when this binary prints one with `flue man` (roff, with its `.TH` title).
fn stage_man_page(flue: &Path, staging: &Path) -> anyhow::Result<()> {
    match generated(flue, &["man"]) {
        Some(page) if String::from_utf8_lossy(&page).contains(".TH ") => {
            let folder = staging.join("man");
            std::fs::create_dir_all(&folder)?;
            std::fs::write(folder.join("flue.1"), page)?;
        }
        _ => eprintln!(
            "xtask dist: {} does not print a man page (`flue man`); the archive has none",
            flue.display()
        ),
    }
    Ok(())
}

/// What `flue ARGS` prints on stdout, if it ran, succeeded and printed something.
fn generated(flue: &Path, args: &[&str]) -> Option<Vec<u8>> {
    let output = Command::new(flue).args(args).output().ok()?;
    (output.status.success() && !output.stdout.is_empty()).then_some(output.stdout)
}

/// `tar -czf ARCHIVE -C OUT NAME`: the system tar (GNU or BSD) takes these flags alike.
fn archive_folder(out: &Path, name: &str, archive: &Path) -> anyhow::Result<()> {
    let status = Command::new("tar")
        .arg("-czf")
        .arg(archive)
        .arg("-C")
        .arg(out)
        .arg(name)
        .status()
        .context("running tar")?;
    if !status.success() {
        bail!("tar could not write {}", archive.display());
    }
    Ok(())
}

/// Writes `ARCHIVE.sha256` in the format `sha256sum -c` and `shasum -a 256 -c` read.
fn write_checksum(archive: &Path) -> anyhow::Result<PathBuf> {
    let bytes = std::fs::read(archive).with_context(|| format!("reading {}", archive.display()))?;
    let digest = hex::encode(Sha256::digest(&bytes));
    let file_name = archive
        .file_name()
        .context("the archive path has a file name")?
        .to_string_lossy();
    let checksum = archive.with_file_name(format!("{file_name}.sha256"));
    std::fs::write(&checksum, format!("{digest}  {file_name}\n"))
        .with_context(|| format!("writing {}", checksum.display()))?;
    Ok(checksum)
}

#[cfg(test)]
mod tests;
