//! `flue chat`: an interactive loop over one conversation.
//!
//! Each input is one message (on a terminal, read with a line editor: history kept per
//! workspace in `.flue/chat-history`, a line ending in `\` continued, a paste kept whole), admitted through the same submission runtime as `flue run`
//! (so the history is the conversation's, in the workspace store, and `flue run --id` or
//! `flue session show` see it). The reply streams as it is written (to stdout on a terminal);
//! Ctrl-C aborts the reply being written and returns to the prompt, the conversation kept.
//! While tasks of the reply run, the status line lists them, and on a terminal `/tasks` lists
//! them and `/abort N` aborts one alone (its parent goes on).
//! Ctrl-D (end of input), `/exit` or SIGTERM end the chat. The chat loop and the questions a
//! reply asks (approvals, custom tool results, MCP servers' questions) take their lines from
//! the one stdin reader ([`crate::input`]). A line starting with `/` is a command of the chat
//! ([`commands`]), never a message.

mod acts;
mod commands;

use std::io::IsTerminal as _;

use flue_core::{MessageOptions, Outcome, ThinkingLevel, Usage};

use crate::Exit;
use crate::args::{ChatArgs, RunArgs};
use crate::input::ChatLine;
use crate::interrupt::{Interrupt, Interrupts};
use crate::run::{
    Finished, Prepared, Settled, Typing, connection_hint, discarded_edits_notice, prepare,
    submit_with,
};
use crate::stdout::outln;
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
    let mut prepared = prepare(&run_args).await?;
    // Commands that restart the runtime keep to this conversation unless they say otherwise.
    run_args.id = Some(prepared.key.id.clone());
    run_args.continue_last = false;
    let mut output = chat_output(&prepared);
    eprintln!(
        "chatting with {} in conversation {} (Ctrl-C aborts a reply; Ctrl-D or /exit ends the \
         chat; /help lists the commands; continue it later with `flue chat {} --id {}`)",
        prepared.key.agent, prepared.key.id, prepared.key.agent, prepared.key.id
    );
    let history = crate::input::is_interactive().then(|| {
        prepared
            .host
            .agents()
            .root()
            .join(".flue")
            .join("chat-history")
    });
    let mut usage = Usage::default();
    let mut thinking: Option<ThinkingLevel> = None;
    let exit = loop {
        let line = tokio::select! {
            line = crate::input::chat_line("> ", history.clone()) => line,
            signalled = interrupts.next() => match signalled {
                Interrupt::CtrlC => {
                    eprintln!("\n(Ctrl-D or /exit ends the chat)");
                    continue;
                }
                Interrupt::Terminate => break Exit::Terminated,
            },
        };
        let line = match line {
            ChatLine::Line(line) => line,
            ChatLine::Interrupted => {
                eprintln!("(Ctrl-D or /exit ends the chat)");
                continue;
            }
            ChatLine::End => {
                eprintln!();
                break Exit::Success;
            }
        };
        let message = line.trim();
        if message.is_empty() {
            continue;
        }
        let message = match commands::parse(message) {
            commands::Input::Message(message) => message,
            commands::Input::Command { name, argument } => {
                let rules = commands::Rules {
                    runtime: prepared.app.runtime(),
                    key: &prepared.key,
                };
                let ctx = commands::Context {
                    run_args: &mut run_args,
                    thinking: &mut thinking,
                    prepared: &prepared,
                    output: &output,
                    usage: &usage,
                    rules: &rules,
                };
                let next = commands::run(&name, &argument, ctx).await;
                match next {
                    commands::Next::Prompt => continue,
                    commands::Next::Exit => break Exit::Success,
                    commands::Next::Restart => {
                        prepared = restart(prepared, &mut run_args, &output).await?;
                        output = chat_output(&prepared);
                        continue;
                    }
                }
            }
        };
        run_args.message = Some(message);
        let options = thinking.map_or_else(MessageOptions::default, |level| {
            MessageOptions::default().with_thinking(level)
        });
        let (exit, used) = turn(&run_args, options, &prepared, &output, &mut interrupts).await;
        usage += used;
        if let Some(exit) = exit {
            break exit;
        }
    };
    let Prepared { app, .. } = prepared;
    for warning in app.close().await {
        eprintln!("warning: {}", output.stderr_text(&warning));
    }
    Ok(exit)
}

