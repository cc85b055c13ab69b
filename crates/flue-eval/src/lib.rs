//! flue-eval: evals for Flue agents. Case files (`evals/*.yaml`) say what to send an agent
//! and what must hold after; [`run`] sends each case to a conversation of its own through the
//! durable runtime, checks the reply, the structured result, the tool calls, the sandbox's
//! files and the limits, asks command scorers and model judges, and keeps the run as a record
//! of the workspace's store for listing, comparing and resuming.
//!
//! Map of the main types:
//! - case files: [`discover`], [`load`], [`Case`], [`Expect`] and its parts; problems as
//!   [`CaseFileError`] (each with file and line)
//! - running: [`run`] with [`EvalOptions`], told about progress through [`Progress`]
//! - results: [`EvalRun`], [`CaseRun`], [`Check`], [`Transcript`] (what a scorer reads)
//! - reports: [`EvalRun::summary`] ([`Stats`]), [`compare`] ([`CaseChange`]), [`junit`]
//! - stored runs: [`RunStore`]
//! - recorded model traffic: [`Cassette`] (record a run, replay it with no key or network)

// Only the binaries write to the terminal: flue-cli's stdout is a JSON contract, and an
// embedding application owns its own output.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod assertion;
mod case_file;
mod cassette;
mod report;
mod runner;
mod scorer;
mod store;
mod transcript;
mod yaml;

pub use assertion::Check;
pub use case_file::{
    Case, CaseFileError, CommandScorer, EVALS_DIR, Expect, FileExpect, Judge, ToolCallExpect,
    discover, load, parse,
};
pub use cassette::{Cassette, CassetteError};
pub use report::{CaseChange, CaseRun, Change, EvalRun, Stats, case_key, compare, junit};
pub use runner::{EvalError, EvalOptions, Progress, run};
pub use store::{RUNS_DIR, RunStore, RunStoreError};
pub use transcript::{CallRecord, Transcript};
