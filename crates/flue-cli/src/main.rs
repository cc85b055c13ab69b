//! The `flue` binary: parse arguments, call the libraries, map errors to exit codes.
//!
//! Only this crate writes to stdout, and stdout carries only the final reply or the one JSON
//! object of `--json`. Everything else (activity, diagnostics, ids) goes to stderr.

mod approvals;
mod args;
mod audit;
mod build;
mod chat;
mod dev;
mod elicit;
mod eval;
mod history;
mod init;
mod input;
mod interrupt;
mod jsonl;
mod mcp;
mod mcp_serve;
mod memory;
mod pauses;
mod render;
mod run;
mod schedules;
mod serve;
mod session_delete;
mod session_list;
mod session_show;
mod setup;
mod shell;
mod stdout;
mod term;
mod terminal;
mod tools;
mod trash;
mod trust;
mod workspace;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command, McpCommand, MemoryCommand, SessionCommand, TrashCommand};

/// Exit codes, mapped in one place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exit {
    /// The operation completed.
    Success,
    /// The operation failed, or setup failed.
    Failure,
    /// Ctrl-C aborted the operation cleanly.
    Interrupted,
    /// SIGTERM aborted the operation cleanly.
    Terminated,
    /// The operation paused on tool calls that wait for a decision, and nobody could answer
    /// here (no terminal, no `--yes`): resume with `--confirm` or `--tool-result`.
    ActionRequired,
    /// The model refused, or ended its answer early for a reason that is not a normal end
    /// (content filter, full context window, a reason flue does not know).
    ModelStopped,
}

/// Makes this process non-dumpable from its first instruction, so that nothing it starts
/// (commands of the `local` sandbox, MCP stdio servers, command tools: our children, running as
/// the same user) can read our environment (`/proc/$PPID/environ`, where API keys live) or our
/// memory, and no core dump holds the keys. The local sandbox does the same when it is created
/// (for embedders) and also starts its commands without the capabilities that would let root
/// read a non-dumpable process anyway. Commands are dumpable again once they exec.
fn hide_own_environment() {
    // Only fails on kernels without prctl; nothing better to do there.
    let _ = nix::sys::prctl::set_dumpable(false);
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        match exit {
            Exit::Success => ExitCode::SUCCESS,
            Exit::Failure => ExitCode::from(1),
            Exit::Interrupted => ExitCode::from(130),
            Exit::Terminated => ExitCode::from(143),
            Exit::ActionRequired => ExitCode::from(3),
            Exit::ModelStopped => ExitCode::from(4),
        }
    }
}

