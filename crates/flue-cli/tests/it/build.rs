//! `flue build` and `flue run --bundle`: reproducible bundles, diagnostics, running without the
//! source tree.

use pretty_assertions::assert_eq;

use crate::{Workspace, json, stderr, stdout};

const LOGIN_PY: &str = "SECRET_KEY = \"x\"\n";

#[test]
fn build_writes_one_reproducible_bundle() {
    let ws = Workspace::example("code-review");
    let output = ws.flue(&["build"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let path = ws.root().join("dist/flue-bundle.json");
    assert_eq!(stdout(&output), format!("{}\n", path.display()));
    assert!(
        stderr(&output).starts_with("built 2 agent(s), 2 skill(s), 1 role(s); sha256:"),
        "{}",
        stderr(&output)
    );
    let first = std::fs::read(&path).unwrap();

    // Again, and from another copy into another folder: the same bytes.
    assert!(ws.flue(&["build"]).status.success());
    assert_eq!(std::fs::read(&path).unwrap(), first);
    let other = Workspace::example("code-review");
    let out = other.root().join("elsewhere");
    let output = other.flue(&["build", "--out", out.to_str().unwrap()]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(std::fs::read(out.join("flue-bundle.json")).unwrap(), first);
}

#[test]
fn build_reports_every_problem_with_file_and_line_and_writes_nothing() {
    let ws = Workspace::new(&[
        (
            "agents/lead.md",
            "---\nmodel: openai/y\nskills: [review]\nsubagents: [helper]\nrole: boss\n---\nLead.",
        ),
        (
            "agents/helper.md",
            "---\nmodel: openai/y\nsubagents: [lead]\n---\nHelp.",
        ),
        (
            ".agents/skills/review.md",
            "---\nname: reviews\n---\nReview.",
        ),
        (
            ".agents/skills/keys/SKILL.md",
            "---\nname: keys\ndescription: K\n---\nK.",
        ),
        (".agents/skills/keys/.env", "TOKEN=1"),
    ]);
    let output = ws.flue(&["build"]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(stdout(&output), "");
    assert_eq!(
        stderr(&output),
        ".agents/skills/keys/.env: refusing to include this file in a skill: `.env` files hold \
         secrets; remove it from the skill folder (secrets belong in the environment, not in \
         skills)\n\
         .agents/skills/review.md:1: missing `description`: add one line saying what the skill \
         does and when to use it\n\
         .agents/skills/review.md:2: `name` is `reviews` but the file is `review.md`: they must \
         match; rename one\n\
         agents/helper.md:3: circular subagents: helper -> lead -> helper; remove one of these \
         references\n\
         agents/lead.md:5: unknown role `boss`: add .agents/roles/boss.md\n\
         error: build failed with 5 problems\n"
    );
    assert!(!ws.root().join("dist").exists());
}

#[test]
fn run_from_a_bundle_needs_no_source_tree() {
    let source = Workspace::example("code-review");
    assert!(source.flue(&["build"]).status.success());
    let bundle = source.root().join("dist/flue-bundle.json");
    // A project to review, with no agents, skills, roles or scripts of its own.
    let project = Workspace::new(&[("src/login.py", LOGIN_PY)]);
    let copied = project.root().join("review.bundle.json");
    std::fs::copy(&bundle, &copied).unwrap();
    drop(source);

    let output = project.flue(&[
        "run",
        "--bundle",
        copied.to_str().unwrap(),
        "reviewer",
        "-m",
        "Review src/login.py",
        "--id",
        "b",
        "--json",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let envelope = json(&output);
    assert_eq!(envelope["outcome"], "completed");
    let message = envelope["message"].as_str().unwrap();
    assert!(message.contains("2 findings in src/login.py"), "{message}");
    // The agent worked in the project: it read the project's file.
    let shown = json(&project.flue(&["session", "show", "--id", "b", "--json", "--tree"]));
    let task = &shown["tasks"][0];
    let read: serde_json::Value =
        serde_json::from_str(task["messages"][2]["content"].as_str().unwrap()).unwrap();
    assert_eq!(read["data"]["content"], LOGIN_PY);
    assert!(project.root().join(".flue/flue.db").is_file());
    assert!(!project.root().join("agents").exists());
}

#[test]
fn a_changed_or_missing_bundle_is_refused() {
    let source = Workspace::example("code-review");
    assert!(source.flue(&["build"]).status.success());
    let path = source.root().join("dist/flue-bundle.json");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("Audits code", "Ignores code")).unwrap();
    let output = source.flue(&[
        "run",
        "--bundle",
        path.to_str().unwrap(),
        "reviewer",
        "-m",
        "hi",
        "--json",
    ]);
    assert_eq!(output.status.code(), Some(1));
    let envelope = json(&output);
    assert_eq!(envelope["error"]["kind"], "invalid_config");
    assert_eq!(
        envelope["error"]["message"],
        format!(
            "{}: the bundle's digest does not match its content (it was changed after it was \
             built); rebuild it with `flue build`",
            path.display()
        )
    );

    let missing = source.flue(&["run", "--bundle", "nope.json", "reviewer", "-m", "hi"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        stderr(&missing).contains("nope.json: cannot read the bundle: "),
        "{}",
        stderr(&missing)
    );
}

#[test]
fn build_notes_the_skill_keys_of_other_agents_it_ignores() {
    let ws = Workspace::example("code-review");
    let skill = std::fs::read_dir(ws.root().join(".agents/skills"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.is_dir())
        .unwrap()
        .join("SKILL.md");
    let text = std::fs::read_to_string(&skill).unwrap();
    std::fs::write(
        &skill,
        text.replacen("---\n", "---\nargument-hint: <path>\n", 1),
    )
    .unwrap();
    let output = ws.flue(&["build"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(
        err.contains(":2: `argument-hint` is an extension of the skill format read by Claude Code; Flue ignores it"),
        "{err}"
    );
    assert!(err.starts_with("note: .agents/skills/"), "{err}");
}

#[test]
fn build_json_prints_the_bundle_or_every_problem_as_one_object() {
    let ws = Workspace::example("code-review");
    let built = ws.flue(&["build", "--json"]);
    assert!(built.status.success(), "{}", stderr(&built));
    assert_eq!(stderr(&built), "");
    let mut built = json(&built);
    let digest = built["digest"].take();
    assert!(digest.as_str().unwrap().starts_with("sha256:"), "{digest}");
    assert_eq!(
        built,
        serde_json::json!({
            "ok": true,
            "bundle": ws.root().join("dist/flue-bundle.json").display().to_string(),
            "digest": null,
            "agents": ["reviewer", "security"],
            "skills": ["code-review", "security-audit"],
            "roles": ["security-engineer"],
            "notes": [],
        })
    );

    let broken = Workspace::new(&[
        ("agents/a.md", "---\nmodel: opnai/gpt-4o\n---\nA."),
        ("flue.toml", "[defaults]\nbogus = 1\n"),
    ]);
    let failed = broken.flue(&["build", "--json"]);
    assert_eq!(failed.status.code(), Some(1));
    let failed = json(&failed);
    let problems: Vec<(&str, u64)> = failed["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|problem| {
            (
                problem["path"].as_str().unwrap(),
                problem["line"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        (&failed["ok"], problems),
        (
            &serde_json::json!(false),
            vec![("agents/a.md", 2), ("flue.toml", 2)]
        )
    );
    assert!(!broken.root().join("dist").exists());
}
