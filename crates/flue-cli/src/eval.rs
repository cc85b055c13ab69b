//! `flue eval`: runs the workspace's eval cases and prints the summary (or one JSON object),
//! writes a JUnit report, compares with a baseline; `flue eval list | show | diff` read the
//! stored runs. The engine is flue-eval; this module picks the cases and renders.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::IsTerminal as _;
use std::path::Path;

use anyhow::Context as _;
use flue_eval::{Case, CaseChange, CaseRun, EvalOptions, EvalRun, RunStore, Stats};
use flue_host::AgentSet;
use serde_json::json;

use crate::Exit;
use crate::args::{EvalArgs, EvalCommand, EvalDiffArgs, EvalListArgs, EvalRunArgs, EvalShowArgs};
use crate::interrupt::Interrupts;
use crate::stdout::{out, outln};
use crate::terminal::Output;
use crate::workspace::resolve_root;

/// Runs `flue eval` and its subcommands.
pub(crate) async fn eval(args: EvalArgs) -> anyhow::Result<Exit> {
    match args.command {
        Some(EvalCommand::List(list_args)) => list(&list_args).await,
        Some(EvalCommand::Show(show_args)) => show(&show_args).await,
        Some(EvalCommand::Diff(diff_args)) => diff(&diff_args).await,
        None => run(args.run).await,
    }
}

async fn run(args: EvalRunArgs) -> anyhow::Result<Exit> {
    if !(0.0..=1.0).contains(&args.threshold) {
        anyhow::bail!(
            "--threshold {} is not a pass rate: give a number from 0 to 1 (0.9: nine runs in ten pass)",
            args.threshold
        );
    }
    let root = resolve_root(args.root.as_deref())?;
    let env = crate::setup::workspace_env(&root, args.env_file.as_deref())?;
    let scorer_env: Vec<(String, String)> = ["PATH", "HOME", "LANG"]
        .into_iter()
        .filter_map(|key| Some((key.to_owned(), env.get(key)?)))
        .collect();
    let output = Output::new(flue_core::Redactor::new(env.secrets()).unwrap_or_default());
    let cassette = cassette(&args, &root, env.secrets())?;
    let agents = crate::trust::apply(AgentSet::from_workspace(&root, env)?);
    let store = run_store(&root, args.dev).await?;
    let resume = match args.resume.as_deref() {
        Some(id) => Some(store.load(id).await?),
        None => None,
    };
    let known: Vec<String> = agents.agents().into_iter().map(|info| info.name).collect();
    let cases = match &resume {
        Some(run) => resumed_cases(&root, run, &known)?,
        None => select(&root, &args.select, &known)?,
    };
    if cases.is_empty() {
        anyhow::bail!(
            "no eval cases: write evals/<name>.yaml with `agent:` and `cases:` (see docs/evals.md)"
        );
    }
    // The cases' command scorers run on this machine: trusted with the agents they test.
    let agents = crate::trust::ensure(agents.with_trust_items(crate::trust::scorer_items(&cases)))?;
    let baseline = match args.baseline.as_deref() {
        Some("last") => Some(store.latest().await?.ok_or_else(|| {
            anyhow::anyhow!("--baseline last: no stored run yet; run `flue eval` once first")
        })?),
        Some(id) => Some(store.load(id).await?),
        None => None,
    };
    // The runner stores the run through the store it runs the cases on.
    drop(store);
    let options = EvalOptions {
        concurrency: usize::from(args.concurrency),
        repeat: resume.as_ref().map_or(args.repeat, |run| run.repeat),
        threshold: resume.as_ref().map_or(args.threshold, |run| run.threshold),
        baseline: baseline.as_ref().map(|run| run.id.clone()),
        scorer_env,
        cancel: flue_core::CancellationToken::new(),
        cassette,
        store: if args.dev {
            flue_host::StoreChoice::File(flue_host::DEV_DB_PATH.into())
        } else {
            flue_host::StoreChoice::Workspace
        },
    };
    let progress = StderrProgress {
        output: output.clone(),
    };
    // Ctrl-C or SIGTERM stops the run: running cases are aborted, the run is kept for
    // `--resume`.
    let mut interrupts = Interrupts::watch();
    let cancel = options.cancel.clone();
    let running = flue_eval::run(agents, &cases, &options, resume, &progress);
    tokio::pin!(running);
    let mut interrupted = None;
    let run = loop {
        tokio::select! {
            run = &mut running => break run?,
            signalled = interrupts.next(), if interrupted.is_none() => {
                eprintln!("\n{}: stopping the eval (running cases are aborted)", signalled.describe());
                interrupted = Some(signalled);
                cancel.cancel();
            }
        }
    };
    if let Some(signalled) = interrupted {
        eprintln!(
            "eval run {} stopped after {} case run(s); finish it with `flue eval --resume {}`",
            run.id,
            run.results.len(),
            run.id
        );
        return Ok(signalled.exit());
    }
    let comparison = baseline
        .as_ref()
        .map(|before| flue_eval::compare(before, &run));
    if let Some(path) = &args.junit {
        write_junit(path, &run)?;
    }
    if args.json {
        outln!(
            "{}",
            output.json_line(&run_json(&run, comparison.as_deref()))?
        )?;
    } else {
        out!(
            "{}",
            output.stdout_text(&summary_table(&run, comparison.as_deref()))
        )?;
        let failures = failures_text(&run);
        if !failures.is_empty() {
            eprint!("{}", output.stderr_text(&failures));
        }
    }
    let (_, total) = run.summary();
    let passed = run.passed();
    eprintln!(
        "eval run {}: {} of {} run(s) passed ({:.0}%, threshold {:.0}%){}",
        run.id,
        total.passed,
        total.runs,
        total.pass_rate * 100.0,
        run.threshold * 100.0,
        if passed { "" } else { ": FAILED" }
    );
    Ok(if passed { Exit::Success } else { Exit::Failure })
}

