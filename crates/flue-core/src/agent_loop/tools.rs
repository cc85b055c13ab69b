//! The tools a turn offers besides the agent's own: `permissions_check`, and `finish` and
//! `give_up` of a structured-result operation.

use std::sync::{Arc, Mutex};

use serde::Deserialize;
use serde_json::{Value, json};

use super::{FINISH_TOOL, GIVE_UP_TOOL, PERMISSIONS_CHECK_TOOL};
use crate::error::Result;
use crate::permission::PermissionSource;
use crate::scope::AgentScope;
use crate::shared::HarnessShared;
use crate::skill;
use crate::tool::{
    LiveTools, Ownership, Permission, ToolContext, ToolDefinition, ToolError, ToolMeta, ToolOrigin,
    ToolSet,
};

/// The tools a call's model is offered, in the order it sees them: the agent's own (built-in,
/// state, memory, command, custom and code tools), its tool sources' current ones (MCP
/// servers), then the call's own, `load_skill` when there are skills, `task` when the model
/// may delegate, and `finish` and `give_up` for a structured result. Each turn offers them
/// through [`turn_tool_set`], which adds `permissions_check`. The loop and the listings
/// ([`listed_tools`]) read this one list.
pub(super) fn offered_tools(
    scope: &AgentScope,
    call: Vec<ToolDefinition>,
    task: Option<ToolDefinition>,
    result: Vec<ToolDefinition>,
) -> Result<LiveTools> {
    // The call's tools and the runtime's come after the agent's and its sources'.
    let mut tools = call;
    if !scope.skills.is_empty() {
        tools.push(skill::load_skill_tool(scope.skills.clone())?);
    }
    tools.extend(task);
    tools.extend(result);
    Ok(LiveTools::new(
        scope.tools.clone(),
        scope.tool_sources.clone(),
        tools,
        &[PERMISSIONS_CHECK_TOOL],
    ))
}

/// The tools a root session's model is offered in a submission, as [`offered_tools`] and
/// [`turn_tool_set`] give them: the agent's `result:` brings `finish` and `give_up`, `task`
/// the tools that follow background tasks. For
/// listings (`Harness::offered_tools`, which passes a `task` tool that does not run when the
/// model may delegate).
pub(crate) fn listed_tools(
    harness: &HarnessShared,
    task: Option<ToolDefinition>,
) -> Result<Vec<ToolDefinition>> {
    let scope = &harness.root_scope;
    let slot = Arc::default();
    let mut result = match &harness.agent.result {
        Some(schema) => result_tools(schema, &slot)?,
        None => Vec::new(),
    };
    if task.is_some() {
        // A submission's root session follows its background tasks with these.
        result.extend(crate::background::background_tools(None)?);
    }
    let mut live = offered_tools(scope, Vec::new(), task, result)?;
    let set = turn_tool_set(live.merged(), &harness.permissions, true)?;
    Ok(set
        .names()
        .iter()
        .filter_map(|name| set.get(name).cloned())
        .collect())
}

/// The tool set of a turn: `tools`, and `permissions_check` when some of them pause.
pub(super) fn turn_tool_set(
    tools: Vec<ToolDefinition>,
    policy: &crate::permission::PermissionPolicy,
    pausable: bool,
) -> Result<ToolSet> {
    let check = permissions_check_tool(&tools, policy, pausable)?;
    ToolSet::assemble(tools.into_iter().chain(check))
}

