//! Summaries, percentiles, comparisons and the JUnit text.

use pretty_assertions::assert_eq;

use super::*;

fn result(case: &str, repetition: u32, passed: bool, latency_ms: u64) -> CaseRun {
    CaseRun {
        file: "evals/a.yaml".to_owned(),
        case: case.to_owned(),
        repetition,
        agent: "probe".to_owned(),
        conversation: format!("c-{case}-{repetition}"),
        passed,
        outcome: "completed".to_owned(),
        checks: vec![Check::new(
            "reply_contains",
            passed,
            "expected \"<ok>\" & more",
        )],
        tokens: 10,
        cost_usd: 0.5,
        latency_ms,
        ..CaseRun::default()
    }
}

fn run(results: Vec<CaseRun>) -> EvalRun {
    EvalRun {
        id: "R".to_owned(),
        repeat: 2,
        threshold: 1.0,
        cases: vec!["evals/a.yaml#x".to_owned(), "evals/a.yaml#y".to_owned()],
        results,
        ..EvalRun::default()
    }
}

#[test]
fn percentiles_are_nearest_rank() {
    let values: Vec<u64> = (1..=20).collect();
    assert_eq!(percentile(&values, 50), 10);
    assert_eq!(percentile(&values, 95), 19);
    assert_eq!(percentile(&[7], 95), 7);
    assert_eq!(percentile(&[], 50), 0);
}

#[test]
fn the_summary_counts_each_case_and_the_total() {
    let run = run(vec![
        result("x", 1, true, 100),
        result("x", 2, false, 300),
        result("y", 1, true, 50),
        result("y", 2, true, 70),
    ]);
    let (cases, total) = run.summary();
    assert_eq!(
        (
            cases[0].passed,
            cases[0].runs,
            cases[0].pass_rate,
            cases[0].latency_p50_ms,
            cases[0].latency_p95_ms
        ),
        (1, 2, 0.5, 100, 300)
    );
    assert_eq!(
        (total.passed, total.runs, total.tokens, total.cost_usd),
        (3, 4, 40, 2.0)
    );
    assert!(!run.passed());
    let mut lenient = run.clone();
    lenient.threshold = 0.75;
    assert!(lenient.passed());
    // A run missing a repetition does not pass, whatever its rate.
    lenient.results.pop();
    assert!(!lenient.passed());
}

#[test]
fn comparison_marks_each_case() {
    let before = run(vec![result("x", 1, true, 1), result("y", 1, false, 1)]);
    let mut after = run(vec![
        result("x", 1, false, 1),
        result("y", 1, true, 1),
        result("z", 1, true, 1),
    ]);
    after.cases.push("evals/a.yaml#z".to_owned());
    let changes: Vec<(String, Change)> = compare(&before, &after)
        .into_iter()
        .map(|change| (change.case, change.change))
        .collect();
    assert_eq!(
        changes,
        vec![
            ("evals/a.yaml#x".to_owned(), Change::Regressed),
            ("evals/a.yaml#y".to_owned(), Change::Improved),
            ("evals/a.yaml#z".to_owned(), Change::New),
        ]
    );
    let removed = compare(&after, &before);
    assert_eq!(
        removed.last().map(|change| change.change),
        Some(Change::Removed)
    );
}

#[test]
fn junit_escapes_what_it_quotes() {
    let xml = junit(&run(vec![
        result("x", 1, false, 1500),
        result("y", 1, true, 20),
    ]));
    assert!(
        xml.contains("<testsuites name=\"flue eval\" tests=\"2\" failures=\"1\""),
        "{xml}"
    );
    assert!(xml.contains("time=\"1.500\""), "{xml}");
    assert!(
        xml.contains("expected &quot;&lt;ok&gt;&quot; &amp; more"),
        "{xml}"
    );
    assert!(!xml.contains("\"<ok>\""), "{xml}");
}