/// The cassette `--record` or `--replay` asks for.
fn cassette(
    args: &EvalRunArgs,
    root: &Path,
    secrets: Vec<String>,
) -> anyhow::Result<Option<std::sync::Arc<flue_eval::Cassette>>> {
    let path = root.join(&args.cassette);
    let shown = args.cassette.display().to_string();
    let cassette = if args.record {
        flue_eval::Cassette::record(&path, &shown, secrets)
    } else if args.replay {
        flue_eval::Cassette::replay(&path, &shown, secrets)?
    } else {
        return Ok(None);
    };
    Ok(Some(std::sync::Arc::new(cassette)))
}

/// The cases `select` names (files, file names, case names), or every case.
fn select(root: &Path, select: &[String], known: &[String]) -> anyhow::Result<Vec<Case>> {
    let files = flue_eval::discover(root)?;
    if select.is_empty() {
        return Ok(flue_eval::load(root, &files, known)?);
    }
    let mut chosen_files = BTreeSet::new();
    let mut case_names = BTreeSet::new();
    for wanted in select {
        let as_file = wanted.trim_start_matches("./").to_owned();
        if files.contains(&as_file) {
            chosen_files.insert(as_file);
            continue;
        }
        let by_stem = files.iter().find(|file| {
            Path::new(file.as_str())
                .file_stem()
                .is_some_and(|stem| stem.to_string_lossy() == wanted.as_str())
        });
        match by_stem {
            Some(file) => {
                chosen_files.insert(file.clone());
            }
            None => {
                case_names.insert(wanted.clone());
            }
        }
    }
    if case_names.is_empty() {
        let chosen: Vec<String> = chosen_files.into_iter().collect();
        return Ok(flue_eval::load(root, &chosen, known)?);
    }
    // A case name can be in any file: every file is read.
    let all = flue_eval::load(root, &files, known)?;
    for name in &case_names {
        if !all.iter().any(|case| &case.name == name) {
            let stems: Vec<String> = files
                .iter()
                .filter_map(|file| {
                    Some(Path::new(file).file_stem()?.to_string_lossy().into_owned())
                })
                .collect();
            anyhow::bail!(
                "`{name}` is neither a case file nor a case; the case files: {}",
                if stems.is_empty() {
                    "none (write evals/<name>.yaml)".to_owned()
                } else {
                    stems.join(", ")
                }
            );
        }
    }
    Ok(all
        .into_iter()
        .filter(|case| case_names.contains(&case.name) || chosen_files.contains(&case.file))
        .collect())
}

