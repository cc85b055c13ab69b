//! `flue completions` and `flue man`: a shell completion script and the man pages, generated
//! from the same clap definitions that parse the command line (so they never drift from it).

use std::io::Write;

use anyhow::Context;
use clap::CommandFactory;

use crate::Exit;
use crate::args::{Cli, CompletionsArgs, ManArgs};

/// Prints the completion script for `args.shell` to stdout.
pub(crate) fn completions(args: &CompletionsArgs) -> anyhow::Result<Exit> {
    let mut command = Cli::command();
    // Generated into memory first: clap_complete panics on a failed write (`| head`).
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "flue", &mut script);
    print_bytes(&script).context("cannot write the completion script")?;
    Ok(Exit::Success)
}

/// Prints `flue.1` to stdout, or writes it and one page per subcommand into `--dir`.
pub(crate) fn man(args: &ManArgs) -> anyhow::Result<Exit> {
    let command = Cli::command();
    let Some(dir) = &args.dir else {
        let mut page = Vec::new();
        clap_mangen::Man::new(command)
            .render(&mut page)
            .context("cannot render the man page")?;
        print_bytes(&page).context("cannot write the man page")?;
        return Ok(Exit::Success);
    };
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    clap_mangen::generate_to(command, dir)
        .with_context(|| format!("cannot write the man pages into {}", dir.display()))?;
    eprintln!("wrote the man pages into {}", dir.display());
    Ok(Exit::Success)
}

/// Writes `bytes` to stdout; a reader that stopped early (`| head`) is not an error.
fn print_bytes(bytes: &[u8]) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}
