//! Seeing what an agent sees: `flue tools` and `flue run --dry-run`, and the `--arg`s of
//! `flue run --skill`.
//!
//! `tools` and `--dry-run` open the agent's harness exactly as a run does (sandbox, MCP servers,
//! skills, roles, overrides) on a throwaway in-memory store, read what it assembled (the tools
//! with their input schemas, the system prompt, the model) and close it again: no model is
//! called and nothing is stored. (`--skill` runs as a message option of the durable run, see
//! `run.rs`.)

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::bail;
use flue_build::SandboxKind;
use flue_core::model::ToolSchema;
use flue_host::{AgentSet, HarnessOptions, StoreChoice};
use serde_json::{Value, json};

use crate::Exit;
use crate::args::{RunArgs, ToolsArgs};
use crate::setup::{load, read_stdin_message};
use crate::stdout::{out, outln};
use crate::terminal::Output;

/// What a harness assembled for an agent.
struct Assembled {
    agent: String,
    model: Option<String>,
    sandbox: SandboxKind,
    system_prompt: String,
    /// The tools the model is offered, each with the name of its origin.
    tools: Vec<(ToolSchema, &'static str)>,
}

/// Runs `flue tools`.
pub(crate) async fn list(args: ToolsArgs) -> anyhow::Result<Exit> {
    let run_args = RunArgs {
        agent: args.agent.clone(),
        root: args.root.clone(),
        env_file: args.env_file.clone(),
        bundle: args.bundle.clone(),
        ..RunArgs::default()
    };
    let (agents, agent) = load(&run_args)?;
    let output = Output::new(flue_core::Redactor::new(agents.env().secrets()).unwrap_or_default());
    let assembled = assemble(&agents, &agent, &run_args).await?;
    if args.json {
        let tools: Vec<Value> = assembled
            .tools
            .iter()
            .map(|(tool, origin)| tool_json(tool, origin))
            .collect();
        let out = json!({"agent": assembled.agent, "tools": tools});
        outln!("{}", output.json_pretty(&out)?)?;
        return Ok(Exit::Success);
    }
    let mut text = String::new();
    for (tool, origin) in &assembled.tools {
        write_tool(&mut text, tool, origin);
    }
    out!("{}", output.stdout_text(&text))?;
    eprintln!(
        "{} tool(s); built-in tools are described in docs/file-tools.md",
        assembled.tools.len()
    );
    Ok(Exit::Success)
}

/// Runs `flue run --dry-run`: prints what the model would get and stops.
pub(crate) async fn dry_run(args: &RunArgs) -> anyhow::Result<Exit> {
    let (agents, agent) = load(args)?;
    crate::setup::check_model(&agents, &agent, args)?;
    let output = Output::new(flue_core::Redactor::new(agents.env().secrets()).unwrap_or_default());
    let assembled = assemble(&agents, &agent, args).await?;
    if args.json {
        let tools: Vec<Value> = assembled
            .tools
            .iter()
            .map(|(tool, origin)| tool_json(tool, origin))
            .collect();
        let out = json!({
            "agent": assembled.agent,
            "model": assembled.model,
            "sandbox": assembled.sandbox.as_str(),
            "systemPrompt": assembled.system_prompt,
            "tools": tools,
            "message": args.message,
            "skill": args.skill,
        });
        outln!("{}", output.json_line(&out)?)?;
        return Ok(Exit::Success);
    }
    let mut text = String::new();
    let _ = writeln!(text, "agent: {}", assembled.agent);
    let _ = writeln!(
        text,
        "model: {}",
        assembled.model.as_deref().unwrap_or("(none)")
    );
    let _ = writeln!(text, "sandbox: {}", assembled.sandbox.as_str());
    let names: Vec<&str> = assembled
        .tools
        .iter()
        .map(|(tool, _)| tool.name.as_str())
        .collect();
    let _ = writeln!(
        text,
        "tools: {} (inputs: flue tools {})",
        names.join(", "),
        args.agent
    );
    if let Some(skill) = &args.skill {
        let _ = writeln!(text, "skill: {skill}");
    }
    if let Some(message) = &args.message {
        let _ = writeln!(text, "message: {message}");
    }
    let _ = writeln!(text, "--- system prompt ---");
    text.push_str(assembled.system_prompt.trim_end());
    text.push('\n');
    out!("{}", output.stdout_text(&text))?;
    eprintln!("dry run: no model was called and nothing was stored");
    Ok(Exit::Success)
}

/// Opens `agent`'s harness on a throwaway store, reads what it assembled and closes it.
async fn assemble(agents: &AgentSet, agent: &str, args: &RunArgs) -> anyhow::Result<Assembled> {
    agents.agent(agent)?;
    let options = harness_options(args);
    let throwaway = StoreChoice::Memory.open(agents).await?;
    let opened = agents
        .open_preview(agent, "dry-run", throwaway.store, &options)
        .await;
    let opened = match opened {
        Ok(opened) => opened,
        Err(err) => {
            agents.close().await;
            return Err(err.into());
        }
    };
    for warning in opened.warnings() {
        eprintln!("warning: {}", crate::terminal::escape_controls(warning));
    }
    let harness = opened.harness();
    // The prompt of the call the run would make: its role and skill included.
    let offered = harness.offered_tools().map(|tools| {
        tools
            .iter()
            .map(|tool| (tool.schema(), tool.origin().name()))
            .collect()
    });
    let assembled = offered.and_then(|tools| {
        Ok(Assembled {
            agent: agent.to_owned(),
            model: harness.agent().model.clone(),
            sandbox: sandbox_kind(agents, agent, args.sandbox),
            system_prompt: harness.call_system_prompt(None, args.skill.as_deref())?,
            tools,
        })
    });
    for warning in opened.close().await {
        eprintln!("warning: {}", crate::terminal::escape_controls(&warning));
    }
    agents.close().await;
    Ok(assembled?)
}

/// `--arg KEY=VALUE`s: a VALUE that parses as JSON is that value, anything else a string.
pub(crate) fn parse_skill_args(raw: &[String]) -> anyhow::Result<BTreeMap<String, Value>> {
    let mut out = BTreeMap::new();
    for arg in raw {
        let Some((key, value)) = arg.split_once('=') else {
            bail!("--arg {arg:?} is not KEY=VALUE (e.g. --arg file=src/login.py)");
        };
        if key.trim().is_empty() {
            bail!("--arg {arg:?} has an empty KEY");
        }
        let value = if value == "-" {
            Value::String(read_stdin_message()?)
        } else {
            serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_owned()))
        };
        out.insert(key.trim().to_owned(), value);
    }
    Ok(out)
}

