//! Tool call ids a provider repeats or leaves empty: every call still runs once and gets
//! exactly one result under an id of its own, and the next request pairs them correctly.

use std::collections::BTreeMap;
use std::sync::Arc;

use flue_core::{
    AgentConfig, Harness, LocalSandbox, MemoryStore, PromptOptions, ProviderRegistry, Record,
    ScriptedProvider, ToolDefinition,
};
use pretty_assertions::assert_eq;
use serde_json::json;

/// A tool that echoes its `text` input.
fn echo_tool() -> ToolDefinition {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Input {
        text: String,
    }
    ToolDefinition::from_fn("echo", "Echoes text.", |input: Input, _ctx| async move {
        Ok(json!(format!("echo: {}", input.text)))
    })
    .unwrap()
}

/// Each call of the log (id, its input text) and each result (id, content), in order.
type Pairs = (Vec<(String, String)>, Vec<(String, String)>);

fn calls_and_results(records: &[Record]) -> Pairs {
    let mut calls = Vec::new();
    let mut results = Vec::new();
    for record in records {
        match record {
            Record::Assistant(message) => calls.extend(message.tool_calls().map(|call| {
                (
                    call.id.clone(),
                    call.input["text"].as_str().unwrap_or_default().to_owned(),
                )
            })),
            Record::ToolResult(result) => {
                results.push((result.call_id.clone(), result.content.clone()));
            }
            _ => {}
        }
    }
    (calls, results)
}

/// Every call id is unique and answered by exactly one result.
pub fn assert_one_result_per_call(records: &[Record]) {
    let (calls, results) = calls_and_results(records);
    let mut answers: BTreeMap<&str, usize> = calls.iter().map(|(id, _)| (id.as_str(), 0)).collect();
    assert_eq!(answers.len(), calls.len(), "repeated call ids: {calls:?}");
    for (id, _) in &results {
        *answers
            .get_mut(id.as_str())
            .unwrap_or_else(|| panic!("result {id} answers no call")) += 1;
    }
    assert!(answers.values().all(|n| *n == 1), "{answers:?}");
}

#[tokio::test]
async fn repeated_and_empty_ids_from_a_scripted_provider_are_made_unique() {
    let dir = tempfile::tempdir().unwrap();
    let calls = |texts: &[(&str, &str)]| {
        texts
            .iter()
            .map(|(id, text)| json!({"name": "echo", "id": id, "input": {"text": text}}))
            .collect::<Vec<_>>()
    };
    let script = json!({"rules": [
        {"when": {"tool_result": "echo"}, "reply": {"text": "done"}},
        {"when": {"user_contains": "again"}, "reply": {"tool_calls": calls(&[("dup", "four"), ("dup", "five")])}},
        {"reply": {"tool_calls": calls(&[("dup", "one"), ("dup", "two"), ("", "three")])}}
    ]});
    std::fs::write(dir.path().join("script.json"), script.to_string()).unwrap();
    let harness = Harness::builder(
        AgentConfig::new()
            .with_model("scripted/script.json")
            .with_tool(echo_tool()),
    )
    .with_store(Arc::new(MemoryStore::new()))
    .with_providers(
        ProviderRegistry::new().with_provider(Arc::new(ScriptedProvider::new(dir.path()))),
    )
    .with_sandbox(Arc::new(LocalSandbox::new(dir.path()).unwrap()))
    .with_workspace_context(None)
    .build()
    .await
    .unwrap();
    let session = harness.session("default").await.unwrap();
    let first = session
        .prompt("go", PromptOptions::default())
        .await
        .unwrap();
    assert_eq!(first.text, "done");
    let second = session
        .prompt("again", PromptOptions::default())
        .await
        .unwrap();
    assert_eq!(second.text, "done");

    let records = session.records().await;
    assert_one_result_per_call(&records);
    let echo = |id: &str, text: &str| (id.to_owned(), format!("echo: {text}"));
    let (calls, results) = calls_and_results(&records);
    assert_eq!(
        calls,
        [
            ("dup", "one"),
            ("dup_2", "two"),
            ("call_1", "three"),
            ("dup_3", "four"),
            ("dup_4", "five")
        ]
        .map(|(id, text)| (id.to_owned(), text.to_owned()))
    );
    // Each call ran once, with its own input, and its result carries its new id.
    assert_eq!(
        results,
        [
            echo("dup", "one"),
            echo("dup_2", "two"),
            echo("call_1", "three"),
            echo("dup_3", "four"),
            echo("dup_4", "five")
        ]
    );
}
