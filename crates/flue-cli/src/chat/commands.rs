//! The chat's slash commands: handled here, never sent to the model.
//!
//! A line starting with `/` is a command; an unknown one is an error (a message that starts
//! with a slash is sent by doubling it: `//etc` sends `/etc`). Commands that change what the
//! conversation runs with (`/new`, `/model`, `/role`, `/fork`) restart the chat's runtime on
//! the same workspace; `/thinking` sets the level of the next messages; `/rewind` and
//! `/compact` act on the conversation ([`super::acts`]); the others show what the chat knows.

use flue_core::{AgentRuntime, ConversationKey, ThinkingLevel, Usage};

use crate::args::{RunArgs, ToolsArgs};
use crate::render::usage_text;
use crate::run::Prepared;
use crate::term::editor::COMMANDS;
use crate::terminal::Output;

/// What a command works on: the chat's arguments and state, and its running conversation.
pub(crate) struct Context<'a> {
    /// What the next restart uses.
    pub(crate) run_args: &'a mut RunArgs,
    /// The thinking level of the next messages (`None`: the agent's).
    pub(crate) thinking: &'a mut Option<ThinkingLevel>,
    pub(crate) prepared: &'a Prepared,
    pub(crate) output: &'a Output,
    /// This chat's usage so far.
    pub(crate) usage: &'a Usage,
    pub(crate) rules: &'a Rules<'a>,
}

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

/// Runs one command.
pub(crate) async fn run(name: &str, argument: &str, ctx: Context<'_>) -> Next {
    let Context {
        run_args,
        thinking,
        prepared,
        output,
        usage,
        rules,
    } = ctx;
    let conversation = prepared.key.id.as_str();
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
        "/fork" => match super::acts::fork(prepared, output).await {
            Some(new_id) => {
                run_args.id = Some(new_id);
                Next::Restart
            }
            None => Next::Prompt,
        },
        "/rewind" => {
            super::acts::rewind(prepared, output).await;
            Next::Prompt
        }
        "/compact" => {
            super::acts::compact(prepared, output).await;
            Next::Prompt
        }
        "/tasks" | "/abort" => {
            eprintln!(
                "no task runs now: while a reply's tasks run, the status line lists them, \
                 `/tasks` lists them here and `/abort N` aborts one alone"
            );
            Next::Prompt
        }
        "/thinking" => {
            set_thinking(argument, thinking);
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

/// Shows the thinking level of the next messages, or sets it (`-`: the agent's own again).
fn set_thinking(argument: &str, thinking: &mut Option<ThinkingLevel>) {
    let levels = ThinkingLevel::ALL.map(ThinkingLevel::as_str).join("|");
    if argument.is_empty() {
        let level = thinking.map_or("the agent's own", ThinkingLevel::as_str);
        eprintln!("thinking: {level} (`/thinking {levels}` sets it, `/thinking -` resets it)");
        return;
    }
    if argument == "-" {
        *thinking = None;
        eprintln!("thinking: the agent's own from the next message");
        return;
    }
    match argument.parse::<ThinkingLevel>() {
        Ok(level) => {
            *thinking = Some(level);
            eprintln!("thinking: {level} from the next message");
        }
        Err(_) => eprintln!(
            "error: unknown thinking level {}; one of {levels}, or - for the agent's own",
            crate::terminal::escape_controls(argument)
        ),
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
