//! Skills under `.agents/skills/`: the Agent Skills frontmatter rules, resources, duplicates.

use std::collections::BTreeMap;

use flue_build::SkillFile;
use pretty_assertions::assert_eq;

use crate::support::{at, check_diagnostics, file, load, skill_md, workspace};

const AGENT: (&str, &str) = ("agents/a.md", "---\nmodel: openai/y\n---\nA.");

#[test]
fn flat_and_folder_skills_load_with_every_field_and_their_resources() {
    let workspace = load(&[
        AGENT,
        (
            ".agents/skills/pdf-tools/SKILL.md",
            "---\nname: pdf-tools\ndescription: Extracts text from PDFs\nlicense: MIT\n\
             compatibility: needs poppler\nmetadata:\n  author: team\n  version: 2\n\
             allowed-tools: bash read_file\n---\n\n# PDF tools\nUse pdftotext.\n",
        ),
        (
            ".agents/skills/pdf-tools/reference/usage.md",
            "pdftotext in.pdf out.txt",
        ),
        (".agents/skills/pdf-tools/.hidden-notes", "kept"),
        (
            ".agents/skills/triage.md",
            "---\nname: triage\ndescription: Sorts issues\nallowed-tools: [bash]\n---\nLabel.",
        ),
        (".agents/skills/notes.txt", "not a skill"),
        (
            ".agents/skills/empty-folder/README.md",
            "no SKILL.md: not a skill",
        ),
    ]);
    assert_eq!(
        workspace.skills,
        BTreeMap::from([
            (
                "pdf-tools".to_owned(),
                SkillFile {
                    name: "pdf-tools".to_owned(),
                    path: ".agents/skills/pdf-tools/SKILL.md".to_owned(),
                    description: "Extracts text from PDFs".to_owned(),
                    license: Some("MIT".to_owned()),
                    compatibility: Some("needs poppler".to_owned()),
                    metadata: BTreeMap::from([
                        ("author".to_owned(), "team".to_owned()),
                        ("version".to_owned(), "2".to_owned()),
                    ]),
                    allowed_tools: vec!["bash".to_owned(), "read_file".to_owned()],
                    body: "# PDF tools\nUse pdftotext.".to_owned(),
                    resources: BTreeMap::from([
                        (".hidden-notes".to_owned(), b"kept".to_vec()),
                        (
                            "reference/usage.md".to_owned(),
                            b"pdftotext in.pdf out.txt".to_vec()
                        ),
                    ]),
                    notes: Vec::new(),
                    result: None,
                },
            ),
            (
                "triage".to_owned(),
                SkillFile {
                    name: "triage".to_owned(),
                    path: ".agents/skills/triage.md".to_owned(),
                    description: "Sorts issues".to_owned(),
                    allowed_tools: vec!["bash".to_owned()],
                    body: "Label.".to_owned(),
                    ..SkillFile::default()
                },
            ),
        ])
    );
    let skill = workspace.skills["pdf-tools"].to_skill();
    assert_eq!(skill.body.as_deref(), Some("# PDF tools\nUse pdftotext."));
    assert_eq!(skill.resources.len(), 2);
}

#[test]
fn names_follow_the_agent_skills_rules() {
    let long = "a".repeat(65);
    let long_file = format!(".agents/skills/{long}.md");
    let long_text = format!("---\nname: {long}\ndescription: Long\n---\nX.");
    check_diagnostics(
        &[
            AGENT,
            (
                ".agents/skills/Upper.md",
                "---\nname: Upper\ndescription: U\n---\nX.",
            ),
            (
                ".agents/skills/-lead.md",
                "---\nname: -lead\ndescription: L\n---\nX.",
            ),
            (
                ".agents/skills/double--dash.md",
                "---\nname: double--dash\ndescription: D\n---\nX.",
            ),
            (
                ".agents/skills/under_score.md",
                "---\nname: under_score\ndescription: U\n---\nX.",
            ),
            (&long_file, &long_text),
        ],
        &[
            file(
                ".agents/skills/-lead.md",
                "invalid skill name `-lead`: it must not start or end with `-`; rename the file",
            ),
            file(
                ".agents/skills/Upper.md",
                "invalid skill name `Upper`: it may only contain lowercase letters a-z, digits \
                 and `-`; rename the file",
            ),
            file(
                &long_file,
                &format!(
                    "invalid skill name `{long}`: it is longer than 64 characters; rename the file"
                ),
            ),
            file(
                ".agents/skills/double--dash.md",
                "invalid skill name `double--dash`: it must not contain `--`; rename the file",
            ),
            file(
                ".agents/skills/under_score.md",
                "invalid skill name `under_score`: it may only contain lowercase letters a-z, \
                 digits and `-`; rename the file",
            ),
        ],
    );
}

#[test]
fn the_name_must_match_the_folder_or_the_file_and_required_keys_must_be_there() {
    check_diagnostics(
        &[
            AGENT,
            (
                ".agents/skills/review/SKILL.md",
                "---\ndescription: Reviews\nname: reviewer\n---\nX.",
            ),
            (
                ".agents/skills/triage.md",
                "---\nname: sort\ndescription: Sorts\n---\nX.",
            ),
            (".agents/skills/bare.md", "Just a body, no frontmatter."),
            (".agents/skills/nameless.md", "---\ndescription: D\n---\nX."),
        ],
        &[
            at(
                ".agents/skills/bare.md",
                1,
                "missing `name`: add `name: bare` to the frontmatter",
            ),
            at(
                ".agents/skills/bare.md",
                1,
                "missing `description`: add one line saying what the skill does and when to \
                 use it",
            ),
            at(
                ".agents/skills/nameless.md",
                1,
                "missing `name`: add `name: nameless` to the frontmatter",
            ),
            at(
                ".agents/skills/review/SKILL.md",
                3,
                "`name` is `reviewer` but the folder is `review`: they must match; rename one",
            ),
            at(
                ".agents/skills/triage.md",
                2,
                "`name` is `sort` but the file is `triage.md`: they must match; rename one",
            ),
        ],
    );
}

