//! Bundles: reproducible bytes, what they hold, reading them back, and tamper checks.

use std::path::Path;

use flue_build::{BUNDLE_FILE_NAME, Bundle, Diagnostic, Workspace};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::support::{file, skill_md, workspace, write_files};

const REVIEWER: &str = "---\ndescription: Reviews code\nmodel: scripted/script.json\n\
                        skills: [review]\nsubagents: [security]\nrole: terse\n---\nReview.";
const SECURITY: &str = "---\ndescription: Finds holes\nmodel: scripted/script.json\n---\nAudit.";

/// A workspace with an agent, a subagent, a folder skill with a binary resource, a role, a
/// script, and files a bundle must leave out.
fn files() -> Vec<(&'static str, String)> {
    vec![
        ("flue.toml", "[defaults]\nthinking = \"low\"\n".to_owned()),
        ("AGENTS.md", "Be kind.".to_owned()),
        ("agents/reviewer.md", REVIEWER.to_owned()),
        ("agents/security.md", SECURITY.to_owned()),
        (".agents/skills/review/SKILL.md", skill_md("review")),
        (".agents/skills/review/checklist.md", "- tests".to_owned()),
        (
            ".agents/roles/terse.md",
            "---\ndescription: Short answers\n---\nBe terse.".to_owned(),
        ),
        (
            "script.json",
            r#"{"rules": [{"reply": {"text": "ok"}}]}"#.to_owned(),
        ),
        (".env", "SECRET=1".to_owned()),
        ("src/main.rs", "fn main() {}".to_owned()),
        (".flue/flue.db", "not bundled".to_owned()),
    ]
}

fn make_workspace() -> tempfile::TempDir {
    let files = files();
    let pairs: Vec<(&str, &str)> = files.iter().map(|(p, c)| (*p, c.as_str())).collect();
    let dir = workspace(&pairs);
    std::fs::write(
        dir.path().join(".agents/skills/review/logo.png"),
        [0x89, b'P', b'N', b'G', 0xff],
    )
    .unwrap();
    dir
}

fn parse(bundle: &Bundle) -> Value {
    serde_json::from_slice(bundle.as_bytes()).unwrap()
}

/// Re-encodes a bundle after `edit`, with a correct digest (as a careful forger would).
fn forge(bundle: &Bundle, edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut value = parse(bundle);
    edit(&mut value);
    value["digest"] = json!("");
    let digest = hex::encode(Sha256::digest(serde_json::to_vec(&value).unwrap()));
    value["digest"] = json!(format!("sha256:{digest}"));
    serde_json::to_vec_pretty(&value).unwrap()
}

fn errors(result: Result<Bundle, flue_build::Diagnostics>) -> Vec<Diagnostic> {
    result.unwrap_err().into_vec()
}

#[test]
fn the_same_inputs_give_identical_bytes() {
    let first = make_workspace();
    let second = make_workspace();
    let a = Bundle::build(first.path()).unwrap();
    let b = Bundle::build(second.path()).unwrap();
    let again = Bundle::build(first.path()).unwrap();
    assert_eq!(a.as_bytes(), b.as_bytes());
    assert_eq!(a.as_bytes(), again.as_bytes());
    assert_eq!(a.digest(), b.digest());
    write_files(
        second.path(),
        &[("agents/security.md", "---\nmodel: openai/b\n---\nChanged.")],
    );
    let changed = Bundle::build(second.path()).unwrap();
    assert!(changed.as_bytes() != a.as_bytes());
    assert!(changed.digest() != a.digest());
}