fn main() -> ExitCode {
    hide_own_environment();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // `--help` and `--version` print to stdout and succeed; a usage error prints to
        // stderr and exits 1 like every other setup error (clap's own default is 2).
        Err(err) => {
            let _ = err.print();
            return if err.use_stderr() {
                Exit::Failure
            } else {
                Exit::Success
            }
            .into();
        }
    };
    trust::init(cli.trust);
    term::init(cli.color);
    // `flue serve` and `flue dev` serve many conversations, `flue eval` runs many cases: all
    // cores. Everything else: one thread.
    let serving = matches!(
        cli.command,
        Command::Serve(_)
            | Command::Dev(_)
            | Command::Eval(_)
            | Command::Mcp {
                command: McpCommand::Serve(_)
            }
    );
    let telemetry = init_telemetry(&cli.command);
    let mut builder = if serving {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return Exit::Failure.into();
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Run(run_args) => run::run(run_args).await,
            Command::Chat(chat_args) => chat::chat(chat_args).await,
            Command::Tools(tools_args) => tools::list(tools_args).await,
            Command::Build(build_args) => build::build(&build_args),
            Command::Schedules(schedules_args) => schedules::list(&schedules_args),
            Command::Session {
                command: SessionCommand::List(list_args),
            } => session_list::list(list_args).await,
            Command::Session {
                command: SessionCommand::Show(show_args),
            } => session_show::show(show_args).await,
            Command::Session {
                command: SessionCommand::Delete(delete_args),
            } => session_delete::delete(delete_args).await,
            Command::Session {
                command: SessionCommand::Fork(fork_args),
            } => history::fork(fork_args).await,
            Command::Audit(audit_args) => audit::show(audit_args).await,
            Command::Rewind(rewind_args) => history::rewind(rewind_args).await,
            Command::Memory {
                command: MemoryCommand::List(list_args),
            } => memory::list(list_args).await,
            Command::Memory {
                command: MemoryCommand::Delete(delete_args),
            } => memory::delete(delete_args).await,
            Command::Serve(serve_args) => serve::serve(serve_args).await,
            Command::Dev(dev_args) => dev::dev(dev_args).await,
            Command::Init(init_args) => init::init(&init_args),
            Command::Trust(trust_args) => trust::trust(&trust_args),
            Command::Trash {
                command: TrashCommand::List(list_args),
            } => trash::list(list_args).await,
            Command::Trash {
                command: TrashCommand::Restore(restore_args),
            } => trash::restore(restore_args).await,
            Command::Eval(eval_args) => eval::eval(eval_args).await,
            Command::Mcp {
                command: McpCommand::Serve(serve_args),
            } => mcp_serve::serve(serve_args).await,
            Command::Mcp {
                command: McpCommand::Login(login_args),
            } => mcp::login(&login_args).await,
            Command::Mcp {
                command: McpCommand::Logout(logout_args),
            } => mcp::logout(&logout_args),
            Command::Completions(completions_args) => shell::completions(&completions_args),
            Command::Man(man_args) => shell::man(&man_args),
        }
    });
    let exit = match result {
        Ok(exit) => exit,
        // The reader of stdout went away (`| head`): it had what it wanted.
        Err(err) if stdout::is_closed(&err) => Exit::Success,
        Err(err) => {
            let message = format!("{err:#}");
            eprintln!("error: {}", terminal::escape_controls(&message));
            Exit::Failure
        }
    };
    // A signal can end a command while the line editor has the terminal in raw mode.
    input::restore_terminal();
    // Tasks still running (open streams, blocking store calls) get a moment, not forever.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    // Spans and metrics still buffered go out before the process ends.
    telemetry.shutdown();
    // A closed stdout (e.g. `| head`) is not an error worth reporting.
    let _ = std::io::stdout().flush();
    exit.into()
}

/// `flue serve`'s log filter when `FLUE_LOG` is unset: flue's targets (`flue_*`, `flue::*`)
/// at info, every other crate at warn.
const SERVE_LOG_DEFAULT: &str = "warn,flue=info";

/// Logs on stderr filtered by `FLUE_LOG`, and OpenTelemetry export when
/// `OTEL_EXPORTER_OTLP_ENDPOINT` is set. Every command calls it once, at start: `serve` logs
/// at `info`, `dev` at `warn`; everything else logs nothing unless `FLUE_LOG` says so (a
/// provider's retries, timings, tokens and cost come from the event renderer).
pub(crate) fn init_telemetry(command: &Command) -> flue_telemetry::Telemetry {
    let options = if matches!(command, Command::Serve(_)) {
        // flue's own lines (one per request, settlement and problem) at info; libraries only
        // when something is wrong (the MCP library logs whole server greetings at info).
        flue_telemetry::LogOptions::new(SERVE_LOG_DEFAULT)
    } else if matches!(
        command,
        Command::Mcp {
            command: McpCommand::Serve(_)
        }
    ) {
        // `flue mcp serve` keeps stdout for the protocol; stderr (a client's log) gets flue's
        // warnings (the MCP library's own warn about each refused call, which the client sees).
        flue_telemetry::LogOptions::new("warn,rmcp=error")
    } else if matches!(command, Command::Dev(_)) {
        // `flue dev` keeps the terminal for reloads and diagnostics: warnings only by default.
        flue_telemetry::LogOptions::new("warn")
    } else {
        flue_telemetry::LogOptions::new("off")
    };
    let telemetry = flue_telemetry::Telemetry::init(&options);
    for warning in telemetry.warnings() {
        eprintln!("warning: {}", terminal::escape_controls(warning));
    }
    telemetry
}
