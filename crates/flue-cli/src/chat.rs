//! `flue chat`: an interactive loop over one conversation.
//!
//! Each line typed is one message, admitted through the same submission runtime as `flue run`
//! (so the history is the conversation's, in the workspace store, and `flue run --id` or
//! `flue session show` see it). The reply streams as it is written (to stdout on a terminal);
//! Ctrl-C aborts the reply being written and returns to the prompt, the conversation kept.
//! Ctrl-D (end of input), `/exit` or SIGTERM end the chat. The chat loop and the questions a
//! reply asks (approvals, custom tool results, MCP servers' questions) take their lines from
//! the one stdin reader ([`crate::input`]).

use std::io::{IsTerminal as _, Write as _};

use flue_core::Outcome;

use crate::Exit;
use crate::args::{ChatArgs, RunArgs};
use crate::interrupt::{Interrupt, Interrupts};
use crate::run::{
    Finished, Prepared, Settled, connection_hint, discarded_edits_notice, prepare, submit,
};
use crate::terminal::Output;

/// Runs `flue chat`.
pub(crate) async fn chat(args: ChatArgs) -> anyhow::Result<Exit> {
    let mut run_args = RunArgs {
        agent: args.agent.clone(),
        root: args.root.clone(),
        id: args.id.clone(),
        continue_last: args.continue_last,
        model: args.model.clone(),
        allow_unknown_model: args.allow_unknown_model,
        env_file: args.env_file.clone(),
        sandbox: args.sandbox,
        bundle: args.bundle.clone(),
        role: args.role.clone(),
        verbose: args.verbose,
        budget: args.budget.clone(),
        memory_subject: args.memory_subject.clone(),
        ..RunArgs::default()
    };
    let mut interrupts = Interrupts::watch();
    let prepared = prepare(&run_args).await?;
    let output = Output::new(
        flue_core::Redactor::new(prepared.host.agents().env().secrets()).unwrap_or_default(),
    );
    eprintln!(
        "chatting with {} in conversation {} (Ctrl-C aborts a reply; Ctrl-D or /exit ends the \
         chat; continue it later with `flue chat {} --id {}`)",
        prepared.key.agent, prepared.key.id, prepared.key.agent, prepared.key.id
    );
    let exit = loop {
        prompt();
        let line = tokio::select! {
            line = crate::input::line() => line,
            signalled = interrupts.next() => match signalled {
                Interrupt::CtrlC => {
                    eprintln!("\n(Ctrl-D or /exit ends the chat)");
                    continue;
                }
                Interrupt::Terminate => break Exit::Terminated,
            },
        };
        let Some(line) = line else {
            eprintln!();
            break Exit::Success;
        };
        let message = line.trim();
        if message.is_empty() {
            continue;
        }
        if matches!(message, "/exit" | "/quit") {
            break Exit::Success;
        }
        run_args.message = Some(message.to_owned());
        if let Some(exit) = turn(&run_args, &prepared, &output, &mut interrupts).await {
            break exit;
        }
    };
    let Prepared { app, .. } = prepared;
    for warning in app.close().await {
        eprintln!("warning: {}", output.stderr_text(&warning));
    }
    Ok(exit)
}

/// One message and its reply; `Some(exit)` when the chat should end (SIGTERM).
async fn turn(
    run_args: &RunArgs,
    prepared: &Prepared,
    output: &Output,
    interrupts: &mut Interrupts,
) -> Option<Exit> {
    let started_at = flue_core::util::now_ms();
    let (_, finished, interrupt, streamed) =
        match submit(run_args, prepared, output, interrupts).await {
            Ok(done) => done,
            Err(err) => {
                eprintln!("error: {}", output.stderr_text(&err.to_string()));
                return None;
            }
        };
    let settlement = match finished {
        Finished::Settled(Settled { settlement, .. }) => settlement,
        Finished::Waiting { pending, .. } => {
            let hint = crate::pauses::resume_hint(&prepared.key.agent, &prepared.key.id, &pending);
            eprintln!("{}", output.stderr_text(&hint));
            return None;
        }
    };
    match settlement.outcome {
        Outcome::Completed => {
            let text = settlement.text.unwrap_or_default();
            // Streamed to stdout on a terminal already, unless what streamed was not this reply;
            // a structured result (the agent's `result:`) is its validated JSON.
            let shown_already = std::io::stdout().is_terminal() && streamed.trim() == text.trim();
            if let Some(data) = &settlement.data {
                println!("{}", serde_json::to_string_pretty(data).unwrap_or_default());
                let _ = std::io::stdout().flush();
            } else if !shown_already {
                println!(
                    "{}",
                    output.stdout_text(&text).trim_end_matches(['\n', '\r'])
                );
                let _ = std::io::stdout().flush();
            }
            discarded_edits_notice(&prepared.host, &prepared.key, run_args.sandbox, started_at)
                .await;
        }
        Outcome::Aborted => {
            eprintln!("(reply aborted; the conversation goes on)");
        }
        _ => {
            let message = settlement
                .error
                .map_or_else(|| "the message failed".to_owned(), |error| error.message);
            eprintln!("error: {}", output.stderr_text(&message));
            if let Some(hint) = connection_hint(&prepared.host.agents(), &message) {
                eprintln!("hint: {}", output.stderr_text(&hint));
            }
        }
    }
    match interrupt {
        Some(Interrupt::Terminate) => Some(Exit::Terminated),
        _ => None,
    }
}

/// The prompt, on stderr (stdout carries only replies).
fn prompt() {
    let mut stderr = std::io::stderr().lock();
    let _ = write!(stderr, "> ");
    let _ = stderr.flush();
}