#[test]
fn a_bundle_holds_the_workspace_files_scripts_index_and_hashes() {
    let dir = make_workspace();
    let bundle = Bundle::build(dir.path()).unwrap();
    let value = parse(&bundle);
    let keys: Vec<&String> = value.as_object().unwrap().keys().collect();
    let mut sorted_keys = keys.clone();
    sorted_keys.sort();
    assert_eq!(
        sorted_keys,
        [
            "agents", "config", "digest", "files", "format", "roles", "scripts", "skills",
            "version"
        ]
    );
    assert_eq!(
        (&value["format"], &value["version"]),
        (&json!("flue-bundle"), &json!(1))
    );
    // Only what the workspace is made of: no .env, no sources, no store.
    let paths: Vec<&String> = value["files"].as_object().unwrap().keys().collect();
    assert_eq!(
        paths,
        [
            ".agents/roles/terse.md",
            ".agents/skills/review/SKILL.md",
            ".agents/skills/review/checklist.md",
            ".agents/skills/review/logo.png",
            "AGENTS.md",
            "agents/reviewer.md",
            "agents/security.md",
            "flue.toml",
        ]
    );
    assert_eq!(
        value["files"]["agents/security.md"],
        json!({
            "sha256": hex::encode(Sha256::digest(SECURITY.as_bytes())),
            "text": SECURITY,
        })
    );
    assert_eq!(
        value["files"][".agents/skills/review/logo.png"]["hex"],
        json!("89504e47ff")
    );
    assert_eq!(
        value["scripts"]["script.json"]["text"],
        json!(r#"{"rules": [{"reply": {"text": "ok"}}]}"#)
    );
    assert_eq!(
        value["agents"]["reviewer"],
        json!({
            "file": "agents/reviewer.md",
            "description": "Reviews code",
            "model": "scripted/script.json",
            "thinking": "low",
            "tools": [],
            "skills": ["review"],
            "subagents": ["security"],
            "role": "terse",
        })
    );
    assert_eq!(
        value["skills"]["review"],
        json!({
            "file": ".agents/skills/review/SKILL.md",
            "description": "The review skill",
            "resources": ["checklist.md", "logo.png"],
        })
    );
    assert_eq!(
        value["roles"],
        json!({"terse": {"file": ".agents/roles/terse.md", "description": "Short answers"}})
    );
    assert_eq!(value["config"], json!({"defaults": {"thinking": "low"}}));
}

#[test]
fn a_bundle_reads_back_into_the_same_workspace_without_the_source_tree() {
    let dir = make_workspace();
    let bundle = Bundle::build(dir.path()).unwrap();
    let out = tempfile::tempdir().unwrap();
    let path = bundle.write(&out.path().join("dist")).unwrap();
    assert_eq!(path, out.path().join("dist").join(BUNDLE_FILE_NAME));
    let source = Workspace::load(dir.path()).unwrap();
    drop(dir);

    let read = Bundle::read(&path).unwrap();
    assert_eq!(read.as_bytes(), bundle.as_bytes());
    let Workspace {
        root,
        config,
        context,
        agents,
        skills,
        roles,
    } = read.workspace().clone();
    assert_eq!(root, path);
    assert_eq!(
        (config, context, agents, skills, roles),
        (
            source.config,
            source.context,
            source.agents,
            source.skills,
            source.roles
        )
    );
    assert_eq!(
        read.scripts().keys().collect::<Vec<_>>(),
        vec!["script.json"]
    );
    let config = read.workspace().agent_config("reviewer").unwrap();
    assert_eq!(config.subagents[0].name.as_deref(), Some("security"));
}

#[test]
fn a_changed_bundle_is_refused() {
    let dir = make_workspace();
    let bundle = Bundle::build(dir.path()).unwrap();
    let shown = "dist/flue-bundle.json";
    let rebuild = "rebuild it with `flue build`";

    let mut edited = parse(&bundle);
    edited["files"]["AGENTS.md"]["text"] = json!("Be mean.");
    assert_eq!(
        errors(Bundle::from_slice(
            &serde_json::to_vec(&edited).unwrap(),
            shown
        )),
        [file(
            shown,
            &format!(
                "the bundle's digest does not match its content (it was changed after it was \
                 built); {rebuild}"
            )
        )]
    );

    let forged = forge(&bundle, |value| {
        value["files"]["AGENTS.md"]["text"] = json!("Be mean.");
    });
    assert_eq!(
        errors(Bundle::from_slice(&forged, shown)),
        [file(
            shown,
            &format!(
                "file `AGENTS.md` does not match its sha256 (the bundle was changed after it \
                 was built); {rebuild}"
            )
        )]
    );

    let forged = forge(&bundle, |value| {
        value["agents"]["reviewer"]["model"] = json!("anthropic/claude-opus-4-1");
    });
    assert_eq!(
        errors(Bundle::from_slice(&forged, shown)),
        [file(
            shown,
            &format!("the bundle's index does not match its files; {rebuild}")
        )]
    );

    let forged = forge(&bundle, |value| value["version"] = json!(2));
    assert_eq!(
        errors(Bundle::from_slice(&forged, shown)),
        [file(
            shown,
            "bundle format version 2 is not supported (this flue reads version 1); rebuild it \
             with this version of flue"
        )]
    );

    let not_json = errors(Bundle::from_slice(b"{\"rules\": []}", shown));
    assert!(
        not_json[0].message.starts_with("not a flue bundle (")
            && not_json[0].message.ends_with("build one with `flue build`"),
        "{not_json:?}"
    );
}

#[test]
fn a_packed_workspace_is_validated_again_when_read() {
    let dir = make_workspace();
    let bundle = Bundle::build(dir.path()).unwrap();
    let bad = "---\nmodel: openai/y\nskills: [ghost]\n---\nBad.";
    let forged = forge(&bundle, |value| {
        value["files"]["agents/security.md"] = json!({
            "sha256": hex::encode(Sha256::digest(bad.as_bytes())),
            "text": bad,
        });
    });
    assert_eq!(
        errors(Bundle::from_slice(&forged, "b.json")),
        [Diagnostic::at(
            "agents/security.md",
            3,
            "unknown skill `ghost`: add .agents/skills/ghost.md or .agents/skills/ghost/SKILL.md"
        )]
    );
}

#[test]
fn invalid_workspaces_and_missing_scripts_do_not_build() {
    let broken = workspace(&[(
        "agents/a.md",
        "---\nmodel: openai/y\nskills: [ghost]\n---\nA.",
    )]);
    assert_eq!(
        errors(Bundle::build(broken.path())),
        [Diagnostic::at(
            "agents/a.md",
            3,
            "unknown skill `ghost`: add .agents/skills/ghost.md or .agents/skills/ghost/SKILL.md"
        )]
    );
    let scripts = workspace(&[
        ("agents/a.md", "---\nmodel: scripted/missing.json\n---\nA."),
        (
            "agents/b.md",
            "---\nmodel: scripted/../outside.json\n---\nB.",
        ),
    ]);
    let problems = errors(Bundle::build(scripts.path()));
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[0]
            .message
            .starts_with("model `scripted/missing.json`: cannot read the script missing.json: "),
        "{problems:?}"
    );
    assert_eq!(
        problems[1],
        file(
            "agents/b.md",
            "model `scripted/../outside.json`: script paths must stay inside the workspace (no \
             absolute paths or `..`)"
        )
    );
}

