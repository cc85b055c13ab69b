//! Checks across files: subagents, cycles, skills, models; and many problems at once.

use flue_build::Diagnostic;

use crate::support::{at, check_diagnostics, load, skill_md};

const NO_MODEL: &str = "no model for this agent: set `model: <provider>/<model>` in its frontmatter, or `model` under [defaults] in flue.toml";

#[test]
fn a_dangling_subagent_is_reported_with_a_suggestion() {
    check_diagnostics(
        &[
            (
                "agents/lead.md",
                "---\nmodel: openai/y\nsubagents: [reviewr, ghost]\n---\nLead.",
            ),
            ("agents/reviewer.md", "---\nmodel: openai/y\n---\nReview."),
        ],
        &[
            at(
                "agents/lead.md",
                3,
                "unknown subagent `reviewr` (did you mean `reviewer`?): add agents/reviewr.md or remove it from `subagents`",
            ),
            at(
                "agents/lead.md",
                3,
                "unknown subagent `ghost`: add agents/ghost.md or remove it from `subagents`",
            ),
        ],
    );
}

#[test]
fn a_subagent_cycle_is_reported_once_naming_the_cycle() {
    check_diagnostics(
        &[
            (
                "agents/a.md",
                "---\nmodel: openai/y\nsubagents: [b]\n---\nA.",
            ),
            (
                "agents/b.md",
                "---\nmodel: openai/y\ndescription: B\nsubagents: [c]\n---\nB.",
            ),
            (
                "agents/c.md",
                "---\nmodel: openai/y\nsubagents: [a]\n---\nC.",
            ),
            (
                "agents/d.md",
                "---\nmodel: openai/y\nsubagents: [b]\n---\nD.",
            ),
        ],
        &[at(
            "agents/a.md",
            3,
            "circular subagents: a -> b -> c -> a; remove one of these references",
        )],
    );
}

#[test]
fn an_agent_that_is_its_own_subagent_is_a_cycle() {
    check_diagnostics(
        &[(
            "agents/loop.md",
            "---\nmodel: openai/y\nsubagents: [loop]\n---\nLoop.",
        )],
        &[at(
            "agents/loop.md",
            3,
            "circular subagents: loop -> loop; remove one of these references",
        )],
    );
}

#[test]
fn separate_cycles_are_each_reported() {
    check_diagnostics(
        &[
            (
                "agents/a.md",
                "---\nmodel: openai/y\nsubagents: [b]\n---\nA.",
            ),
            (
                "agents/b.md",
                "---\nmodel: openai/y\nsubagents: [a]\n---\nB.",
            ),
            (
                "agents/x.md",
                "---\nmodel: openai/y\nsubagents: [y]\n---\nX.",
            ),
            (
                "agents/y.md",
                "---\nmodel: openai/y\nsubagents: [x]\n---\nY.",
            ),
        ],
        &[
            at(
                "agents/a.md",
                3,
                "circular subagents: a -> b -> a; remove one of these references",
            ),
            at(
                "agents/x.md",
                3,
                "circular subagents: x -> y -> x; remove one of these references",
            ),
        ],
    );
}

#[test]
fn a_shared_subagent_is_not_a_cycle() {
    let workspace = load(&[
        (
            "agents/a.md",
            "---\nmodel: openai/y\nsubagents: [b, c]\n---\nA.",
        ),
        (
            "agents/b.md",
            "---\nmodel: openai/y\nsubagents: [c]\n---\nB.",
        ),
        ("agents/c.md", "---\nmodel: openai/y\n---\nC."),
    ]);
    assert_eq!(workspace.agents.len(), 3);
}

#[test]
fn a_missing_skill_is_reported() {
    check_diagnostics(
        &[
            (
                "agents/a.md",
                "---\nmodel: openai/y\nskills: [code-review, security-audit, triage]\n---\nA.",
            ),
            (".agents/skills/code-review.md", &skill_md("code-review")),
            (
                ".agents/skills/security-audit/SKILL.md",
                &skill_md("security-audit"),
            ),
            (
                ".agents/skills/triage/README.md",
                "A folder without SKILL.md is not a skill.",
            ),
        ],
        &[at(
            "agents/a.md",
            3,
            "unknown skill `triage`: add .agents/skills/triage.md or .agents/skills/triage/SKILL.md",
        )],
    );
}