/// The cases of a stored run, read again from their files.
fn resumed_cases(root: &Path, run: &EvalRun, known: &[String]) -> anyhow::Result<Vec<Case>> {
    let files: BTreeSet<String> = run
        .cases
        .iter()
        .filter_map(|key| key.split_once('#').map(|(file, _)| file.to_owned()))
        .collect();
    let files: Vec<String> = files.into_iter().collect();
    let all = flue_eval::load(root, &files, known)?;
    let cases: Vec<Case> = all
        .into_iter()
        .filter(|case| {
            run.cases
                .contains(&flue_eval::case_key(&case.file, &case.name))
        })
        .collect();
    if cases.len() != run.cases.len() {
        anyhow::bail!(
            "run {} names cases its files no longer have; start a new run instead of --resume",
            run.id
        );
    }
    Ok(cases)
}

/// One line on stderr per finished case run.
struct StderrProgress {
    output: Output,
}

impl flue_eval::Progress for StderrProgress {
    fn started(&self, _case: &Case, _repetition: u32) {}

    fn finished(&self, result: &CaseRun, done: usize, total: usize) {
        let verdict = if result.passed { "pass" } else { "FAIL" };
        let width = total.to_string().len();
        let first_failure = result
            .failures()
            .into_iter()
            .next()
            .map(|failure| format!(": {}", shorten(&failure, 160)))
            .unwrap_or_default();
        let line = format!(
            "[{done:>width$}/{total}] {verdict} {} (run {}, {} ms){first_failure}",
            result.key(),
            result.repetition,
            result.latency_ms
        );
        // A bar on a terminal, the line itself everywhere.
        if std::io::stderr().is_terminal() {
            eprintln!("{} {}", bar(done, total), self.output.stderr_text(&line));
        } else {
            eprintln!("{}", self.output.stderr_text(&line));
        }
    }
}

fn bar(done: usize, total: usize) -> String {
    const WIDTH: usize = 20;
    let filled = (done * WIDTH).checked_div(total).unwrap_or(WIDTH);
    format!("[{}{}]", "#".repeat(filled), ".".repeat(WIDTH - filled))
}

fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max).collect();
    cut.push('…');
    cut
}

/// The summary: one row per case, then the total; with a baseline, each case's change.
fn summary_table(run: &EvalRun, comparison: Option<&[CaseChange]>) -> String {
    let (per_case, total) = run.summary();
    let width = per_case
        .iter()
        .map(|stats| stats.name.chars().count())
        .chain([4])
        .max()
        .unwrap_or(4);
    let mut out = String::new();
    let _ = write!(
        out,
        "{:<width$}  {:>7}  {:>5}  {:>9}  {:>10}  {:>8}  {:>8}",
        "case", "passed", "rate", "tokens", "cost", "p50", "p95"
    );
    if comparison.is_some() {
        out.push_str("  vs baseline");
    }
    out.push('\n');
    for stats in &per_case {
        row(&mut out, stats, width);
        if let Some(changes) = comparison {
            let change = changes
                .iter()
                .find(|change| change.case == stats.name)
                .map_or("-", |change| change.change.as_str());
            let _ = write!(out, "  {change}");
        }
        out.push('\n');
    }
    row(&mut out, &total, width);
    out.push('\n');
    if let Some(changes) = comparison {
        for change in changes
            .iter()
            .filter(|change| change.change == flue_eval::Change::Removed)
        {
            let _ = writeln!(
                out,
                "{:<width$}  (not in this run; was in the baseline)",
                change.case
            );
        }
    }
    out
}

