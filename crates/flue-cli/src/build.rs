//! `flue build`: discovery, validation, and one self-contained bundle file.

use anyhow::Context;
use flue_build::Bundle;

use crate::Exit;
use crate::args::BuildArgs;
use crate::workspace::resolve_root;

/// Runs `flue build`: prints every problem to stderr, or the bundle's path to stdout.
pub(crate) fn build(args: &BuildArgs) -> anyhow::Result<Exit> {
    let root = resolve_root(args.root.as_deref())?;
    let bundle = match Bundle::build(&root) {
        Ok(bundle) => bundle,
        Err(diagnostics) => {
            eprintln!("{diagnostics}");
            let count = diagnostics.as_slice().len();
            let noun = if count == 1 { "problem" } else { "problems" };
            eprintln!("error: build failed with {count} {noun}");
            return Ok(Exit::Failure);
        }
    };
    let out = args.out.clone().unwrap_or_else(|| root.join("dist"));
    let path = bundle
        .write(&out)
        .with_context(|| format!("cannot write the bundle to {}", out.display()))?;
    let workspace = bundle.workspace();
    for note in workspace.notes() {
        eprintln!("note: {note}");
    }
    eprintln!(
        "built {} agent(s), {} skill(s), {} role(s); {}",
        workspace.agents.len(),
        workspace.skills.len(),
        workspace.roles.len(),
        bundle.digest()
    );
    println!("{}", path.display());
    Ok(Exit::Success)
}