/// What the chat prints through: the workspace's secrets redacted.
fn chat_output(prepared: &Prepared) -> Output {
    Output::new(
        flue_core::Redactor::new(prepared.host.agents().env().secrets()).unwrap_or_default(),
    )
}

/// Closes the chat's runtime and starts it again with `run_args` (a new conversation, model or
/// role); when that fails, with what it had before.
async fn restart(
    prepared: Prepared,
    run_args: &mut RunArgs,
    output: &Output,
) -> anyhow::Result<Prepared> {
    let Prepared { app, key, .. } = prepared;
    for warning in app.close().await {
        eprintln!("warning: {}", output.stderr_text(&warning));
    }
    match prepare(run_args).await {
        Ok(prepared) => {
            run_args.id = Some(prepared.key.id.clone());
            eprintln!(
                "now: conversation {}, model {}, role {}",
                prepared.key.id,
                run_args.model.as_deref().unwrap_or("the agent's own"),
                run_args.role.as_deref().unwrap_or("none")
            );
            Ok(prepared)
        }
        Err(err) => {
            eprintln!("error: {}", output.stderr_text(&err.to_string()));
            run_args.id = Some(key.id);
            run_args.model = None;
            run_args.role = None;
            Ok(prepare(run_args).await?)
        }
    }
}

/// What a line typed during a reply does: on a terminal, while tasks run, `/tasks` and
/// `/abort N` answer at once; piped input is the next messages and waits its turn.
fn typing() -> Typing {
    if crate::input::is_interactive() {
        Typing::TaskCommands
    } else {
        Typing::Ignored
    }
}

/// One message (run with `options`) and its reply; `Some(exit)` when the chat should end
/// (SIGTERM), and the usage of its model turns.
async fn turn(
    run_args: &RunArgs,
    options: MessageOptions,
    prepared: &Prepared,
    output: &Output,
    interrupts: &mut Interrupts,
) -> (Option<Exit>, Usage) {
    let started_at = flue_core::util::now_ms();
    let (_, finished, interrupt, streamed) =
        match submit_with(run_args, options, prepared, output, interrupts, typing()).await {
            Ok(done) => done,
            Err(err) => {
                eprintln!("error: {}", output.stderr_text(&err.to_string()));
                return (None, Usage::default());
            }
        };
    let (settlement, usage) = match finished {
        Finished::Settled(Settled {
            settlement, usage, ..
        }) => (settlement, usage),
        Finished::Waiting { pending, usage } => {
            let hint = crate::pauses::resume_hint(&prepared.key.agent, &prepared.key.id, &pending);
            eprintln!("{}", output.stderr_text(&hint));
            return (None, usage);
        }
    };
    match settlement.outcome {
        Outcome::Completed => {
            let text = settlement.text.unwrap_or_default();
            // Streamed to stdout on a terminal already, unless what streamed was not this reply;
            // a structured result (the agent's `result:`) is its validated JSON.
            let shown_already = std::io::stdout().is_terminal() && streamed.trim() == text.trim();
            if let Some(data) = &settlement.data {
                // A reader that left does not end the conversation (stdin still talks).
                let _ = outln!("{}", serde_json::to_string_pretty(data).unwrap_or_default());
            } else if !shown_already {
                let _ = outln!(
                    "{}",
                    output.stdout_text(&text).trim_end_matches(['\n', '\r'])
                );
            }
            discarded_edits_notice(&prepared.host, &prepared.key, run_args.sandbox, started_at)
                .await;
        }
        Outcome::Aborted => {
            if streamed.is_empty() {
                eprintln!("(reply aborted; the conversation goes on)");
            } else {
                eprintln!(
                    "(reply aborted; the conversation goes on, and keeps the reply so far as \
                     interrupted)"
                );
            }
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
    let exit = match interrupt {
        Some(Interrupt::Terminate) => Some(Exit::Terminated),
        _ => None,
    };
    (exit, usage)
}