fn row(out: &mut String, stats: &Stats, width: usize) {
    let _ = write!(
        out,
        "{:<width$}  {:>7}  {:>4.0}%  {:>9}  {:>10}  {:>6}ms  {:>6}ms",
        stats.name,
        format!("{}/{}", stats.passed, stats.runs),
        stats.pass_rate * 100.0,
        stats.tokens,
        format!("${:.4}", stats.cost_usd),
        stats.latency_p50_ms,
        stats.latency_p95_ms,
    );
}

/// Every failed case run with its failed checks, and how to open its conversation.
fn failures_text(run: &EvalRun) -> String {
    let mut out = String::new();
    for result in run.results.iter().filter(|result| !result.passed) {
        let _ = writeln!(
            out,
            "FAIL {} (run {}): flue session show --id {}:{}",
            result.key(),
            result.repetition,
            result.agent,
            result.conversation
        );
        for failure in result.failures() {
            let _ = writeln!(out, "  - {failure}");
        }
        for check in result.checks.iter().filter(|check| !check.passed) {
            if let Some(reasoning) = &check.reasoning {
                let _ = writeln!(out, "    {} reasoning: {}", check.name, reasoning);
            }
        }
    }
    out
}

fn run_json(run: &EvalRun, comparison: Option<&[CaseChange]>) -> serde_json::Value {
    let (per_case, total) = run.summary();
    let mut value = json!({
        "run": run,
        "summary": {"cases": per_case, "total": total},
        "passed": run.passed(),
    });
    if let Some(changes) = comparison {
        value["comparison"] = json!(changes);
    }
    value
}

fn write_junit(path: &Path, run: &EvalRun) -> anyhow::Result<()> {
    let xml = flue_eval::junit(run);
    if let Some(parent) = path
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
    {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("--junit {}: cannot create its folder", path.display()))?;
    }
    std::fs::write(path, xml)
        .with_context(|| format!("--junit {}: cannot write the report", path.display()))
}

/// Where `flue eval` keeps its runs and their conversations: `flue dev`'s database with
/// `--dev`, else the workspace's.
fn store_file(dev: bool) -> &'static str {
    if dev {
        flue_host::DEV_DB_PATH
    } else {
        flue_host::DB_PATH
    }
}

