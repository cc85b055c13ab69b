//! Custom tools with an output schema: a matching result reaches the model, a result that does
//! not match becomes an `invalid_output` tool error the model sees, never a crash.

use std::sync::Arc;

use flue_core::{AgentConfig, LocalSandbox, PromptOptions, ToolContext, ToolDefinition, ToolError};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::rules::{Reply, RuleProvider, fixture};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Input {
    /// What the tool returns.
    value: Value,
}

/// A tool returning its input's `value`, declared to return `{count: integer >= 0}`.
fn counter() -> ToolDefinition {
    ToolDefinition::from_fn("count", "Counts.", |input: Input, _ctx| async move {
        Ok::<_, ToolError>(input.value)
    })
    .unwrap()
    .with_output_schema(json!({
        "type": "object",
        "properties": {"count": {"type": "integer", "minimum": 0}},
        "required": ["count"],
        "additionalProperties": false,
    }))
    .unwrap()
}

#[tokio::test]
async fn results_are_checked_against_the_output_schema() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = ToolContext::new(Arc::new(LocalSandbox::new(dir.path()).unwrap()));
    let tool = counter();
    assert_eq!(
        tool.call(json!({"value": {"count": 3}}), &ctx).await,
        Ok(json!({"count": 3}))
    );
    for bad in [
        json!({"count": -1}),
        json!({"total": 3}),
        json!("three"),
        json!(null),
    ] {
        let err = tool.call(json!({"value": bad}), &ctx).await.unwrap_err();
        assert_eq!(err.kind, "invalid_output", "{bad}");
        assert!(
            err.message.starts_with("count returned invalid output: "),
            "{err:?}"
        );
    }
}

#[test]
fn an_output_schema_that_does_not_compile_is_an_invalid_tool() {
    let tool = ToolDefinition::from_fn("t", "T.", |input: Input, _ctx| async move {
        Ok::<_, ToolError>(input.value)
    })
    .unwrap();
    let err = tool
        .with_output_schema(json!({"type": "no-such-type"}))
        .unwrap_err();
    assert_eq!(err.kind(), "invalid_tool");
}

#[tokio::test]
async fn the_model_sees_an_invalid_output_as_a_tool_error_and_goes_on() {
    let provider = RuleProvider::new(|seen| match seen.last_tool_result() {
        None => Reply::Calls(vec![("count", json!({"value": {"count": "many"}}))]),
        Some(result) => Reply::Text(format!(
            "error={} kind={:?}",
            result.is_error, result.error_kind
        )),
    });
    let f = fixture(
        AgentConfig::new().with_model("test/m").with_tool(counter()),
        provider,
        |builder| builder,
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let reply = session
        .prompt("count", PromptOptions::default())
        .await
        .unwrap();
    assert_eq!(reply.text, "error=true kind=Some(\"invalid_output\")");
}
