//! Case files: the shapes that load, and every problem at its line.

use pretty_assertions::assert_eq;
use serde_json::json;

use super::*;

fn agents() -> Vec<String> {
    vec!["probe".to_owned(), "reviewer".to_owned()]
}

/// Parses `text` as `evals/t.yaml`: the cases and the problems as `line: message`.
fn check(text: &str) -> (Vec<Case>, Vec<String>) {
    let mut diagnostics = Vec::new();
    let cases = parse("evals/t.yaml", text, &agents(), &mut diagnostics);
    // As `load` reports them: by line, in the order found on one line.
    diagnostics.sort_by_key(|diagnostic| diagnostic.line);
    let problems = diagnostics
        .iter()
        .map(|diagnostic| format!("{}: {}", diagnostic.line.unwrap_or(0), diagnostic.message))
        .collect();
    (cases, problems)
}

#[test]
fn the_minimal_shape_loads() {
    let (cases, problems) = check(
        "agent: probe\ncases:\n  - name: echoes\n    message: \"hello there\"\n    expect:\n      reply_contains: \"You said: hello there\"\n  - name: uses-bash\n    message: \"list files please\"\n    expect:\n      tool_calls: [bash]\n",
    );
    assert_eq!(problems, Vec::<String>::new());
    assert_eq!(cases.len(), 2);
    assert_eq!(cases[0].name, "echoes");
    assert_eq!(cases[0].line, 3);
    assert_eq!(cases[0].messages, vec!["hello there".to_owned()]);
    assert_eq!(
        cases[0].expect.reply_contains,
        vec!["You said: hello there".to_owned()]
    );
    assert_eq!(
        cases[1].expect.tool_calls,
        vec![ToolCallExpect {
            name: "bash".to_owned(),
            input: None
        }]
    );
}

#[test]
fn every_field_loads_typed() {
    let text = r#"agent: probe
judge_model: scripted/judge.json
cases:
  - name: full
    agent: reviewer
    messages: [one, "2"]
    files: { src/a.py: "print(1)\n" }
    initialData: { plan: pro, seats: 3 }
    role: critic
    model: scripted/other.json
    thinking: low
    result: { type: object, properties: { ok: { type: boolean } } }
    expect:
      reply_not_contains: [oops]
      result: { ok: true }
      tool_calls: [{ name: read_file, input: { path: src/a.py } }, bash]
      tool_call_counts: { bash: 0 }
      files: { out.txt: { matches: "^x" }, gone.txt: false }
      max_cost_usd: 0.5
      scorers: [{ command: ./score.sh, threshold: 0.7, timeout_ms: 500 }]
      judge: [{ rubric: be kind }, { rubric: be brief, model: scripted/b.json, name: brevity }]
"#;
    let (cases, problems) = check(text);
    assert_eq!(problems, Vec::<String>::new());
    let case = &cases[0];
    assert_eq!(case.agent, "reviewer");
    assert_eq!(case.messages, vec!["one".to_owned(), "2".to_owned()]);
    assert_eq!(
        case.files,
        vec![("src/a.py".to_owned(), "print(1)\n".to_owned())]
    );
    assert_eq!(case.initial_data, Some(json!({"plan": "pro", "seats": 3})));
    assert_eq!(case.thinking, Some(ThinkingLevel::Low));
    assert_eq!(case.expect.result, Some(json!({"ok": true})));
    assert_eq!(
        case.expect.tool_calls[0].input,
        Some(json!({"path": "src/a.py"}))
    );
    assert_eq!(case.expect.files[1].exists, false);
    assert_eq!(case.expect.scorers[0].timeout_ms, 500);
    let judges: Vec<(&str, &str)> = case
        .expect
        .judges
        .iter()
        .map(|judge| (judge.name.as_str(), judge.model.as_str()))
        .collect();
    assert_eq!(
        judges,
        vec![
            ("judge-1", "scripted/judge.json"),
            ("brevity", "scripted/b.json")
        ]
    );
}

#[test]
fn problems_deep_in_a_case_are_reported_at_their_line() {
    let text = "agent: probe
cases:
  - name: a
    message: hi
    files:
      ../etc/passwd: x
    expect:
      files:
        out.txt:
          contains: [ok]
          exsts: true
      tool_call_counts: { bash: -1 }
      scorers:
        - threshold: 2
  - name: a
    message: [not, text]
";
    let (_, problems) = check(text);
    assert_eq!(
        problems,
        vec![
            "6: file path \"../etc/passwd\" must be relative to the sandbox, without `..`: e.g. `src/main.py`",
            "11: unknown key `exsts` in a file check (did you mean `exists`?)",
            "12: `tool_call_counts.bash` must be a whole number, 0 or more",
            "14: this scorer has no `command`: add `command: python3 evals/score.py`",
            "16: `message` is a list; it must be text",
        ]
    );
}

#[test]
fn a_duplicate_name_a_missing_agent_and_broken_yaml_are_named() {
    let (_, problems) = check("cases:\n  - name: a\n    message: x\n");
    assert_eq!(
        problems,
        vec![
            "2: no agent for this case: add `agent: <name>` at the top of the file or to the case"
        ]
    );
    let (_, problems) =
        check("agent: probe\ncases:\n  - name: a\n    message: x\n  - name: a\n    message: y\n");
    assert_eq!(
        problems,
        vec!["5: case `a` is named twice in this file: give each case its own name"]
    );
    let (_, problems) =
        check("agent: probe\ncases:\n  - name: a\n    message: x\n    message: y\n");
    assert_eq!(
        problems,
        vec!["5: `message` is given twice in a case: keep one"]
    );
    let (_, problems) = check("agent: probe\ncases:\n  - name: [a\n");
    assert_eq!(problems.len(), 1);
    assert!(problems[0].starts_with("4: invalid YAML"), "{problems:?}");
}

#[test]
fn anchors_and_aliases_are_refused() {
    let (_, problems) = check(
        "agent: probe\ncases:\n  - name: a\n    message: &m hi\n  - name: b\n    message: *m\n",
    );
    assert!(
        problems
            .iter()
            .all(|problem| problem.contains("anchors and aliases")),
        "{problems:?}"
    );
    assert_eq!(problems[0].split(':').next(), Some("4"));
}

#[test]
fn quoted_scalars_stay_text_and_plain_ones_are_typed() {
    let (cases, _) = check(
        "agent: probe\ncases:\n  - name: a\n    message: x\n    expect:\n      result: { n: 3, s: \"3\", b: true, f: 1.5, z: null, w: yes }\n",
    );
    assert_eq!(
        cases[0].expect.result,
        Some(json!({"n": 3, "s": "3", "b": true, "f": 1.5, "z": null, "w": "yes"}))
    );
}
