//! Skills written for other agents: their extensions of the format load with a note, near
//! misses are still errors, and a published corpus (the npm package cc-sdd, 136 `SKILL.md`
//! files for eight agents, installed under tests/peers) loads in every variant.

use std::fs;
use std::path::{Path, PathBuf};

use flue_build::{Diagnostic, Workspace};
use pretty_assertions::assert_eq;

use crate::support::{at, check_diagnostics, load, workspace};

const AGENT: (&str, &str) = (
    "agents/a.md",
    "---\nmodel: anthropic/claude-sonnet-4-6\n---\nA.",
);

const CLAUDE_SKILL: &str = "---
name: deploy
description: Deploy the app
argument-hint: <environment>
disable-model-invocation: true
user-invocable: false
allowed-tools: Read, Bash(git *)
model: sonnet
context: fork
---
Deploy to $ARGUMENTS.
";

#[test]
fn claude_code_keys_are_ignored_with_a_note_each() {
    let workspace = load(&[AGENT, (".agents/skills/deploy/SKILL.md", CLAUDE_SKILL)]);
    let note = |line, key: &str| {
        at(
            ".agents/skills/deploy/SKILL.md",
            line,
            &format!(
                "`{key}` is an extension of the skill format read by Claude Code; Flue ignores it"
            ),
        )
    };
    assert_eq!(
        workspace.notes(),
        [
            note(4, "argument-hint"),
            note(5, "disable-model-invocation"),
            note(6, "user-invocable"),
            note(8, "model"),
            note(9, "context"),
        ]
    );
    let skill = &workspace.skills["deploy"];
    assert_eq!(skill.description, "Deploy the app");
    assert_eq!(skill.body, "Deploy to $ARGUMENTS.");
}

#[test]
fn a_near_miss_of_an_extension_key_is_an_error_with_a_suggestion() {
    check_diagnostics(
        &[
            AGENT,
            (
                ".agents/skills/deploy.md",
                "---\nname: deploy\ndescription: D\nargument-hnt: x\n---\nX.",
            ),
        ],
        &[at(
            ".agents/skills/deploy.md",
            4,
            "unknown key `argument-hnt` (did you mean `argument-hint`?)",
        )],
    );
}

/// The cc-sdd package under tests/peers (`cargo xtask ci` installs it).
fn corpus() -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/peers/node_modules/cc-sdd/templates/agents");
    assert!(
        path.is_dir(),
        "{} is missing: run `bash tests/peers/install.sh` (or `cargo xtask ci`) to install the \
         test peers",
        path.display()
    );
    path
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let dest = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &dest);
        } else {
            fs::copy(entry.path(), dest).unwrap();
        }
    }
}

#[test]
fn every_variant_of_a_published_skill_corpus_loads() {
    let mut variants: Vec<PathBuf> = fs::read_dir(corpus())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.join("skills").is_dir())
        .collect();
    variants.sort();
    assert_eq!(variants.len(), 8, "{variants:?}");
    let mut n_skills = 0;
    let mut claude_notes: Vec<Diagnostic> = Vec::new();
    for variant in &variants {
        let dir = workspace(&[AGENT]);
        copy_dir(&variant.join("skills"), &dir.path().join(".agents/skills"));
        let loaded = match Workspace::load(dir.path()) {
            Ok(loaded) => loaded,
            Err(diagnostics) => panic!("{}:\n{diagnostics}", variant.display()),
        };
        assert_eq!(loaded.skills.len(), 17, "{}", variant.display());
        n_skills += loaded.skills.len();
        if variant.ends_with("claude-code-skills") {
            claude_notes = loaded.notes();
        } else {
            assert_eq!(loaded.notes(), [], "{}", variant.display());
        }
    }
    assert_eq!(n_skills, 136);
    let keys: Vec<&str> = claude_notes
        .iter()
        .map(|note| note.message.split('`').nth(1).unwrap())
        .collect();
    let count = |key| keys.iter().filter(|found| **found == key).count();
    assert_eq!(
        (
            count("argument-hint"),
            count("disable-model-invocation"),
            keys.len()
        ),
        (13, 2, 15)
    );
}
