//! Answering MCP servers' requests for input (elicitation) in `flue run`: `--yes` accepts the
//! schema's defaults, a terminal asks the person field by field, and a headless run declines
//! with a notice saying how to answer instead.

use std::io::{BufRead, IsTerminal, Write};
use std::sync::{Arc, Mutex, PoisonError};

use flue_core::BoxFuture;
use flue_host::{
    AcceptDefaults, ElicitationAnswer, ElicitationRequest, McpElicitor, field_options, field_value,
};
use serde_json::{Map, Value};

/// The elicitor for this run: `--yes`, a terminal prompt, or a headless decline.
pub(crate) fn elicitor(yes: bool) -> Arc<dyn McpElicitor> {
    if yes {
        return Arc::new(Noticed(AcceptDefaults));
    }
    if std::io::stdin().is_terminal() && std::io::stderr().is_terminal() {
        return Arc::new(Terminal {
            lock: Arc::new(Mutex::new(())),
        });
    }
    Arc::new(Headless)
}

/// `--yes`: the defaults, with a line on stderr saying what was sent.
struct Noticed(AcceptDefaults);

/// No person to ask: decline, and say how to answer next time.
struct Headless;

/// Ask the person at the terminal; one question at a time.
struct Terminal {
    lock: Arc<Mutex<()>>,
}

impl McpElicitor for Noticed {
    fn elicit<'a>(&'a self, request: &'a ElicitationRequest) -> BoxFuture<'a, ElicitationAnswer> {
        Box::pin(async move {
            let answer = self.0.elicit(request).await;
            match &answer {
                ElicitationAnswer::Accept(values) => eprintln!(
                    "mcp server `{}` asked: {}; accepted with defaults (--yes): {}",
                    request.server,
                    request.message,
                    Value::Object(values.clone())
                ),
                ElicitationAnswer::Decline { reason } => eprintln!(
                    "mcp server `{}` asked: {}; declined: {reason}",
                    request.server, request.message
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
                request.server, request.message
            );
            ElicitationAnswer::Decline { reason }
        })
    }
}

impl McpElicitor for Terminal {
    fn elicit<'a>(&'a self, request: &'a ElicitationRequest) -> BoxFuture<'a, ElicitationAnswer> {
        let request = request.clone();
        let lock = Arc::clone(&self.lock);
        Box::pin(async move {
            let asked = tokio::task::spawn_blocking(move || {
                let _one_at_a_time = lock.lock().unwrap_or_else(PoisonError::into_inner);
                ask(&request)
            })
            .await;
            match asked {
                Ok(Ok(answer)) => answer,
                Ok(Err(err)) => ElicitationAnswer::Decline {
                    reason: format!("cannot ask on the terminal: {err}"),
                },
                Err(err) => ElicitationAnswer::Decline {
                    reason: format!("cannot ask on the terminal: {err}"),
                },
            }
        })
    }
}

/// The prompt: the message, each field (Enter keeps the default), then accept, decline or
/// cancel.
fn ask(request: &ElicitationRequest) -> std::io::Result<ElicitationAnswer> {
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut err = std::io::stderr().lock();
    writeln!(
        err,
        "\nmcp server `{}` asks: {}",
        request.server, request.message
    )?;
    let required = request.required();
    let mut values = Map::new();
    for (name, schema) in request.fields() {
        let default = schema
            .get("default")
            .and_then(|default| field_value(schema, default));
        let label = schema.get("title").and_then(Value::as_str).unwrap_or(name);
        let mut prompt = format!("  {label}");
        if let Some(description) = schema.get("description").and_then(Value::as_str) {
            prompt.push_str(&format!(" ({description})"));
        }
        let options = field_options(schema);
        if !options.is_empty() {
            prompt.push_str(&format!(" [{}]", options.join("/")));
        }
        if let Some(default) = &default {
            prompt.push_str(&format!(" default {default}"));
        }
        loop {
            write!(err, "{prompt}: ")?;
            err.flush()?;
            let mut line = String::new();
            if input.read_line(&mut line)? == 0 {
                return Ok(ElicitationAnswer::Cancel);
            }
            let line = line.trim();
            if line.is_empty() {
                if let Some(default) = &default {
                    values.insert(name.to_owned(), default.clone());
                } else if required.contains(&name) {
                    writeln!(err, "  this field is required")?;
                    continue;
                }
                break;
            }
            match field_value(schema, &Value::String(line.to_owned())) {
                Some(value) => {
                    values.insert(name.to_owned(), value);
                    break;
                }
                None => writeln!(err, "  not a valid value for this field, try again")?,
            }
        }
    }
    loop {
        write!(err, "send this? [a]ccept, [d]ecline, [c]ancel: ")?;
        err.flush()?;
        let mut line = String::new();
        if input.read_line(&mut line)? == 0 {
            return Ok(ElicitationAnswer::Cancel);
        }
        match line.trim() {
            "a" | "accept" | "y" | "yes" => return Ok(ElicitationAnswer::Accept(values)),
            "d" | "decline" | "n" | "no" => {
                return Ok(ElicitationAnswer::Decline {
                    reason: "the person declined".to_owned(),
                });
            }
            "c" | "cancel" => return Ok(ElicitationAnswer::Cancel),
            _ => {}
        }
    }
}