#[test]
fn building_leaves_earlier_output_out_of_the_next_bundle() {
    let dir = make_workspace();
    let first = Bundle::build(dir.path()).unwrap();
    first.write(&dir.path().join("dist")).unwrap();
    let second = Bundle::build(dir.path()).unwrap();
    assert_eq!(first.as_bytes(), second.as_bytes());
    assert!(Path::new(&dir.path().join("dist").join(BUNDLE_FILE_NAME)).is_file());
}

/// A bundle is someone else's data: a forged one with a seed outside the workspace, or an
/// alias bomb, is refused when read, naming the file, line and field.
#[test]
fn a_forged_bundle_with_a_hostile_agent_is_refused_when_read() {
    let dir = make_workspace();
    let bundle = Bundle::build(dir.path()).unwrap();
    let seeded =
        "---\nmodel: scripted/script.json\nsandbox: { kind: virtual, seed: /home }\n---\nA.";
    let bomb = "---\nmodel: scripted/script.json\na: &a [x, x, x, x, x, x, x, x, x, x]\n\
                b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n\
                c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n\
                d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n---\nA.";
    for (text, line, needle) in [
        (
            seeded,
            3,
            "`sandbox.seed` must be a directory inside the workspace",
        ),
        (bomb, 6, "frontmatter expands to more than 10000 values"),
    ] {
        let forged = forge(&bundle, |value| {
            value["files"]["agents/security.md"] = json!({
                "sha256": hex::encode(Sha256::digest(text.as_bytes())),
                "text": text,
            });
        });
        let problems = errors(Bundle::from_slice(&forged, "b.json"));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(
            (problems[0].path.as_str(), problems[0].line),
            ("agents/security.md", Some(line))
        );
        assert!(problems[0].message.starts_with(needle), "{problems:?}");
    }
}
