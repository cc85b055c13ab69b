//! `flue build`: discovery, validation, and one self-contained bundle file.

use anyhow::Context;
use flue_build::{Bundle, Diagnostic, Diagnostics};
use serde_json::{Value, json};

use crate::Exit;
use crate::args::BuildArgs;
use crate::stdout::outln;
use crate::workspace::resolve_root;

/// Runs `flue build`: prints every problem to stderr, or the bundle's path to stdout; with
/// `--json`, either as one JSON object on stdout.
pub(crate) fn build(args: &BuildArgs) -> anyhow::Result<Exit> {
    let root = resolve_root(args.root.as_deref())?;
    let bundle = match Bundle::build(&root) {
        Ok(bundle) => bundle,
        Err(diagnostics) => {
            report_problems(&diagnostics, args.json);
            return Ok(Exit::Failure);
        }
    };
    let out = args.out.clone().unwrap_or_else(|| root.join("dist"));
    let path = bundle
        .write(&out)
        .with_context(|| format!("cannot write the bundle to {}", out.display()))?;
    let workspace = bundle.workspace();
    let notes = workspace.notes();
    if args.json {
        let built = json!({
            "ok": true,
            "bundle": path.display().to_string(),
            "digest": bundle.digest(),
            "agents": workspace.agents.keys().collect::<Vec<_>>(),
            "skills": workspace.skills.keys().collect::<Vec<_>>(),
            "roles": workspace.roles.keys().collect::<Vec<_>>(),
            "notes": notes.iter().map(problem_json).collect::<Vec<_>>(),
        });
        outln!("{built:#}")?;
        return Ok(Exit::Success);
    }
    for note in notes {
        eprintln!("note: {note}");
    }
    eprintln!(
        "built {} agent(s), {} skill(s), {} role(s); {}",
        workspace.agents.len(),
        workspace.skills.len(),
        workspace.roles.len(),
        bundle.digest()
    );
    outln!("{}", path.display())?;
    Ok(Exit::Success)
}

/// Every problem: one line each and a count on stderr, or `{"ok": false, "problems"}` on stdout.
fn report_problems(diagnostics: &Diagnostics, as_json: bool) {
    if as_json {
        let problems: Vec<Value> = diagnostics.as_slice().iter().map(problem_json).collect();
        // The build failed either way; a closed stdout changes nothing.
        let _ = outln!("{:#}", json!({"ok": false, "problems": problems}));
        return;
    }
    eprintln!("{diagnostics}");
    let count = diagnostics.as_slice().len();
    let noun = if count == 1 { "problem" } else { "problems" };
    eprintln!("error: build failed with {count} {noun}");
}

/// A problem or note as `--json` prints it.
fn problem_json(problem: &Diagnostic) -> Value {
    json!({"path": problem.path, "line": problem.line, "message": problem.message})
}
