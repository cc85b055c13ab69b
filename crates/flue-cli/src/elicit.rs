//! Answering MCP servers' requests in `flue run`. Elicitation: `--yes` accepts the schema's
//! defaults, a terminal asks the person field by field, and a headless run declines with a
//! notice saying how to answer instead. Sampling under `always_ask`: `--yes` approves, a
//! terminal asks y/n, and a headless run refuses with the reason. On a terminal the lines come
//! from the command's one stdin reader ([`crate::input`]); the end of input cancels a question
//! (refuses a sampling request), and so does Ctrl-C or SIGTERM aborting the work it belongs to.

use std::io::IsTerminal;
use std::sync::Arc;

use flue_core::BoxFuture;
use flue_host::{
    AcceptDefaults, ElicitationAnswer, ElicitationRequest, McpElicitor, McpSamplingApprover,
    SamplingRequest, field_options, field_value,
};
use serde_json::{Map, Value};

use crate::input::{self, Reply};
use crate::terminal::escape_controls;

/// One question on the terminal at a time (elicitations and sampling approvals).
static PROMPT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The elicitor for this run: `--yes`, a terminal prompt, or a headless decline.
pub(crate) fn elicitor(yes: bool) -> Arc<dyn McpElicitor> {
    if yes {
        return Arc::new(Noticed(AcceptDefaults));
    }
    if std::io::stdin().is_terminal() && std::io::stderr().is_terminal() {
        return Arc::new(Terminal);
    }
    Arc::new(Headless)
}

/// The approver of sampling requests under `always_ask` for this run: `--yes`, a terminal
/// prompt, or a headless refusal.
pub(crate) fn sampling_approver(yes: bool) -> Arc<dyn McpSamplingApprover> {
    if yes {
        return Arc::new(Noticed(AcceptDefaults));
    }
    if std::io::stdin().is_terminal() && std::io::stderr().is_terminal() {
        return Arc::new(Terminal);
    }
    Arc::new(Headless)
}

/// `--yes`: the defaults, with a line on stderr saying what was sent.
struct Noticed(AcceptDefaults);

/// No person to ask: decline, and say how to answer next time.
struct Headless;

/// Ask the person at the terminal; one question at a time.
struct Terminal;

impl McpSamplingApprover for Noticed {
    fn approve<'a>(&'a self, request: &'a SamplingRequest) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            eprintln!(
                "mcp server `{}` asked the agent's model for a completion; approved (--yes)",
                request.server
            );
            Ok(())
        })
    }
}

impl McpSamplingApprover for Headless {
    fn approve<'a>(&'a self, request: &'a SamplingRequest) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let reason = format!(
                "sampling by mcp server `{}` needs approval (`mcp__{}__sampling` is always_ask) \
                 and there is no terminal to ask on; run `flue run` on a terminal, or pass --yes",
                request.server, request.server
            );
            eprintln!("{reason}");
            Err(reason)
        })
    }
}

impl McpSamplingApprover for Terminal {
    fn approve<'a>(&'a self, request: &'a SamplingRequest) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let _one_at_a_time = PROMPT.lock().await;
            if ask_sampling(request).await {
                Ok(())
            } else {
                Err("the person refused the sampling request".to_owned())
            }
        })
    }
}

impl McpElicitor for Noticed {
    fn elicit<'a>(&'a self, request: &'a ElicitationRequest) -> BoxFuture<'a, ElicitationAnswer> {
        Box::pin(async move {
            let answer = self.0.elicit(request).await;
            match &answer {
                ElicitationAnswer::Accept(values) => eprintln!(
                    "mcp server `{}` asked: {}; accepted with defaults (--yes): {}",
                    request.server,
                    escape_controls(&request.message),
                    Value::Object(values.clone())
                ),
                ElicitationAnswer::Decline { reason } => eprintln!(
                    "mcp server `{}` asked: {}; declined: {reason}",
                    request.server,
                    escape_controls(&request.message)
                ),
                _ => {}
            }
            answer
        })
    }
}

