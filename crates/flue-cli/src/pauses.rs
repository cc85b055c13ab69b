//! Answering pending actions in `flue run` and `flue chat`: `--yes` approves confirmations, a
//! terminal asks the person (yes, always for this conversation, or no with a reason per
//! confirmation; a JSON result per custom tool; the end of input answers no), and a headless
//! run leaves them pending and says how to resume. "Always" is answered as
//! [`ActionDecision::AllowAlways`]: the runtime keeps it as a standing rule of the
//! conversation and approves the tool's later calls itself.

use std::io::IsTerminal;

use flue_core::{ActionDecision, record::ActionKind, record::PendingAction};
use serde_json::Value;

use crate::input::Reply;
use crate::terminal::Output;

/// Who answers the pending actions of this run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answerer {
    /// `--yes`: every confirmation is allowed; custom tools stay pending.
    Yes,
    /// A person at the terminal (stdin and stderr are terminals).
    Terminal,
    /// Nobody: the run ends with `requires_action`.
    Nobody,
}

impl Answerer {
    /// The answerer for this run.
    pub(crate) fn for_run(yes: bool) -> Self {
        if yes {
            Self::Yes
        } else if std::io::stdin().is_terminal() && std::io::stderr().is_terminal() {
            Self::Terminal
        } else {
            Self::Nobody
        }
    }

    /// The decision on `action`, or `None` when it stays pending.
    pub(crate) async fn answer(
        self,
        action: &PendingAction,
        output: &Output,
    ) -> Option<ActionDecision> {
        match (self, action.kind) {
            (Self::Yes, ActionKind::Confirmation) => {
                eprintln!(
                    "{}",
                    output.stderr_text(&format!(
                        "allowing {} ({}) (--yes)",
                        action.tool_name, action.action_id
                    ))
                );
                Some(ActionDecision::Allow)
            }
            (Self::Terminal, _) => {
                let question = question(action);
                let reply = match crate::input::ask(&output.stderr_text(&question)).await {
                    Reply::Line(line) => line,
                    // Ctrl-D (or a withdrawn question): no.
                    Reply::End | Reply::Cancelled => {
                        eprintln!();
                        String::new()
                    }
                };
                Some(decision(action.kind, &reply))
            }
            _ => None,
        }
    }
}

/// What the terminal shows for one action.
fn question(action: &PendingAction) -> String {
    let input = serde_json::to_string(&action.input).unwrap_or_default();
    // The reason was on the line announcing the pause; the id is for `--confirm` only.
    let prompt = match action.kind {
        ActionKind::CustomTool => "result as JSON (empty to decline): ",
        _ => "allow? [y/N] (a: always in this conversation; other text: no, with that reason) ",
    };
    format!("\n{} wants to run: {input}\n{prompt}", action.tool_name)
}

/// The decision a typed reply means: `y`/`yes` allows a confirmation, anything else denies
/// it; a custom tool takes the reply as JSON (text that is not JSON as a string), and an
/// empty reply declines it.
fn decision(kind: ActionKind, reply: &str) -> ActionDecision {
    let reply = reply.trim();
    let denied = ActionDecision::Deny {
        message: Some("declined at the terminal".to_owned()),
    };
    match kind {
        ActionKind::CustomTool if reply.is_empty() => denied,
        ActionKind::CustomTool => ActionDecision::Result {
            value: serde_json::from_str(reply).unwrap_or_else(|_| Value::String(reply.to_owned())),
            is_error: false,
        },
        _ if is_always(reply) => ActionDecision::AllowAlways,
        _ if matches!(reply.to_ascii_lowercase().as_str(), "y" | "yes") => ActionDecision::Allow,
        _ if reply.is_empty() || matches!(reply.to_ascii_lowercase().as_str(), "n" | "no") => {
            denied
        }
        // Anything else is a no with the person's words for the model.
        _ => ActionDecision::Deny {
            message: Some(format!("declined at the terminal: {reply}")),
        },
    }
}

/// Whether a reply means "always for this conversation".
fn is_always(reply: &str) -> bool {
    matches!(reply.trim().to_ascii_lowercase().as_str(), "a" | "always")
}

/// The lines telling how to resume a run that stopped with pending actions.
pub(crate) fn resume_hint(agent: &str, id: &str, pending: &[PendingAction]) -> String {
    let mut text = String::from("the conversation waits for decisions:");
    for action in pending {
        let input = serde_json::to_string(&action.input).unwrap_or_default();
        text.push_str(&format!(
            "\n  {}: {} {input} ({})",
            action.action_id, action.tool_name, action.reason
        ));
        let command = match action.kind {
            ActionKind::CustomTool => format!(
                "flue run {agent} --id {id} --confirm {} --result JSON",
                action.action_id
            ),
            _ => format!(
                "flue run {agent} --id {id} --confirm {} [--deny MESSAGE]",
                action.action_id
            ),
        };
        text.push_str(&format!("\n    resume: {command}"));
    }
    text
}

#[cfg(test)]
mod tests;
