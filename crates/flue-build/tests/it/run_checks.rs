//! Checks that match runs: what a run would reject is reported by the build, all at once and
//! at its line; and a run of one agent is not stopped by another agent's broken file.

use flue_build::{Diagnostic, Workspace};
use pretty_assertions::assert_eq;

use crate::support::{check_diagnostics, workspace};

fn at(path: &str, line: usize, message: &str) -> Diagnostic {
    Diagnostic::at(path, line, message)
}

const KNOWN: &str = "anthropic, deepseek, google, groq, mistral, ollama, openai, openrouter, \
                     scripted, together, vllm, xai";

#[test]
fn an_unknown_provider_is_reported_at_the_model_line_with_a_suggestion() {
    check_diagnostics(
        &[(
            "agents/a.md",
            "---\ndescription: A\nmodel: opnai/gpt-4o\n---\nA.",
        )],
        &[at(
            "agents/a.md",
            3,
            &format!(
                "unknown provider `opnai` in model `opnai/gpt-4o` (did you mean `openai/gpt-4o`?): \
                 use one of {KNOWN}, or declare it under [providers.opnai] in flue.toml"
            ),
        )],
    );
}

#[test]
fn providers_declared_in_flue_toml_are_known() {
    let dir = workspace(&[
        (
            "flue.toml",
            "[providers.local]\napi = \"openai-completions\"\nbase_url = \"http://127.0.0.1:1/v1\"\n",
        ),
        ("agents/a.md", "---\nmodel: local/m\n---\nA."),
    ]);
    let loaded = Workspace::load(dir.path());
    assert!(loaded.is_ok(), "{loaded:?}");
}

#[test]
fn every_flue_toml_problem_is_reported_in_one_go() {
    check_diagnostics(
        &[
            (
                "flue.toml",
                "[defaults]\nmodel = \"scripted/x\"\nbogus = 1\n\n[sandbox]\nkind = \"nope\"\n\n\
                 [mcp.docs]\nurl = \"http://127.0.0.1:1/mcp\"\ntimeout = 3\n\n[surprise]\nkey = 1\n",
            ),
            ("agents/a.md", "---\nmodel: scripted/x\n---\nA."),
        ],
        &[
            at(
                "flue.toml",
                3,
                "unknown key `bogus` (known keys here: model, thinking, permissions, budget)",
            ),
            at(
                "flue.toml",
                6,
                "invalid sandbox `nope`: expected one of virtual, local, isolated, daytona",
            ),
            at(
                "flue.toml",
                10,
                "unknown key `timeout` (did you mean `timeout_ms`?)",
            ),
            at(
                "flue.toml",
                12,
                "unknown key `surprise` (known keys here: defaults, sandbox, mcp, providers, store, schedules, hooks, claude_code, tasks)",
            ),
        ],
    );
}

#[test]
fn a_run_of_one_agent_reads_only_its_file_and_its_subagents() {
    let dir = workspace(&[
        (
            "agents/a.md",
            "---\nmodel: scripted/x\nsubagents: [s]\n---\nA.",
        ),
        (
            "agents/s.md",
            "---\nmodel: scripted/x\nsubagents: [t]\n---\nS.",
        ),
        ("agents/t.md", "---\nmodel: scripted/x\n---\nT."),
        (
            "agents/b.md",
            "---\nmodel: scripted/x\nthinking: hgih\n---\nB.",
        ),
        (
            "agents/c.md",
            "---\nmodel: scripted/x\nsubagents: [b]\n---\nC.",
        ),
        ("agents/d.md", "---\nmodel: scripted/x\n---\nD."),
    ]);
    // Not UTF-8: reading it would be an error.
    std::fs::write(dir.path().join("agents/e.md"), [0xff, 0xfe, 0x00]).unwrap();
    let (loaded, warnings) = Workspace::load_for_agent(dir.path(), "a").unwrap();
    assert_eq!(
        loaded.agents.keys().collect::<Vec<_>>(),
        vec!["a", "s", "t"],
        "a and the subagents it reaches; b, c, d and e are not read"
    );
    assert_eq!(warnings, Vec::<Diagnostic>::new());
    // The whole workspace still has their problems.
    let all = Workspace::load(dir.path()).unwrap_err();
    let shown: Vec<String> = all.as_slice().iter().map(ToString::to_string).collect();
    assert!(
        shown.iter().any(|line| line.starts_with("agents/b.md:3: "))
            && shown.iter().any(|line| line.starts_with("agents/e.md")),
        "{shown:?}"
    );
}

