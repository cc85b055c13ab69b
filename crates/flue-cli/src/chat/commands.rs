//! The chat's slash commands: handled here, never sent to the model.
//!
//! A line starting with `/` is a command; an unknown one is an error (a message that starts
//! with a slash is sent by doubling it: `//etc` sends `/etc`). Commands that change what the
//! conversation runs with (`/new`, `/model`, `/role`) restart the chat's runtime on the same
//! workspace; the others show what the chat knows or how to do it from the command line.

use flue_core::{AgentRuntime, ConversationKey, Usage};

use crate::args::{RunArgs, ToolsArgs};
use crate::render::usage_text;
use crate::term::editor::COMMANDS;

/// The conversation whose standing approvals `/tools` lists and revokes.
pub(crate) struct Rules<'a> {
    pub(crate) runtime: &'a AgentRuntime,
    pub(crate) key: &'a ConversationKey,
}

/// What a typed line is.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Input {
    /// A message for the model.
    Message(String),
    /// A slash command and its argument (trimmed, maybe empty).
    Command { name: String, argument: String },
}

/// What the chat does after a command.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// Back to the prompt.
    Prompt,
    /// Restart the runtime with the changed arguments (`/new`, `/model`, `/role`).
    Restart,
    /// End the chat.
    Exit,
}

/// What a typed line means.
pub(crate) fn parse(line: &str) -> Input {
    if let Some(message) = line.strip_prefix("//") {
        return Input::Message(format!("/{message}"));
    }
    match line.strip_prefix('/') {
        Some(rest) => {
            let (name, argument) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
            Input::Command {
                name: format!("/{name}"),
                argument: argument.trim().to_owned(),
            }
        }
        None => Input::Message(line.to_owned()),
    }
}

/// Runs one command; `run_args` is what the next restart uses, `usage` this chat's so far.
pub(crate) async fn run(
    name: &str,
    argument: &str,
    run_args: &mut RunArgs,
    conversation: &str,
    usage: &Usage,
    rules: &Rules<'_>,
) -> Next {
    match name {
        "/help" => {
            for (command, what) in COMMANDS {
                eprintln!("  {command:<10} {what}");
            }
            eprintln!("  a line ending in \\ continues on the next; //text sends /text");
            Next::Prompt
        }
        "/exit" | "/quit" => Next::Exit,
        "/new" => {
            run_args.id = None;
            run_args.continue_last = false;
            Next::Restart
        }
        "/model" if argument.is_empty() => {
            let model = run_args.model.as_deref().unwrap_or("the agent's own");
            eprintln!("model: {model} (`/model PROVIDER/MODEL` switches)");
            Next::Prompt
        }
        "/model" => {
            run_args.model = Some(argument.to_owned());
            Next::Restart
        }
        "/role" if argument.is_empty() => {
            let role = run_args.role.as_deref().unwrap_or("none");
            eprintln!("role: {role} (`/role ROLE` switches, `/role -` drops it)");
            Next::Prompt
        }
        "/role" => {
            run_args.role = (argument != "-").then(|| argument.to_owned());
            Next::Restart
        }
        "/cost" => {
            eprintln!("this chat so far: {}", usage_text(usage));
            Next::Prompt
        }
        "/tools" if argument.starts_with("revoke") => {
            let what = argument.trim_start_matches("revoke").trim();
            if what.is_empty() {
                eprintln!("`/tools revoke TOOL` or `/tools revoke RULE_ID` (`/tools` lists them)");
            } else {
                crate::approvals::revoke(rules.runtime, rules.key, what).await;
            }
            Next::Prompt
        }
        "/tools" => {
            let tools = ToolsArgs {
                agent: run_args.agent.clone(),
                root: run_args.root.clone(),
                env_file: run_args.env_file.clone(),
                bundle: run_args.bundle.clone(),
                json: false,
            };
            if let Err(err) = crate::tools::list(tools).await {
                eprintln!(
                    "error: {}",
                    crate::terminal::escape_controls(&format!("{err:#}"))
                );
            }
            crate::approvals::print_rules(rules.runtime, rules.key).await;
            Next::Prompt
        }
        "/session" => {
            eprintln!(
                "conversation {conversation} of agent {agent}: `flue session show --id \
                 {conversation}` shows it, `flue chat {agent} --id {conversation}` continues it",
                agent = run_args.agent
            );
            Next::Prompt
        }
        "/fork" => {
            eprintln!(
                "not inside the chat yet: `flue session fork --id {conversation}` copies this \
                 conversation, then `flue chat {} --id NEW_ID` continues the copy",
                run_args.agent
            );
            Next::Prompt
        }
        "/rewind" => {
            eprintln!(
                "not inside the chat yet: `flue rewind --id {conversation}` puts the \
                 workspace's files back as they were before a turn"
            );
            Next::Prompt
        }
        "/compact" => {
            eprintln!(
                "not inside the chat yet: the conversation is compacted by itself near the \
                 model's context window"
            );
            Next::Prompt
        }
        "/thinking" => {
            eprintln!(
                "not inside the chat yet: the thinking level is the agent's `thinking:` (or a \
                 role's: `/role ROLE` switches to one)"
            );
            Next::Prompt
        }
        _ => {
            eprintln!(
                "error: unknown command {}; /help lists the commands (//text sends /text)",
                crate::terminal::escape_controls(name)
            );
            Next::Prompt
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Input, parse};

    #[test]
    fn a_slash_starts_a_command_and_a_double_slash_a_message() {
        assert_eq!(
            parse("/model  local/m "),
            Input::Command {
                name: "/model".to_owned(),
                argument: "local/m".to_owned()
            }
        );
        assert_eq!(
            parse("//etc/hosts"),
            Input::Message("/etc/hosts".to_owned())
        );
        assert_eq!(parse("hi /there"), Input::Message("hi /there".to_owned()));
    }
}
