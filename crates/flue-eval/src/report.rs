//! An eval run as data: the record of every case run, the summary per case and in total
//! (pass rate, tokens, cost, latency p50/p95), the comparison with another run, and the JUnit
//! XML a CI server reads.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::assertion::Check;

#[cfg(test)]
mod tests;

/// One eval run: which cases ran how often, and every result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct EvalRun {
    /// The run's id (a ULID: runs sort by start).
    pub id: String,
    /// When it started, in milliseconds since the epoch.
    pub started_at: u64,
    /// When it finished; `None` while running, or when it was cut short.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<u64>,
    /// How often each case runs.
    pub repeat: u32,
    /// The lowest overall pass rate that passes the run.
    pub threshold: f64,
    /// The run compared against, when one was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<String>,
    /// Every case of the run, `file#case`, in file order: the ones still to run included.
    pub cases: Vec<String>,
    /// One result per case run, in the order they finished.
    pub results: Vec<CaseRun>,
}

/// One run of one case.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct CaseRun {
    /// The case file.
    pub file: String,
    /// The case.
    pub case: String,
    /// Which repetition, from 1.
    pub repetition: u32,
    /// The agent.
    pub agent: String,
    /// The conversation id (`flue session show --id AGENT:ID`).
    pub conversation: String,
    /// Whether every check held.
    pub passed: bool,
    /// How the last message settled.
    pub outcome: String,
    /// Every check, the failed ones with what was found.
    pub checks: Vec<Check>,
    /// The last reply.
    pub reply: String,
    /// Model turns.
    pub turns: u64,
    /// Tokens (input, cached input and output).
    pub tokens: u64,
    /// Cost in US dollars.
    pub cost_usd: f64,
    /// From the first message to the last settlement.
    pub latency_ms: u64,
}

impl CaseRun {
    /// `file#case`, the case's key across runs.
    pub fn key(&self) -> String {
        case_key(&self.file, &self.case)
    }

    /// The failed checks, one line each.
    pub fn failures(&self) -> Vec<String> {
        self.checks
            .iter()
            .filter(|check| !check.passed)
            .map(|check| format!("{}: {}", check.name, check.detail))
            .collect()
    }
}

/// `file#case`.
pub fn case_key(file: &str, case: &str) -> String {
    format!("{file}#{case}")
}

/// The figures of one case over its repetitions, or of the whole run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Stats {
    /// `file#case`, or `total`.
    pub name: String,
    /// Runs finished.
    pub runs: u32,
    /// Runs that passed.
    pub passed: u32,
    /// `passed / runs` (0 when nothing ran).
    pub pass_rate: f64,
    /// Tokens over all runs.
    pub tokens: u64,
    /// Cost over all runs, in US dollars.
    pub cost_usd: f64,
    /// Median latency.
    pub latency_p50_ms: u64,
    /// 95th percentile latency.
    pub latency_p95_ms: u64,
}

impl Stats {
    fn of<'a>(name: String, runs: impl IntoIterator<Item = &'a CaseRun>) -> Self {
        let runs: Vec<&CaseRun> = runs.into_iter().collect();
        let mut latencies: Vec<u64> = runs.iter().map(|run| run.latency_ms).collect();
        latencies.sort_unstable();
        let n_runs = u32::try_from(runs.len()).unwrap_or(u32::MAX);
        let passed =
            u32::try_from(runs.iter().filter(|run| run.passed).count()).unwrap_or(u32::MAX);
        Self {
            name,
            runs: n_runs,
            passed,
            pass_rate: if n_runs == 0 {
                0.0
            } else {
                f64::from(passed) / f64::from(n_runs)
            },
            tokens: runs.iter().map(|run| run.tokens).sum(),
            // `+ 0.0`: an empty sum of floats is -0.0, printed `$-0.0000`.
            cost_usd: runs.iter().map(|run| run.cost_usd).sum::<f64>() + 0.0,
            latency_p50_ms: percentile(&latencies, 50),
            latency_p95_ms: percentile(&latencies, 95),
        }
    }
}

/// The nearest-rank percentile of sorted `values` (0 for none).
pub(crate) fn percentile(sorted: &[u64], percent: usize) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (percent * sorted.len()).div_ceil(100).max(1);
    sorted[rank.min(sorted.len()) - 1]
}

impl EvalRun {
    /// Per case (in the run's case order), then the total.
    pub fn summary(&self) -> (Vec<Stats>, Stats) {
        let per_case = self
            .cases
            .iter()
            .map(|key| {
                Stats::of(
                    key.clone(),
                    self.results.iter().filter(|run| &run.key() == key),
                )
            })
            .collect();
        (per_case, Stats::of("total".to_owned(), &self.results))
    }

    /// Whether the run passes: its overall pass rate reaches the threshold, and every case
    /// ran as often as asked.
    pub fn passed(&self) -> bool {
        let (_, total) = self.summary();
        let expected = self.cases.len() * self.repeat as usize;
        total.runs as usize == expected && total.pass_rate >= self.threshold
    }

    /// The (file#case, repetition) pairs already run, for resuming.
    pub fn done(&self) -> Vec<(String, u32)> {
        self.results
            .iter()
            .map(|run| (run.key(), run.repetition))
            .collect()
    }
}

/// How a case changed between two runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Change {
    /// A higher pass rate.
    Improved,
    /// A lower pass rate.
    Regressed,
    /// The same pass rate.
    Unchanged,
    /// Only in the newer run.
    New,
    /// Only in the older run.
    Removed,
}

