//! `flue init [DIR]`: a new workspace that `flue dev` and `flue run` serve at once, offline:
//! an agent on the scripted model with its script, a skill, flue.toml, AGENTS.md, a note to
//! read and a .gitignore for `.flue/` and `.env`. Never overwrites: when any of its files
//! exists, nothing is written.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::Exit;
use crate::args::InitArgs;
use crate::terminal::escape_controls;
use crate::workspace::current_dir;

/// The scaffold: (path relative to the workspace, contents).
pub(crate) const FILES: &[(&str, &str)] = &[
    ("flue.toml", include_str!("init/template/flue.toml")),
    ("AGENTS.md", include_str!("init/template/AGENTS.md")),
    (
        "agents/assistant.md",
        include_str!("init/template/assistant.md"),
    ),
    (
        "scripts/assistant.json",
        include_str!("init/template/assistant.json"),
    ),
    (
        ".agents/skills/greeting/SKILL.md",
        include_str!("init/template/SKILL.md"),
    ),
    ("notes.md", include_str!("init/template/notes.md")),
    (".gitignore", include_str!("init/template/gitignore")),
];

/// Runs `flue init`.
pub(crate) fn init(args: &InitArgs) -> anyhow::Result<Exit> {
    let cwd = current_dir()?;
    let dir = match &args.dir {
        Some(dir) => cwd.join(dir),
        None => cwd,
    };
    let created = scaffold(&dir)?;
    // The user's own new workspace: trusted as it is, so adding a hook later asks once.
    if let Err(err) = crate::trust::trust_created(&dir) {
        eprintln!(
            "warning: cannot record trust in the new workspace: {}",
            escape_controls(&format!("{err:#}"))
        );
    }
    let shown = escape_controls(&dir.display().to_string()).into_owned();
    for path in &created {
        eprintln!("created {}", escape_controls(&path.display().to_string()));
    }
    let cd = match &args.dir {
        Some(given) => format!("cd {} && ", escape_controls(&given.display().to_string())),
        None => String::new(),
    };
    eprintln!(
        "\nA workspace with one agent, `assistant`, is ready in {shown}. It runs offline on a \
         scripted model.\n  {cd}flue dev                            # the console, with hot reload\n  \
         {cd}flue run assistant -m \"hello\"       # one message from the terminal"
    );
    Ok(Exit::Success)
}

/// Writes the scaffold into `dir` (created when missing); refuses, writing nothing, when any
/// of its files exists. Returns the files written.
pub(crate) fn scaffold(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let existing: Vec<&str> = FILES
        .iter()
        .map(|(path, _)| *path)
        .filter(|path| dir.join(path).symlink_metadata().is_ok())
        .collect();
    if !existing.is_empty() {
        bail!(
            "{} already {} in {}; `flue init` never overwrites files: pick an empty folder \
             (`flue init NEW_DIR`) or move {} away",
            existing.join(", "),
            if existing.len() == 1 {
                "exists"
            } else {
                "exist"
            },
            dir.display(),
            if existing.len() == 1 { "it" } else { "them" }
        );
    }
    let mut created = Vec::with_capacity(FILES.len());
    for (relative, contents) in FILES {
        let path = dir.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        // `create_new`: a file that appeared since the check above is not overwritten either.
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        file.write_all(contents.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
        created.push(path);
    }
    Ok(created)
}
