//! Writing to stdout: a reader that went away (`| head`) ends the command quietly.
//!
//! `println!` panics when stdout is a closed pipe. Resetting SIGPIPE to its default would end
//! the process instead, but also on a write to a hook's or a tool's pipe, where a closed pipe is
//! an error to report. So only stdout's writes map EPIPE to [`StdoutClosed`], which `main`
//! turns into the command's success, like the end of a reader's interest it is.

use std::fmt::Arguments;
use std::io::Write;

/// Writes formatted text to stdout; `?` it in a command.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::stdout::write(format_args!($($arg)*))
    };
}

/// Writes formatted text and a newline to stdout; `?` it in a command.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::stdout::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// Stdout is a pipe whose reader closed it: nobody reads the rest, and nothing went wrong.
#[derive(Debug)]
pub(crate) struct StdoutClosed;

impl std::fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stdout was closed")
    }
}

impl std::error::Error for StdoutClosed {}

/// Writes `args` to stdout and flushes it (the reply must reach a pipe before a long wait).
pub(crate) fn write(args: Arguments<'_>) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_fmt(args).and_then(|()| stdout.flush()) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Err(StdoutClosed.into()),
        Err(err) => Err(anyhow::Error::new(err).context("cannot write to stdout")),
    }
}

/// Whether `err` is stdout's reader going away rather than a failure.
pub(crate) fn is_closed(err: &anyhow::Error) -> bool {
    err.chain().any(<dyn std::error::Error>::is::<StdoutClosed>)
}

pub(crate) use {out, outln};
