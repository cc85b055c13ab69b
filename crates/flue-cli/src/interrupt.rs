//! Ctrl-C and SIGTERM as values a command waits on next to its work: a running operation is
//! aborted (the conversation kept) instead of the process ending mid-write.

use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::Exit;

/// A signal that ends the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Interrupt {
    /// SIGINT (Ctrl-C): exit code 130.
    CtrlC,
    /// SIGTERM: exit code 143.
    Terminate,
}

impl Interrupt {
    pub(crate) fn exit(self) -> Exit {
        match self {
            Self::CtrlC => Exit::Interrupted,
            Self::Terminate => Exit::Terminated,
        }
    }

    pub(crate) fn describe(self) -> &'static str {
        match self {
            Self::CtrlC => "interrupted",
            Self::Terminate => "terminated (SIGTERM)",
        }
    }
}

/// Listens for Ctrl-C (SIGINT) and SIGTERM; once created, neither ends the process by itself,
/// and a signal arriving between two calls of [`Interrupts::next`] is kept for the next one.
pub(crate) struct Interrupts {
    ctrl_c: Option<Signal>,
    terminate: Option<Signal>,
}

impl Interrupts {
    pub(crate) fn watch() -> Self {
        // A handler that cannot be installed leaves that signal its default action.
        Self {
            ctrl_c: signal(SignalKind::interrupt()).ok(),
            terminate: signal(SignalKind::terminate()).ok(),
        }
    }

    /// The next signal; pending forever if none can be received.
    pub(crate) async fn next(&mut self) -> Interrupt {
        tokio::select! {
            () = next_of(self.ctrl_c.as_mut()) => Interrupt::CtrlC,
            () = next_of(self.terminate.as_mut()) => Interrupt::Terminate,
        }
    }
}

/// Waits for the next delivery of `signal`; forever without one.
async fn next_of(signal: Option<&mut Signal>) {
    match signal {
        Some(signal) => {
            if signal.recv().await.is_none() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending::<()>().await,
    }
}