fn harness_options(args: &RunArgs) -> HarnessOptions {
    let mut options = HarnessOptions::new();
    if let Some(model) = &args.model {
        options = options.with_model(model);
    }
    if let Some(kind) = args.sandbox {
        options = options.with_sandbox(kind);
    }
    if let Some(role) = &args.role {
        options = options.with_role(role);
    }
    options
        .with_mcp_elicitor(crate::elicit::elicitor(args.yes))
        .with_mcp_sampling_approver(crate::elicit::sampling_approver(args.yes))
}

/// The sandbox kind the agent runs in: `--sandbox`, else the agent's, else flue.toml's.
pub(crate) fn sandbox_kind(
    agents: &AgentSet,
    agent: &str,
    explicit: Option<SandboxKind>,
) -> SandboxKind {
    let workspace = agents.workspace();
    explicit
        .or_else(|| workspace.agents.get(agent).and_then(|file| file.sandbox))
        .or_else(|| {
            workspace
                .config
                .sandbox
                .as_ref()
                .map(|settings| settings.kind)
        })
        .unwrap_or_default()
}

/// A tool as JSON: its name, its origin (`ToolOrigin::name`), description and input schema.
fn tool_json(tool: &ToolSchema, origin: &str) -> Value {
    json!({
        "name": tool.name,
        "origin": origin,
        "description": tool.description,
        "inputSchema": tool.input_schema,
    })
}

/// A tool as text: its name and origin, its description, then one line per input property.
fn write_tool(out: &mut String, tool: &ToolSchema, origin: &str) {
    let _ = writeln!(out, "{} ({origin})", tool.name);
    for line in tool.description.lines() {
        let _ = writeln!(out, "    {line}");
    }
    let required: Vec<&str> = tool.input_schema["required"]
        .as_array()
        .map(|list| list.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let properties = tool.input_schema["properties"].as_object();
    match properties {
        Some(properties) if !properties.is_empty() => {
            let _ = writeln!(out, "  input:");
            for (name, schema) in properties {
                let kind = schema_type(schema);
                let needed = if required.contains(&name.as_str()) {
                    "required"
                } else {
                    "optional"
                };
                let description = schema["description"]
                    .as_str()
                    .map(|text| {
                        format!(
                            ": {}",
                            text.split_whitespace().collect::<Vec<_>>().join(" ")
                        )
                    })
                    .unwrap_or_default();
                let _ = writeln!(out, "    {name} ({kind}, {needed}){description}");
            }
        }
        _ => {
            let _ = writeln!(out, "  input: none");
        }
    }
    out.push('\n');
}

/// A property's JSON Schema type, short (`string`, `integer or null`, `array of string`).
fn schema_type(schema: &Value) -> String {
    match &schema["type"] {
        Value::String(kind) if kind == "array" => match schema["items"]["type"].as_str() {
            Some(item) => format!("array of {item}"),
            None => "array".to_owned(),
        },
        Value::String(kind) => kind.clone(),
        Value::Array(kinds) => kinds
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" or "),
        _ if schema.get("enum").is_some() => "one of the listed values".to_owned(),
        _ => "any".to_owned(),
    }
}

#[cfg(test)]
mod tests;