#[test]
fn lengths_types_and_unknown_keys_are_checked() {
    let description = "d".repeat(1025);
    let compatibility = "c".repeat(501);
    let text = format!(
        "---\nname: big\ndescription: {description}\ncompatibility: {compatibility}\n\
         metadata: [a]\nallowed-tools: 3\nlicence: MIT\ncolour: 2\n---\nX."
    );
    check_diagnostics(
        &[
            AGENT,
            (".agents/skills/big.md", &text),
            (
                ".agents/skills/blank.md",
                "---\nname: blank\ndescription: ''\n---\nX.",
            ),
        ],
        &[
            at(
                ".agents/skills/big.md",
                3,
                "`description` is 1025 characters long; at most 1024 are allowed",
            ),
            at(
                ".agents/skills/big.md",
                4,
                "`compatibility` is 501 characters long; at most 500 are allowed",
            ),
            at(
                ".agents/skills/big.md",
                5,
                "`metadata` must be a mapping of names to strings, got a list",
            ),
            at(
                ".agents/skills/big.md",
                6,
                "`allowed-tools` must be a space-separated string or a list of tool names, got 3",
            ),
            at(
                ".agents/skills/big.md",
                7,
                "unknown key `licence` (did you mean `license`?)",
            ),
            at(
                ".agents/skills/big.md",
                8,
                "unknown key `colour` (known keys: name, description, license, compatibility, \
                 metadata, allowed-tools, result)",
            ),
            at(
                ".agents/skills/blank.md",
                3,
                "`description` must not be empty",
            ),
        ],
    );
}

#[test]
fn a_skill_defined_twice_and_broken_frontmatter_are_reported_once() {
    check_diagnostics(
        &[
            (
                "agents/a.md",
                "---\nmodel: openai/y\nskills: [review, broken, triage]\n---\nA.",
            ),
            (".agents/skills/review.md", &skill_md("review")),
            (".agents/skills/review/SKILL.md", &skill_md("review")),
            (".agents/skills/broken.md", "---\nname: [\n---\nX."),
            (".agents/skills/empty.md", "  \n"),
        ],
        &[
            at(
                ".agents/skills/broken.md",
                2,
                "invalid yaml in frontmatter: while parsing a node, did not find expected node \
                 content",
            ),
            file(
                ".agents/skills/empty.md",
                "skill file is empty: add frontmatter with `name: empty` and a `description`, \
                 then the instructions",
            ),
            file(
                ".agents/skills/review.md",
                "skill `review` is defined twice, here and in .agents/skills/review/SKILL.md: \
                 keep one",
            ),
            // Only `triage` is reported as missing: the others exist, if broken.
            at(
                "agents/a.md",
                3,
                "unknown skill `triage`: add .agents/skills/triage.md or \
                 .agents/skills/triage/SKILL.md",
            ),
        ],
    );
}

#[test]
fn sensitive_resource_files_are_refused() {
    let refused = "refusing to include this file in a skill";
    let fix = "remove it from the skill folder (secrets belong in the environment, not in skills)";
    check_diagnostics(
        &[
            AGENT,
            (".agents/skills/deploy/SKILL.md", &skill_md("deploy")),
            (".agents/skills/deploy/.env", "TOKEN=1"),
            (".agents/skills/deploy/.env.production", "TOKEN=2"),
            (".agents/skills/deploy/keys/id_ed25519", "key"),
            (".agents/skills/deploy/tls/server.pem", "cert"),
            (".agents/skills/deploy/credentials.json", "{}"),
            (
                ".agents/skills/deploy/notes.txt",
                "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----\n",
            ),
            (".agents/skills/deploy/README.md", "fine"),
        ],
        &[
            file(
                ".agents/skills/deploy/.env",
                &format!("{refused}: `.env` files hold secrets; {fix}"),
            ),
            file(
                ".agents/skills/deploy/.env.production",
                &format!("{refused}: `.env` files hold secrets; {fix}"),
            ),
            file(
                ".agents/skills/deploy/credentials.json",
                &format!("{refused}: it looks like a credentials file; {fix}"),
            ),
            file(
                ".agents/skills/deploy/keys/id_ed25519",
                &format!("{refused}: it looks like a private key or certificate store; {fix}"),
            ),
            file(
                ".agents/skills/deploy/notes.txt",
                &format!("{refused}: it holds a private key; {fix}"),
            ),
            file(
                ".agents/skills/deploy/tls/server.pem",
                &format!("{refused}: it looks like a private key or certificate store; {fix}"),
            ),
        ],
    );
}

#[test]
fn symlinked_resources_are_refused() {
    let dir = workspace(&[
        AGENT,
        (".agents/skills/deploy/SKILL.md", &skill_md("deploy")),
        ("outside.txt", "secret-ish"),
    ]);
    std::os::unix::fs::symlink(
        dir.path().join("outside.txt"),
        dir.path().join(".agents/skills/deploy/link.txt"),
    )
    .unwrap();
    let diagnostics = flue_build::Workspace::load(dir.path()).unwrap_err();
    assert_eq!(
        diagnostics.into_vec(),
        vec![file(
            ".agents/skills/deploy/link.txt",
            "skill resources may not be symbolic links: copy the file into the skill folder \
             instead",
        )]
    );
}