#[test]
fn a_run_of_an_agent_without_a_file_reads_them_all_and_sets_broken_ones_aside() {
    let dir = workspace(&[
        ("agents/a.md", "---\nmodel: scripted/x\n---\nA."),
        (
            "agents/b.md",
            "---\nmodel: scripted/x\nthinking: hgih\n---\nB.",
        ),
        (
            "agents/c.md",
            "---\nmodel: scripted/x\nsubagents: [b]\n---\nC.",
        ),
    ]);
    // The caller reports the unknown agent with the agents there are.
    let (loaded, warnings) = Workspace::load_for_agent(dir.path(), "nobody").unwrap();
    assert_eq!(
        loaded.agents.keys().collect::<Vec<_>>(),
        vec!["a"],
        "b is broken and c needs b"
    );
    let shown: Vec<String> = warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        vec![
            "agents/b.md:3: invalid thinking level `hgih`: expected one of off, minimal, low, \
             medium, high, xhigh (did you mean `high`?)"
                .to_owned(),
            "agents/c.md: subagent `b` cannot be loaded (see its problems)".to_owned(),
        ]
    );
}

#[test]
fn a_run_reports_its_own_problems_as_the_whole_workspace_load_does() {
    let broken_b = (
        "agents/b.md",
        "---\nmodel: scripted/x\nthinking: hgih\n---\nB.",
    );
    let thinking = "agents/b.md:3: invalid thinking level `hgih`: expected one of off, minimal, \
                    low, medium, high, xhigh (did you mean `high`?)";
    for (files, agent, expected) in [
        // Its own file, at its line.
        (
            vec![broken_b, ("agents/a.md", "---\nmodel: scripted/x\n---\nA.")],
            "b",
            vec![thinking.to_owned()],
        ),
        // A subagent it needs: why the agent cannot run, and the subagent's problem.
        (
            vec![
                broken_b,
                (
                    "agents/a.md",
                    "---\nmodel: scripted/x\nsubagents: [b]\n---\nA.",
                ),
            ],
            "a",
            vec![
                "agents/a.md: subagent `b` cannot be loaded (see its problems)".to_owned(),
                thinking.to_owned(),
            ],
        ),
        // An unknown subagent, with a suggestion from the files there are (not read).
        (
            vec![
                ("agents/b.md", "---\nmodel: scripted/x\n---\nB."),
                (
                    "agents/a.md",
                    "---\nmodel: scripted/x\nsubagents: [bb]\n---\nA.",
                ),
            ],
            "a",
            vec![
                "agents/a.md:3: unknown subagent `bb` (did you mean `b`?): add agents/bb.md or \
                 remove it from `subagents`"
                    .to_owned(),
            ],
        ),
    ] {
        let dir = workspace(&files);
        let shown: Vec<String> = match Workspace::load_for_agent(dir.path(), agent) {
            Ok(loaded) => panic!("{agent}: {loaded:?}"),
            Err(problems) => problems
                .as_slice()
                .iter()
                .map(ToString::to_string)
                .collect(),
        };
        assert_eq!(shown, expected, "{agent}");
    }
}

#[test]
fn a_run_still_fails_on_its_own_agent_shared_files_and_subagents() {
    let broken_b = (
        "agents/b.md",
        "---\nmodel: scripted/x\nthinking: hgih\n---\nB.",
    );
    for (files, agent) in [
        // Its own file.
        (
            vec![broken_b, ("agents/a.md", "---\nmodel: scripted/x\n---\nA.")],
            "b",
        ),
        // A subagent it needs.
        (
            vec![
                broken_b,
                (
                    "agents/a.md",
                    "---\nmodel: scripted/x\nsubagents: [b]\n---\nA.",
                ),
            ],
            "a",
        ),
        // flue.toml.
        (
            vec![
                ("flue.toml", "[defaults]\nthinking = \"extreme\"\n"),
                ("agents/a.md", "---\nmodel: scripted/x\n---\nA."),
            ],
            "a",
        ),
    ] {
        let dir = workspace(&files);
        let loaded = Workspace::load_for_agent(dir.path(), agent);
        assert!(loaded.is_err(), "{agent}: {loaded:?}");
    }
}