impl Change {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Improved => "improved",
            Self::Regressed => "regressed",
            Self::Unchanged => "unchanged",
            Self::New => "new",
            Self::Removed => "removed",
        }
    }
}

/// One case compared between a baseline and a newer run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct CaseChange {
    /// `file#case`.
    pub case: String,
    /// The baseline's pass rate.
    pub before: Option<f64>,
    /// The newer run's pass rate.
    pub after: Option<f64>,
    /// What changed.
    pub change: Change,
}

/// Each case of `baseline` and `after` by pass rate, in `after`'s order, then the removed ones.
pub fn compare(baseline: &EvalRun, after: &EvalRun) -> Vec<CaseChange> {
    let rates = |run: &EvalRun| -> BTreeMap<String, f64> {
        run.summary()
            .0
            .into_iter()
            .filter(|stats| stats.runs > 0)
            .map(|stats| (stats.name, stats.pass_rate))
            .collect()
    };
    let before = rates(baseline);
    let now = rates(after);
    let mut changes: Vec<CaseChange> = after
        .cases
        .iter()
        .filter_map(|case| {
            let after_rate = *now.get(case)?;
            let before_rate = before.get(case).copied();
            let change = match before_rate {
                None => Change::New,
                Some(rate) if after_rate > rate + 1e-9 => Change::Improved,
                Some(rate) if after_rate + 1e-9 < rate => Change::Regressed,
                Some(_) => Change::Unchanged,
            };
            Some(CaseChange {
                case: case.clone(),
                before: before_rate,
                after: Some(after_rate),
                change,
            })
        })
        .collect();
    for (case, rate) in &before {
        if !now.contains_key(case) {
            changes.push(CaseChange {
                case: case.clone(),
                before: Some(*rate),
                after: None,
                change: Change::Removed,
            });
        }
    }
    changes
}

/// The run as JUnit XML: one `<testsuite>` per case file, one `<testcase>` per case (failed
/// when any repetition failed, the failure naming each failed check), in the shape Jenkins,
/// GitLab and GitHub's test reporters read.
pub fn junit(run: &EvalRun) -> String {
    let mut files: Vec<&str> = Vec::new();
    for key in &run.cases {
        let file = key.split_once('#').map_or(key.as_str(), |(file, _)| file);
        if !files.contains(&file) {
            files.push(file);
        }
    }
    let (per_case, total) = run.summary();
    let failed_cases = per_case
        .iter()
        .filter(|stats| stats.passed < stats.runs || stats.runs == 0)
        .count();
    let mut xml = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        xml,
        "<testsuites name=\"flue eval\" tests=\"{}\" failures=\"{failed_cases}\" errors=\"0\" time=\"{}\">",
        per_case.len(),
        seconds(run.results.iter().map(|result| result.latency_ms).sum()),
    );
    for file in files {
        let cases: Vec<&Stats> = per_case
            .iter()
            .filter(|stats| stats.name.split_once('#').is_some_and(|(of, _)| of == file))
            .collect();
        let failures = cases
            .iter()
            .filter(|stats| stats.passed < stats.runs || stats.runs == 0)
            .count();
        let time: u64 = run
            .results
            .iter()
            .filter(|result| result.file == file)
            .map(|result| result.latency_ms)
            .sum();
        let _ = writeln!(
            xml,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" skipped=\"0\" time=\"{}\">",
            escape(file),
            cases.len(),
            seconds(time),
        );
        for stats in cases {
            testcase(&mut xml, run, file, stats);
        }
        xml.push_str("  </testsuite>\n");
    }
    xml.push_str("</testsuites>\n");
    let _ = total;
    xml
}

fn testcase(xml: &mut String, run: &EvalRun, file: &str, stats: &Stats) {
    let case = stats.name.split_once('#').map_or("", |(_, case)| case);
    let runs: Vec<&CaseRun> = run
        .results
        .iter()
        .filter(|result| result.key() == stats.name)
        .collect();
    let time: u64 = runs.iter().map(|result| result.latency_ms).sum();
    let _ = write!(
        xml,
        "    <testcase name=\"{}\" classname=\"{}\" time=\"{}\"",
        escape(case),
        escape(
            &file
                .trim_end_matches(".yaml")
                .trim_end_matches(".yml")
                .replace('/', ".")
        ),
        seconds(time),
    );
    if stats.runs > 0 && stats.passed == stats.runs {
        xml.push_str("/>\n");
        return;
    }
    xml.push_str(">\n");
    let mut lines = Vec::new();
    for result in runs.iter().filter(|result| !result.passed) {
        for failure in result.failures() {
            lines.push(format!("run {}: {failure}", result.repetition));
        }
        lines.push(format!(
            "run {}: flue session show --id {}:{}",
            result.repetition, result.agent, result.conversation
        ));
    }
    if stats.runs == 0 {
        lines.push("the case did not run (the eval was stopped)".to_owned());
    }
    let message = lines
        .first()
        .cloned()
        .unwrap_or_else(|| "failed".to_owned());
    let _ = writeln!(
        xml,
        "      <failure message=\"{}\" type=\"assertion\">{}</failure>",
        escape(&format!(
            "{} of {} run(s) passed; {message}",
            stats.passed, stats.runs
        )),
        escape(&lines.join("\n")),
    );
    xml.push_str("    </testcase>\n");
}

fn seconds(ms: u64) -> String {
    format!("{:.3}", ms as f64 / 1000.0)
}

/// Escapes text for XML content and attributes; drops the control characters XML 1.0 forbids.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' => out.push_str("&#10;"),
            '\t' | '\r' => out.push(' '),
            c if (c as u32) < 0x20 => {}
            c => out.push(c),
        }
    }
    out
}