/// The runs in the store `flue eval` (`--dev`: `flue eval --dev`) keeps them in, or, before
/// anything ran here, only the run files of earlier versions.
async fn run_store(root: &Path, dev: bool) -> anyhow::Result<RunStore> {
    let path = root.join(store_file(dev));
    if !path.is_file() {
        return Ok(RunStore::new(None, root));
    }
    let store = flue_host::open_store_at(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    let store: std::sync::Arc<dyn flue_core::store::DynConversationStore> =
        std::sync::Arc::new(store);
    Ok(RunStore::new(store.eval_run_store(), root))
}

async fn list(args: &EvalListArgs) -> anyhow::Result<Exit> {
    let root = resolve_root(args.root.as_deref())?;
    let output = Output::for_workspace(&root)?;
    let runs = run_store(&root, args.dev).await?.list().await?;
    if args.json {
        let listed: Vec<serde_json::Value> = runs.iter().map(run_line_json).collect();
        outln!("{}", output.json_pretty(&json!({ "runs": listed }))?)?;
        return Ok(Exit::Success);
    }
    if runs.is_empty() {
        eprintln!(
            "no eval runs under {} yet; start one with `flue eval`",
            root.display()
        );
        return Ok(Exit::Success);
    }
    let mut out = format!(
        "{:<26}  {:<20}  {:>6}  {:>9}  {:>6}  {}\n",
        "run", "started", "cases", "passed", "rate", "status"
    );
    for run in &runs {
        let (_, total) = run.summary();
        let status = if run.finished_at.is_none() {
            "unfinished (--resume)"
        } else if run.passed() {
            "passed"
        } else {
            "failed"
        };
        let _ = writeln!(
            out,
            "{:<26}  {:<20}  {:>6}  {:>9}  {:>5.0}%  {status}",
            run.id,
            crate::audit::format_time(run.started_at),
            run.cases.len(),
            format!("{}/{}", total.passed, total.runs),
            total.pass_rate * 100.0,
        );
    }
    out!("{}", output.stdout_text(&out))?;
    Ok(Exit::Success)
}

fn run_line_json(run: &EvalRun) -> serde_json::Value {
    let (_, total) = run.summary();
    json!({
        "id": run.id,
        "startedAt": run.started_at,
        "finishedAt": run.finished_at,
        "cases": run.cases.len(),
        "repeat": run.repeat,
        "passed": run.passed(),
        "total": total,
    })
}

async fn load_run(store: &RunStore, id: &str) -> anyhow::Result<EvalRun> {
    if id == "last" {
        return store
            .latest()
            .await?
            .ok_or_else(|| anyhow::anyhow!("no eval runs yet; start one with `flue eval`"));
    }
    Ok(store.load(id).await?)
}

async fn show(args: &EvalShowArgs) -> anyhow::Result<Exit> {
    let root = resolve_root(args.root.as_deref())?;
    let output = Output::for_workspace(&root)?;
    let store = run_store(&root, args.dev).await?;
    let run = load_run(&store, &args.run).await?;
    let comparison = match &run.baseline {
        Some(id) => store
            .load(id)
            .await
            .ok()
            .map(|before| flue_eval::compare(&before, &run)),
        None => None,
    };
    if args.json {
        outln!(
            "{}",
            output.json_pretty(&run_json(&run, comparison.as_deref()))?
        )?;
        return Ok(Exit::Success);
    }
    let mut text = format!("eval run {}\n", run.id);
    if run.finished_at.is_none() {
        let _ = writeln!(
            text,
            "unfinished: continue it with `flue eval --resume {}`",
            run.id
        );
    }
    text.push_str(&summary_table(&run, comparison.as_deref()));
    text.push_str(&failures_text(&run));
    out!("{}", output.stdout_text(&text))?;
    Ok(Exit::Success)
}

async fn diff(args: &EvalDiffArgs) -> anyhow::Result<Exit> {
    let root = resolve_root(args.root.as_deref())?;
    let output = Output::for_workspace(&root)?;
    let store = run_store(&root, args.dev).await?;
    let before = load_run(&store, &args.before).await?;
    let after = load_run(&store, &args.after).await?;
    let changes = flue_eval::compare(&before, &after);
    if args.json {
        outln!(
            "{}",
            output
                .json_pretty(&json!({"before": before.id, "after": after.id, "cases": changes}))?
        )?;
        return Ok(Exit::Success);
    }
    let width = changes
        .iter()
        .map(|change| change.case.chars().count())
        .chain([4])
        .max()
        .unwrap_or(4);
    let rate = |rate: Option<f64>| {
        rate.map_or_else(|| "-".to_owned(), |rate| format!("{:.0}%", rate * 100.0))
    };
    let mut out = format!(
        "{:<width$}  {:>8}  {:>8}  change\n",
        "case", "before", "after"
    );
    for change in &changes {
        let _ = writeln!(
            out,
            "{:<width$}  {:>8}  {:>8}  {}",
            change.case,
            rate(change.before),
            rate(change.after),
            change.change.as_str()
        );
    }
    out!("{}", output.stdout_text(&out))?;
    Ok(Exit::Success)
}
