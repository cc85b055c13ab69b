//! `ToolContext::emit_data` and the logger: data streams as events, is stored with the call's
//! tool result (redacted), and never reaches the model's text; bad data is a tool error.

use std::sync::Arc;

use flue_core::{
    AgentConfig, Event, EventStream, PromptOptions, Record, ToolDefinition, ToolError,
    VirtualSandbox, record::EmittedData,
};
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::rules::{Reply, RuleProvider, fixture};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Input {}

fn reporter() -> ToolDefinition {
    ToolDefinition::from_fn("report", "Reports.", |_input: Input, ctx| async move {
        ctx.logger().info("building the report");
        ctx.emit_data_with_id("progress", &json!({"done": 1, "of": 2}), "p1")?;
        ctx.emit_data(
            "chart",
            &json!({"points": [1, 2], "token": "sk-secret-value-123"}),
        )?;
        Ok::<_, ToolError>(json!("report ready"))
    })
    .unwrap()
}

async fn drain(mut events: EventStream) -> Vec<Event> {
    let mut all = Vec::new();
    while let Some(event) = events.recv().await {
        all.push(event);
    }
    all
}

#[tokio::test]
async fn emitted_data_is_streamed_stored_and_kept_from_the_model() {
    let provider = RuleProvider::new(|seen| match seen.last_tool_result() {
        None => Reply::Calls(vec![("report", json!({}))]),
        Some(result) => Reply::Text(format!("model saw: {}", result.content)),
    });
    let f = fixture(
        AgentConfig::new()
            .with_model("test/m")
            .with_tool(reporter()),
        provider,
        |builder| builder.with_secrets(["sk-secret-value-123".to_owned()]),
    )
    .await;
    let session = f.harness.session("default").await.unwrap();
    let mut handle = session.prompt("go", PromptOptions::default());
    let events = handle.take_events().unwrap();
    let reply = handle.await.unwrap();
    let events = drain(events).await;
    assert_eq!(reply.text, "model saw: report ready");

    let call_id = events
        .iter()
        .find_map(|event| match event {
            Event::ToolStart { call_id, .. } => Some(call_id.clone()),
            _ => None,
        })
        .unwrap();
    let data_events: Vec<&Event> = events
        .iter()
        .filter(|event| matches!(event, Event::Data { .. }))
        .collect();
    assert_eq!(
        data_events,
        [
            &Event::Data {
                call_id: call_id.clone(),
                name: "progress".into(),
                data: json!({"done": 1, "of": 2}),
                id: Some("p1".into()),
            },
            &Event::Data {
                call_id,
                name: "chart".into(),
                data: json!({"points": [1, 2], "token": "[redacted]"}),
                id: None,
            },
        ]
    );
    let stored = f.records("default").await;
    let Some(Record::ToolResult(result)) = stored
        .iter()
        .find(|record| matches!(record, Record::ToolResult(_)))
    else {
        panic!("{stored:?}");
    };
    assert_eq!(result.content, "report ready");
    assert_eq!(
        result.data,
        [
            EmittedData {
                name: "progress".into(),
                data: json!({"done": 1, "of": 2}),
                id: Some("p1".into()),
            },
            EmittedData {
                name: "chart".into(),
                data: json!({"points": [1, 2], "token": "[redacted]"}),
                id: None,
            },
        ]
    );
}

#[tokio::test]
async fn a_bad_data_name_is_a_tool_error_and_outside_a_session_data_goes_nowhere() {
    let ctx = flue_core::ToolContext::new(Arc::new(VirtualSandbox::new()));
    assert_eq!(ctx.emit_data("fine", &json!(1)), Ok(()));
    for bad in ["", "has space", "ü", &"x".repeat(65)] {
        let err = ctx.emit_data(bad, &json!(1)).unwrap_err();
        assert_eq!(err.kind, "invalid_data", "{bad:?}");
    }
    let not_json = std::collections::HashMap::from([((1, 2), 3)]);
    assert_eq!(
        ctx.emit_data("map", &not_json).unwrap_err().kind,
        "invalid_data"
    );
}