#[test]
fn a_missing_model_is_reported_without_a_line() {
    check_diagnostics(
        &[("agents/a.md", "---\ndescription: No model\n---\nA.")],
        &[Diagnostic::file("agents/a.md", NO_MODEL)],
    );
}

#[test]
fn an_invalid_model_is_not_also_reported_missing() {
    check_diagnostics(
        &[("agents/a.md", "---\nmodel: 42\n---\nA.")],
        &[at("agents/a.md", 2, "`model` must be a string, got 42")],
    );
}

#[test]
fn all_problems_in_all_files_are_reported_at_once() {
    check_diagnostics(
        &[
            ("flue.toml", "[defaults]\nthinking = \"extreme\"\n"),
            (
                "agents/a.md",
                "---\nmodel: openai/y\nsubagents: [b, missing]\nthinking: hgih\n---\nA.",
            ),
            (
                "agents/b.md",
                "---\ndescription: B\nsubagents: [a]\nsandbox: cloud\n---\nB.",
            ),
            ("agents/c.md", "---\nmodel: openai/y\ntools: [\n---\nC."),
            ("agents/d.md", "---\nmodel: openai/y\n"),
        ],
        &[
            at(
                "agents/a.md",
                3,
                "unknown subagent `missing`: add agents/missing.md or remove it from `subagents`",
            ),
            at(
                "agents/a.md",
                3,
                "circular subagents: a -> b -> a; remove one of these references",
            ),
            at(
                "agents/a.md",
                4,
                "invalid thinking level `hgih`: expected one of off, minimal, low, medium, high, xhigh (did you mean `high`?)",
            ),
            Diagnostic::file("agents/b.md", NO_MODEL),
            at(
                "agents/b.md",
                4,
                "invalid sandbox `cloud`: expected one of virtual, local, isolated, daytona",
            ),
            at(
                "agents/c.md",
                3,
                "invalid yaml in frontmatter: while parsing a node, did not find expected node content",
            ),
            at(
                "agents/d.md",
                1,
                "frontmatter is not closed: add a `---` line after the last key",
            ),
            at(
                "flue.toml",
                2,
                "invalid thinking level `extreme`: expected one of off, minimal, low, medium, high, xhigh",
            ),
        ],
    );
}

#[test]
fn a_broken_agent_still_exists_for_references() {
    // b and c are broken, but a's references to them are not reported as dangling on top.
    check_diagnostics(
        &[
            (
                "agents/a.md",
                "---\nmodel: openai/y\nsubagents: [b, c]\n---\nA.",
            ),
            ("agents/b.md", "---\nmodel: openai/y\nmax_turns: 0\n---\nB."),
            ("agents/c.md", "---\nmodel: openai/y\n"),
        ],
        &[
            at(
                "agents/b.md",
                3,
                "`max_turns` must be a whole number of at least 1, got 0",
            ),
            at(
                "agents/c.md",
                1,
                "frontmatter is not closed: add a `---` line after the last key",
            ),
        ],
    );
}

#[test]
fn durability_on_an_agent_used_as_a_subagent_is_rejected() {
    check_diagnostics(
        &[
            (
                "agents/lead.md",
                "---\nmodel: openai/y\nsubagents: [worker]\n---\nLead.",
            ),
            (
                "agents/other.md",
                "---\nmodel: openai/y\nsubagents: [worker]\n---\nOther.",
            ),
            (
                "agents/worker.md",
                "---\nmodel: openai/y\ndurability: { max_attempts: 2 }\n---\nWork.",
            ),
            // Durability on a root-only agent is fine.
            (
                "agents/solo.md",
                "---\nmodel: openai/y\ndurability: { max_attempts: 2 }\n---\nSolo.",
            ),
        ],
        &[at(
            "agents/worker.md",
            3,
            "`durability` is not allowed on an agent used as a subagent (`lead` lists it in \
             `subagents`): remove it",
        )],
    );
}