impl McpElicitor for Headless {
    fn elicit<'a>(&'a self, request: &'a ElicitationRequest) -> BoxFuture<'a, ElicitationAnswer> {
        Box::pin(async move {
            let reason = "no terminal to ask a person on; run `flue run` on a terminal to answer, \
                          or pass --yes to accept the defaults"
                .to_owned();
            eprintln!(
                "mcp server `{}` asked: {}; declined: {reason}",
                request.server,
                escape_controls(&request.message)
            );
            ElicitationAnswer::Decline { reason }
        })
    }
}

impl McpElicitor for Terminal {
    fn elicit<'a>(&'a self, request: &'a ElicitationRequest) -> BoxFuture<'a, ElicitationAnswer> {
        Box::pin(async move {
            let _one_at_a_time = PROMPT.lock().await;
            ask(request).await
        })
    }
}

/// The prompt: the message, each field (Enter keeps the default), then accept, decline or
/// cancel.
async fn ask(request: &ElicitationRequest) -> ElicitationAnswer {
    eprintln!(
        "\nmcp server `{}` asks: {}",
        request.server,
        escape_controls(&request.message)
    );
    let required = request.required();
    let mut values = Map::new();
    for (name, schema) in request.fields() {
        let default = schema
            .get("default")
            .and_then(|default| field_value(schema, default));
        // The server wrote these: shown with control characters escaped.
        let label = escape_controls(schema.get("title").and_then(Value::as_str).unwrap_or(name));
        let mut prompt = format!("  {label}");
        if let Some(description) = schema.get("description").and_then(Value::as_str) {
            prompt.push_str(&format!(" ({})", escape_controls(description)));
        }
        let options = field_options(schema);
        if !options.is_empty() {
            prompt.push_str(&format!(" [{}]", options.join("/")));
        }
        if let Some(default) = &default {
            prompt.push_str(&format!(" default {default}"));
        }
        loop {
            let Reply::Line(line) = input::ask(&format!("{prompt}: ")).await else {
                return cancelled();
            };
            let line = line.trim();
            if line.is_empty() {
                if let Some(default) = &default {
                    values.insert(name.to_owned(), default.clone());
                } else if required.contains(&name) {
                    eprintln!("  this field is required");
                    continue;
                }
                break;
            }
            match field_value(schema, &Value::String(line.to_owned())) {
                Some(value) => {
                    values.insert(name.to_owned(), value);
                    break;
                }
                None => eprintln!("  not a valid value for this field, try again"),
            }
        }
    }
    loop {
        let Reply::Line(line) = input::ask("send this? [a]ccept, [d]ecline, [c]ancel: ").await
        else {
            return cancelled();
        };
        match line.trim() {
            "a" | "accept" | "y" | "yes" => return ElicitationAnswer::Accept(values),
            "d" | "decline" | "n" | "no" => {
                return ElicitationAnswer::Decline {
                    reason: "the person declined".to_owned(),
                };
            }
            "c" | "cancel" => return ElicitationAnswer::Cancel,
            _ => {}
        }
    }
}

/// The answer when input ended or the question was withdrawn: cancel, on a line of its own.
fn cancelled() -> ElicitationAnswer {
    eprintln!();
    ElicitationAnswer::Cancel
}

/// The sampling prompt: what the server sends to the model, then allow? [y/N].
async fn ask_sampling(request: &SamplingRequest) -> bool {
    let mut question = format!(
        "\nmcp server `{}` asks the agent's model for a completion (at most {} tokens):\n",
        request.server, request.max_tokens
    );
    if let Some(system) = &request.system_prompt {
        question.push_str(&format!("  system: {}\n", escape_controls(system)));
    }
    for (is_user, text) in &request.messages {
        let role = if *is_user { "user" } else { "assistant" };
        question.push_str(&format!("  {role}: {}\n", escape_controls(text)));
    }
    question.push_str("allow? [y/N]: ");
    match input::ask(&question).await {
        Reply::Line(line) => matches!(line.trim(), "y" | "yes"),
        Reply::End | Reply::Cancelled => {
            eprintln!();
            false
        }
    }
}