/// The `permissions_check` tool of a call whose tools include some that wait for a decision
/// (none otherwise, and none in tasks, which cannot pause): a read-only preflight that tells
/// the model which tools will pause for a confirmation or the application before it calls
/// them.
fn permissions_check_tool(
    tools: &[ToolDefinition],
    policy: &crate::permission::PermissionPolicy,
    pausable: bool,
) -> Result<Option<ToolDefinition>> {
    #[derive(Deserialize, schemars::JsonSchema)]
    struct Input {
        /// Tool names to check; omit to list every tool that pauses.
        tools: Option<Vec<String>>,
    }
    let verdicts: Vec<(String, &'static str, String)> = tools
        .iter()
        .map(|tool| {
            if tool.is_external() {
                return (
                    tool.name().to_owned(),
                    "application",
                    "a custom tool: the application runs it and supplies the result".to_owned(),
                );
            }
            let (permission, rule) = policy.decide(tool.name(), tool.meta().permission);
            let why = match rule {
                Some(rule) => format!("rule `{}` from {}", rule.pattern, source_name(rule.source)),
                None => "the tool's own default".to_owned(),
            };
            let verdict = match permission {
                Permission::AlwaysAsk => "confirmation",
                Permission::AlwaysAllow => "runs",
            };
            (tool.name().to_owned(), verdict, why)
        })
        .collect();
    if !pausable || verdicts.iter().all(|(_, verdict, _)| *verdict == "runs") {
        return Ok(None);
    }
    let verdicts = Arc::new(verdicts);
    let tool = ToolDefinition::from_fn(
        PERMISSIONS_CHECK_TOOL,
        "Tell which of your tools pause before running: `confirmation` (a person must allow \
         the call first; the conversation waits) or `application` (the application runs it \
         and answers later). Use it before a call you would rather not leave waiting.",
        move |input: Input, _ctx: ToolContext| {
            let verdicts = Arc::clone(&verdicts);
            async move {
                let listed: Vec<Value> = verdicts
                    .iter()
                    .filter(|(name, verdict, _)| match &input.tools {
                        Some(names) => names.iter().any(|wanted| wanted == name),
                        None => *verdict != "runs",
                    })
                    .map(|(name, verdict, why)| json!({"tool": name, "when_called": verdict, "why": why}))
                    .collect();
                Ok::<_, ToolError>(json!({ "tools": listed }))
            }
        },
    )?;
    Ok(Some(
        tool.with_meta(ToolMeta {
            ownership: Ownership::Managed,
            read_only: true,
            ..ToolMeta::default()
        })
        .with_origin(ToolOrigin::Runtime),
    ))
}

pub(super) fn source_name(source: PermissionSource) -> &'static str {
    match source {
        PermissionSource::Defaults => "the workspace defaults",
        PermissionSource::AgentFile => "the agent file",
        PermissionSource::Code => "the agent's configuration",
    }
}

/// How a structured-result operation ended from the model's side.
pub(super) enum ResultOutcome {
    Finished(Value),
    GaveUp(String),
}

/// The `finish` and `give_up` tools of a structured-result operation.
pub(super) fn result_tools(
    schema: &Value,
    slot: &Arc<Mutex<Option<ResultOutcome>>>,
) -> Result<Vec<ToolDefinition>> {
    let is_object = schema.get("type").and_then(Value::as_str) == Some("object");
    let input_schema = if is_object {
        schema.clone()
    } else {
        json!({"type": "object", "properties": {"result": schema}, "required": ["result"]})
    };
    let meta = ToolMeta {
        ownership: Ownership::Managed,
        read_only: true,
        ..ToolMeta::default()
    };
    let finish_slot = Arc::clone(slot);
    let finish = ToolDefinition::new(
        FINISH_TOOL,
        "Deliver the final result of this task. Call it exactly once, when you are done, with \
         input that matches the schema; the conversation ends when it is accepted.",
        input_schema,
        Arc::new(SlotTool {
            fill: move |input: Value| {
                let data = if is_object {
                    input
                } else {
                    input.get("result").cloned().unwrap_or(Value::Null)
                };
                ResultOutcome::Finished(data)
            },
            slot: finish_slot,
            reply: "Result accepted.",
        }),
    )?
    .with_meta(meta)
    .with_origin(ToolOrigin::Result);
    let give_up = ToolDefinition::new(
        GIVE_UP_TOOL,
        "Call this only if you cannot produce the requested result; explain why in `reason`.",
        json!({"type": "object", "properties": {"reason": {"type": "string"}}, "required": ["reason"]}),
        Arc::new(SlotTool {
            fill: |input: Value| {
                #[derive(Deserialize)]
                struct GiveUp {
                    reason: String,
                }
                let reason = serde_json::from_value::<GiveUp>(input)
                    .map_or_else(|_| "no reason given".to_owned(), |give_up| give_up.reason);
                ResultOutcome::GaveUp(reason)
            },
            slot: Arc::clone(slot),
            reply: "Understood.",
        }),
    )?
    .with_meta(meta)
    .with_origin(ToolOrigin::Result);
    Ok(vec![finish, give_up])
}

/// A tool that stores its (validated) input into the operation's result slot.
struct SlotTool<F> {
    fill: F,
    slot: Arc<Mutex<Option<ResultOutcome>>>,
    reply: &'static str,
}

impl<F> crate::tool::Tool for SlotTool<F>
where
    F: Fn(Value) -> ResultOutcome + Send + Sync,
{
    fn run<'a>(
        &'a self,
        input: Value,
        _ctx: &'a ToolContext,
    ) -> crate::util::BoxFuture<'a, std::result::Result<Value, ToolError>> {
        Box::pin(async move {
            let outcome = (self.fill)(input);
            let mut slot = self.slot.lock().map_err(|_| {
                ToolError::new("internal", "the result slot is unavailable; try again")
            })?;
            slot.get_or_insert(outcome);
            Ok(Value::String(self.reply.to_owned()))
        })
    }
}
